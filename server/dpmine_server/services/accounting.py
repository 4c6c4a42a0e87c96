"""How a dataset's ledger unit is read and shown (issue #24; docs/operators.md "Accounting").

A "pure" dataset's ``*_units`` count pico-epsilon; a "zcdp" dataset's count pico-rho. These
helpers turn the stored integers into the wire's figures: on a zCDP dataset a total is shown
as the epsilon it implies at the owner's delta (or the public default), and a remaining amount
as the largest epsilon one generic epsilon-DP call could still be charged, sqrt(2 rho left)
(a generic epsilon-DP release costs epsilon^2/2, Bun & Steinke 2016 Prop. 1.4). All of it
depends only on the owner's settings and the ledger, never on the data.
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

from dpmine.wire import AccountingUnit, ZcdpAmounts
from dpmine_server.db.models import Dataset
from dpmine_server.dp.budget import Rho, ledger_amount
from dpmine_server.dp.zcdp import DEFAULT_DELTA, epsilon_of_rho

__all__ = [
    "dataset_delta",
    "dataset_unit",
    "display_remaining",
    "display_total",
    "rho_amounts",
    "zcdp_amounts",
]


def dataset_unit(dataset: Dataset) -> AccountingUnit:
    """The dataset's ledger unit."""
    return "zcdp" if dataset.accounting == "zcdp" else "pure"


def dataset_delta(dataset: Dataset) -> tuple[Decimal, bool]:
    """The delta a zCDP dataset's rho is shown at, and whether it is the public default."""
    if dataset.accounting_delta is None:
        return DEFAULT_DELTA, True
    return Decimal(dataset.accounting_delta), False


def largest_generic_epsilon(rho: Rho) -> float:
    """The largest float epsilon whose generic cost epsilon^2/2 stays within ``rho``."""
    if rho.units == 0:
        return 0.0
    bound = 2 * rho.as_fraction()
    value = math.sqrt(float(bound))
    while Fraction(value) ** 2 > bound:
        value = math.nextafter(value, 0.0)
    return value


def display_total(dataset: Dataset, units: int) -> float:
    """A cap, grant, spending or charge for display: epsilon, or the epsilon rho implies."""
    amount = ledger_amount(dataset_unit(dataset), units)
    if isinstance(amount, Rho):
        return epsilon_of_rho(amount, dataset_delta(dataset)[0])
    return amount.display()


def display_remaining(unit: AccountingUnit, units: int) -> float:
    """What is left for display: epsilon, or the largest epsilon one generic call can spend."""
    amount = ledger_amount(unit, max(units, 0))
    if isinstance(amount, Rho):
        return largest_generic_epsilon(amount)
    return amount.display()


def zcdp_amounts(
    dataset: Dataset, units: int, *, spent: int | None = None, remaining: int | None = None
) -> ZcdpAmounts | None:
    """The exact rho figures of a zCDP dataset (None on a pure one)."""
    if dataset_unit(dataset) != "zcdp":
        return None
    return rho_amounts(units, dataset_delta(dataset), spent=spent, remaining=remaining)


def rho_amounts(
    units: int,
    delta: tuple[Decimal, bool],
    *,
    spent: int | None = None,
    remaining: int | None = None,
) -> ZcdpAmounts:
    """The wire figures of ``units`` pico-rho shown at ``delta`` (value, is the default)."""
    at, is_default = delta
    total = Rho(units)
    return ZcdpAmounts(
        rho=total.display(),
        rho_exact=total.exact_str(),
        rho_spent=None if spent is None else Rho(spent).display(),
        rho_remaining=None if remaining is None else Rho(max(remaining, 0)).display(),
        delta=float(at),
        delta_is_default=is_default,
        epsilon=epsilon_of_rho(total, at),
        epsilon_spent=None if spent is None else epsilon_of_rho(Rho(spent), at),
    )
