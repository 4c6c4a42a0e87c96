"""``RejectionSampler``: exact EM over explicit candidates plus continuous families by
rejection from the base measure (ALGORITHMS.md §7 "exact EM by rejection", §0.3), each draw
within a cap on its proposals.

The families here propose from a *discrete* base measure with known probabilities, so the exact
target law p(explicit k) ∝ e^{w_k}, p(family f, value x) ∝ m_f·π_f(x)·e^{ℓ_f(x)} is computable
and the sampler is checked against it with a chi-square test (fixed seeds; each test's p-value
threshold is 1e-6, so a correct sampler fails with probability below 1e-6 per seed).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import numpy.typing as npt
import pytest
from scipy.stats import chisquare

from dpmine_server.dp.mechanisms import Choice, RejectionSampler
from dpmine_server.dp.rng import seeded_generator

SAMPLES = 20_000
#: A cap no test reaches (the draws' proposals are at most a few hundred).
NO_CAP = 10**9
T = TypeVar("T")

P_VALUE_FLOOR = 1e-6
MIN_EXPECTED = 5.0


@dataclass(frozen=True)
class Family:
    """A proposal over named values: probabilities π(x) and log-weights ℓ(x)."""

    values: tuple[str, ...]
    probabilities: tuple[float, ...]
    log_weights: tuple[float, ...]

    def propose(self, count: int, rng: np.random.Generator) -> npt.NDArray[np.int64]:
        """``count`` independent indices of values, by inversion of π."""
        cumulative = np.cumsum(self.probabilities)
        picks = np.searchsorted(cumulative, rng.random(count), side="right")
        return np.asarray(np.minimum(picks, len(self.values) - 1), dtype=np.int64)


EXPLICIT = (0.2, -math.inf, 1.1, -0.7, 0.0)
FAMILIES = (
    Family(("a", "b", "c"), (0.5, 0.3, 0.2), (0.0, 1.0, 2.0)),
    Family(("d", "e"), (0.9, 0.1), (-1.0, 1.5)),
)
FAMILY_LOG_MASSES = (math.log(0.8), math.log(1.5))


def exact_law(
    explicit: Sequence[float], families: Sequence[Family], log_masses: Sequence[float]
) -> dict[Hashable, float]:
    """The EM target, computed directly from its definition."""
    weights: dict[Hashable, float] = {}
    for index, w in enumerate(explicit):
        weights[("explicit", index)] = math.exp(w)
    for f, (family, log_mass) in enumerate(zip(families, log_masses, strict=True)):
        for value, p, lw in zip(
            family.values, family.probabilities, family.log_weights, strict=True
        ):
            key = ("family", (f, value))
            weights[key] = weights.get(key, 0.0) + math.exp(log_mass) * p * math.exp(lw)
    total = sum(weights.values())
    return {key: w / total for key, w in weights.items()}


def draw(
    explicit: Sequence[float],
    families: Sequence[Family],
    log_masses: Sequence[float],
    *,
    bound: float,
    samples: int,
    seed: int,
    batches: bool = True,
) -> tuple[Counter[Hashable], int]:
    """``samples`` draws; also returns how many proposals they made in all (envelope picks
    up to each acceptance)."""
    rng = seeded_generator(seed)
    proposals = 0
    counts: Counter[Hashable] = Counter()
    for _ in range(samples):
        sampler = RejectionSampler(
            np.asarray(explicit, dtype=np.float64),
            np.asarray(log_masses, dtype=np.float64),
            log_weight_bound=bound,
            batches=batches,
        )
        choice, made = sampler.draw(proposer(families), rng, limit=NO_CAP)
        assert choice is not None
        counts[choice] += 1
        proposals += made
    return counts, proposals


#: What RejectionSampler.draw asks for: one proposal per listed family, their log-weights and
#: a builder of the k-th one.
Proposer = Callable[
    [npt.NDArray[np.int64], np.random.Generator],
    tuple[npt.NDArray[np.float64], Callable[[int], T]],
]


def proposer(families: Sequence[Family]) -> Proposer[tuple[int, str]]:
    """The batch proposer of the toy families: (family, value) pairs, vectorised per family."""

    def many(
        picks: npt.NDArray[np.int64], rng: np.random.Generator
    ) -> tuple[npt.NDArray[np.float64], Callable[[int], tuple[int, str]]]:
        weights = np.empty(picks.size, dtype=np.float64)
        chosen = np.empty(picks.size, dtype=np.int64)
        for f in set(picks.tolist()):
            at = np.flatnonzero(picks == f)
            chosen[at] = families[f].propose(at.size, rng)
            weights[at] = np.asarray(families[f].log_weights)[chosen[at]]

        def build(k: int) -> tuple[int, str]:
            f = int(picks[k])
            return f, families[f].values[int(chosen[k])]

        return weights, build

    return many


def batched(propose: Callable[[int, np.random.Generator], tuple[T, float]]) -> Proposer[T]:
    """The batch proposer of a one-at-a-time ``propose(family, rng)`` (independent calls)."""

    def many(
        families: npt.NDArray[np.int64], rng: np.random.Generator
    ) -> tuple[npt.NDArray[np.float64], Callable[[int], T]]:
        made = [propose(int(family), rng) for family in families]
        weights = np.asarray([weight for _x, weight in made], dtype=np.float64)
        return weights, lambda k: made[k][0]

    return many


def one_draw(
    explicit: Sequence[float],
    log_masses: Sequence[float],
    *,
    bound: float,
    propose: Callable[[int, np.random.Generator], tuple[T, float]],
    rng: np.random.Generator,
) -> Choice[T]:
    """One draw of a freshly prepared sampler, with a cap it never reaches."""
    sampler = RejectionSampler(
        np.asarray(explicit, dtype=np.float64),
        np.asarray(log_masses, dtype=np.float64),
        log_weight_bound=bound,
    )
    choice, made = sampler.draw(batched(propose), rng, limit=NO_CAP)
    assert choice is not None
    assert 1 <= made < NO_CAP
    return choice


def assert_matches(counts: Counter[Hashable], law: dict[Hashable, float]) -> None:
    """Every outcome has positive exact probability and the chi-square p-value is not tiny
    (cells with expected count below 5 are pooled)."""
    total = sum(counts.values())
    unexpected = [key for key in counts if law.get(key, 0.0) == 0.0]
    assert not unexpected, f"outcomes of probability zero were drawn: {unexpected}"
    observed: list[float] = []
    expected: list[float] = []
    pooled_observed = pooled_expected = 0.0
    for key, p in law.items():
        if p == 0.0:
            continue
        if p * total < MIN_EXPECTED:
            pooled_observed += counts[key]
            pooled_expected += p * total
        else:
            observed.append(counts[key])
            expected.append(p * total)
    if pooled_expected > 0.0:
        observed.append(pooled_observed)
        expected.append(pooled_expected)
    assert len(observed) >= 2
    result = chisquare(observed, expected)
    assert result.pvalue > P_VALUE_FLOOR, (result, dict(counts), law)


@pytest.mark.parametrize(
    ("bound", "seed", "batches"),
    [(2.0, 11, True), (4.0, 12, True), (2.0, 11, False)],
    ids=["tight-bound", "loose-bound", "tight-bound-one-at-a-time"],
)
def test_mixture_matches_the_exact_law(bound: float, seed: int, batches: bool) -> None:
    law = exact_law(EXPLICIT, FAMILIES, FAMILY_LOG_MASSES)
    counts, proposals = draw(
        EXPLICIT,
        FAMILIES,
        FAMILY_LOG_MASSES,
        bound=bound,
        samples=SAMPLES,
        seed=seed + 10 * batches,
        batches=batches,
    )
    assert counts[("explicit", 1)] == 0  # weight −inf: never chosen
    assert_matches(counts, law)
    # Proposals follow the envelope: a pick is accepted with probability (accepted mass) /
    # (envelope mass), and the draw ends on acceptance. Check the mean loosely (±10 %).
    envelope_families = sum(math.exp(m + bound) for m in FAMILY_LOG_MASSES)
    envelope_explicit = sum(math.exp(w) for w in EXPLICIT)
    accepted_mass = sum(
        math.exp(m) * p * math.exp(lw)
        for family, m in zip(FAMILIES, FAMILY_LOG_MASSES, strict=True)
        for p, lw in zip(family.probabilities, family.log_weights, strict=True)
    )
    rounds = (envelope_explicit + envelope_families) / (envelope_explicit + accepted_mass)
    assert proposals == pytest.approx(SAMPLES * rounds, rel=0.1)


def test_loose_bound_costs_more_proposals_for_the_same_law() -> None:
    _, tight = draw(EXPLICIT, FAMILIES, FAMILY_LOG_MASSES, bound=2.0, samples=4000, seed=13)
    _, loose = draw(EXPLICIT, FAMILIES, FAMILY_LOG_MASSES, bound=4.0, samples=4000, seed=13)
    assert loose > 2 * tight


def test_explicit_candidates_only() -> None:
    explicit = (0.0, 0.5, -math.inf, 2.0)
    law = exact_law(explicit, (), ())
    counts, proposals = draw(explicit, (), (), bound=0.0, samples=SAMPLES, seed=14)
    assert proposals == SAMPLES  # every draw ends at its first pick
    assert counts[("explicit", 2)] == 0
    assert_matches(counts, law)


def test_families_only() -> None:
    families = FAMILIES[::-1]
    masses = (0.0, math.log(3.0))
    law = exact_law((), families, masses)
    counts, _ = draw((), families, masses, bound=2.0, samples=SAMPLES, seed=15)
    assert_matches(counts, law)


def test_a_family_of_mass_zero_is_never_proposed() -> None:
    masses = (-math.inf, 0.0)
    law = exact_law(EXPLICIT, FAMILIES, masses)
    counts, _ = draw(EXPLICIT, FAMILIES, masses, bound=2.0, samples=SAMPLES, seed=16)
    assert not any(
        key[1][0] == 0 for key in counts if isinstance(key, tuple) and key[0] == "family"
    )
    assert_matches(counts, law)


def test_a_proposal_above_the_bound_raises() -> None:
    rng = seeded_generator(17)

    def propose(_f: int, _generator: np.random.Generator) -> tuple[str, float]:
        return "too heavy", 1.5

    with pytest.raises(ValueError, match="exceeds log_weight_bound"):
        one_draw((), (0.0,), bound=1.0, propose=propose, rng=rng)
    # Equal to the bound (up to float noise) is fine and always accepted.
    assert one_draw((), (0.0,), bound=1.5, propose=propose, rng=rng) == ("family", "too heavy")


@pytest.mark.parametrize(
    ("explicit", "masses", "message"),
    [
        ((), (), "at least one candidate"),
        ((-math.inf, -math.inf), (), "at least one candidate"),
        ((-math.inf,), (-math.inf,), "at least one candidate"),
        ((0.0, math.nan), (), "finite or -inf"),
        ((0.0, math.inf), (), "finite or -inf"),
        ((0.0,), (math.inf,), "finite or -inf"),
    ],
)
def test_invalid_weights_raise(
    explicit: tuple[float, ...], masses: tuple[float, ...], message: str
) -> None:
    def propose(_f: int, _generator: np.random.Generator) -> tuple[str, float]:
        return "x", 0.0

    with pytest.raises(ValueError, match=message):
        one_draw(explicit, masses, bound=0.0, propose=propose, rng=seeded_generator(18))


def test_same_seed_same_draws() -> None:
    first, _ = draw(EXPLICIT, FAMILIES, FAMILY_LOG_MASSES, bound=2.0, samples=500, seed=19)
    second, _ = draw(EXPLICIT, FAMILIES, FAMILY_LOG_MASSES, bound=2.0, samples=500, seed=19)
    assert first == second


# -- the cap on proposals ------------------------------------------------------------------------


def test_a_draw_stops_at_its_limit_and_counts_its_proposals() -> None:
    """A family far below the bound is (almost surely) never accepted: the draw makes exactly
    ``limit`` proposals, every one reaching the family (no batch goes past the limit), and
    returns no choice."""
    calls = 0

    def propose(_f: int, _generator: np.random.Generator) -> tuple[str, float]:
        nonlocal calls
        calls += 1
        return "never", -60.0

    for batches in (True, False):
        sampler = RejectionSampler(np.zeros(0), np.zeros(1), log_weight_bound=0.0, batches=batches)
        rng = seeded_generator(20)
        for limit in (0, 1, 255, 256, 257, 1000):
            calls = 0
            assert sampler.draw(batched(propose), rng, limit=limit) == (None, limit)
            assert calls == limit


def test_proposals_made_are_the_picks_up_to_acceptance() -> None:
    """The count returned is the position of the first acceptance: with one explicit candidate
    and a family that is never accepted, each of equal envelope mass, it is geometric with
    success ½ (the batch's picks after the acceptance are not counted)."""

    never = Family(("never",), (1.0,), (-60.0,))
    law: dict[Hashable, float] = {k: 0.5**k for k in range(1, 40)}
    law[40] = 0.5**39  # the tail beyond 39
    for batches in (True, False):
        sampler = RejectionSampler(np.zeros(1), np.zeros(1), log_weight_bound=0.0, batches=batches)
        rng = seeded_generator(21 + batches)
        made: Counter[int] = Counter()
        for _ in range(SAMPLES):
            choice, count = sampler.draw(proposer([never]), rng, limit=NO_CAP)
            assert choice == ("explicit", 0)
            made[count] += 1
        assert_matches(Counter({min(k, 40): v for k, v in made.items()}), law)


def test_a_batch_builds_only_the_accepted_proposal() -> None:
    """Proposals are drawn a batch at a time, and only the accepted one is built."""
    built: list[int] = []

    def many(
        families: npt.NDArray[np.int64], _generator: np.random.Generator
    ) -> tuple[npt.NDArray[np.float64], Callable[[int], int]]:
        def build(k: int) -> int:
            built.append(k)
            return k

        return np.zeros(families.size), build

    sampler = RejectionSampler(np.zeros(0), np.zeros(1), log_weight_bound=0.0)
    choice, made = sampler.draw(many, seeded_generator(24), limit=NO_CAP)
    assert choice == ("family", 0)  # log-weight = bound: always accepted
    assert made == 1
    assert built == [0]


#: Accepted draws kept in the small-limit test (each takes 8–14 draws at these limits).
SMALL_LIMIT_SAMPLES = 10_000


@pytest.mark.parametrize(
    ("limit", "batches"), [(1, False), (2, True)], ids=["1-one-at-a-time", "2-batched"]
)
def test_a_choice_within_a_small_limit_has_the_exact_law(limit: int, batches: bool) -> None:
    """Accepted draws have the EM law whatever the number of proposals they took: keeping only
    the draws accepted within 1 or 2 proposals (7 % and 13 % of them here) changes nothing,
    proposals made one at a time or in a batch cut at the limit."""
    law = exact_law(EXPLICIT, FAMILIES, FAMILY_LOG_MASSES)
    sampler = RejectionSampler(
        np.asarray(EXPLICIT, dtype=np.float64),
        np.asarray(FAMILY_LOG_MASSES, dtype=np.float64),
        log_weight_bound=4.0,
        batches=batches,
    )

    rng = seeded_generator(22 + limit)
    counts: Counter[Hashable] = Counter()
    stopped = 0
    while sum(counts.values()) < SMALL_LIMIT_SAMPLES:
        choice, made = sampler.draw(proposer(FAMILIES), rng, limit=limit)
        if choice is None:
            assert made == limit
            stopped += 1
        else:
            counts[choice] += 1
    assert stopped > SMALL_LIMIT_SAMPLES // 4  # the limit was reached often
    assert_matches(counts, law)
