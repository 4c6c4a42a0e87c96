"""Client logic of DP Bayesian rule lists (``dpmine.rule_lists``, ALGORITHMS.md §5), without a
server: the antecedent union (§5.2), the clamped point estimates (§5.4), local evaluation of the
literals on pandas, mapping and numpy rows (missing values, closed numeric bins, clipping to the
public range, Boolean cells), the if / else-if rendering, scikit-learn parameters, the ε split
and the planned calls, and the JSON round trip of a fitted model. The remote fit is tested over
HTTP in ``tests/e2e/test_rule_lists_http.py``.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import dpmine
from dpmine.miners import NotMinedError
from dpmine.queries import parse_query
from dpmine.rule_lists import (
    DPBayesianRuleList,
    RuleList,
    antecedent_display,
    antecedent_text,
    point_estimate,
    union_antecedents,
)
from dpmine.wire import (
    MAX_EXACT_RULE_LIST_WORK,
    MIN_RULE_LIST_ITERATIONS,
    BooleanAttribute,
    CategoricalAttribute,
    DatasetInfo,
    DatasetMetadata,
    LabelSpec,
    NumericAttribute,
    PointEstimatesRequest,
    Receipt,
    RuleListAntecedentsRequest,
    SampleRuleListExactRequest,
    SampleRuleListRequest,
    exact_rule_list_work,
)
from dpmine.wire.rule_lists import (
    Antecedent,
    ClassAntecedents,
    antecedent_universe,
    every_antecedent,
)

SCHEMA = DatasetMetadata(
    kind="table",
    n_max=1_000,
    attributes=[
        NumericAttribute(name="age", lo=0.0, hi=100.0),
        BooleanAttribute(name="smoker"),
        CategoricalAttribute(name="region", categories=["north", "south", "east", "west"]),
        CategoricalAttribute(name="sick", categories=["no", "yes"]),
    ],
    label=LabelSpec(attribute="sick", positive="yes"),
)


def antecedent(text: str) -> Antecedent:
    """An antecedent from query text: one literal or a conjunction of literals."""
    expr = parse_query(text)
    items = getattr(expr, "terms", [expr])
    return Antecedent.model_validate({"items": [item.model_dump() for item in items]})


#: if [0 <= age <= 25] & [smoker] / else if [region = north] / else if ![smoker] / else.
RULES = [
    antecedent("[0.0 <= age <= 25.0] & [smoker]"),
    antecedent("[region = north]"),
    antecedent("![smoker]"),
]
#: Noisy counts (negative, positive) of the three rules and the default rule.
NEGATIVE = [8, 30, -3, 50]
POSITIVE = [2, -4, 7, 10]
#: PE_j = (max(Ñ1,0) + 1)/(max(Ñ0,0) + max(Ñ1,0) + 2) with α = (1, 1).
ESTIMATES = [3 / 12, 1 / 32, 8 / 9, 11 / 62]


def fitted_list(alpha: tuple[float, float] = (1.0, 1.0)) -> RuleList:
    return RuleList.from_counts(
        RULES, NEGATIVE, POSITIVE, noise_scale=3.0, alpha=alpha, schema=SCHEMA, dataset_id="toy"
    )


def receipt(operation: str, epsilon: str) -> Receipt:
    return Receipt(
        ledger_entry_id=1,
        dataset_id="toy",
        operation=operation,
        epsilon=float(epsilon),
        epsilon_exact=epsilon,
        guarantee="approximate" if operation == "brl.sample_rule_list" else "pure",
        remaining_epsilon=1.0,
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
    )


def fitted_estimator() -> DPBayesianRuleList:
    """An estimator as ``fit`` leaves it (model, antecedent set and receipts), built offline."""
    model = DPBayesianRuleList(epsilon=0.9, k_per_class=5, iterations=1500)
    payload = {
        "model": fitted_list().to_dict(),
        "params": model.get_params() | {"alpha": [1.0, 1.0]},
        "antecedents": [a.model_dump(mode="json") for a in RULES],
        "receipts": [
            receipt(name, "0.3").model_dump(mode="json")
            for name in ("brl.antecedents", "brl.sample_rule_list", "brl.point_estimates")
        ],
    }
    return DPBayesianRuleList.from_dict(payload)


# --------------------------------------------------------------------------------------------
# Point estimates and the antecedent set


def test_point_estimates_clamp_negative_noisy_counts_at_zero() -> None:
    assert point_estimate(8, 2) == pytest.approx(3 / 12)
    assert point_estimate(30, -4) == pytest.approx(1 / 32)  # Ñ1 < 0 counts as 0
    assert point_estimate(-3, 7) == pytest.approx(8 / 9)  # Ñ0 < 0 counts as 0
    assert point_estimate(-5, -9) == pytest.approx(1 / 2)  # both clamped: the prior mean
    assert point_estimate(-5, -9, (3.0, 1.0)) == pytest.approx(1 / 4)
    assert point_estimate(6, 2, (2.0, 0.5)) == pytest.approx(2.5 / 10.5)
    listed = fitted_list()
    assert [r.estimate for r in (*listed.rules, listed.default)] == pytest.approx(ESTIMATES)
    assert all(0 <= r.estimate <= 1 for r in (*listed.rules, listed.default))


def test_union_interleaves_the_class_lists_and_drops_repeats() -> None:
    a, b, c, d = (antecedent(f"[region = {r}]") for r in ("north", "south", "east", "west"))
    both_orders = antecedent("[smoker] & [region = east]")
    reordered = antecedent("[region = east] & [smoker]")
    by_class = [
        ClassAntecedents(label="negative", antecedents=[b, a, reordered]),
        ClassAntecedents(label="positive", antecedents=[a, both_orders, c, d]),
    ]
    union = union_antecedents(by_class)
    # Rank by rank, positive first: a, b | (a), both_orders | c, (reordered) | d
    assert union == [a, b, both_orders, c, d]
    assert union_antecedents([]) == []


# --------------------------------------------------------------------------------------------
# Local evaluation


ROWS = pd.DataFrame(
    {
        "age": [20.0, 25.0, 25.0, 150.0, -3.0, np.nan, "?", 60, 30.5],
        "smoker": ["yes", "T", "no", "0", True, "1", "yes", None, "NA"],
        "region": ["east", "west", "north", "north", "south", "north", "east", "west", "?"],
    }
)
#: Rule capturing each row of ROWS (3 = default):
#: 0: age 20 & smoker -> rule 0; 1: age 25 (closed upper bound) & smoker "T" -> rule 0;
#: 2: north -> rule 1; 3: age clipped to 100, north -> rule 1; 4: age -3 clipped to 0, smoker
#: True -> rule 0; 5: age missing (rule 0 false), north -> rule 1; 6: age "?" missing, smoker,
#: east -> default; 7: smoker missing: ![smoker] is false too -> default; 8: "NA" missing,
#: region "?" missing -> default.
CAPTURED = [0, 0, 1, 1, 0, 1, 3, 3, 3]


def test_capture_on_a_dataframe_with_missing_values_bins_and_clipping() -> None:
    listed = fitted_list()
    assert listed.capture(ROWS).tolist() == CAPTURED
    proba = listed.predict_proba(ROWS)
    assert proba.shape == (len(ROWS), 2)
    assert proba[:, 1] == pytest.approx([ESTIMATES[j] for j in CAPTURED])
    assert proba.sum(axis=1) == pytest.approx(np.ones(len(ROWS)))


def test_a_negated_literal_needs_a_present_value() -> None:
    listed = RuleList.from_counts(
        [antecedent("![smoker]")], [0, 0], [10, 0], noise_scale=1.0, alpha=(1, 1), schema=SCHEMA
    )
    rows = {"smoker": ["no", "yes", "", None, float("nan"), "f"]}
    assert listed.capture(rows).tolist() == [0, 1, 1, 1, 1, 0]


def test_numeric_bounds_are_closed_and_one_sided_bounds_work() -> None:
    listed = RuleList.from_counts(
        [antecedent("[age <= 40.0]"), antecedent("[40.0 <= age]")],
        [0, 0, 0],
        [0, 0, 0],
        noise_scale=1.0,
        alpha=(1, 1),
        schema=SCHEMA,
    )
    rows = {"age": [39.99, 40, "40.0", 40.01, " 1e3 ", np.float32(12.5)]}
    assert listed.capture(rows).tolist() == [0, 0, 0, 1, 1, 0]


def test_numpy_rows_with_column_names_or_the_schema_order() -> None:
    listed = fitted_list()
    table = ROWS.to_numpy(dtype=object)
    with_names = listed.capture(table, columns=["age", "smoker", "region"])
    assert with_names.tolist() == CAPTURED
    # Without names: the schema's attributes, with or without the label column.
    assert listed.capture(table).tolist() == CAPTURED
    with_label = np.column_stack([table, np.array(["no"] * len(table), dtype=object)])
    assert listed.capture(with_label).tolist() == CAPTURED
    shuffled = table[:, [2, 0, 1]]
    assert listed.capture(shuffled, columns=["region", "age", "smoker"]).tolist() == CAPTURED
    with pytest.raises(ValueError, match="2 columns but 3 names"):
        listed.capture(table[:, :2], columns=["age", "smoker", "region"])
    with pytest.raises(ValueError, match="no column"):
        listed.capture(ROWS.drop(columns=["smoker"]))


def test_categorical_cells_read_like_the_servers_csv_loader() -> None:
    schema = DatasetMetadata(
        kind="table",
        n_max=100,
        attributes=[
            CategoricalAttribute(name="class", categories=["1", "2", "3"]),
            CategoricalAttribute(name="y", categories=["a", "b"]),
        ],
        label=LabelSpec(attribute="y", positive="b"),
    )
    listed = RuleList.from_counts(
        [antecedent("[class = 1]")], [0, 0], [5, 0], noise_scale=1.0, alpha=(1, 1), schema=schema
    )
    frame = pd.DataFrame({"class": [1, 1.0, " 1 ", "2", 3, "9"]})
    assert listed.capture(frame).tolist() == [0, 0, 0, 1, 1, 1]


def test_bad_cells_are_refused_like_on_the_server() -> None:
    listed = fitted_list()
    with pytest.raises(ValueError, match="not a Boolean"):
        listed.capture({"age": [1], "smoker": ["maybe"], "region": ["north"]})
    with pytest.raises(ValueError, match="not a finite number"):
        listed.capture({"age": ["old"], "smoker": ["yes"], "region": ["north"]})
    with pytest.raises(ValueError, match="not a finite number"):
        listed.capture({"age": [math.inf], "smoker": ["yes"], "region": ["north"]})


def test_a_literal_must_fit_its_attribute_type() -> None:
    with pytest.raises(ValueError, match="does not fit the categorical attribute 'region'"):
        RuleList.from_counts(
            [antecedent("[region]")], [0, 0], [0, 0], noise_scale=1.0, alpha=(1, 1), schema=SCHEMA
        )
    with pytest.raises(ValueError, match="need 2 counts per class"):
        RuleList.from_counts(
            [antecedent("[smoker]")], [0], [0], noise_scale=1.0, alpha=(1, 1), schema=SCHEMA
        )


def test_an_empty_list_predicts_the_default_estimate_everywhere() -> None:
    listed = RuleList.from_counts(
        [], [-2], [4], noise_scale=1.0, alpha=(1, 1), schema=SCHEMA, dataset_id="toy"
    )
    assert listed.predict_proba(ROWS)[:, 1] == pytest.approx([5 / 6] * len(ROWS))
    assert listed.to_text().splitlines()[0] == (
        "always P(sick = yes) = 0.833  "
        "(noisy: captured n̂ = 2, positives n̂₊ = 4, negatives n̂₋ = -2 read as 0)"
    )


# --------------------------------------------------------------------------------------------
# Rendering and classes


def test_the_list_renders_as_if_else_if_text_in_query_syntax() -> None:
    assert fitted_list().to_text().splitlines() == [
        "if [age <= 25.0] & [smoker] then P(sick = yes) = 0.250  "
        "(noisy: captured n̂ = 10, positives n̂₊ = 2, negatives n̂₋ = 8)",
        "else if [region = north] then P(sick = yes) = 0.031  "
        "(noisy: captured n̂ = 26, positives n̂₊ = -4 read as 0, negatives n̂₋ = 30)",
        "else if ![smoker] then P(sick = yes) = 0.889  "
        "(noisy: captured n̂ = 4, positives n̂₊ = 7, negatives n̂₋ = -3 read as 0)",
        "else P(sick = yes) = 0.177  "
        "(noisy: captured n̂ = 60, positives n̂₊ = 10, negatives n̂₋ = 50)",
        "(noisy counts of the labelled rows a rule captures: n̂₊ with sick = yes, n̂₋ with "
        "sick = no, captured n̂ = n̂₊ + n̂₋; each count has discrete Laplace noise of scale 3, "
        "so it may be negative;",
        " P = (n̂₊ + α1)/(n̂₊ + n̂₋ + α0 + α1) with a negative count read as 0, α = (1, 1); "
        "n̂ ≤ 0: too few rows to estimate; guarantee: approximate)",
    ]
    for rule in fitted_list().rules:
        assert rule.antecedent is not None
        assert antecedent_text(rule.antecedent) == rule.text
        assert antecedent(rule.text) == rule.antecedent


def test_a_zcdp_list_names_its_gaussian_noise_and_keeps_it_when_saved() -> None:
    gaussian = replace(fitted_list(), noise="discrete_gaussian")
    assert "each count has discrete Gaussian noise of σ 3, so it may be negative;" in (
        gaussian.to_text()
    )
    assert RuleList.from_dict(gaussian.to_dict()).noise == "discrete_gaussian"
    assert RuleList.from_dict(fitted_list().to_dict()).noise == "laplace"


def test_bin_bounds_print_short_and_exact() -> None:
    """A bin's upper bound is the float just below the next cut-point: rounded, it would read
    25, a value of the next bin. The display writes the strict bound instead (and leaves out a
    bound at the end of the public range), with exactly the bin's rows."""
    below = math.nextafter(25.0, 0.0)
    rule = antecedent(f"[0.0 <= age <= {below!r}]")
    assert antecedent_text(rule) == "[0.0 <= age <= 24.999999999999996]"
    assert antecedent_text(rule, digits=4) == "[0 <= age <= 25]"  # not the bin: holds 25
    assert antecedent_display(rule, SCHEMA) == "![25.0 <= age]"
    middle = antecedent(f"[25.0 <= age <= {math.nextafter(50.0, 0.0)!r}] & [smoker]")
    assert antecedent_display(middle, SCHEMA) == "[25.0 <= age] & ![50.0 <= age] & [smoker]"
    assert antecedent_display(antecedent("[50.0 <= age <= 100.0]"), SCHEMA) == "[50.0 <= age]"
    # The whole range: one bound is left to say "present".
    assert antecedent_display(antecedent("[0.0 <= age <= 100.0]"), SCHEMA) == "[age <= 100.0]"
    # tests/client/test_printed_rules_and_itemsets.py evaluates both texts on data.


