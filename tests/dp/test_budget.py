"""Exact privacy amounts (DESIGN.md "The budget ledger", DP-ENGINES.md R1, dp/budget.py).

Amounts are integers of 10^-12 ε. Charges round up, caps and shares round down, and the float a
mechanism receives is never above the exact amount charged.
"""

from __future__ import annotations

import math
import tracemalloc
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpmine_server.dp.budget import (
    EPSILON_UNITS_PER_ONE,
    MAX_TOTAL_EPSILON,
    BudgetError,
    Epsilon,
)

UNIT = Fraction(1, EPSILON_UNITS_PER_ONE)
MAX_UNITS = MAX_TOTAL_EPSILON * EPSILON_UNITS_PER_ONE
PROPERTY = settings(max_examples=300, deadline=None, derandomize=True)

#: Positive decimals up to the ledger maximum, with up to 20 fractional digits.
positive_decimals = st.builds(
    lambda mantissa, exponent: Decimal(mantissa).scaleb(-exponent),
    st.integers(min_value=1, max_value=10**15),
    st.integers(min_value=0, max_value=20),
).filter(lambda d: d <= MAX_TOTAL_EPSILON)
amounts = st.builds(Epsilon, st.integers(min_value=0, max_value=MAX_UNITS))


# --------------------------------------------------------------------------------------------
# Exact arithmetic and rounding


def test_ten_charges_of_a_tenth_are_exactly_one() -> None:
    total = Epsilon.zero()
    for _ in range(10):
        total = total + Epsilon.charge(0.1)
    assert total == Epsilon.charge(1)
    assert total.exact_str() == "1"
    assert sum([0.1] * 10) != 1.0  # the float sum is what the units avoid


