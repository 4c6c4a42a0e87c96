"""Budgets as people read them (issue #22): the exact decimal, never a float's residue."""

from __future__ import annotations

from decimal import Decimal

import pytest

from dpmine.amounts import epsilon_sum, epsilon_text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.7, "0.7"),
        (0.1 * 7, "0.7"),  # 0.7000000000000001: its residue is below the ledger's pico-ε
        (0.1 + 0.2, "0.3"),
        ("0.700000000000", "0.7"),
        (Decimal("2.000"), "2"),
        (10.0, "10"),
        (1000, "1000"),
        (100.0, "100"),
        (1e-12, "0.000000000001"),
        ("6.299999995", "6.299999995"),
        (6.299999995, "6.299999995"),  # an exact amount a little under 6.3 stays exact
        (0.0, "0"),
        (Decimal("0E-12"), "0"),
        (123.456789012345, "123.456789012345"),
    ],
)
def test_epsilon_text(value: float | int | str | Decimal, text: str) -> None:
    assert epsilon_text(value) == text


def test_exact_strings_are_never_rounded() -> None:
    """The server's exact strings keep every pico-ε (floats are read at pico-ε resolution)."""
    assert epsilon_text("0.999999999999") == "0.999999999999"
    assert epsilon_text("1E+3") == "1000"


def test_booleans_are_refused() -> None:
    with pytest.raises(TypeError):
        epsilon_text(True)


def test_epsilon_sum_is_exact() -> None:
    assert epsilon_sum(["0.1"] * 10) == 1
    assert epsilon_text(epsilon_sum(["0.3", "0.4"])) == "0.7"
    assert epsilon_sum([]) == 0