def test_classes_follow_the_label_declaration() -> None:
    assert fitted_list().classes == ("no", "yes")
    many = SCHEMA.model_copy(
        update={
            "attributes": [
                *SCHEMA.attributes[:3],
                CategoricalAttribute(name="sick", categories=["no", "yes", "maybe"]),
            ]
        }
    )
    listed = RuleList.from_counts([], [0], [0], noise_scale=1.0, alpha=(1, 1), schema=many)
    assert listed.classes == ("not yes", "yes")
    estimator = fitted_estimator()
    assert estimator.classes_.tolist() == ["no", "yes"]
    predicted = estimator.predict(ROWS)
    expected = ["yes" if ESTIMATES[j] > 0.5 else "no" for j in CAPTURED]
    assert predicted.tolist() == expected
    assert estimator.predict(ROWS, threshold=0.2).tolist() == [
        "yes" if ESTIMATES[j] > 0.2 else "no" for j in CAPTURED
    ]


def test_a_rule_whose_captured_count_is_not_positive_claims_no_estimate() -> None:
    """n̂ = n̂₊ + n̂₋ ≤ 0 says only that the rule captures few rows: no P is printed as its
    estimate, only what the model predicts there (from the counts read as 0 and α), and the
    saved model says so; a rule with n̂ > 0 keeps its estimate."""
    listed = RuleList.from_counts(
        [antecedent("[smoker]"), antecedent("[region = east]")],
        [-3, 0, 40],
        [1, 0, 9],
        noise_scale=2.0,
        alpha=(1, 1),
        schema=SCHEMA,
    )
    first, second, default = listed.to_text().splitlines()[:3]
    assert first == (
        "if [smoker] then P(sick = yes): too few rows to estimate  (noisy: captured n̂ = -2, "
        "positives n̂₊ = 1, negatives n̂₋ = -3 read as 0); predicts 0.667 from the counts read "
        "as 0 and α"
    )
    assert second.startswith("else if [region = east] then P(sick = yes): too few rows")
    assert "captured n̂ = 0," in second
    assert "predicts 0.500" in second
    for line in (first, second):
        assert "P(sick = yes) =" not in line
    assert default.startswith("else P(sick = yes) = 0.196  (noisy: captured n̂ = 49,")
    assert [r.estimated for r in listed.rules] == [False, False]
    assert listed.default.estimated
    # Prediction still uses §5.4's clamped estimate; the JSON carries n̂ and the flag.
    assert [r.estimate for r in listed.rules] == pytest.approx([2 / 3, 1 / 2])
    saved = listed.to_dict()["rules"]
    assert [(r["noisy_captured"], r["estimated"]) for r in saved] == [(-2, False), (0, False)]
    assert listed.to_dict()["default"]["noisy_captured"] == 49


