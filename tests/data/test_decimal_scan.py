"""The compiled plain-decimal scan equals the expression it reads (data/decimal_scan.py)."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

from dpmine_server.data.decimal_scan import PLAIN_DECIMAL, PLAIN_MAX_CHARS, plain_decimals

#: Every character class the expression reads, and two it refuses.
_ALPHABET = "05.+-eE x"


def _expected(cells: pa.StringArray) -> tuple[list[bool], list[bool]]:
    """The expression (Arrow's RE2) and the character count, as the chunks used them."""
    matches = pc.match_substring_regex(cells, PLAIN_DECIMAL).to_pylist()
    lengths = pc.utf8_length(cells).to_pylist()
    plain = [
        bool(m) and n is not None and n <= PLAIN_MAX_CHARS
        for m, n in zip(matches, lengths, strict=True)
    ]
    return plain, [n == 0 for n in lengths]


def _check(texts: list[str]) -> None:
    cells = pa.array(texts, pa.string())
    plain, empty = plain_decimals(cells)
    assert (plain.tolist(), empty.tolist()) == _expected(cells)


def test_every_short_string_of_the_alphabet() -> None:
    """All 597,871 strings of up to six characters over the alphabet."""
    texts = [
        "".join(letters)
        for size in range(7)
        for letters in itertools.product(_ALPHABET, repeat=size)
    ]
    _check(texts)


def test_lengths_around_the_bound_and_long_exponents() -> None:
    texts = [
        "1" * PLAIN_MAX_CHARS,
        "1" * (PLAIN_MAX_CHARS + 1),
        "-" + "1" * (PLAIN_MAX_CHARS - 1),
        "-" + "1" * PLAIN_MAX_CHARS,
        "1.5e123",
        "1.5e1234",
        "1.5e-12",
        ".5E+999",
        "5.e0",
        "\u0661\u0662",  # Arabic-Indic digits: not ASCII digits
        "1\u00a0",
        "",
    ]
    _check(texts)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.text(alphabet=st.sampled_from([*_ALPHABET, "9", "é", "\u0661"]), max_size=24)),
    st.integers(0, 5),
)
def test_random_cells_and_sliced_arrays(texts: list[str], cut: int) -> None:
    """Random cells, also in an array that starts inside its buffers (a slice, as the
    chunks of a record batch are)."""
    _check(texts)
    cells = pa.array(["pad"] * cut + texts, pa.string()).slice(cut)
    plain, empty = plain_decimals(cells)
    assert (plain.tolist(), empty.tolist()) == _expected(cells)


def test_large_strings_and_nulls() -> None:
    cells = pa.array(["1.5", None, "", "x"], pa.large_string())
    plain, empty = plain_decimals(cells)
    assert plain.tolist() == [True, False, False, False]
    assert empty.tolist() == [False, False, True, False]
    assert plain_decimals(pa.array([], pa.string()))[0].dtype == np.bool_
