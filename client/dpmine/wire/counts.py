"""Generic noisy count (`count.noisy`, ALGORITHMS.md §0.6)."""

from __future__ import annotations

from pydantic import Field, model_validator

from dpmine.wire.common import Epsilon, OperationRequest, Receipt, WireModel
from dpmine.wire.queries import QueryInput, check_query_limits

__all__ = ["NoisyCountRequest", "NoisyCountResponse"]


class NoisyCountResponse(WireModel):
    """``count`` = true count + discrete Laplace(1/epsilon); may be negative (do not clamp here)."""

    count: int
    receipt: Receipt


class NoisyCountRequest(OperationRequest[NoisyCountResponse]):
    """Count the rows satisfying ``predicate`` (all rows when it is null), plus Laplace noise."""

    predicate: QueryInput | None = Field(
        default=None, description="A query over any attributes; null counts every row."
    )
    epsilon: Epsilon

    @model_validator(mode="after")
    def _within_limits(self) -> NoisyCountRequest:
        if self.predicate is not None:
            check_query_limits(self.predicate, side="predicate")
        return self
