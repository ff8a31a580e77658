"""The operating commands without a cluster: clear failures, the dashboard, rules, timeline."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from ray_ladder.cli import main
from ray_ladder.cli.dashboards import PANELS, RULES, alert_rules, expressions, grafana_dashboard
from ray_ladder.cli.events_cmd import event_line, parse_duration
from ray_ladder.cli.status_cmd import EXIT_NO_CLUSTER
from ray_ladder.cli.timeline_cmd import draw, lines
from ray_ladder.cluster.discovery import CONNECT_TIMEOUT_S
from ray_ladder.cluster.metrics import METRICS, SPECS
from ray_ladder.testing import free_port

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "ray_ladder.cli"]


def run_cli(*args: str, timeout: float = 30) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    proc = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)
    return proc, time.monotonic() - started


@pytest.fixture(scope="module")
def start_s() -> float:
    """What starting the CLI with Ray's GCS client costs on this machine now (a busy
    machine takes seconds to import them): the deadlines below are on top of it."""
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", "import ray_ladder.cli.status_cmd, ray._raylet"],
                   check=True, timeout=120)
    return time.monotonic() - started


@pytest.mark.parametrize("command", ["status", "events", "timeline"])
def test_no_cluster_at_the_address_is_a_clear_message_and_exit_3(command: str,
                                                                  start_s: float) -> None:
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    proc, took = run_cli(command, "--address", address, timeout=60)
    assert proc.returncode == EXIT_NO_CLUSTER == 3, proc.stderr
    assert f"nothing answers at {address}" in proc.stderr
    assert took < start_s + 5, (took, start_s)  # a refused port: no wait at all


def test_a_port_that_is_not_a_ray_gcs_fails_within_its_deadline(start_s: float) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:  # accept and say nothing: what a wrong service looks like
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        address = f"127.0.0.1:{server.getsockname()[1]}"
        proc, took = run_cli("status", "--json", "--address", address, timeout=60)
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        server.close()
    assert proc.returncode == EXIT_NO_CLUSTER, proc.stderr
    assert f"no Ray GCS at {address}" in proc.stderr and proc.stdout == ""
    # The CLI waits CONNECT_TIMEOUT_S (6 s) for a GCS answer; 10 s in all on a quiet
    # machine, where starting it costs about 2 s.
    assert took < start_s + CONNECT_TIMEOUT_S + 2, (took, start_s)


def test_durations() -> None:
    assert [parse_duration(d) for d in ("30s", "10m", "2h", "1d", "45", "1.5m")] == \
        [30.0, 600.0, 7200.0, 86400.0, 45.0, 90.0]
    result = CliRunner().invoke(main, ["events", "--since", "ten", "--address", "x:1"])
    assert result.exit_code == 2 and "write a duration such as 30s" in result.output


def test_an_event_line_says_when_what_who_and_why() -> None:
    line = event_line({"wall": 0.0, "ladder": "gpu", "part": "task", "source": "embed",
                       "kind": "alert", "to": "a100", "reason": "degraded for 61.0s"})
    assert line.endswith("  gpu  task embed  alert a100: degraded for 61.0s")


# --- the dashboard and the rules ----------------------------------------------------------

def test_grafana_prints_the_dashboard_and_the_rules() -> None:
    runner = CliRunner()
    dashboard = json.loads(runner.invoke(main, ["grafana"]).output)
    assert dashboard == grafana_dashboard()
    assert len(dashboard["panels"]) == len(PANELS)
    assert all(t["expr"] and t["datasource"]["uid"] == "${datasource}"
               for p in dashboard["panels"] for t in p["targets"])
    assert runner.invoke(main, ["grafana", "--rules"]).output.strip() == alert_rules().strip()


def test_every_expression_reads_only_metrics_of_the_table() -> None:
    known = {spec.prometheus for spec in METRICS}
    used = {name for expr in expressions() for name in re.findall(r"ray_ladder_\w+", expr)}
    assert used <= known, used - known
    # Every metric of the table is on the dashboard.
    assert known <= used, known - used


def test_the_docs_table_lists_every_metric_with_its_labels() -> None:
    text = (ROOT / "docs" / "operating.md").read_text()
    for spec in METRICS:
        row = next((line for line in text.splitlines()
                    if line.startswith(f"| `{spec.prometheus}`")), None)
        assert row is not None, f"{spec.prometheus} missing from docs/operating.md"
        assert all(f"`{label}`" in row for label in spec.labels), (row, spec.labels)
    assert set(SPECS) == {m.name for m in METRICS}


def test_promtool_accepts_the_rule_file(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package prometheus; `make test` "
                    "installs it when run as root)")
    path = tmp_path / "ray-ladder-rules.yml"
    path.write_text(alert_rules())
    proc = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(RULES)} rules found" in proc.stdout


# --- the timeline --------------------------------------------------------------------------

def test_the_timeline_draws_a_line_per_user_and_marks_events(tmp_path: Path) -> None:
    t = 1_800_000_000.0
    events = [
        {"wall": t, "ladder": "web", "part": "serve", "source": "app", "kind": "transition",
         "from": None, "to": "h100", "reason": "first observation"},
        {"wall": t + 5, "ladder": "web", "part": "serve", "source": "app",
         "kind": "transition", "from": "h100", "to": "a100", "reason": "h100 unobtainable"},
        {"wall": t + 8, "ladder": "web", "part": "serve", "source": "app", "kind": "alert",
         "from": "a100", "to": "a100", "reason": "degraded"},
        {"wall": t + 6, "ladder": "web", "part": "hook", "source": "hook",
         "kind": "stockout", "from": "h100", "to": "h100", "rung": "h100", "reason": "x"},
        {"wall": t + 4, "ladder": "batch", "part": "task", "source": "embed",
         "kind": "transition", "from": "h100", "to": None, "reason": "every rung gone"},
    ]
    assert lines(events)[("serve", "app")] == [(t, "h100"), (t + 5, "a100")]
    assert lines(events)[("task", "embed")] == [(t + 4, "h100"), (t + 4, None)]
    out = draw(events, {"web": {"rungs": ["h100", "a100", "shed"]}}, tmp_path / "t.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000


# --- rendering the report ------------------------------------------------------------------

REPORT = {
    "address": "10.0.0.1:6379", "time": 100.0, "alive_nodes": 3, "gone_entries": 0,
    "ladders": [
        {"part": "tune", "source": "gpu", "ladder": "gpu", "current": "a100",
         "current_index": 1, "degraded_s": 12.5, "alert_fired": True,
         "max_degraded_seconds": 10.0, "age_s": 0.4,
         "rungs": [{"name": "h100", "kind": "compute", "obtainable": False, "nodes": 0,
                    "replicas": 0, "served_1m": 0, "share_1m": None, "hook_role": "warming"},
                   {"name": "a100", "kind": "compute", "obtainable": True, "nodes": 2,
                    "replicas": 2, "served_1m": 0, "share_1m": None, "hook_role": None}],
         "by_constraints": [{"constraints": {"jurisdiction": "eu"}, "current": "a100-eu",
                             "degraded_s": 3.0}],
         "unanswered_1m": {"exhausted": 2},
         "trials": [{"trial": "t1", "status": "RUNNING", "rung": "a100", "degraded_s": 12.5}],
         "last_transitions": [{"wall": 90.0, "kind": "transition", "from": "h100",
                               "to": "a100", "reason": "trial t1: h100 lost"}]},
        {"part": "hook", "source": "hook", "ladder": "gpu", "current": "a100",
         "current_index": 1, "age_s": 0.2,
         "rungs": [{"name": "h100", "role": "warming", "status": "requested", "nodes": 0}],
         "last_transitions": []},
    ],
}


def test_the_report_renders_for_people() -> None:
    from rich.console import Console

    from ray_ladder.cli.status_cmd import report_view

    console = Console(record=True, width=140)
    console.print(report_view(REPORT))
    text = console.export_text()
    assert "cluster 10.0.0.1:6379: 3 alive node(s), 2 ladder(s) in use" in text
    assert "ladder gpu (tune gpu): on a100, degraded 12.5 s (alert at 10 s: FIRED)" in text
    assert 'constraints {"jurisdiction": "eu"}: on a100-eu' in text
    assert "trial t1 (RUNNING): a100" in text and "exhausted 2" in text
    assert "ladder gpu (hook hook): on a100" in text and "requested" in text


def test_watch_prints_a_report_per_interval_until_interrupted() -> None:
    from ray_ladder.cli.status_cmd import _watch

    class Reader:
        calls = 0

        def report(self) -> dict:
            self.calls += 1
            if self.calls > 3:
                raise KeyboardInterrupt
            return REPORT

    with CliRunner().isolation() as streams:
        _watch(Reader(), as_json=True, interval=0.01)  # type: ignore[arg-type]
        lines = streams[0].getvalue().decode().splitlines()
    assert len(lines) == 3 and all(json.loads(line) == REPORT for line in lines)


def test_a_slow_rung_shows_as_slow_with_its_reason() -> None:
    from rich.console import Console

    from ray_ladder.cli.status_cmd import report_view

    serve_entry = {
        "part": "serve", "source": "web", "ladder": "web", "current": "a100",
        "current_index": 1, "degraded_s": 4.0, "age_s": 0.1,
        "slow": {"h100": "its replicas took 1.70s against the 1s target (queue left out) "
                         "for 1.5s"},
        "rungs": [{"name": "h100", "kind": "compute", "obtainable": False, "nodes": 1,
                   "replicas": 1, "served_1m": 3, "share_1m": 0.1, "hook_role": None},
                  {"name": "a100", "kind": "compute", "obtainable": True, "nodes": 1,
                   "replicas": 1, "served_1m": 27, "share_1m": 0.9, "hook_role": None}],
        "last_transitions": []}
    console = Console(record=True, width=140)
    console.print(report_view({**REPORT, "ladders": [serve_entry]}))
    text = console.export_text()
    row = next(line for line in text.splitlines() if "h100" in line and "compute" in line)
    assert [c.strip() for c in row.split("│")][3] == "slow"
    assert "h100 is slow: its replicas took 1.70s against the 1s target" in text


def test_an_unobtainable_rung_shows_why_where_its_observer_knew() -> None:
    from rich.console import Console

    from ray_ladder.cli.status_cmd import report_view

    task = {
        "part": "task", "source": "embed", "ladder": "batch", "current": "cpu",
        "current_index": 2, "degraded_s": 4.0, "age_s": 0.1,
        "rungs": [{"name": "h100", "kind": "compute", "obtainable": False, "nodes": 0,
                   "replicas": 0, "served_1m": 0, "share_1m": None, "hook_role": None,
                   "why": {"cause": "no_node", "reason": "no alive node can host it"}},
                  {"name": "a100", "kind": "compute", "obtainable": False, "nodes": 1,
                   "replicas": 0, "served_1m": 0, "share_1m": None, "hook_role": None,
                   "why": None},  # its observer could not tell: nothing invented
                  {"name": "cpu", "kind": "compute", "obtainable": True, "nodes": 1,
                   "replicas": 1, "served_1m": 5, "share_1m": 1.0, "hook_role": None}],
        "last_transitions": []}
    console = Console(record=True, width=140)
    console.print(report_view({**REPORT, "ladders": [task]}))
    text = console.export_text()
    cells = {row.split("│")[1].strip(): row.split("│")[3].strip()
             for row in text.splitlines() if "compute" in row}
    assert cells == {"h100": "no (no node)", "a100": "no", "cpu*": "yes"}
    assert "h100 is unobtainable: no alive node can host it" in text
    assert "a100 is unobtainable" not in text
