"""The noise-aware significance test (``dpmine.significance``, issue #21).

* The rule: a result passes iff its p-value's upper end ≤ α/m, its excess's lower end > 0 and
  J's lower end ≥ min_jaccard; results are ranked by J's lower end; m must cover the results.
* False claims, by simulation (seeded discrete Laplace noise, the server's law): a claim is
  false when a shown result's true p-value exceeds α/m, its true excess over independence is
  ≤ 0 or its true J is below min_jaccard. Half of the simulated tables are independent columns
  or trees, the others dependent from weakly to strongly. Over 200 runs of a Serenade-like
  run of 12 quality checks, and over 200 runs of the tree miners' extraction on a noisy
  partition (the results chosen from the same noise), the share of runs with any false claim
  is at most α = 0.01 while real structure passes; the filter on the noisy values, in the same
  runs, makes false claims in many of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pytest

from dpmine.intervals import (
    Interval,
    StatisticIntervals,
    box_intervals,
    cell_box,
    excess_of,
    sum_box,
)
from dpmine.miners.trees import release_miss, result_table
from dpmine.significance import (
    ALPHA,
    Significance,
    failed_checks,
    nothing_passed,
    passes,
    percent_at_least,
    rank,
    significance_test,
    verdict_fields,
    verdict_text,
)
from dpmine.treereds import examine_partition
from dpmine.wire.statistics import jaccard, p_value, statistics_from_cells

RUNS = 200


def _intervals(
    jaccard_range: tuple[float, float],
    excess: tuple[float, float] | None = (0.1, 0.3),
    p_range: tuple[float, float] | None = (1e-9, 1e-6),
) -> StatisticIntervals:
    return StatisticIntervals(
        level=0.99,
        scale=1.0,
        support=Interval(10, 20),
        union=Interval(20, 30),
        jaccard=Interval(*jaccard_range),
        p_value=None if p_range is None else Interval(*p_range),
        excess=None if excess is None else Interval(*excess),
    )


@dataclass(frozen=True)
class _Result:
    name: str
    joint_intervals: StatisticIntervals


def test_a_result_passes_only_at_the_unfavourable_end_of_every_interval() -> None:
    good = _intervals((0.5, 0.8))
    assert passes(good, threshold=1e-6, min_jaccard=0.5)
    assert not passes(good, threshold=0.9e-6, min_jaccard=0.5)  # p's upper end above α/m
    assert not passes(good, threshold=1e-6, min_jaccard=0.51)  # J's lower end below the bar
    assert not passes(_intervals((0.5, 0.8), excess=(0.0, 0.3)), threshold=1, min_jaccard=0)
    assert not passes(_intervals((0.5, 0.8), excess=None), threshold=1, min_jaccard=0)
    assert not passes(_intervals((0.5, 0.8), p_range=None), threshold=1, min_jaccard=0)


def test_a_failing_result_names_every_check_it_fails() -> None:
    good = _intervals((0.5, 0.8))
    assert failed_checks(good, threshold=1e-6, min_jaccard=0.5) == ()
    assert failed_checks(good, threshold=0.9e-6, min_jaccard=0.5) == ("p_value",)
    assert failed_checks(good, threshold=1e-6, min_jaccard=0.51) == ("jaccard",)
    flat = _intervals((0.2, 0.8), excess=(0.0, 0.3))
    assert failed_checks(flat, threshold=1e-6, min_jaccard=0.3) == ("excess", "jaccard")
    unbounded = _intervals((0.5, 0.8), p_range=None, excess=None)
    assert failed_checks(unbounded, threshold=1, min_jaccard=0) == ("p_value", "excess")
    nan = math.nan
    lost = _intervals((nan, 0.8), p_range=(1e-9, nan), excess=(nan, 0.3))
    assert failed_checks(lost, threshold=1, min_jaccard=0) == ("p_value", "excess", "jaccard")
    assert verdict_text(()) == "yes"
    assert verdict_text(("p_value", "excess")) == "no: p, excess"
    assert verdict_fields(("jaccard",)) == {"significant": False, "failed_checks": ["jaccard"]}
    assert verdict_fields(()) == {"significant": True, "failed_checks": []}


def test_results_are_ranked_by_the_lower_end_of_j_and_counted() -> None:
    results = [
        _Result("noisy 1.0", _intervals((0.0, 1.0), excess=(-0.5, 1.0))),
        _Result("b", _intervals((0.6, 0.7))),
        _Result("c", _intervals((0.4, 0.9), p_range=(1e-9, 2e-3))),
        _Result("d", _intervals((0.6, 0.65))),
    ]
    assert [r.name for r in rank(results)] == ["b", "d", "c", "noisy 1.0"]  # ties keep order
    verdict = significance_test(results, examined=10, min_jaccard=0.3)
    assert [r.name for r in verdict.passed] == ["b", "d"]
    assert [r.name for r in verdict.ranked] == ["b", "d", "c", "noisy 1.0"]
    assert verdict.summary == Significance(
        alpha=0.01,
        examined=10,
        min_jaccard=0.3,
        total=4,
        passed=2,
        failed=(("p_value", 1), ("excess", 1), ("jaccard", 1)),
    )
    by_name = {r.name: verdict.failed_checks(r) for r in results}
    assert by_name == {"b": (), "d": (), "c": ("p_value",), "noisy 1.0": ("excess", "jaccard")}
    assert verdict.summary.threshold == pytest.approx(0.001)
    assert verdict.summary.level == pytest.approx(0.99)
    assert verdict.summary.describe().startswith(
        "2 of 4 results pass the noise-aware test: p ≤ α/m = 0.01/10 = 0.001, J − J_ind > 0 and "
        "J ≥ 0.3 at the unfavourable ends of intervals that hold together with probability ≥ 99 %"
    )
    assert verdict.summary.describe().endswith(
        "; of the 2 others, 1 fails p ≤ α/m = 0.001, 1 fails J − J_ind > 0 and 1 fails J ≥ 0.3"
    )
    assert verdict.summary.as_dict()["p_threshold"] == pytest.approx(0.001)
    assert verdict.summary.as_dict()["failed_checks"] == {"p_value": 1, "excess": 1, "jaccard": 1}
    with pytest.raises(ValueError, match="cannot come from 3 examined"):
        significance_test(results, examined=3, min_jaccard=0.3)
    with pytest.raises(ValueError, match="alpha"):
        significance_test(results, examined=10, min_jaccard=0.3, alpha=1.0)
    with pytest.raises(ValueError, match="min_jaccard"):
        significance_test(results, examined=10, min_jaccard=1.5)


def test_a_printed_probability_never_rounds_up() -> None:
    """Short decimals print exactly; long ones round down, so "≥ 100%" never appears for a
    probability below 1 (a small α printed with ``:.0%`` used to read "≥ 100%")."""
    assert percent_at_least(0.99) == "99%"
    assert percent_at_least(0.9) == "90%"
    assert percent_at_least(1 - 0.0015) == "99.85%"
    assert percent_at_least(1 - 1e-9) == "99.9999999%"
    assert percent_at_least(1 - 1e-12) == "99.9999999999%"
    assert percent_at_least(2 / 3) == "66.66%"
    assert percent_at_least(1 - 1e-14) == "99.999999999999%"
    assert percent_at_least(1 - 1e-15) == "99.99%"
    assert percent_at_least(1.0) == "100%"


def test_when_nothing_passes_the_message_says_what_was_spent_and_what_to_change() -> None:
    summary = Significance(
        alpha=0.01,
        examined=40,
        min_jaccard=0.3,
        total=7,
        passed=0,
        failed=(("p_value", 4), ("excess", 7), ("jaccard", 0)),
    )
    text = nothing_passed(summary, spent="0.5", hints=["draws are uniform-like", "a larger ε"])
    assert text.startswith("No result passes the noise-aware test (p ≤ α/m = 0.01/40 = 0.00025")
    # Which checks failed, most often first: what more signal would have to tighten.
    assert "). Of the 7 results, 7 fail J − J_ind > 0 and 4 fail p ≤ α/m = 0.00025. ε spent" in text
    assert "ε spent: 0.5. For more signal: draws are uniform-like; a larger ε." in text
    assert text.endswith(
        "all_results_ (CLI: --all) lists the 7 results that did not pass, each with the checks "
        "it failed."
    )
    one = Significance(
        alpha=0.01, examined=1, min_jaccard=0.3, total=1, passed=0, failed=(("jaccard", 1),)
    )
    assert "). The one result fails J ≥ 0.3. ε spent" in nothing_passed(one, spent="1", hints=[])
    assert nothing_passed(one, spent="1", hints=[]).endswith(
        "all_results_ (CLI: --all) lists the 1 result that did not pass, each with the checks it "
        "failed."
    )
    other = Significance(
        alpha=0.01,
        examined=1,
        min_jaccard=0.3,
        total=2,
        passed=1,
        failed=(("p_value", 1), ("excess", 1), ("jaccard", 0)),
    )
    assert other.describe().endswith("; the other one fails p ≤ α/m = 0.01 and J − J_ind > 0")
    empty = Significance(alpha=0.01, examined=0, min_jaccard=0.3, total=0, passed=0)
    assert "lists" not in nothing_passed(empty, spent="1", hints=[])


# -- false claims on independent columns -------------------------------------------------------


def _laplace(rng: np.random.Generator, scale: float, size: int) -> npt.NDArray[np.int64]:
    """Discrete Laplace noise (the server's law) from a seeded generator: the difference of two
    geometric counts of failures, success probability 1 − e^(−1/scale)."""
    success = -math.expm1(-1.0 / scale)
    return np.asarray(rng.geometric(success, size) - rng.geometric(success, size), np.int64)


def _false(cells: tuple[int, int, int, int], threshold: float, min_jaccard: float) -> bool:
    """Whether "true p ≤ α/m, true excess > 0, true J ≥ min_jaccard" is false of true cells."""
    a, b, c, d = cells
    truth_j = jaccard(a, a + b + c)
    return (
        p_value(a + b + c + d, a + b, a + c, a) > threshold
        or excess_of(truth_j, a + b, a + c, a + b + c + d) <= 0
        or truth_j < min_jaccard
    )


def _pair_cells(rng: np.random.Generator, rows: int) -> tuple[int, int, int, int]:
    """The four cells of two Boolean columns with random frequencies: independent half of the
    time, otherwise the right column copies the left one in a random share s ∈ [0, 0.6) of the
    rows (from no structure to strong, with p-values on both sides of α/m)."""
    x, y = rng.uniform(0.02, 0.9, size=2)
    s = 0.0 if rng.random() < 0.5 else float(rng.uniform(0.0, 0.6))
    right_if_left = s + (1 - s) * y  # P(R | L)
    right_if_not = (1 - s) * y  # P(R | not L)
    probabilities = [
        x * right_if_left,
        x * (1 - right_if_left),
        (1 - x) * right_if_not,
        (1 - x) * (1 - right_if_not),
    ]
    drawn = rng.multinomial(rows, probabilities)
    return int(drawn[0]), int(drawn[1]), int(drawn[2]), int(drawn[3])


def test_serenade_checks_make_no_false_claims() -> None:
    """200 runs of m = 12 quality checks each (20 to 3000 rows, noise scale 1 to 50 per cell,
    column pairs independent or weakly to strongly dependent), every check's box at miss α/m:
    the share of runs showing a false claim is ≤ α, while the test does show real structure;
    the noisy filter (noisy p ≤ α/m and noisy J ≥ min_jaccard, the old default) shows false
    claims in many runs of the same simulation."""
    rng = np.random.default_rng(20210021)
    checks, min_jaccard = 12, 0.1
    ours, noisy_filter, shown = 0, 0, 0
    for _ in range(RUNS):
        rows = int(rng.integers(20, 3000))
        scale = float(rng.choice([1.0, 5.0, 20.0, 50.0]))
        false_ours = false_noisy = False
        for _check in range(checks):
            truth = _pair_cells(rng, rows)
            noisy = tuple(int(v) for v in np.asarray(truth) + _laplace(rng, scale, 4))
            box = cell_box(
                (noisy[0], noisy[1], noisy[2], noisy[3]),
                scale=scale,
                miss=ALPHA / checks,
                difference=True,
                association=True,
            )
            joint = box_intervals(box, level=1 - ALPHA / checks, scale=scale)
            is_false = _false(truth, ALPHA / checks, min_jaccard)
            if passes(joint, threshold=ALPHA / checks, min_jaccard=min_jaccard):
                shown += 1
                false_ours |= is_false
            stats = statistics_from_cells(*noisy)
            if stats.p_value <= ALPHA / checks and stats.jaccard >= min_jaccard:
                false_noisy |= is_false
        ours += false_ours
        noisy_filter += false_noisy
    assert ours / RUNS <= ALPHA, (ours, shown)
    assert shown >= 200, shown  # real structure passes
    assert noisy_filter / RUNS >= 0.2, noisy_filter  # the simulation can catch false claims


def _tree_partition(rng: np.random.Generator, rows: int, leaves: int) -> npt.NDArray[np.int64]:
    """The (leaves + 1)² partition of the rows by the leaves of two trees (the last cell of a
    side: the rows outside that tree): independent half of the time, otherwise a random share
    s ∈ [0, 0.6) of the rows falls in the right leaf matching its left leaf."""
    left = rng.dirichlet(np.ones(leaves + 1) * 0.7)
    right = rng.dirichlet(np.ones(leaves + 1) * 0.7)
    s = 0.0 if rng.random() < 0.5 else float(rng.uniform(0.0, 0.6))
    joint = (1 - s) * np.outer(left, right) + s * np.diag(left)
    drawn = rng.multinomial(rows, joint.ravel())
    return np.asarray(drawn, np.int64).reshape(leaves + 1, leaves + 1)


def test_tree_extractions_make_no_false_claims() -> None:
    """200 runs of one leaf-count release of two depth-2 trees (50 to 5000 rows, noise scale
    0.5 to 20, independent or dependent trees): the extraction picks its results from the same
    noise, and the boxes (:func:`dpmine.miners.trees.release_miss`: α/R over every rectangle a
    query can sum) hold for whatever it picks. The share of runs showing a false claim is ≤ α
    while real structure passes; the noisy filter makes false claims in many runs."""
    rng = np.random.default_rng(2021_21)
    leaves, clauses, min_jaccard = 4, 3, 0.1
    sum_miss, level = release_miss((leaves, leaves), clauses, releases=1)
    ours, noisy_filter, shown, results = 0, 0, 0, 0
    for _ in range(RUNS):
        true = _tree_partition(rng, int(rng.integers(50, 5000)), leaves)
        scale = float(rng.choice([0.5, 2.0, 5.0, 20.0]))
        noisy = true + _laplace(rng, scale, true.size).reshape(true.shape)
        found, examined = examine_partition(
            noisy.tolist(), min_supp=1, p_max=1, min_jaccard=min_jaccard, max_clauses=clauses
        )
        threshold = ALPHA / max(examined, 1)
        false_ours = false_noisy = False
        for red in found:
            results += 1
            sums, terms = result_table(red, noisy.tolist(), (leaves, leaves), partition=True)
            truth, same_terms = result_table(red, true.tolist(), (leaves, leaves), partition=True)
            assert same_terms == terms
            joint = box_intervals(
                sum_box(sums, terms, scale=scale, miss=sum_miss, difference=True, association=True),
                level=level,
                scale=scale,
            )
            is_false = _false(truth, threshold, min_jaccard)
            if passes(joint, threshold=threshold, min_jaccard=min_jaccard):
                shown += 1
                false_ours |= is_false
            stats = red.statistics
            if stats.p_value <= threshold and stats.jaccard >= min_jaccard:
                false_noisy |= is_false
        ours += false_ours
        noisy_filter += false_noisy
    assert ours / RUNS <= ALPHA, (ours, shown, results)
    assert shown >= 40, (shown, results)  # real structure passes
    assert noisy_filter / RUNS >= 0.1, noisy_filter  # the simulation can catch false claims
