"""Jobs across clusters: ``ray-ladder submit`` places one job on the best cluster rung of a
ladder through Ray's Job Submission API, moves it to the next cluster from its last
checkpoint when its rung or cluster is lost, and climbs it home at a checkpoint.

Inside the job: :func:`job_place`, :func:`get_checkpoint` and :func:`report` (the same
checkpoint hook as ``ray.train``'s). See docs/clusters.md.
"""

from __future__ import annotations

from ray_ladder.jobs.hook import JobPlace, get_checkpoint, job_place, report

__all__ = ["JobPlace", "get_checkpoint", "job_place", "report"]


def __getattr__(name: str) -> object:
    # The runner side loads only where it is used (a job's own workers never need it).
    if name in ("LadderJob", "JobEvent", "run_name", "submission_id"):
        from ray_ladder.jobs import runner

        return getattr(runner, name)
    raise AttributeError(f"module 'ray_ladder.jobs' has no attribute {name!r}")
