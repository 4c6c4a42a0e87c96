"""Exact privacy amounts for the ledger (DESIGN.md "The budget ledger", DP-ENGINES.md R1).

Amounts are integers in units of 10^-12 epsilon ("pico-epsilon"), so that 10 × 0.1 is exactly
1 and no float rounding can ever under-count a charge. Conversions round *up* when charging and
*down* when handing an epsilon to a mechanism, so the noise is always at least as strong as the
charge says.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction

__all__ = ["EPSILON_UNITS_PER_ONE", "MAX_TOTAL_EPSILON", "BudgetError", "Epsilon"]

EPSILON_UNITS_PER_ONE = 10**12
#: Largest amount the ledger represents (fits a signed 64-bit column with room to add).
MAX_TOTAL_EPSILON = 1_000_000


class BudgetError(ValueError):
    """An amount that cannot be charged: NaN, infinite, zero, negative or too large."""


@dataclass(frozen=True, order=True, slots=True)
class Epsilon:
    """An exact, positive-or-zero privacy amount in pico-epsilon units."""

    units: int

    def __post_init__(self) -> None:
        if self.units < 0:
            raise BudgetError(f"a privacy amount cannot be negative ({self.units} units)")
        if self.units > MAX_TOTAL_EPSILON * EPSILON_UNITS_PER_ONE:
            raise BudgetError(f"a privacy amount cannot exceed {MAX_TOTAL_EPSILON} epsilon")

    @classmethod
    def zero(cls) -> Epsilon:
        """The empty amount."""
        return cls(0)

    @classmethod
    def charge(cls, value: float | int | str | Decimal) -> Epsilon:
        """A strictly positive cost, rounded up to whole units.

        Floats are read through their shortest decimal representation, so ``0.1`` costs exactly
        0.1. NaN, infinities, zero and negative values raise :class:`BudgetError`.
        """
        decimal = _to_decimal(value)
        if decimal <= 0:
            raise BudgetError(f"a privacy cost must be positive, got {value!r}")
        if decimal.adjusted() < -13:
            return cls(1)  # below one unit: round up without building 10**huge
        units = math.ceil(Fraction(decimal) * EPSILON_UNITS_PER_ONE)
        return cls(units)

    @classmethod
    def cap(cls, value: float | int | str | Decimal) -> Epsilon:
        """A budget cap or grant, rounded *down* to whole units (never more than declared)."""
        decimal = _to_decimal(value)
        if decimal <= 0:
            raise BudgetError(f"a budget must be positive, got {value!r}")
        if decimal.adjusted() < -12:
            return cls(0)  # below one unit: round down without building 10**huge
        return cls(math.floor(Fraction(decimal) * EPSILON_UNITS_PER_ONE))

    def __add__(self, other: Epsilon) -> Epsilon:
        return Epsilon(self.units + other.units)

    def __sub__(self, other: Epsilon) -> Epsilon:
        return Epsilon(self.units - other.units)

    def split(self, parts: int) -> Epsilon:
        """One of ``parts`` equal shares, rounded down (the shares never sum above the whole)."""
        if parts < 1:
            raise BudgetError(f"cannot split a budget into {parts} parts")
        return Epsilon(self.units // parts)

    def as_fraction(self) -> Fraction:
        """The exact value."""
        return Fraction(self.units, EPSILON_UNITS_PER_ONE)

    def as_decimal(self) -> Decimal:
        """The exact value as a Decimal (exact: 10^-12 units have a finite decimal expansion)."""
        return Decimal(self.units).scaleb(-12).normalize()

    def exact_str(self) -> str:
        """The exact value as a plain decimal string, e.g. ``'0.1'``."""
        text = format(self.as_decimal(), "f")
        return text

    def display(self) -> float:
        """The nearest float, for display only (never for noise scales)."""
        return float(self.as_fraction())

    def for_mechanism(self) -> float:
        """The largest float not above the exact amount: a mechanism run at this epsilon never
        spends more than was charged."""
        exact = self.as_fraction()
        value = float(exact)
        if Fraction(value) > exact:
            value = math.nextafter(value, 0.0)
        return value


def _to_decimal(value: float | int | str | Decimal) -> Decimal:
    if isinstance(value, bool):
        raise BudgetError("a privacy amount must be a number, not a Boolean")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise BudgetError(f"a privacy amount must be finite, got {value!r}")
        decimal = Decimal(repr(float(value)))  # float(): numpy floats repr as np.float64(...)
    else:
        try:
            decimal = Decimal(value)
        except (InvalidOperation, ValueError, TypeError) as error:
            raise BudgetError(f"{value!r} is not a number") from error
    if not decimal.is_finite():
        raise BudgetError(f"a privacy amount must be finite, got {value!r}")
    if decimal > MAX_TOTAL_EPSILON:
        raise BudgetError(f"a privacy amount cannot exceed {MAX_TOTAL_EPSILON} epsilon")
    return decimal
