"""Top-K frequent itemsets (Bhaskar et al.; ALGORITHMS.md §4): `fim.topk_em`, `fim.topk_laplace`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field, model_validator

from dpmine.wire.common import Epsilon, OperationRequest, Receipt, WireModel
from dpmine.wire.counts import CountNoise
from dpmine.wire.items import MAX_NUMERIC_BINS, ColumnNames

__all__ = [
    "MAX_ITEMSET_LENGTH",
    "MAX_TOP_K",
    "ReleasedItemset",
    "TopKItemsetsRequest",
    "TopKItemsetsResponse",
    "TopKMethod",
    "elementary_symmetric",
]

#: Public resource limits, checked before any data is read (§4.1).
MAX_TOP_K = 1000
MAX_ITEMSET_LENGTH = 6

TopKMethod = Literal["em", "laplace"]


def elementary_symmetric(sizes: Sequence[int], degree: int) -> list[int]:
    """[e_0, …, e_degree] of ``sizes`` (exact integers): e_ℓ counts the itemsets of ℓ items with
    at most one item per group when the groups hold ``sizes`` items (§4.1)."""
    coefficients = [1] + [0] * degree
    for size in sizes:
        for order in range(degree, 0, -1):
            coefficients[order] += coefficients[order - 1] * size
    return coefficients


class ReleasedItemset(WireModel):
    """One selected itemset (item names) and, if asked, its noisy count (may be negative)."""

    items: list[str]
    noisy_count: int | None = None


class TopKItemsetsResponse(WireModel):
    """The K itemsets in selection order (most frequent first, noisily: the order of the private
    selection, not of the noisy counts, which carry fresh noise)."""

    method: TopKMethod
    itemsets: list[ReleasedItemset]
    epsilon_selection: float
    epsilon_counts: float
    count_noise_scale: float | None = Field(
        default=None,
        description=(
            "Public scale of the noise of each released count: the discrete Laplace's b, "
            "P(noise = z) ∝ exp(−|z|/b), or on a zcdp dataset the discrete Gaussian's sigma, "
            "P(noise = z) ∝ exp(−z²/(2 sigma²)) (`count_noise`; None without counts)."
        ),
    )
    receipt: Receipt
    count_noise: CountNoise | None = Field(
        default=None,
        description=(
            "The noise law of the released counts (None without counts, or on releases "
            "stored before it was reported: Laplace)."
        ),
    )


class TopKItemsetsRequest(OperationRequest[TopKItemsetsResponse]):
    """The K most frequent itemsets of a length (or length range), privately.

    Without counts the whole ε goes to the selection; with counts ``count_share`` of it pays
    for the noisy counts of the K released itemsets (the paper's split is ½, §4.1).
    """

    k: int = Field(ge=1, le=MAX_TOP_K, description="How many itemsets to release.")
    min_length: int = Field(ge=1, le=MAX_ITEMSET_LENGTH, description="ℓ, or the shortest length")
    max_length: int | None = Field(
        default=None, ge=1, le=MAX_ITEMSET_LENGTH, description="Longest length (default ℓ)."
    )
    epsilon: Epsilon
    rho: float = Field(default=0.1, gt=0, lt=1, description="Failure probability of the truncation")
    with_counts: bool = True
    count_share: float = Field(default=0.5, gt=0, lt=1, description="Share of ε for the counts.")
    numeric_bins: int | None = Field(
        default=None,
        ge=2,
        le=MAX_NUMERIC_BINS,
        description=(
            "Numeric attributes as items, one per public bin: the declared grid as cut-points, "
            "else this many equal-width bins (as rule lists do). Default: numeric attributes "
            "give no items. Tables only."
        ),
    )
    columns: ColumnNames | None = Field(
        default=None,
        description="The attributes whose items may be used (default: all). Tables only.",
    )

    @model_validator(mode="after")
    def _lengths(self) -> TopKItemsetsRequest:
        if self.max_length is not None and self.max_length < self.min_length:
            raise ValueError(f"max_length {self.max_length} is below min_length {self.min_length}")
        return self

    @property
    def lengths(self) -> list[int]:
        """The itemset lengths asked for."""
        return list(range(self.min_length, (self.max_length or self.min_length) + 1))
