"""Kernels of DP Bayesian rule lists (ALGORITHMS.md §5.1, §5.3): the prior and the likelihood
against hand-computed values, the Hastings ratios at the boundary lengths, the incremental
capture counts against row-by-row routing, and the Metropolis–Hastings sampler against its exact
target π(d) ∝ exp(ε·u(d)/(2Δu)) over every rule list of 3 or 4 antecedents.

Sampler test design: many independent chains, each *started from a draw of the exact target*
and run for a fixed number of steps. π is stationary for a correct kernel, so the final states
are exactly π-distributed whatever the number of steps (no convergence assumption), and the
chains are independent, so a chi-square test of the final states is valid. A kernel that does
not leave π invariant drifts away from it: the same test must reject the sampler run with the
Hastings correction dropped (p < 1e-4). A second test starts every chain from the operation's
public start, the empty list, checking that the chain reaches π within a modest number of
steps. A third shows why every step holds with probability ½ (§6 #16): over one antecedent
with λ tuned so that both moves are always accepted, a chain that never holds alternates
[] ↔ [a] and is back at [] after any even number of steps, the lazy chain is not.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterator, Sequence

import numpy as np
import pytest
from scipy.stats import chisquare

from dpmine.wire import (
    Antecedent,
    BooleanAttribute,
    BoolLiteral,
    CatLiteral,
    DatasetMetadata,
    LabelSpec,
    NumLiteral,
    RuleListTarget,
)
from dpmine_server.data.columns import BooleanColumn, CategoricalColumn, Column, ColumnStore
from dpmine_server.dp.rng import seeded_generator
from dpmine_server.operations import rule_list_mcmc
from dpmine_server.operations.base import Progress, no_progress
from dpmine_server.operations.rule_list_mcmc import (
    PUBLIC_START,
    MoveType,
    PriorTables,
    available_moves,
    capture_counts,
    extend_chain,
    log_hastings_ratio,
    log_likelihood,
    log_prior,
    propose,
    rule_log_likelihoods,
    sample_rule_list,
    start_chain,
    target_coefficient,
    target_log_density,
    utility_sensitivity,
)
from dpmine_server.operations.rule_lists import antecedent_words
from dpmine_server.services.timing import operation_work

SEEDED_P_VALUE = 1e-4
ROWS = 36
N_MAX = 100

# --------------------------------------------------------------------------------------------
# Likelihood and prior by hand (§5.1)


def test_likelihood_keeps_the_constant_terms() -> None:
    # α = (1, 1): one rule with (N0, N1) = (1, 1) gives lnΓ(2)² − lnΓ(4) = −ln 6; an empty rule 0.
    assert log_likelihood(np.array([[1, 1], [0, 0]]), (1.0, 1.0)) == pytest.approx(-math.log(6))
    # α = (2, 1), (N0, N1) = (1, 0): lnΓ(3) − lnΓ(2) − lnΓ(1) + lnΓ(3) + lnΓ(1) − lnΓ(4)
    # = ln 2 + ln 2 − ln 6 = ln(2/3); without the constant terms it would be ln(1/3).
    assert log_likelihood(np.array([[1, 0]]), (2.0, 1.0)) == pytest.approx(math.log(2 / 3))
    # An empty rule contributes exactly 0 for any α (it would be −ln 2 without the constants),
    # so adding a rule that captures nothing does not change the likelihood.
    terms = rule_log_likelihoods(np.array([[0, 0], [3, 4]]), (2.0, 0.5))
    assert terms[0] == pytest.approx(0.0, abs=1e-12)
    expected = (
        math.lgamma(2.5)
        - math.lgamma(2.0)
        - math.lgamma(0.5)
        + math.lgamma(5.0)
        + math.lgamma(4.5)
        - math.lgamma(9.5)
    )
    assert terms[1] == pytest.approx(expected)


#: Cardinalities of A = (a0, a1, a2): two singletons and one pair.
CARDINALITIES = (1, 1, 2)


def _tables(lam: float = 2.0, eta: float = 1.0) -> PriorTables:
    return PriorTables.of(CARDINALITIES, expected_length=lam, expected_cardinality=eta)


def test_prior_matches_hand_computed_values() -> None:
    # λ = 2, M = 3: Poisson(k; 2) ∝ 1, 2, 2, 4/3 for k = 0..3, total 19/3.
    # d = (a2, a0): p(m=2) = 6/19; c_1 = 2 with R_1 = {1, 2}: (1/2)/(1 + 1/2) = 1/3, 1 pair
    # left; c_2 = 1 with R_2 = {1} (the only pair is used: cardinality 2 exhausted): 1, 1/2.
    assert log_prior([2, 0], _tables()) == pytest.approx(math.log(6 / 19 * 1 / 3 * 1 / 2))
    # d = (a0, a1, a2): 4/19 · (2/3 · 1/2) · (2/3 · 1) · (1 · 1) = 8/171.
    assert log_prior([0, 1, 2], _tables()) == pytest.approx(math.log(8 / 171))
    assert log_prior([], _tables()) == pytest.approx(math.log(3 / 19))


def _lists(size: int) -> Iterator[tuple[int, ...]]:
    """Every rule list (ordered, distinct) over ``size`` antecedents."""
    for length in range(size + 1):
        yield from itertools.permutations(range(size), length)


@pytest.mark.parametrize(("lam", "eta"), [(2.0, 1.0), (0.5, 3.0), (7.0, 0.2)])
def test_prior_is_a_distribution_over_rule_lists(lam: float, eta: float) -> None:
    tables = _tables(lam, eta)
    total = math.fsum(math.exp(log_prior(list(d), tables)) for d in _lists(3))
    assert total == pytest.approx(1.0, abs=1e-12)


def test_sensitivity_from_public_values() -> None:
    assert utility_sensitivity(100_000, (1.0, 1.0)) == pytest.approx(11.5129, abs=1e-4)  # §5.3
    assert utility_sensitivity(100, (1.0, 1.0)) == pytest.approx(math.log(101))
    assert utility_sensitivity(100, (2.0, 0.5)) == pytest.approx(math.log(101.5 / 0.5))


# --------------------------------------------------------------------------------------------
# Hastings ratios (§5.3)


def test_move_types_at_the_boundary_lengths() -> None:
    assert available_moves(0, 3) == ("add",)
    assert available_moves(1, 3) == ("add", "cut")
    assert available_moves(2, 3) == ("move", "add", "cut")
    assert available_moves(3, 3) == ("move", "cut")
    assert available_moves(1, 1) == ("cut",)


def test_hastings_ratios_at_lengths_0_1_m_minus_1_and_m() -> None:
    def ratio(move: MoveType, length: int, size: int = 3) -> float:
        return math.exp(log_hastings_ratio(move, length, size))

    # R = 0: add only (p_add = 1); reverse cut at R = 1 has p_cut = ½: ½·3/1.
    assert ratio("add", 0) == pytest.approx(3 / 2)
    # R = 1: add ⅓·2/½; cut p_add(0)/(p_cut(1)·3) = 1/(½·3).
    assert ratio("add", 1) == pytest.approx(4 / 3)
    assert ratio("cut", 1) == pytest.approx(2 / 3)
    # R = M − 1 = 2: add ½·1/⅓; cut ½/(⅓·2) (Letham's code plugs ⅓ for the reverse add: ½ here).
    assert ratio("add", 2) == pytest.approx(3 / 2)
    assert ratio("cut", 2) == pytest.approx(3 / 4)
    # R = M = 3: cut ⅓/½; move is symmetric.
    assert ratio("cut", 3) == pytest.approx(2 / 3)
    assert ratio("move", 3) == 1.0
    # M = 1: from [] the only reverse move of an add is the only move at R = 1, a cut.
    assert ratio("add", 0, 1) == pytest.approx(1.0)
    assert ratio("cut", 1, 1) == pytest.approx(1.0)
    # Detailed balance of the proposal: forward and reverse ratios are inverse.
    for size in (1, 2, 3, 5):
        for length in range(size):
            forward = log_hastings_ratio("add", length, size)
            assert forward == pytest.approx(-log_hastings_ratio("cut", length + 1, size))


# --------------------------------------------------------------------------------------------
# Tiny dataset: Booleans a, b, categorical c ∈ {x, y, z}, Boolean label t (positive "yes");
# about 10 % missing values, including the label (rows in neither class).

_DATA = np.random.default_rng(20261124)
A_VALUES = np.where(_DATA.random(ROWS) < 0.1, -1, (_DATA.random(ROWS) < 0.5).astype(int))
B_VALUES = np.where(_DATA.random(ROWS) < 0.1, -1, (_DATA.random(ROWS) < 0.4).astype(int))
C_VALUES = np.where(_DATA.random(ROWS) < 0.1, -1, _DATA.integers(0, 3, ROWS))
_SIGNAL = (A_VALUES == 1) & (C_VALUES != 2) | (B_VALUES == 1) & (C_VALUES == 0)
T_VALUES = np.where(
    _DATA.random(ROWS) < 0.1, -1, (_SIGNAL ^ (_DATA.random(ROWS) < 0.1)).astype(int)
)
CATEGORIES = ("x", "y", "z")

METADATA = DatasetMetadata.model_validate(
    {
        "kind": "table",
        "n_max": N_MAX,
        "attributes": [
            {"type": "boolean", "name": "a"},
            {"type": "boolean", "name": "b"},
            {"type": "categorical", "name": "c", "categories": list(CATEGORIES)},
            {"type": "boolean", "name": "t"},
        ],
        "label": {"attribute": "t", "positive": "yes"},
    }
)

ANTECEDENTS = (
    Antecedent(items=[BoolLiteral(attribute="a")]),
    Antecedent(items=[BoolLiteral(attribute="b"), CatLiteral(attribute="c", category="x")]),
    Antecedent(items=[BoolLiteral(attribute="a", negated=True)]),
    Antecedent(items=[CatLiteral(attribute="c", category="y")]),
)


def _store() -> ColumnStore:
    def boolean(name: str, values: np.ndarray) -> BooleanColumn:
        return BooleanColumn.from_arrays(name, values == 1, values >= 0)

    columns: dict[str, Column] = {
        "a": boolean("a", A_VALUES),
        "b": boolean("b", B_VALUES),
        "c": CategoricalColumn("c", CATEGORIES, C_VALUES.astype(np.int32)),
        "t": boolean("t", T_VALUES),
    }
    return ColumnStore(METADATA, n_rows=ROWS, columns=columns)


def _holds(literal: BoolLiteral | CatLiteral | NumLiteral, row: int) -> bool:
    """A literal on one row; false on a missing value, negated or not (§1.1)."""
    if isinstance(literal, NumLiteral):
        raise AssertionError("the tiny dataset has no numeric attribute")
    if isinstance(literal, BoolLiteral):
        value = int({"a": A_VALUES, "b": B_VALUES}[literal.attribute][row])
        return value >= 0 and (value == 1) != literal.negated
    code = int(C_VALUES[row])
    return code >= 0 and (CATEGORIES[code] == literal.category) != literal.negated


def _brute_captures(rules: Sequence[int]) -> list[list[int]]:
    """N_{j,y} by routing each labelled row to the first rule it satisfies (default last)."""
    counts = [[0, 0] for _ in range(len(rules) + 1)]
    for row in range(ROWS):
        label = int(T_VALUES[row])
        if label < 0:
            continue
        slot = len(rules)
        for position, rule in enumerate(rules):
            items = ANTECEDENTS[rule].items
            if all(_holds(item, row) for item in items):
                slot = position
                break
        counts[slot][label] += 1
    return counts


def _brute_prior(rules: Sequence[int], cards: Sequence[int], lam: float, eta: float) -> float:
    """ln p(d) straight from §5.1's definitions."""

    def pmf(k: int, mean: float) -> float:
        return math.exp(k * math.log(mean) - mean - math.lgamma(k + 1))

    total = math.log(pmf(len(rules), lam) / sum(pmf(k, lam) for k in range(len(cards) + 1)))
    used: list[int] = []
    for rule in rules:
        unused = [a for a in range(len(cards)) if a not in used]
        reachable = {cards[a] for a in unused}
        total += math.log(pmf(cards[rule], eta) / sum(pmf(k, eta) for k in reachable))
        total -= math.log(sum(1 for a in unused if cards[a] == cards[rule]))
        used.append(rule)
    return total


