"""The Metropolis–Hastings samplers of ``tree.mcmc`` (ALGORITHMS.md §3.4) and ``tree.pair_mcmc``
(§3.5) against their exact target distributions on state spaces small enough to enumerate:
π(T) ∝ Π_nodes μ(split) · exp(c·score(T)), with scores recomputed here by plain row-by-row
routing. Many independent chains (seeded test-mode generators) run a fixed number of steps from
random starts; their final states are compared with π by a chi-square test (p > 1e-4).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Callable

import numpy as np
import pytest
from scipy.stats import chisquare

from dpmine.wire import (
    MIN_TREE_ITERATIONS,
    AttributeTarget,
    DatasetMetadata,
    DecisionTree,
    SplitKey,
    TreeExpMechRequest,
    TreeMCMCRequest,
    TreePairMCMCRequest,
    TreeSplit,
)
from dpmine_server.data.columns import BooleanColumn, Column, ColumnStore, NumericColumn
from dpmine_server.dp.rng import seeded_generator
from dpmine_server.operations import CATALOG, tree_mcmc
from dpmine_server.operations.base import no_progress
from dpmine_server.operations.tree_kernels import (
    SplitMasks,
    SplitSpace,
    leaf_class_counts,
    make_target,
    node_rows,
    tree_cell_counts,
    tree_gini,
)
from dpmine_server.operations.tree_mcmc import (
    PairScore,
    descendants,
    excluded_splits,
    sample_tree_mcmc,
    sample_tree_pair,
)
from dpmine_server.services.timing import operation_work

SEEDED_P_VALUE = 1e-4
ROWS = 40

#: Left view: a (Boolean), x (numeric on [0, 4], lattice 0, 2, 4). Right view: t (Boolean, the
#: target), z (numeric on [0, 1], lattice 0, 0.5, 1). About 10 % missing values in each column.
_DATA = np.random.default_rng(20261124)
A = np.where(_DATA.random(ROWS) < 0.1, -1, (_DATA.random(ROWS) < 0.5).astype(int)).tolist()
X = np.where(_DATA.random(ROWS) < 0.1, np.nan, _DATA.uniform(0, 4, ROWS)).tolist()
T = np.where(
    _DATA.random(ROWS) < 0.1, -1, ((np.nan_to_num(X) > 2) ^ (_DATA.random(ROWS) < 0.2)).astype(int)
).tolist()
Z = np.where(_DATA.random(ROWS) < 0.1, np.nan, _DATA.uniform(0, 1, ROWS)).tolist()
VALUES: dict[str, list[float]] = {"a": A, "x": X, "t": T, "z": Z}


def _metadata() -> DatasetMetadata:
    numeric = {"type": "numeric", "lattice_bits": 1}
    return DatasetMetadata.model_validate(
        {
            "kind": "views",
            "n_max": 100,
            "attributes": [
                {"type": "boolean", "name": "a", "view": "left"},
                {**numeric, "name": "x", "view": "left", "lo": 0.0, "hi": 4.0},
                {"type": "boolean", "name": "t", "view": "right"},
                {**numeric, "name": "z", "view": "right", "lo": 0.0, "hi": 1.0},
            ],
        }
    )


def _store() -> ColumnStore:
    def boolean(name: str) -> BooleanColumn:
        array = np.asarray(VALUES[name])
        return BooleanColumn.from_arrays(name, array == 1, array >= 0)

    columns: dict[str, Column] = {
        "a": boolean("a"),
        "x": NumericColumn.from_values("x", np.asarray(X), lo=0.0, hi=4.0),
        "t": boolean("t"),
        "z": NumericColumn.from_values("z", np.asarray(Z), lo=0.0, hi=1.0),
    }
    return ColumnStore(_metadata(), n_rows=ROWS, columns=columns)


# --------------------------------------------------------------------------------------------
# Brute force


def _splits(view: str) -> list[tuple[TreeSplit, float]]:
    """Every split of a view with its base mass: the Boolean ½, each of 3 lattice points ⅙."""
    boolean, numeric, points = (
        ("a", "x", (0.0, 2.0, 4.0)) if view == "left" else ("t", "z", (0.0, 0.5, 1.0))
    )
    return [(TreeSplit(attribute=boolean), 0.5)] + [
        (TreeSplit(attribute=numeric, threshold=point), 0.5 / 3) for point in points
    ]


def _goes_left(split: TreeSplit, row: int) -> bool | None:
    value = VALUES[split.attribute][row]
    if split.threshold is None:
        return None if value < 0 else value == 1
    return None if math.isnan(value) else value <= split.threshold


def _leaf(tree: DecisionTree, row: int) -> int:
    node = 0
    while node < len(tree.splits):
        side = _goes_left(tree.splits[node], row)
        if side is None:
            return -1
        node = 2 * node + (1 if side else 2)
    return node - len(tree.splits)


def _table(tree: DecisionTree, labels: list[int]) -> dict[int, Counter[int]]:
    table: dict[int, Counter[int]] = {leaf: Counter() for leaf in range(tree.n_leaves)}
    for row in range(ROWS):
        leaf = _leaf(tree, row)
        if leaf >= 0 and labels[row] >= 0:
            table[leaf][labels[row]] += 1
    return table


def _cell(tree: DecisionTree, row: int) -> int:
    """The cell of a row: its leaf (≥ 0), or −1 − u when its value of inner node u's split is
    missing (the row stops at u; ALGORITHMS.md §6 item 18)."""
    node = 0
    while node < len(tree.splits):
        side = _goes_left(tree.splits[node], row)
        if side is None:
            return -1 - node
        node = 2 * node + (1 if side else 2)
    return node - len(tree.splits)


def _wgini(tree: DecisionTree, labels: list[int]) -> float:
    """Σ over the tree's cells (leaves and missing rows of inner nodes) of |c|·Gini(c) for the
    labelled rows (brute force)."""
    cells: dict[int, Counter[int]] = {}
    for row in range(ROWS):
        if labels[row] >= 0:
            cells.setdefault(_cell(tree, row), Counter())[labels[row]] += 1
    return sum(
        sum(counts.values()) - sum(c * c for c in counts.values()) / sum(counts.values())
        for counts in cells.values()
    )


def _g1(tree: DecisionTree, labels: list[int]) -> float:
    """g₁ = −Σ_cells τ_c·Gini(c) (§3.4 with the missing rows as cells)."""
    return -_wgini(tree, labels)


def _gain(first: DecisionTree, second: DecisionTree, labels: list[int]) -> float:
    """The gain pair score: −W(T_1; a) + [W(root; ℓ) − W(T_2; ℓ)], ℓ = the T_1 leaf."""
    leaves = [_leaf(first, row) for row in range(ROWS)]
    root = Counter(leaf for leaf in leaves if leaf >= 0)
    size = sum(root.values())
    root_gini = size - sum(c * c for c in root.values()) / size if size else 0.0
    return -_wgini(first, labels) + root_gini - _wgini(second, leaves)


def _g(tree: DecisionTree, labels: list[int]) -> float:
    """Σ_leaves (τ_n/τ)·Σ_c (τ_{n,c}/τ_n)², τ = all rows (§3.5)."""
    total = 0.0
    for counts in _table(tree, labels).values():
        size = sum(counts.values())
        if size:
            total += sum(c * c for c in counts.values()) / size
    return total / ROWS


def _trees(view: str, depth: int) -> list[tuple[DecisionTree, float]]:
    """Every valid tree of ``view`` and ``depth`` ≤ 2 with its product base mass."""
    splits = _splits(view)
    found: list[tuple[DecisionTree, float]] = []
    for combination in itertools.product(splits, repeat=2**depth - 1):
        keys = [split.key for split, _ in combination]
        if depth == 2 and keys[0] in keys[1:]:
            continue
        tree = DecisionTree(
            view="left" if view == "left" else "right",
            depth=depth,
            splits=[s for s, _ in combination],
        )
        found.append((tree, math.prod(mass for _, mass in combination)))
    return found


#: A sampled state: the split keys (attribute, threshold, category) of each tree, heap order.
State = tuple[tuple[SplitKey, ...], ...]


def _state(*trees: DecisionTree) -> State:
    return tuple(tuple(split.key for split in tree.splits) for tree in trees)


def _chi_square(samples: list[State], weights: dict[State, float]) -> float:
    total = sum(weights.values())
    states = list(weights)
    observed = Counter(samples)
    assert set(observed) <= set(states)
    expected = [weights[state] / total * len(samples) for state in states]
    return float(chisquare([observed[state] for state in states], expected).pvalue)


# --------------------------------------------------------------------------------------------
# Structure of the proposals


def test_a_proposal_excludes_exactly_the_ancestors_and_descendants() -> None:
    assert descendants(0, 3) == [1, 2, 3, 4, 5, 6]
    assert descendants(1, 3) == [3, 4]
    assert descendants(4, 3) == []
    keys = [(0, k) for k in range(7)]
    assert excluded_splits(keys, 1, 3) == {(0, 0), (0, 3), (0, 4)}
    assert excluded_splits(keys, 5, 3) == {(0, 2), (0, 0)}


# --------------------------------------------------------------------------------------------
# Exact target distributions


def _chains(run: Callable[[int], State], chains: int) -> list[State]:
    return [run(seed) for seed in range(chains)]


@pytest.mark.parametrize("depth", [1, 2])
def test_tree_mcmc_final_states_follow_the_exact_target(depth: int) -> None:
    store, metadata = _store(), _metadata()
    space = SplitSpace.of(metadata, "left")
    labels = make_target(store, AttributeTarget(attribute="t"))
    epsilon = {1: 4.0, 2: 1.2}[depth]
    coefficient = epsilon / 4
    trees = _trees("left", depth)
    scores = [coefficient * _g1(tree, T) for tree, _ in trees]
    assert max(scores) - min(scores) > 1.0  # the target is far from the base measure
    weights = {
        _state(tree): mass * math.exp(score)
        for (tree, mass), score in zip(trees, scores, strict=True)
    }
    # The same samples must fail against a chain run at twice the coefficient (test power).
    wrong = {
        _state(tree): mass * math.exp(2 * score)
        for (tree, mass), score in zip(trees, scores, strict=True)
    }

    def run(seed: int) -> State:
        keys = sample_tree_mcmc(
            store,
            space,
            labels,
            depth=depth,
            iterations=40 * depth,
            epsilon=epsilon,
            rng=seeded_generator(1000 * depth + seed),
            progress=no_progress,
        )
        return _state(space.tree(depth, keys))

    samples = _chains(run, 1500)
    assert _chi_square(samples, weights) > SEEDED_P_VALUE
    assert _chi_square(samples, wrong) < SEEDED_P_VALUE


@pytest.mark.parametrize("pair_score", ["paper", "gain"])
def test_tree_pair_mcmc_final_states_follow_the_exact_target(pair_score: PairScore) -> None:
    store, metadata = _store(), _metadata()
    spaces = (SplitSpace.of(metadata, "left"), SplitSpace.of(metadata, "right"))
    labels = make_target(store, AttributeTarget(attribute="t"))
    # The paper's score only spans ~0.04 on this data; the gain score is count-scaled, c = ε/6.
    epsilon = 100.0 if pair_score == "paper" else 2.0
    coefficient = epsilon / 2 if pair_score == "paper" else epsilon / 6
    weights: dict[State, float] = {}
    wrong: dict[State, float] = {}
    for (first, first_mass), (second, second_mass) in itertools.product(
        _trees("left", 1), _trees("right", 1)
    ):
        leaves = [_leaf(first, row) for row in range(ROWS)]
        if pair_score == "paper":
            score = _g(first, T) * (1 + _g(second, leaves)) / 2
        else:
            score = _gain(first, second, T)
        weights[_state(first, second)] = first_mass * second_mass * math.exp(coefficient * score)
        wrong[_state(first, second)] = first_mass * second_mass * math.exp(2 * coefficient * score)
    spread = [math.log(weights[state] / wrong[state]) for state in weights]  # = −c·score
    assert max(spread) - min(spread) > 1.5  # the target is far from the base measure

    def run(seed: int) -> State:
        first, second = sample_tree_pair(
            store,
            spaces,
            labels,
            depth=1,
            iterations=60,
            epsilon=epsilon,
            rng=seeded_generator(50_000 + seed),
            progress=no_progress,
            score=pair_score,
        )
        return _state(spaces[0].tree(1, first), spaces[1].tree(1, second))

    samples = _chains(run, 1500)
    assert _chi_square(samples, weights) > SEEDED_P_VALUE
    assert _chi_square(samples, wrong) < SEEDED_P_VALUE


#: Depth-2 pairs: three Boolean attributes per view (each split of base mass ⅓), so 3·2·2 = 12
#: trees per view and 144 pair states. Left a, b, c; right t (the target), u, v; ~10 % missing.
_DATA2 = np.random.default_rng(20261125)


def _boolean_column(probability: np.ndarray) -> list[float]:
    present = _DATA2.random(ROWS) >= 0.1
    column: list[float] = np.where(
        present, (_DATA2.random(ROWS) < probability).astype(int), -1
    ).tolist()
    return column


_B2 = _DATA2.random(ROWS) < 0.5
_C2 = _DATA2.random(ROWS) < 0.5
VALUES["b"] = np.where(_DATA2.random(ROWS) < 0.1, -1, _B2.astype(int)).tolist()
VALUES["c"] = np.where(_DATA2.random(ROWS) < 0.1, -1, _C2.astype(int)).tolist()
VALUES["u"] = _boolean_column(np.where(_B2, 0.85, 0.15))
VALUES["v"] = _boolean_column(np.where(_B2 & _C2, 0.9, 0.2))
PAIR2_LEFT, PAIR2_RIGHT = ("a", "b", "c"), ("t", "u", "v")


def _boolean_metadata() -> DatasetMetadata:
    return DatasetMetadata.model_validate(
        {
            "kind": "views",
            "n_max": 100,
            "attributes": [
                *({"type": "boolean", "name": name, "view": "left"} for name in PAIR2_LEFT),
                *({"type": "boolean", "name": name, "view": "right"} for name in PAIR2_RIGHT),
            ],
        }
    )


def _boolean_store() -> ColumnStore:
    columns: dict[str, Column] = {}
    for name in (*PAIR2_LEFT, *PAIR2_RIGHT):
        array = np.asarray(VALUES[name])
        columns[name] = BooleanColumn.from_arrays(name, array == 1, array >= 0)
    return ColumnStore(_boolean_metadata(), n_rows=ROWS, columns=columns)


def _boolean_trees(view: str, names: tuple[str, ...]) -> list[DecisionTree]:
    """Every valid depth-2 tree over Boolean ``names`` (children differ from the root)."""
    return [
        DecisionTree(
            view="left" if view == "left" else "right",
            depth=2,
            splits=[TreeSplit(attribute=name) for name in (root, left, right)],
        )
        for root, left, right in itertools.product(names, repeat=3)
        if root not in (left, right)
    ]


def _pooled_chi_square(samples: list[State], weights: dict[State, float]) -> float:
    """:func:`_chi_square` with the states of expected count < 5 pooled into one cell (144
    states for 1500 chains: the rare ones would otherwise make the statistic unreliable)."""
    total = sum(weights.values())
    observed = Counter(samples)
    assert set(observed) <= set(weights)
    expected = {state: w / total * len(samples) for state, w in weights.items()}
    big = [state for state in weights if expected[state] >= 5]
    small = [state for state in weights if expected[state] < 5]
    counts = [observed[state] for state in big]
    means = [expected[state] for state in big]
    if small:
        counts.append(sum(observed[state] for state in small))
        means.append(sum(expected[state] for state in small))
    return float(chisquare(counts, means).pvalue)


@pytest.mark.parametrize("pair_score", ["paper", "gain"])
def test_tree_pair_mcmc_at_depth_2_follows_the_exact_target(pair_score: PairScore) -> None:
    """Depth 2: the second tree predicts the first's four leaves, and a proposal at a node
    excludes its ancestors' and descendants' splits in both trees. The gain score also counts
    the rows stopped at an inner node by a missing value (their own cells)."""
    store, metadata = _boolean_store(), _boolean_metadata()
    spaces = (SplitSpace.of(metadata, "left"), SplitSpace.of(metadata, "right"))
    labels = make_target(store, AttributeTarget(attribute="t"))
    epsilon = 30.0 if pair_score == "paper" else 1.5
    coefficient = epsilon / 2 if pair_score == "paper" else epsilon / 6
    # Every split has base mass ⅓, so the base measure is uniform over the 144 pairs.
    scores: dict[State, float] = {}
    for first, second in itertools.product(
        _boolean_trees("left", PAIR2_LEFT), _boolean_trees("right", PAIR2_RIGHT)
    ):
        leaves = [_leaf(first, row) for row in range(ROWS)]
        scores[_state(first, second)] = (
            _g(first, T) * (1 + _g(second, leaves)) / 2
            if pair_score == "paper"
            else _gain(first, second, T)
        )
    assert len(scores) == 144
    weights = {state: math.exp(coefficient * s) for state, s in scores.items()}
    wrong = {state: math.exp(2 * coefficient * s) for state, s in scores.items()}
    spread = [math.log(weights[state] / wrong[state]) for state in weights]  # = −c·score
    assert max(spread) - min(spread) > 1.5  # the target is far from the uniform base measure

    def run(seed: int) -> State:
        first, second = sample_tree_pair(
            store,
            spaces,
            labels,
            depth=2,
            iterations=100,
            epsilon=epsilon,
            rng=seeded_generator(70_000 + seed),
            progress=no_progress,
            score=pair_score,
        )
        return _state(spaces[0].tree(2, first), spaces[1].tree(2, second))

    samples = _chains(run, 1500)
    assert _pooled_chi_square(samples, weights) > SEEDED_P_VALUE
    assert _pooled_chi_square(samples, wrong) < SEEDED_P_VALUE


def test_exhausted_candidate_pools_are_topped_up_without_bias(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One pooled candidate per step is too few (a depth-2 root rejects two of the three
    splits): the pools of both samplers run out and are refilled mid-chunk, and the pair chain
    still follows its exact target (the depth-2 setting above)."""
    monkeypatch.setattr(tree_mcmc, "POOL_PER_STEP", 1)
    refills = Counter[str]()
    refill = tree_mcmc._Pool.refill

    def counted(pool: tree_mcmc._Pool) -> None:
        refills["pool"] += 1
        refill(pool)

    monkeypatch.setattr(tree_mcmc._Pool, "refill", counted)
    store, metadata = _boolean_store(), _boolean_metadata()
    spaces = (SplitSpace.of(metadata, "left"), SplitSpace.of(metadata, "right"))
    labels = make_target(store, AttributeTarget(attribute="t"))
    sample_tree_mcmc(
        store,
        spaces[0],
        labels,
        depth=2,
        iterations=200,
        epsilon=1.0,
        rng=seeded_generator(1),
        progress=no_progress,
    )
    assert refills["pool"] > 0
    refills.clear()
    epsilon = 30.0
    weights: dict[State, float] = {}
    for first, second in itertools.product(
        _boolean_trees("left", PAIR2_LEFT), _boolean_trees("right", PAIR2_RIGHT)
    ):
        leaves = [_leaf(first, row) for row in range(ROWS)]
        score = _g(first, T) * (1 + _g(second, leaves)) / 2
        weights[_state(first, second)] = math.exp(epsilon / 2 * score)

    def run(seed: int) -> State:
        first, second = sample_tree_pair(
            store,
            spaces,
            labels,
            depth=2,
            iterations=100,
            epsilon=epsilon,
            rng=seeded_generator(90_000 + seed),
            progress=no_progress,
            score="paper",
        )
        return _state(spaces[0].tree(2, first), spaces[1].tree(2, second))

    samples = _chains(run, 1500)
    assert refills["pool"] > 100
    assert _pooled_chi_square(samples, weights) > SEEDED_P_VALUE


