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

The universe is never enumerated one itemset at a time. The public plan
(:mod:`~dpmine_server.operations.itemset_plan`) either counts a small universe densely, or mines
the itemsets with count ≥ B (public) as explicit blocks of equal count and leaves the rest to a
tail whose scores are ≤ max(B − 1, τ), sampled exactly by
:func:`~dpmine_server.dp.topk.noisy_top_k_blocks`. Either way the output has exactly the law of
step 2 over the whole universe; only the running time differs, and it is bounded by the plan
from public values (time is an output, DESIGN.md contract item 7). B ≤ ⌊Γ⌋ + 1, so every
itemset with a count above Γ is mined and c_K comes from the same pass (fewer than K mined means
c_K ≤ Γ, τ = 0). A request the plan cannot bound within the server's caps is refused before the
charge; no data-dependent error exists after it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
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
    usable_columns,
)
from dpmine_server.data.columns import ColumnStore
from dpmine_server.data.itemset_miner import select_dense
from dpmine_server.data.itemsets import (
    ItemCatalog,
    Itemset,
    ItemsetRanks,
    TransactionIndex,
    item_catalog,
    transaction_index,
)
from dpmine_server.dp.budget import Epsilon
from dpmine_server.dp.mechanisms import (
    OneSided,
    count_noise_law,
    em_coefficient,
    noisy_counts,
)
from dpmine_server.dp.topk import BlockPick, Noise, TailCandidate, noisy_top_k_blocks
from dpmine_server.dp.zcdp import ReleasePart
from dpmine_server.operations.base import OperationSpec, Progress
from dpmine_server.operations.itemset_plan import TopKPlan, plan_top_k

__all__ = [
    "MAX_UNIVERSE",
    "OPERATIONS",
    "kth_largest_count",
    "length_range",
    "margin",
    "request_catalog",
    "request_plan",
    "row_width",
    "selection_scale",
    "top_k_itemsets",
    "top_k_plan",
    "truncation_level",
]

#: Largest universe accepted (public check before any data access).
MAX_UNIVERSE = 10**30

Method = Literal["em", "laplace"]
IntArray = npt.NDArray[np.int64]


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


def kth_largest_count(spectrum: IntArray, k: int) -> int | None:
    """c_K from a count spectrum (``spectrum[c]`` itemsets of count c); None if it holds fewer
    than K itemsets."""
    from_top = np.cumsum(spectrum[::-1])
    reached = np.flatnonzero(from_top >= k)
    return None if reached.size == 0 else int(spectrum.size - 1 - reached[0])


def length_range(lengths: Sequence[int]) -> tuple[int, int]:
    """(min, max) of a range of itemset lengths (every length between them asked)."""
    low, high = min(lengths), max(lengths)
    if set(lengths) != set(range(low, high + 1)):
        raise ValueError("itemset lengths must form a range")
    return low, high


def row_width(metadata: DatasetMetadata, catalog: ItemCatalog) -> int:
    """The public bound w on a row's items: the declared width of transaction data (longer
    rows are cut at load), the number of item groups of attribute data (one item per group)."""
    if metadata.kind == "transactions":
        return metadata.row_width
    return len(catalog.groups)


def top_k_plan(
    catalog: ItemCatalog,
    *,
    n_max: int,
    width: int,
    method: Method,
    k: int,
    lengths: Sequence[int],
    epsilon_selection: float,
    rho: float,
    bitsets: bool = True,
) -> TopKPlan:
    """The public plan of one selection (:func:`~dpmine_server.operations.itemset_plan.
    plan_top_k`; ``bitsets``: False for transaction data read from its stored row lists);
    ValueError when no plan fits the server's caps."""
    universe = catalog.universe_size(lengths)
    scale = selection_scale(method, k=k, epsilon_selection=epsilon_selection)
    gamma = margin(method, k=k, universe=universe, epsilon_selection=epsilon_selection, rho=rho)
    return plan_top_k(
        group_sizes=tuple(len(group) for group in catalog.groups),
        lengths=length_range(lengths),
        width=width,
        n_max=n_max,
        k=k,
        scale=scale,
        gamma=gamma,
        bitsets=bitsets,
    )


def _distinct_positions(size: int, count: int, rng: np.random.Generator) -> list[int]:
    """``count`` distinct uniform positions in [0, size), in a uniformly random order."""
    return [int(p) for p in rng.choice(size, size=count, replace=False, shuffle=True)]


