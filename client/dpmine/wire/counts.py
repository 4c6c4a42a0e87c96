"""Generic noisy count (`count.noisy`, ALGORITHMS.md §0.6)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from dpmine.wire.common import Epsilon, OperationRequest, Receipt, WireModel
from dpmine.wire.queries import QueryInput, check_query_limits

__all__ = ["CountNoise", "CountNoiseKind", "NoisyCountRequest", "NoisyCountResponse"]

#: The noise of released counts: discrete Laplace on pure datasets, the discrete Gaussian of
#: the same ρ on zCDP datasets (issue #24).
CountNoiseKind = Literal["laplace", "discrete_gaussian"]


class CountNoise(WireModel):
    """The public law of the noise added to every released count of one response."""

    kind: CountNoiseKind = Field(
        description="'laplace' (pure datasets) or 'discrete_gaussian' (zcdp datasets)."
    )
    scale: float = Field(
        description="The discrete Laplace's scale b, or the discrete Gaussian's sigma, per count."
    )


class NoisyCountResponse(WireModel):
    """``count`` = true count + noise (``noise``: discrete Laplace of scale 1/epsilon on a pure
    dataset, discrete Gaussian of sigma 1/epsilon on a zCDP one); may be negative (do not
    clamp here)."""

    count: int
    receipt: Receipt
    noise: CountNoise | None = Field(
        default=None,
        description="The noise law; null on releases stored before it was reported (Laplace).",
    )


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
