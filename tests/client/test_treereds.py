"""Client ``extractReds`` and pruning of the tree-based miners (dpmine.treereds, ALGORITHMS.md
§3.6, §3.7).

Every expected value is worked out by hand from the count matrix in the test (comments give the
arithmetic); p-values come from scipy's binomial directly (§1.3: P[X ≥ k] = sf(k − 1)).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy.stats import binom

from dpmine.queries import format_query
from dpmine.treereds import (
    DEFAULT_MAX_JACCARD_ERROR,
    LeafPath,
    LeafQuery,
    NoisyStatistics,
    SignedLeaf,
    TreeRedescription,
    active_cells,
    active_leaves,
    clamped_statistics,
    consistent_release,
    derived_counts,
    extract_redescriptions,
    extract_redescriptions_from_partition,
    is_acceptable,
    is_tautology,
    jaccard_standard_error,
    leaf_counts,
    noisy_statistics,
    partition_counts,
    prune,
    prune_by_precision,
    render_query,
    render_redescription,
    save_support_jaccard_plot,
)
from dpmine.wire.queries import (
    And,
    AnyLiteral,
    BoolLiteral,
    CatLiteral,
    Not,
    NumLiteral,
    Or,
    Redescription,
)

Key = tuple[frozenset[SignedLeaf], frozenset[SignedLeaf]]


def q(*disjuncts: tuple[int, bool]) -> LeafQuery:
    return LeafQuery.of(*disjuncts)


def key(left: LeafQuery, right: LeafQuery) -> Key:
    return (left.key, right.key)


def extract_raw(
    matrix: Sequence[Sequence[float]], left: Sequence[float], **options: Any
) -> list[TreeRedescription]:
    """``extractReds`` summing the raw release as §3.6 prints it: the hand-worked expectations
    below are on the raw cells."""
    return extract_redescriptions(matrix, left, consistent=False, **options)


def keys(reds: list[TreeRedescription]) -> list[Key]:
    return [red.key for red in reds]


def p_at_least(k: int, n: int, s_left: int, s_right: int) -> float:
    return float(binom.sf(k - 1, n, (s_left / n) * (s_right / n)))


def stats(
    *, intersection: float = 50.0, jaccard: float = 0.5, p_value: float = 0.001
) -> NoisyStatistics:
    return NoisyStatistics(
        n_rows=1000.0,
        support_left=100.0,
        support_right=100.0,
        intersection=intersection,
        union=100.0,
        jaccard=jaccard,
        p_value=p_value,
    )


# --------------------------------------------------------------------------------------------
# Derived counts and active sets


def test_derived_counts_sum_columns_of_the_matrix_and_the_left_vector() -> None:
    matrix = [[1.5, -2.0, 3.0], [4.0, 5.0, 6.25]]
    right, n_rows = derived_counts(matrix, [10.0, -1.5])
    # ĉ_R = (1.5 + 4, −2 + 5, 3 + 6.25); N̂ = 10 − 1.5: the right counts play no part in N̂.
    assert right == pytest.approx((5.5, 3.0, 9.25))
    assert n_rows == pytest.approx(8.5)


@pytest.mark.parametrize(
    ("intersections", "left"),
    [
        ([], []),
        ([[1.0, 2.0], [3.0]], [1.0, 2.0]),
        ([[1.0, 2.0]], [1.0, 2.0]),
        ([[1.0, float("nan")]], [1.0]),
    ],
)
def test_malformed_releases_are_refused(
    intersections: list[list[float]], left: list[float]
) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - one of several shape/finiteness messages
        leaf_counts(intersections, left)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        (q((1, True)), {1}),
        (q((1, False)), {0, 2, 3}),
        (q((1, True), (2, False)), {0, 1, 3}),
        (q((0, True), (3, True)), {0, 3}),
    ],
)
def test_active_leaves(query: LeafQuery, expected: set[int]) -> None:
    assert active_leaves(query, 4) == frozenset(expected)


@pytest.mark.parametrize(
    ("query", "tautology"),
    [
        (q((0, False), (1, False)), True),  # two negated leaves of one tree
        (q((0, True), (1, True), (2, True), (3, True)), True),  # positive leaves cover the tree
        (q((2, True), (2, False)), True),  # ¬a ∨ a
        (q((0, True), (1, False)), False),  # {0} and {0, 2, 3}: leaf 1 is out
        (q((0, False)), False),
    ],
)
def test_tautologies_are_queries_whose_active_set_is_every_leaf(
    query: LeafQuery, tautology: bool
) -> None:
    assert is_tautology(query, 4) is tautology


def test_empty_leaves_count_as_covered() -> None:
    # Leaves 0 and 1 and the empty leaf 2 (a contradiction): every row the tree has.
    assert is_tautology(q((0, True), (1, True)), 3, empty=[2])
    assert not is_tautology(q((0, True)), 3, empty=[2])


def test_empty_leaves_must_be_leaves() -> None:
    with pytest.raises(ValueError, match="empty leaves must be leaf indices below 2"):
        extract_redescriptions_from_partition(PARTITION, empty_left=[2])


def test_leaf_queries_check_their_leaves() -> None:
    with pytest.raises(ValueError, match="at least one"):
        LeafQuery(())
    with pytest.raises(ValueError, match="start at 0"):
        q((-1, True))
    with pytest.raises(ValueError, match="out of range"):
        active_leaves(q((4, True)), 4)


def test_the_key_ignores_the_order_of_disjuncts() -> None:
    assert q((0, True), (2, False)).key == q((2, False), (0, True)).key
    assert q((0, True), (2, False)).key != q((0, True), (2, True)).key


# --------------------------------------------------------------------------------------------
# Clamps and statistics


def test_negative_noisy_counts_clamp_at_zero() -> None:
    result = clamped_statistics(100.0, -5.0, 30.0, 10.0)
    # s_L = 0, so I ≤ min(s_L, s_R) = 0; U = 0 + 30 − 0 = 30; J = 0; p = 1 (s_L·s_R = 0).
    assert (result.support_left, result.support_right, result.intersection) == (0.0, 30.0, 0.0)
    assert result.union == 30.0
    assert result.jaccard == 0.0
    assert result.p_value == 1.0


def test_a_negative_row_count_clamps_everything_at_zero() -> None:
    result = clamped_statistics(-4.0, 3.0, 2.0, 1.0)
    # N̂ = 0, hence s_L, s_R ≤ 0, I = 0, U = 0, J = 0, p = 1.
    assert result == NoisyStatistics(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0)


def test_intersection_above_a_support_clamps_to_the_smaller_support() -> None:
    result = clamped_statistics(100.0, 20.0, 30.0, 25.0)
    # I = min(25, 20, 30) = 20; U = 20 + 30 − 20 = 30; J = 2/3.
    assert result.intersection == 20.0
    assert result.union == 30.0
    assert result.jaccard == pytest.approx(2 / 3)
    assert result.p_value == pytest.approx(p_at_least(20, 100, 20, 30))


def test_supports_and_union_clamp_at_the_row_count() -> None:
    result = clamped_statistics(100.0, 150.0, 90.0, 60.0)
    # s_L = min(150, 100) = 100; U = 100 + 90 − 60 = 130 → N̂ = 100; J = 60/100.
    assert result.support_left == 100.0
    assert result.union == 100.0
    assert result.jaccard == pytest.approx(0.6)


def test_the_p_value_uses_the_rounded_clamped_counts() -> None:
    result = clamped_statistics(100.4, 20.6, 29.5, 10.4)
    # round: N̂ = 100, s_L = 21, s_R = 30 (29.5 rounds half to even), I = 10 (not truncated:
    # int(20.6) would give 20).
    assert result.p_value == pytest.approx(p_at_least(10, 100, 21, 30), rel=1e-12)
    assert result.support_left == 20.6  # reported values stay unrounded
    assert result.jaccard == pytest.approx(10.4 / (20.6 + 29.5 - 10.4))


def test_noisy_statistics_sum_the_active_cells_then_clamp() -> None:
    counts = leaf_counts([[-5.0, 10.0], [20.0, 30.0]], [-3.0, 50.0])
    # N̂ = −3 + 50 = 47; ĉ_R = (15, 40).
    first = noisy_statistics(counts, q((0, True)), q((0, True)))
    # s_L = −3 → 0, s_R = 15, I = −5 → 0, U = 15, J = 0, p = 1.
    assert (first.support_left, first.support_right, first.intersection) == (0.0, 15.0, 0.0)
    assert (first.union, first.jaccard, first.p_value) == (15.0, 0.0, 1.0)
    second = noisy_statistics(counts, q((0, False)), q((1, True)))
    # A_L = {1}, A_R = {1}: s_L = 50 → 47 (≤ N̂), s_R = 40, I = 30; U = 47 + 40 − 30 = 57 → 47.
    assert (second.support_left, second.support_right, second.intersection) == (47.0, 40.0, 30.0)
    assert second.union == 47.0
    assert second.jaccard == pytest.approx(30 / 47)
    assert second.p_value == pytest.approx(p_at_least(30, 47, 47, 40), rel=1e-12)


def test_noisy_statistics_of_a_disjunction_with_a_negated_leaf() -> None:
    counts = leaf_counts([[10, 1, 2], [3, 20, 4], [5, 6, 30]], [13, 27, 41])
    # N̂ = 81; ĉ_R = (18, 27, 36). Q_L = +0 ∨ −1 → A_L = {0, 2}; Q_R = −2 → A_R = {0, 1}.
    result = noisy_statistics(counts, q((0, True), (1, False)), q((2, False)))
    # s_L = 13 + 41 = 54; s_R = 18 + 27 = 45; I = 10 + 1 + 5 + 6 = 22; U = 54 + 45 − 22 = 77.
    assert (result.support_left, result.support_right, result.intersection) == (54.0, 45.0, 22.0)
    assert result.union == 77.0
    assert result.n_rows == 81.0


# --------------------------------------------------------------------------------------------
# Acceptability (§3.6)


@pytest.mark.parametrize(
    ("new", "current", "accepted"),
    [
        # higher J, both significant
        (stats(jaccard=0.6), stats(jaccard=0.5), True),
        # equal J is not an improvement
        (stats(jaccard=0.5), stats(jaccard=0.5), False),
        # higher J but the current is significant and the new one is not
        (stats(jaccard=0.6, p_value=0.02), stats(jaccard=0.5), False),
        # higher J, neither significant: the current is not protected (p_cur ≥ p_max)
        (stats(jaccard=0.6, p_value=0.3), stats(jaccard=0.5, p_value=0.2), True),
        # higher J, p_cur = p_max exactly counts as not significant
        (stats(jaccard=0.6, p_value=0.3), stats(jaccard=0.5, p_value=0.01), True),
        # lower J but becomes significant
        (stats(jaccard=0.2), stats(jaccard=0.5, p_value=0.2), True),
        # lower J, p_cur = p_max is not "> p_max"
        (stats(jaccard=0.2), stats(jaccard=0.5, p_value=0.01), False),
        # lower J, the new p = p_max is not "< p_max"
        (stats(jaccard=0.2, p_value=0.01), stats(jaccard=0.5, p_value=0.2), False),
        # better in every way but I above maxSupp = 800
        (stats(jaccard=0.9, intersection=801.0), stats(jaccard=0.5, p_value=0.5), False),
        (stats(jaccard=0.9, intersection=800.0), stats(jaccard=0.5, p_value=0.5), True),
    ],
)
def test_acceptability_rule(new: NoisyStatistics, current: NoisyStatistics, accepted: bool) -> None:
    assert is_acceptable(new, current, max_support=800.0, p_max=0.01) is accepted


# --------------------------------------------------------------------------------------------
# extractReds (§3.6)

# Left leaves 1..3 (300 rows each) spread evenly over right leaves 1..3; left leaf 0 (400 rows)
# mostly in right leaf 0. N̂ = 1300, maxSupp = 1040, ĉ_R = (300, 340, 330, 330).
SIGN_WORLD = [
    [300, 40, 30, 30],
    [0, 100, 100, 100],
    [0, 100, 100, 100],
    [0, 100, 100, 100],
]
SIGN_LEFT = [400, 300, 300, 300]


def test_the_negated_pair_replaces_the_start_when_acceptable() -> None:
    reds = extract_raw(SIGN_WORLD, SIGN_LEFT, max_clauses=1)
    found = {red.key: red for red in reds}
    # (+0, +0): s_L 400, s_R 300, I 300, U 400, J 0.75. (−0, +0): I 0. (+0, −0): I 100,
    # U 1300. (−0, −0): A_L = A_R = {1, 2, 3}: s_L 900, s_R 1000, I 900, U 1000, J 0.9 > 0.75,
    # p tiny, I ≤ 1040: it replaces the start and passes the final filters (900, 1000 < 1040).
    assert key(q((0, True)), q((0, True))) not in found
    red = found[key(q((0, False)), q((0, False)))]
    assert red.statistics.support_left == 900.0
    assert red.statistics.support_right == 1000.0
    assert red.statistics.intersection == 900.0
    assert red.statistics.union == 1000.0
    assert red.statistics.jaccard == pytest.approx(0.9)
    assert red.statistics.p_value == pytest.approx(p_at_least(900, 1300, 900, 1000), rel=1e-9)


# One-to-one leaves: N̂ = 300, maxSupp = 240.
DIAGONAL = [[100, 0, 0], [0, 100, 0], [0, 0, 100]]
DIAGONAL_LEFT = [100, 100, 100]


def test_sign_variants_are_tried_in_order_against_the_current() -> None:
    reds = extract_raw(DIAGONAL, DIAGONAL_LEFT, max_clauses=1)
    # Pair (0, 1): (+0, +1) has I = 0. (−0, +1): A_L = {1, 2}: I 100, s_L 200, s_R 100, J 0.5,
    # p tiny: accepted. (+0, −1) also has J = 0.5: not > 0.5, so it does not replace it.
    # (−0, −1): I 100 (cell (2, 2)), U 300, J 1/3: rejected.
    assert key(q((0, False)), q((1, True))) in keys(reds)
    assert key(q((0, True)), q((1, False))) not in keys(reds)
    # Pair (0, 0): (+0, +0) has J = 1 and nothing beats it.
    assert key(q((0, True)), q((0, True))) in keys(reds)
    expected: set[Key] = set()
    for i in range(3):
        for j in range(3):
            expected.add(key(q((i, i == j)), q((j, True))))  # −i for i ≠ j
    assert set(keys(reds)) == expected
    assert len(reds) == 9


def test_a_pair_above_max_support_is_discarded() -> None:
    matrix = [[900, 0], [0, 100]]
    left = [900, 100]
    # N̂ = 1000. Pair (0, 0): I = 900, J = 1; every variant has I = 0 or J = 1 (not better), so
    # it stays at I = 900: above 0.8·1000 it is discarded, below 0.95·1000 it is kept.
    # s_L = s_R = 900 < 950.
    start = key(q((0, True)), q((0, True)))
    assert start not in keys(extract_raw(matrix, left, max_clauses=1))
    assert start in keys(extract_raw(matrix, left, max_clauses=1, max_supp_fraction=0.95))


def test_a_variant_within_max_support_rescues_a_pair() -> None:
    matrix = [[900, 0], [0, 100]]
    left = [900, 100]
    # Pair (0, 1): (+0, +1) has I = 0; (−0, +1): A_L = {1}, A_R = {1}: I 100, J 1, p tiny: kept.
    # Pair (1, 1): (+1, +1) directly. Pair (1, 0): (+1, +0) has I = 0; (−1, +0) would reach
    # I = 900 > 800, not acceptable; (+1, −0) (A = {1} × {1}, J 1) is. All three measure the
    # same cells {1} × {1}: one result, the first found.
    reds = extract_raw(matrix, left, max_clauses=1)
    assert keys(reds) == [key(q((0, False)), q((1, True)))]


def test_a_discarded_pair_is_not_extended() -> None:
    # Negative noisy cells let an extension bring I back under maxSupp, so the discard matters.
    matrix = [[-50, -50, 5], [0, 0, 100], [20, 100, -20]]
    left = [-50, 100, 50]
    counts = leaf_counts(matrix, left)
    # N̂ = 100, maxSupp = 80, ĉ_R = (−30, 50, 85).
    start = noisy_statistics(counts, q((1, True)), q((2, True)))
    # (+1, +2): s_L 100, s_R 85, I = min(100, 100, 85) = 85 > 80.
    assert start.intersection == 85.0
    # Variants: (−1, +2): I = 5 − 20 < 0 → 0; (+1, −2): I = 0 + 0; (−1, −2): s_L = −50 + 50 = 0,
    # so I = 0. None is acceptable: the pair is discarded.
    for left_positive, right_positive in ((False, True), (True, False), (False, False)):
        variant = noisy_statistics(counts, q((1, left_positive)), q((2, right_positive)))
        assert variant.intersection == 0.0
    # Grown from that start, +0 ∨ +1 ⟺ +0 ∨ +2 would pass every filter: A_L = {0, 1},
    # A_R = {0, 2}: raw I = −50 + 5 + 0 + 100 = 55, s_L = 50, s_R = 55, I = 50, U = 55, J 0.91.
    grown = noisy_statistics(counts, q((0, True), (1, True)), q((0, True), (2, True)))
    assert (grown.support_left, grown.support_right, grown.intersection) == (50.0, 55.0, 50.0)
    assert grown.jaccard == pytest.approx(50 / 55)
    assert grown.p_value == pytest.approx(p_at_least(50, 100, 50, 55), rel=1e-9)
    # No other start reaches it (without the discard it does appear, from pair (1, 2)).
    reds = extract_raw(matrix, left, min_supp=1, p_max=0.5)
    assert key(q((0, True), (1, True)), q((0, True), (2, True))) not in keys(reds)


@pytest.mark.parametrize(
    ("matrix", "left"),
    [
        ([[2000, 6500], [0, 1500]], [8500, 1500]),  # big left leaf: s_L = 8500
        ([[2000, 0], [6500, 1500]], [2000, 8000]),  # transposed: s_R = 8500
    ],
)
def test_a_support_at_or_above_max_support_is_filtered(
    matrix: list[list[float]], left: list[float]
) -> None:
    # N̂ = 10000. Pair (0, 0): (+0, +0): supports 8500 and 2000, I 2000, U 8500, J 0.235, p tiny
    # (mean 1700, sd 38). Variants: I 0; I 6500 with J 0.65 but p ≈ 1 (mean 6800), not
    # acceptable; I 1500 with J 1500/8000 < 0.235. So (+0, +0) stays, with I ≤ maxSupp but one
    # support of 8500: dropped under 0.8·N̂ = 8000, kept under 0.9·N̂ = 9000.
    start = key(q((0, True)), q((0, True)))
    assert start not in keys(extract_raw(matrix, left, max_clauses=1))
    kept = extract_raw(matrix, left, max_clauses=1, max_supp_fraction=0.9)
    red = next(red for red in kept if red.key == start)
    assert red.statistics.intersection == 2000.0
    assert red.statistics.jaccard == pytest.approx(2000 / 8500)
    assert {red.statistics.support_left, red.statistics.support_right} == {8500.0, 2000.0}


# Left leaves 0 and 1 both land in right leaf 0. N̂ = 300, maxSupp = 240, ĉ_R = (200, 50, 50).
MERGE_WORLD = [[100, 0, 0], [100, 0, 0], [0, 50, 50]]
MERGE_LEFT = [100, 100, 100]


def test_an_extension_round_adds_the_disjunct_that_raises_jaccard() -> None:
    plain = extract_raw(MERGE_WORLD, MERGE_LEFT, max_clauses=1)
    # Pair (0, 0): (+0, +0): s_L 100, s_R 200, I 100, J 0.5; variants give J 1/3, 0, 0.5.
    simple = next(red for red in plain if red.key == key(q((0, True)), q((0, True))))
    assert simple.statistics.jaccard == pytest.approx(0.5)
    extended = extract_raw(MERGE_WORLD, MERGE_LEFT)
    # Round 1, left: +1 → A_L = {0, 1}: s_L 200, I 200, U 200, J 1 (−2 ties at J 1, later);
    # −1 and ±2 give J 1/3. Right: nothing beats J 1. Round 2: +2 would make A_L all leaves
    # (skipped), −2 gives J 1 again (not >).
    target = key(q((0, True), (1, True)), q((0, True)))
    assert target in keys(extended)
    assert key(q((0, True)), q((0, True))) not in keys(extended)
    red = next(red for red in extended if red.key == target)
    assert red.left.disjuncts == (SignedLeaf(0, True), SignedLeaf(1, True))
    assert red.statistics.intersection == 200.0
    assert red.statistics.jaccard == pytest.approx(1.0)
    assert red.statistics.p_value == pytest.approx(p_at_least(200, 300, 200, 200), rel=1e-9)


def test_duplicate_pairs_of_queries_are_dropped() -> None:
    reds = extract_raw(MERGE_WORLD, MERGE_LEFT)
    # Pairs (0, 0) and (1, 0) both grow into {+0, +1} ⟺ +0 (disjuncts in a different order).
    target = key(q((0, True), (1, True)), q((0, True)))
    assert keys(reds).count(target) == 1
    assert len(set(keys(reds))) == len(reds)


def test_a_tautological_extension_is_skipped() -> None:
    # Right tree of 2 leaves that catch only 100 of the 500 rows (missing values): N̂ = 500,
    # maxSupp = 400, ĉ_R = (60, 40).
    matrix = [[60, 40], [0, 0], [0, 0]]
    left = [100, 200, 200]
    reds = extract_raw(matrix, left)
    # Pair (0, 0): (+0, +0): s_L 100, s_R 60, I 60, J 0.6. Adding +1 on the right would give
    # A_R = {0, 1} (every leaf): I 100, U 100, J 1, acceptable, but it is a tautology and is
    # skipped; −1 leaves A_R = {0}. Left extensions lower J (s_L grows, I does not).
    found = {red.key: red for red in reds}
    red = found[key(q((0, True)), q((0, True)))]
    assert red.statistics.jaccard == pytest.approx(0.6)
    assert not any(is_tautology(red.right, 2) or is_tautology(red.left, 3) for red in reds)


def test_tautologies_are_dropped_at_the_end() -> None:
    # A right tree with a single leaf: every right query is +0 (every leaf) or −0 (no leaf).
    matrix = [[100], [20], [10]]
    left = [100, 200, 200]
    # Pair (0, 0) ends at (+0, +0): s_L 100, s_R 130, I 100, U 130, J 0.769, p tiny, I ≥ 10,
    # s_L, s_R < 0.8·500 = 400: it passes every numeric filter ...
    counts = leaf_counts(matrix, left)
    numbers = noisy_statistics(counts, q((0, True)), q((0, True)))
    assert numbers.jaccard == pytest.approx(100 / 130)
    assert numbers.p_value < 0.01
    assert numbers.support_left < 400
    assert numbers.support_right < 400
    # ... but +0 covers the whole right tree.
    assert extract_raw(matrix, left) == []


# Two leaves per side, weakly related: N̂ = 20, maxSupp = 16, ĉ_R = (10, 10).
WEAK_WORLD = [[6, 4], [4, 6]]
WEAK_LEFT = [10, 10]


def test_the_p_value_filter() -> None:
    weak_p = p_at_least(6, 20, 10, 10)  # I = 6, s_L = s_R = 10: about 0.38
    assert 0.01 < weak_p < 0.5
    lenient = extract_raw(WEAK_WORLD, WEAK_LEFT, min_supp=1, p_max=0.5, max_clauses=1)
    # (0, 0), (1, 1): J = 6/14 directly. (0, 1): (+0, +1) has I 4, J 0.25, p ≈ 0.77 ≥ 0.5, so
    # (−0, +1) (A = {1} × {1}, J 6/14) replaces it; (1, 0) likewise becomes (−1, +0), on
    # {0} × {0}. Pairs on the same cells are one result: (+0, +0) and (−0, +1) stay.
    assert keys(lenient) == [key(q((0, True)), q((0, True))), key(q((0, False)), q((1, True)))]
    for red in lenient:
        assert red.statistics.jaccard == pytest.approx(6 / 14)
        assert red.statistics.p_value == pytest.approx(weak_p, rel=1e-12)
    assert extract_raw(WEAK_WORLD, WEAK_LEFT, min_supp=1, max_clauses=1) == []


def test_min_support_and_min_jaccard_filters() -> None:
    # In the diagonal world every kept pair has I = 100 and J ∈ {1, 0.5}.
    assert extract_raw(DIAGONAL, DIAGONAL_LEFT, min_supp=101, max_clauses=1) == []
    strict = extract_raw(DIAGONAL, DIAGONAL_LEFT, min_jaccard=0.6, max_clauses=1)
    assert set(keys(strict)) == {key(q((i, True)), q((i, True))) for i in range(3)}


@pytest.mark.parametrize(
    "arguments",
    [
        {"max_clauses": 0},
        {"max_supp_fraction": 0.0},
        {"max_supp_fraction": 1.5},
        {"p_max": 0.0},
        {"min_jaccard": 1.1},
        {"min_supp": -1.0},
    ],
)
def test_parameters_are_checked(arguments: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="must be"):
        extract_redescriptions(DIAGONAL, DIAGONAL_LEFT, **arguments)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# Rendering


A = BoolLiteral(attribute="A")
B_LOW = NumLiteral(attribute="B", upper=2.5)
C_X = CatLiteral(attribute="C", category="x")


def test_render_query_from_leaf_paths() -> None:
    paths: list[list[AnyLiteral]] = [[A, B_LOW], [A, NumLiteral(attribute="B", lower=2.5)], [C_X]]
    expr = render_query(q((2, True), (0, True)), paths)
    assert expr == Or(terms=[And(terms=[A, B_LOW]), C_X])  # leaf order: the canonical text
    assert format_query(expr) == "[A] & [B <= 2.5] | [C = x]"
    assert format_query(render_query(q((0, False)), paths)) == "!([A] & [B <= 2.5])"


def test_a_negated_leaf_renders_as_its_complement_alone() -> None:
    # +0 ∨ −2 holds the rows outside leaf 2: leaf 0 is inside !(path_2) already.
    paths: list[list[AnyLiteral]] = [[A, B_LOW], [A, NumLiteral(attribute="B", lower=2.5)], [C_X]]
    assert render_query(q((0, True), (2, False)), paths) == Not(term=C_X)
    assert render_query(q((2, False)), paths) == Not(term=C_X)


def test_empty_leaves_are_left_out_and_print_no_query() -> None:
    paths: list[LeafPath] = [None, [C_X], [A]]
    assert render_query(q((0, True), (2, True)), paths) == A
    with pytest.raises(ValueError, match="every leaf of the query is empty"):
        render_query(q((0, True)), paths)
    with pytest.raises(ValueError, match="tautology"):
        render_query(q((0, False)), paths)  # the complement of an empty leaf: every row
    with pytest.raises(ValueError, match="tautology"):
        render_query(q((1, False), (2, False)), paths)


def test_render_query_needs_a_path_for_every_leaf_used() -> None:
    with pytest.raises(ValueError, match="no path given for leaf 3"):
        render_query(q((3, True)), [[A], [C_X]])


def test_render_redescription() -> None:
    red = TreeRedescription(q((1, True)), q((0, False)), stats())
    rendered = render_redescription(red, [[A], [C_X]], [[B_LOW], [A]])
    assert rendered == Redescription(left=C_X, right=Not(term=B_LOW))


# --------------------------------------------------------------------------------------------
# Consistent estimate of the release and the error of noisy J [REC]


def test_the_consistent_release_spreads_each_row_gap_over_its_cells() -> None:
    # row 0: 33 − (10 + 20) = 3 → +1 on each of b + 1 = 3 observations' cells; row 1: −3 → −1
    matrix, left = consistent_release([[10, 20], [30, 0]], [33, 27])
    assert matrix == ((11.0, 21.0), (29.0, -1.0))
    assert left == (32.0, 28.0)


def test_a_consistent_release_is_left_as_is() -> None:
    matrix, left = consistent_release(DIAGONAL, DIAGONAL_LEFT)
    assert matrix == tuple(tuple(float(v) for v in row) for row in DIAGONAL)
    assert left == tuple(float(v) for v in DIAGONAL_LEFT)


def test_extraction_is_consistent_by_default() -> None:
    matrix, left = [[90, 12, -3], [8, 70, 5], [-2, 9, 120]], [110, 70, 140]
    assert extract_redescriptions(matrix, left) == extract_raw(*consistent_release(matrix, left))
    assert extract_redescriptions(matrix, left) != extract_raw(matrix, left)


def test_the_standard_error_by_hand() -> None:
    # a = b = 2, (+0, +0), scale 1 → v = 2, c = 3, |A_L| = m = 1: Var I = 2·1·2/3 = 4/3,
    # Var D = 2·(1·1·2 + 1·1·2)/3 = 8/3, Cov = −2·1·1/3 = −2/3; I = 60, D = 40, U = 100:
    # Var J = (40²·4/3 + 60²·8/3 + 2·60·40·2/3) / 100⁴
    red = TreeRedescription(q((0, True)), q((0, True)), stats(intersection=60.0))
    expected = math.sqrt((1600 * 4 / 3 + 3600 * 8 / 3 + 4800 * 2 / 3) / 100**4)
    assert jaccard_standard_error(red, 2, 2, 1.0) == pytest.approx(expected)
    # raw sums: Var I = 2·1·1, Var D = 2·(1 + 2·1), Cov = −Var I
    raw = math.sqrt((1600 * 2 + 3600 * 6 + 4800 * 2) / 100**4)
    assert jaccard_standard_error(red, 2, 2, 1.0, consistent=False) == pytest.approx(raw)
    assert jaccard_standard_error(red, 2, 2, 0.0) == 0.0
    with pytest.raises(ValueError, match="noise_scale"):
        jaccard_standard_error(red, 2, 2, -1.0)


@pytest.mark.parametrize("consistent", [True, False])
@pytest.mark.parametrize(
    ("left_query", "right_query"),
    [(((0, True),), ((0, True),)), (((1, False),), ((2, True), (0, True)))],
)
def test_the_standard_error_matches_simulated_laplace_noise(
    consistent: bool,
    left_query: tuple[tuple[int, bool], ...],
    right_query: tuple[tuple[int, bool], ...],
) -> None:
    # The delta-method error against the spread of noisy J over 4,000 simulated releases
    # (Laplace of scale 12 on every cell and left count, as tree.leaf_counts adds).
    truth = np.array([[300.0, 100.0, 20.0], [100.0, 500.0, 60.0], [30.0, 40.0, 400.0]])
    sizes = truth.sum(axis=1)
    rng = np.random.default_rng(7)
    scale = 12.0
    left, right = q(*left_query), q(*right_query)
    draws = []
    for _ in range(4000):
        matrix = truth + rng.laplace(0.0, scale, truth.shape)
        counts = sizes + rng.laplace(0.0, scale, sizes.shape)
        if consistent:
            matrix_c, counts_c = consistent_release(matrix.tolist(), counts.tolist())
        else:
            matrix_c, counts_c = tuple(map(tuple, matrix.tolist())), tuple(counts.tolist())
        draws.append(noisy_statistics(leaf_counts(matrix_c, counts_c), left, right).jaccard)
    exact = TreeRedescription(
        left, right, noisy_statistics(leaf_counts(truth.tolist(), sizes.tolist()), left, right)
    )
    predicted = jaccard_standard_error(exact, 3, 3, scale, consistent=consistent)
    assert float(np.std(draws)) == pytest.approx(predicted, rel=0.1)


def test_the_consistent_estimate_is_the_more_precise() -> None:
    red = TreeRedescription(q((1, False)), q((2, True)), stats(intersection=60.0))
    assert jaccard_standard_error(red, 4, 4, 5.0) < jaccard_standard_error(
        red, 4, 4, 5.0, consistent=False
    )


# --------------------------------------------------------------------------------------------
# The partition release [REC, §3.6]

#: 2 left leaves × 3 right leaves, plus the rows in no left leaf (last row) and in no right leaf
#: (last column).
PARTITION = [[90, 10, 5, 4], [8, 70, 12, 6], [3, 2, 1, 9]]


def test_partition_counts_take_every_row_once() -> None:
    counts = partition_counts(PARTITION)
    assert counts.outside
    assert (counts.n_left, counts.n_right) == (2, 3)
    assert counts.intersections == tuple(tuple(float(v) for v in row) for row in PARTITION)
    assert counts.left == (109.0, 96.0, 15.0)  # 90 + 10 + 5 + 4, 8 + 70 + 12 + 6; outside
    assert counts.right == (101.0, 82.0, 18.0, 19.0)  # column sums over all three rows
    assert counts.n_rows == 220.0  # every cell
    # (+0, +0): s_L = 109, s_R = 101, I = 90, U = 120
    stats_00 = noisy_statistics(counts, q((0, True)), q((0, True)))
    assert (stats_00.intersection, stats_00.union) == (90.0, 120.0)
    assert stats_00.jaccard == pytest.approx(0.75)
    # (−0, +0): the complement of leaf 0 holds leaf 1 and the rows outside the left tree:
    # s_L = 96 + 15 = 111, I = 8 + 3 = 11.
    stats_n0 = noisy_statistics(counts, q((0, False)), q((0, True)))
    assert (stats_n0.support_left, stats_n0.intersection) == (111.0, 11.0)


def test_a_negated_leaf_holds_the_cell_of_the_rows_outside_only_in_a_partition() -> None:
    assert active_cells(q((0, False)), 2, outside=True) == {1, 2}
    assert active_cells(q((0, False), (1, True)), 2, outside=True) == {1, 2}
    assert active_cells(q((0, True), (1, True)), 2, outside=True) == {0, 1}
    assert active_cells(q((0, False)), 2, outside=False) == {1}


@pytest.mark.parametrize(
    ("partition", "message"),
    [
        ([[1, 2, 3]], "at least two rows"),
        ([[1, 2], [3]], "rectangular"),
        ([[1, 2], [3, math.nan]], "finite"),
    ],
)
def test_partition_counts_refuse_malformed_releases(partition: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        partition_counts(partition)


def test_extraction_from_a_partition_searches_its_cells() -> None:
    found = extract_redescriptions_from_partition(PARTITION, min_supp=1, p_max=1.0)
    # Pair (0, 0): (+0, +0) has J = 90/120. (−0, −0) holds the rows outside the trees too:
    # A_L = {1, out}, A_R = {1, 2, out}: s_L = 96 + 15 = 111, s_R = 82 + 18 + 19 = 119,
    # I = 70 + 12 + 6 + 2 + 1 + 9 = 100, U = 130, J = 0.769 > 0.75: it replaces the start.
    assert (found[0].left, found[0].right) == (q((0, False)), q((0, False)))
    assert found[0].statistics.jaccard == pytest.approx(100 / 130)
    assert max(red.statistics.jaccard for red in found) == pytest.approx(100 / 130)
    # Every result measures its own cells (pairs that end on the same cells are kept once).
    counts = partition_counts(PARTITION)
    cells = [
        (active_cells(red.left, 2, outside=True), active_cells(red.right, 3, outside=True))
        for red in found
    ]
    assert len(cells) == len(set(cells))
    for red in found:
        assert red.statistics == noisy_statistics(counts, red.left, red.right)
    with pytest.raises(ValueError, match="p_max"):
        extract_redescriptions_from_partition(PARTITION, p_max=0.0)


def test_the_partition_standard_error_by_hand() -> None:
    # a = b = 2, (+0, +0), scale 1 → v = 2, |A_L| = m = 1: Var I = 2·1·1 = 2,
    # Var D = 2·(1·(3 − 1) + (3 − 1)·1) = 8, Cov = 0; I = 60, D = 40, U = 100.
    red = TreeRedescription(q((0, True)), q((0, True)), stats(intersection=60.0))
    expected = math.sqrt((1600 * 2 + 3600 * 8) / 100**4)
    assert jaccard_standard_error(red, 2, 2, 1.0, partition=True) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("left_query", "right_query"),
    [(((0, True),), ((0, True),)), (((1, False),), ((2, True), (0, True)))],
)
def test_the_partition_standard_error_matches_simulated_laplace_noise(
    left_query: tuple[tuple[int, bool], ...], right_query: tuple[tuple[int, bool], ...]
) -> None:
    # 3 × 3 leaves and the rows outside them; Laplace of scale 6 on every cell (1/ε, ε = 1/6).
    truth = np.array(
        [
            [300.0, 100.0, 20.0, 15.0],
            [100.0, 500.0, 60.0, 10.0],
            [30.0, 40.0, 400.0, 25.0],
            [12.0, 8.0, 20.0, 5.0],
        ]
    )
    rng = np.random.default_rng(11)
    scale = 6.0
    left, right = q(*left_query), q(*right_query)
    draws = [
        noisy_statistics(
            partition_counts((truth + rng.laplace(0.0, scale, truth.shape)).tolist()), left, right
        ).jaccard
        for _ in range(4000)
    ]
    exact = TreeRedescription(
        left, right, noisy_statistics(partition_counts(truth.tolist()), left, right)
    )
    predicted = jaccard_standard_error(exact, 3, 3, scale, partition=True)
    assert float(np.std(draws)) == pytest.approx(predicted, rel=0.1)


def test_the_partition_at_epsilon_beats_the_consistent_paper_release_at_epsilon() -> None:
    # Same ε: the partition has scale 1/ε, each paper release 2/ε.
    red = TreeRedescription(q((1, False)), q((2, True)), stats(intersection=60.0))
    assert jaccard_standard_error(red, 4, 4, 5.0, partition=True) < jaccard_standard_error(
        red, 4, 4, 10.0
    )


# --------------------------------------------------------------------------------------------
# Pruning (§3.7)


def test_prune_keeps_supports_at_or_above_the_threshold() -> None:
    reds = [
        TreeRedescription(q((i, True)), q((i, True)), stats(intersection=support))
        for i, support in enumerate([10.0, 199.5, 200.0, 350.0])
    ]
    assert prune(reds, 200.0) == reds[2:]
    assert prune(reds, 0.0) == reds


@dataclass(frozen=True)
class _WithError:
    jaccard_error: float


def test_prune_by_precision_keeps_errors_at_or_below_the_bound() -> None:
    reds = [_WithError(error) for error in (0.02, 0.1, 0.1000001, math.inf)]
    assert prune_by_precision(reds, 0.1) == reds[:2]
    assert prune_by_precision(reds) == prune_by_precision(reds, DEFAULT_MAX_JACCARD_ERROR)
    for bad in (0.0, -1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="max_error"):
            prune_by_precision(reds, bad)


def test_the_plot_is_written(tmp_path: Path) -> None:
    reds = [
        TreeRedescription(q((i, True)), q((0, True)), stats(intersection=support, jaccard=j))
        for i, (support, j) in enumerate([(12.0, 0.95), (40.0, 0.8), (300.0, 0.45)])
    ]
    plain = save_support_jaccard_plot(reds, tmp_path / "plain.png")
    with_threshold = save_support_jaccard_plot(reds, str(tmp_path / "pruned.png"), threshold=30)
    for path in (plain, with_threshold):
        data = path.read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n")
        assert len(data) > 1000


def test_the_plot_names_the_extra_when_matplotlib_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ImportError, match=r"dpmine\[plot\]"):
        save_support_jaccard_plot([], tmp_path / "none.png")
    assert not (tmp_path / "none.png").exists()