def _uniform_below(bound: int, rng: np.random.Generator) -> int:
    """A uniform integer in [0, bound) for any positive bound (beyond 64 bits: uniform bits,
    redrawn while ≥ bound; each try succeeds with probability > ½)."""
    if bound < 2**63:
        return int(rng.integers(bound))
    bits = bound.bit_length()
    while True:
        words = rng.integers(0, 2**32, size=(bits + 31) // 32, dtype=np.uint64).tolist()
        value = sum(int(word) << (32 * i) for i, word in enumerate(words)) >> (-bits % 32)
        if value < bound:
            return value


class _Tail:
    """Uniform draws from the valid itemsets of the asked lengths (by rank), their exact
    counts, and the counts of the revealed tail members (for the released counts)."""

    def __init__(self, index: TransactionIndex, lengths: tuple[int, int], threshold: int):
        self._index = index
        self._ranks: ItemsetRanks = index.ranks(lengths[1])
        self._sizes = [
            (length, index.catalog.universe_size([length]))
            for length in range(lengths[0], lengths[1] + 1)
        ]
        self._total = sum(size for _length, size in self._sizes)
        self._threshold = threshold
        self.counts: dict[Itemset, int] = {}

    def uniform(self, rng: np.random.Generator) -> Itemset:
        """A uniformly random valid itemset of the asked lengths."""
        rank = _uniform_below(self._total, rng)
        for length, size in self._sizes:
            if rank < size:
                return self._ranks.unrank(rank, length)
            rank -= size
        raise AssertionError("a rank below the universe size has a length")

    def drawer(self, tau: float) -> Callable[[np.random.Generator], TailCandidate]:
        """draw_tail of the sampler: uniform itemsets, redrawn while explicit (count ≥ B)."""

        def draw(rng: np.random.Generator) -> TailCandidate:
            while True:
                itemset = self.uniform(rng)
                count = self._index.count(itemset)
                if count < self._threshold:
                    self.counts[itemset] = count
                    return TailCandidate(key=itemset, score=max(float(count), tau))

        return draw


def truncation_level(spectrum: IntArray, *, k: int, gamma: float) -> float:
    """τ = max(c_K − Γ, 0); fewer than K itemsets in the spectrum (counts ≥ B ≤ ⌊Γ⌋ + 1)
    means c_K < B, so c_K ≤ Γ and τ = 0."""
    c_k = kth_largest_count(spectrum, k)
    return 0.0 if c_k is None else max(c_k - gamma, 0.0)


def _blocks(spectrum: IntArray, tau: float) -> tuple[IntArray, npt.NDArray[np.float64], IntArray]:
    """(counts, scores max(count, τ), sizes) of the spectrum's non-empty blocks."""
    counts = np.flatnonzero(spectrum).astype(np.int64)
    return counts, np.maximum(counts.astype(np.float64), tau), spectrum[counts]


def _places(
    picks: Sequence[BlockPick | Hashable],
    counts: IntArray,
    sizes: IntArray,
    rng: np.random.Generator,
) -> tuple[dict[int, list[int]], list[tuple[int, int] | None]]:
    """Members for the explicit picks: each block's picks (in rank order) get distinct uniform
    positions among the block's members. Returns (count → positions, and for every pick its
    (count, position), or None for a tail key)."""
    per_block: dict[int, int] = {}
    for pick in picks:
        if isinstance(pick, BlockPick):
            per_block[pick.block] = per_block.get(pick.block, 0) + 1
    positions = {
        block: _distinct_positions(int(sizes[block]), number, rng)
        for block, number in per_block.items()
    }
    located: list[tuple[int, int] | None] = []
    for pick in picks:
        if isinstance(pick, BlockPick):
            located.append((int(counts[pick.block]), positions[pick.block][pick.rank]))
        else:
            located.append(None)
    places: dict[int, list[int]] = {}
    for place in located:
        if place is not None:
            places.setdefault(place[0], []).append(place[1])
    return places, located


def _found_order(places: dict[int, list[int]]) -> dict[tuple[int, int], int]:
    """Row of each (count, position) in a selection's answer (count, then position order)."""
    order: dict[tuple[int, int], int] = {}
    for count in sorted(places):
        for position in sorted(places[count]):
            order[(count, position)] = len(order)
    return order


@dataclass(frozen=True, slots=True)
class _Selection:
    """The public parameters of one selection's noise."""

    k: int
    gamma: float
    noise: Noise
    scale: float


def _select_dense(
    index: TransactionIndex, plan: TopKPlan, selection: _Selection, rng: np.random.Generator
) -> list[tuple[Itemset, int]]:
    """The K picks with their exact counts, every itemset counted (one block per count,
    count 0 included; no tail)."""
    counts_array, _work = index.dense(plan.lengths)
    spectrum = np.bincount(counts_array).astype(np.int64)
    tau = truncation_level(spectrum, k=selection.k, gamma=selection.gamma)
    counts, scores, sizes = _blocks(spectrum, tau)
    picks = noisy_top_k_blocks(
        scores, sizes, k=selection.k, noise=selection.noise, scale=selection.scale, rng=rng
    )
    places, located = _places(picks, counts, sizes, rng)
    found = select_dense(counts_array, places)
    row = _found_order(places)
    chosen = []
    for place in located:
        assert place is not None  # no tail in a dense run
        chosen.append((index.dense_itemset(int(found[row[place]]), plan.lengths), place[0]))
    return chosen


def _select_sparse(
    index: TransactionIndex, plan: TopKPlan, selection: _Selection, rng: np.random.Generator
) -> list[tuple[Itemset, int]]:
    """The K picks with their exact counts: blocks of the itemsets with count ≥ B (the
    spectrum pass), the rest a tail of bound max(B − 1, τ); a second pass fetches the picked
    members (the same traversal order, so the same positions)."""
    spectrum, _work = index.spectrum(plan.threshold, plan.lengths)
    tau = truncation_level(spectrum, k=selection.k, gamma=selection.gamma)
    counts, scores, sizes = _blocks(spectrum, tau)
    tail = _Tail(index, plan.lengths, plan.threshold)
    picks = noisy_top_k_blocks(
        scores,
        sizes,
        k=selection.k,
        noise=selection.noise,
        scale=selection.scale,
        rng=rng,
        tail_size=plan.universe - int(sizes.sum()),
        tail_bound=max(float(plan.threshold - 1), tau),
        draw_tail=tail.drawer(tau),
    )
    places, located = _places(picks, counts, sizes, rng)
    found = index.select(plan.threshold, plan.lengths, places) if places else None
    row = _found_order(places)
    chosen = []
    for pick, place in zip(picks, located, strict=True):
        if place is None:
            itemset = _as_itemset(pick)
            chosen.append((itemset, tail.counts[itemset]))
        else:
            assert found is not None
            items = found.itemsets[row[place]]
            chosen.append((tuple(int(i) for i in items if i >= 0), place[0]))
    return chosen


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
    plan: TopKPlan | None = None,
) -> list[tuple[Itemset, int | None]]:
    """K itemsets (selection order) and their noisy counts; (ε_s + ε_p)-DP (§4.2, §4.3).

    Every truncated count moves by at most 1, and only upward when a row is added; the
    selection's noise scale is :func:`selection_scale` (K/ε_s for ``em``, 2K/ε_s for
    ``laplace``). One row moves each of the K counts by at most 1: L1 = K and Δ₂² = K, so the
    counts get discrete Laplace of scale K/ε_p (ε_p-DP) or, on a zCDP dataset, the discrete
    Gaussian of σ = √K/ε_p (ε_p²/2-zCDP, the same ρ; :func:`noisy_counts`). ``plan`` (public;
    default :func:`top_k_plan` from the index's public bounds) chooses how, never the law:
    dense counting, or explicit blocks of count ≥ B and the tail, whose bound max(B − 1, τ)
    covers every tail score and exceeds the smallest possible one (τ) by at most B − 1.
    """
    if plan is None:
        plan = top_k_plan(
            index.catalog,
            n_max=index.n_max,
            width=index.width,
            method=method,
            k=k,
            lengths=lengths,
            epsilon_selection=epsilon_selection,
            rho=rho,
            bitsets=not index.row_lists,
        )
    selection = _Selection(
        k=k,
        gamma=margin(
            method, k=k, universe=plan.universe, epsilon_selection=epsilon_selection, rho=rho
        ),
        noise="gumbel" if method == "em" else "laplace",
        scale=selection_scale(method, k=k, epsilon_selection=epsilon_selection),
    )
    select = _select_dense if plan.dense else _select_sparse
    chosen = select(index, plan, selection, rng)
    if epsilon_counts is None:
        return [(itemset, None) for itemset, _count in chosen]
    noisy = noisy_counts(
        [count for _itemset, count in chosen], epsilon=epsilon_counts, l1=k, l2_squared=k
    ).values
    return [(itemset, int(value)) for (itemset, _count), value in zip(chosen, noisy, strict=True)]


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


