"""Serenade's private selections ``initial_pairs`` and ``extend_one`` (ALGORITHMS.md §1.4,
§2.2–2.4, §7) on tiny hand-made two-view datasets loaded with the real loader.

The exact EM laws are computed here, independently of the kernels, from the spec:

* candidates of §2.2 (unextended; every allowed side, operator, polarity, unused attribute and
  literal) and of §2.3 (left literal × right literal);
* base measure of §7: one unit per discrete literal, one unit per numeric attribute (per
  side/operator/polarity) spread uniformly over its grid intervals (grid mode) or by §1.4's
  threshold measure (continuous mode: each bound unbounded with probability ½, else uniform on
  [lo, hi]; a ≤ b; not both unbounded), one unit for "unextended";
* weight μ·exp(c·Q), c = ε/(2Δ), Q from the true supports evaluated row by row here.

In continuous mode a drawn threshold pair is mapped to the cell pair it falls in (which data
values it selects, §1.4 with all distinct values of the column as cut-points); the measure of
every cell pair is computed analytically. Kernel draws are compared with the exact laws by a
chi-square test (cells with expected count < 5 pooled) with a p-value floor of 1e-6 per check,
seeded generators throughout.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Literal

import numpy as np
import pytest
from scipy.stats import chisquare

from dpmine.queries import format_query, serenade_query
from dpmine.wire import (
    AnyAttribute,
    AnyLiteral,
    BooleanAttribute,
    BoolLiteral,
    CategoricalAttribute,
    CatLiteral,
    CsvSource,
    DatasetMetadata,
    Expr,
    ExtendOneRequest,
    Not,
    NumericAttribute,
    NumLiteral,
    QualityParameters,
    Redescription,
)
from dpmine.wire.queries import And, Or
from dpmine.wire.query_tree import attributes as attributes_of
from dpmine_server.data.bitsets import Bitset
from dpmine_server.data.columns import (
    BooleanColumn,
    CategoricalColumn,
    ColumnStore,
    NumericColumn,
)
from dpmine_server.data.loaders import load_store
from dpmine_server.dp import candidates
from dpmine_server.dp.candidates import (
    ContinuousCells,
    ThresholdFamily,
    continuous_cells,
    rejection_proposal_cap,
)
from dpmine_server.dp.lattice import PublicLattice
from dpmine_server.dp.rng import seeded_generator
from dpmine_server.operations import CATALOG, serenade
from dpmine_server.operations.redescriptions import extend_enumeration, quality_parameters
from dpmine_server.operations.serenade import (
    REJECTION_MAX_EXPONENT,
    ExtensionRules,
    Op,
    QualityParams,
    ThresholdMode,
    build_extension_resources,
    choose_threshold_mode,
    extend_one,
    extension_families,
    initial_pairs,
    pair_families,
    parse_side,
)
from dpmine_server.operations.serenade_quality import (
    coverage_increase,
    one_sided,
    sensitivities,
    sensitivity,
)
from dpmine_server.operations.serenade_thresholds import threshold_grid
from support.serenade_reference import (
    Data,
    Key,
    Side,
    cell_measure,
    discrete_literals,
    extension_key,
    extension_law,
    grid_literals,
    pair_key,
    pairs_law,
)

P_VALUE_FLOOR = 1e-6
MIN_EXPECTED = 5.0

#: Ten rows; "?" and "" are missing. Left view: a, colour, d. Right view: b, x (public range
#: [0, 10], owner's grid 2.5, 5, 7.5; no value on the grid or on the range's ends).
CSV_TEXT = """a,colour,d,b,x
1,red,1,1,1.0
1,red,0,1,3.0
1,green,1,0,3.0
0,green,0,1,4.0
0,blue,1,0,6.0
1,blue,?,?,8.5
?,red,1,1,?
0,,0,0,1.0
1,green,1,1,6.0
0,red,0,0,8.5
"""
COLOURS = ["red", "green", "blue"]
GRID = [2.5, 5.0, 7.5]

A = BoolLiteral(attribute="a")
D = BoolLiteral(attribute="d")
B = BoolLiteral(attribute="b")
RED = CatLiteral(attribute="colour", category="red")
GREEN = CatLiteral(attribute="colour", category="green")
X_LOW = NumLiteral(attribute="x", upper=5.0)
X_MID = NumLiteral(attribute="x", lower=2.5, upper=7.5)

#: Q = J·σ(0.8(|I| − 2)) with c = ε/(2Δ) = 1/(2·0.2) = 2.5 at ε = 1.
PARAMS = QualityParams(s=0.8, x0=2.0, delta=0.2)
NOSENS = QualityParams(s=0.0, x0=2.0, delta=1.0, function="jaccard")
EPSILON = 1.0


def attributes(kind: Literal["views", "table"], *, numeric_left: bool = False) -> DatasetMetadata:
    """The public metadata of CSV_TEXT: two views, or one table (no views)."""

    def view(side: Side) -> Side | None:
        return side if kind == "views" else None

    declared: list[AnyAttribute] = [
        BooleanAttribute(name="a", view=view("left")),
        CategoricalAttribute(name="colour", view=view("left"), categories=COLOURS),
        BooleanAttribute(name="d", view=view("left")),
        BooleanAttribute(name="b", view=view("right")),
        NumericAttribute(name="x", view=view("right"), lo=0.0, hi=10.0, grid=GRID),
    ]
    if numeric_left:
        declared.append(NumericAttribute(name="y", view=view("left"), lo=0.0, hi=4.0, grid=[2.0]))
    return DatasetMetadata(kind=kind, n_max=50, attributes=declared)


# --------------------------------------------------------------------------------------------
# An independent reference: rows, supports, candidates and exact laws from the spec


def assert_law(counts: Counter[Key], law: dict[Key, float], *, complete: bool = False) -> None:
    """No outcome outside the law's support; chi-square p-value above the floor. With
    ``complete``, every outcome with expected count ≥ 25 must have been seen (a miss has
    probability below e^{-25})."""
    total = sum(counts.values())
    outside = [key for key in counts if law.get(key, 0.0) == 0.0]
    assert not outside, f"outcomes outside the candidate set: {outside[:5]}"
    if complete:
        missed = [key for key, p in law.items() if p * total >= 25 and counts[key] == 0]
        assert not missed, f"candidates never drawn: {missed[:5]}"
    observed: list[float] = []
    expected: list[float] = []
    pooled = [0.0, 0.0]
    for key, p in law.items():
        if p * total < MIN_EXPECTED:
            pooled[0] += counts[key]
            pooled[1] += p * total
        else:
            observed.append(counts[key])
            expected.append(p * total)
    if pooled[1] > 0:
        observed.append(pooled[0])
        expected.append(pooled[1])
    result = chisquare(observed, expected)
    worst = sorted(law, key=lambda k: -abs(counts[k] - law[k] * total) / math.sqrt(law[k] * total))
    detail = [(k, counts[k], round(law[k] * total, 1)) for k in worst[:5]]
    assert result.pvalue > P_VALUE_FLOOR, (result, detail)


# --------------------------------------------------------------------------------------------
# Fixtures and runners


def load(tmp_path: Path, metadata: DatasetMetadata) -> tuple[ColumnStore, Data]:
    path = tmp_path / "rows.csv"
    path.write_text(CSV_TEXT)
    if any(a.name == "y" for a in metadata.attributes):
        lines = CSV_TEXT.strip().splitlines()
        extra = ["y", "0.5", "1.5", "3.0", "2.5", "0.5", "?", "3.5", "1.5", "2.5", "3.0"]
        path.write_text("\n".join(f"{line},{y}" for line, y in zip(lines, extra, strict=True)))
    store, _report = load_store(metadata, CsvSource(path=path.name), base_dir=tmp_path)
    return store, Data.parse(path.read_text(), metadata)


@pytest.fixture
def views(tmp_path: Path) -> tuple[ColumnStore, Data]:
    return load(tmp_path, attributes("views"))


@pytest.fixture
def table(tmp_path: Path) -> tuple[ColumnStore, Data]:
    return load(tmp_path, attributes("table"))


def run_extend(
    store: ColumnStore,
    data: Data,
    collection: Sequence[Redescription],
    *,
    rules: ExtensionRules,
    mode: ThresholdMode,
    params: QualityParams = PARAMS,
    epsilon: float = EPSILON,
    samples: int,
    seed: int,
) -> Counter[Key]:
    rng = seeded_generator(seed)
    counts: Counter[Key] = Counter()
    for _ in range(samples):
        outcome = extend_one(
            store, collection, epsilon=epsilon, params=params, rules=rules, mode=mode, rng=rng
        )
        counts[extension_key(data, collection, mode, outcome)] += 1
    return counts


def check_extension(
    store: ColumnStore,
    data: Data,
    collection: Sequence[Redescription],
    *,
    rules: ExtensionRules | None = None,
    mode: ThresholdMode = "grid",
    params: QualityParams = PARAMS,
    epsilon: float = EPSILON,
    samples: int = 6_000,
    seed: int = 1,
    complete: bool = False,
) -> Counter[Key]:
    """Draw ``samples`` extensions and compare them with the exact law."""
    rules = rules or ExtensionRules()
    counts = run_extend(
        store,
        data,
        collection,
        rules=rules,
        mode=mode,
        params=params,
        epsilon=epsilon,
        samples=samples,
        seed=seed,
    )
    law = extension_law(data, collection, rules=rules, mode=mode, params=params, epsilon=epsilon)
    assert_law(counts, law, complete=complete)
    return counts


def fold(first: AnyLiteral, *steps: tuple[Op, AnyLiteral]) -> Expr:
    """A Serenade query: ``first``, then each (operator, literal) step left to right."""
    return serenade_query(first, list(steps))


def red(left: Expr, right: Expr) -> Redescription:
    return Redescription(left=left, right=right)


# --------------------------------------------------------------------------------------------
# (a) extend_one, grid mode: exact EM probabilities


def test_reference_reads_the_rows_like_the_loader(views: tuple[ColumnStore, Data]) -> None:
    """The reference's supports agree with the store's on every literal of the candidates."""
    store, data = views
    literals: list[AnyLiteral] = []
    for attribute in data.metadata.attributes:
        for negated in (False, True):
            if isinstance(attribute, NumericAttribute):
                literals += grid_literals(attribute, negated)
            else:
                literals += discrete_literals(attribute, negated)
    for literal in literals:
        expected = data.rows_of(literal)
        got = frozenset(int(r) for r in store.literal_bitset(literal).to_bool_array().nonzero()[0])
        assert got == expected, literal
    assert data.values("x") == [1.0, 3.0, 4.0, 6.0, 8.5]


@pytest.mark.parametrize(
    ("collection", "seed"),
    [
        ([red(A, B)], 101),
        ([red(fold(A, ("and", RED)), X_LOW)], 102),
        ([red(GREEN, fold(B, ("or", X_MID))), red(D, B)], 103),  # ES: one EM over both sets
    ],
    ids=["cs-single-literals", "cs-longer-query", "es-two-positions"],
)
def test_extend_one_grid_matches_the_exact_law(
    views: tuple[ColumnStore, Data], collection: list[Redescription], seed: int
) -> None:
    store, data = views
    check_extension(store, data, collection, mode="grid", seed=seed, complete=True)


def test_extend_one_es_positions_are_kept_apart(views: tuple[ColumnStore, Data]) -> None:
    """Duplicates in the collection are separate positions with equal laws (§2.4)."""
    store, data = views
    twice = [red(A, B), red(A, B)]
    counts = check_extension(store, data, twice, mode="grid", seed=104)
    first = sum(n for key, n in counts.items() if key[1] == 0)
    second = sum(n for key, n in counts.items() if key[1] == 1)
    # Each position has probability ½: |first − second| < 6 standard deviations (√N).
    assert abs(first - second) < 6 * math.sqrt(first + second)


# --------------------------------------------------------------------------------------------
# (b) extend_one, continuous mode: cells by §1.4's measure, thresholds never data values


@pytest.mark.parametrize(
    ("collection", "seed"),
    [
        ([red(A, B)], 201),
        ([red(fold(RED, ("or", D)), X_LOW)], 202),
        ([red(GREEN, B), red(fold(A, ("and", D)), B)], 203),
    ],
    ids=["cs-and-or", "cs-numeric-used", "es-two-positions"],
)
def test_extend_one_continuous_matches_the_exact_law(
    views: tuple[ColumnStore, Data], collection: list[Redescription], seed: int
) -> None:
    store, data = views
    counts = check_extension(store, data, collection, mode="continuous", seed=seed)
    if all("x" not in format_query(r.right) for r in collection):
        assert any(key[0] == "num" for key in counts)


@pytest.mark.parametrize("seed", [41, 42])
def test_extend_one_continuous_by_enumeration_matches_the_exact_law(
    views: tuple[ColumnStore, Data], seed: int
) -> None:
    """Above c = 8 continuous families are enumerated cell pair by cell pair (§1.4, §7)."""
    store, data = views
    epsilon = 2 * PARAMS.delta * (REJECTION_MAX_EXPONENT + 2)  # c = 10: the enumeration path
    collection = [red(A, B)]
    counts = check_extension(
        store, data, collection, mode="continuous", epsilon=epsilon, samples=6_000, seed=seed
    )
    assert any(key[0] == "num" for key in counts)


def test_initial_pairs_continuous_by_enumeration_match_the_exact_law(
    views: tuple[ColumnStore, Data],
) -> None:
    store, data = views
    c, samples = REJECTION_MAX_EXPONENT + 2, 6_000  # c = 10: the enumeration path
    pairs = initial_pairs(
        store,
        count=samples,
        epsilon=c * 2 * PARAMS.delta * samples,
        params=PARAMS,
        rules=ExtensionRules(),
        mode="continuous",
        rng=seeded_generator(43),
    )
    counts = Counter(pair_key(data, "continuous", pair) for pair in pairs)
    assert_law(counts, pairs_law(data, negations=False, mode="continuous", params=PARAMS, c=c))


@pytest.fixture
def enumerations(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the family totals the samplers compute (only enumeration computes them)."""
    calls = [0]
    total = candidates.family_log_total

    def counted(family: ThresholdFamily[object], cells: ContinuousCells) -> float:
        calls[0] += 1
        return total(family, cells)

    monkeypatch.setattr(candidates, "family_log_total", counted)
    return calls


