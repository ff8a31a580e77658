"""The docs' code blocks run as written (issue 26, deliverable 7).

Every fenced ```python block of README.md and docs/*.md, and every ```bash block that runs
``ray-ladder validate|show|schema|simulate``, is run here unless the line right before it
is one of these markers:

- ``<!-- same as: FILE[::NAME]; run by TEST -->``: the block is, character for character,
  the text of FILE (or of its top-level function or class NAME), and TEST (a test module
  that names FILE) runs it, on a real cluster where it needs one. Checked here; nothing
  runs.
- ``<!-- run by: TEST[::FUNCTION] -->``: TEST runs the block's own text (checked: TEST and
  FUNCTION exist). ``tests/test_docs_ray.py`` runs its blocks on one local Ray.
- ``<!-- not run: REASON -->`` with a REASON from ``REASONS``: "a fragment" names what the
  page does not define (``load()``, ``BigModel``), so it runs nowhere as written; "needs a
  cluster" joins or starts a Ray cluster (Serve on port 8000, S3, a remote head) that no
  test starts for it; "needs the spot-traces clone" only in docs/benchmarks.md or under a
  label that says it reproduces the published figures (every other example runs on the
  sample traces of examples/traces).

A block that is neither runnable nor marked fails; every python block, marked or not, must
at least compile. Python blocks of one page share one namespace, in page order, from the
repository root (a page reads like one session); bash blocks run with the venv's
``ray-ladder`` in a temporary copy of ``examples/`` and ``docs/``, so what they write stays
out of the tree.
"""

from __future__ import annotations

import ast
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
MARK = re.compile(r"^\s*<!-- (not run|same as|run by): (.+?) -->\s*$")
SAME_AS = re.compile(
    r"^(?P<file>[\w./-]+?)(?:::(?P<name>\w+))?; run by (?P<test>tests/[\w/]+\.py)$")
RUN_BY = re.compile(r"^(?P<test>tests/[\w/]+\.py)(?:::(?P<name>\w+))?$")
CLI = re.compile(r"\bray-ladder (validate|show|schema|simulate)\b")
HEADING = re.compile(r"^#{1,6} (.+)$")
PUBLISHED = "reproduce the published figures"


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language, its text, its marker, what leads to it."""

    page: Path
    line: int
    lang: str
    code: str
    mark: str | None = None  # "not run", "same as" or "run by"
    mark_arg: str = ""
    lead: str = ""  # the heading above the block and the paragraph right before it

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def not_run(self) -> str | None:
        return self.mark_arg if self.mark == "not run" else None

    @property
    def run_by(self) -> str | None:
        return self.mark_arg if self.mark == "run by" else None


def blocks(page: Path) -> list[Block]:
    """The page's fenced blocks, dedented, with the marker on the line before each."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found, i, heading = [], 0, ""
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            heading = h.group(1) if (h := HEADING.match(lines[i])) else heading
            i += 1
        elif not m.group(2):  # a block with no language: skip it whole
            i += 1
            while not lines[i].strip().startswith("```"):
                i += 1
            i += 1
        else:
            indent, lang, end = len(m.group(1)), m.group(2), i + 1
            while not lines[end].strip().startswith("```"):
                end += 1
            code = "\n".join(line[indent:] for line in lines[i + 1 : end])
            mark = MARK.match(lines[i - 1]) if i else None
            found.append(Block(page, i + 1, lang, code, mark.group(1) if mark else None,
                               mark.group(2) if mark else "", _lead(lines, i, heading)))
            i = end + 1
    return found


def _lead(lines: list[str], fence: int, heading: str) -> str:
    """The heading above a block and the paragraph right before it (or its marker)."""
    k = fence - 1
    while k >= 0 and (not lines[k].strip() or MARK.match(lines[k])):
        k -= 1
    para: list[str] = []
    while k >= 0 and lines[k].strip() and not lines[k].startswith("```"):
        para.insert(0, lines[k].strip())
        k -= 1
    return " ".join([heading, *para])


def in_scope(block: Block) -> bool:
    return block.lang == "python" or (block.lang == "bash" and bool(CLI.search(block.code)))


