#!/usr/bin/env bash
# One short run on a real NVIDIA GPU machine (the `device` tool): NVML detection, what
# ray-ladder advertises, and how the example ladders fit the node. Results go to $OUT
# (or ./device-out). Needs no Ray; missing pure-Python packages may come as wheels in .whl/.
set -u
PY=${PY:-python3}
OUT=${OUT:-device-out}; mkdir -p "$OUT"
if [ -z "${NO_WHEELS:-}" ] && ls .whl/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD:${PYTHONPATH:-}
run() { echo "\$ $*"; "$@"; echo "rc=$?"; }
{
  run nvidia-smi -L
  run nvidia-smi --query-gpu=name,uuid,memory.total,mig.mode.current,driver_version,compute_cap --format=csv
  run "$PY" -c "import pynvml, pydantic; print('nvidia-ml-py', pynvml.nvmlSystemGetDriverVersion() if pynvml.nvmlInit() is None else '', 'pydantic', pydantic.VERSION)"
} >"$OUT/nvidia.txt" 2>&1
"$PY" bench/detect_gpu.py >"$OUT/detect.json" 2>"$OUT/detect.stderr"; echo "detect rc=$?"
{
  for fmt in json ray-start table; do run "$PY" -m ray_ladder.cli node-resources --format "$fmt"; done
  run "$PY" -m ray_ladder.cli node-resources --format json --site onprem-fra --label ladder.jurisdiction=eu
  for l in examples/ladders/*.yaml; do run "$PY" -m ray_ladder.cli node-resources --format table --ladder "$l"; done
} >"$OUT/cli.txt" 2>&1
# Detection speed over repeated calls (a worker start command runs it once per node).
"$PY" - >"$OUT/timing.json" 2>&1 <<'PY'
import json, statistics, time
from ray_ladder.node.accelerators import detect
ts = []
for _ in range(20):
    t = time.perf_counter(); detect(); ts.append((time.perf_counter() - t) * 1000)
print(json.dumps({"detect_ms_median": round(statistics.median(ts), 2), "detect_ms_max": round(max(ts), 2)}))
PY
cat "$OUT/detect.json" "$OUT/timing.json"; tail -40 "$OUT/cli.txt"; cat "$OUT/nvidia.txt"