def test_charge_rounds_up_and_cap_rounds_down() -> None:
    assert Epsilon.charge(1e-13) == Epsilon(1)
    assert Epsilon.cap(1e-13) == Epsilon.zero()
    assert Epsilon.charge("0.0000000000011") == Epsilon(2)
    assert Epsilon.cap("0.0000000000019") == Epsilon(1)
    assert Epsilon.charge("0.5") == Epsilon.cap("0.5") == Epsilon(EPSILON_UNITS_PER_ONE // 2)


def test_floats_are_read_through_their_shortest_decimal() -> None:
    # The binary double nearest 0.1 is slightly above 0.1; the ledger charges exactly 0.1.
    assert Fraction(0.1) > Fraction(1, 10)
    assert Epsilon.charge(0.1).as_fraction() == Fraction(1, 10)
    assert Epsilon.charge(0.1) == Epsilon.charge("0.1") == Epsilon.charge(Decimal("0.1"))
    assert Epsilon.charge(1) == Epsilon.charge(1.0) == Epsilon.charge("1.000")


def test_charge_accepts_decimal_and_str() -> None:
    assert Epsilon.charge(Decimal("0.25")).exact_str() == "0.25"
    assert Epsilon.charge("1e-3").exact_str() == "0.001"
    assert Epsilon.charge(" 2.5 ").exact_str() == "2.5"  # Decimal() strips surrounding blanks
    assert Epsilon.cap(Decimal("1E+3")).exact_str() == "1000"
    assert Epsilon.charge(MAX_TOTAL_EPSILON) == Epsilon(MAX_UNITS)


@pytest.mark.parametrize(
    "value",
    [
        math.nan,
        math.inf,
        -math.inf,
        0,
        0.0,
        -0.0,
        -1,
        -1e-13,
        True,
        False,
        "abc",
        "",
        "nan",
        "sNaN",
        "Infinity",
        "-0",
        Decimal("NaN"),
        Decimal("-Infinity"),
        Decimal("0E-30"),
        1e7,
        "1e7",
        MAX_TOTAL_EPSILON + 1e-6,
        None,
        [1],
    ],
)
def test_invalid_amounts_raise_budget_error(value: Any) -> None:
    # ``Any``: some of these values are deliberately outside the declared parameter types.
    with pytest.raises(BudgetError):
        Epsilon.charge(value)
    with pytest.raises(BudgetError):
        Epsilon.cap(value)


def test_budget_error_is_a_value_error() -> None:
    assert issubclass(BudgetError, ValueError)


def test_units_are_bounded() -> None:
    assert Epsilon(MAX_UNITS).units == MAX_UNITS
    with pytest.raises(BudgetError):
        Epsilon(MAX_UNITS + 1)
    with pytest.raises(BudgetError):
        Epsilon(-1)
    with pytest.raises(BudgetError):
        Epsilon(MAX_UNITS) + Epsilon(1)
    with pytest.raises(BudgetError):
        Epsilon.zero() - Epsilon(1)
    assert Epsilon(5) - Epsilon(5) == Epsilon.zero()


def test_ordering_follows_the_exact_values() -> None:
    amounts_in_order = [Epsilon.charge(v) for v in ("1e-12", "0.1", 0.2, "0.30000000000000004", 1)]
    shuffled = [amounts_in_order[i] for i in (3, 0, 4, 1, 2)]
    assert sorted(shuffled) == amounts_in_order
    assert Epsilon.charge(0.1) < Epsilon.charge(0.2)
    assert Epsilon.charge(0.1) + Epsilon.charge(0.2) == Epsilon.charge(0.3)
    assert max(amounts_in_order) == Epsilon.charge(1)


# --------------------------------------------------------------------------------------------
# Conversions


def test_exact_str_is_plain_decimal() -> None:
    assert Epsilon.zero().exact_str() == "0"
    assert Epsilon(1).exact_str() == "0.000000000001"
    assert Epsilon(MAX_UNITS).exact_str() == "1000000"
    assert Epsilon(123_456_789_012_345).exact_str() == "123.456789012345"


def test_for_mechanism_is_below_a_tenth() -> None:
    # 0.1 is not a float; the mechanism gets the largest double below it.
    value = Epsilon.charge(0.1).for_mechanism()
    assert Fraction(value) < Fraction(1, 10)
    assert value == math.nextafter(0.1, 0.0)
    assert Epsilon.charge(0.5).for_mechanism() == 0.5


def test_for_mechanism_never_exceeds_many_random_decimals() -> None:
    rng = np.random.default_rng(2024)
    units = rng.integers(1, MAX_UNITS, size=5_000, endpoint=True)
    for unit in units.tolist():
        amount = Epsilon(unit)
        value = amount.for_mechanism()
        assert Fraction(value) <= amount.as_fraction()
        assert Fraction(math.nextafter(value, math.inf)) > amount.as_fraction()


def test_split_and_display() -> None:
    whole = Epsilon.charge(1)
    third = whole.split(3)
    assert third.exact_str() == "0.333333333333"
    assert third + third + third < whole
    assert whole.split(1) == whole
    assert whole.display() == 1.0
    for parts in (0, -1):
        with pytest.raises(BudgetError):
            whole.split(parts)


# --------------------------------------------------------------------------------------------
# Properties


@PROPERTY
@given(positive_decimals)
def test_charge_is_the_smallest_unit_multiple_at_or_above(value: Decimal) -> None:
    exact = Fraction(value)
    charged = Epsilon.charge(value).as_fraction()
    assert exact <= charged < exact + UNIT
    assert Epsilon.charge(str(value)) == Epsilon.charge(value)


@PROPERTY
@given(positive_decimals)
def test_cap_is_the_largest_unit_multiple_at_or_below(value: Decimal) -> None:
    exact = Fraction(value)
    capped = Epsilon.cap(value).as_fraction()
    assert exact - UNIT < capped <= exact


@PROPERTY
@given(st.floats(min_value=1e-12, max_value=MAX_TOTAL_EPSILON, allow_nan=False))
def test_mechanism_epsilon_never_exceeds_a_float_charge(value: float) -> None:
    charged = Epsilon.charge(value)
    assert charged.as_fraction() >= Fraction(Decimal(repr(value)))
    assert Fraction(charged.for_mechanism()) <= charged.as_fraction()


@PROPERTY
@given(amounts)
def test_for_mechanism_is_the_largest_float_not_above(amount: Epsilon) -> None:
    value = amount.for_mechanism()
    assert Fraction(value) <= amount.as_fraction()
    assert Fraction(math.nextafter(value, math.inf)) > amount.as_fraction()


@PROPERTY
@given(amounts)
def test_exact_str_round_trips(amount: Epsilon) -> None:
    text = amount.exact_str()
    assert "E" not in text.upper()
    assert Decimal(text) == amount.as_decimal()
    assert Fraction(Decimal(text)) == amount.as_fraction()
    if amount.units > 0:
        assert Epsilon.charge(text) == amount == Epsilon.cap(text)


@PROPERTY
@given(amounts, st.integers(min_value=1, max_value=10**6))
def test_split_never_sums_above_the_whole(whole: Epsilon, parts: int) -> None:
    share = whole.split(parts)
    assert share.units * parts <= whole.units
    assert whole.units - share.units * parts < parts  # and wastes less than one unit per part


@PROPERTY
@given(amounts, amounts)
def test_ordering_and_sums_match_fractions(a: Epsilon, b: Epsilon) -> None:
    assert (a < b) == (a.as_fraction() < b.as_fraction())
    assert (a == b) == (a.as_fraction() == b.as_fraction())
    if a.units + b.units <= MAX_UNITS:
        assert (a + b).as_fraction() == a.as_fraction() + b.as_fraction()
    if a >= b:
        assert (a - b).as_fraction() == a.as_fraction() - b.as_fraction()


# --------------------------------------------------------------------------------------------
# Bugs found while writing these tests (reported; kept as real tests)


def test_numpy_float64_charges_like_the_same_python_float() -> None:
    """BUG (reported): ``Epsilon.charge(np.float64(0.1))`` raises ``decimal.InvalidOperation``.

    ``np.float64`` subclasses ``float``, so ``_to_decimal`` takes the float branch and parses
    ``repr(value)``; under numpy ≥ 2 that is ``'np.float64(0.1)'``, which ``Decimal`` rejects
    outside the ``try`` (an ``ArithmeticError``, not a :class:`BudgetError`). Fix: parse
    ``repr(float(value))``.
    """
    assert Epsilon.charge(np.float64(0.1)) == Epsilon.charge(0.1)
    assert Epsilon.cap(np.float64(2.5)) == Epsilon.cap(2.5)
    with pytest.raises(BudgetError):
        Epsilon.charge(np.float64("nan"))


def test_tiny_decimal_strings_cost_bounded_memory() -> None:
    """BUG (reported): ``Fraction(Decimal('1e-N'))`` builds ``10**N``; work grows with N.

    ``charge('1e-1000000')`` peaks at ~1.9 MB and takes 0.16 s, ``'1e-10000000'`` takes ~6 s, and
    ``'1e-999999999'`` (12 characters) exhausts memory and time. Any amount below one unit should
    round to 1 unit (charge) or 0 (cap) without the big integer, e.g. by checking
    ``decimal.adjusted()`` before converting to a Fraction.
    """
    tracemalloc.start()
    try:
        charged = Epsilon.charge("1e-300000")
        capped = Epsilon.cap(Decimal("1e-300000"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert charged == Epsilon(1)
    assert capped == Epsilon.zero()
    assert peak < 64 * 1024, f"peak allocation {peak} bytes"
