"""Issue #22, notebook use without a server: miners print what they are, obviously invalid
parameters are refused at construction saying what to fix, rule lists become DataFrames and
files from a ``str`` path, and ``to_frame`` without pandas says what to install."""

from __future__ import annotations

import csv
import sys
from pathlib import Path
from typing import Any

import pytest

from dpmine.errors import ParameterError
from dpmine.frames import data_frame
from dpmine.miners import AltExpM, AltMCMC, MCMCTreePair, SerenadeCS, SerenadeES, TopKItemsets
from dpmine.rule_lists import RULE_COLUMNS, DPBayesianRuleList, RuleList
from dpmine.wire import (
    Antecedent,
    CategoricalAttribute,
    CatLiteral,
    DatasetMetadata,
    LabelSpec,
)


def test_a_miner_prints_its_class_changed_parameters_and_state() -> None:
    assert repr(TopKItemsets()) == "TopKItemsets(epsilon=1.4) · not mined"
    assert repr(SerenadeCS(epsilon=3, tau=2)) == "SerenadeCS(tau=2, epsilon=3) · not mined"
    assert repr(AltMCMC(rm_iterations=2)) == "AltMCMC(rm_iterations=2, epsilon=1.0) · not mined"
    assert "object at 0x" not in repr(DPBayesianRuleList())


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: TopKItemsets(k=0), "k must be a whole number of at least 1, got 0"),
        (lambda: TopKItemsets(length=(3, 2)), "1 ≤ shortest ≤ longest"),
        (lambda: TopKItemsets(epsilon=0), "epsilon must be a positive number"),
        (lambda: TopKItemsets(threshold_quantile=1), "threshold_quantile must be in (0, 1)"),
        (lambda: TopKItemsets(epsilon=1, rho=0.1), "now threshold_quantile="),
        (lambda: TopKItemsets(numeric_bins=1), "numeric_bins must be at least 2"),
        (lambda: SerenadeES(epsilon=-1), "epsilon must be a positive number"),
        (lambda: SerenadeES(rounds=0), "rounds must be a whole number of at least 1"),
        (lambda: SerenadeCS(x0=5, x0_fraction=0.1), "give exactly one of x0"),
        (lambda: AltExpM(depth=0), "depth must be a whole number of at least 1"),
        (lambda: AltExpM(min_jaccard=2), "min_jaccard must be in [0, 1]"),
        (lambda: MCMCTreePair(omega=1.5), "omega must be in (0, 1)"),
        (lambda: DPBayesianRuleList(iterations=10), "iterations must be a whole number"),
        (lambda: DPBayesianRuleList(k_per_class=0), "k_per_class must be at least 1"),
    ],
)
def test_invalid_parameters_are_refused_at_construction(make: Any, message: str) -> None:
    with pytest.raises(ParameterError) as refused:
        make()
    assert message in str(refused.value)


def _rule_list() -> RuleList:
    schema = DatasetMetadata(
        kind="table",
        n_max=100,
        attributes=[
            CategoricalAttribute(name="odor", categories=["a", "n"]),
            CategoricalAttribute(name="class", categories=["e", "p"]),
        ],
        label=LabelSpec(attribute="class", positive="p"),
    )
    antecedent = Antecedent(items=[CatLiteral(attribute="odor", category="n")])
    return RuleList.from_counts(
        [antecedent], [30, 5], [2, 40], noise_scale=1.0, alpha=(1.0, 1.0), schema=schema
    )


def test_a_rule_list_as_csv_and_frame_from_a_str_path(tmp_path: Path) -> None:
    rules = _rule_list()
    target = str(tmp_path / "rules.csv")
    rules.to_csv(target)
    with Path(target).open(newline="", encoding="utf-8") as handle:
        header, *rows = list(csv.reader(handle))
    frame = rules.to_frame()
    assert header == list(frame.columns) == list(RULE_COLUMNS)
    assert [row[1] for row in rows] == list(frame["rule"]) == [rules.rules[0].text, "(default)"]
    assert list(frame["noisy_positive"]) == [2, 40]
    saved = str(tmp_path / "rules.json")
    rules.to_json(saved)
    assert RuleList.from_json(saved) == rules


def test_to_frame_without_pandas_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pandas", None)  # as if it were not installed
    with pytest.raises(ImportError, match="pip install pandas"):
        data_frame(["a"], [[1]])