BOOLEAN_LABEL = [
    NumericAttribute(name="age", lo=0.0, hi=100.0),
    BooleanAttribute(name="smoker"),
    BooleanAttribute(name="died"),
]


@pytest.mark.parametrize(
    ("positive", "classes"),
    [
        ("yes", ("False", "True")),
        ("1", ("False", "True")),
        ("T", ("False", "True")),
        ("0", ("True", "False")),
        ("no", ("True", "False")),
    ],
)
def test_a_boolean_label_prints_as_false_and_true(positive: str, classes: tuple[str, str]) -> None:
    schema = DatasetMetadata(
        kind="table",
        n_max=100,
        attributes=BOOLEAN_LABEL,
        label=LabelSpec(attribute="died", positive=positive),
    )
    listed = RuleList.from_counts(
        [antecedent("[smoker]")], [5, 20], [15, 4], noise_scale=1.0, alpha=(1, 1), schema=schema
    )
    assert listed.classes == classes
    text = listed.to_text()
    negative_class, positive_class = classes
    assert f"then P(died = {positive_class}) = 0.727" in text
    assert f"n̂₊ with died = {positive_class}, n̂₋ with died = {negative_class}," in text
    assert f"P(died = {positive})" not in text  # the declared token is not shown
    rows = {"smoker": ["yes", "no"]}
    predicted = listed.predict_proba(rows)[:, 1] > 0.5
    assert [classes[int(p)] for p in predicted] == [positive_class, negative_class]
    assert listed.to_dict()["classes"] == list(classes)


