"""The DP Bayesian rule-list operations (ALGORITHMS.md §5): the antecedent item catalog (§5.1),
the label classes, per-class top-K antecedents (§5.2) against brute force, exact capture counts
of point estimates (§5.4), the sampler operation, and validation before any charge."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from pydantic import BaseModel, ValidationError

from dpmine.wire import (
    MIN_RULE_LIST_ITERATIONS,
    Antecedent,
    BooleanAttribute,
    BoolLiteral,
    CatLiteral,
    DatasetMetadata,
    LabelSpec,
    NumLiteral,
    PointEstimatesRequest,
    RuleListAntecedentsRequest,
    SampleRuleListExactRequest,
    SampleRuleListRequest,
)
from dpmine.wire.rule_lists import numeric_bin_edges, numeric_bins_of
from dpmine_server.data.columns import (
    BooleanColumn,
    CategoricalColumn,
    Column,
    ColumnStore,
    NumericColumn,
)
from dpmine_server.data.itemsets import TransactionIndex, row_subset_index, rule_list_catalog
from dpmine_server.dp.mechanisms import count_noise, laplace_scale
from dpmine_server.dp.rng import seeded_generator
from dpmine_server.operations import CATALOG, rule_lists
from dpmine_server.operations.base import Progress, no_progress
from dpmine_server.operations.rule_lists import class_rows, exact_capture_counts
from dpmine_server.services.timing import operation_work
from support.itemsets import mine_all

# --------------------------------------------------------------------------------------------
# A toy table: smoker (Boolean), colour (categorical), age (numeric, grid), weight (numeric,
# equal-width bins) and a three-class label "risk" whose positive class is "high".

COLOURS = ("red", "green", "blue")
RISKS = ("low", "mid", "high")
_DATA = np.random.default_rng(20261124)
ROWS = 300
SMOKER = np.where(_DATA.random(ROWS) < 0.1, -1, (_DATA.random(ROWS) < 0.35).astype(int))
COLOUR = np.where(_DATA.random(ROWS) < 0.1, -1, _DATA.choice(3, ROWS, p=[0.5, 0.3, 0.2]))
AGE = np.where(_DATA.random(ROWS) < 0.1, np.nan, _DATA.uniform(0, 100, ROWS).round())
WEIGHT = _DATA.uniform(40, 120, ROWS)
_HIGH = (SMOKER == 1) | (AGE > 60)
RISK = np.where(
    _DATA.random(ROWS) < 0.08, -1, np.where(_HIGH, 2, _DATA.integers(0, 2, ROWS))
).astype(np.int32)

METADATA = DatasetMetadata.model_validate(
    {
        "kind": "table",
        "n_max": 1000,
        "attributes": [
            {"type": "boolean", "name": "smoker"},
            {"type": "categorical", "name": "colour", "categories": list(COLOURS)},
            {"type": "numeric", "name": "age", "lo": 0, "hi": 100, "grid": [0, 30, 60, 100]},
            {"type": "numeric", "name": "weight", "lo": 40, "hi": 120},
            {"type": "categorical", "name": "risk", "categories": list(RISKS)},
        ],
        "label": {"attribute": "risk", "positive": "high"},
    }
)


def _store(metadata: DatasetMetadata = METADATA) -> ColumnStore:
    columns: dict[str, Column] = {
        "smoker": BooleanColumn.from_arrays("smoker", SMOKER == 1, SMOKER >= 0),
        "colour": CategoricalColumn("colour", COLOURS, COLOUR.astype(np.int32)),
        "age": NumericColumn.from_values("age", AGE, lo=0.0, hi=100.0),
        "weight": NumericColumn.from_values("weight", WEIGHT, lo=40.0, hi=120.0),
        "risk": CategoricalColumn("risk", RISKS, RISK),
    }
    return ColumnStore(metadata, n_rows=ROWS, columns=columns)


def _metadata(**changes: Any) -> DatasetMetadata:
    return DatasetMetadata.model_validate({**METADATA.model_dump(), **changes})


# --------------------------------------------------------------------------------------------
# Brute force on the raw arrays


def _holds(literal: BoolLiteral | CatLiteral | NumLiteral, row: int) -> bool:
    """One literal on one row (false on a missing value, §1.1)."""
    if isinstance(literal, BoolLiteral):
        return bool(SMOKER[row] >= 0 and (SMOKER[row] == 1) != literal.negated)
    if isinstance(literal, CatLiteral):
        return bool(COLOUR[row] >= 0 and COLOURS[COLOUR[row]] == literal.category)
    value = float({"age": AGE, "weight": WEIGHT}[literal.attribute][row])
    if math.isnan(value):
        return False
    low = -math.inf if literal.lower is None else literal.lower
    high = math.inf if literal.upper is None else literal.upper
    return low <= value <= high


def _satisfies(antecedent: Antecedent, row: int) -> bool:
    return all(_holds(item, row) for item in antecedent.items)


def _label(row: int) -> int | None:
    """1 positive, 0 negative, None missing."""
    return None if RISK[row] < 0 else int(RISKS[RISK[row]] == "high")


# --------------------------------------------------------------------------------------------
# Catalog (§5.1)


def test_numeric_bins_come_from_the_grid_or_equal_width() -> None:
    age, weight = METADATA.attribute("age"), METADATA.attribute("weight")
    assert age.type == "numeric"
    assert weight.type == "numeric"
    # Grid values on the range ends are not cut-points.
    assert numeric_bin_edges(age, 4) == [0.0, 30.0, 60.0, 100.0]
    assert numeric_bin_edges(weight, 4) == [40.0, 60.0, 80.0, 100.0, 120.0]
    assert numeric_bin_edges(weight, 2) == [40.0, 80.0, 120.0]


def test_catalog_items_groups_and_the_excluded_label() -> None:
    catalog = rule_list_catalog(METADATA, numeric_bins=2)
    literals = [literal.model_dump(exclude={"kind"}) for literal in catalog.literals]
    smoker = [
        {"attribute": "smoker", "negated": False},
        {"attribute": "smoker", "negated": True},
    ]
    colours = [{"attribute": "colour", "category": c, "negated": False} for c in COLOURS]
    # Disjoint bins [lo, c_1), [c_1, c_2), …, [c_k, hi]: a half-open bin's upper bound is the
    # largest float below its cut-point.

    def below(value: float) -> float:
        return math.nextafter(value, -math.inf)

    ages = [
        {"attribute": "age", "lower": low, "upper": high, "negated": False}
        for low, high in ((0.0, below(30.0)), (30.0, below(60.0)), (60.0, 100.0))
    ]
    weights = [
        {"attribute": "weight", "lower": low, "upper": high, "negated": False}
        for low, high in ((40.0, below(80.0)), (80.0, 120.0))
    ]
    assert literals == smoker + colours + ages + weights
    # Every present value, cut-points included, is in exactly one bin of its attribute.
    age = METADATA.attribute("age")
    assert age.type == "numeric"
    for value in (0.0, 29.5, 30.0, 59.99, 60.0, 100.0):
        assert sum(low <= value <= high for low, high in numeric_bins_of(age, 4)) == 1
    assert all(literal.attribute != "risk" for literal in catalog.literals)
    assert catalog.groups == ((0, 1), (2, 3, 4), (5, 6, 7), (8, 9))
    assert len(set(catalog.names)) == len(catalog.names)
    # e_2 of the group sizes (2, 3, 3, 2): pairs with at most one item per attribute.
    assert catalog.universe_size([1, 2]) == 10 + (2 * 3 + 2 * 3 + 2 * 2 + 3 * 3 + 3 * 2 + 3 * 2)


def test_classes_partition_the_labelled_rows() -> None:
    negative, positive = class_rows(_store())
    labels = [_label(row) for row in range(ROWS)]
    assert positive.to_indices().tolist() == [r for r in range(ROWS) if labels[r] == 1]
    assert negative.to_indices().tolist() == [r for r in range(ROWS) if labels[r] == 0]


@pytest.mark.parametrize(("positive", "flip"), [("yes", False), ("0", True), ("FALSE", True)])
def test_a_boolean_label_takes_a_boolean_token(positive: str, flip: bool) -> None:
    metadata = _metadata(label={"attribute": "smoker", "positive": positive})
    negative, positive_rows = class_rows(_store(metadata))
    true_rows = [r for r in range(ROWS) if SMOKER[r] == 1]
    false_rows = [r for r in range(ROWS) if SMOKER[r] == 0]
    expected = (true_rows, false_rows) if flip else (false_rows, true_rows)
    assert (negative.to_indices().tolist(), positive_rows.to_indices().tolist()) == expected


def test_a_row_subset_index_counts_and_mines_only_its_rows() -> None:
    store = _store()
    catalog = rule_list_catalog(METADATA, numeric_bins=2)
    _negative, positive = class_rows(store)
    index = row_subset_index(store, catalog, positive, key=("test", "positive"))
    assert isinstance(index, TransactionIndex)
    rows = positive.to_indices().tolist()
    antecedents = {
        itemset: Antecedent(items=[catalog.literals[item] for item in itemset])
        for length in (1, 2)
        for itemset in itertools.combinations(range(len(catalog.names)), length)
        if len({catalog.group_of[item] for item in itemset}) == length
    }
    brute = {
        itemset: sum(_satisfies(antecedent, row) for row in rows)
        for itemset, antecedent in antecedents.items()
    }
    assert {itemset: index.count(itemset) for itemset in brute} == brute
    mined = mine_all(index, 5, [1, 2])
    assert mined == {itemset: count for itemset, count in brute.items() if count >= 5}


# --------------------------------------------------------------------------------------------
# brl.antecedents (§5.2)


def _top(rows: list[int], length: int, k: int) -> list[tuple[int, ...]]:
    catalog = rule_list_catalog(METADATA, numeric_bins=2)
    counts = Counter(
        {
            itemset: sum(
                _satisfies(Antecedent(items=[catalog.literals[i] for i in itemset]), r)
                for r in rows
            )
            for itemset in itertools.combinations(range(len(catalog.names)), length)
            if len({catalog.group_of[i] for i in itemset}) == length
        }
    )
    ranked = counts.most_common()
    assert ranked[k - 1][1] > ranked[k][1], "the toy data must not tie at the K-th count"
    return [itemset for itemset, _ in ranked[:k]]


def _items(antecedent: Antecedent) -> tuple[str, ...]:
    return tuple(sorted(item.model_dump_json() for item in antecedent.items))


def test_antecedents_are_each_class_top_k_in_order_at_a_huge_epsilon() -> None:
    spec = CATALOG["brl.antecedents"]
    request = RuleListAntecedentsRequest(
        k_per_class=4, max_length=1, epsilon=500.0, numeric_bins=2, rho=0.5
    )
    spec.validate(request, METADATA)
    fields = spec.run(_store(), request, spec.cost(request), seeded_generator(1), no_progress)
    catalog = rule_list_catalog(METADATA, numeric_bins=2)
    by_class = {entry["label"]: entry["antecedents"] for entry in fields["by_class"]}
    assert [entry["label"] for entry in fields["by_class"]] == ["positive", "negative"]
    for name, value in (("positive", 1), ("negative", 0)):
        rows = [r for r in range(ROWS) if _label(r) == value]
        expected = [
            _items(Antecedent(items=[catalog.literals[i] for i in itemset]))
            for itemset in _top(rows, 1, 4)
        ]
        assert [_items(a) for a in by_class[name]] == expected, name
    # The classes see different data: their rankings differ.
    assert [_items(a) for a in by_class["positive"]] != [_items(a) for a in by_class["negative"]]


def test_antecedents_hold_one_item_per_attribute_and_never_the_label() -> None:
    spec = CATALOG["brl.antecedents"]
    request = RuleListAntecedentsRequest(k_per_class=20, max_length=3, epsilon=1.0)
    spec.validate(request, METADATA)
    fields = spec.run(_store(), request, spec.cost(request), seeded_generator(2), no_progress)
    response = spec.response_model.model_validate({**fields, "receipt": _receipt()})
    for entry in response.by_class:
        assert len(entry.antecedents) == 20
        assert len({_items(a) for a in entry.antecedents}) == 20
        for antecedent in entry.antecedents:
            names = [item.attribute for item in antecedent.items]
            assert len(set(names)) == len(names)
            assert "risk" not in names


def _receipt() -> dict[str, Any]:
    return {
        "ledger_entry_id": 1,
        "dataset_id": "toy",
        "operation": "brl.antecedents",
        "epsilon": 1.0,
        "epsilon_exact": "1",
        "guarantee": "pure",
        "remaining_epsilon": 0.0,
        "created_at": "2026-01-01T00:00:00Z",
    }


# --------------------------------------------------------------------------------------------
# brl.point_estimates (§5.4) and brl.sample_rule_list (§5.3)

RULES = [
    Antecedent(items=[BoolLiteral(attribute="smoker")]),
    Antecedent(items=[NumLiteral(attribute="age", lower=60.0, upper=100.0)]),  # 60 included
    Antecedent(
        items=[
            CatLiteral(attribute="colour", category="red"),
            BoolLiteral(attribute="smoker", negated=True),
        ]
    ),
]


def _brute_captures(rules: list[Antecedent]) -> tuple[list[int], list[int]]:
    negative, positive = [0] * (len(rules) + 1), [0] * (len(rules) + 1)
    for row in range(ROWS):
        label = _label(row)
        if label is None:
            continue
        slot = next((j for j, a in enumerate(rules) if _satisfies(a, row)), len(rules))
        (positive if label else negative)[slot] += 1
    return negative, positive


def test_exact_capture_counts_route_each_row_to_its_first_rule() -> None:
    for length in range(len(RULES) + 1):
        rules = RULES[:length]
        captures = exact_capture_counts(_store(), rules)
        assert (captures[:, 0].tolist(), captures[:, 1].tolist()) == _brute_captures(rules)


def test_point_estimates_release_the_capture_counts_plus_noise() -> None:
    # At ε = 50 the discrete Laplace noise is non-zero with probability ≈ 4e-22 per count, so
    # the release equals the exact counts unless the kernel counts wrongly.
    spec = CATALOG["brl.point_estimates"]
    request = PointEstimatesRequest(rules=RULES, epsilon=50.0)
    spec.validate(request, METADATA)
    fields = spec.run(_store(), request, spec.cost(request), seeded_generator(3), no_progress)
    negative, positive = _brute_captures(RULES)
    assert fields["negative_counts"] == negative
    assert fields["positive_counts"] == positive
    assert fields["noise_scale"] == laplace_scale(epsilon=50.0, sensitivity=1)
    empty = spec.run(
        _store(),
        PointEstimatesRequest(epsilon=50.0),
        spec.cost(request),
        seeded_generator(3),
        no_progress,
    )
    assert (empty["negative_counts"], empty["positive_counts"]) == _brute_captures([])


def test_point_estimates_are_noisy_at_a_small_epsilon() -> None:
    spec = CATALOG["brl.point_estimates"]
    request = PointEstimatesRequest(rules=RULES, epsilon=0.5)
    fields = spec.run(_store(), request, spec.cost(request), seeded_generator(3), no_progress)
    negative, positive = _brute_captures(RULES)
    assert fields["negative_counts"] + fields["positive_counts"] != negative + positive
    assert fields["noise_scale"] == pytest.approx(2.0)


def test_point_estimates_on_a_zcdp_dataset_are_discrete_gaussian() -> None:
    """The capture counts partition the labelled rows (Δ₂ = 1): under the executor's zCDP
    choice σ = 1/ε, reported with the counts; at ε = 50 (σ = 0.02) the noise is 0 with
    probability 1 − 2e-542 per count, so the counts are exact unless the kernel miscounts."""
    spec = CATALOG["brl.point_estimates"]
    request = PointEstimatesRequest(rules=RULES, epsilon=50.0)
    with count_noise("discrete_gaussian"):
        fields = spec.run(_store(), request, spec.cost(request), seeded_generator(3), no_progress)
    assert fields["noise"] == {"kind": "discrete_gaussian", "scale": 1 / 50.0}
    assert fields["noise_scale"] == 1 / 50.0
    assert (fields["negative_counts"], fields["positive_counts"]) == _brute_captures(RULES)
    plain = spec.run(_store(), request, spec.cost(request), seeded_generator(3), no_progress)
    assert plain["noise"] == {"kind": "laplace", "scale": plain["noise_scale"]}


def test_the_sampler_releases_a_list_of_the_given_antecedents() -> None:
    spec = CATALOG["brl.sample_rule_list"]
    assert spec.guarantee == "approximate"
    assert spec.mode == "job"
    request = SampleRuleListRequest(antecedents=RULES, epsilon=1.0, iterations=1500)
    spec.validate(request, METADATA)
    reports: list[float] = []
    fields = spec.run(
        _store(),
        request,
        spec.cost(request),
        seeded_generator(4),
        _collect(reports),
    )
    assert set(fields) == {"rules", "iterations"}
    assert fields["iterations"] == 1500
    keys = [a.model_dump_json() for a in fields["rules"]]
    assert len(set(keys)) == len(keys)
    assert set(keys) <= {a.model_dump_json() for a in RULES}
    assert len(reports) == 100
    assert reports[-1] == 1.0


# --------------------------------------------------------------------------------------------
# Validation: public metadata only, before any charge


def _error(validate: Callable[[], None]) -> str:
    with pytest.raises(ValueError) as caught:  # noqa: PT011  # every message is checked below
        validate()
    return str(caught.value)


def test_the_sampler_request_has_a_public_minimum_and_no_analyst_start() -> None:
    """§5.3, ALGORITHMS.md §6 #16: the wire model refuses a chain shorter than the public
    minimum and any start list, saying why, before the request reaches a charge."""
    assert SampleRuleListRequest(antecedents=RULES, epsilon=1.0).iterations == 1000
    assert MIN_RULE_LIST_ITERATIONS == 1000
    body = {"antecedents": [a.model_dump() for a in RULES], "epsilon": 1.0}
    SampleRuleListRequest.model_validate({**body, "iterations": MIN_RULE_LIST_ITERATIONS})
    for short in (1, 2, MIN_RULE_LIST_ITERATIONS - 1):
        with pytest.raises(ValidationError, match=r"at least 1000, got \d+: an MCMC release"):
            SampleRuleListRequest.model_validate({**body, "iterations": short})
    for start in ([0], [1, 0], []):  # the old request shape, whatever the start
        with pytest.raises(ValidationError, match=r"'initial' is no longer accepted.*public start"):
            SampleRuleListRequest.model_validate({**body, "initial": start})
    # What earlier clients sent when they chose no start: nothing is chosen, so it parses.
    parsed = SampleRuleListRequest.model_validate({**body, "initial": None})
    assert "initial" not in parsed.model_dump()
    schema = SampleRuleListRequest.model_json_schema()["properties"]["iterations"]
    assert schema["minimum"] == MIN_RULE_LIST_ITERATIONS  # the OpenAPI document says so too


def test_validation_says_how_to_declare_a_missing_label() -> None:
    unlabelled = _metadata(label=None)
    requests: list[tuple[str, BaseModel]] = [
        ("brl.antecedents", RuleListAntecedentsRequest(epsilon=1.0)),
        ("brl.sample_rule_list", SampleRuleListRequest(antecedents=RULES, epsilon=1.0)),
        (
            "brl.sample_rule_list_exact",
            SampleRuleListExactRequest(antecedents=RULES, epsilon=1.0),
        ),
        ("brl.point_estimates", PointEstimatesRequest(rules=RULES, epsilon=1.0)),
    ]
    for name, request in requests:
        with pytest.raises(ValueError) as caught:  # noqa: PT011  # the message is checked below
            CATALOG[name].validate(request, unlabelled)
        message = str(caught.value)
        assert '`label: {"attribute"' in message, message
        assert "positive" in message
        assert "more than two classes" in message


def test_validation_refuses_a_non_boolean_positive_value_of_a_boolean_label() -> None:
    metadata = _metadata(label={"attribute": "smoker", "positive": "maybe"})
    request = PointEstimatesRequest(epsilon=1.0)
    assert "Boolean token" in _error(
        lambda: CATALOG["brl.point_estimates"].validate(request, metadata)
    )


@pytest.mark.parametrize(
    ("literal", "message"),
    [
        (CatLiteral(attribute="risk", category="low"), "label attribute"),
        (BoolLiteral(attribute="height"), "unknown attribute 'height'"),
        (CatLiteral(attribute="colour", category="pink"), "not a declared category"),
        (BoolLiteral(attribute="colour"), "does not apply"),
        (NumLiteral(attribute="smoker", upper=1.0), "does not apply"),
        (CatLiteral(attribute="age", category="old"), "does not apply"),
    ],
)
def test_validation_checks_every_antecedent_literal(
    literal: BoolLiteral | CatLiteral | NumLiteral, message: str
) -> None:
    rules = [RULES[0], Antecedent(items=[literal])]
    sample = SampleRuleListRequest(antecedents=rules, epsilon=1.0)
    estimates = PointEstimatesRequest(rules=rules, epsilon=1.0)
    exact = SampleRuleListExactRequest(antecedents=rules, epsilon=1.0)
    assert message in _error(lambda: CATALOG["brl.sample_rule_list"].validate(sample, METADATA))
    assert message in _error(
        lambda: CATALOG["brl.sample_rule_list_exact"].validate(exact, METADATA)
    )
    assert message in _error(lambda: CATALOG["brl.point_estimates"].validate(estimates, METADATA))


def test_validation_of_the_antecedent_universe(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = CATALOG["brl.antecedents"]
    # 10 items over 4 attributes (numeric_bins = 2): 10 singletons.
    too_many = RuleListAntecedentsRequest(k_per_class=11, max_length=1, epsilon=1.0, numeric_bins=2)
    assert "k_per_class = 11 exceeds the 10 possible antecedents" in _error(
        lambda: spec.validate(too_many, METADATA)
    )
    spec.validate(too_many.model_copy(update={"k_per_class": 10}), METADATA)
    only_label = DatasetMetadata.model_validate(
        {
            "kind": "table",
            "n_max": 10,
            "attributes": [{"type": "boolean", "name": "t"}, {"type": "boolean", "name": "u"}],
            "label": {"attribute": "t", "positive": "1"},
        }
    )
    long = RuleListAntecedentsRequest(k_per_class=1, max_length=2, epsilon=1.0)
    assert "lower max_length" in _error(lambda: spec.validate(long, only_label))
    monkeypatch.setattr(rule_lists, "MAX_UNIVERSE", 46)  # the universe holds 47
    wide = RuleListAntecedentsRequest(k_per_class=1, max_length=2, epsilon=1.0, numeric_bins=2)
    assert "too large" in _error(lambda: spec.validate(wide, METADATA))


def test_transaction_datasets_are_not_accepted() -> None:
    for name in (
        "brl.antecedents",
        "brl.sample_rule_list",
        "brl.sample_rule_list_exact",
        "brl.point_estimates",
    ):
        assert CATALOG[name].dataset_kinds == frozenset({"table", "views"})


def _collect(reports: list[float]) -> Progress:
    """A progress sink that records the reported fractions."""

    def report(fraction: float, message: str = "") -> None:
        del message
        reports.append(fraction)

    return report


def test_antecedents_past_the_work_cap_are_refused_from_the_metadata() -> None:
    """120 Boolean attributes on a million rows: antecedents of up to 3 items would mean
    n_max · Σ C(120, ℓ) ≈ 3e11 scan steps, refused by validation (before the charge); pairs
    are within the cap, and their padding budget is the plan's priced bound for two classes."""
    attributes = [BooleanAttribute(name=f"a{i}") for i in range(120)]
    metadata = DatasetMetadata(
        kind="table",
        n_max=1_000_000,
        attributes=[*attributes, BooleanAttribute(name="y")],
        label=LabelSpec(attribute="y", positive="1"),
    )
    spec = CATALOG["brl.antecedents"]
    with pytest.raises(ValueError, match="shorter itemsets"):
        spec.validate(RuleListAntecedentsRequest(max_length=3, epsilon=1.0), metadata)
    pairs = RuleListAntecedentsRequest(max_length=2, epsilon=1.0)
    spec.validate(pairs, metadata)
    plan = rule_lists.antecedents_plan(pairs, metadata)
    assert plan.mining.steps == 1_000_000 * (120 + math.comb(120, 2) + 120)
    budget = operation_work("brl.antecedents", pairs.model_dump(mode="json"), metadata)
    assert budget == plan.seconds(classes=2)


