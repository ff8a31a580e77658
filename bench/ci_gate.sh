#!/usr/bin/env bash
# The CI gate as a newcomer's machine meets it: `.ci/run` in a fresh clone of this
# checkout's HEAD, beside a heavy workload, and what came of it.
#
#   bench/ci_gate.sh            # beside: a looping `python -m ray_ladder.demo` (from this
#                               # checkout's .venv) and a CPU-bound process holding one core
#   bench/ci_gate.sh --quiet    # nothing beside it
#
# The clone goes to $GATE_DIR (default a new folder under /tmp) with ../shared linked
# beside it, as CI lays it out. Prints, at the end, one line of JSON: the exit code, the
# minutes from `git clone` to the end, the load beside it, the pytest summary lines and
# every FAILED/ERROR line. The full log stays in $GATE_DIR/gate.log.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
beside=1; [ "${1:-}" = "--quiet" ] && beside=0
dir=${GATE_DIR:-$(mktemp -d /tmp/ci-gate.XXXXXX)}
log="$dir/gate.log"
commit=$(git -C "$here" rev-parse --short HEAD)
pids=()
stop() { for p in "${pids[@]}"; do kill -- -"$p" 2>/dev/null || kill "$p" 2>/dev/null; done; }
trap stop EXIT
if [ $beside = 1 ]; then
  # A CPU-bound process holding one core, and the demo in a loop (its own Ray cluster).
  setsid python3 -c "while True: pass" & pids+=($!)
  setsid bash -c "cd '$here' && while true; do .venv/bin/python -m ray_ladder.demo \
    --out '$dir/demo-out' >>'$dir/demo.log' 2>&1; echo \"demo exit \$?\" >>'$dir/demo.log'; done" &
  pids+=($!)
fi
start=$(date +%s)
# A clone that fails (a $GATE_DIR used before: its main/ exists) must not run the old one.
git clone -q "$here" "$dir/main" || { echo "git clone into $dir/main failed" >&2; exit 2; }
[ -e "$here/../shared" ] && ln -s "$(cd "$here/.." && pwd)/shared" "$dir/shared"
(cd "$dir/main" && CI=true bash .ci/run) >"$log" 2>&1 </dev/null
rc=$?
end=$(date +%s)
load=$(cut -d' ' -f1-3 /proc/loadavg)
stop; pids=()
demos=$(grep -c "demo exit" "$dir/demo.log" 2>/dev/null || echo 0)
python3 - "$rc" "$start" "$end" "$load" "$beside" "$commit" "$log" "$demos" <<'PY'
import json, re, sys
rc, start, end, load, beside, commit, log, demos = sys.argv[1:]
text = open(log, errors="replace").read()
summary = re.findall(r"^=+ (.*(?:passed|failed|error).*) =+$", text, re.M)
bad = sorted(set(re.findall(r"^(?:FAILED|ERROR) \S+", text, re.M)))
print(json.dumps({"commit": commit, "exit_code": int(rc), "beside": beside == "1",
                  "demo_runs_beside": int(demos), "minutes": round((int(end) - int(start)) / 60, 1),
                  "loadavg_at_end": load, "pytest_summaries": summary, "failures": bad,
                  "log": log}))
PY
exit $rc
