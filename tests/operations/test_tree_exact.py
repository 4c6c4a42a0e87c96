"""The exact sampler of the ``tree.mcmc`` target (ALGORITHMS.md §3.4, the missing rows of an
inner node's split as their own cell) against brute force: every valid tree of a tiny table
with about 10 % missing values is enumerated (the helpers of ``test_tree_mcmc``, which recompute
π by plain row-by-row routing), and many exact draws are compared with π by a chi-square test;
the same draws must fail against π at twice the coefficient (test power).
"""

from __future__ import annotations

import itertools
import math

import pytest

from dpmine.wire import (
    AnyTreeTarget,
    AttributeTarget,
    DecisionTree,
    QueryTarget,
    TreeMCMCRequest,
)
from dpmine_server.dp.rng import seeded_generator
from dpmine_server.operations.tree_exact import (
    exact_target,
    exact_tree_fits,
    exact_tree_states,
    exact_tree_work,
    sample_tree_exact,
)
from dpmine_server.operations.tree_kernels import SplitSpace, make_target
from dpmine_server.services.timing import operation_work

from .test_tree_mcmc import (
    SEEDED_P_VALUE,
    State,
    _chi_square,
    _g1,
    _metadata,
    _splits,
    _state,
    _store,
    _table,
    _trees,
)

#: Class 1 for the rows the right-view query selects (missing z: not selected).
QUERY = "[z <= 0.5]"


def _weights(labels: list[int], depth: int, coefficient: float) -> dict[State, float]:
    return {
        _state(tree): mass * math.exp(coefficient * _g1(tree, labels))
        for tree, mass in _trees("left", depth)
    }


@pytest.mark.parametrize(("depth", "kind"), [(1, "attribute"), (2, "attribute"), (2, "query")])
def test_exact_draws_follow_the_tree_mcmc_target(depth: int, kind: str) -> None:
    store, metadata = _store(), _metadata()
    space = SplitSpace.of(metadata, "left")
    target: AnyTreeTarget = (
        AttributeTarget(attribute="t") if kind == "attribute" else QueryTarget(query=QUERY)
    )
    labels = make_target(store, target)
    truth = [int(k) for k in labels.classes]
    assert truth.count(-1) > 0 or kind == "query"  # missing labels are exercised too
    epsilon = {1: 4.0, 2: 1.2}[depth]
    sampler = exact_target(
        store,
        space,
        labels.class_words(),
        epsilon=epsilon,
    )
    right = _weights(truth, depth, epsilon / 4)
    scores = [epsilon / 4 * _g1(tree, truth) for tree, _ in _trees("left", depth)]
    assert max(scores) - min(scores) > 1.0  # the target is far from the base measure
    # the normaliser agrees with brute force (μ is normalised over single splits)
    assert math.isclose(math.exp(sampler.log_z((), depth)), sum(right.values()), rel_tol=1e-9)
    samples = [
        _state(space.tree(depth, sample_tree_exact(sampler, depth=depth, rng=seeded_generator(s))))
        for s in range(1500)
    ]
    assert _chi_square(samples, right) > SEEDED_P_VALUE
    assert _chi_square(samples, _weights(truth, depth, epsilon / 2)) < SEEDED_P_VALUE


def _leaves_only(labels: list[int], depth: int, coefficient: float) -> float:
    """The normaliser of the old target, which scored the leaves only (rows stopped by a
    missing value in no cell)."""
    total = 0.0
    for tree, mass in _trees("left", depth):
        wgini = sum(
            sum(c.values()) - sum(v * v for v in c.values()) / sum(c.values())
            for c in _table(tree, labels).values()
            if c
        )
        total += mass * math.exp(-coefficient * wgini)
    return total


@pytest.mark.parametrize("depth", [1, 2])
def test_the_sampler_scores_the_missing_cells(depth: int) -> None:
    """Its normaliser is not the leaves-only one (so the law tested above sees the rows a
    missing value stops at an inner node)."""
    store, metadata = _store(), _metadata()
    space = SplitSpace.of(metadata, "left")
    labels = make_target(store, AttributeTarget(attribute="t"))
    sampler = exact_target(store, space, labels.class_words(), epsilon=4.0)
    truth = [int(k) for k in labels.classes]
    found = math.exp(sampler.log_z((), depth))
    assert math.isclose(found, sum(_weights(truth, depth, 1.0).values()), rel_tol=1e-9)
    assert not math.isclose(found, _leaves_only(truth, depth, 1.0), rel_tol=1e-2)


