"""Exact privacy amounts for the ledger (DESIGN.md "The budget ledger", DP-ENGINES.md R1).

Amounts are integers in units of 10^-12 of their unit: pico-epsilon (:class:`Epsilon`, pure
ε-DP) or pico-rho (:class:`Rho`, ρ-zCDP; issue #24), so that 10 × 0.1 is exactly 1 and no float
rounding can ever under-count a charge. Conversions round *up* when charging and *down* when
handing an epsilon to a mechanism, so the noise is always at least as strong as the charge says.
The two units never mix: adding or comparing an Epsilon with a Rho is a TypeError.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import ClassVar, Literal, Self

__all__ = [
    "EPSILON_UNITS_PER_ONE",
    "MAX_TOTAL_EPSILON",
    "AccountingUnit",
    "BudgetError",
    "Epsilon",
    "LedgerAmount",
    "Rho",
    "ledger_amount",
]

#: How a dataset's ledger counts: "pure" (ε, composed by adding ε) or "zcdp" (ρ, adding ρ).
AccountingUnit = Literal["pure", "zcdp"]

EPSILON_UNITS_PER_ONE = 10**12
#: Largest amount the ledger represents (fits a signed 64-bit column with room to add).
MAX_TOTAL_EPSILON = 1_000_000


class BudgetError(ValueError):
    """An amount that cannot be charged: NaN, infinite, zero, negative or too large."""


@dataclass(frozen=True, order=True, slots=True)
class _Amount:
    """An exact, positive-or-zero privacy amount in 10^-12 units of ``NAME``."""

    NAME: ClassVar[str] = "amount"
    units: int

    def __post_init__(self) -> None:
        if self.units < 0:
            raise BudgetError(f"a privacy amount cannot be negative ({self.units} units)")
        if self.units > MAX_TOTAL_EPSILON * EPSILON_UNITS_PER_ONE:
            raise BudgetError(f"a privacy amount cannot exceed {MAX_TOTAL_EPSILON} {self.NAME}")

    @classmethod
    def zero(cls) -> Self:
        """The empty amount."""
        return cls(0)

    @classmethod
    def of_fraction(cls, value: Fraction) -> Self:
        """An exact positive cost, rounded up to whole units (a charge never under-counts)."""
        if value <= 0:
            raise BudgetError(f"a privacy cost must be positive, got {value}")
        return cls(math.ceil(value * EPSILON_UNITS_PER_ONE))

    @classmethod
    def charge(cls, value: float | int | str | Decimal) -> Self:
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
    def cap(cls, value: float | int | str | Decimal) -> Self:
        """A budget cap or grant, rounded *down* to whole units (never more than declared)."""
        decimal = _to_decimal(value)
        if decimal <= 0:
            raise BudgetError(f"a budget must be positive, got {value!r}")
        if decimal.adjusted() < -12:
            return cls(0)  # below one unit: round down without building 10**huge
        return cls(math.floor(Fraction(decimal) * EPSILON_UNITS_PER_ONE))

    def __add__(self, other: Self) -> Self:
        return type(self)(self.units + self._same_unit(other).units)

    def __sub__(self, other: Self) -> Self:
        return type(self)(self.units - self._same_unit(other).units)

    def _same_unit(self, other: Self) -> Self:
        if type(other) is not type(self):
            raise TypeError(f"cannot combine {self.NAME} with {other.NAME}")
        return other

    def split(self, parts: int) -> Self:
        """One of ``parts`` equal shares, rounded down (the shares never sum above the whole)."""
        if parts < 1:
            raise BudgetError(f"cannot split a budget into {parts} parts")
        return type(self)(self.units // parts)

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
        """The largest float not above the exact amount: a mechanism run at this amount never
        spends more than was charged."""
        exact = self.as_fraction()
        value = float(exact)
        if Fraction(value) > exact:
            value = math.nextafter(value, 0.0)
        return value


@dataclass(frozen=True, order=True, slots=True)
class Epsilon(_Amount):
    """An exact pure-DP amount in pico-epsilon units."""

    NAME: ClassVar[str] = "epsilon"


@dataclass(frozen=True, order=True, slots=True)
class Rho(_Amount):
    """An exact zero-concentrated-DP amount (ρ-zCDP, Bun & Steinke 2016) in pico-rho units."""

    NAME: ClassVar[str] = "rho"


#: What a ledger debits and reports: an amount in its dataset's unit.
LedgerAmount = Epsilon | Rho


def ledger_amount(unit: AccountingUnit, units: int) -> LedgerAmount:
    """The stored integer ``units`` of a dataset whose ledger counts in ``unit``."""
    return Rho(units) if unit == "zcdp" else Epsilon(units)


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
