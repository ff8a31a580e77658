"""`ray-ladder show` in a narrow terminal: no header breaks mid-word, a column that does not
fit is listed under the table, and each rung's params and standby replicas are shown."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.cells import cell_len

from ray_ladder import Ladder, load_ladder
from ray_ladder.cli import main
from ray_ladder.core.placement import standby_replicas
from tests.cli.test_cli_files import FLEET

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted([*(ROOT / "examples" / "ladders").glob("*.yaml"),
                   *(ROOT / "ray_ladder" / "ladders").glob("*.yaml")])
WIDTHS = ["60", "80", "120"]
#: Every header `show` may print: the ladder's, the clusters', the fleet's.
HEADERS = {"#", "rung", "kind", "placement", "quality", "cost/h", "standby", "tags",
           "work cost/h", "cluster", "capacity", "train",
           "address", "serve", "site", "jurisdiction", "poll/stale/lost s",
           "unit", "bought", "team", "quota", "may borrow", "may lend", "cohort", "weight",
           "grace", "budget"}


def _show(path: Path, columns: str | int) -> str:
    result = CliRunner().invoke(main, ["show", str(path)], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    return result.stdout


def _table_headers(out: str) -> list[list[list[str]]]:
    """Each table's header: per column, the non-empty pieces of its header text (one per
    line the header takes)."""
    tables: list[list[list[str]]] = []
    previous = ""
    for line in out.splitlines():
        if not line.startswith("┃"):
            previous = line
            continue
        cells = [c.strip() for c in line.strip().strip("┃").split("┃")]
        if not previous.startswith("┃"):
            tables.append([[] for _ in cells])
        for pieces, cell in zip(tables[-1], cells, strict=True):
            pieces += [cell] if cell else []
        previous = line
    return tables


def _expected(ladder: Ladder) -> set[str]:
    """The headers a ladder's rung table has, in it or listed under it."""
    rungs = ladder.rungs
    optional = {"standby": any(r.standby_replicas is not None for r in rungs),
                "tags": any(r.tags for r in rungs), "work cost/h": ladder.data is not None,
                "cluster": bool(ladder.clusters),
                "capacity": any(r.capacity is not None for r in rungs),
                "train": any(r.train is not None for r in rungs)}
    return {"rung", "kind", "placement", "quality", "cost/h"} | {
        h for h, shown in optional.items() if shown}


def _check_headers_whole(out: str, columns: int) -> list[str]:
    """Every header of every table on one line, unbroken; no line wider than the terminal
    and no table cut at its right edge. Returns the table headers."""
    headers = []
    for table in _table_headers(out):
        for pieces in table:
            assert len(pieces) == 1 and pieces[0] in HEADERS, (pieces, out)
            headers.append(pieces[0])
    for line in out.splitlines():
        assert cell_len(line.rstrip()) <= columns, line
        if line[:1] in "┃│┏┡└":
            assert line.rstrip()[-1] in "┃│┓┩┘", (line, out)
    return headers


def _value(out: str, header: str, name: str) -> str | None:
    """The ``header`` cell of row ``name``: in the table, or in the ``header:`` list under
    it; None where the row has none."""
    lines = [line.rstrip() for line in out.splitlines()]
    if f"{header}:" in lines:
        for line in lines[lines.index(f"{header}:") + 1:]:
            if not line.startswith("  "):
                return None
            if m := re.fullmatch(rf"  {re.escape(name)}\s\s+(.*)", line):
                return m.group(1)
        return None
    top = next(line for line in lines if line.startswith("┃") and f" {header} " in line)
    column = [c.strip() for c in top.strip("┃").split("┃")].index(header)
    for line in lines:
        cells = [c.strip() for c in line.strip("│").split("│")]
        if line.startswith("│") and name in cells[:2]:
            return cells[column]
    return None


def _params_tokens(params: dict[str, object]) -> list[str]:
    return [f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in params.items()]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
@pytest.mark.parametrize("columns", WIDTHS)
def test_no_header_breaks_and_every_column_is_shown(path: Path, columns: str) -> None:
    # Before: at 80 columns "placemen|t", "qualit|y", "clust|er", "poll/stale/l|ost s".
    out = _show(path, columns)
    headers = _check_headers_whole(out, int(columns))
    ladder = load_ladder(path)
    listed = {line.rstrip()[:-1] for line in out.splitlines() if line.rstrip().endswith(":")
              and not line.startswith(" ")}
    missing = _expected(ladder) - set(headers) - listed
    assert not missing, out
    if int(columns) >= 80:
        assert "#" in headers  # the order stays in the table where it fits


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_no_header_breaks_at_any_width_from_60(path: Path) -> None:
    for columns in range(60, 141, 3):
        _check_headers_whole(_show(path, columns), columns)


@pytest.mark.parametrize("path", [p for p in EXAMPLES if any(
    r.params for r in load_ladder(p).rungs)], ids=lambda p: p.name)
@pytest.mark.parametrize("columns", WIDTHS)
def test_show_lists_each_rungs_params(path: Path, columns: str) -> None:
    out = _show(path, columns)
    lines = out.splitlines()
    assert "params:" in [line.rstrip() for line in lines]
    for rung in load_ladder(path).rungs:
        tokens = _params_tokens(rung.params)
        for token in tokens:  # each k=v whole on a line
            assert any(token in line for line in lines), (token, out)
        if tokens:  # and the first on the rung's own line
            first = re.compile(rf"^  {re.escape(rung.name)}\s+{re.escape(tokens[0])}")
            assert any(first.match(line) for line in lines), (rung.name, out)


@pytest.mark.parametrize("path", [p for p in EXAMPLES if any(
    r.standby_replicas is not None for r in load_ladder(p).rungs)], ids=lambda p: p.name)
@pytest.mark.parametrize("columns", WIDTHS)
def test_show_gives_each_compute_rungs_standby_replicas(path: Path, columns: str) -> None:
    out = _show(path, columns)
    ladder = load_ladder(path)
    for rung in ladder.rungs:
        if rung.is_compute:
            assert _value(out, "standby", rung.name) == str(standby_replicas(ladder, rung))
    if columns == "120":  # a column there, each rung in its row; "-" for no replicas
        shed = [r.name for r in ladder.rungs if not r.is_compute]
        assert all(_value(out, "standby", name) == "-" for name in shed)


def test_ladders_without_standby_or_params_show_neither() -> None:
    out = _show(ROOT / "examples" / "ladders" / "capacity.yaml", 200)
    assert "standby" not in out and "params" not in out


def test_long_params_are_cut_with_an_ellipsis(tmp_path: Path) -> None:
    path = tmp_path / "ladder.yaml"
    path.write_text("name: p\nrungs:\n  - name: gpu\n    num_gpus: 1\n    standby_replicas: 3\n"
                    f"    params: {{model: {'m' * 80}, batch: 8, opts: {{a: [1, 2]}}}}\n")
    for columns in WIDTHS:
        out = _show(path, columns)
        assert _value(out, "standby", "gpu") == "3"
        listed = out.split("params:\n")[1]
        assert listed.startswith(f"  gpu  model={'m' * 37}...,"), out
        assert "batch=8" in listed and 'opts={"a":[1,2]}' in listed


@pytest.mark.parametrize("columns", WIDTHS)
def test_fleet_tables_keep_their_headers_whole(tmp_path: Path, columns: str) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(FLEET)
    out = _show(path, columns)
    headers = _check_headers_whole(out, int(columns))
    assert {"rung", "unit", "team", "quota"} <= set(headers)
    assert "100 per 3600 s, then queue" in out  # budget: in the table or listed under it
