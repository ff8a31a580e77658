"""docs/spec.md's printed `ray-ladder validate` output is what the command prints now."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from ray_ladder.cli import main

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"^\$ ray-ladder validate (.+)\n((?:(?!\$ |```).*\n)*)", re.M)


def _blocks() -> list[tuple[str, str]]:
    text = (ROOT / "docs" / "spec.md").read_text()
    return [(m.group(1), m.group(2).rstrip("\n")) for m in BLOCK.finditer(text)]


def test_the_page_has_the_blocks() -> None:
    assert len(_blocks()) >= 6  # a reader that finds nothing would pass anything


@pytest.mark.parametrize(("args", "printed"), _blocks(), ids=lambda v: v[:40])
def test_printed_output_matches(args: str, printed: str, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    result = CliRunner().invoke(main, ["validate", *args.split()])
    assert (result.stdout + result.stderr).rstrip("\n") == printed