def _brute_likelihood(captures: list[list[int]], alpha: tuple[float, float]) -> float:
    a0, a1 = alpha
    return sum(
        math.lgamma(a0 + a1)
        - math.lgamma(a0)
        - math.lgamma(a1)
        + math.lgamma(n0 + a0)
        + math.lgamma(n1 + a1)
        - math.lgamma(n0 + n1 + a0 + a1)
        for n0, n1 in captures
    )


def test_capture_counts_match_row_by_row_routing() -> None:
    words = antecedent_words(_store(), ANTECEDENTS)
    for rules in _lists(4):
        assert capture_counts(words, rules).tolist() == _brute_captures(rules), rules


@pytest.mark.parametrize("size", [3, 4])
def test_kernel_utility_matches_the_brute_force_definition(size: int) -> None:
    cards = [len(a.items) for a in ANTECEDENTS[:size]]
    tables = PriorTables.of(cards, expected_length=1.5, expected_cardinality=0.7)
    words = antecedent_words(_store(), ANTECEDENTS[:size])
    alpha = (2.0, 0.5)
    for rules in _lists(size):
        kernel = log_likelihood(capture_counts(words, rules), alpha) + log_prior(rules, tables)
        brute = _brute_likelihood(_brute_captures(rules), alpha) + _brute_prior(
            rules, cards, 1.5, 0.7
        )
        assert kernel == pytest.approx(brute, abs=1e-9), rules


