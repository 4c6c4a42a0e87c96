"""The private top-K itemset kernels ``fim.topk_em`` / ``fim.topk_laplace`` (ALGORITHMS.md §4).

* Γ against the spec's worked example (§4.1) and the closed forms of Algorithms 1 and 2.
* c_K and the truncation level τ = max(c_K − Γ, 0) read off a spectrum mined at the threshold
  B ≤ ⌊Γ⌋ + 1, including fewer than K itemsets at B; the public plan's regimes (dense counting
  of a small universe, explicit blocks and a tail otherwise) and its refusals.
* The uniform tail draw (by rank) is uniform over the valid itemsets (at most one item per
  attribute).
* The whole kernel: with a huge ε it returns the true top-K in order with exact counts, on the
  dense and the sparse plan; its output law equals the exact law of "truncated counts + noise,
  top K in order" computed by brute force over the whole universe, whatever the plan (dense;
  sparse at B = 1, 5 and ⌊Γ⌋ + 1); requests are validated from public metadata alone.

Seeded generators make every sampling test reproducible; goodness-of-fit tests use p > 1e-5.
Released counts come from OpenDP's unseedable sampler: their checks use ε_p so large that a
nonzero noise has probability below 1e-12.

Regression tests cover itemsets held by every row, the ε split spending (by one float ulp) more
than the charge, and a dataset with no frequent item.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections import Counter
from collections.abc import Callable, Sequence
from fractions import Fraction
from functools import partial
from typing import Any

import numpy as np
import pytest
from scipy import integrate, stats

from dpmine.wire import (
    AnyAttribute,
    BooleanAttribute,
    CategoricalAttribute,
    DatasetMetadata,
    NumericAttribute,
    TopKItemsetsRequest,
    TopKItemsetsResponse,
)
from dpmine_server.data.columns import (
    BooleanColumn,
    CategoricalColumn,
    ColumnStore,
    ItemColumns,
    NumericColumn,
)
from dpmine_server.data.itemset_miner import work_bound
from dpmine_server.data.itemsets import (
    ItemCatalog,
    Itemset,
    TransactionIndex,
    item_catalog,
    transaction_index,
)
from dpmine_server.dp.budget import Epsilon
from dpmine_server.dp.mechanisms import count_noise, gaussian_sigma, laplace_scale
from dpmine_server.dp.rng import seeded_generator
from dpmine_server.operations import CATALOG
from dpmine_server.operations import itemsets as kernel
from dpmine_server.operations.base import no_progress
from dpmine_server.operations.itemset_plan import TopKPlan
from dpmine_server.operations.itemsets import (
    Method,
    _split,
    kth_largest_count,
    margin,
    selection_scale,
    top_k_itemsets,
    top_k_plan,
    truncation_level,
)

P_VALUE = 1e-5
MIN_EXPECTED = 5.0
Outcome = tuple[int, ...]
ITEMS = ("a", "b", "c", "d", "e", "f")
#: With ρ this small the truncated block (mass about ρ/K per round, §4.1) is never selected
#: (below 1e-11 per run) even when ε is huge; with the default ρ = 0.1 it is, 10 % of the time.
NEGLIGIBLE_RHO = 1e-12


# --------------------------------------------------------------------------------------------
# Helpers


def transaction_store(rows: Sequence[Sequence[str]], items: Sequence[str] = ITEMS) -> ColumnStore:
    """A transaction store holding ``rows`` (lists of item names)."""
    metadata = DatasetMetadata(kind="transactions", n_max=100_000, items=list(items))
    position = {item: i for i, item in enumerate(items)}
    row_ids = np.repeat(np.arange(len(rows), dtype=np.int64), [len(row) for row in rows])
    item_ids = np.array([position[item] for row in rows for item in row], dtype=np.int64)
    columns = ItemColumns.from_pairs(list(items), row_ids, item_ids, len(rows))
    return ColumnStore(metadata, n_rows=len(rows), items=columns)


def index_of(rows: Sequence[Sequence[str]], items: Sequence[str] = ITEMS) -> TransactionIndex:
    store = transaction_store(rows, items)
    return TransactionIndex(store, item_catalog(store.metadata))


def rows_with_pair_counts(counts: dict[str, int]) -> list[list[str]]:
    """One two-item row per unit of each pair count (e.g. {"ab": 3} → three rows "a b")."""
    return [list(pair) for pair, count in counts.items() for _ in range(count)]


def universe(catalog: ItemCatalog, lengths: Sequence[int]) -> list[Itemset]:
    """Every valid itemset (≤ one item per group) of the asked lengths, by brute force."""
    owner = catalog.group_of
    return [
        combo
        for length in lengths
        for combo in itertools.combinations(range(len(catalog.names)), length)
        if len({owner[i] for i in combo}) == length
    ]


def truncated_scores(
    index: TransactionIndex,
    method: Method,
    *,
    k: int,
    lengths: Sequence[int],
    epsilon_selection: float,
    rho: float,
) -> tuple[list[Itemset], list[float]]:
    """The whole universe and its truncated counts max(c, c_K − Γ, 0), by brute force (§4.1)."""
    itemsets = universe(index.catalog, lengths)
    counts = [index.count(itemset) for itemset in itemsets]
    gamma = margin(
        method, k=k, universe=len(itemsets), epsilon_selection=epsilon_selection, rho=rho
    )
    c_k = sorted(counts, reverse=True)[k - 1]
    tau = max(c_k - gamma, 0.0)
    return itemsets, [max(float(c), tau) for c in counts]


def gumbel_law(scores: Sequence[float], scale: float) -> dict[Outcome, float]:
    """Ordered top-2 law of scores + Gumbel(0, scale) (the 2-round peeling EM)."""
    weights = np.exp((np.asarray(scores) - max(scores)) / scale)
    total = float(weights.sum())
    return {
        (i, j): float(weights[i] / total * weights[j] / (total - weights[i]))
        for i, j in itertools.permutations(range(len(scores)), 2)
    }


def laplace_law(scores: Sequence[float], scale: float) -> dict[Outcome, float]:
    """Ordered top-2 law of scores + Laplace(0, scale): ∫ f_j S_i Π_{l≠i,j} F_l."""
    n = len(scores)

    def cdf(y: float, centre: float) -> float:
        z = (y - centre) / scale
        return 0.5 * math.exp(z) if z < 0 else 1.0 - 0.5 * math.exp(-z)

    def integrand(y: float, i: int, j: int) -> float:
        density = 0.5 * math.exp(-abs(y - scores[j]) / scale) / scale
        rest = math.prod(cdf(y, scores[o]) for o in range(n) if o not in (i, j))
        return density * (1.0 - cdf(y, scores[i])) * rest

    low, high = min(scores) - 40 * scale, max(scores) + 40 * scale
    law: dict[Outcome, float] = {}
    for i, j in itertools.permutations(range(n), 2):
        function: Callable[[float], float] = partial(integrand, i=i, j=j)
        value, _error = integrate.quad(function, low, high, points=sorted(set(scores)), limit=200)
        law[(i, j)] = float(value)
    return law


def goodness_of_fit(observed: Counter[Outcome], law: dict[Outcome, float]) -> float:
    """Chi-square p-value against exact probabilities (cells expected below 5 pooled)."""
    assert set(observed) <= set(law)
    draws = sum(observed.values())
    big = [o for o in law if law[o] * draws >= MIN_EXPECTED]
    small = [o for o in law if law[o] * draws < MIN_EXPECTED]
    counts = [observed[o] for o in big] + [sum(observed[o] for o in small)]
    expected = [law[o] * draws for o in big] + [sum(law[o] for o in small) * draws]
    total = sum(expected)
    return float(stats.chisquare(counts, [e * draws / total for e in expected]).pvalue)


def homogeneity(first: Counter[Outcome], second: Counter[Outcome]) -> float:
    """Chi-square p-value that two samples share one law (cells with < 10 in total pooled)."""
    outcomes = sorted(set(first) | set(second))
    big = [o for o in outcomes if first[o] + second[o] >= 10]
    small = [o for o in outcomes if first[o] + second[o] < 10]
    table = [
        [first[o] for o in big] + [sum(first[o] for o in small)],
        [second[o] for o in big] + [sum(second[o] for o in small)],
    ]
    return float(stats.chi2_contingency(np.array(table)).pvalue)


# --------------------------------------------------------------------------------------------
# The margin Γ (§4.1)


def test_margin_matches_the_worked_example() -> None:
    """K=10, ℓ=3, m=100, ε=1.4, ρ=0.1, ε_s = ε/2: M = 161 700, Γ₁ = 474.3, Γ₂ = 816.9 at the
    paper's symmetric scale 2K/ε_s; the engine's Algorithm 1 runs at the one-sided scale K/ε_s
    (§0.8), where the same formula gives half: 237.12."""
    catalog = item_catalog(
        DatasetMetadata(kind="transactions", n_max=10, items=[f"i{n}" for n in range(100)])
    )
    universe_size = catalog.universe_size([3])
    assert universe_size == 161_700
    em = margin("em", k=10, universe=universe_size, epsilon_selection=0.7, rho=0.1)
    laplace = margin("laplace", k=10, universe=universe_size, epsilon_selection=0.7, rho=0.1)
    # Γ₁ = 474.248 (the spec's 474.3 rounds 474.25 up), halved at the one-sided scale; Γ₂ = 816.92
    assert round(2 * em, 2) == 474.25
    assert round(laplace, 1) == 816.9
    # The closed forms of ALGORITHMS.md §4.1 with ε = 1.4 (Alg. 1 at the scale K/ε_s = 2K/ε).
    assert math.isclose(em, (2 * 10 / 1.4) * (math.log(10 / 0.1) + math.log(161_700)))
    assert math.isclose(laplace, (8 * 10 / 1.4) * math.log(161_700 / 0.1))


@pytest.mark.parametrize(
    ("k", "universe_size", "eps", "rho"), [(1, 6, 1.0, 0.1), (7, 10**20, 0.3, 0.5)]
)
def test_margin_closed_forms(k: int, universe_size: int, eps: float, rho: float) -> None:
    em = margin("em", k=k, universe=universe_size, epsilon_selection=eps, rho=rho)
    laplace = margin("laplace", k=k, universe=universe_size, epsilon_selection=eps, rho=rho)
    assert math.isclose(em, (k / eps) * (math.log(k / rho) + math.log(universe_size)))
    assert math.isclose(laplace, (4 * k / eps) * math.log(universe_size / rho))
    assert margin("em", k=k, universe=universe_size, epsilon_selection=2 * eps, rho=rho) < em


# --------------------------------------------------------------------------------------------
# c_K and τ from a spectrum; the plan's regimes


def test_kth_largest_count() -> None:
    spectrum = np.zeros(11, dtype=np.int64)
    spectrum[[10, 7, 3]] = [2, 1, 5]
    assert [kth_largest_count(spectrum, k) for k in range(1, 10)] == [
        10,
        10,
        7,
        3,
        3,
        3,
        3,
        3,
        None,
    ]
    assert kth_largest_count(np.zeros(4, dtype=np.int64), 1) is None


#: Pair counts of the τ tests: ab 12, ac 9, bc 9, ad 4 (the rest 0).
TAU_PAIRS = {"ab": 12, "ac": 9, "bc": 9, "ad": 4}


@pytest.mark.parametrize(
    ("threshold", "k", "gamma", "tau"),
    [
        (1, 1, 3.5, 12 - 3.5),
        (1, 3, 3.5, 9 - 3.5),
        (1, 4, 3.5, 4 - 3.5),
        (4, 3, 3.5, 9 - 3.5),  # c_3 = 9 ≥ B: read off the mined spectrum
        (5, 4, 4.0, 0.0),  # fewer than 4 at B = 5 ≤ ⌊Γ⌋ + 1: c_4 ≤ Γ
        (1, 4, 4.0, 0.0),  # c_4 = 4 = Γ
        (13, 1, 12.5, 0.0),  # nothing at B = 13: c_1 = 12 ≤ Γ
    ],
)
def test_truncation_level_from_the_spectrum_at_the_threshold(
    threshold: int, k: int, gamma: float, tau: float
) -> None:
    index = index_of(rows_with_pair_counts(TAU_PAIRS))
    spectrum, _work = index.spectrum(threshold, (2, 2))
    assert threshold <= math.floor(gamma) + 1
    assert truncation_level(spectrum, k=k, gamma=gamma) == tau


def test_the_plan_counts_small_universes_densely_and_samples_large_ones() -> None:
    catalog = item_catalog(_transactions(40))
    small = top_k_plan(
        catalog,
        n_max=1000,
        width=10,
        method="em",
        k=5,
        lengths=[2],
        epsilon_selection=1.0,
        rho=0.1,
    )
    assert small.dense
    assert (small.threshold, small.reveals, small.draws, small.passes) == (1, 0, 0, 1)
    big = item_catalog(_transactions(2000))
    large = top_k_plan(
        big, n_max=1000, width=10, method="em", k=5, lengths=[3], epsilon_selection=1.0, rho=0.1
    )
    assert not large.dense
    assert large.universe == math.comb(2000, 3)
    assert large.threshold == 1 + math.ceil(5 / 1.0)  # min(1 + ⌈scale⌉, ⌊Γ⌋ + 1)
    assert large.explicit_bound == 1000 * math.comb(10, 3) // large.threshold
    assert large.reveals >= 5
    assert large.draws >= large.reveals
    assert large.mining == work_bound(
        1000, 10, (3, 3), min_count=large.threshold, universe=[math.comb(2000, n) for n in range(4)]
    )


def test_the_plan_refuses_what_it_cannot_bound() -> None:
    catalog = item_catalog(_transactions(3000))
    with pytest.raises(ValueError, match="max_row_width"):
        top_k_plan(
            catalog,
            n_max=10**6,
            width=3000,
            method="em",
            k=5,
            lengths=[3],
            epsilon_selection=1.0,
            rho=0.1,
        )


# --------------------------------------------------------------------------------------------
# The uniform tail draw


def _table_catalog(sizes: Sequence[int]) -> ItemCatalog:
    attributes: list[AnyAttribute] = [
        BooleanAttribute(name=f"b{g}")
        if size == 1
        else CategoricalAttribute(name=f"c{g}", categories=[f"v{v}" for v in range(size)])
        for g, size in enumerate(sizes)
    ]
    attributes.append(NumericAttribute(name="x", lo=0, hi=1))
    return item_catalog(DatasetMetadata(kind="table", n_max=10, attributes=attributes))


@pytest.mark.parametrize("lengths", [(2, 2), (2, 3), (1, 4)])
def test_uniform_tail_draw_is_uniform_over_valid_itemsets(lengths: tuple[int, int]) -> None:
    sizes = (3, 2, 1, 2)
    catalog = _table_catalog(sizes)
    attributes = [
        BooleanAttribute(name=f"b{g}")
        if size == 1
        else CategoricalAttribute(name=f"c{g}", categories=[f"v{v}" for v in range(size)])
        for g, size in enumerate(sizes)
    ]
    metadata = DatasetMetadata(kind="table", n_max=10, attributes=attributes)
    store = ColumnStore(
        metadata,
        n_rows=1,
        columns={
            a.name: BooleanColumn.from_arrays(a.name, np.zeros(1, bool), np.ones(1, bool))
            if isinstance(a, BooleanAttribute)
            else CategoricalColumn(a.name, tuple(a.categories), np.zeros(1, dtype=np.int32))
            for a in attributes
        },
    )
    tail = kernel._Tail(transaction_index(store), lengths, threshold=1)
    valid = universe(catalog, list(range(lengths[0], lengths[1] + 1)))
    rng = seeded_generator(900 + sum(lengths))
    draws = 200 * len(valid)
    observed = Counter(tail.uniform(rng) for _ in range(draws))
    assert set(observed) <= set(valid), set(observed) - set(valid)
    counts = [observed[itemset] for itemset in valid]
    assert stats.chisquare(counts).pvalue > P_VALUE


# --------------------------------------------------------------------------------------------
# The kernel: huge ε


#: Distinct pair counts: ab 30, ac 28, ad 27, ae 25, af 20, bc 18, bd 15, be 12, bf 10,
#: cd 8, ce 6, cf 5, de 3, df 2 (ef never occurs).
SPREAD = {
    "ab": 30,
    "ac": 28,
    "ad": 27,
    "ae": 25,
    "af": 20,
    "bc": 18,
    "bd": 15,
    "be": 12,
    "bf": 10,
    "cd": 8,
    "ce": 6,
    "cf": 5,
    "de": 3,
    "df": 2,
}


def _names(index: TransactionIndex, itemset: Itemset) -> str:
    return "".join(index.catalog.names[i] for i in itemset)


def _huge_epsilon_plan(
    index: TransactionIndex, method: Method, k: int, *, sparse: bool
) -> TopKPlan | None:
    """None (the default plan: dense on these small universes) or the sparse plan at B = 1
    (explicit: the occurring itemsets; tail: the others, at count 0)."""
    if not sparse:
        return None
    plan = top_k_plan(
        index.catalog,
        n_max=index.n_max,
        width=index.width,
        method=method,
        k=k,
        lengths=[2],
        epsilon_selection=1e5,
        rho=NEGLIGIBLE_RHO,
    )
    return dataclasses.replace(plan, dense=False, threshold=1, passes=2)


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("method", ["em", "laplace"])
def test_huge_epsilon_returns_the_true_top_k_in_order(method: Method, sparse: bool) -> None:
    index = index_of(rows_with_pair_counts(SPREAD))
    truth = sorted(SPREAD, key=lambda pair: -SPREAD[pair])
    rng = seeded_generator(1000 + (method == "laplace") + 2 * sparse)
    for k in (1, 3, 8, 14):
        released = top_k_itemsets(
            index,
            method=method,
            k=k,
            lengths=[2],
            epsilon_selection=1e5,
            epsilon_counts=1e5,
            rho=NEGLIGIBLE_RHO,
            rng=rng,
            plan=_huge_epsilon_plan(index, method, k, sparse=sparse),
        )
        assert [_names(index, itemset) for itemset, _count in released] == truth[:k]
        for itemset, count in released:
            assert count == SPREAD[_names(index, itemset)]
        without = top_k_itemsets(
            index,
            method=method,
            k=k,
            lengths=[2],
            epsilon_selection=1e5,
            epsilon_counts=None,
            rho=NEGLIGIBLE_RHO,
            rng=rng,
        )
        assert [itemset for itemset, _ in without] == [itemset for itemset, _ in released]
        assert all(count is None for _itemset, count in without)


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("method", ["em", "laplace"])
def test_huge_epsilon_fills_the_top_k_with_zero_count_itemsets(
    method: Method, sparse: bool
) -> None:
    """Fewer occurring itemsets than K: the occurring ones first, then distinct valid
    zero-count itemsets (the count-0 block, or the tail: uniformly, all 13 appear over
    repetitions)."""
    index = index_of(rows_with_pair_counts({"ab": 5, "cd": 3}))
    rng = seeded_generator(1100 + (method == "laplace") + 2 * sparse)
    plan = _huge_epsilon_plan(index, method, 4, sparse=sparse)
    fillers: Counter[str] = Counter()
    for _ in range(300):
        released = top_k_itemsets(
            index,
            method=method,
            k=4,
            lengths=[2],
            epsilon_selection=1e5,
            epsilon_counts=1e5,
            rho=NEGLIGIBLE_RHO,
            rng=rng,
            plan=plan,
        )
        names = [_names(index, itemset) for itemset, _ in released]
        assert names[:2] == ["ab", "cd"]
        assert len(set(names)) == 4
        assert [count for _, count in released] == [5, 3, 0, 0]
        fillers.update(names[2:])
    assert set(fillers) == {"".join(p) for p in itertools.combinations(ITEMS, 2)} - {"ab", "cd"}


def test_ties_are_broken_at_random() -> None:
    """ab and cd tie for the top: with a huge ε either comes first, each about half the time
    (5 standard errors: false alarm below 1e-6)."""
    index = index_of(rows_with_pair_counts({"ab": 9, "cd": 9, "ef": 4}))
    rng = seeded_generator(1200)
    first: Counter[str] = Counter()
    runs = 2000
    for run in range(runs):
        method: Method = "em" if run % 2 else "laplace"
        released = top_k_itemsets(
            index,
            method=method,
            k=3,
            lengths=[2],
            epsilon_selection=1e5,
            epsilon_counts=None,
            rho=NEGLIGIBLE_RHO,
            rng=rng,
        )
        names = [_names(index, itemset) for itemset, _ in released]
        assert sorted(names[:2]) == ["ab", "cd"]
        assert names[2] == "ef"
        first[names[0]] += 1
    assert abs(first["ab"] - runs / 2) < 5 * math.sqrt(runs / 4)


def test_huge_epsilon_over_a_length_range() -> None:
    index = index_of([["a", "b", "c"]] * 6 + [["a", "b"]] * 3 + [["d"]] * 7)
    released = top_k_itemsets(
        index,
        method="em",
        k=6,
        lengths=[1, 2, 3],
        epsilon_selection=1e5,
        epsilon_counts=1e5,
        rho=NEGLIGIBLE_RHO,
        rng=seeded_generator(1300),
    )
    # a 9, b 9, ab 9, d 7, then two of the four itemsets of count 6: c, ac, bc, abc
    assert [count for _, count in released] == [9, 9, 9, 7, 6, 6]
    assert {itemset for itemset, _ in released[:3]} == {(0,), (1,), (0, 1)}
    assert released[3] == ((3,), 7)
    assert {itemset for itemset, _ in released[4:]} <= {(2,), (0, 2), (1, 2), (0, 1, 2)}


def test_attribute_data_outputs_are_valid_itemsets() -> None:
    """Small ε (outputs mostly drawn from the tail): every output is a valid itemset of the
    asked length, with no two values of one attribute, and the K outputs are distinct."""
    rng_data = seeded_generator(1400)
    n_rows = 60
    colour = rng_data.integers(0, 3, size=n_rows)
    size = rng_data.integers(0, 2, size=n_rows)
    flag = rng_data.random(n_rows) < 0.5
    metadata = DatasetMetadata(
        kind="table",
        n_max=1000,
        attributes=[
            CategoricalAttribute(name="colour", categories=["red", "green", "blue"]),
            CategoricalAttribute(name="size", categories=["S", "L"]),
            BooleanAttribute(name="flag"),
        ],
    )
    store = ColumnStore(
        metadata,
        n_rows=n_rows,
        columns={
            "colour": CategoricalColumn(
                "colour", ("red", "green", "blue"), colour.astype(np.int32)
            ),
            "size": CategoricalColumn("size", ("S", "L"), size.astype(np.int32)),
            "flag": BooleanColumn.from_arrays("flag", flag, np.ones(n_rows, dtype=bool)),
        },
    )
    index = transaction_index(store)
    owner = index.catalog.group_of
    rng = seeded_generator(1401)
    seen: set[Itemset] = set()
    for run in range(200):
        method: Method = "em" if run % 2 else "laplace"
        released = top_k_itemsets(
            index,
            method=method,
            k=5,
            lengths=[2, 3],
            epsilon_selection=0.05,
            epsilon_counts=None,
            rho=0.1,
            rng=rng,
        )
        itemsets = [itemset for itemset, _ in released]
        assert len(set(itemsets)) == 5
        for itemset in itemsets:
            assert len(itemset) in (2, 3)
            assert list(itemset) == sorted(itemset)
            assert len({owner[i] for i in itemset}) == len(itemset)
        seen.update(itemsets)
    assert seen == set(universe(index.catalog, [2, 3]))  # 3·2 + 3·1 + 2·1 + 3·2·1 = 17


# --------------------------------------------------------------------------------------------
# The kernel's law does not depend on the explicit threshold

#: Pair counts of the law tests (102 rows): ab 15, ac 14, ad 13, ae 12, af 10, bc 9, bd 7,
#: be 6, bf 5, cd 4, ce 3, cf 2, de 1, df 1 (ef 0).
COMPACT = {
    "ab": 15,
    "ac": 14,
    "ad": 13,
    "ae": 12,
    "af": 10,
    "bc": 9,
    "bd": 7,
    "be": 6,
    "bf": 5,
    "cd": 4,
    "ce": 3,
    "cf": 2,
    "de": 1,
    "df": 1,
}
DISTRIBUTION_K = 2
#: ε_s per method so that both select at noise scale 2: K/ε_s for em (one-sided, §0.8), 2K/ε_s
#: for laplace; Algorithm 1's Γ₁ = scale·(ln(K/ρ) + ln M) is then the same as before the change.
DISTRIBUTION_EPSILON: dict[Method, float] = {"em": 1.0, "laplace": 2.0}
DISTRIBUTION_SCALE = 2.0
#: Γ₁ = 2(ln 4 + ln 15) = 8.19: τ = 14 − 8.19 = 5.81, seven pairs truncated; the default
#: explicit threshold is ⌊τ⌋ + 1 + ⌈2⌉ = 8, so bd (7) sits at the tail bound and be (6) below.
DISTRIBUTION_RHO = 0.5
DISTRIBUTION_DRAWS = 4_000


def _sample_outcomes(
    index: TransactionIndex,
    method: Method,
    itemsets: list[Itemset],
    seed: int,
    plan: TopKPlan | None = None,
) -> Counter[Outcome]:
    position = {itemset: i for i, itemset in enumerate(itemsets)}
    rng = seeded_generator(seed)
    outcomes: Counter[Outcome] = Counter()
    for _ in range(DISTRIBUTION_DRAWS):
        released = top_k_itemsets(
            index,
            method=method,
            k=DISTRIBUTION_K,
            lengths=[2],
            epsilon_selection=DISTRIBUTION_EPSILON[method],
            epsilon_counts=None,
            rho=DISTRIBUTION_RHO,
            rng=rng,
            plan=plan,
        )
        outcomes[tuple(position[itemset] for itemset, _ in released)] += 1
    return outcomes


def _sparse_plan(index: TransactionIndex, method: Method, threshold: int) -> TopKPlan:
    """The default plan turned sparse at explicit threshold B (any B ≤ ⌊Γ⌋ + 1 is exact)."""
    plan = top_k_plan(
        index.catalog,
        n_max=index.n_max,
        width=index.width,
        method=method,
        k=DISTRIBUTION_K,
        lengths=[2],
        epsilon_selection=DISTRIBUTION_EPSILON[method],
        rho=DISTRIBUTION_RHO,
    )
    return dataclasses.replace(plan, dense=False, threshold=threshold, passes=2)


@pytest.mark.parametrize("method", ["em", "laplace"])
def test_output_law_is_exact_whatever_the_plan(method: Method) -> None:
    """Dense counting, and the sparse scheme at B = 1 (the tail holds ef alone, at τ), B = 5
    and B = 9 = ⌊Γ⌋ + 1 (the tail holds every pair below 9, scores corrected down to τ)."""
    index = index_of(rows_with_pair_counts(COMPACT))
    itemsets, scores = truncated_scores(
        index,
        method,
        k=DISTRIBUTION_K,
        lengths=[2],
        epsilon_selection=DISTRIBUTION_EPSILON[method],
        rho=DISTRIBUTION_RHO,
    )
    scale = selection_scale(
        method, k=DISTRIBUTION_K, epsilon_selection=DISTRIBUTION_EPSILON[method]
    )
    assert scale == DISTRIBUTION_SCALE
    if method == "em":
        counts = _counts(index, itemsets)
        assert sum(score != count for score, count in zip(scores, counts, strict=True)) == 7
    law = gumbel_law(scores, scale) if method == "em" else laplace_law(scores, scale)
    assert math.isclose(sum(law.values()), 1.0, abs_tol=1e-7)
    seed = 1500 + 10 * (method == "laplace")

    default = _sample_outcomes(index, method, itemsets, seed)
    samples = {"default": default}
    for offset, threshold in enumerate((1, 5, 9), start=1):
        plan = _sparse_plan(index, method, threshold)
        samples[f"B={threshold}"] = _sample_outcomes(index, method, itemsets, seed + offset, plan)
    for name, observed in samples.items():
        assert goodness_of_fit(observed, law) > P_VALUE, name
        assert homogeneity(default, observed) > P_VALUE, name


def _counts(index: TransactionIndex, itemsets: list[Itemset]) -> list[float]:
    return [float(index.count(itemset)) for itemset in itemsets]


def test_output_law_check_has_power() -> None:
    """The same statistics reject a kernel whose truncation is off by 3 (τ too high)."""
    index = index_of(rows_with_pair_counts(COMPACT))
    itemsets, scores = truncated_scores(
        index,
        "em",
        k=DISTRIBUTION_K,
        lengths=[2],
        epsilon_selection=DISTRIBUTION_EPSILON["em"],
        rho=DISTRIBUTION_RHO,
    )
    tau = min(scores)
    assert math.isclose(tau, 14 - 2 * (math.log(4) + math.log(15)))
    wrong = [max(score, tau + 2.0) for score in scores]
    observed = _sample_outcomes(index, "em", itemsets, 1600)
    assert goodness_of_fit(observed, gumbel_law(scores, 2.0)) > P_VALUE
    assert goodness_of_fit(observed, gumbel_law(wrong, 2.0)) < 1e-8


# --------------------------------------------------------------------------------------------
# Defects


@pytest.mark.parametrize("method", ["em", "laplace"])
def test_an_itemset_held_by_every_row_is_found(method: Method) -> None:
    """BUG (data/itemsets.py ``spectrum``/``mine``; pyfim omits itemsets whose support is the
    row count): 'a' is in every row, so it is the top singleton, yet it is never mined. The
    kernel then either misses it or reveals it from the tail with a score above the tail bound
    and raises ValueError after the charge."""
    index = index_of([["a", "b"]] * 20 + [["a", "c"]] * 10 + [["a"]] * 5)
    released = top_k_itemsets(
        index,
        method=method,
        k=2,
        lengths=[1],
        epsilon_selection=50.0,
        epsilon_counts=1e5,
        rho=NEGLIGIBLE_RHO,
        rng=seeded_generator(1700),
    )
    assert released == [((0,), 35), ((1,), 20)]


@pytest.mark.parametrize("method", ["em", "laplace"])
def test_a_dataset_of_rare_items_does_not_fail(method: Method) -> None:
    """Regression: with K = 10 and ε_s = 0.7 the kernel asks for the spectrum above
    1 + ⌈2K/ε_s⌉ = 30; every item is rarer, pyfim returns [] and the kernel used to fail after
    the charge (a data-dependent failure, §0.4)."""
    index = index_of([["a", "b"], ["b", "c"], ["c", "d", "e"], ["f"]] * 5)
    released = top_k_itemsets(
        index,
        method=method,
        k=10,
        lengths=[2],
        epsilon_selection=0.7,
        epsilon_counts=0.7,
        rho=0.1,
        rng=seeded_generator(1800),
    )
    assert len({itemset for itemset, _ in released}) == 10


@pytest.mark.parametrize(("epsilon", "share"), [(0.21, 0.1), (9.6, 0.1), (5.1, 0.2)])
def test_the_split_never_spends_more_than_the_charge(epsilon: float, share: float) -> None:
    """BUG (operations/itemsets.py ``_split``): ε_s = total − total·share is rounded to the
    nearest float, so ε_s + ε_p can exceed the charged amount by one ulp, against
    ``Epsilon.for_mechanism``'s promise. Fix: lower ε_s with math.nextafter until
    Fraction(ε_s) + Fraction(ε_p) ≤ Fraction(total)."""
    request = TopKItemsetsRequest(k=1, min_length=1, epsilon=epsilon, count_share=share)
    charge = Epsilon.charge(epsilon)
    selection, counts = _split(request, charge)
    assert counts is not None
    assert math.isclose(counts, epsilon * share)
    assert Fraction(selection) + Fraction(counts) <= charge.as_fraction()


def test_split_without_counts_spends_everything_on_the_selection() -> None:
    request = TopKItemsetsRequest(k=1, min_length=1, epsilon=0.3, with_counts=False)
    assert _split(request, Epsilon.charge(0.3)) == (0.3, None)
    half = TopKItemsetsRequest(k=1, min_length=1, epsilon=1.0)
    assert _split(half, Epsilon.charge(1.0)) == (0.5, 0.5)


# --------------------------------------------------------------------------------------------
# Operation specs: validation before data access, cost, runner


def _transactions(items: int) -> DatasetMetadata:
    return DatasetMetadata(kind="transactions", n_max=100, items=[f"i{n}" for n in range(items)])


@pytest.mark.parametrize("name", ["fim.topk_em", "fim.topk_laplace"])
@pytest.mark.parametrize(
    ("metadata", "request_fields", "message"),
    [
        pytest.param(_transactions(4), {"k": 5, "min_length": 1}, "exceeds the 4", id="k"),
        pytest.param(_transactions(4), {"k": 1, "min_length": 5}, "length 5", id="length"),
        pytest.param(
            _transactions(5), {"k": 21, "min_length": 2, "max_length": 3}, "exceeds the 20", id="k2"
        ),
        pytest.param(
            DatasetMetadata(
                kind="table", n_max=10, attributes=[NumericAttribute(name="x", lo=0, hi=1)]
            ),
            {"k": 1, "min_length": 1},
            "no items",
            id="no-items",
        ),
        pytest.param(
            DatasetMetadata(
                kind="table",
                n_max=10,
                attributes=[
                    CategoricalAttribute(name="c", categories=["x", "y", "z"]),
                    BooleanAttribute(name="b"),
                ],
            ),
            {"k": 1, "min_length": 3},
            "length 3",
            id="length-above-groups",
        ),
    ],
)
def test_requests_are_validated_from_metadata_alone(
    name: str, metadata: DatasetMetadata, request_fields: dict[str, int], message: str
) -> None:
    spec = CATALOG[name]
    request = TopKItemsetsRequest(epsilon=1.0, **request_fields)
    with pytest.raises(ValueError, match=message):
        spec.validate(request, metadata)


def test_universe_limit_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = CATALOG["fim.topk_em"]
    request = TopKItemsetsRequest(k=1, min_length=3, epsilon=1.0)
    spec.validate(request, _transactions(30))  # C(30, 3) = 4060
    monkeypatch.setattr(kernel, "MAX_UNIVERSE", 4059)
    with pytest.raises(ValueError, match="too large"):
        spec.validate(request, _transactions(30))


def test_specs_declare_cost_kinds_and_paths() -> None:
    for method in ("em", "laplace"):
        spec = CATALOG[f"fim.topk_{method}"]
        assert spec.path == f"itemsets/top-k-{method}"
        assert spec.dataset_kinds == frozenset({"transactions", "table", "views"})
        assert spec.request_model is TopKItemsetsRequest
        assert spec.response_model is TopKItemsetsResponse
        request = TopKItemsetsRequest(k=3, min_length=2, epsilon=0.7, with_counts=False)
        cost, guarantee = spec.cost(request), spec.guarantee
        assert cost == Epsilon.charge(0.7)
        assert guarantee == "pure"


@pytest.mark.parametrize("method", ["em", "laplace"])
def test_runner_releases_item_names_and_the_split(method: Method) -> None:
    store = transaction_store(rows_with_pair_counts(SPREAD))
    spec = CATALOG[f"fim.topk_{method}"]
    request = TopKItemsetsRequest(k=3, min_length=2, epsilon=1000.0, rho=NEGLIGIBLE_RHO)
    fields = spec.run(store, request, Epsilon.charge(1000.0), seeded_generator(1900), no_progress)
    assert fields["method"] == method
    assert fields["epsilon_selection"] == 500.0
    assert fields["epsilon_counts"] == 500.0
    assert [entry["items"] for entry in fields["itemsets"]] == [["a", "b"], ["a", "c"], ["a", "d"]]
    assert [entry["noisy_count"] for entry in fields["itemsets"]] == [30, 28, 27]
    selection_only = TopKItemsetsRequest(
        k=2, min_length=2, epsilon=1000.0, with_counts=False, rho=NEGLIGIBLE_RHO
    )
    fields = spec.run(
        store, selection_only, Epsilon.charge(1000.0), seeded_generator(1901), no_progress
    )
    assert fields["epsilon_selection"] == 1000.0
    assert fields["epsilon_counts"] == 0.0
    assert [entry["noisy_count"] for entry in fields["itemsets"]] == [None, None]


def test_the_runner_releases_the_public_scale_of_the_count_noise() -> None:
    """The counts' discrete Laplace scale is public (K/ε_p rounded up until OpenDP's map
    confirms it), so the client can give each count an exact interval."""
    store = transaction_store(rows_with_pair_counts(SPREAD))
    spec = CATALOG["fim.topk_em"]
    request = TopKItemsetsRequest(k=3, min_length=2, epsilon=2.0, rho=NEGLIGIBLE_RHO)
    fields = spec.run(store, request, Epsilon.charge(2.0), seeded_generator(1902), no_progress)
    assert fields["count_noise_scale"] == laplace_scale(epsilon=1.0, sensitivity=3)
    assert 3.0 <= fields["count_noise_scale"] < 3.0 * (1 + 1e-9)
    bare = request.model_copy(update={"with_counts": False})
    fields = spec.run(store, bare, Epsilon.charge(2.0), seeded_generator(1903), no_progress)
    assert fields["count_noise_scale"] is None


def test_on_a_zcdp_dataset_the_counts_are_discrete_gaussian_of_sigma_root_k_over_eps() -> None:
    """One row moves each of the K counts by 1: Δ₂ = √K, so under the executor's zCDP choice
    the counts get σ = √K/ε_p (ρ = ε_p²/2, the charge of the Laplace counts), reported."""
    store = transaction_store(rows_with_pair_counts(SPREAD))
    spec = CATALOG["fim.topk_em"]
    request = TopKItemsetsRequest(k=3, min_length=2, epsilon=2.0, rho=NEGLIGIBLE_RHO)
    with count_noise("discrete_gaussian"):
        fields = spec.run(store, request, Epsilon.charge(2.0), seeded_generator(1904), no_progress)
    sigma = gaussian_sigma(epsilon=1.0, l2_squared=3)
    assert sigma == pytest.approx(math.sqrt(3))
    assert fields["count_noise"] == {"kind": "discrete_gaussian", "scale": sigma}
    assert fields["count_noise_scale"] == sigma
    assert all(isinstance(entry["noisy_count"], int) for entry in fields["itemsets"])
    fields = spec.run(store, request, Epsilon.charge(2.0), seeded_generator(1905), no_progress)
    assert fields["count_noise"] == {"kind": "laplace", "scale": fields["count_noise_scale"]}


_BINNED = DatasetMetadata(
    kind="table",
    n_max=100,
    attributes=[
        NumericAttribute(name="age", lo=0, hi=90),
        BooleanAttribute(name="flag"),
        CategoricalAttribute(name="colour", categories=["red", "blue"]),
    ],
)


def test_numeric_bins_and_columns_choose_the_items_a_request_may_use() -> None:
    """At a huge ε the top itemsets of a table with ``numeric_bins`` include its age bins,
    named by their exact edges; ``columns`` leaves the other attributes' items out."""
    ages = np.array([5.0] * 6 + [40.0] * 3 + [80.0] * 2 + [np.nan])
    rows = len(ages)
    store = ColumnStore(
        _BINNED,
        n_rows=rows,
        columns={
            "age": NumericColumn.from_values("age", ages, lo=0.0, hi=90.0),
            "flag": BooleanColumn.from_arrays("flag", np.arange(rows) < 1, np.ones(rows, bool)),
            "colour": CategoricalColumn("colour", ("red", "blue"), np.zeros(rows, np.int32)),
        },
    )
    spec = CATALOG["fim.topk_em"]
    request = TopKItemsetsRequest(
        k=3, min_length=1, epsilon=1000.0, rho=NEGLIGIBLE_RHO, numeric_bins=3
    )
    spec.validate(request, _BINNED)
    fields = spec.run(store, request, Epsilon.charge(1000.0), seeded_generator(7), no_progress)
    top = [(entry["items"], entry["noisy_count"]) for entry in fields["itemsets"]]
    # Single items: colour=red 12, the age bins 6, 3 and 2 (NaN in none), flag 1.
    assert top == [(["colour=red"], 12), (["age=[0.0, 30.0)"], 6), (["age=[30.0, 60.0)"], 3)]
    only_age = request.model_copy(update={"columns": ["age"]})
    spec.validate(only_age, _BINNED)
    fields = spec.run(store, only_age, Epsilon.charge(1000.0), seeded_generator(8), no_progress)
    assert [entry["items"] for entry in fields["itemsets"]] == [
        ["age=[0.0, 30.0)"],
        ["age=[30.0, 60.0)"],
        ["age=[60.0, 90.0]"],
    ]


@pytest.mark.parametrize(
    ("metadata", "fields", "message"),
    [
        (_BINNED, {"columns": ["age", "height"]}, "unknown column(s) ['height']"),
        (_BINNED, {"columns": ["age"]}, "no items to mine"),  # numeric, and no numeric_bins
        (_transactions(4), {"columns": ["i0"]}, "transaction data, whose items are not columns"),
        (_transactions(4), {"numeric_bins": 4}, "leave numeric_bins out"),
        (_BINNED, {"columns": ["flag"], "min_length": 2}, "among the allowed columns"),
    ],
)
def test_items_a_request_names_are_checked_from_metadata_alone(
    metadata: DatasetMetadata, fields: dict[str, Any], message: str
) -> None:
    request = TopKItemsetsRequest.model_validate(
        {"k": 1, "min_length": 1, "epsilon": 1.0, **fields}
    )
    with pytest.raises(ValueError) as refused:  # noqa: PT011  # the message is checked below
        CATALOG["fim.topk_em"].validate(request, metadata)
    assert message in str(refused.value)
