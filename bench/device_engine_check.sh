#!/usr/bin/env bash
# The real-engine headline on a GPU (issue 45, item 7): the same tiny models on the CUDA
# build of vLLM, through the same test module and bench as on the CPU build.
#
# Needs a GPU machine with this checkout's environment: `make engine` there installs the
# CUDA `vllm` (nvidia-smi answers) beside Ray. The `device` machines of this workplace
# cannot fetch packages and carry at most 64 MiB, less than vLLM's CUDA wheel and Ray's, so
# there it reports what is missing and stops (docs/llm.md, "Real engines").
# Results go to $OUT (or ./device-out).
set -u
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
OUT=${OUT:-device-out}; mkdir -p "$OUT"
{ nvidia-smi -L; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; } \
  >"$OUT/nvidia.txt" 2>&1
if ! "$PY" -c "import vllm, ray, torch; assert torch.cuda.is_available()" \
    >"$OUT/imports.txt" 2>&1; then
  echo "no CUDA vLLM, Ray or GPU here (make engine installs them where the registries are"
  echo "reachable): $(tail -1 "$OUT/imports.txt")"
  exit 2
fi
"$PY" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)" \
  | tee "$OUT/versions.txt"
"$PY" -m ray_ladder.engines.tiny >"$OUT/models.txt" 2>&1
CI= "$PY" -m pytest -p no:cacheprovider -q --timeout 900 tests/engines \
  >"$OUT/engines-tests.txt" 2>&1; echo "tests rc=$?"
"$PY" bench/engines.py >"$OUT/engines.json" 2>"$OUT/engines.stderr"; echo "bench rc=$?"
tail -3 "$OUT/engines-tests.txt"; cat "$OUT/engines.json"