def test_incremental_updates_match_a_fresh_computation() -> None:
    """A walk of 400 proposals, all accepted: after each, the chain state recomputed from the
    changed position on equals the state of the same list computed from scratch, and holds
    exactly one "remaining rows" entry per prefix (no stale entries pile up)."""
    words = antecedent_words(_store(), ANTECEDENTS)
    tables = PriorTables.of([1, 2, 1, 1], expected_length=2.0, expected_cardinality=1.0)
    alpha = (2.0, 0.5)
    chain = start_chain(words, alpha, tables, [0])
    uniforms = np.random.default_rng(5).random((400, 3))
    moves: Counter[int] = Counter()
    for first, second, third in uniforms.tolist():
        unused = [a for a in range(len(ANTECEDENTS)) if a not in chain.rules]
        proposal = propose(chain.rules, unused, len(ANTECEDENTS), (first, second, third))
        moves[len(proposal.rules) - len(chain.rules)] += 1
        chain = extend_chain(words, alpha, tables, chain, proposal)
        fresh = start_chain(words, alpha, tables, chain.rules)
        assert len(chain.remaining) == len(chain.left) == len(chain.rules) + 1
        assert len(chain.terms) == len(chain.rules) + 1
        assert [c.tolist() for c in chain.left] == [c.tolist() for c in fresh.left]
        assert chain.utility == pytest.approx(fresh.utility, abs=1e-9)
    assert min(moves[-1], moves[0], moves[1]) > 50  # cuts, moves and adds were all exercised