# --------------------------------------------------------------------------------------------
# Operations


def test_mcmc_reports_progress_at_public_steps_and_releases_a_valid_tree() -> None:
    spec = CATALOG["tree.mcmc"]
    request = TreeMCMCRequest(
        view="left",
        target=AttributeTarget(attribute="z", bins=3),
        depth=2,
        iterations=1000,
        epsilon=1.0,
        sampler="mcmc",
    )
    spec.validate(request, _metadata())
    reports: list[float] = []
    fields = spec.run(
        _store(),
        request,
        spec.cost(request),
        seeded_generator(3),
        lambda fraction, message="": reports.append(fraction) if message == "" else None,
    )
    assert len(reports) == 100
    assert reports == sorted(reports)
    assert reports[-1] == 1.0
    assert fields["tree"].view == "left"
    assert fields["tree"].depth == 2
    assert fields["sampler"] == "mcmc"


def test_pair_operation_builds_the_first_tree_on_the_other_view() -> None:
    spec = CATALOG["tree.pair_mcmc"]
    request = TreePairMCMCRequest(
        attribute="t", depth=1, iterations=MIN_TREE_ITERATIONS, epsilon=1.0
    )
    spec.validate(request, _metadata())
    fields = spec.run(_store(), request, spec.cost(request), seeded_generator(4), no_progress)
    assert fields["left_tree"].view == "left"
    assert fields["right_tree"].view == "right"
    assert spec.guarantee == "approximate"


