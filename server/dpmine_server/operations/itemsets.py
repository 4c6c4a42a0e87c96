"""Private top-K frequent itemsets: ``fim.topk_em`` and ``fim.topk_laplace`` (ALGORITHMS.md §4).

Both follow Bhaskar et al. in the count domain (add/remove neighbours, §4.1):

1. c_K = K-th largest count among valid itemsets of the asked lengths (0 if fewer occur);
   ψ = c_K − Γ with Γ from public parameters only; τ = max(ψ, 0). The truncated count
   ĉ(I) = max(c(I), τ) has sensitivity 1 (Bhaskar Lemma 2).
2. Selection (cost ε_s): the K largest ĉ(I) + noise over the whole universe, in order —
   Gumbel noise of scale K/ε_s (= K rounds of the exponential mechanism with ε_s/K each,
   Algorithm 1, range-calibrated: ĉ only grows when a row is added, §0.8) or Laplace noise of
   scale 2K/ε_s (Algorithm 2).
3. Counts (cost ε_p, optional): c(I) + discrete Laplace(K/ε_p) for the K selected itemsets.

The universe is never enumerated: itemsets with count ≥ B (mined with Eclat) are explicit, the
rest is a tail whose scores are ≤ max(B − 1, τ), sampled exactly by :func:`noisy_top_k_with_tail`.
B only changes the running time, never the output distribution. Running time is an output
(DESIGN.md contract item 7), so B is a function of public values only:
B = min(1 + ⌈scale⌉, ⌊Γ⌋ + 1) (:func:`public_threshold`). One Eclat pass at B yields both the
explicit set and c_K (every itemset with a count above Γ is mined), so no search over
data-dependent thresholds remains; one added row changes the mined set only by itemsets of that
row. The only data-dependent threshold left is the memory cap: when the public universe could
exceed it and the mined set would, B rises (the response padding covers that case). No
data-dependent error exists after the charge.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from fractions import Fraction
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from dpmine.wire import (
    FIM_TOPK_EM,
    FIM_TOPK_LAPLACE,
    DatasetMetadata,
    Operation,
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
from dpmine_server.dp.mechanisms import OneSided, discrete_laplace, em_coefficient
from dpmine_server.dp.topk import Noise, TailCandidate, noisy_top_k_with_tail
from dpmine_server.operations.base import OperationSpec, Progress

__all__ = [
    "MAX_EXPLICIT_ITEMSETS",
    "MAX_UNIVERSE",
    "OPERATIONS",
    "MinedItemsets",
    "explicit_itemsets",
    "explicit_threshold",
    "kth_largest_count",
    "margin",
    "public_threshold",
    "selection_scale",
    "top_count",
    "top_k_itemsets",
    "truncation_level",
]

#: Explicit (mined) itemsets kept in memory at most; the rest goes to the exact tail sampler.
MAX_EXPLICIT_ITEMSETS = 2_000_000
#: Largest universe accepted (public check before any data access).
MAX_UNIVERSE = 10**30

Method = Literal["em", "laplace"]


#: Truncated counts max(c(I), c_K − Γ) only grow when a row is added (§0.8).
TRUNCATED_COUNT_SENSITIVITY = OneSided(up=1.0, down=0.0)


def selection_scale(method: Method, *, k: int, epsilon_selection: float) -> float:
    """Noise scale of the K-itemset selection at ε_s in total.

    ``em``: K peeled exponential-mechanism rounds of ε_s/K each over the monotone truncated
    counts (Δ_up = 1, Δ_down = 0), so c = ε_s/K per round, i.e. Gumbel noise of scale K/ε_s
    (range-calibrated EM, §0.8; the paper's 2K/ε_s is the symmetric bound). ``laplace``: the
    one-shot Laplace selection of Algorithm 2 keeps 2K/ε_s: its proof rests on the symmetric
    bound, and the ordered top-K of one-shot Laplace noise is not K peeled EM rounds."""
    if method == "em":
        return k / em_coefficient(epsilon_selection, TRUNCATED_COUNT_SENSITIVITY)
    return 2 * k / epsilon_selection


def margin(method: Method, *, k: int, universe: int, epsilon_selection: float, rho: float) -> float:
    """Γ in count units (§4.1): Alg. 1 scale·(ln(K/ρ) + ln M) with the selection scale (K/ε_s
    one-sided; the paper's (2K/ε_s) at the symmetric scale); Alg. 2 (4K/ε_s) ln(M/ρ). Γ only
    bounds utility (any public Γ keeps the truncated counts' sensitivity)."""
    if method == "em":
        scale = selection_scale(method, k=k, epsilon_selection=epsilon_selection)
        return scale * (math.log(k / rho) + math.log(universe))
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


def public_threshold(*, scale: float, gamma: float) -> int:
    """The explicit-mining threshold B from public values only: min(1 + ⌈scale⌉, ⌊Γ⌋ + 1).

    B ≤ ⌊Γ⌋ + 1 puts every itemset that can set τ in the mined set; B − 1 ≤ ⌈scale⌉ keeps the
    tail bound max(B − 1, τ) within one noise scale (plus one) of every tail score when τ is
    small, so about K·e tail itemsets are revealed, as with the former data-dependent
    B = ⌊τ⌋ + 1 + ⌈scale⌉; when τ ≥ B − 1 every tail score is τ and at most K are revealed.
    """
    return max(1, min(1 + math.ceil(scale), math.floor(gamma) + 1))


class MinedItemsets(Mapping[Itemset, int]):
    """Mined itemsets and their counts, kept as the miner reports them: the kernel needs the
    counts as an array and only the K selected itemsets as sorted tuples (a read-only mapping
    itemset → count is built only if someone asks for it)."""

    def __init__(self, raw: Sequence[tuple[int, ...]], counts: npt.NDArray[np.int64]) -> None:
        self._raw = raw
        self.counts = counts
        self._mapping: dict[Itemset, int] | None = None

    @classmethod
    def of(cls, mined: Mapping[Itemset, int]) -> MinedItemsets:
        """``mined`` itself if it already is one, else a copy."""
        if isinstance(mined, MinedItemsets):
            return mined
        return cls(list(mined), np.fromiter(mined.values(), dtype=np.int64, count=len(mined)))

    def itemset(self, position: int) -> Itemset:
        """The ``position``-th itemset, items sorted."""
        return tuple(sorted(self._raw[position]))

    def _as_dict(self) -> dict[Itemset, int]:
        if self._mapping is None:
            self._mapping = {
                self.itemset(i): int(count) for i, count in enumerate(self.counts.tolist())
            }
        return self._mapping

    def __getitem__(self, itemset: Itemset) -> int:
        return self._as_dict()[itemset]

    def __iter__(self) -> Iterator[Itemset]:
        return iter(self._as_dict())

    def __len__(self) -> int:
        return len(self._raw)


def explicit_itemsets(
    index: TransactionIndex, start: int, lengths: Sequence[int], universe: int
) -> tuple[int, Mapping[Itemset, int]]:
    """(B, every itemset with count ≥ B): B = ``start`` unless that would exceed the memory
    cap, checked with a spectrum pass only when the public universe could exceed it."""
    threshold = start
    if universe > MAX_EXPLICIT_ITEMSETS:
        threshold = explicit_threshold(index.spectrum(start, lengths), start)
    return threshold, MinedItemsets(*index.mine_raw(threshold, lengths))


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

    Every truncated count moves by at most 1, and only upward when a row is added; the
    selection's noise scale is :func:`selection_scale` (K/ε_s for ``em``, 2K/ε_s for
    ``laplace``); counts get discrete Laplace with L1 sensitivity K at ε_p.
    """
    catalog = index.catalog
    weights = [catalog.universe_size([length]) for length in lengths]
    universe = sum(weights)
    scale = selection_scale(method, k=k, epsilon_selection=epsilon_selection)
    gamma = margin(method, k=k, universe=universe, epsilon_selection=epsilon_selection, rho=rho)
    # Any B gives the same distribution (the tail bound below covers every tail score); B is
    # public so that the mining work does not jump with c_K (a timing channel).
    start = public_threshold(scale=scale, gamma=gamma)
    threshold, mined = explicit_itemsets(index, start, lengths, universe)
    explicit = MinedItemsets.of(mined)
    counts = explicit.counts.astype(np.float64)
    if threshold <= math.floor(gamma) + 1 or counts.size >= k:
        # Every itemset with a count above Γ (or at least K itemsets) is explicit: c_K is read
        # off the mined counts; fewer than K mined at B ≤ ⌊Γ⌋ + 1 means c_K ≤ Γ, τ = 0.
        c_k = (
            float(np.partition(counts, counts.size - k)[counts.size - k])
            if counts.size >= k
            else 0.0
        )
        tau = max(c_k - gamma, 0.0)
    else:  # the memory cap pushed B above Γ with fewer than K explicit itemsets (rare)
        tau = truncation_level(index, k=k, lengths=lengths, gamma=gamma)
    scores = np.maximum(counts, tau)
    # An itemset is explicit exactly when its count reaches B (of the asked lengths).
    tail_bound = max(float(threshold - 1), tau)

    def draw_tail(generator: np.random.Generator) -> TailCandidate:
        while True:
            itemset = _uniform_itemset(catalog, lengths, weights, generator)
            count = index.count(itemset)
            if count < threshold:
                return TailCandidate(key=itemset, score=max(count, tau))

    noise: Noise = "gumbel" if method == "em" else "laplace"
    chosen = noisy_top_k_with_tail(
        scores,
        k=k,
        noise=noise,
        scale=scale,
        rng=rng,
        tail_size=universe - counts.size,
        tail_bound=tail_bound,
        draw_tail=draw_tail,
    )
    selected: list[Itemset] = [
        explicit.itemset(label) if isinstance(label, int) else _as_itemset(label)
        for label in chosen
    ]
    if epsilon_counts is None:
        return [(itemset, None) for itemset in selected]
    exact = [
        int(explicit.counts[label]) if isinstance(label, int) else index.count(itemset)
        for label, itemset in zip(chosen, selected, strict=True)
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


def _cost(request: TopKItemsetsRequest) -> Epsilon:
    return Epsilon.charge(request.epsilon)


def _runner(
    method: Method,
) -> Callable[
    [ColumnStore, TopKItemsetsRequest, Epsilon, np.random.Generator, Progress], dict[str, Any]
]:
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


_OPERATIONS: dict[Method, Operation[TopKItemsetsRequest, TopKItemsetsResponse]] = {
    "em": FIM_TOPK_EM,
    "laplace": FIM_TOPK_LAPLACE,
}
_SUMMARIES: dict[Method, str] = {
    "em": "Top-K itemsets by the exponential mechanism (Bhaskar et al. Algorithm 1).",
    "laplace": "Top-K itemsets by Laplace noise (Bhaskar et al. Algorithm 2).",
}


def _spec(method: Method) -> OperationSpec[TopKItemsetsRequest, TopKItemsetsResponse]:
    return OperationSpec(
        operation=_OPERATIONS[method],
        summary=_SUMMARIES[method],
        dataset_kinds=frozenset({"transactions", "table", "views"}),
        validate=_validate,
        cost=_cost,
        run=_runner(method),
    )


OPERATIONS: list[OperationSpec[Any, Any]] = [_spec(method) for method in _OPERATIONS]