def selection_releases(method: Method, *, k: int, epsilon_selection: float) -> list[ReleasePart]:
    """What the K-itemset selection at ε_s releases (:func:`selection_scale`).

    ``em``: K peeled exponential-mechanism rounds of ε_s/K each (the one-shot Gumbel top-K is
    exactly these rounds), each range-calibrated, hence ε_s/K-bounded-range and
    (ε_s/K)²/8-zCDP (Cesar & Rogers 2021; Dong, Durfee & Rogers 2020): K·(ε_s/K)²/8 in all.
    ``laplace``: the one-shot Laplace selection is ε_s-DP but not K peeled rounds, so it takes the
    generic ε_s²/2 (Bun & Steinke 2016, Prop. 1.4)."""
    if method == "em":
        return [ReleasePart("bounded_range", Fraction(epsilon_selection) / k, k)]
    return [ReleasePart("pure", Fraction(epsilon_selection))]


def _releases(
    request: TopKItemsetsRequest, epsilon: Epsilon, method: Method
) -> tuple[ReleasePart, ...]:
    """The selection at ε_s (:func:`selection_releases`) and, with counts, the Laplace counts at
    ε_p (:func:`_split`; ε_p-DP, hence ε_p²/2-zCDP), composed by adding ρ (Bun & Steinke 2016,
    Lemma 2.3)."""
    selection, counts = _split(request, epsilon)
    parts = selection_releases(method, k=request.k, epsilon_selection=selection)
    if counts is not None:
        parts.append(ReleasePart("pure", Fraction(counts)))
    return tuple(parts)


