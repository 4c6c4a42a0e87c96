"""Dry-run cost estimates (DP-ENGINES.md R9)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from dpmine.wire.common import Guarantee, WireModel

__all__ = ["EstimateRequest", "EstimateResponse", "PlannedCall", "PlannedCallCost"]


class PlannedCall(WireModel):
    """One call of a planned run: the operation name and its request body."""

    operation: str = Field(description="e.g. 'count.noisy' or 'red.compute_quality'")
    request: dict[str, Any]


class EstimateRequest(WireModel):
    """A list of calls to price; nothing is charged and no data is read."""

    calls: list[PlannedCall] = Field(min_length=1, max_length=100_000)


class PlannedCallCost(WireModel):
    """The exact cost of one planned call."""

    operation: str
    epsilon: float
    epsilon_exact: str
    guarantee: Guarantee


class EstimateResponse(WireModel):
    """Total cost of the plan and whether the remaining budget covers it."""

    calls: list[PlannedCallCost]
    total_epsilon: float
    total_epsilon_exact: str
    remaining_epsilon: float
    fits: bool