# --------------------------------------------------------------------------------------------
# The sampler against the exact target


State = tuple[int, ...]
LAMBDA, ETA = 1.5, 1.0


def _target(
    size: int, epsilon: float, alpha: tuple[float, float], target: RuleListTarget = "likelihood"
) -> dict[State, float]:
    """π over every list of ``size`` antecedents, by brute force: ``likelihood``
    p(d)·exp(ε·ℓ(d)/Δu), ``posterior`` exp(ε·(ℓ(d) + ln p(d))/(2Δu)) (§5.3)."""
    cards = [len(a.items) for a in ANTECEDENTS[:size]]
    sensitivity = math.log((N_MAX - 1 + sum(alpha)) / min(alpha))

    def log_weight(d: State) -> float:
        likelihood = _brute_likelihood(_brute_captures(d), alpha)
        prior = _brute_prior(d, cards, LAMBDA, ETA)
        if target == "likelihood":
            return prior + epsilon / sensitivity * likelihood
        return epsilon / (2 * sensitivity) * (likelihood + prior)

    log_weights = {d: log_weight(d) for d in _lists(size)}
    top = max(log_weights.values())
    weights = {d: math.exp(w - top) for d, w in log_weights.items()}
    total = sum(weights.values())
    return {d: w / total for d, w in weights.items()}


def _pooled_p_value(samples: list[State], target: dict[State, float]) -> float:
    """Chi-square of the final states against ``target``; states expected fewer than 5 times
    are pooled into one cell."""
    observed = Counter(samples)
    assert set(observed) <= set(target)
    expected = {d: p * len(samples) for d, p in target.items()}
    big = [d for d in target if expected[d] >= 5]
    small = [d for d in target if expected[d] < 5]
    counts = [observed[d] for d in big]
    means = [expected[d] for d in big]
    if small:
        counts.append(sum(observed[d] for d in small))
        means.append(sum(expected[d] for d in small))
    return float(chisquare(counts, means).pvalue)