def test_a_label_with_more_classes_names_the_negative_rows_by_inequality() -> None:
    many = SCHEMA.model_copy(
        update={
            "attributes": [
                *SCHEMA.attributes[:3],
                CategoricalAttribute(name="sick", categories=["no", "yes", "maybe"]),
            ]
        }
    )
    listed = RuleList.from_counts([], [3], [4], noise_scale=1.0, alpha=(1, 1), schema=many)
    assert "n̂₊ with sick = yes, n̂₋ with sick ≠ yes," in listed.to_text()


# --------------------------------------------------------------------------------------------
# Parameters, budget split, planned calls


def test_a_model_saved_before_the_rename_keeps_its_quantile_not_a_budget() -> None:
    """Issue #24: a file saved when ``rho`` was the truncation quantile loads it as
    ``threshold_quantile``; ``rho`` (now the zCDP budget) stays unset."""
    payload = fitted_estimator().to_dict()
    params = payload["params"]
    del params["threshold_quantile"]
    params["rho"] = 0.05
    loaded = DPBayesianRuleList.from_dict(payload)
    assert (loaded.threshold_quantile, loaded.rho) == (0.05, None)
    assert DPBayesianRuleList.from_dict(fitted_estimator().to_dict()).rho is None


def test_get_and_set_params_follow_scikit_learn() -> None:
    model = DPBayesianRuleList(epsilon=0.5, k_per_class=30)
    params = model.get_params()
    assert params["epsilon"] == 0.5
    assert params["k_per_class"] == 30
    assert set(params) == {
        "epsilon",
        "epsilon_split",
        "k_per_class",
        "max_length",
        "expected_length",
        "expected_cardinality",
        "alpha",
        "iterations",
        "target",
        "sampler",
        "max_rules",
        "numeric_bins",
        "method",
        "threshold_quantile",
        "rho",
        "columns",
        "exclude",
        "progress",
    }
    assert DPBayesianRuleList(**params).get_params() == params
    assert model.set_params(iterations=99, alpha=(2.0, 1.0)) is model
    assert (model.iterations, model.alpha) == (99, (2.0, 1.0))
    with pytest.raises(ValueError, match="unknown parameter 'lambda_'"):
        model.set_params(lambda_=3)
    assert repr(model) == (
        "DPBayesianRuleList(epsilon=0.5, k_per_class=30, alpha=(2.0, 1.0), iterations=99)"
        " · not mined"
    )
    positional: Any = DPBayesianRuleList
    with pytest.raises(TypeError):
        positional(0.5)  # keyword-only parameters


