"""Tables and ``key: value`` blocks for the command lines (``dpmine`` and ``dpmine-server``).

On a terminal a table is drawn by rich at the terminal's width (:func:`shutil.get_terminal_size`):
long cells wrap inside their column, never past the right edge. When the output is not a
terminal (a pipe, a file, ``less``), wrapping at a guessed 80 columns would cut every record into
pieces, so the table is printed as plain text instead: a header line, then exactly one line per
record, columns aligned with two spaces and never wrapped (``grep`` and ``sort`` see whole
records). Scripts should use ``--json``; this output is for people.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Sequence
from typing import TextIO

from rich.console import Console
from rich.table import Table
from rich.text import Text

__all__ = ["fields_text", "plain_table", "print_fields", "print_table", "terminal_table"]

#: The gap between two columns of a plain table.
GAP = "  "


def _plain(cell: object) -> str:
    """A cell as one line of plain text: rich markup rendered away, line breaks as spaces."""
    if isinstance(cell, Text):
        text = cell.plain
    elif isinstance(cell, str):
        text = Text.from_markup(cell).plain
    else:
        text = str(cell)
    return " ".join(text.split())


def plain_table(table: Table) -> str:
    """``table`` as plain text: its title, a header line, one line per row (columns aligned,
    nothing wrapped) and its caption; a table without rows is ``<title>: none``."""
    header = [_plain(column.header) for column in table.columns]
    columns = [[_plain(cell) for cell in column.cells] for column in table.columns]
    rows = list(zip(*columns, strict=True)) if columns else []
    title = _plain(table.title) if table.title else ""
    lines: list[str] = []
    if not rows:
        lines.append(f"{title or 'results'}: none")
    else:
        if title:
            lines.append(title)
        widths = [
            max(len(text) for text in (name, *cells))
            for name, cells in zip(header, columns, strict=True)
        ]
        for record in (header, *rows):
            padded = [text.ljust(width) for text, width in zip(record, widths, strict=True)]
            lines.append(GAP.join(padded).rstrip())
    if table.caption:
        lines += str(Text.from_markup(str(table.caption)).plain).splitlines()
    return "\n".join(lines) + "\n"


def terminal_table(table: Table, width: int) -> str:
    """``table`` drawn by rich for a terminal ``width`` columns wide (no line is longer)."""
    console = Console(width=width, force_terminal=False, color_system=None, record=False)
    with console.capture() as capture:
        if table.row_count == 0:
            console.print(f"{table.title or 'results'}: none", highlight=False)
            if table.caption:
                console.print(table.caption, highlight=False)
        else:
            console.print(table)
    return capture.get()


def _is_terminal(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(callable(isatty) and isatty())


def print_table(table: Table, stream: TextIO | None = None) -> None:
    """Print ``table`` to ``stream`` (default stdout): drawn to fit the terminal's width when
    it is a terminal, else one plain line per row (:func:`plain_table`)."""
    out = sys.stdout if stream is None else stream
    if _is_terminal(out):
        out.write(terminal_table(table, shutil.get_terminal_size().columns))
    else:
        out.write(plain_table(table))
    out.flush()


def fields_text(pairs: Sequence[tuple[str, object]], title: str | None = None) -> str:
    """A short record as ``key: value`` lines, the values aligned; ``None`` values are left
    out and a value with line breaks continues on indented lines."""
    shown = [(key, value) for key, value in pairs if value is not None]
    width = max((len(key) for key, _value in shown), default=0) + 1
    lines = [title] if title else []
    for key, value in shown:
        first, *rest = str(value).splitlines() or [""]
        lines.append(f"{(key + ':').ljust(width)} {first}".rstrip())
        lines += [f"{'':{width}} {line}".rstrip() for line in rest]
    return "\n".join(lines) + "\n"


def print_fields(
    pairs: Sequence[tuple[str, object]], title: str | None = None, stream: TextIO | None = None
) -> None:
    """Print :func:`fields_text` to ``stream`` (default stdout)."""
    out = sys.stdout if stream is None else stream
    out.write(fields_text(pairs, title))
    out.flush()
