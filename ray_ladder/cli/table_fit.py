"""Tables that fit the terminal: a header never breaks, long cells fold, and the columns
that do not fit a narrow terminal move under the table as a list by row."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.cells import cell_len
from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.table import Column, Table
from rich.text import Text

#: A folding column keeps this many cells (or its header's, if wider) before columns move
#: out of the table: narrower, a list of resources or a capacity folds to a word a line.
SOFT_WIDTH = 20
#: Each column's padding and border: one space each side and a rule; plus the left edge.
PER_COLUMN, EDGE = 3, 1


@dataclass(frozen=True)
class Col:
    """A column: its header and one cell a row.

    ``whole`` keeps the cells unbroken while the width allows (names, numbers). ``spill``
    says when the column leaves the table of a narrow terminal: never (``None``), else
    lowest first; it is then listed under the table, row by row, if ``listed``.
    """

    header: str
    cells: tuple[str, ...]
    whole: bool = False
    spill: int | None = None
    listed: bool = True

    @property
    def natural(self) -> int:
        return max([cell_len(self.header), *map(cell_len, self.cells)])

    @property
    def soft(self) -> int:
        if self.whole:
            return self.natural
        return max(cell_len(self.header), min(self.natural, SOFT_WIDTH))


def _table_width(widths: Sequence[int]) -> int:
    return sum(widths) + PER_COLUMN * len(widths) + EDGE


def _widths(cols: Sequence[Col], width: int) -> list[int] | None:
    """Cell widths that fit ``width``: the widest column gives a cell at a time, down to
    its soft width, then the folding columns down to their headers' widths, then the whole
    ones (a name breaks before a header does); None where even the headers do not fit."""
    widths = [c.natural for c in cols]
    budget = width - _table_width([0] * len(cols))
    headers = [cell_len(c.header) for c in cols]
    folding = [c.natural if c.whole else h for c, h in zip(cols, headers, strict=True)]
    for floor in ([c.soft for c in cols], folding, headers):
        while sum(widths) > budget:
            above = [i for i, w in enumerate(widths) if w > floor[i]]
            if not above:
                break
            widths[max(above, key=widths.__getitem__)] -= 1
    return widths if sum(widths) <= budget else None


def _valued(values: Sequence[str]) -> list[int]:
    """The rows with a value (not empty, not ``-``)."""
    return [i for i, value in enumerate(values) if value not in ("", "-")]


def listing(header: str, names: Sequence[str], values: Sequence[str]) -> RenderableType:
    """``header:`` then one indented ``name  value`` line a row with a value; a long value
    folds under itself (and only a name longer than its value folds)."""
    grid = Table.grid(Column(overflow="fold"), Column(overflow="fold"), padding=(0, 2))
    for i in _valued(values):
        grid.add_row(names[i], values[i])
    return Group(Text(f"{header}:"), Padding(grid, (0, 0, 0, 2), expand=False))


def fitted_table(title: str, names: Sequence[str], cols: Sequence[Col],
                 width: int) -> RenderableType:
    """A table of ``cols`` no wider than ``width`` with every header on one line, and the
    lists of the columns that moved out (each row named by ``names``) under it."""
    shown, out = list(cols), []
    for col in sorted((c for c in cols if c.spill is not None), key=lambda c: c.spill or 0):
        if _table_width([c.soft for c in shown]) <= width:
            break
        shown = [c for c in shown if c is not col]
        out.append(col)
    widths: Sequence[int | None] = _widths(shown, width) or [None] * len(shown)
    table = Table(title=title)
    for col, cell_width in zip(shown, widths, strict=True):
        # A name given less than its width (a very long one, a very narrow terminal)
        # folds rather than being cut; rich sizes the columns only where headers do not fit.
        table.add_column(col.header, no_wrap=col.whole and cell_width is None,
                         overflow="fold", width=cell_width)
    for row in zip(*(c.cells for c in shown), strict=True):
        table.add_row(*row)
    moved = [listing(c.header, names, c.cells) for c in cols
             if c.listed and _valued(c.cells) and any(c is o for o in out)]
    return Group(table, *moved)