def test_the_budget_splits_in_thirds_without_exceeding_epsilon() -> None:
    thirds = DPBayesianRuleList(epsilon=0.9).budgets
    assert thirds == (0.3, 0.3, 0.3)
    uneven = DPBayesianRuleList(epsilon=1.0).budgets
    assert uneven == (0.333333333333,) * 3
    assert sum(Decimal(repr(share)) for share in uneven) <= Decimal(1)
    weighted = DPBayesianRuleList(epsilon=1.0, epsilon_split=(2.0, 1.0, 1.0)).budgets
    assert weighted == (0.5, 0.25, 0.25)
    with pytest.raises(ValueError, match="three positive weights"):
        _ = DPBayesianRuleList(epsilon=1.0, epsilon_split=(1.0, 0.0, 1.0)).budgets


def handle(schema: DatasetMetadata) -> dpmine.DatasetHandle:
    """A dataset handle with a public schema; its connection is never used by ``_calls``."""
    info = DatasetInfo(
        id="toy",
        name="toy",
        version=1,
        status="active",
        metadata=schema,
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    return dpmine.DatasetHandle(dpmine.connect("http://127.0.0.1:9", "unused-key"), info)


def test_the_planned_calls_are_the_three_operations_with_their_shares() -> None:
    model = DPBayesianRuleList(
        epsilon=0.9, k_per_class=12, max_length=3, iterations=1700, numeric_bins=5, sampler="mcmc"
    )
    calls = model._calls(handle(SCHEMA))
    assert [call.operation for call in calls] == [
        "brl.antecedents",
        "brl.sample_rule_list",
        "brl.point_estimates",
    ]
    antecedents = RuleListAntecedentsRequest.model_validate(calls[0].request)
    assert (antecedents.k_per_class, antecedents.max_length, antecedents.numeric_bins) == (12, 3, 5)
    sample = SampleRuleListRequest.model_validate(calls[1].request)
    assert sample.iterations == 1700
    # The placeholder antecedent is the first item of the first attribute (a public bin).
    assert antecedent_text(sample.antecedents[0]) == "[0.0 <= age <= 20.0]"
    estimates = PointEstimatesRequest.model_validate(calls[2].request)
    assert [antecedents.epsilon, sample.epsilon, estimates.epsilon] == [0.3, 0.3, 0.3]


def test_the_sampler_is_exact_when_its_public_work_fits_the_cap() -> None:
    """ "auto" runs the exact sampler when the public work over at most 2K antecedents fits the
    server's cap (the same count as the server's), else MCMC; "exact" that does not fit is
    refused before anything is sent; "mcmc" always runs the chain."""
    small = DPBayesianRuleList(epsilon=0.9, k_per_class=12, max_rules=2)
    assert small.antecedent_bound(SCHEMA) == min(24, antecedent_universe(SCHEMA, 1, 4))
    assert small.sampler_for(SCHEMA) == "exact"
    calls = small._calls(handle(SCHEMA))
    assert calls[-2].operation == "brl.sample_rule_list_exact"
    exact = SampleRuleListExactRequest.model_validate(calls[-2].request)
    assert (exact.max_rules, len(exact.antecedents)) == (2, 1)  # the pricing placeholder
    # A schema whose public work is over the cap: 2K = 80 antecedents, 4 rules.
    wide = SCHEMA.model_copy(update={"n_max": 10**6})
    big = DPBayesianRuleList(epsilon=0.9, max_length=2, max_rules=4)
    work = exact_rule_list_work(big.antecedent_bound(wide), 4, wide.n_max)
    assert work > MAX_EXACT_RULE_LIST_WORK
    assert big.sampler_for(wide) == "mcmc"
    assert big._calls(handle(wide))[-2].operation == "brl.sample_rule_list"
    refused = DPBayesianRuleList(epsilon=0.9, max_length=2, max_rules=4, sampler="exact")
    with pytest.raises(dpmine.ParameterError, match="lower max_rules or k_per_class"):
        refused.plan(handle(wide))
    assert DPBayesianRuleList(sampler="mcmc").sampler_for(SCHEMA) == "mcmc"
    with pytest.raises(dpmine.ParameterError, match="max_rules must be a whole number from 1"):
        DPBayesianRuleList(max_rules=5)._calls(handle(SCHEMA))
    with pytest.raises(dpmine.ParameterError, match="sampler must be"):
        DPBayesianRuleList().set_params(sampler="gibbs")._calls(handle(SCHEMA))


def test_columns_and_exclude_restrict_the_antecedents_sent_to_the_server() -> None:
    """columns= / exclude= are checked against the public schema and sent as the public set
    of attributes the selection draws from; the universe and K follow it."""
    model = DPBayesianRuleList(epsilon=0.9, k_per_class=2, exclude=["region"])
    request = RuleListAntecedentsRequest.model_validate(model._calls(handle(SCHEMA))[0].request)
    assert request.columns == ["age", "smoker"]
    only = DPBayesianRuleList(epsilon=0.9, k_per_class=2, columns=["smoker", "age"])
    request = RuleListAntecedentsRequest.model_validate(only._calls(handle(SCHEMA))[0].request)
    assert request.columns == ["age", "smoker"]  # schema order
    assert DPBayesianRuleList(exclude="region").columns_for(SCHEMA) == ["age", "smoker"]
    assert DPBayesianRuleList().columns_for(SCHEMA) is None
    unrestricted = DPBayesianRuleList(epsilon=0.9, k_per_class=2)._calls(handle(SCHEMA))
    assert RuleListAntecedentsRequest.model_validate(unrestricted[0].request).columns is None
    # 4 age bins + 2 smoker items; K defaults to all of them, so nothing is selected.
    assert antecedent_universe(SCHEMA, 1, 4, ["age", "smoker"]) == 6
    narrow = DPBayesianRuleList(epsilon=0.9, columns=["smoker"])
    assert narrow.k_for(SCHEMA) == 2
    assert not narrow.selects_antecedents(SCHEMA)
    assert every_antecedent(SCHEMA, 1, 4, ["smoker"]) == [
        antecedent("[smoker]"),
        antecedent("![smoker]"),
    ]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            {"columns": ["age", "income"]},
            "unknown column(s) ['income']; the dataset's columns are "
            "['age', 'smoker', 'region', 'sick']",
        ),
        ({"exclude": ["sickness"]}, "unknown column(s) ['sickness']"),
        ({"exclude": ["sick"]}, "'sick' is the label: a rule list predicts it"),
        ({"columns": ["sick", "age"]}, "'sick' is the label"),
        ({"columns": ["age"], "exclude": ["age"]}, "leave no column to use"),
    ],
)
def test_unusable_columns_are_refused_before_anything_is_sent(
    params: dict[str, Any], message: str
) -> None:
    model = DPBayesianRuleList(epsilon=0.9, **params)
    with pytest.raises(dpmine.ParameterError) as refused:
        model._calls(handle(SCHEMA))  # the handle's connection is never used
    assert message in str(refused.value)