def test_initial_pairs_past_their_proposal_cap_match_the_exact_law(
    views: tuple[ColumnStore, Data], enumerations: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rejection until the public cap, then enumeration for the call's remaining draws, keeps
    the exact law (CandidateSampler's proof): with a cap of one proposal per two draws the cap
    runs out early in the call (c = 1.5, at least one proposal per draw)."""
    store, data = views
    c, samples = 1.5, 6_000
    caps: list[tuple[float, int]] = []

    def tiny_cap(coefficient: float, draws: int) -> int:
        caps.append((coefficient, draws))
        return draws // 2

    monkeypatch.setattr(serenade, "rejection_proposals", tiny_cap)
    pairs = initial_pairs(
        store,
        count=samples,
        epsilon=c * 2 * PARAMS.delta * samples,
        params=PARAMS,
        rules=ExtensionRules(),
        mode="continuous",
        rng=seeded_generator(44),
    )
    assert len(caps) == 1
    assert caps[0][0] == pytest.approx(c)
    assert caps[0][1] == samples
    assert enumerations[0] > 0  # the cap was reached: the families were enumerated
    counts = Counter(pair_key(data, "continuous", pair) for pair in pairs)
    assert_law(counts, pairs_law(data, negations=False, mode="continuous", params=PARAMS, c=c))


def test_extensions_past_their_proposal_cap_match_the_exact_law(
    views: tuple[ColumnStore, Data], enumerations: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """extend_one with a cap of one proposal: the calls whose proposal is rejected enumerate."""
    store, data = views
    monkeypatch.setattr(serenade, "rejection_proposals", lambda _c, draws: draws)
    counts = check_extension(store, data, [red(A, B)], mode="continuous", seed=45)
    assert any(key[0] == "num" for key in counts)
    assert enumerations[0] > 0


@pytest.mark.parametrize("prepared", [True, False], ids=["prepared", "scanned"])
def test_proposals_weighed_either_way_match_the_exact_law(
    views: tuple[ColumnStore, Data], prepared: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rejection proposals weighed by prefix sums along the value order (prepared) or by a
    pass over the rows each (scanned) give the same exact law (the public plan picks one by
    cost only; both count the same rows: tests/dp/test_candidates.py)."""
    monkeypatch.setattr(serenade.RejectionPlan, "prepared", property(lambda _plan: prepared))
    store, data = views
    counts = check_extension(store, data, [red(A, B)], mode="continuous", seed=46 + prepared)
    assert any(key[0] == "num" for key in counts)


def test_the_kernels_cap_is_public_and_enumeration_has_none() -> None:
    assert serenade.rejection_proposals(2.5, 20) == rejection_proposal_cap(20, 2.5)
    assert serenade.rejection_proposals(REJECTION_MAX_EXPONENT, 1) == rejection_proposal_cap(
        1, REJECTION_MAX_EXPONENT
    )
    assert serenade.rejection_proposals(REJECTION_MAX_EXPONENT + 1e-9, 1) == 0


def test_continuous_cell_measure_is_the_spec_measure() -> None:
    """Hand check on two cut-points in [0, 4], v = (1, 3), lattice {0, 1, 2, 3, 4} (2 bits):
    lower cells hold {0, 1}, {2, 3}, {4}; upper cells {0}, {1, 2}, {3, 4}; each gap one point.
    In units of ¼/L² (L = 5) the total is 2·L² + L(L+1)/2 = 65."""
    measure = cell_measure((1.0, 3.0), 0.0, 4.0, 2)
    assert measure[(None, 0)] == pytest.approx(5 / 65)  # b = 0: one point, times L
    assert measure[(None, 1)] == pytest.approx(10 / 65)  # b in {1, 2}
    assert measure[(3, None)] == pytest.approx(5 / 65)  # a = 4
    assert measure[(2, 1)] == pytest.approx(1 / 65)  # same gap (1, 3): the pair (2, 2)
    assert measure[(1, 2)] == pytest.approx(4 / 65)  # a in {0, 1}, b in {3, 4}
    assert (3, 0) not in measure  # a > b impossible
    assert sum(measure.values()) == pytest.approx(1.0)


# --------------------------------------------------------------------------------------------
# (b2) the coverage factor and the range-calibrated coefficient (§2.1, §0.8)

#: Q·σ(1.5(E00 − 3)) on the ten rows (E00 = 10 − |U|, rows with missing values count as
#: uncovered), range-calibrated: c = ε/(Δ_up + Δ_down) = 1/(0.3 + 0.1) = 2.5 at ε = 1.
COVERED = QualityParams(s=0.8, x0=2.0, delta=0.3, y0=3.0, s2=1.5, delta_up=0.3, delta_down=0.1)


def test_range_coefficient() -> None:
    assert COVERED.coefficient(1.0) == pytest.approx(2.5)
    assert replace(COVERED, delta_down=None).coefficient(1.0) == pytest.approx(1 / 0.6)


def test_coverage_changes_the_law(views: tuple[ColumnStore, Data]) -> None:
    """The coverage tests below can fail: without the factor the law is far from COVERED's."""
    _store, data = views
    laws = [
        extension_law(
            data, [red(A, B)], rules=ExtensionRules(), mode="grid", params=params, epsilon=1.0
        )
        for params in (COVERED, replace(COVERED, y0=None))
    ]
    assert sum(abs(laws[0][key] - laws[1][key]) for key in laws[0]) > 0.1


@pytest.mark.parametrize(
    ("collection", "mode", "seed"),
    [
        ([red(A, B)], "grid", 501),
        ([red(GREEN, fold(B, ("or", X_MID))), red(D, B)], "grid", 502),
        ([red(fold(RED, ("or", D)), B)], "continuous", 503),
    ],
    ids=["cs-grid", "es-grid", "cs-continuous"],
)
def test_extend_one_with_coverage_matches_the_exact_law(
    views: tuple[ColumnStore, Data],
    collection: list[Redescription],
    mode: ThresholdMode,
    seed: int,
) -> None:
    store, data = views
    check_extension(store, data, collection, mode=mode, params=COVERED, seed=seed)


@pytest.mark.parametrize(("mode", "seed"), [("grid", 504), ("continuous", 505)])
def test_initial_pairs_with_coverage_match_the_exact_law(
    views: tuple[ColumnStore, Data], mode: ThresholdMode, seed: int
) -> None:
    store, data = views
    samples = 6_000
    # count draws in one call at ε/count each: c = (ε/count)/(Δ_up + Δ_down) = 1.5.
    pairs = initial_pairs(
        store,
        count=samples,
        epsilon=1.5 * 0.4 * samples,
        params=COVERED,
        rules=ExtensionRules(),
        mode=mode,
        rng=seeded_generator(seed),
    )
    counts = Counter(pair_key(data, mode, pair) for pair in pairs)
    assert_law(counts, pairs_law(data, negations=False, mode=mode, params=COVERED, c=1.5))


# --------------------------------------------------------------------------------------------
# (c) initial_pairs in both modes


@pytest.mark.parametrize(
    ("mode", "negations", "samples", "seed"),
    [
        ("grid", False, 12_000, 301),
        ("grid", True, 12_000, 302),
        ("continuous", False, 6_000, 303),
        ("continuous", True, 6_000, 304),
    ],
)
def test_initial_pairs_match_the_exact_law(
    views: tuple[ColumnStore, Data],
    mode: ThresholdMode,
    negations: bool,
    samples: int,
    seed: int,
) -> None:
    store, data = views
    c = 1.5
    # count draws in one call at ε/count each: c = (ε/count)/(2Δ).
    epsilon = c * 2 * PARAMS.delta * samples
    pairs = initial_pairs(
        store,
        count=samples,
        epsilon=epsilon,
        params=PARAMS,
        rules=ExtensionRules(negations=negations),
        mode=mode,
        rng=seeded_generator(seed),
    )
    assert len(pairs) == samples
    counts = Counter(pair_key(data, mode, pair) for pair in pairs)
    law = pairs_law(data, negations=negations, mode=mode, params=PARAMS, c=c)
    assert_law(counts, law)


@pytest.mark.parametrize("mode", ["grid", "continuous"])
def test_initial_pairs_with_a_numeric_left_view(tmp_path: Path, mode: ThresholdMode) -> None:
    """Both views numeric (§2.3 [REC]): left numeric literals on the public grid, one unit per
    left attribute spread over its intervals, so each (left interval, right numeric attribute)
    pair carries the left interval's share of that unit in both modes (grid: ÷ right
    intervals; continuous: × §1.4's measure)."""
    store, data = load(tmp_path, attributes("views", numeric_left=True))
    samples, c = 6_000, 1.0
    pairs = initial_pairs(
        store,
        count=samples,
        epsilon=c * 2 * PARAMS.delta * samples,
        params=PARAMS,
        rules=ExtensionRules(),
        mode=mode,
        rng=seeded_generator(305),
    )
    counts = Counter(pair_key(data, mode, pair) for pair in pairs)
    assert_law(counts, pairs_law(data, negations=False, mode=mode, params=PARAMS, c=c))


@pytest.mark.parametrize("mode", ["grid", "continuous"])
def test_initial_pairs_on_a_single_table(
    table: tuple[ColumnStore, Data], mode: ThresholdMode
) -> None:
    """Kind "table": both sides range over every attribute, never the same one twice (the
    table's one numeric attribute goes on the grid on the left)."""
    store, data = table
    samples, c = 5_000, 1.0
    pairs = initial_pairs(
        store,
        count=samples,
        epsilon=c * 2 * PARAMS.delta * samples,
        params=PARAMS,
        rules=ExtensionRules(),
        mode=mode,
        rng=seeded_generator(306),
    )
    for pair in pairs:
        assert isinstance(pair.left, BoolLiteral | CatLiteral | NumLiteral)
        assert isinstance(pair.right, BoolLiteral | CatLiteral | NumLiteral)
        assert pair.left.attribute != pair.right.attribute
    counts = Counter(pair_key(data, mode, pair) for pair in pairs)
    assert_law(counts, pairs_law(data, negations=False, mode=mode, params=PARAMS, c=c))


def test_initial_pairs_are_independent_draws(views: tuple[ColumnStore, Data]) -> None:
    """I draws at ε/I each equal I separate calls at ε/I (with replacement, duplicates)."""
    store, _data = views
    pairs = initial_pairs(
        store,
        count=50,
        epsilon=0.5,
        params=PARAMS,
        rules=ExtensionRules(),
        mode="grid",
        rng=seeded_generator(307),
    )
    rng = seeded_generator(307)
    one_by_one = [
        initial_pairs(
            store,
            count=1,
            epsilon=0.01,
            params=PARAMS,
            rules=ExtensionRules(),
            mode="grid",
            rng=rng,
        )[0]
        for _ in range(50)
    ]
    assert pairs == one_by_one
    assert len({p.model_dump_json() for p in pairs}) < 50  # near-uniform: duplicates occur


# --------------------------------------------------------------------------------------------
# (d) candidate rules (mostly c = 0: the law is the base measure, every candidate shows up)


def outcomes_of(counts: Counter[Key]) -> set[tuple[Hashable, ...]]:
    """(side, op, attribute, literal text) of every drawn extension."""
    return {key[2:6] for key in counts if key[0] == "lit"}


def test_max_literals(views: tuple[ColumnStore, Data]) -> None:
    store, data = views
    start = red(fold(A, ("and", RED)), B)
    counts = check_extension(
        store,
        data,
        [start],
        rules=ExtensionRules(max_literals=2),
        epsilon=0.0,
        samples=4000,
        seed=401,
        complete=True,
    )
    assert {side for side, _op, _name, _text in outcomes_of(counts)} == {"right"}
    # Both sides full: only the unextended candidate remains.
    full = [red(fold(A, ("and", RED)), fold(B, ("or", X_LOW)))]
    for seed in range(5):
        assert extend_one(
            store,
            full,
            epsilon=1.0,
            params=PARAMS,
            rules=ExtensionRules(max_literals=2),
            mode="continuous",
            rng=seeded_generator(seed),
        ) == (0, full[0])


def test_attributes_are_not_reused_on_a_side(views: tuple[ColumnStore, Data]) -> None:
    store, data = views
    counts = check_extension(
        store, data, [red(A, B)], epsilon=0.0, samples=4000, seed=402, complete=True
    )
    used = {(side, name) for side, _op, name, _text in outcomes_of(counts)}
    # Two views: the left query can only take colour and d, the right one only x.
    assert used == {("left", "colour"), ("left", "d"), ("right", "x")}


def test_single_table_never_uses_an_attribute_on_both_sides(
    table: tuple[ColumnStore, Data],
) -> None:
    store, data = table
    counts = check_extension(
        store, data, [red(A, B)], epsilon=0.0, samples=4000, seed=403, complete=True
    )
    used = {(side, name) for side, _op, name, _text in outcomes_of(counts)}
    # a and b are taken (one on each side); every other attribute can extend either side.
    assert used == {(side, name) for side in ("left", "right") for name in ("colour", "d", "x")}
    # The same with weights and continuous thresholds, after x went to the right query.
    start = red(fold(A, ("and", D)), fold(B, ("or", X_LOW)))
    counts = check_extension(store, data, [start], mode="continuous", samples=4000, seed=408)
    names = {key[4] for key in counts if key[0] in ("lit", "num")}
    assert names == {"colour"}


@pytest.mark.parametrize("single_side_or", [True, False])
def test_single_side_or(views: tuple[ColumnStore, Data], single_side_or: bool) -> None:
    store, data = views
    start = red(fold(A, ("or", D)), B)  # the left query already holds a disjunction
    counts = check_extension(
        store,
        data,
        [start],
        rules=ExtensionRules(single_side_or=single_side_or),
        epsilon=0.0,
        samples=4000,
        seed=404,
        complete=True,
    )
    ops = {(side, op) for side, op, _name, _text in outcomes_of(counts)}
    assert {("left", "or"), ("left", "and"), ("right", "and")} <= ops
    assert (("right", "or") in ops) is not single_side_or


@pytest.mark.parametrize("operators", [frozenset({"and"}), frozenset({"or"})])
def test_operator_subsets(views: tuple[ColumnStore, Data], operators: frozenset[Op]) -> None:
    store, data = views
    counts = check_extension(
        store,
        data,
        [red(A, B)],
        rules=ExtensionRules(operators=operators),
        epsilon=0.0,
        samples=4000,
        seed=405,
        complete=True,
    )
    assert {op for _side, op, _name, _text in outcomes_of(counts)} == set(operators)


@pytest.mark.parametrize("negations", [False, True])
def test_negations(views: tuple[ColumnStore, Data], negations: bool) -> None:
    store, data = views
    counts = check_extension(
        store,
        data,
        [red(A, B)],
        rules=ExtensionRules(negations=negations),
        samples=4000,
        seed=406,
        complete=True,
    )
    negated = {
        (side, name) for side, _op, name, text in outcomes_of(counts) if str(text).startswith("!")
    }
    expected = {("left", "colour"), ("left", "d"), ("right", "x")} if negations else set()
    assert negated == expected


def test_continuous_rules_match_the_law(views: tuple[ColumnStore, Data]) -> None:
    """The same rules in continuous mode (negated numeric families, OR-only)."""
    store, data = views
    check_extension(
        store,
        data,
        [red(A, B)],
        rules=ExtensionRules(negations=True, operators=frozenset({"or"})),
        mode="continuous",
        samples=6000,
        seed=407,
    )


# --------------------------------------------------------------------------------------------
# (e) the public threshold-mode rule


def test_choose_threshold_mode() -> None:
    assert choose_threshold_mode(0.1, "auto") == "continuous"
    assert choose_threshold_mode(REJECTION_MAX_EXPONENT, "auto") == "continuous"
    assert choose_threshold_mode(REJECTION_MAX_EXPONENT, "continuous") == "continuous"
    assert choose_threshold_mode(REJECTION_MAX_EXPONENT + 1e-9, "auto") == "grid"
    assert choose_threshold_mode(1e6, "grid") == "grid"
    assert choose_threshold_mode(0.1, "grid") == "grid"
    # An explicit continuous choice is kept: above the limit it is sampled by enumeration.
    assert choose_threshold_mode(REJECTION_MAX_EXPONENT * 10, "continuous") == "continuous"


def test_quality_params_coefficient() -> None:
    assert PARAMS.coefficient(1.0) == pytest.approx(2.5)
    assert NOSENS.coefficient(0.5) == pytest.approx(0.25)


# --------------------------------------------------------------------------------------------
# (f) the NoSens quality (Q = J, Δ = 1)


def test_nosens_quality_parameters() -> None:
    params = quality_parameters(QualityParameters(x0=3.0, function="jaccard"), 50)
    assert (params.delta, params.function) == (1.0, "jaccard")
    assert (params.delta_up, params.delta_down) == (1.0, 0.5)  # 0 → 1 up, 1 → ½ down
    assert params.coefficient(1.5) == pytest.approx(1.0)
    assert params.evaluate([0, 1, 2], [0, 4, 2], 9).tolist() == [0.0, 0.25, 1.0]
    paper = quality_parameters(
        QualityParameters(x0=3.0, function="jaccard", calibration="symmetric"), 50
    )
    assert (paper.delta_up, paper.delta_down, paper.coefficient(2.0)) == (None, None, 1.0)
    serenade = quality_parameters(QualityParameters(x0=3.0, s=0.4), 50)
    assert serenade.delta == sensitivity(0.4, 3.0, 50)
    sides = one_sided(0.4, 3.0, 50)
    assert (serenade.delta_up, serenade.delta_down) == (sides.up, sides.down)
    assert serenade.coefficient(1.0) == pytest.approx(1.0 / (sides.up + sides.down))
    symmetric = quality_parameters(QualityParameters(x0=3.0, calibration="symmetric"), 50)
    assert symmetric.delta == min(
        sensitivity(s, 3.0, 50) for s in (0.0025 * k for k in range(1, 41))
    )
    calibrated = quality_parameters(QualityParameters(x0=3.0), 50)
    assert calibrated.coefficient(1.0) == max(
        one_sided(s, 3.0, 50).c_per_epsilon("range") for s in (0.0025 * k for k in range(1, 41))
    )
    with pytest.raises(ValueError, match="below the dataset's public row bound"):
        quality_parameters(QualityParameters(x0=50.0), 50)


def test_coverage_quality_parameters() -> None:
    """y0 adds the coverage factor with s₂ = s unless given; Δ_up takes the E00 term (§2.1)."""
    params = quality_parameters(QualityParameters(x0=3.0, s=0.4, y0=5.0), 50)
    assert (params.y0, params.s2) == (5.0, 0.4)
    expected = sensitivities(0.4, 3.0, 50, y0=5.0, s2=0.4)
    assert (params.delta_up, params.delta_down) == (expected.up, expected.down)
    steep = quality_parameters(QualityParameters(x0=3.0, s=0.4, y0=5.0, s2=4.0), 50)
    assert steep.s2 == 4.0
    assert steep.delta_up == coverage_increase(0.4, 3.0, 4.0, 5.0, 50)
    assert steep.delta_up is not None
    assert steep.delta_up > one_sided(0.4, 3.0, 50).up
    # Q·σ(s₂(E00 − y0)) with E00 = n − |U|: (i, u) = (2, 4) on 10 rows leaves 6 uncovered.
    q = steep.evaluate([2, 0], [4, 0], 10)
    by_hand = 0.5 / (1 + math.exp(-0.4 * (2 - 3.0))) / (1 + math.exp(-4.0 * (6 - 5.0)))
    assert q.tolist() == pytest.approx([by_hand, 0.0], rel=1e-12)


@pytest.mark.parametrize("mode", ["grid", "continuous"])
def test_nosens_extension_law(views: tuple[ColumnStore, Data], mode: ThresholdMode) -> None:
    store, data = views
    check_extension(
        store,
        data,
        [red(A, B)],
        mode=mode,
        params=NOSENS,
        epsilon=5.0,  # c = 2.5 with Δ = 1
        samples=8000,
        seed=501,
    )


# --------------------------------------------------------------------------------------------
# Serenade form


def test_parse_side() -> None:
    parsed = parse_side(serenade_query(A, [("or", D), ("and", RED)]), side="left")
    assert parsed.literals == (A, D, RED)
    assert parsed.operators == ("or", "and")
    assert parsed.attributes == frozenset({"a", "d", "colour"})
    assert parsed.has_or
    with pytest.raises(ValueError, match="not in Serenade form"):
        parse_side(Not(term=A), side="left")
    with pytest.raises(ValueError, match="not in Serenade form"):
        parse_side(And(terms=[Or(terms=[A, D]), Or(terms=[RED, GREEN])]), side="right")


def test_extend_one_refuses_a_query_not_in_serenade_form(
    views: tuple[ColumnStore, Data],
) -> None:
    store, _data = views
    bad = Redescription(left=Not(term=A), right=B)
    with pytest.raises(ValueError, match="not in Serenade form"):
        extend_one(
            store,
            [bad],
            epsilon=1.0,
            params=PARAMS,
            rules=ExtensionRules(),
            mode="grid",
            rng=seeded_generator(1),
        )


def test_same_seed_same_outcome(views: tuple[ColumnStore, Data]) -> None:
    store, _data = views

    def run(seed: int) -> list[tuple[int, Redescription]]:
        rng = seeded_generator(seed)
        start = [red(A, B)]
        return [
            extend_one(
                store,
                start,
                epsilon=1.0,
                params=PARAMS,
                rules=ExtensionRules(),
                mode="continuous",
                rng=rng,
            )
            for _ in range(20)
        ]

    assert run(9) == run(9)
    assert run(9) != run(10)


# --------------------------------------------------------------------------------------------
# Public bounds on the enumeration of continuous families (c > 8)

FAMILY_RULES = [
    ExtensionRules(),
    ExtensionRules(negations=True),
    ExtensionRules(operators=frozenset({"and"}), max_literals=2),
    ExtensionRules(single_side_or=False, negations=True),
]
FAMILY_COLLECTIONS = [
    [red(A, B)],
    [red(fold(A, ("or", D)), B), red(RED, fold(B, ("and", X_LOW)))],
    [red(fold(A, ("and", RED)), fold(B, ("or", X_MID)))],
]


def _continuous_extensions(
    store: ColumnStore, red: Redescription, rules: ExtensionRules
) -> serenade._Candidates:
    """The candidate set §2.2 builds for ``red`` in continuous mode (the kernel's own)."""
    resources = build_extension_resources(store, rules, "continuous")
    return serenade._extension_candidates(
        store, red, rules=rules, mode="continuous", params=PARAMS, resources=resources
    )


@pytest.mark.parametrize("kind", ["views", "table"])
@pytest.mark.parametrize("numeric_left", [False, True])
def test_family_counts_are_the_kernels_families(
    tmp_path: Path, kind: Literal["views", "table"], numeric_left: bool
) -> None:
    """The public counts of continuous families match the candidate sets the kernels build,
    and every family's column has at most n_max distinct values (so (n_max + 2)² cell pairs)."""
    metadata = attributes(kind, numeric_left=numeric_left)
    store, _data = load(tmp_path, metadata)
    for rules in FAMILY_RULES:
        built = serenade._pair_candidates(store, rules=rules, mode="continuous", params=PARAMS)
        assert pair_families(metadata, rules) == len(built.families)
        for collection in FAMILY_COLLECTIONS:
            kernel = sum(
                len(_continuous_extensions(store, redescription, rules).families)
                for redescription in collection
            )
            assert extension_families(metadata, collection, rules) == kernel
            for family in built.families:
                cells = continuous_cells(family.column, PublicLattice.of(family.attribute))
                assert (cells.size + 2) ** 2 <= (metadata.n_max + 2) ** 2


def test_enumeration_beyond_the_cap_is_refused_before_the_charge() -> None:
    """Continuous thresholds at c > 8 on n_max = 10^5 rows: (n_max + 2)² ≈ 10^10 cell pairs per
    family, refused by validation (before any data is read) with what to change; 'auto' (the
    grid above c = 8) is accepted."""
    metadata = attributes("views").model_copy(update={"n_max": 100_000})
    quality = QualityParameters(x0=10.0, s=1.0)
    base = {
        "mode": "cs",
        "collection": [red(A, B).model_dump(mode="json")],
        "epsilon": 1000.0,
        "quality": quality.model_dump(mode="json"),
    }
    spec = CATALOG["serenade.extend_one"]
    refused = ExtendOneRequest.model_validate({**base, "options": {"threshold_mode": "continuous"}})
    assert extend_enumeration(refused, metadata) == 3 * (100_000 + 2) ** 2  # 2 families + 1 draw
    with pytest.raises(ValueError, match="threshold_mode"):
        spec.validate(refused, metadata)
    accepted = ExtendOneRequest.model_validate({**base, "options": {"threshold_mode": "auto"}})
    spec.validate(accepted, metadata)
    assert extend_enumeration(accepted, metadata) == 0


# --------------------------------------------------------------------------------------------
# Allowed columns (options.columns, issue #21): the candidate set keeps only their literals


#: colour (left view) left out: the left view keeps a and d, the right one b and x.
ALLOWED = frozenset({"a", "d", "b", "x"})


@pytest.mark.parametrize("mode", ["grid", "continuous"])
def test_restricted_extensions_match_the_restricted_law(
    views: tuple[ColumnStore, Data], mode: ThresholdMode
) -> None:
    """Restricted to ALLOWED, extend_one draws from the exact law of a schema without colour:
    no colour literal is ever proposed, and (at c = 0, every candidate seen) nothing allowed is
    lost."""
    store, data = views
    rules = ExtensionRules(columns=ALLOWED)
    start = [red(A, B)]
    counts = run_extend(
        store, data, start, rules=rules, mode=mode, epsilon=0.0, samples=4000, seed=501
    )
    law = extension_law(
        data.restricted(ALLOWED),
        start,
        rules=ExtensionRules(),
        mode=mode,
        params=PARAMS,
        epsilon=0.0,
    )
    assert_law(counts, law, complete=True)
    names = {key[4] for key in counts if key[0] in ("lit", "num")}
    assert names == {"d", "x"}


@pytest.mark.parametrize("mode", ["grid", "continuous"])
def test_restricted_initial_pairs_match_the_restricted_law(
    views: tuple[ColumnStore, Data], mode: ThresholdMode
) -> None:
    store, data = views
    samples, c = 6_000, 1.5
    pairs = initial_pairs(
        store,
        count=samples,
        epsilon=c * 2 * PARAMS.delta * samples,
        params=PARAMS,
        rules=ExtensionRules(columns=ALLOWED),
        mode=mode,
        rng=seeded_generator(502),
    )
    used = {name for pair in pairs for name in attributes_of(pair.left) | attributes_of(pair.right)}
    assert used <= ALLOWED
    counts = Counter(pair_key(data, mode, pair) for pair in pairs)
    law = pairs_law(data.restricted(ALLOWED), negations=False, mode=mode, params=PARAMS, c=c)
    assert_law(counts, law)


def test_restricted_family_counts_are_the_kernels_families(
    views: tuple[ColumnStore, Data],
) -> None:
    """The public counts that price the padding use the allowed columns, as the kernels do."""
    store, _data = views
    metadata = store.metadata
    for columns in (ALLOWED, frozenset({"a", "colour", "b"}), frozenset({"d", "x"})):
        rules = ExtensionRules(columns=columns)
        built = serenade._pair_candidates(store, rules=rules, mode="continuous", params=PARAMS)
        assert pair_families(metadata, rules) == len(built.families)
        start = red(D, B) if "d" in columns else red(A, B)
        kernel = _continuous_extensions(store, start, rules)
        assert extension_families(metadata, [start], rules) == len(kernel.families)
    assert pair_families(metadata, ExtensionRules(columns=frozenset({"a", "b"}))) == 0


@pytest.mark.parametrize(
    ("operation", "options", "message"),
    [
        ("serenade.initial_pairs", {"columns": ["a", "zz"]}, "unknown column(s) ['zz']"),
        ("serenade.initial_pairs", {"columns": ["a", "d"]}, "leaves the right view no"),
        ("serenade.extend_one", {"columns": ["colour", "b"]}, "leaves out"),
        ("serenade.extend_one", {"columns": ["a", "a", "b"]}, "more than once"),
    ],
)
def test_bad_columns_are_refused_by_validation(
    operation: str, options: dict[str, object], message: str
) -> None:
    """Public checks before any charge, each naming what to fix."""
    metadata = attributes("views")
    body = {
        "count": 2,
        "mode": "cs",
        "collection": [red(A, B).model_dump(mode="json")],
        "epsilon": 1.0,
        "quality": QualityParameters(x0=2.0).model_dump(mode="json"),
        "options": options,
    }
    spec = CATALOG[operation]
    if operation == "serenade.initial_pairs":
        del body["mode"], body["collection"]
    else:
        del body["count"]
    with pytest.raises(ValueError, match=re.escape(message)):
        spec.validate(spec.request_model.model_validate(body), metadata)


@pytest.mark.parametrize("negated", [False, True])
@pytest.mark.parametrize("maker", ["pair", "and", "or"])
def test_a_prepared_family_weighs_thresholds_as_the_scan_does(maker: str, negated: bool) -> None:
    """The prepared weights (prefix sums along the value order) of a pair family and of an
    extension by ∧ and by ∨ equal the scanned ones (a pass over the rows) for every threshold
    pair, on a column with missing values and ties, with and without the coverage term."""
    generator = np.random.default_rng(5)
    n = 300
    values = generator.choice(np.linspace(0.0, 10.0, 41), size=n)
    values[generator.random(n) < 0.15] = np.nan
    attribute = NumericAttribute(name="x", view="right", lo=0.0, hi=10.0, lattice_bits=5)
    column = NumericColumn.from_values("x", values, lo=0.0, hi=10.0)
    support, other = (Bitset.from_bool_array(generator.random(n) < p) for p in (0.4, 0.5))
    make: serenade._ExtendMaker | serenade._PairMaker
    if maker == "pair":
        make = serenade._PairMaker(left=BoolLiteral(attribute="l"), support=support)
    else:
        base = Redescription(left=BoolLiteral(attribute="l"), right=BoolLiteral(attribute="r"))
        make = serenade._ExtendMaker(
            base, "right", "and" if maker == "and" else "or", support, other
        )
    family = serenade._Family(column, attribute, negated, make)
    for params in (PARAMS, QualityParams(s=0.2, x0=30.0, delta=0.05, y0=40.0, s2=0.1)):
        weighted = serenade._WeightedFamily(0, family, params, n, 1.7)
        prepared = weighted.threshold_weights()
        lattice = weighted.lattice
        for _ in range(300):
            lower, upper = candidates.draw_base_thresholds("pair", lattice, generator)
            as_array = np.asarray([np.nan if lower is None else lower])
            got = prepared(as_array, np.asarray([np.nan if upper is None else upper]))
            assert float(got[0]) == pytest.approx(weighted.log_weight(lower, upper), rel=1e-12)


@pytest.mark.parametrize("op", ["and", "or"])
def test_an_extensions_class_terms_name_the_masks_of_its_terms(op: str) -> None:
    """Grid extensions read |I| and |U| from row classes of (X, Y) (``class_terms``): each
    named class is, row for row, the mask of :meth:`terms`, with the same constants."""
    generator = np.random.default_rng(11)
    n = 197
    support, other = (Bitset.from_bool_array(generator.random(n) < p) for p in (0.4, 0.5))
    base = Redescription(left=BoolLiteral(attribute="l"), right=BoolLiteral(attribute="r"))
    maker = serenade._ExtendMaker(base, "left", "and" if op == "and" else "or", support, other)
    classes = [~(support | other), other - support, support - other, support & other]
    terms, named = maker.terms(), maker.class_terms()
    assert (named.i_constant, named.u_constant) == (terms.i_constant, terms.u_constant)
    assert classes[named.i_class] == terms.i_rows
    assert classes[named.u_class] == terms.u_rows


@pytest.mark.parametrize("negations", [False, True])
@pytest.mark.parametrize("kind", ["views", "table"])
def test_grid_pairs_count_every_left_literal_per_right_cell_exactly(
    negations: bool, kind: str
) -> None:
    """The per-cell counts of grid-mode initial pairs (a matrix product for the discrete left
    literals, joint histograms for the left numeric attributes' grid intervals) equal the
    popcounts of each left literal's row set with each right cell's rows, and the sizes the
    row sets' sizes, with missing values on both sides, negated intervals, and a single
    table's own attribute left out."""
    generator = np.random.default_rng(9)
    n = 257
    attributes: list[AnyAttribute] = [
        BooleanAttribute(name="b", view="left"),
        CategoricalAttribute(name="k", view="left", categories=["p", "q", "r"]),
        NumericAttribute(name="y", view="left", lo=0.0, hi=1.0, grid=[0.2, 0.5, 0.8]),
        NumericAttribute(name="z", view="left", lo=0.0, hi=1.0),
        NumericAttribute(name="x", view="right", lo=0.0, hi=1.0, grid=[0.25, 0.5]),
    ]
    if kind == "table":
        attributes = [a.model_copy(update={"view": None}) for a in attributes]

    def numeric(name: str) -> NumericColumn:
        values = generator.choice([0.2, 0.25, 0.5, 0.8, *generator.random(4)], size=n)
        values[generator.random(n) < 0.15] = np.nan  # missing
        return NumericColumn.from_values(name, values, lo=0.0, hi=1.0)

    codes = generator.integers(-1, 3, size=n).astype(np.int32)  # -1: missing
    columns: dict[str, BooleanColumn | CategoricalColumn | NumericColumn] = {
        "b": BooleanColumn.from_arrays("b", generator.random(n) < 0.4, generator.random(n) < 0.9),
        "k": CategoricalColumn("k", ("p", "q", "r"), codes),
        **{name: numeric(name) for name in ("y", "z", "x")},
    }
    metadata = DatasetMetadata(kind=kind, n_max=1_000, attributes=attributes)
    store = ColumnStore(metadata, n_rows=n, columns=columns)
    rules = ExtensionRules(negations=negations)
    lefts = serenade._left_pair_literals(store, rules, with_numeric_rows=True)
    discrete_rows = [r.to_bool_array() for r in lefts.rows[: lefts.discrete]]
    matrix = np.stack(discrete_rows).astype(np.float32)
    attribute, column = serenade._numeric(store, "x")
    right = threshold_grid(column, attribute)
    skip = "x" if kind == "table" else None
    per_cell, sizes = serenade._left_cell_counts(lefts, matrix, right, skip=skip)
    for k, (literal, literal_rows) in enumerate(zip(lefts.literals, lefts.rows, strict=True)):
        if literal.attribute == skip:
            continue
        mask = literal_rows.to_bool_array()
        assert sizes[k] == mask.sum(), literal
        for cell in range(right.n_cells):
            assert per_cell[k, cell] == (mask & (right.cells == cell)).sum(), (literal, cell)
