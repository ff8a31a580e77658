"""The docs' code blocks run as written (issue 26, deliverable 7).

Every fenced ```python block of README.md and docs/*.md, and every ```bash block that runs
``ray-ladder validate|show|schema|simulate``, is run here unless the line right before it
says why not: ``<!-- not run: REASON -->`` with a REASON from ``REASONS``. A block that is
neither runnable nor marked fails. Python blocks of one page share one namespace, in page
order, from the repository root (a page reads like one session); bash blocks run with the
venv's ``ray-ladder`` in a temporary copy of ``examples/`` and ``docs/``, so what they
write stays out of the tree. No block starts a Ray cluster: those are marked.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
REASONS = {
    "needs a cluster",
    "needs a GPU",
    "a fragment",
    "needs the spot-traces clone",
    "needs a tool ray-ladder does not install",
}
FENCE = re.compile(r"^(\s*)```(\w*)\s*$")
MARK = re.compile(r"^\s*<!-- not run: (.+?) -->\s*$")
CLI = re.compile(r"\bray-ladder (validate|show|schema|simulate)\b")


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language, its text, why it is not run."""

    page: Path
    line: int
    lang: str
    code: str
    not_run: str | None

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The page's fenced blocks, dedented, with the marker on the line before each."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m or not m.group(2):
            i += 1
            continue
        indent, lang, end = len(m.group(1)), m.group(2), i + 1
        while not lines[end].strip().startswith("```"):
            end += 1
        code = "\n".join(line[indent:] for line in lines[i + 1 : end])
        mark = MARK.match(lines[i - 1]) if i else None
        found.append(Block(page, i + 1, lang, code, mark.group(1) if mark else None))
        i = end + 1
    return found


def in_scope(block: Block) -> bool:
    return block.lang == "python" or (block.lang == "bash" and bool(CLI.search(block.code)))


ALL = [b for page in PAGES for b in blocks(page) if in_scope(b)]


def test_markers_give_a_known_reason() -> None:
    marked = [b for page in PAGES for b in blocks(page) if b.not_run]
    unknown = [f"{b.where}: {b.not_run!r}" for b in marked if b.not_run not in REASONS]
    assert not unknown, f"reasons must be one of {sorted(REASONS)}: {unknown}"


def test_marked_blocks_are_in_scope() -> None:
    stray = [b.where for page in PAGES for b in blocks(page) if b.not_run and not in_scope(b)]
    assert not stray, f"a marker before a block the test never runs: {stray}"


@pytest.mark.parametrize(
    "page", sorted({b.page for b in ALL if b.lang == "python"}), ids=lambda p: p.name
)
def test_python_blocks_run(page: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    namespace: dict[str, object] = {"__name__": "__docs__"}
    for block in (b for b in ALL if b.page == page and b.lang == "python"):
        if block.not_run:
            continue
        try:
            exec(compile(block.code, block.where, "exec"), namespace)  # noqa: S102
        except Exception as err:  # noqa: BLE001 (the failure names the block)
            pytest.fail(
                f"{block.where} (mark it <!-- not run: REASON --> if it cannot run): "
                f"{type(err).__name__}: {err}"
            )


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("docs")
    for folder in ("examples", "docs"):
        shutil.copytree(ROOT / folder, work / folder)
    return work


@pytest.mark.parametrize("block", [b for b in ALL if b.lang == "bash"], ids=lambda b: b.where)
def test_bash_blocks_run(block: Block, sandbox: Path) -> None:
    if block.not_run:
        pytest.skip(block.not_run)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block.code],
        cwd=sandbox,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"{block.where}:\n{done.stdout}\n{done.stderr}"
