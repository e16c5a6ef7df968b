"""Tables on stdout: a rich table on a terminal, plain text a person can read at 100 columns elsewhere.

A terminal (or a ``$COLUMNS`` width) gets a rich table sized to it. Output to a file or a pipe is never
sized by a terminal, and a rich table there is as wide as its longest cell: a verdict's reason of a
thousand characters made a row of as many. There each row is written as plain text instead: the short
columns (names, kinds, verdicts) aligned on one line, and the long columns (a reason) under it, wrapped
at :data:`PLAIN_WIDTH` columns; a name or a path is never broken (it stays searchable and copyable: a
word longer than a line is written whole).
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Sequence

from ligerkit.cli.common import out, wraps

PLAIN_WIDTH = 100
INDENT = "    "


def plain_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[str]], below: Sequence[str] = (),
                width: int = PLAIN_WIDTH) -> str:
    """``rows`` as plain text: the columns not in ``below`` aligned on the row's line (each as wide as its widest
    cell while the line fits in ``width``; a longer cell is written whole), each column in ``below`` under the
    row, labelled and wrapped at ``width`` between words (a longer word whole)."""
    inline = [i for i, name in enumerate(columns) if name not in below]
    under = [i for i, name in enumerate(columns) if name in below]
    natural = [max([len(columns[i]), *(len(str(row[i])) for row in rows)]) for i in inline]
    widths = _fitted(natural, width - 2 * (len(inline) - 1))

    def line(cells: Sequence[str]) -> str:
        return "  ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    text = textwrap.wrap(title, width, break_long_words=False, break_on_hyphens=False) or [""]
    text += ["", line([columns[i] for i in inline]), line(["-" * w for w in widths])]
    for row in rows:
        text.append(line([str(row[i]) for i in inline]))
        for i in under:
            text += textwrap.wrap(f"{columns[i]}: {row[i]}", width, initial_indent=INDENT, subsequent_indent=INDENT,
                                  break_long_words=False, break_on_hyphens=False) if str(row[i]) else []
    return "\n".join(text)


def _fitted(natural: Sequence[int], budget: int) -> list[int]:
    """Column widths: ``natural`` where they fit in ``budget``, else the widest ones cut to one cap that fits."""
    if sum(natural) <= budget:
        return list(natural)
    cap = max(natural)
    while cap > 4 and sum(min(n, cap) for n in natural) > budget:
        cap -= 1
    return [min(n, cap) for n in natural]


def print_prose(text: str) -> None:
    """A paragraph on stdout: wrapped by the console on a terminal, at :data:`PLAIN_WIDTH` columns elsewhere
    (a word longer than that, a path, written whole)."""
    if wraps(sys.stdout):
        out.print(text, markup=False)
        return
    for paragraph in text.split("\n"):  # an empty line stays one
        sys.stdout.write(textwrap.fill(paragraph, PLAIN_WIDTH, break_long_words=False, break_on_hyphens=False) + "\n")


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[str]], below: Sequence[str] = ()) -> None:
    """``rows`` on stdout: a rich table (cells folded) where output is wrapped (:func:`ligerkit.cli.common.wraps`),
    else :func:`plain_table`."""
    if not wraps(sys.stdout):
        sys.stdout.write(plain_table(title, columns, rows, below) + "\n")
        return
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for name in columns:
        table.add_column(name, overflow="fold")
    for row in rows:
        table.add_row(*map(str, row))
    out.print(table)
