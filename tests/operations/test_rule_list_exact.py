"""The exact rule-list sampler of ``brl.sample_rule_list_exact`` (ALGORITHMS.md §5.1, §5.3):
every list of D_L is scored like the brute-force definition, and the sampler's empirical law
over D_L (5 antecedents, max_rules 2: 1 + 5 + 20 = 26 lists) matches the exact target computed
here from the formulas, by a chi-square test. Power check: the same test at the same sample size
rejects the sampler with the prior dropped from the ``likelihood`` target and the sampler at a
wrong coefficient (Δu halved) on the ``posterior`` target. Also: the public count and work, the
refusal above the cap before any data is read, and the work estimate in the timing table.
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
    EXACT_LIST_OVERHEAD_WORDS,
    MAX_EXACT_RULE_LIST_WORK,
    Antecedent,
    BoolLiteral,
    DatasetMetadata,
    RuleListTarget,
    SampleRuleListExactRequest,
    exact_rule_list_count,
    exact_rule_list_work,
)
from dpmine_server.data.columns import BooleanColumn, Column, ColumnStore
from dpmine_server.dp.budget import Epsilon
from dpmine_server.dp.rng import seeded_generator
from dpmine_server.operations import CATALOG, rule_list_exact
from dpmine_server.operations.base import no_progress
from dpmine_server.operations.rule_list_exact import (
    draw_rule_list,
    sample_rule_list_exact,
    score_rule_lists,
    uncaptured_counts,
)
from dpmine_server.operations.rule_list_mcmc import PriorTables
from dpmine_server.operations.rule_lists import antecedent_words
from dpmine_server.services.timing import operation_work

ROWS = 40
N_MAX = 60
LAMBDA, ETA = 1.5, 1.0
ALPHA = (1.0, 2.0)
DRAWS = 4000
SEEDED_P_VALUE = 1e-4

# Booleans a, b, c and the Boolean label t; about 10 % missing values, the label included.
_DATA = np.random.default_rng(20261126)
VALUES = {
    name: np.where(_DATA.random(ROWS) < 0.1, -1, (_DATA.random(ROWS) < 0.5).astype(int))
    for name in ("a", "b", "c")
}
_SIGNAL = (VALUES["a"] == 1) & (VALUES["c"] != 1) | (VALUES["b"] == 1)
LABEL = np.where(_DATA.random(ROWS) < 0.1, -1, (_SIGNAL ^ (_DATA.random(ROWS) < 0.15)).astype(int))

METADATA = DatasetMetadata.model_validate(
    {
        "kind": "table",
        "n_max": N_MAX,
        "attributes": [
            {"type": "boolean", "name": "a"},
            {"type": "boolean", "name": "b"},
            {"type": "boolean", "name": "c"},
            {"type": "boolean", "name": "t"},
        ],
        "label": {"attribute": "t", "positive": "yes"},
    }
)


def _literal(name: str, negated: bool = False) -> BoolLiteral:
    return BoolLiteral(attribute=name, negated=negated)


ANTECEDENTS = (
    Antecedent(items=[_literal("a")]),
    Antecedent(items=[_literal("b")]),
    Antecedent(items=[_literal("c", negated=True)]),
    Antecedent(items=[_literal("a"), _literal("c")]),
    Antecedent(items=[_literal("b", negated=True)]),
)
CARDINALITIES = [len(antecedent.items) for antecedent in ANTECEDENTS]


def _store() -> ColumnStore:
    columns: dict[str, Column] = {
        name: BooleanColumn.from_arrays(name, values == 1, values >= 0)
        for name, values in {**VALUES, "t": LABEL}.items()
    }
    return ColumnStore(METADATA, n_rows=ROWS, columns=columns)


# --------------------------------------------------------------------------------------------
# Brute force, straight from §5.1 and §5.3


def _lists(size: int, longest: int) -> Iterator[tuple[int, ...]]:
    for length in range(longest + 1):
        yield from itertools.permutations(range(size), length)


def _captures(rules: Sequence[int]) -> list[list[int]]:
    """N_{j,y}: every labelled row routed to the first rule it satisfies (default last)."""
    counts = [[0, 0] for _ in range(len(rules) + 1)]
    for row in range(ROWS):
        if LABEL[row] < 0:
            continue
        slot = len(rules)
        for position, rule in enumerate(rules):
            if all(
                VALUES[item.attribute][row] >= 0
                and (VALUES[item.attribute][row] == 1) != item.negated
                for item in ANTECEDENTS[rule].items
                if isinstance(item, BoolLiteral)
            ):
                slot = position
                break
        counts[slot][int(LABEL[row])] += 1
    return counts


def _likelihood(rules: Sequence[int]) -> float:
    a0, a1 = ALPHA
    return sum(
        math.lgamma(a0 + a1)
        - math.lgamma(a0)
        - math.lgamma(a1)
        + math.lgamma(n0 + a0)
        + math.lgamma(n1 + a1)
        - math.lgamma(n0 + n1 + a0 + a1)
        for n0, n1 in _captures(rules)
    )


def _prior(rules: Sequence[int]) -> float:
    def pmf(k: int, mean: float) -> float:
        return mean**k * math.exp(-mean) / math.factorial(k)

    size = len(CARDINALITIES)
    total = math.log(pmf(len(rules), LAMBDA) / sum(pmf(k, LAMBDA) for k in range(size + 1)))
    for position, rule in enumerate(rules):
        unused = [a for a in range(size) if a not in rules[:position]]
        reachable = {CARDINALITIES[a] for a in unused}
        total += math.log(pmf(CARDINALITIES[rule], ETA) / sum(pmf(k, ETA) for k in reachable))
        total -= math.log(sum(1 for a in unused if CARDINALITIES[a] == CARDINALITIES[rule]))
    return total


def _target(epsilon: float, longest: int, target: RuleListTarget) -> dict[tuple[int, ...], float]:
    """π over D_L: ``likelihood`` p(d)·exp(ε·ℓ(d)/Δu), ``posterior`` exp(ε·u(d)/(2Δu))."""
    sensitivity = math.log((N_MAX - 1 + sum(ALPHA)) / min(ALPHA))
    weights = {}
    for rules in _lists(len(ANTECEDENTS), longest):
        if target == "likelihood":
            weights[rules] = _prior(rules) + epsilon / sensitivity * _likelihood(rules)
        else:
            weights[rules] = epsilon / (2 * sensitivity) * (_likelihood(rules) + _prior(rules))
    top = max(weights.values())
    total = sum(math.exp(w - top) for w in weights.values())
    return {d: math.exp(w - top) / total for d, w in weights.items()}


def _p_value(samples: Counter[tuple[int, ...]], target: dict[tuple[int, ...], float]) -> float:
    """Chi-square against ``target``; lists expected fewer than 5 times pooled into one cell."""
    assert set(samples) <= set(target)
    draws = sum(samples.values())
    big = [d for d, p in target.items() if p * draws >= 5]
    small = [d for d, p in target.items() if p * draws < 5]
    observed = [samples[d] for d in big]
    expected = [target[d] * draws for d in big]
    if small:
        observed.append(sum(samples[d] for d in small))
        expected.append(sum(target[d] for d in small) * draws)
    return float(chisquare(observed, expected).pvalue)


# --------------------------------------------------------------------------------------------
# Scores and draws


def _tables() -> PriorTables:
    return PriorTables.of(CARDINALITIES, expected_length=LAMBDA, expected_cardinality=ETA)


@pytest.mark.parametrize("longest", [1, 2, 3, 5, 7])
def test_every_list_is_scored_like_the_definition(longest: int) -> None:
    scored = score_rule_lists(
        antecedent_words(_store(), ANTECEDENTS),
        _tables(),
        alpha=ALPHA,
        max_rules=longest,
        progress=no_progress,
    )
    lists = [tuple(scored.rules_at(i)) for i in range(len(scored.log_likelihood))]
    assert sorted(lists) == sorted(_lists(len(ANTECEDENTS), min(longest, len(ANTECEDENTS))))
    assert len(lists) == exact_rule_list_count(len(ANTECEDENTS), longest)
    for index, rules in enumerate(lists):
        assert scored.log_likelihood[index] == pytest.approx(_likelihood(rules), abs=1e-9)
        assert scored.log_prior[index] == pytest.approx(_prior(rules), abs=1e-9)


@pytest.mark.parametrize("words", [1, 3, 130])
def test_the_compiled_count_is_the_popcount_of_every_extension(words: int) -> None:
    """:func:`uncaptured_counts` against numpy's popcount of the (E, 2, W) intersections, on
    random words (every bit pattern, the top bit included), for all, some and no extensions."""
    rng = np.random.default_rng(words)
    top = np.iinfo(np.uint64).max
    remaining = rng.integers(0, top, size=(2, words), dtype=np.uint64, endpoint=True)
    outside = rng.integers(0, top, size=(9, words), dtype=np.uint64, endpoint=True)
    for extensions in (np.arange(9), np.asarray([8, 0, 3]), np.arange(0)):
        chosen = extensions.astype(np.int64)
        expected = np.bitwise_count(remaining[np.newaxis] & outside[chosen][:, np.newaxis])
        counts = uncaptured_counts(remaining, outside, chosen)
        assert counts.shape == (len(chosen), 2)
        assert np.array_equal(counts, expected.sum(axis=-1, dtype=np.int64))


def _draws(
    epsilon: float, target: RuleListTarget, seed: int, *, n_max: int = N_MAX
) -> Counter[tuple[int, ...]]:
    """DRAWS independent draws over D_2: one full run of the sampler, then the scores reused
    (they are deterministic) for the rest of the draws."""
    words = antecedent_words(_store(), ANTECEDENTS)
    rng = seeded_generator(seed)
    first = sample_rule_list_exact(
        words,
        _tables(),
        alpha=ALPHA,
        epsilon=epsilon,
        n_max=n_max,
        max_rules=2,
        rng=rng,
        progress=no_progress,
        target=target,
    )
    scored = score_rule_lists(words, _tables(), alpha=ALPHA, max_rules=2, progress=no_progress)
    rest = (
        draw_rule_list(scored, alpha=ALPHA, epsilon=epsilon, n_max=n_max, rng=rng, target=target)
        for _ in range(DRAWS - 1)
    )
    return Counter([tuple(first), *(tuple(rules) for rules in rest)])


@pytest.mark.parametrize(("epsilon", "target"), [(4.0, "likelihood"), (6.0, "posterior")])
def test_the_sampler_draws_the_exact_target(epsilon: float, target: RuleListTarget) -> None:
    exact = _target(epsilon, 2, target)
    assert len(exact) == 26
    assert _p_value(_draws(epsilon, target, seed=11), exact) > SEEDED_P_VALUE


def test_the_test_rejects_a_sampler_without_the_prior(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``likelihood`` target with its base measure dropped (ln p = 0 for every list)."""

    def flat(rules: Sequence[int], tables: PriorTables) -> float:
        del rules, tables
        return 0.0

    monkeypatch.setattr(rule_list_exact, "log_prior", flat)
    exact = _target(4.0, 2, "likelihood")
    assert _p_value(_draws(4.0, "likelihood", seed=11), exact) < SEEDED_P_VALUE