def _chains(
    size: int,
    *,
    epsilon: float,
    alpha: tuple[float, float],
    chains: int,
    iterations: int,
    seed: int,
    start: dict[State, float] | None,
    target: RuleListTarget = "likelihood",
) -> list[State]:
    """Final states of independent chains, started from draws of ``start`` (or from the
    public start, the empty list)."""
    words = antecedent_words(_store(), ANTECEDENTS[:size])
    tables = PriorTables.of(
        [len(a.items) for a in ANTECEDENTS[:size]],
        expected_length=LAMBDA,
        expected_cardinality=ETA,
    )
    picker = np.random.default_rng(seed)
    states = list(start) if start is not None else []
    probabilities = np.array([start[d] for d in states]) if start is not None else None
    finals: list[State] = []
    for chain in range(chains):
        initial: list[int] = list(PUBLIC_START)
        if probabilities is not None:
            initial = list(states[int(picker.choice(len(states), p=probabilities))])
        final = sample_rule_list(
            words,
            tables,
            alpha=alpha,
            epsilon=epsilon,
            n_max=N_MAX,
            iterations=iterations,
            initial=initial,
            rng=seeded_generator(seed * 100_000 + chain),
            progress=no_progress,
            target=target,
        )
        finals.append(tuple(final))
    return finals


#: (antecedents, ε, α, target): ε low enough that neither target is concentrated on one list.
CASES: list[tuple[int, float, tuple[float, float], RuleListTarget]] = [
    (3, 8.0, (1.0, 1.0), "likelihood"),
    (4, 4.0, (2.0, 0.5), "likelihood"),
    (3, 20.0, (1.0, 1.0), "posterior"),
    (4, 16.0, (2.0, 0.5), "posterior"),
]
CASE_NAMES = ["likelihood-3", "likelihood-4", "posterior-3", "posterior-4"]


def _final_states(
    size: int, epsilon: float, alpha: tuple[float, float], target: RuleListTarget
) -> tuple[dict[State, float], list[State]]:
    """The exact target and the final states of 2,000 chains of 15 steps started from it."""
    law = _target(size, epsilon, alpha, target)
    samples = _chains(
        size,
        epsilon=epsilon,
        alpha=alpha,
        chains=2000,
        iterations=15,
        seed=size,
        start=law,
        target=target,
    )
    return law, samples


@pytest.mark.parametrize(("size", "epsilon", "alpha", "target"), CASES, ids=CASE_NAMES)
def test_the_target_is_stationary(
    size: int, epsilon: float, alpha: tuple[float, float], target: RuleListTarget
) -> None:
    law, samples = _final_states(size, epsilon, alpha, target)
    log_spread = math.log(max(law.values()) / min(law.values()))
    assert log_spread > 3.0  # far from uniform: the data and the prior matter
    assert _pooled_p_value(samples, law) > SEEDED_P_VALUE