def request_catalog(request: TopKItemsetsRequest, metadata: DatasetMetadata) -> ItemCatalog:
    """The item universe a request may use (:func:`item_catalog` with its public
    ``numeric_bins`` and ``columns``); ValueError, saying what to change, when the request
    names what the dataset does not have."""
    if metadata.kind == "transactions" and request.numeric_bins is not None:
        raise ValueError(
            "numeric_bins applies to the numeric attributes of a table; this dataset is "
            "transaction data: leave numeric_bins out"
        )
    usable_columns(metadata, request.columns)
    return item_catalog(metadata, numeric_bins=request.numeric_bins, columns=request.columns)


def _validate(request: TopKItemsetsRequest, metadata: DatasetMetadata, method: Method) -> None:
    if (
        request.with_counts
        and min(request.count_share, 1 - request.count_share) * (request.epsilon) < 1e-9
    ):
        raise ValueError(
            "count_share leaves less than 1e-9 of ε to the selection or to the counts; "
            "choose a share between them or set with_counts to false"
        )
    catalog = request_catalog(request, metadata)
    if not catalog.names:
        raise ValueError(
            "no items to mine: the dataset (or the allowed columns) has no Boolean or "
            "categorical attribute, and numeric attributes give items only with numeric_bins"
        )
    if max(request.lengths) > len(catalog.groups):
        raise ValueError(
            f"itemsets of length {max(request.lengths)} need at least that many items of "
            f"different attributes; this dataset has {len(catalog.groups)}"
            + ("" if request.columns is None else " among the allowed columns")
        )
    universe = catalog.universe_size(request.lengths)
    if universe < request.k:
        raise ValueError(f"k = {request.k} exceeds the {universe} possible itemsets")
    if universe > MAX_UNIVERSE:
        raise ValueError("the itemset universe is too large for this server; use shorter itemsets")
    request_plan(request, metadata, method)


def request_plan(
    request: TopKItemsetsRequest, metadata: DatasetMetadata, method: Method
) -> TopKPlan:
    """The public plan of a valid request (ValueError if the server's caps refuse it)."""
    catalog = request_catalog(request, metadata)
    selection, _counts = _split(request, Epsilon.charge(request.epsilon))
    return top_k_plan(
        catalog,
        n_max=metadata.n_max,
        width=row_width(metadata, catalog),
        method=method,
        k=request.k,
        lengths=request.lengths,
        epsilon_selection=selection,
        rho=request.rho,
        bitsets=metadata.kind != "transactions",
    )


def _cost(request: TopKItemsetsRequest) -> Epsilon:
    return Epsilon.charge(request.epsilon)


def _count_noise_fields(epsilon_counts: float | None, k: int) -> dict[str, Any]:
    """The response's ``count_noise_scale`` and ``count_noise`` (None without counts)."""
    if epsilon_counts is None:
        return {"count_noise_scale": None, "count_noise": None}
    kind, scale = count_noise_law(epsilon=epsilon_counts, l1=k, l2_squared=k)
    return {"count_noise_scale": scale, "count_noise": {"kind": kind, "scale": scale}}


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
        index = transaction_index(
            columns, numeric_bins=request.numeric_bins, columns=request.columns
        )
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
            **_count_noise_fields(counts, request.k),
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
        validate=functools.partial(_validate, method=method),
        cost=_cost,
        releases=functools.partial(_releases, method=method),
        run=_runner(method),
    )


OPERATIONS: list[OperationSpec[Any, Any]] = [_spec(method) for method in _OPERATIONS]