def test_fitting_needs_a_labelled_table() -> None:
    unlabelled = SCHEMA.model_copy(update={"label": None})
    with pytest.raises(ValueError, match="label column"):
        DPBayesianRuleList()._calls(handle(unlabelled))
    with pytest.raises(ValueError, match="method must be"):
        DPBayesianRuleList().set_params(method="greedy")._calls(handle(SCHEMA))
    with pytest.raises(ValueError, match="epsilon must be positive"):
        DPBayesianRuleList(epsilon=-1.0)._calls(handle(SCHEMA))
    # The server's public minimum of MCMC steps (§5.3), refused before any call.
    assert DPBayesianRuleList().iterations >= MIN_RULE_LIST_ITERATIONS
    DPBayesianRuleList(iterations=MIN_RULE_LIST_ITERATIONS)._calls(handle(SCHEMA))
    with pytest.raises(ValueError, match="iterations must be a whole number of at least 1000"):
        DPBayesianRuleList(iterations=MIN_RULE_LIST_ITERATIONS - 1)._calls(handle(SCHEMA))


# --------------------------------------------------------------------------------------------
# Results and JSON


def test_results_need_a_fit() -> None:
    model = DPBayesianRuleList()
    with pytest.raises(NotMinedError, match="call fit"):
        model.predict_proba(ROWS)
    with pytest.raises(NotMinedError, match="call fit"):
        _ = model.receipts_
    assert str(model) == "DPBayesianRuleList(epsilon=1.0) · not mined"


