"""The exact exponential mechanism over discrete candidates and threshold cells
(dp/candidates.py; ALGORITHMS.md §0.3, §1.4, §3.1, §7).

On tiny columns and coarse lattices every threshold of the base measure can be enumerated, so
the EM's law over released outcomes is computed by brute force (one atom per lattice point or
pair of points, weighted μ·exp(c·q)) and compared with the sampler's draws, by enumeration and by
rejection. Outcomes are exact floats: a released bound off the lattice is a key the brute force
never produces."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pytest
from scipy.stats import chisquare, nbinom

from dpmine_server.data.bitsets import Bitset
from dpmine_server.data.columns import NumericColumn
from dpmine_server.dp.candidates import (
    OVERRUN_PROBABILITY,
    Bounds,
    CandidateSampler,
    ContinuousCells,
    ProposalPool,
    SortedValues,
    ThresholdWeights,
    continuous_cells,
    draw_base_indices,
    draw_base_thresholds,
    drawing_from,
    family_log_total,
    joint_proposal_cap,
    rejection_proposal_cap,
    shared_pool,
)
from dpmine_server.dp.lattice import LatticeCells, PublicLattice, public_lattice
from dpmine_server.dp.rng import seeded_generator

SEEDED_P_VALUE = 1e-4
DRAWS = 30_000

Thresholds = tuple[float | None, float | None]
Outcome = tuple[str, float | None, float | None]


@dataclass(frozen=True)
class ToyFamily:
    """q = share of the marked rows whose value lies in [lower, upper] (None: unbounded)."""

    name: str
    bounds: Bounds
    log_mass: float
    lattice: PublicLattice
    column: NumericColumn
    marked: npt.NDArray[np.bool_]
    c: float

    def cells(self) -> ContinuousCells:
        return continuous_cells(self.column, self.lattice)

    def cell_weights(
        self, cells: ContinuousCells
    ) -> Callable[[npt.NDArray[np.int64]], npt.NDArray[np.float64]]:
        prefix = cells.prefix(Bitset.from_bool_array(self.marked))
        total = max(int(self.marked.sum()), 1)

        def weights(lower: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
            return np.asarray(self.c * cells.selected(prefix, lower) / total, dtype=np.float64)

        return weights

    def threshold_weights(self) -> ThresholdWeights:
        """:meth:`log_weight` of many threshold pairs at once (NaN: unbounded), by the same
        direct comparisons, one row of the matrix per pair."""
        values = self.column.values[None, :]
        inside = (self.marked & ~np.isnan(self.column.values))[None, :]
        total = max(int(self.marked.sum()), 1)

        def weights(
            lower: npt.NDArray[np.float64], upper: npt.NDArray[np.float64]
        ) -> npt.NDArray[np.float64]:
            low, high = lower[:, None], upper[:, None]
            selected = (
                inside & (np.isnan(low) | (values >= low)) & (np.isnan(high) | (values <= high))
            )
            return np.asarray(self.c * selected.sum(axis=1) / total, dtype=np.float64)

        return weights

    def quality(self, lower: float | None, upper: float | None) -> float:
        values = self.column.values
        inside = self.marked & ~np.isnan(values)
        if lower is not None:
            inside &= values >= lower
        if upper is not None:
            inside &= values <= upper
        return float(inside.sum()) / max(int(self.marked.sum()), 1)

    def log_weight(self, lower: float | None, upper: float | None) -> float:
        return self.c * self.quality(lower, upper)

    def outcome(self, lower: float | None, upper: float | None) -> Outcome:
        return self.name, lower, upper


def base_measure(bounds: Bounds, lattice: PublicLattice) -> dict[Thresholds, float]:
    """Every atom of the family's normalised base measure: §1.4's pairs (each bound unbounded
    w.p. ½ or a uniform point, a ≤ b, not both unbounded) or one uniform upper bound (§3.1)."""
    points = lattice.points.tolist()
    if bounds == "upper":
        return {(None, y): 1.0 / len(points) for y in points}
    mass: dict[Thresholds, float] = {}
    for x, y in itertools.product([None, *points], repeat=2):
        if (x is None and y is None) or (x is not None and y is not None and x > y):
            continue
        mass[(x, y)] = (0.5 if x is None else 0.5 / len(points)) * (
            0.5 if y is None else 0.5 / len(points)
        )
    total = sum(mass.values())
    return {key: weight / total for key, weight in mass.items()}


def brute_force_law(explicit: list[float], families: list[ToyFamily]) -> dict[Hashable, float]:
    """P(outcome) ∝ exp(explicit log-weight), or mass_f·μ_f(t)·exp(c·q_f(t)) per threshold t."""
    weights: dict[Hashable, float] = {("explicit", k): math.exp(w) for k, w in enumerate(explicit)}
    for family in families:
        for (x, y), share in base_measure(family.bounds, family.lattice).items():
            outcome, log_weight = family.outcome(x, y), family.log_weight(x, y)
            weights[outcome] = (
                weights.get(outcome, 0.0) + math.exp(family.log_mass + log_weight) * share
            )
    total = sum(weights.values())
    return {key: weight / total for key, weight in weights.items()}


def toy_families(c: float) -> list[ToyFamily]:
    lattice = public_lattice(0.0, 4.0, 2)  # points 0, 1, 2, 3, 4
    values = np.asarray([0.5, 1.0, 1.0, 2.5, np.nan, 3.9, 0.5], dtype=np.float64)
    column = NumericColumn.from_values("x", values, lo=0.0, hi=4.0)
    marked = np.asarray([True, True, False, True, True, False, False])
    return [
        ToyFamily("pair", "pair", 0.0, lattice, column, marked, c),
        ToyFamily("upper", "upper", math.log(0.5), lattice, column, ~marked, c),
    ]


def sampled_law(sampler: CandidateSampler[Outcome], seed: int) -> Counter[Hashable]:
    rng = seeded_generator(seed)
    return Counter(_key(sampler.draw(rng)) for _ in range(DRAWS))


def _key(draw: tuple[str, int] | tuple[str, Outcome]) -> Hashable:
    kind, chosen = draw
    return (kind, chosen) if kind == "explicit" else chosen


def assert_matches(observed: Counter[Hashable], law: dict[Hashable, float]) -> None:
    assert set(observed) <= set(law), set(observed) - set(law)
    keys = list(law)
    wanted = [sum(observed.values()) * law[key] for key in keys]
    assert min(wanted) > 5, "the toy law must give every outcome a testable mass"
    assert chisquare([observed[key] for key in keys], wanted).pvalue > SEEDED_P_VALUE


#: Proposal caps: enumeration from the start, and rejection that never reaches its cap.
ENUMERATE, NO_CAP = 0, 10**9


@pytest.mark.parametrize(
    ("cap", "prepared"),
    [(ENUMERATE, True), (NO_CAP, True), (NO_CAP, False)],
    ids=["enumerate", "reject-prepared", "reject-scanned"],
)
@pytest.mark.parametrize("c", [0.5, 2.0])
def test_draws_follow_the_exact_law_of_outcomes(cap: int, prepared: bool, c: float) -> None:
    families = toy_families(c)
    explicit = [math.log(0.3) + c * 0.2, math.log(0.2) + c * 0.9]
    law = brute_force_law(explicit, families)
    sampler = CandidateSampler(
        explicit, families, log_weight_bound=c, proposal_cap=cap, prepared=prepared
    )
    observed = sampled_law(sampler, seed=17 if cap == ENUMERATE else 18 + prepared)
    assert_matches(observed, law)


@dataclass(frozen=True)
class CountingFamily(ToyFamily):
    """A toy family that counts its enumerations (``cell_weights`` is only asked by the
    enumeration path, never by rejection)."""

    enumerations: list[int] = field(default_factory=lambda: [0])

    def cell_weights(
        self, cells: ContinuousCells
    ) -> Callable[[npt.NDArray[np.int64]], npt.NDArray[np.float64]]:
        self.enumerations[0] += 1
        return super().cell_weights(cells)


def test_draws_that_reach_their_cap_and_enumerate_keep_the_exact_law() -> None:
    """Rejection until the cap, then enumeration, is the EM law (CandidateSampler's proof): a
    fresh sampler per draw with a cap of 2 proposals, so that a large share of the draws falls
    back (counted) while the others are accepted by rejection within the cap; and many draws of
    one sampler whose cap runs out after the first few."""
    c, cap = 2.0, 2
    counter = [0]
    families: list[ToyFamily] = [
        CountingFamily(**{**vars(family), "enumerations": counter}) for family in toy_families(c)
    ]
    explicit = [math.log(0.3) + c * 0.2, math.log(0.2) + c * 0.9]
    law = brute_force_law(explicit, families)
    rng = seeded_generator(30 + cap)
    observed: Counter[Hashable] = Counter()
    fallbacks = 0
    for _ in range(DRAWS):
        before = counter[0]
        sampler = CandidateSampler(explicit, families, log_weight_bound=c, proposal_cap=cap)
        observed[_key(sampler.draw(rng))] += 1
        fallbacks += counter[0] > before
    assert DRAWS // 10 < fallbacks < DRAWS - DRAWS // 10, fallbacks
    assert_matches(observed, law)
    shared = CandidateSampler(explicit, families, log_weight_bound=c, proposal_cap=cap)
    counter[0] = 0
    assert_matches(sampled_law(shared, seed=40 + cap), law)
    assert counter[0] > 0


def test_released_bounds_are_lattice_points_and_upper_families_have_no_lower_bound() -> None:
    families = toy_families(1.0)
    points = set(families[0].lattice.points.tolist())
    for cap in (ENUMERATE, NO_CAP):
        sampler = CandidateSampler(np.zeros(0), families, log_weight_bound=1.0, proposal_cap=cap)
        rng = seeded_generator(23)
        for _ in range(2_000):
            kind, chosen = sampler.draw(rng)
            assert kind == "family"
            assert not isinstance(chosen, int)
            name, lower, upper = chosen
            assert {b for b in (lower, upper) if b is not None} <= points
            if name == "upper":
                assert lower is None
                assert upper is not None


@pytest.mark.parametrize("bounds", ["pair", "upper"])
def test_family_total_is_the_brute_force_sum(bounds: Bounds) -> None:
    family = next(f for f in toy_families(1.5) if f.bounds == bounds)
    want = sum(
        share * math.exp(family.log_weight(x, y))
        for (x, y), share in base_measure(bounds, family.lattice).items()
    )
    assert math.exp(family_log_total(family, family.cells())) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("values", [[], [2.0], [0.0, 10.0], [1.3, 2.5, 2.6, 7.0], [4.9, 5.0]])
def test_upper_cell_mass_is_the_share_of_lattice_points(values: list[float]) -> None:
    lattice = public_lattice(0.0, 10.0, 3)
    cells = LatticeCells.build(lattice, np.asarray(values, dtype=np.float64))
    counts = Counter(sum(v <= t for v in values) for t in lattice.points.tolist())
    got = np.exp(cells.upper_log_mass())
    assert got.size == len(values) + 2
    assert got[-1] == 0.0  # the "unbounded" atom is not a threshold
    for b in range(len(values) + 1):
        assert got[b] == pytest.approx(counts[b] / lattice.size, abs=1e-15), b


def test_upper_base_draws_are_uniform_lattice_points() -> None:
    lattice = public_lattice(-1.0, 1.0, 2)
    rng = seeded_generator(29)
    draws = Counter(draw_base_thresholds("upper", lattice, rng) for _ in range(10_000))
    assert set(draws) == {(None, point) for point in lattice.points.tolist()}
    assert chisquare(list(draws.values())).pvalue > SEEDED_P_VALUE


def test_cells_are_cached_on_the_column() -> None:
    family = toy_families(1.0)[0]
    assert family.cells() is family.cells()
    assert family.cells().size == 4  # 0.5, 1.0, 2.5, 3.9; the missing row is in no cell


# -- the public cap on proposals -----------------------------------------------------------------


def negative_binomial_overrun(trials: int, draws: int, exponent: float) -> float:
    """P(``draws`` successes need more than ``trials`` trials), success probability
    e^(−exponent): scipy's negative binomial counts the failures before the last success."""
    return float(nbinom.sf(trials - draws, draws, math.exp(-exponent)))


@pytest.mark.parametrize("draws", [1, 2, 20, 1000])
@pytest.mark.parametrize("exponent", [0.05, 0.3, 2.5, 8.0])
def test_the_cap_is_the_least_with_a_tail_below_the_target(draws: int, exponent: float) -> None:
    cap = rejection_proposal_cap(draws, exponent)
    assert negative_binomial_overrun(cap, draws, exponent) <= OVERRUN_PROBABILITY
    assert negative_binomial_overrun(cap - 1, draws, exponent) > OVERRUN_PROBABILITY
    assert cap > draws * math.exp(exponent)  # above the mean


@pytest.mark.parametrize("exponent", [0.3, 2.5, 8.0])
def test_one_draw_caps_at_the_geometric_quantile(exponent: float) -> None:
    miss = -math.expm1(-exponent)  # 1 − p
    want = math.ceil(math.log(OVERRUN_PROBABILITY) / math.log(miss))
    assert abs(rejection_proposal_cap(1, exponent) - want) <= 1
    assert rejection_proposal_cap(1, 8.0) == pytest.approx(20.72 * math.exp(8.0), rel=0.01)


def test_cap_edges_and_monotonicity() -> None:
    assert rejection_proposal_cap(0, 3.0) == 0
    assert rejection_proposal_cap(5, 0.0) == 5  # every proposal is accepted
    assert rejection_proposal_cap(5, 1.0, overrun=0.5) < rejection_proposal_cap(5, 1.0)
    caps = [rejection_proposal_cap(k, a) for k in (1, 10, 100) for a in (0.5, 1.0, 4.0)]
    assert caps[:3] == sorted(caps[:3])  # growing with the exponent
    assert caps[::3] == sorted(caps[::3])  # growing with the draws
    for draws, exponent in ((-1, 1.0), (1, -0.5), (1, math.inf), (1, math.nan)):
        with pytest.raises(ValueError, match="proposal cap"):
            rejection_proposal_cap(draws, exponent)


# -- the joint cap of a batch's rejection draws -------------------------------------------------

#: A tail large enough to check by simulation (the server's 10⁻⁹ is not).
SIMULATED_OVERRUN = 0.01
BATCHES = 200_000


def simulated_overrun(demands: list[tuple[int, float]], cap: int, seed: int) -> float:
    """Share of simulated batches whose draws need more than ``cap`` proposals in all, every
    proposal of part i accepted with probability exactly e^(−aᵢ) (the least the cap assumes)."""
    rng = np.random.default_rng(seed)
    total = np.zeros(BATCHES, dtype=np.int64)
    for draws, exponent in demands:
        total += rng.geometric(math.exp(-exponent), size=(BATCHES, draws)).sum(axis=1)
    return float(np.mean(total > cap))


@pytest.mark.parametrize(
    "demands",
    [
        [(1, 0.5)] * 20,
        [(1, 2.5)] * 8,
        [(1, 0.05), (3, 1.0), (1, 2.0), (20, 0.3)],
    ],
    ids=["20 at 0.5", "8 at 2.5", "mixed"],
)
def test_the_joint_cap_bounds_the_simulated_total(demands: list[tuple[int, float]]) -> None:
    cap = joint_proposal_cap(demands, overrun=SIMULATED_OVERRUN)
    # Binomial standard error of the estimate at the bound: 4σ ≈ 0.0009.
    assert simulated_overrun(demands, cap, seed=51) <= SIMULATED_OVERRUN + 0.0009
    draws = sum(d for d, _ in demands)
    worst = max(a for _, a in demands)
    # The cap is the least that the bound allows: one less is above the target tail.
    assert negative_binomial_overrun(cap - 1, draws, worst) > SIMULATED_OVERRUN
    if len({a for _, a in demands}) == 1:  # exact when every part has the worst exponent
        assert simulated_overrun(demands, cap - 1, seed=52) > SIMULATED_OVERRUN - 0.0009


def test_the_joint_cap_is_far_below_the_sum_of_single_caps() -> None:
    for exponent in (0.05, 0.5, 2.5, 8.0):
        single = rejection_proposal_cap(1, exponent)
        assert joint_proposal_cap([(1, exponent)] * 20) < 20 * single / 3
        assert joint_proposal_cap([(1, exponent)]) == single
    assert joint_proposal_cap([]) == 0
    assert joint_proposal_cap([(0, 3.0), (0, 1.0)]) == 0
    assert joint_proposal_cap([(2, 1.0), (0, 7.0)]) == rejection_proposal_cap(2, 1.0)
    for bad in ([(-1, 1.0)], [(1, -0.5)], [(1, math.nan)]):
        with pytest.raises(ValueError, match="proposal cap"):
            joint_proposal_cap(bad)


#: Batches of two samplers in the shared-pool test (a fresh pair each: slower per draw).
POOL_BATCHES = 6_000


def test_samplers_sharing_a_pool_keep_the_exact_law() -> None:
    """Two samplers (the parts of one batch) spend one pool of 3 proposals: the second gets
    what the first left, often nothing, and then enumerates; each one's draws keep the EM
    law (CandidateSampler's proof with the history of the samplers before it)."""
    c = 2.0
    counter = [0]
    families: list[ToyFamily] = [
        CountingFamily(**{**vars(family), "enumerations": counter}) for family in toy_families(c)
    ]
    explicit = [math.log(0.3) + c * 0.2, math.log(0.2) + c * 0.9]
    law = brute_force_law(explicit, families)
    rng = seeded_generator(53)
    first: Counter[Hashable] = Counter()
    second: Counter[Hashable] = Counter()
    fallbacks = 0
    for _ in range(POOL_BATCHES):
        pool = ProposalPool(3)
        before = counter[0]
        with drawing_from(pool):
            assert shared_pool() is pool
            for observed in (first, second):
                sampler = CandidateSampler(
                    explicit, families, log_weight_bound=c, proposal_cap=pool
                )
                observed[_key(sampler.draw(rng))] += 1
        assert pool.left >= 0
        fallbacks += counter[0] > before
    assert shared_pool() is None
    assert POOL_BATCHES // 10 < fallbacks < POOL_BATCHES - POOL_BATCHES // 10, fallbacks
    assert_matches(first, law)
    assert_matches(second, law)


# -- a proposal's cells count exactly the rows its thresholds select ---------------------------


@pytest.mark.parametrize("seed", range(6))
def test_a_proposal_counts_exactly_the_rows_its_thresholds_select(seed: int) -> None:
    """What a rejection proposal is weighted by (the prefix counts of its thresholds' ranks in
    the column's value order) is the number of the mask's rows that ``lower ≤ A ≤ upper``
    holds on the exact data (``NumericColumn.literal``), missing values (never in a range)
    and ties included, for lattice points, data values themselves and unbounded sides; and
    the present rows outside the range for a negated literal."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    values = rng.choice(np.linspace(0.0, 4.0, 9), size=n)  # ties, and values on lattice points
    values[rng.random(n) < 0.2] = np.nan
    column = NumericColumn.from_values("x", values, lo=0.0, hi=4.0)
    lattice = public_lattice(0.0, 4.0, int(rng.integers(1, 5)))
    ordered = SortedValues.of(column)
    mask = Bitset.from_bool_array(rng.random(n) < 0.5)
    prefix = ordered.prefix(mask)
    thresholds = np.concatenate([[np.nan], lattice.points, values[~np.isnan(values)]])
    lower = rng.choice(thresholds, size=200)
    upper = rng.choice(thresholds, size=200)
    got = SortedValues.counted(prefix, *ordered.ranks(lower, upper))
    for k in range(lower.size):
        bounds = (
            None if np.isnan(lower[k]) else float(lower[k]),
            None if np.isnan(upper[k]) else float(upper[k]),
        )
        assert got[k] == (mask & column.literal(*bounds, negated=False)).count(), bounds
        outside = (mask & column.literal(*bounds, negated=True)).count()
        assert prefix[-1] - got[k] == outside, bounds


def test_vector_base_draws_follow_the_scalar_law() -> None:
    """The batch draws of the base measure (what rejection proposes) are lattice indices with
    the law of the one-at-a-time draws (the brute-force measure of ``base_measure``)."""
    lattice = public_lattice(0.0, 4.0, 2)
    for bounds in ("pair", "upper"):
        law = base_measure(bounds, lattice)
        low, high = draw_base_indices(bounds, lattice, 60_000, seeded_generator(61))
        points = lattice.points
        observed = Counter(
            (None if lo < 0 else float(points[lo]), None if hi < 0 else float(points[hi]))
            for lo, hi in zip(low.tolist(), high.tolist(), strict=True)
        )
        assert set(observed) <= set(law)
        keys = list(law)
        expected = [60_000 * law[key] for key in keys]
        assert chisquare([observed[key] for key in keys], expected).pvalue > SEEDED_P_VALUE