def test_work_estimates_grow_with_the_public_parameters() -> None:
    metadata = _metadata()
    target = AttributeTarget(attribute="t")

    def mcmc(depth: int, iterations: int) -> float:
        request = TreeMCMCRequest(
            view="left",
            target=target,
            depth=depth,
            iterations=iterations,
            epsilon=1.0,
            sampler="mcmc",
        )
        return operation_work("tree.mcmc", request, metadata)

    assert 0 < mcmc(2, 1_000) < mcmc(2, 10_000) < mcmc(4, 10_000)
    pair = TreePairMCMCRequest(attribute="t", depth=2, iterations=10_000, epsilon=1.0)
    assert operation_work("tree.pair_mcmc", pair, metadata) > mcmc(2, 10_000)
    grown = TreeExpMechRequest(view="left", target=target, depth=2, epsilon=1.0)
    assert operation_work("tree.expmech", grown, metadata) > 0


@pytest.mark.parametrize("depth", [1, 2])
def test_the_cell_score_counts_the_rows_stopped_by_a_missing_value(depth: int) -> None:
    """``tree_gini`` of a tree's node × class table (the score the chains compute) equals the
    brute-force Σ over cells, leaves and the inner nodes' missing rows, on every tree."""
    store, metadata = _store(), _metadata()
    space = SplitSpace.of(metadata, "left")
    masks = SplitMasks(store, space)
    classes = make_target(store, AttributeTarget(attribute="t")).class_words()
    lost = 0
    for tree, _ in _trees("left", depth):
        left, right = masks.stacked([space.key_of(split) for split in tree.splits])
        nodes = node_rows(store.all_rows().words, left, right, depth)
        table = leaf_class_counts(nodes, classes)
        assert tree_gini(table, len(tree.splits)) == pytest.approx(_wgini(tree, T))
        lost += int(tree_cell_counts(table, len(tree.splits))[: len(tree.splits)].sum())
    assert lost > 0  # some trees stop labelled rows at an inner node