def test_a_saved_model_predicts_the_same_after_loading(tmp_path: Path) -> None:
    estimator = fitted_estimator()
    assert estimator.budget_spent_ == pytest.approx(0.9)
    path = tmp_path / "model.json"
    estimator.to_json(path)
    saved = json.loads(path.read_text())
    assert saved["model"]["text"] == fitted_list().to_text()
    assert saved["model"]["classes"] == ["no", "yes"]
    assert [r["estimate"] for r in saved["model"]["rules"]] == pytest.approx(ESTIMATES[:3])
    assert len(saved["receipts"]) == 3

    loaded = DPBayesianRuleList.from_json(path)
    assert loaded.get_params() == estimator.get_params()
    assert loaded.rule_list_ == estimator.rule_list_
    assert loaded.antecedents_ == RULES
    assert loaded.receipts_ == estimator.receipts_
    np.testing.assert_array_equal(loaded.predict_proba(ROWS), estimator.predict_proba(ROWS))
    # The bare list loads from the same file, and from its own.
    assert RuleList.from_json(path) == estimator.rule_list_
    estimator.rule_list_.to_json(tmp_path / "list.json")
    assert RuleList.from_json(tmp_path / "list.json") == estimator.rule_list_


def test_a_file_that_is_not_a_saved_rule_list_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"format": "something/else"}))
    with pytest.raises(ValueError, match="not a saved dpmine rule list"):
        RuleList.from_json(path)


