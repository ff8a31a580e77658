"""Write the synthetic sample traces of this folder (deterministic: re-running changes no byte).

Two made-up zones, three rungs each, 28 days at one point every 600 s, in the JSON format
of the public spot traces (``{"metadata": {"gap_seconds": 600}, "data": [0, 1, ...]}``).
Each trace is a two-state Markov chain (:func:`ray_ladder.simulate.markov_trace`) whose
mean up and down periods were chosen so that the obtainable share and the churn are in
the range of the public AWS traces of skypilot-org/spot-traces; no point of those traces
is copied. Run from the repository root::

    python examples/traces/make_samples.py            # rewrites examples/traces/*.json
    python examples/traces/make_samples.py --out DIR  # writes them somewhere else
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ray_ladder.simulate import markov_trace

GAP_S = 600
POINTS = 28 * 24 * 3600 // GAP_S  # 4,032
# file stem -> (mean up, mean down) in points of GAP_S, seed. "big_8": an 8-GPU node of
# the newest accelerator; "older_8": an 8-GPU node one generation older; "small_1": one GPU.
SAMPLES: dict[str, tuple[float, float, int]] = {
    "zone-a_big_8": (7.0, 7.5, 11),
    "zone-a_older_8": (9.5, 19.0, 12),
    "zone-a_small_1": (24.0, 6.5, 13),
    "zone-b_big_8": (4.5, 5.0, 21),
    "zone-b_older_8": (6.5, 9.5, 22),
    "zone-b_small_1": (16.0, 6.5, 23),
}


def sample(up: float, down: float, seed: int) -> list[int]:
    """One trace's points: 1 where the rung is obtainable, 0 where it is not."""
    trace = markov_trace(up * GAP_S, down * GAP_S, POINTS * GAP_S, seed=seed, gap_s=GAP_S)
    return [int(trace.at(i * GAP_S)) for i in range(POINTS)]


def write_samples(out: Path) -> list[Path]:
    """Write every sample trace under ``out``; returns the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for stem, (up, down, seed) in SAMPLES.items():
        doc = {"metadata": {"gap_seconds": GAP_S}, "data": sample(up, down, seed)}
        path = out / f"{stem}.json"
        path.write_text(json.dumps(doc) + "\n", encoding="utf-8")
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent,
                        help="folder to write to (default: this script's folder)")
    for path in write_samples(parser.parse_args(argv).out):
        data = json.loads(path.read_text(encoding="utf-8"))["data"]
        print(f"{path}: {len(data)} points, obtainable {sum(data) / len(data):.3f}")


if __name__ == "__main__":
    main()