ALL = [b for page in PAGES for b in blocks(page) if in_scope(b)]


def test_markers_give_a_known_reason() -> None:
    marked = [b for page in PAGES for b in blocks(page) if b.not_run]
    unknown = [f"{b.where}: {b.not_run!r}" for b in marked if b.not_run not in REASONS]
    assert not unknown, f"reasons must be one of {sorted(REASONS)}: {unknown}"


def test_marked_blocks_are_in_scope() -> None:
    stray = [b.where for page in PAGES for b in blocks(page) if b.mark and not in_scope(b)]
    assert not stray, f"a marker before a block the test never runs: {stray}"


def test_every_python_block_compiles() -> None:
    broken = []
    for block in (b for b in ALL if b.lang == "python"):
        try:
            compile(block.code, block.where, "exec")
        except SyntaxError as err:
            broken.append(f"{block.where}: {err}")
    assert not broken, broken


def test_published_figures_need_the_clone_only_where_a_label_says_so() -> None:
    """Every example runs on the sample traces; a block that reads the public traces
    reproduces published figures, in docs/benchmarks.md or under a label saying so."""
    stray = [b.where for b in ALL if b.not_run == "needs the spot-traces clone"
             and b.page.name != "benchmarks.md" and PUBLISHED not in b.lead.lower()]
    assert not stray, f"say '{PUBLISHED}' right before these blocks, or run them: {stray}"


def _defined(path: Path, name: str) -> str | None:
    """The source of the top-level function or class ``name`` in ``path``, decorators too."""
    text = path.read_text(encoding="utf-8")
    for node in ast.parse(text).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and (
                node.name == name):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            return "\n".join(text.splitlines()[first - 1 : node.end_lineno])
    return None


@pytest.mark.parametrize("block", [b for b in ALL if b.mark == "same as"], ids=lambda b: b.where)
def test_same_as_blocks_are_the_text_of_a_file_a_test_runs(block: Block) -> None:
    m = SAME_AS.match(block.mark_arg)
    assert m, f"{block.where}: write <!-- same as: FILE[::NAME]; run by TEST -->"
    path, test = ROOT / m["file"], ROOT / m["test"]
    assert path.is_file(), f"{block.where}: no file {m['file']}"
    text = path.read_text(encoding="utf-8") if not m["name"] else _defined(path, m["name"])
    assert text is not None, f"{block.where}: {m['file']} defines no {m['name']}"
    assert block.code.strip("\n") == text.strip("\n"), (
        f"{block.where} drifted from {m['file']}{'::' + m['name'] if m['name'] else ''}: "
        "make them the same text again")
    assert test.is_file(), f"{block.where}: no test module {m['test']}"
    names = {path.name} | ({path.parent.name} if path.parent.name != "examples" else set())
    assert any(f'"{n}"' in test.read_text(encoding="utf-8") for n in names), (
        f"{block.where}: {m['test']} does not name {m['file']}")


@pytest.mark.parametrize("block", [b for b in ALL if b.mark == "run by"], ids=lambda b: b.where)
def test_run_by_blocks_name_a_test_that_exists(block: Block) -> None:
    m = RUN_BY.match(block.mark_arg)
    assert m, f"{block.where}: write <!-- run by: tests/MODULE.py[::TEST] -->"
    test = ROOT / m["test"]
    assert test.is_file(), f"{block.where}: no test module {m['test']}"
    if m["name"]:
        tests = {n.name for n in ast.parse(test.read_text(encoding="utf-8")).body
                 if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        assert m["name"] in tests, f"{block.where}: {m['test']} has no {m['name']}"


@pytest.mark.parametrize(
    "page", sorted({b.page for b in ALL if b.lang == "python"}), ids=lambda p: p.name
)
def test_python_blocks_run(page: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    namespace: dict[str, object] = {"__name__": "__docs__"}
    for block in (b for b in ALL if b.page == page and b.lang == "python"):
        if block.mark:
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
    if block.mark:
        pytest.skip(f"{block.mark}: {block.mark_arg}")
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