def test_the_work_bound_is_public_and_grows_with_every_parameter() -> None:
    assert exact_tree_states(depth=2, n_splits=10) == 1 + 10 * 2
    base = exact_tree_work(depth=2, n_splits=10, n_max=640, n_classes=2)
    assert base == (1 + 20) * 10 * 3 * 10 * 3
    # multisets of (group, side) pairs: C(2G + 1, 2) at k = 2
    assert exact_tree_states(depth=3, n_splits=10) == 1 + 20 + 21 * 20 // 2
    assert exact_tree_work(depth=3, n_splits=10, n_max=640, n_classes=2) > base
    assert exact_tree_work(depth=2, n_splits=11, n_max=640, n_classes=2) > base
    assert exact_tree_work(depth=2, n_splits=10, n_max=641, n_classes=2) > base
    assert exact_tree_work(depth=2, n_splits=10, n_max=640, n_classes=3) > base


def test_the_sampler_fits_only_within_the_work_and_memory_caps() -> None:
    assert exact_tree_fits(depth=3, n_splits=124, n_max=5000, n_classes=10)  # mammals' left
    assert not exact_tree_fits(depth=3, n_splits=200, n_max=5000, n_classes=10)  # work
    # a 16-bit lattice: little work at depth 1, but 3·S·W words of masks over the cap
    assert exact_tree_fits(depth=1, n_splits=1 << 10, n_max=1024, n_classes=2)
    assert not exact_tree_fits(depth=1, n_splits=1 << 20, n_max=1024, n_classes=2)


def test_the_exact_path_is_priced_by_its_own_public_bound() -> None:
    """services/timing.py prices "exact" by the sampler's bound (growing with the depth), not
    by the chain's iterations, which it does not run."""
    metadata = _metadata()

    def work(depth: int, iterations: int) -> float:
        request = TreeMCMCRequest(
            view="left",
            target=AttributeTarget(attribute="t"),
            depth=depth,
            iterations=iterations,
            epsilon=1.0,
            sampler="exact",
        )
        return operation_work("tree.mcmc", request, metadata)

    assert work(2, 1_000) == work(2, 100_000)
    assert 0 < work(1, 1_000) < work(2, 1_000)


def _depth_3_trees() -> list[tuple[DecisionTree, float]]:
    """Every valid tree of the left view at depth 3 (no split twice on a root-to-leaf path;
    4 splits: 4·3²·2⁴ = 576 trees) with its product base mass, by brute force."""
    splits = _splits("left")
    found: list[tuple[DecisionTree, float]] = []
    for combination in itertools.product(splits, repeat=7):
        keys = [split.key for split, _ in combination]
        paths = [(0, 1, 3), (0, 1, 4), (0, 2, 5), (0, 2, 6)]
        if any(len({keys[node] for node in path}) < 3 for path in paths):
            continue
        tree = DecisionTree(view="left", depth=3, splits=[s for s, _ in combination])
        found.append((tree, math.prod(mass for _, mass in combination)))
    return found


def test_depth_3_sums_and_draws_follow_the_target() -> None:
    """The recursion below two inner levels (cached path sets reached in two orders) against
    brute force: the normaliser, and the law of the top two splits by chi-square (with the
    power check at twice the coefficient)."""
    store, metadata = _store(), _metadata()
    space = SplitSpace.of(metadata, "left")
    labels = make_target(store, AttributeTarget(attribute="t"))
    truth = [int(k) for k in labels.classes]
    epsilon = 1.2
    sampler = exact_target(
        store,
        space,
        labels.class_words(),
        epsilon=epsilon,
    )
    trees = _depth_3_trees()
    assert len(trees) == 576

    def top(coefficient: float) -> dict[State, float]:
        weights: dict[State, float] = {}
        for tree, mass in trees:
            key = (tuple(split.key for split in tree.splits[:2]),)
            weights[key] = weights.get(key, 0.0) + mass * math.exp(coefficient * _g1(tree, truth))
        return weights

    right = top(epsilon / 4)
    assert math.isclose(math.exp(sampler.log_z((), 3)), sum(right.values()), rel_tol=1e-9)
    samples: list[State] = []
    for seed in range(1500):
        keys = sample_tree_exact(sampler, depth=3, rng=seeded_generator(seed))
        samples.append((tuple(split.key for split in space.tree(3, keys).splits[:2]),))
    assert _chi_square(samples, right) > SEEDED_P_VALUE
    assert _chi_square(samples, top(epsilon / 2)) < SEEDED_P_VALUE
