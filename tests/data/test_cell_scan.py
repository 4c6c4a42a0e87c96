"""The compiled numeric cell scan (data/cell_scan.py) equals the vectorised conversion it
shortcuts, cell for cell: values (with the sign of zero), missing and bad cells."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpmine_server.data import csv_chunks
from dpmine_server.data.cell_scan import TokenBytes, scan_numbers
from dpmine_server.data.decimal_scan import PLAIN_MAX_CHARS

#: Digits, every symbol of the decimal grammar, ASCII and non-ASCII whitespace, a missing
#: token and a letter: every branch of the scan.
_ALPHABET = "09.-+eE \t?\u00a0x"
#: Tokens that a stripped cell can equal, including ones that look like numbers or syntax, one
#: with edge whitespace (never equal to a stripped cell) and a non-ASCII one.
_TOKENS = ["", "?", "NA", "e", "0.5", " ?", "\u00a0", "é"]


def _vectorised(cells: pa.StringArray, text_as_missing: bool) -> csv_chunks.NumericChunk:
    """The definition: strip, match the tokens, convert (csv_chunks.numeric_chunk)."""
    values = csv_chunks.stripped(cells)
    missing = csv_chunks.missing_mask(values, _TOKENS)
    return csv_chunks.numeric_chunk(
        values, missing, text_as_missing=text_as_missing, integral=False
    )


def _check(cells: pa.StringArray) -> None:
    for text_as_missing in (False, True):
        expected = _vectorised(cells, text_as_missing)
        scanned = csv_chunks.numeric_cells(cells, _TOKENS, text_as_missing=text_as_missing)
        np.testing.assert_array_equal(scanned.values, expected.values)
        assert np.array_equal(np.signbit(scanned.values), np.signbit(expected.values))
        assert np.array_equal(scanned.missing, expected.missing)
        assert np.array_equal(scanned.bad, expected.bad)


def test_every_short_string_of_the_alphabet() -> None:
    """All 271,453 strings of up to five characters over the alphabet."""
    texts = [
        "".join(letters)
        for size in range(6)
        for letters in itertools.product(_ALPHABET, repeat=size)
    ]
    _check(pa.array(texts, pa.string()))


def test_the_scan_resolves_the_common_cells_and_leaves_the_rest() -> None:
    """Plain decimals of exact mantissa and power, and the tokens, are resolved (the fast path
    is taken, not silently skipped); everything the proof does not cover is left to the
    vectorised path, which then gives the correctly rounded value."""
    resolved = ["26.8981", "-21.3967", " 9.90296\t", "+.5", "5.", "-0", "1e22", "1.5E-7", "?", ""]
    resolved += ["9007199254740992", "0.000000000000000001"]
    left = [
        "9007199254740993",  # mantissa above 2**53
        "1e23",  # power above 22
        "123456789.123456789e-5",  # more than PLAIN_MAX_CHARS characters
        "\u00a01.5",  # a non-ASCII end
        "inf",
        "1_000",
        "x",
        "1e",
    ]
    cells = pa.array(resolved + left, pa.string())
    scanned = scan_numbers(cells, TokenBytes.of(_TOKENS))
    assert scanned.resolved.tolist() == [True] * len(resolved) + [False] * len(left)
    assert scanned.missing.tolist() == [text.strip() in _TOKENS for text in resolved + left]
    numbers = [i for i, text in enumerate(resolved) if text.strip() not in _TOKENS]
    assert scanned.values[numbers].tolist() == [float(resolved[i]) for i in numbers]
    assert np.signbit(scanned.values[resolved.index("-0")])
    _check(cells)
    assert csv_chunks.numeric_cells(cells, _TOKENS, text_as_missing=False).values[
        len(resolved)
    ] == float("9007199254740993")


def test_a_generated_continuous_column_is_resolved_whole() -> None:
    """Six significant digits, as the loading benchmark writes them: every cell in one pass."""
    rng = np.random.default_rng(3)
    texts = np.char.mod("%.6g", rng.normal(0, 60, 5_000)).tolist()
    cells = pa.array(texts, pa.string())
    scanned = scan_numbers(cells, TokenBytes.of(_TOKENS))
    assert scanned.resolved.all()
    assert scanned.values.tolist() == [float(text) for text in texts]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.from_regex(r"\A[ \t]?[+-]?[0-9]{0,19}(\.[0-9]{0,19})?([eE][+-]?[0-9]{1,3})?\Z"),
            st.floats(allow_nan=False).map(repr),
            st.text(
                alphabet=st.sampled_from([*_ALPHABET, "1", "5", "é", "\u0661", "\x1c", "\x85"]),
                max_size=8,
            ),
        ),
        max_size=40,
    ),
    st.integers(0, 5),
)
def test_random_cells_and_sliced_arrays(texts: list[str], cut: int) -> None:
    """Random decimals (up to 19 digits each side, exponents of up to 3 digits), Python's own
    float texts and random strings, also in an array that starts inside its buffers."""
    _check(pa.array(texts, pa.string()))
    _check(pa.array(["pad"] * cut + texts, pa.string()).slice(cut))


@settings(max_examples=300, deadline=None)
@given(st.integers(-(2**60), 2**60) | st.integers(-(10**6), 10**6), st.integers(-22, 22))
def test_resolved_values_are_correctly_rounded(mantissa: int, power: int) -> None:
    """Clinger's fast path against Python's correctly rounded ``float`` of the text."""
    text = f"{mantissa}e{power}"
    scanned = scan_numbers(pa.array([text], pa.string()), TokenBytes.of([]))
    assert scanned.resolved[0] == (abs(mantissa) <= 2**53 and len(text) <= PLAIN_MAX_CHARS)
    if scanned.resolved[0]:
        assert scanned.values[0] == float(text)


def test_tokens_are_matched_by_length_and_first_byte() -> None:
    tokens = TokenBytes.of(["NA", "N/A", "nan", "NaN", "null", "", "?", "NA"])
    assert tokens.offsets.tolist() == [0, 0, 1, 3, 6, 9, 12, 16]  # sorted, repeats once
    cells = pa.array(["NA", "N/A", "NaN", "nan", "null", "nul", "NB", "", "?", "n/a"], pa.string())
    assert scan_numbers(cells, tokens).missing.tolist() == [True] * 5 + [False, False] + [
        True,
        True,
        False,
    ]


@pytest.mark.parametrize("cells", [pa.array(["1", None], pa.string())])
def test_a_null_cell_is_refused(cells: pa.StringArray) -> None:
    """Chunks are read with ``strings_can_be_null=False``: a null would be a reader change."""
    with pytest.raises(ValueError, match="no null cell"):
        scan_numbers(cells, TokenBytes.of([]))