# --------------------------------------------------------------------------------------------
# Columns an analyst allows (issue #21 item 4)


def test_columns_restrict_the_antecedent_universe_and_the_selection() -> None:
    """A request's ``columns`` is the public set of attributes the selection draws from: every
    selected antecedent uses only those, the universe is theirs, and K is checked against it."""
    spec = CATALOG["brl.antecedents"]
    allowed = ["smoker", "age"]
    catalog = rule_list_catalog(METADATA, numeric_bins=2, columns=allowed)
    assert [item.attribute for item in catalog.literals] == ["smoker", "smoker"] + ["age"] * 3
    # smoker: 2 items, age: 3 grid bins; pairs 2·3.
    assert catalog.universe_size([1, 2]) == 5 + 6
    request = RuleListAntecedentsRequest(
        k_per_class=11, max_length=2, epsilon=500.0, numeric_bins=2, rho=0.5, columns=allowed
    )
    spec.validate(request, METADATA)
    fields = spec.run(_store(), request, spec.cost(request), seeded_generator(5), no_progress)
    response = spec.response_model.model_validate({**fields, "receipt": _receipt()})
    for entry in response.by_class:
        assert len(entry.antecedents) == 11  # the whole restricted universe, nothing else
        assert {item.attribute for a in entry.antecedents for item in a.items} == set(allowed)
    too_many = request.model_copy(update={"k_per_class": 12})
    assert "exceeds the 11 possible antecedents" in _error(
        lambda: spec.validate(too_many, METADATA)
    )
    long = request.model_copy(update={"max_length": 3, "k_per_class": 1})
    assert "among the allowed columns" in _error(lambda: spec.validate(long, METADATA))


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        (["smoker", "height"], "unknown column(s) ['height']; the dataset's columns are"),
        (["risk", "age"], "'risk' is the label"),
    ],
)
def test_columns_are_checked_against_the_schema_before_any_charge(
    columns: list[str], message: str
) -> None:
    request = RuleListAntecedentsRequest(epsilon=1.0, columns=columns)
    assert message in _error(lambda: CATALOG["brl.antecedents"].validate(request, METADATA))


def test_a_column_named_twice_is_refused_by_the_wire_model() -> None:
    with pytest.raises(ValidationError, match=r"columns lists \['age'\] more than once"):
        RuleListAntecedentsRequest.model_validate(
            {"epsilon": 1.0, "columns": ["age", "smoker", "age"]}
        )
