"""Tables that fit a 100-column terminal (``--wide`` shows every column as it is).

To fit, in this order: columns that hold nothing ("-" or empty in every row) go; long
headers wrap at their underscores; free-text columns wrap; then columns go in the order
the caller gives (least telling first), and the caller says which in one line.
"""
from __future__ import annotations

import textwrap

import tabulate as tabulate_module
from tabulate import tabulate

WIDTH = 100
EMPTY = ("-", "")


def _width(text: str) -> int:
    return max((len(line) for line in text.splitlines()), default=0)


def _wrap_header(header: str, width: int) -> str:
    """``retrieval_local_bias`` -> lines no wider than ``width`` (or its longest part), cut at "_"."""
    lines, line = [], ""
    for part in header.replace("_", "_\0").split("\0"):
        if line and len(line) + len(part.rstrip("_")) > width:
            lines.append(line)
            line = ""
        line += part
    return "\n".join(lines + [line])


def render(headers: list[str], rows: list[list], *, wide: bool = False, drop: tuple[str, ...] = (),
           wrap: tuple[str, ...] = (), fmt: str = "simple", width: int = WIDTH,
           numbers: bool = False) -> tuple[str, list[str]]:
    """The table, and the headers of the columns left out to fit ``width`` (not the empty ones).
    ``numbers``: align cells that read as numbers to the right (else every cell is text)."""
    rows = [[str(cell) for cell in row] for row in rows]
    keep = list(range(len(headers)))
    if not wide and rows:
        keep = [i for i in keep if i == 0 or not all(row[i] in EMPTY for row in rows)]

    def table(cols, heads=None, maxw=None):
        heads = heads or {i: headers[i] for i in cols}
        saved, tabulate_module.MIN_PADDING = tabulate_module.MIN_PADDING, 0  # no room around headers
        try:
            return tabulate([[row[i] for i in cols] for row in rows], [heads[i] for i in cols], tablefmt=fmt,
                            disable_numparse=not numbers, maxcolwidths=maxw and [maxw.get(i) for i in cols])
        finally:
            tabulate_module.MIN_PADDING = saved

    text = table(keep)
    if wide or fmt != "simple" or _width(text) <= width:
        return text, []
    # headers wrapped to their column's widest cell
    cell = {i: max([len(row[i]) for row in rows] + [10]) for i in keep}
    heads = {i: headers[i] if i in wrap else _wrap_header(headers[i], cell[i]) for i in keep}
    hidden: list[str] = []
    order = [i for name in drop for i in keep if headers[i] == name]
    while True:
        maxw = None
        text = table(keep, heads)
        free = [i for i in keep if i in (headers.index(w) for w in wrap if w in headers)]
        if _width(text) > width and free:
            # every other column as it is; the free-text ones share what is left
            others = table([i for i in keep if i not in free], heads) if len(free) < len(keep) else ""
            room = width - _width(others) - 2 * len(free)
            if room >= 10 * len(free):
                maxw = {i: room // len(free) for i in free}
                text = table(keep, heads, maxw)
        if _width(text) <= width or len(keep) == 1:
            return text, hidden
        victim = next((i for i in order if i in keep), keep[-1])
        keep.remove(victim)
        hidden.append(headers[victim])


def lines(text: str, wide: bool = False) -> str:
    """Prose wrapped to the width (as it is with ``wide``)."""
    return text if wide else "\n".join(textwrap.wrap(text, WIDTH, subsequent_indent="  ")) or text


def hidden_note(hidden: list[str]) -> str:
    return (f"(not shown, to fit {WIDTH} columns: {', '.join(hidden)}; --wide shows them)" if hidden else "")
