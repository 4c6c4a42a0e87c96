"""Dry-run cost estimates (DP-ENGINES.md R9)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from dpmine.wire.common import AccountingUnit, Guarantee, WireModel

__all__ = [
    "MAX_ESTIMATE_CALLS",
    "MAX_ESTIMATE_DISTINCT_CALLS",
    "EstimateRequest",
    "EstimateResponse",
    "PlannedCall",
    "PlannedCallCost",
]

#: Most calls one estimate prices (a SerenadeCS run with 1000 initial pairs and τ=24 fits).
MAX_ESTIMATE_CALLS = 50_000
#: Most *different* calls one estimate prices (identical calls are priced once); a miner's plan
#: repeats a handful of calls.
MAX_ESTIMATE_DISTINCT_CALLS = 1000


class PlannedCall(WireModel):
    """One call of a planned run: the operation name and its request body."""

    operation: str = Field(description="e.g. 'count.noisy' or 'red.compute_quality'")
    request: dict[str, Any]


class EstimateRequest(WireModel):
    """A list of calls to price; nothing is charged and no data is read."""

    calls: list[PlannedCall] = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _not_too_many(cls, data: Any) -> Any:
        calls = data.get("calls") if isinstance(data, dict) else None
        if isinstance(calls, list) and len(calls) > MAX_ESTIMATE_CALLS:
            raise ValueError(
                f"an estimate prices at most {MAX_ESTIMATE_CALLS} calls, got {len(calls)}; "
                "split the plan into several estimates"
            )
        return data


class PlannedCallCost(WireModel):
    """The exact cost of one planned call."""

    operation: str
    epsilon: float
    epsilon_exact: str
    guarantee: Guarantee
    rho_exact: str | None = Field(
        default=None, description="On a zCDP dataset: the rho this call is charged (exact)."
    )


class EstimateResponse(WireModel):
    """Total cost of the plan and whether the remaining budget covers it."""

    calls: list[PlannedCallCost]
    total_epsilon: float
    total_epsilon_exact: str
    remaining_epsilon: float
    fits: bool = Field(description="Whether what is left covers the total, in the ledger's unit.")
    accounting: AccountingUnit = "pure"
    total_rho_exact: str | None = Field(
        default=None, description="On a zCDP dataset: the total rho the plan is charged."
    )
    remaining_rho_exact: str | None = Field(
        default=None, description="On a zCDP dataset: the rho left (min of grant and cap)."
    )
