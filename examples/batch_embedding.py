"""Offline batch embedding on a ladder: a large model on h100, a smaller one below, CPU last.

The corpus is the docstrings of Python's standard library (shipped with every Python).
Each rung embeds with its own model variant, named in ``rung.params``: hashed word
n-grams projected to a dense vector, bigger on better rungs. Every chunk records the
rung that embedded it, so chunks embedded on a lower rung can be re-embedded later
("quality debt"). Runs on a local 3-node cluster, no GPU::

    python examples/batch_embedding.py                # full run
    python examples/batch_embedding.py --preempt      # SIGKILL the h100 node mid-run
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import time
from collections import Counter
from typing import Any

import numpy as np
import ray

from ray_ladder import Ladder, ladder_task, last_rung

LADDER = Ladder.from_yaml("""
name: embed
policy: {probe_interval_s: 0.5, pending_timeout_s: 30, promotion_hysteresis: 2}
rungs:
  - name: h100
    resources: {ladder/h100: 1}
    quality: 1.0
    params: {n_features: 262144, ngrams: [1, 2], dim: 256}
  - name: a100
    resources: {ladder/a100: 1}
    quality: 0.9
    params: {n_features: 65536, ngrams: [1, 2], dim: 128}
  - name: cpu
    num_cpus: 1
    quality: 0.6
    params: {n_features: 16384, ngrams: [1, 1], dim: 64}
""")

STDLIB = ("argparse", "asyncio", "collections", "concurrent.futures", "csv", "datetime",
          "decimal", "email", "functools", "http.client", "importlib", "inspect", "io",
          "itertools", "json", "logging", "multiprocessing", "os", "pathlib", "pickle",
          "re", "shutil", "socket", "sqlite3", "ssl", "statistics", "string", "subprocess",
          "tarfile", "tempfile", "textwrap", "threading", "typing", "unittest", "urllib.parse",
          "uuid", "xml.etree.ElementTree", "zipfile")


def load_corpus(min_chars: int = 80) -> list[str]:
    """Docstrings of standard-library modules, classes and functions (deterministic)."""
    seen: set[str] = set()
    docs: list[str] = []

    def add(obj: Any) -> None:
        doc = inspect.getdoc(obj)
        if doc and len(doc) >= min_chars and doc not in seen:
            seen.add(doc)
            docs.append(doc)

    for name in STDLIB:
        module = importlib.import_module(name)
        add(module)
        for _, member in sorted(vars(module).items()):
            if inspect.isclass(member) or inspect.isfunction(member):
                add(member)
                if inspect.isclass(member):
                    for _, method in sorted(vars(member).items()):
                        if inspect.isfunction(method):
                            add(method)
    return docs


_MODELS: dict[tuple[int, tuple[int, int], int], Any] = {}


def load_model(n_features: int, ngrams: tuple[int, int], dim: int) -> Any:
    """The rung's embedding model, built once per worker process.

    A plain dict cache rather than ``functools.lru_cache``: the wrapper pickles by
    reference, which a worker cannot resolve for a script's ``__main__``.
    """
    key = (n_features, ngrams, dim)
    if key not in _MODELS:
        _MODELS[key] = _build_model(n_features, ngrams, dim)
    return _MODELS[key]


def _build_model(n_features: int, ngrams: tuple[int, int], dim: int) -> Any:
    from sklearn.feature_extraction.text import HashingVectorizer
    from sklearn.pipeline import make_pipeline
    from sklearn.random_projection import SparseRandomProjection

    hashing = HashingVectorizer(n_features=n_features, ngram_range=ngrams,
                                alternate_sign=False, norm="l2")
    projection = SparseRandomProjection(n_components=dim, dense_output=True, random_state=0)
    projection.fit(hashing.transform(["fit needs only the number of features"]))
    return make_pipeline(hashing, projection)


@ladder_task(LADDER)
def embed(chunk_id: int, texts: list[str], *, rung) -> dict[str, Any]:
    """Embed one chunk with the model variant of the rung it runs on."""
    p = rung.params
    model = load_model(p["n_features"], tuple(p["ngrams"]), p["dim"])
    vectors = np.asarray(model.transform(texts), dtype=np.float32)
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    return {"chunk": chunk_id, "rung": rung.name, "quality": rung.quality,
            "vectors": vectors}


def run_job(docs: list[str], chunk_size: int = 16, on_progress=None) -> dict[str, Any]:
    """Embed ``docs`` in chunks; return vectors per chunk and a per-rung summary.

    ``on_progress(done, total)`` is called each time a chunk finishes (the demo kills
    and re-adds a node there). None is lost when a node dies under a chunk.
    """
    start = time.monotonic()
    chunks = [docs[i:i + chunk_size] for i in range(0, len(docs), chunk_size)]
    refs = [embed.remote(i, chunk) for i, chunk in enumerate(chunks)]
    pending = list(refs)
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        if on_progress is not None:
            on_progress(len(refs) - len(pending), len(refs))
    results = ray.get(refs)
    assert [r["chunk"] for r in results] == list(range(len(chunks)))
    per_rung = Counter(r["rung"] for r in results)
    debt = [r["chunk"] for r in results if r["quality"] < 1.0]
    return {
        "docs": len(docs),
        "chunks": len(chunks),
        "chunks_per_rung": dict(per_rung),
        "quality_debt_chunks": len(debt),
        "seconds": round(time.monotonic() - start, 2),
        "rung_of_last_chunk": last_rung(refs[-1]),
        "results": results,
    }


def main() -> None:
    from ray_ladder.testing import LocalCluster, wait_until

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preempt", action="store_true",
                        help="SIGKILL the h100 node a quarter of the way in, re-add it at "
                             "the end and re-embed the chunks done on lower rungs")
    parser.add_argument("--chunk-size", type=int, default=16)
    args = parser.parse_args()

    docs = load_corpus()
    nodes = {name: {"num_cpus": 1, "resources": {f"ladder/{name}": 1}}
             for name in ("h100", "a100")}
    with LocalCluster(nodes) as cluster:

        def chaos(done: int, total: int) -> None:
            if args.preempt and done == total // 4:
                cluster.remove_node(cluster.nodes("h100")[0])  # a preemption
            if args.preempt and done == total - 1 and not cluster.nodes("h100"):
                cluster.add_node("h100")  # capacity returns

        report = run_job(docs, args.chunk_size, on_progress=chaos)
        results = report.pop("results")
        # Re-embed the quality debt once the top rung is back: same job, same ladder.
        debt = [r["chunk"] for r in results if r["quality"] < 1.0]
        if debt:
            wait_until(lambda: ray.get(embed.remote(-1, ["probe"]))["rung"] == "h100",
                       timeout_s=60, message="ladder back on h100")
            redo = ray.get([embed.remote(c, docs[c * args.chunk_size:(c + 1) * args.chunk_size])
                            for c in debt])
            report["re_embedded_on"] = dict(Counter(r["rung"] for r in redo))
        moves = [f"{e.from_rung}->{e.to_rung} ({e.reason})" for e in embed.events()
                 if e.kind == "transition" and e.from_rung]
        report["ladder_moves"] = moves
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