@pytest.mark.parametrize(("size", "epsilon", "alpha", "target"), CASES, ids=CASE_NAMES)
def test_the_test_rejects_a_sampler_without_the_hastings_correction(
    size: int,
    epsilon: float,
    alpha: tuple[float, float],
    target: RuleListTarget,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(rule_list_mcmc, "log_hastings_ratio", lambda *_args: 0.0)
    law, samples = _final_states(size, epsilon, alpha, target)
    assert _pooled_p_value(samples, law) < SEEDED_P_VALUE


def test_the_test_tells_the_two_targets_apart() -> None:
    """Chains of the posterior target fail against the likelihood target at the same ε."""
    size, epsilon, alpha, _ = CASES[0]
    _, samples = _final_states(size, epsilon, alpha, "posterior")
    assert _pooled_p_value(samples, _target(size, epsilon, alpha, "likelihood")) < SEEDED_P_VALUE


def test_chains_from_the_public_start_reach_the_target() -> None:
    size, epsilon, alpha, _ = CASES[0]
    target = _target(size, epsilon, alpha)
    samples = _chains(
        size, epsilon=epsilon, alpha=alpha, chains=1500, iterations=60, seed=7, start=None
    )
    assert _pooled_p_value(samples, target) > SEEDED_P_VALUE


def _alternating_chains(chains: int, iterations: int) -> Counter[State]:
    """Final states over the one antecedent [a], with λ set so that π([a])/π([]) = 1 + 10⁻⁹:
    adding [a] to [] and cutting it again are both accepted (almost) surely, the chain on
    {[], [a]} that never holds is periodic."""
    words = antecedent_words(_store(), ANTECEDENTS[:1])
    alpha = (1.0, 1.0)

    def tables(lam: float) -> PriorTables:
        return PriorTables.of([1], expected_length=lam, expected_cardinality=ETA)

    coefficient = target_coefficient("likelihood", 1.0, N_MAX, alpha)
    # ln π([a]) − ln π([]) = ln λ + c·(ℓ([a]) − ℓ([])) (the move ratios are 1 over one antecedent)
    gap = target_log_density(start_chain(words, alpha, tables(1.0), [0]), "likelihood", coefficient)
    gap -= target_log_density(start_chain(words, alpha, tables(1.0), []), "likelihood", coefficient)
    lam = math.exp(-gap) * (1 + 1e-9)
    finals = Counter[State]()
    for chain in range(chains):
        final = sample_rule_list(
            words,
            tables(lam),
            alpha=alpha,
            epsilon=1.0,
            n_max=N_MAX,
            iterations=iterations,
            rng=seeded_generator(30_000 + chain),
            progress=no_progress,
        )
        finals[tuple(final)] += 1
    return finals


def test_the_chain_holds_so_that_it_is_never_periodic(monkeypatch: pytest.MonkeyPatch) -> None:
    lazy = _alternating_chains(2000, 10)
    assert set(lazy) == {(), (0,)}
    assert 900 < lazy[()] < 1100  # π is ½ each; within 4.5 standard deviations
    monkeypatch.setattr(rule_list_mcmc, "HOLD_PROBABILITY", 0.0)
    assert _alternating_chains(2000, 10) == Counter({(): 2000})  # back at the start


def test_progress_is_reported_after_every_percent() -> None:
    reports: list[float] = []
    words = antecedent_words(_store(), ANTECEDENTS)
    tables = PriorTables.of([1, 2, 1, 1], expected_length=3.0, expected_cardinality=1.0)
    sample_rule_list(
        words,
        tables,
        alpha=(1.0, 1.0),
        epsilon=1.0,
        n_max=N_MAX,
        iterations=250,
        initial=[0],
        rng=seeded_generator(1),
        progress=_collect(reports),
    )
    assert len(reports) == 125  # every 2 steps (⌊250/100⌋), and the last
    assert reports == sorted(reports)
    assert reports[-1] == 1.0


def _collect(reports: list[float]) -> Progress:
    """A progress sink that records the reported fractions."""

    def report(fraction: float, message: str = "") -> None:
        del message
        reports.append(fraction)

    return report


def test_the_padding_budget_grows_with_the_public_parameters() -> None:
    """brl.* have their own public work estimates (services/timing.py), not the count default:
    the sampler's grows with the iterations, the antecedents and n_max."""
    metadata = DatasetMetadata(
        kind="table",
        n_max=30_000,
        attributes=[BooleanAttribute(name="p"), BooleanAttribute(name="y")],
        label=LabelSpec(attribute="y", positive="1"),
    )
    one = {"items": [{"kind": "bool", "attribute": "p"}]}

    def sample(iterations: int, antecedents: int, n_max: int = 30_000) -> float:
        request = {"antecedents": [one] * antecedents, "iterations": iterations}
        return operation_work(
            "brl.sample_rule_list", request, metadata.model_copy(update={"n_max": n_max})
        )

    assert sample(3000, 100) > sample(1000, 100) > sample(1000, 10)
    assert sample(1000, 100, n_max=300_000) > sample(1000, 100)
    assert sample(3000, 136) > 1.0  # the measured 0.45 ms a step at 32k rows
    count = operation_work("count.noisy", {}, metadata)
    antecedents = {"max_length": 1, "epsilon": 1.0, "k_per_class": 1}
    assert operation_work("brl.antecedents", antecedents, metadata) > count
    assert operation_work("brl.point_estimates", {"rules": [one] * 5}, metadata) > count
