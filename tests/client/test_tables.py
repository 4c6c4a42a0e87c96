"""dpmine.tables: a table fits the terminal's width, or prints one plain line per row when
the output is not a terminal; short records are aligned ``key: value`` lines."""

from __future__ import annotations

import io

import pytest
from rich.markup import escape
from rich.table import Table

from dpmine.tables import fields_text, plain_table, print_table, terminal_table


def _wide_table(rows: int = 3) -> Table:
    table = Table("rank", "left query", "right query", title="redescriptions")
    for rank in range(1, rows + 1):
        # Cells are escaped as the command lines escape them: "[odor = n]" is not markup.
        table.add_row(
            str(rank), escape("[odor = n] & [gill-size = b] & " * 4), "\\[class = e]\nline"
        )
    table.caption = "3 charged calls, ε spent = 1"
    return table


def test_piped_is_one_line_per_row_never_wrapped() -> None:
    lines = plain_table(_wide_table()).splitlines()
    assert lines[0] == "redescriptions"
    assert lines[1].split() == ["rank", "left", "query", "right", "query"]
    assert len(lines) == 1 + 1 + 3 + 1  # title, header, one line per row, caption
    assert all(
        line.startswith(f"{rank}     [odor = n]")
        for rank, line in zip("123", lines[2:5], strict=True)
    )
    assert lines[2].endswith("[class = e] line")  # markup rendered away, no line break
    assert lines[-1] == "3 charged calls, ε spent = 1"


def test_an_empty_table_is_one_line() -> None:
    table = Table("a", title="top-3 itemsets")
    assert plain_table(table) == "top-3 itemsets: none\n"


@pytest.mark.parametrize("width", [40, 80, 132])
def test_a_terminal_table_fits_the_width(width: int) -> None:
    drawn = terminal_table(_wide_table(), width)
    assert max(len(line) for line in drawn.splitlines()) <= width
    assert "┃" in drawn or "│" in drawn


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_print_table_asks_the_terminal_its_width(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "50")  # what shutil.get_terminal_size reads first
    terminal = _Terminal()
    print_table(_wide_table(), terminal)
    assert max(len(line) for line in terminal.getvalue().splitlines()) <= 50
    piped = io.StringIO()
    print_table(_wide_table(), piped)
    assert piped.getvalue() == plain_table(_wide_table())


def test_fields_are_aligned_and_none_is_left_out() -> None:
    text = fields_text([("dataset", "mushroom"), ("label", None), ("ε cap", "10\nnote")])
    assert text.splitlines() == ["dataset: mushroom", "ε cap:   10", "         note"]
