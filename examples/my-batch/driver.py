# my-batch/driver.py
import ray

from ray_ladder import ladder_task, last_rung

ray.init()                      # in a job, RAY_ADDRESS is set: this joins that cluster

@ladder_task("ladder.yaml")     # the job's working directory is my-batch/
def embed(text, *, rung):
    return f"{rung.params['model']}:{text}"

refs = [embed.remote(t) for t in ("a", "b")]
print("answers", ray.get(refs), "rungs", [last_rung(r) for r in refs])
