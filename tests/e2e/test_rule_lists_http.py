"""DP Bayesian rule lists (ALGORITHMS.md §5) over real HTTP against a live server, on SQLite and
PostgreSQL: ``DPBayesianRuleList`` plans and fits on the bundled UCI Mushroom data registered as
a labelled table (label ``class``, positive ``p``), predicts locally with an AUC far above
chance, and a saved model predicts the same without a server.

The released noisy capture counts are compared with the exact counts of the rows the *client*
routes to each rule: this checks that the client's evaluation of literals (missing values,
closed numeric bins, clipping, Boolean cells) is the server's, on Mushroom and on a small
generated table with numeric, Boolean and missing values.
"""

from __future__ import annotations

import csv
import gzip
import math
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

import dpmine
from dpmine.errors import BudgetExhaustedError
from dpmine.rule_lists import DPBayesianRuleList, RuleList
from dpmine.wire import (
    MIN_RULE_LIST_ITERATIONS,
    BooleanAttribute,
    CategoricalAttribute,
    CatLiteral,
    CreateDatasetRequest,
    CsvSource,
    DatasetInfo,
    DatasetMetadata,
    LabelSpec,
    NumericAttribute,
    NumLiteral,
)
from support.datasets import (
    MUSHROOM_PATH,
    mushroom_metadata,
    table_metadata,
    unique_id,
    write_table_csv,
)
from support.servers import Account

#: Generous: ε/3 = 2 per call; the sampler's temperature ε2/(2Δu) ≈ 0.11 on N_max = 10,000.
EPSILON = 6.0
#: |discrete Laplace of scale 1/2| exceeds 40 with probability below 1e-17 per count.
NOISE_BAND = 40


def _register(
    owner: dpmine.Connection, path: Path, metadata: DatasetMetadata, prefix: str
) -> DatasetInfo:
    request = CreateDatasetRequest(
        id=unique_id(prefix),
        name=prefix,
        epsilon_cap=4 * EPSILON,
        metadata=metadata,
        source=CsvSource(path=path.name),
    )
    return DatasetInfo.model_validate(
        owner.admin.upload_dataset(request, {"path": path})["dataset"]
    )


def _mushroom_table() -> DatasetMetadata:
    """The Mushroom attributes as one labelled table (no views): poisonous = positive."""
    views = mushroom_metadata()
    attributes = [a.model_copy(update={"view": None}) for a in views.attributes]
    return DatasetMetadata(
        kind="table",
        n_max=views.n_max,
        attributes=attributes,
        label=LabelSpec(attribute="class", positive="p"),
    )


def _read_columns(path: Path) -> dict[str, list[str]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", newline="") as handle:
        rows = list(csv.DictReader(handle))
    return {name: [row[name] for row in rows] for name in rows[0]}


def auc(scores: npt.NDArray[np.float64], positive: npt.NDArray[np.bool_]) -> float:
    """Area under the ROC curve (Mann–Whitney, ties counted half)."""
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores), dtype=np.float64)
    sorted_scores = scores[order]
    start = 0
    while start < len(scores):
        end = start
        while end + 1 < len(scores) and sorted_scores[end + 1] == sorted_scores[start]:
            end += 1
        ranks[order[start : end + 1]] = (start + end) / 2 + 1
        start = end + 1
    n_pos, n_neg = int(positive.sum()), int((~positive).sum())
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def _check_counts_match_local_capture(
    rule_list: RuleList, columns: dict[str, list[str]], labels: Sequence[bool | None]
) -> None:
    """Every released noisy count is within the band of the exact count of the rows the client
    routes to that rule (rows with a missing label are in neither class)."""
    captured = rule_list.capture(columns)
    rules = [*rule_list.rules, rule_list.default]
    for j, rule in enumerate(rules):
        mine = [label for label, c in zip(labels, captured, strict=True) if c == j]
        exact_negative = sum(1 for label in mine if label is False)
        exact_positive = sum(1 for label in mine if label is True)
        assert abs(rule.noisy_negative - exact_negative) <= NOISE_BAND, (j, rule)
        assert abs(rule.noisy_positive - exact_positive) <= NOISE_BAND, (j, rule)


