"""The exact samplers of ``tree.mcmc`` on a numeric view whose lattice thresholds merge into
groups (operations/tree_exact.py, "Numeric attributes"; ALGORITHMS.md §3.4) against an
independent brute force over the *ungrouped* lattice: a plain recursion over every lattice
threshold with row-by-row routing and the no-split-twice rule on exact keys. The normalisers
agree at depths 1–3, and the law of the root's and its left child's exact thresholds (so a
group's unused thresholds drawn uniformly, and a group reused on a path) passes a chi-square
test, while the same draws fail against the law at twice the coefficient (test power). The
depth-1 histogram path (no masks) gives the recursion's root weights and the brute-force law.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from functools import cache

import numpy as np
import pytest
from scipy.stats import chisquare

from dpmine.wire import AnyTreeTarget, AttributeTarget, DatasetMetadata, QueryTarget
from dpmine_server.data.columns import BooleanColumn, Column, ColumnStore, NumericColumn
from dpmine_server.dp.mechanisms import em_coefficient
from dpmine_server.dp.rng import seeded_generator
from dpmine_server.operations.tree_exact import (
    exact_split_groups,
    exact_target,
    log_sum_exp,
    sample_stump_exact,
    sample_tree_exact,
    split_groups,
    stump_weights,
)
from dpmine_server.operations.tree_kernels import (
    GINI_SENSITIVITY,
    SplitKey,
    SplitSpace,
    make_target,
)

SEEDED_P_VALUE = 1e-4
ROWS = 36

#: Left view: b (Boolean), y (numeric on [0, 8], lattice 0, 1, …, 8: 9 thresholds) whose values
#: are 1, 2.5 or 6, so thresholds 1–2, 3–5 and 6–8 route every row alike (groups of 2, 3, 3
#: after threshold 0). Right view: t (Boolean target, mostly y > 2). About 10 % missing each.
_DATA = np.random.default_rng(20261127)
Y = np.where(_DATA.random(ROWS) < 0.1, np.nan, _DATA.choice([1.0, 2.5, 6.0], size=ROWS)).tolist()
B = np.where(_DATA.random(ROWS) < 0.1, -1, (_DATA.random(ROWS) < 0.5).astype(int)).tolist()
T = np.where(
    _DATA.random(ROWS) < 0.1,
    -1,
    ((np.nan_to_num(Y) > 2) ^ (_DATA.random(ROWS) < 0.15)).astype(int),
).tolist()
POINTS = tuple(float(k) for k in range(9))


def _metadata() -> DatasetMetadata:
    return DatasetMetadata.model_validate(
        {
            "kind": "views",
            "n_max": 100,
            "attributes": [
                {"type": "boolean", "name": "b", "view": "left"},
                {
                    "type": "numeric",
                    "name": "y",
                    "view": "left",
                    "lo": 0.0,
                    "hi": 8.0,
                    "lattice_bits": 3,
                },
                {"type": "boolean", "name": "t", "view": "right"},
            ],
        }
    )


def _store() -> ColumnStore:
    def boolean(values: list[int], name: str) -> BooleanColumn:
        array = np.asarray(values)
        return BooleanColumn.from_arrays(name, array == 1, array >= 0)

    columns: dict[str, Column] = {
        "b": boolean(B, "b"),
        "y": NumericColumn.from_values("y", np.asarray(Y), lo=0.0, hi=8.0),
        "t": boolean(T, "t"),
    }
    return ColumnStore(_metadata(), n_rows=ROWS, columns=columns)


# --------------------------------------------------------------------------------------------
# Brute force over the ungrouped lattice

#: (key, base mass, routing of a row: True left, False right, None missing).
Split = tuple[SplitKey, float, Callable[[int], bool | None]]


def _splits() -> list[Split]:
    """b's one split (mass ½) and y's 9 thresholds (½ · ⅑ each), keyed as the sampler keys them
    (family index, lattice index)."""

    def boolean(row: int) -> bool | None:
        return None if B[row] < 0 else B[row] == 1

    def threshold(point: float) -> Callable[[int], bool | None]:
        return lambda row: None if math.isnan(Y[row]) else Y[row] <= point

    return [((0, 0), 0.5, boolean)] + [
        ((1, k), 0.5 / len(POINTS), threshold(point)) for k, point in enumerate(POINTS)
    ]


def _wg(rows: tuple[int, ...]) -> float:
    """|c|·Gini(c) of the labelled rows of a cell."""
    counts = Counter(T[row] for row in rows if T[row] >= 0)
    size = sum(counts.values())
    return size - sum(c * c for c in counts.values()) / size if size else 0.0


def _route(split: Split, rows: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """(left, right, missing) rows of a split."""
    sides = [split[2](row) for row in rows]
    return tuple(
        tuple(row for row, side in zip(rows, sides, strict=True) if side is want)
        for want in (True, False, None)
    )


def _brute_z(coefficient: float) -> Callable[[tuple[int, ...], frozenset[SplitKey], int], float]:
    """Z(rows, used keys, levels below) by the plain recursion over every lattice key."""
    splits = _splits()

    @cache
    def z(rows: tuple[int, ...], used: frozenset[SplitKey], depth: int) -> float:
        if depth == 0:
            return math.exp(-coefficient * _wg(rows))
        total = 0.0
        for split in splits:
            if split[0] in used:
                continue
            left, right, missing = _route(split, rows)
            below = used | {split[0]}
            total += (
                split[1]
                * math.exp(-coefficient * _wg(missing))
                * z(left, below, depth - 1)
                * z(right, below, depth - 1)
            )
        return total

    return z


def _top_two(coefficient: float) -> dict[tuple[SplitKey, SplitKey], float]:
    """Unnormalised law of (root key, left child key) of a depth-3 tree, by brute force."""
    z = _brute_z(coefficient)
    everything = tuple(range(ROWS))
    weights: dict[tuple[SplitKey, SplitKey], float] = {}
    for root in _splits():
        left, right, missing = _route(root, everything)
        used = frozenset({root[0]})
        outer = root[1] * math.exp(-coefficient * _wg(missing)) * z(right, used, 2)
        for child in _splits():
            if child[0] in used:
                continue
            below_left, below_right, below_missing = _route(child, left)
            both = used | {child[0]}
            weights[(root[0], child[0])] = (
                outer
                * child[1]
                * math.exp(-coefficient * _wg(below_missing))
                * z(below_left, both, 1)
                * z(below_right, both, 1)
            )
    return weights


# --------------------------------------------------------------------------------------------
# Tests


def test_the_lattice_merges_into_groups_within_the_public_bound() -> None:
    store = _store()
    space = SplitSpace.of(store.metadata, "left")
    groups = split_groups(store, space)
    assert [(g.family, g.start, g.size) for g in groups] == [
        (0, 0, 1),
        (1, 0, 1),
        (1, 1, 2),
        (1, 3, 3),
        (1, 6, 3),
    ]
    assert sum(g.size for g in groups) == space.n_splits == 10
    assert len(groups) <= exact_split_groups(space, store.metadata.n_max) == 10
    assert exact_split_groups(space, 4) == 1 + 5  # min(9 points, n_max + 1) for y


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_grouped_normaliser_equals_the_ungrouped_sum(depth: int) -> None:
    store = _store()
    space = SplitSpace.of(store.metadata, "left")
    labels = make_target(store, AttributeTarget(attribute="t"))
    sampler = exact_target(store, space, labels.class_words(), epsilon=2.0)
    brute = _brute_z(0.5)(tuple(range(ROWS)), frozenset(), depth)
    assert math.isclose(math.exp(sampler.log_z((), depth)), brute, rel_tol=1e-9)


def test_grouped_draws_follow_the_ungrouped_law() -> None:
    store = _store()
    space = SplitSpace.of(store.metadata, "left")
    labels = make_target(store, AttributeTarget(attribute="t"))
    epsilon = 1.6
    sampler = exact_target(store, space, labels.class_words(), epsilon=epsilon)
    samples: list[tuple[SplitKey, SplitKey]] = []
    for seed in range(3000):
        keys = sample_tree_exact(sampler, depth=3, rng=seeded_generator(seed))
        samples.append((keys[0], keys[1]))
    observed = Counter(samples)
    # a group is reused on a path with another of its thresholds (the multiset states)
    assert any(a[0] == b[0] == 1 and a != b and a[1] >= 3 for a, b in observed)

    def p_value(weights: dict[tuple[SplitKey, SplitKey], float]) -> float:
        assert set(observed) <= set(weights)
        total = sum(weights.values())
        states = list(weights)
        expected = [weights[state] / total * len(samples) for state in states]
        return float(chisquare([observed[state] for state in states], expected).pvalue)

    assert p_value(_top_two(epsilon / 4)) > SEEDED_P_VALUE
    assert p_value(_top_two(epsilon / 2)) < SEEDED_P_VALUE


@pytest.mark.parametrize(
    "target",
    [AttributeTarget(attribute="t"), QueryTarget(query="[t]")],
    ids=["attribute", "query"],
)
def test_the_depth_1_histograms_give_the_recursions_root_weights(target: AnyTreeTarget) -> None:
    store = _store()
    space = SplitSpace.of(store.metadata, "left")
    labels = make_target(store, target)
    sampler = exact_target(store, space, labels.class_words(), epsilon=2.0)
    groups, weights = stump_weights(store, space, labels, em_coefficient(2.0, GINI_SENSITIVITY))
    assert groups.tolist() == [[g.family, g.start, g.size] for g in sampler.groups]
    assert np.allclose(weights, sampler.choices((), 1), rtol=0, atol=1e-12)
    assert math.isclose(float(log_sum_exp(weights)), sampler.log_z((), 1), rel_tol=1e-12)


def test_depth_1_histogram_draws_follow_the_ungrouped_law() -> None:
    store = _store()
    space = SplitSpace.of(store.metadata, "left")
    labels = make_target(store, AttributeTarget(attribute="t"))
    epsilon = 4.0
    samples = [
        sample_stump_exact(store, space, labels, epsilon=epsilon, rng=seeded_generator(seed))[0]
        for seed in range(2000)
    ]
    observed = Counter(samples)
    everything = tuple(range(ROWS))

    def p_value(coefficient: float) -> float:
        weights = {}
        for key, mass, route in _splits():
            left, right, missing = _route((key, mass, route), everything)
            weights[key] = mass * math.exp(-coefficient * (_wg(left) + _wg(right) + _wg(missing)))
        total = sum(weights.values())
        expected = [weights[key] / total * len(samples) for key in weights]
        assert set(observed) <= set(weights)
        return float(chisquare([observed[key] for key in weights], expected).pvalue)

    assert p_value(epsilon / 4) > SEEDED_P_VALUE
    assert p_value(epsilon / 2) < SEEDED_P_VALUE
