"""Planning a miner's run in its dataset's unit (issue #24): pure ε adds up; on a zCDP dataset
ρ adds up, an ε-DP exponential-mechanism draw declaring ε²/8 and any other ε-DP release ε²/2,
as the server's OperationSpec ``releases`` declare (server/dpmine_server/dp/zcdp.py). One place
for every miner that plans in ρ, so that they all price a release the same way."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Literal

from dpmine.amounts import epsilon_sum, epsilon_text
from dpmine.wire import Receipt

#: zCDP: ρ per ε² of an ε-DP exponential-mechanism draw (bounded range) and of any other ε-DP
#: release (issue #24; the server charges the same, server/dpmine_server/dp/zcdp.py).
EM_RHO = 0.125
GENERIC_RHO = 0.5


@dataclass(frozen=True)
class Composition:
    """How the releases of a run add up in the dataset's unit (issue #24): "pure" adds ε;
    "zcdp" adds ρ, an ε-DP exponential-mechanism draw costing ε²/8 (ε-DP EM is ε-bounded-range,
    Cesar & Rogers 2021) and any other ε-DP release ε²/2 (Bun & Steinke 2016, Prop. 1.4)."""

    unit: Literal["pure", "zcdp"] = "pure"

    def em(self, epsilon: float, count: int = 1) -> float:
        """The cost of ``count`` exponential-mechanism draws at ``epsilon`` each."""
        return count * (epsilon if self.unit == "pure" else epsilon * epsilon * EM_RHO)

    def generic(self, epsilon: float, count: int = 1) -> float:
        """The cost of ``count`` other ε-DP releases (Laplace counts) at ``epsilon`` each."""
        return count * (epsilon if self.unit == "pure" else epsilon * epsilon * GENERIC_RHO)


PURE = Composition("pure")
ZCDP = Composition("zcdp")


def implied_epsilon(rho: float, delta: float) -> float:
    """The ε of the (ε, δ)-DP that ρ-zCDP implies: ρ + 2√(ρ ln 1/δ) (Bun & Steinke 2016,
    Prop. 1.3; the server's figures use OpenDP's tighter conversion, never larger)."""
    return rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))


def spent_in_unit(receipts: Sequence[Receipt]) -> tuple[Literal["ε", "ρ"], Decimal]:
    """(unit, exact total) charged by ``receipts`` in their dataset's unit: the sum of the ρ
    charged on a zCDP dataset (ρ adds up; each receipt's ε is that call's implied ε at δ, and
    those do not), else of the ε charged."""
    rhos = [receipt.zcdp.rho_exact for receipt in receipts if receipt.zcdp is not None]
    if rhos:
        return "ρ", epsilon_sum(rhos)
    return "ε", epsilon_sum(receipt.epsilon_exact for receipt in receipts)


def spent_text(receipts: Sequence[Receipt]) -> tuple[Literal["ε", "ρ"], str]:
    """:func:`spent_in_unit` for display: ρ exactly, ε as :func:`~dpmine.amounts.epsilon_text`
    shows it."""
    unit, amount = spent_in_unit(receipts)
    return unit, str(amount) if unit == "ρ" else epsilon_text(amount)


def spent_of_planned(receipts: Sequence[Receipt], planned_exact: str) -> str:
    """ "<unit> spent: X of the Y planned." in the receipts' unit, ``planned_exact`` being the
    plan's exact total in that unit (the estimate's ``total_rho_exact`` on a zCDP dataset, else
    its ``total_epsilon_exact``)."""
    unit, used = spent_text(receipts)
    planned = planned_exact if unit == "ρ" else epsilon_text(Decimal(planned_exact))
    return f"{unit} spent: {used} of the {planned} planned."