def test_the_test_rejects_a_wrong_coefficient() -> None:
    """The ``posterior`` target at Δu/2 (the coefficient doubled): run at ε, compared with ε."""
    exact = _target(6.0, 2, "posterior")
    # Δu halves when N_max − 1 + α0 + α1 = sqrt(…) of the real one: run with that N_max.
    halved = round(math.sqrt((N_MAX - 1 + sum(ALPHA)) * min(ALPHA)) + 1 - sum(ALPHA))
    assert _p_value(_draws(6.0, "posterior", seed=11, n_max=halved), exact) < SEEDED_P_VALUE


# --------------------------------------------------------------------------------------------
# Public count, work cap and padding budget


def test_the_public_count_and_work() -> None:
    assert exact_rule_list_count(5, 2) == 1 + 5 + 20
    assert exact_rule_list_count(5, 3) == 1 + 5 + 20 + 60
    assert exact_rule_list_count(2, 4) == 1 + 2 + 2  # no list is longer than A
    assert exact_rule_list_work(5, 2, 65) == 26 * (2 + EXACT_LIST_OVERHEAD_WORDS)  # ⌈65/64⌉


def test_a_request_above_the_cap_is_refused_before_any_charge() -> None:
    spec = CATALOG["brl.sample_rule_list_exact"]
    many = [
        Antecedent(items=[_literal(name, negated)])
        for name in ("a", "b", "c")
        for negated in (False, True)
    ]
    request = SampleRuleListExactRequest(antecedents=many, epsilon=1.0, max_rules=4)
    spec.validate(request, METADATA)  # 1 + 6 + 30 + 120 + 360 = 517 lists of one word: fine
    huge = METADATA.model_copy(update={"n_max": 64 * MAX_EXACT_RULE_LIST_WORK // 517})
    with pytest.raises(ValueError, match="lower max_rules or the number of antecedents"):
        spec.validate(request, huge)


def test_the_operation_releases_a_list_and_the_public_count() -> None:
    spec = CATALOG["brl.sample_rule_list_exact"]
    request = SampleRuleListExactRequest(antecedents=list(ANTECEDENTS), epsilon=1.0, max_rules=2)
    spec.validate(request, METADATA)
    result = spec.run(_store(), request, Epsilon.charge(1.0), seeded_generator(3), no_progress)
    assert result["lists"] == 26
    assert result["max_rules"] == 2
    assert len(result["rules"]) <= 2
    assert all(rule in ANTECEDENTS for rule in result["rules"])


def test_the_padding_budget_grows_with_the_public_work() -> None:
    def work(rules: int, max_rules: int, n_max: int) -> float:
        request = {"antecedents": list(ANTECEDENTS)[:rules], "max_rules": max_rules}
        metadata = METADATA.model_copy(update={"n_max": n_max})
        return operation_work("brl.sample_rule_list_exact", request, metadata)

    assert work(5, 2, 100) < work(5, 3, 100) < work(5, 3, 100_000)
    assert work(4, 3, 100) < work(5, 3, 100)