def test_a_rule_list_is_fitted_on_mushroom_and_predicts_offline(
    owner: dpmine.Connection, analyst: Account, tmp_path: Path
) -> None:
    info = _register(owner, MUSHROOM_PATH, _mushroom_table(), "mushroom-brl")
    owner.admin.grant(info.id, analyst.name, EPSILON)
    dataset = analyst.connection.dataset(info.id)
    model = DPBayesianRuleList(epsilon=EPSILON, k_per_class=10, max_length=1, iterations=1000)

    plan = model.plan(dataset)
    assert plan.fits
    # sampler "auto": at most 20 antecedents and 3 rules fit the exact sampler's cap.
    assert [c.operation for c in plan.calls] == [
        "brl.antecedents",
        "brl.sample_rule_list_exact",
        "brl.point_estimates",
    ]
    assert Decimal(plan.estimate.total_epsilon_exact) == Decimal("6")
    assert dataset.budget().grant_spent == 0

    model.fit(dataset)

    # Three charged calls, as planned, all pure: the list is an exact draw.
    assert [r.operation for r in model.receipts_] == [c.operation for c in plan.calls]
    assert [r.guarantee for r in model.receipts_] == ["pure", "pure", "pure"]
    assert (model.sampler_, model.guarantee_, model.rule_list_.guarantee) == (
        "exact",
        "pure",
        "pure",
    )
    assert len(model.rule_list_.rules) <= model.max_rules
    assert [r.epsilon_exact for r in model.receipts_] == ["2", "2", "2"]
    assert model.budget_spent_ == pytest.approx(EPSILON)
    assert dataset.budget().remaining_epsilon == pytest.approx(0.0, abs=1e-9)
    ledger = {entry.id: entry for entry in owner.admin.ledger(info.id)}
    assert {r.ledger_entry_id for r in model.receipts_} == set(ledger)

    # The antecedent set: at most K per class, over the features only, distinct.
    assert 1 <= len(model.antecedents_) <= 2 * 10
    keys = [a.model_dump_json() for a in model.antecedents_]
    assert len(set(keys)) == len(keys)
    for antecedent in model.antecedents_:
        assert len(antecedent.items) == 1
        for item in antecedent.items:
            assert isinstance(item, CatLiteral)
            assert item.attribute != "class"
    fitted = model.rule_list_
    assert all(rule.antecedent in model.antecedents_ for rule in fitted.rules)
    assert fitted.noise_scale == pytest.approx(0.5)
    assert model.classes_.tolist() == ["e", "p"]

    # Local capture agrees with the server's counts; predictions rank far above chance.
    columns = _read_columns(MUSHROOM_PATH)
    labels = [value == "p" for value in columns["class"]]
    _check_counts_match_local_capture(fitted, columns, labels)
    scores = model.predict_proba(columns)[:, 1]
    truth = np.array(labels)
    assert auc(scores, truth) >= 0.85, fitted.to_text()
    accuracy = float(np.mean((model.predict(columns) == "p") == truth))
    assert accuracy >= 0.75, fitted.to_text()

    # Saved and loaded: the same model and the same predictions, without a server.
    path = tmp_path / "mushroom-brl.json"
    model.to_json(path)
    loaded = DPBayesianRuleList.from_json(path)
    assert loaded.rule_list_ == fitted
    assert loaded.receipts_ == model.receipts_
    np.testing.assert_array_equal(loaded.predict_proba(columns), model.predict_proba(columns))
    np.testing.assert_array_equal(
        RuleList.from_json(path).capture(columns), fitted.capture(columns)
    )

    # The budget is spent: a second fit is refused before anything is charged.
    with pytest.raises(BudgetExhaustedError, match="nothing was spent"):
        DPBayesianRuleList(epsilon=0.3).fit(dataset)
    assert len(owner.admin.ledger(info.id)) == 3


def _table_with_label() -> DatasetMetadata:
    """The generated table (numeric age and score with missing cells, Boolean smoker), labelled
    by its region: north is positive."""
    return table_metadata().model_copy(
        update={"label": LabelSpec(attribute="region", positive="north")}
    )


def test_numeric_bins_booleans_and_missing_values_are_evaluated_like_the_server(
    owner: dpmine.Connection, analyst: Account, tmp_path: Path
) -> None:
    path = write_table_csv(tmp_path, rows=240)
    info = _register(owner, path, _table_with_label(), "table-brl")
    owner.admin.grant(info.id, analyst.name, EPSILON)
    dataset = analyst.connection.dataset(info.id)
    # λ = 6 and K = 10 per class: long lists over the binned numeric and Boolean items.
    model = DPBayesianRuleList(
        epsilon=EPSILON,
        k_per_class=10,
        max_length=2,
        expected_length=6.0,
        iterations=MIN_RULE_LIST_ITERATIONS,
        numeric_bins=3,
    ).fit(dataset)

    schema = dataset.schema
    for antecedent in model.antecedents_:
        for item in antecedent.items:
            attribute = schema.attribute(item.attribute)
            assert item.attribute != "region"
            if isinstance(attribute, NumericAttribute):
                # One of the three public equal-width bins, closed at both ends.
                assert isinstance(item, NumLiteral)
                edges = np.linspace(attribute.lo, attribute.hi, 4)
                assert item.lower is not None
                assert item.upper is not None
                bins = [(edges[i], edges[i + 1]) for i in range(3)]
                assert any(
                    math.isclose(item.lower, low) and math.isclose(item.upper, high)
                    for low, high in bins
                ), item
            else:
                assert isinstance(attribute, BooleanAttribute | CategoricalAttribute)

    columns = _read_columns(path)
    labels = [value == "north" for value in columns["region"]]
    _check_counts_match_local_capture(model.rule_list_, columns, labels)
