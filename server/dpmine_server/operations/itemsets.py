"""Private top-K frequent itemsets: ``fim.topk_em`` and ``fim.topk_laplace`` (ALGORITHMS.md §4).

Both follow Bhaskar et al. in the count domain (add/remove neighbours, §4.1):

1. c_K = K-th largest count among valid itemsets of the asked lengths (0 if fewer occur);
   ψ = c_K − Γ with Γ from public parameters only; τ = max(ψ, 0). The truncated count
   ĉ(I) = max(c(I), τ) has sensitivity 1 (Bhaskar Lemma 2).
2. Selection (cost ε_s): the K largest ĉ(I) + noise over the whole universe, in order —
   Gumbel noise of scale 2K/ε_s (= K rounds of the exponential mechanism with ε_s/K each,
   Algorithm 1) or Laplace noise of scale 2K/ε_s (Algorithm 2).
3. Counts (cost ε_p, optional): c(I) + discrete Laplace(K/ε_p) for the K selected itemsets.

The universe is never enumerated: itemsets with count ≥ B (mined with Eclat) are explicit, the
rest is a tail whose scores are ≤ B − 1, sampled exactly by :func:`noisy_top_k_with_tail`.
B only changes the running time, never the output distribution, so it may depend on the data
(it is never released); it starts at ⌊τ⌋ + 1 + ⌈scale⌉ and rises if the explicit set would
exceed a memory cap. No data-dependent error exists after the charge.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any, Literal

import numpy as np

from dpmine.wire import (
    DatasetMetadata,
    Guarantee,
    TopKItemsetsRequest,
    TopKItemsetsResponse,
)
from dpmine_server.data.columns import ColumnStore
from dpmine_server.data.itemsets import (
    ItemCatalog,
    Itemset,
    TransactionIndex,
    item_catalog,
    transaction_index,
)
from dpmine_server.dp.budget import Epsilon
from dpmine_server.dp.mechanisms import discrete_laplace
from dpmine_server.dp.topk import Noise, TailCandidate, noisy_top_k_with_tail
from dpmine_server.operations.base import OperationSpec, Progress

__all__ = [
    "MAX_EXPLICIT_ITEMSETS",
    "MAX_UNIVERSE",
    "OPERATIONS",
    "explicit_itemsets",
    "explicit_threshold",
    "kth_largest_count",
    "margin",
    "top_count",
    "top_k_itemsets",
    "truncation_level",
]

#: Explicit (mined) itemsets kept in memory at most; the rest goes to the exact tail sampler.
MAX_EXPLICIT_ITEMSETS = 2_000_000
#: Largest universe accepted (public check before any data access).
MAX_UNIVERSE = 10**30

Method = Literal["em", "laplace"]


def margin(method: Method, *, k: int, universe: int, epsilon_selection: float, rho: float) -> float:
    """Γ in count units (§4.1): Alg. 1 (2K/ε_s)(ln(K/ρ) + ln M); Alg. 2 (4K/ε_s) ln(M/ρ)."""
    if method == "em":
        return (2 * k / epsilon_selection) * (math.log(k / rho) + math.log(universe))
    return (4 * k / epsilon_selection) * math.log(universe / rho)


def kth_largest_count(spectrum: dict[int, int], k: int) -> int | None:
    """c_K from a count spectrum (counts ≥ some threshold); None if it holds fewer than K."""
    seen = 0
    for count in sorted(spectrum, reverse=True):
        seen += spectrum[count]
        if seen >= k:
            return count
    return None


def explicit_threshold(spectrum: dict[int, int], start: int) -> int:
    """The smallest threshold ≥ ``start`` whose itemsets (per ``spectrum``) fit the cap."""
    kept = 0
    for count in sorted((c for c in spectrum if c >= start), reverse=True):
        if kept + spectrum[count] > MAX_EXPLICIT_ITEMSETS:
            return count + 1
        kept += spectrum[count]
    return start


def top_count(index: TransactionIndex, *, k: int, lengths: Sequence[int], floor: int) -> int | None:
    """c_K if at least K valid itemsets have a count ≥ ``floor``, else None (private).

    Searched top-down with count spectra at halving thresholds from the largest single-item
    count: cheap passes of the C miner, never below ``floor``.
    """
    floor = max(floor, 1)
    threshold = max(index.max_item_count(), floor)
    while True:
        c_k = kth_largest_count(index.spectrum(threshold, lengths), k)
        if c_k is not None or threshold <= floor:
            return c_k
        threshold = max(threshold // 2, floor)


def truncation_level(
    index: TransactionIndex, *, k: int, lengths: Sequence[int], gamma: float
) -> float:
    """τ = max(c_K − Γ, 0) (private, never released). c_K is needed only above Γ: if fewer
    than K itemsets reach ⌊Γ⌋ + 1, then c_K ≤ Γ and τ = 0 whatever c_K is."""
    c_k = top_count(index, k=k, lengths=lengths, floor=math.floor(gamma) + 1)
    return 0.0 if c_k is None else max(c_k - gamma, 0.0)


def explicit_itemsets(
    index: TransactionIndex, start: int, lengths: Sequence[int], universe: int
) -> tuple[int, dict[Itemset, int]]:
    """(B, every itemset with count ≥ B): B = ``start`` unless that would exceed the memory
    cap, checked with a spectrum pass only when the public universe could exceed it."""
    threshold = start
    if universe > MAX_EXPLICIT_ITEMSETS:
        threshold = explicit_threshold(index.spectrum(start, lengths), start)
    return threshold, index.mine(threshold, lengths)


def _uniform_itemset(
    catalog: ItemCatalog, lengths: Sequence[int], weights: Sequence[int], rng: np.random.Generator
) -> Itemset:
    """A valid itemset drawn uniformly from the universe (length ∝ its number of itemsets;
    then a uniform ℓ-subset of items, redrawn until no two items share a group)."""
    total = sum(weights)
    pick = int(rng.integers(total)) if total < 2**63 else int(rng.random() * total)
    length = lengths[-1]
    for candidate, weight in zip(lengths, weights, strict=True):
        if pick < weight:
            length = candidate
            break
        pick -= weight
    group_of = catalog.group_of
    while True:
        items = sorted(int(i) for i in rng.choice(len(catalog.names), size=length, replace=False))
        if len({group_of[i] for i in items}) == length:
            return tuple(items)


def top_k_itemsets(
    index: TransactionIndex,
    *,
    method: Method,
    k: int,
    lengths: Sequence[int],
    epsilon_selection: float,
    epsilon_counts: float | None,
    rho: float,
    rng: np.random.Generator,
) -> list[tuple[Itemset, int | None]]:
    """K itemsets (selection order) and their noisy counts; (ε_s + ε_p)-DP (§4.2, §4.3).

    Sensitivity 1 of every truncated count; the selection's noise scale is 2K/ε_s for both
    methods; counts get discrete Laplace with L1 sensitivity K at ε_p.
    """
    catalog = index.catalog
    weights = [catalog.universe_size([length]) for length in lengths]
    universe = sum(weights)
    scale = 2 * k / epsilon_selection
    gamma = margin(method, k=k, universe=universe, epsilon_selection=epsilon_selection, rho=rho)
    tau = truncation_level(index, k=k, lengths=lengths, gamma=gamma)
    # Any B > τ gives the same distribution; B − 1 ≈ τ + scale keeps the tail's scores close
    # to τ, so few tail itemsets are revealed (measured: a higher B only adds reveals).
    start = math.floor(tau) + 1 + math.ceil(scale)
    threshold, explicit = explicit_itemsets(index, start, lengths, universe)
    itemsets = list(explicit)
    scores = np.array([max(explicit[i], tau) for i in itemsets], dtype=np.float64)
    known = set(itemsets)

    def draw_tail(generator: np.random.Generator) -> TailCandidate:
        while True:
            itemset = _uniform_itemset(catalog, lengths, weights, generator)
            if itemset not in known:
                return TailCandidate(key=itemset, score=max(index.count(itemset), tau))

    noise: Noise = "gumbel" if method == "em" else "laplace"
    chosen = noisy_top_k_with_tail(
        scores,
        k=k,
        noise=noise,
        scale=scale,
        rng=rng,
        tail_size=universe - len(itemsets),
        tail_bound=float(threshold - 1),
        draw_tail=draw_tail,
    )
    selected: list[Itemset] = [
        itemsets[label] if isinstance(label, int) else _as_itemset(label) for label in chosen
    ]
    if epsilon_counts is None:
        return [(itemset, None) for itemset in selected]
    true_counts = [explicit.get(itemset, None) for itemset in selected]
    exact = [
        c if c is not None else index.count(s) for c, s in zip(true_counts, selected, strict=True)
    ]
    noisy = discrete_laplace(exact, epsilon=epsilon_counts, sensitivity=k)
    return [(itemset, int(value)) for itemset, value in zip(selected, noisy, strict=True)]


def _as_itemset(label: object) -> Itemset:
    if not isinstance(label, tuple):
        raise TypeError("tail labels are itemsets")
    return tuple(int(item) for item in label)


# -- operation specs ---------------------------------------------------------------------------


def _split(request: TopKItemsetsRequest, epsilon: Epsilon) -> tuple[float, float | None]:
    """(ε_s, ε_p) with ε_s + ε_p ≤ the charged ε exactly (floats rounded down as needed)."""
    total = epsilon.for_mechanism()
    if not request.with_counts:
        return total, None
    counts = total * request.count_share
    selection = total - counts
    while Fraction(selection) + Fraction(counts) > epsilon.as_fraction():
        selection = math.nextafter(selection, 0.0)
    return selection, counts


def _validate(request: TopKItemsetsRequest, metadata: DatasetMetadata) -> None:
    if (
        request.with_counts
        and min(request.count_share, 1 - request.count_share) * (request.epsilon) < 1e-9
    ):
        raise ValueError(
            "count_share leaves less than 1e-9 of ε to the selection or to the counts; "
            "choose a share between them or set with_counts to false"
        )
    catalog = item_catalog(metadata)
    if not catalog.names:
        raise ValueError("this dataset declares no items (no Boolean or categorical attributes)")
    if max(request.lengths) > len(catalog.groups):
        raise ValueError(
            f"itemsets of length {max(request.lengths)} need at least that many items of "
            f"different attributes; this dataset has {len(catalog.groups)}"
        )
    universe = catalog.universe_size(request.lengths)
    if universe < request.k:
        raise ValueError(f"k = {request.k} exceeds the {universe} possible itemsets")
    if universe > MAX_UNIVERSE:
        raise ValueError("the itemset universe is too large for this server; use shorter itemsets")


def _cost(request: TopKItemsetsRequest) -> tuple[Epsilon, Guarantee]:
    return Epsilon.charge(request.epsilon), "pure"


def _runner(method: Method) -> Any:
    def run(
        columns: ColumnStore,
        request: TopKItemsetsRequest,
        epsilon: Epsilon,
        rng: np.random.Generator,
        progress: Progress,
    ) -> dict[str, Any]:
        """Kernel of fim.topk_em / fim.topk_laplace (ALGORITHMS.md §4.2, §4.3): pure ε-DP."""
        index = transaction_index(columns)
        selection, counts = _split(request, epsilon)
        progress(0.1, "selecting itemsets")
        released = top_k_itemsets(
            index,
            method=method,
            k=request.k,
            lengths=request.lengths,
            epsilon_selection=selection,
            epsilon_counts=counts,
            rho=request.rho,
            rng=rng,
        )
        names = index.catalog.names
        return {
            "method": method,
            "itemsets": [
                {"items": [names[item] for item in itemset], "noisy_count": count}
                for itemset, count in released
            ],
            "epsilon_selection": selection,
            "epsilon_counts": counts or 0.0,
        }

    return run


_SUMMARIES: dict[Method, str] = {
    "em": "Top-K itemsets by the exponential mechanism (Bhaskar et al. Algorithm 1).",
    "laplace": "Top-K itemsets by Laplace noise (Bhaskar et al. Algorithm 2).",
}

OPERATIONS = [
    OperationSpec(
        name=f"fim.topk_{method}",
        path=f"itemsets/top-k-{method}",
        summary=summary,
        request_model=TopKItemsetsRequest,
        response_model=TopKItemsetsResponse,
        dataset_kinds=frozenset({"transactions", "table", "views"}),
        validate=_validate,
        cost=_cost,
        run=_runner(method),
    )
    for method, summary in _SUMMARIES.items()
]