def test_default_k_is_capped_at_the_public_number_of_antecedents() -> None:
    """K defaults to 40, or every antecedent the schema allows when there are fewer (§5.2)."""
    schema = DatasetMetadata(
        kind="table",
        n_max=100,
        attributes=[
            CategoricalAttribute(name="colour", categories=["r", "g", "b"]),
            BooleanAttribute(name="flag"),
            NumericAttribute(name="age", lo=0, hi=100, grid=[0, 30, 60]),
            NumericAttribute(name="fare", lo=0, hi=10),
            CategoricalAttribute(name="y", categories=["no", "yes"]),
        ],
        label=LabelSpec(attribute="y", positive="yes"),
    )
    # items per attribute: 3, 2, 3 (grid cuts 30 and 60 inside the range), 4 bins; label none
    assert antecedent_universe(schema, 1, 4) == 12
    assert antecedent_universe(schema, 2, 4) == 12 + (3 * 2 + 3 * 3 + 3 * 4 + 2 * 3 + 2 * 4 + 3 * 4)
    assert DPBayesianRuleList().k_for(schema) == 12
    assert DPBayesianRuleList(max_length=2).k_for(schema) == 40
    assert DPBayesianRuleList(k_per_class=7).k_for(schema) == 7


def test_a_schema_with_at_most_k_antecedents_skips_the_selection() -> None:
    """When K reaches every possible antecedent the selection would release all of them: the fit
    uses them all (schema order) and splits ε between the sampler and the estimates."""
    universe = antecedent_universe(SCHEMA, 1, 4)
    assert universe <= 40
    every = every_antecedent(SCHEMA, 1, 4)
    assert len(every) == universe
    assert len({a.model_dump_json() for a in every}) == universe
    assert len(every_antecedent(SCHEMA, 2, 4)) == antecedent_universe(SCHEMA, 2, 4)
    model = DPBayesianRuleList(epsilon=0.9)
    assert not model.selects_antecedents(SCHEMA)
    calls = model._calls(handle(SCHEMA))
    assert [call.operation for call in calls] == [
        "brl.sample_rule_list_exact",
        "brl.point_estimates",
    ]
    assert [call.request["epsilon"] for call in calls] == [0.45, 0.45]
    assert model.budgets_for(SCHEMA) == (0.0, 0.45, 0.45)
    # An explicit K below the universe selects, with the three-way split.
    selecting = DPBayesianRuleList(epsilon=0.9, k_per_class=universe - 1)
    assert selecting.selects_antecedents(SCHEMA)
    assert selecting.budgets_for(SCHEMA) == (0.3, 0.3, 0.3)
