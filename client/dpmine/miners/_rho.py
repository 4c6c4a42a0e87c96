"""Planning a miner's run in its dataset's unit (issue #24): pure ε adds up; on a zCDP dataset
ρ adds up, an ε-DP exponential-mechanism draw declaring ε²/8 and any other ε-DP release ε²/2,
as the server's OperationSpec ``releases`` declare (server/dpmine_server/dp/zcdp.py). One place
for every miner that plans in ρ, so that they all price a release the same way."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Literal

from dpmine.amounts import epsilon_sum, epsilon_text
from dpmine.errors import ParameterError
from dpmine.wire import EstimateResponse, Receipt

if TYPE_CHECKING:
    from dpmine.connection import DatasetHandle

#: zCDP: ρ per ε² of an ε-DP exponential-mechanism draw (bounded range) and of any other ε-DP
#: release (issue #24; the server charges the same, server/dpmine_server/dp/zcdp.py).
EM_RHO = 0.125
GENERIC_RHO = 0.5
#: A run planned in ρ aims at the budget less this fraction: the server rounds each call's ρ up
#: to a whole pico-ρ (after a 2⁻⁴⁰ float slack), so the run's charge stays within the budget.
RHO_MARGIN = 1e-6


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

    def em_epsilon(self, cost: float) -> float:
        """The ε of one exponential-mechanism draw that costs ``cost`` (inverse of :meth:`em`)."""
        return cost if self.unit == "pure" else math.sqrt(max(cost, 0.0) / EM_RHO)

    def generic_epsilon(self, cost: float) -> float:
        """The ε of one other ε-DP release that costs ``cost`` (inverse of :meth:`generic`)."""
        return cost if self.unit == "pure" else math.sqrt(max(cost, 0.0) / GENERIC_RHO)

    def scaled(self, factor: float) -> float:
        """The factor on every ε that multiplies the run's cost by ``factor`` (cost is linear in
        ε under pure composition, quadratic under zCDP)."""
        return factor if self.unit == "pure" else math.sqrt(factor)


PURE = Composition("pure")
ZCDP = Composition("zcdp")


def epsilon_for_rho(rho: float, releases: Iterable[tuple[float, float]]) -> float:
    """The E whose plan costs exactly ``rho``, for a plan that gives every release a fixed share
    of E (a preset's split): ``releases`` holds (ρ per ε² of one release, its ε over E), one
    pair per release. zCDP adds up, so the plan costs E²·Σ wᵢ·sᵢ² and E = √(ρ / Σ wᵢ·sᵢ²)."""
    per_e2 = sum(weight * share * share for weight, share in releases)
    if not per_e2 > 0:
        raise ValueError("a plan in rho needs at least one release")
    return math.sqrt(rho / per_e2)


#: What the errors of TopKItemsets and DPBayesianRuleList add: ``rho`` was their threshold
#: quantile before it became the run's budget (issue #24).
RENAMED_QUANTILE = " (the threshold quantile that rho= used to set is now threshold_quantile=)"


def check_budget(rho: object, epsilon: object, default_epsilon: float, hint: str = "") -> None:
    """A ρ budget is a positive number and comes instead of ``epsilon`` (which must then be
    left at its default ``default_epsilon``); a ParameterError says what to fix (``hint``
    appended)."""
    if rho is None:
        return
    if not (isinstance(rho, int | float) and math.isfinite(rho)) or rho <= 0:
        raise ParameterError(f"rho must be a positive number, got {rho!r}{hint}")
    if epsilon != default_epsilon:
        raise ParameterError(
            f"give the budget once: epsilon= on a pure-DP dataset, rho= on a zCDP one{hint}"
        )


def composition_for(
    dataset: DatasetHandle, rho: float | None, miner: str, hint: str = ""
) -> Composition:
    """The dataset's unit, or a ParameterError (before any call) when the budget was given in
    the other one: ``rho`` on a zCDP dataset, ``epsilon`` (``rho`` None) on a pure one
    (``hint`` appended to the second)."""
    if dataset.info.accounting == "zcdp":
        if rho is None:
            raise ParameterError(
                f"dataset {dataset.id!r} keeps its ledger in zCDP rho: give the run's budget "
                f"as rho=, e.g. {miner}(rho=0.0174) for about (epsilon = 1, delta = 1e-6) "
                "(epsilon= is a pure-DP budget); nothing was spent"
            )
        return ZCDP
    if rho is not None:
        raise ParameterError(
            f"dataset {dataset.id!r} keeps its ledger in pure epsilon: give the run's budget "
            f"as epsilon=, not rho= (rho is for zCDP datasets); nothing was spent{hint}"
        )
    return PURE


def zcdp_delta(dataset: DatasetHandle, estimate: EstimateResponse) -> float | None:
    """The δ at which a zCDP dataset shows ρ as (ε, δ) (a free budget read), else None."""
    if estimate.accounting != "zcdp":
        return None
    status = dataset.budget().zcdp
    return None if status is None else status.delta


def rho_lines(
    estimate: EstimateResponse, budget: float | None = None, delta: float | None = None
) -> list[str]:
    """On a zCDP dataset: the ρ of each planned call (runs of equal calls on one line), the
    total against the ``budget`` and the (ε, δ) the total implies at ``delta``
    (:func:`implied_epsilon`); nothing on a pure dataset."""
    if estimate.accounting != "zcdp" or estimate.total_rho_exact is None:
        return []
    lines = []
    start = 0
    costs = estimate.calls
    for index, cost in enumerate(costs):
        last = index + 1 == len(costs)
        if last or (costs[index + 1].operation, costs[index + 1].rho_exact) != (
            cost.operation,
            cost.rho_exact,
        ):
            calls = f"call {start + 1}" if start == index else f"calls {start + 1}–{index + 1}"
            each = "" if start == index else " each"
            lines.append(
                f"{calls}: {cost.operation} at ε = {epsilon_text(cost.epsilon_exact)}: "
                f"ρ = {cost.rho_exact}{each}"
            )
            start = index + 1
    shown = "" if budget is None else f" (budget ρ = {budget:g})"
    lines.append(f"total ρ = {estimate.total_rho_exact}{shown}")
    if delta is not None:
        total = float(estimate.total_rho_exact)
        lines.append(
            f"the run implies (ε = {implied_epsilon(total, delta):.4g}, "
            f"δ = {delta:g}) by ε = ρ + 2√(ρ ln 1/δ)"
        )
    return lines


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


def amount_text(unit: Literal["ε", "ρ"], amount: Decimal) -> str:
    """An exact amount for display: ρ exactly, ε as :func:`~dpmine.amounts.epsilon_text`
    shows it."""
    return str(amount) if unit == "ρ" else epsilon_text(amount)


def spent_text(receipts: Sequence[Receipt]) -> tuple[Literal["ε", "ρ"], str]:
    """:func:`spent_in_unit` for display (:func:`amount_text`)."""
    unit, amount = spent_in_unit(receipts)
    return unit, amount_text(unit, amount)


def spent_of_planned(receipts: Sequence[Receipt], planned_exact: str) -> str:
    """ "<unit> spent: X of the Y planned." in the receipts' unit, ``planned_exact`` being the
    plan's exact total in that unit (the estimate's ``total_rho_exact`` on a zCDP dataset, else
    its ``total_epsilon_exact``)."""
    unit, used = spent_text(receipts)
    planned = planned_exact if unit == "ρ" else epsilon_text(Decimal(planned_exact))
    return f"{unit} spent: {used} of the {planned} planned."
