"""TopKItemsets and DPBayesianRuleList on a zCDP dataset (issue #24 item 3): ``rho=`` is the
run's budget (the threshold quantile that ``rho=`` used to set is ``threshold_quantile=``); the
calls are priced as the server charges them (K peeled draws at ε_s/K, ε_s²/(8K), for an "em"
selection, ε²/2 for Laplace counts, the rule-list sampler and the point estimates) and cost the
whole ρ; the plan shows each call's ρ; the ledger is charged exactly the receipts. Pure
functions first, then a real uvicorn server on SQLite through the real client.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Literal

import pytest

import dpmine
from dpmine import DPBayesianRuleList
from dpmine.errors import ParameterError
from dpmine.miners import ItemsetPlan, TopKItemsets
from dpmine.miners._rho import EM_RHO, GENERIC_RHO, PURE, RHO_MARGIN, ZCDP
from dpmine.wire import CreateDatasetRequest, CsvSource, DatasetInfo, DatasetMetadata, LabelSpec
from support.accounts import rho_spent
from support.datasets import register_table, table_metadata, unique_id, write_table_csv
from support.servers import Account, LiveServer

RHO = 0.0174
CLOSE = 1e-5


@pytest.fixture(scope="module")
def any_server(sqlite_server: LiveServer) -> LiveServer:
    """SQLite only: conftest's ``owner`` and ``analyst`` then connect to it."""
    return sqlite_server


def _topk_rho(miner: TopKItemsets) -> float:
    """The ρ of the top-K request and the row count, as the server charges them."""
    epsilon, share = miner.request_epsilon(ZCDP)
    counts = epsilon * share if miner.with_counts else 0.0
    selection = epsilon - counts
    per_draw = EM_RHO / miner.k if miner.method == "em" else GENERIC_RHO
    return per_draw * selection**2 + GENERIC_RHO * (counts**2 + miner.frequency_epsilon**2)


@pytest.mark.parametrize("method", ["em", "laplace"])
@pytest.mark.parametrize("with_counts", [True, False])
def test_the_top_k_request_costs_exactly_rho(
    method: Literal["em", "laplace"], with_counts: bool
) -> None:
    miner = TopKItemsets(
        k=10, rho=RHO, method=method, with_counts=with_counts, frequency_epsilon=0.05
    )
    assert _topk_rho(miner) == pytest.approx(RHO * (1 - RHO_MARGIN), rel=1e-12)
    assert miner.request_epsilon(PURE) == (1.4, 0.5)  # a pure dataset: epsilon, count_share
    if with_counts:  # the counts get count_share of ρ
        epsilon, share = miner.request_epsilon(ZCDP)
        counts_rho = GENERIC_RHO * (epsilon * share) ** 2
        expected = 0.5 * (RHO * (1 - RHO_MARGIN) - GENERIC_RHO * 0.05**2)
        assert counts_rho == pytest.approx(expected)


def test_em_selection_gets_more_per_draw_signal_than_pure_epsilon_one() -> None:
    """At (ε = 1, δ = 10⁻⁶) and K = 10 without counts, each peeled draw gets √(8ρ/K) = 0.118
    against ε/K = 0.1 under pure ε = 1."""
    epsilon, _ = TopKItemsets(k=10, rho=RHO, with_counts=False).request_epsilon(ZCDP)
    assert epsilon / 10 == pytest.approx(0.118, abs=1e-3)


@pytest.mark.parametrize("selects", [True, False])
@pytest.mark.parametrize("method", ["em", "laplace"])
def test_the_rule_list_split_costs_exactly_rho(
    selects: bool, method: Literal["em", "laplace"]
) -> None:
    schema = _labelled_table()
    model = DPBayesianRuleList(
        rho=RHO, method=method, epsilon_split=(2.0, 1.0, 1.0), k_per_class=3 if selects else 400
    )
    assert model.selects_antecedents(schema) is selects
    model._unit = ZCDP  # what plan() sets on a zCDP dataset
    first, second, third = model.budgets_for(schema)
    k = model.k_for(schema)
    selection = (EM_RHO / k if method == "em" else GENERIC_RHO) * first**2
    rho = selection + GENERIC_RHO * (second**2 + third**2)
    assert RHO * (1 - CLOSE) <= rho <= RHO * (1 - RHO_MARGIN)
    if selects:
        assert first / second == pytest.approx(2.0)  # the ε proportions of epsilon_split
    else:
        assert first == 0.0
        assert second == pytest.approx(third)


def _labelled_table() -> DatasetMetadata:
    return table_metadata().model_copy(
        update={"label": LabelSpec(attribute="region", positive="north")}
    )


@pytest.fixture
def zcdp_table(owner: dpmine.Connection, analyst: Account, tmp_path: Path) -> dpmine.DatasetHandle:
    """The generated table, labelled, as a zCDP dataset; the analyst holds ρ = 0.05."""
    path = write_table_csv(tmp_path)
    request = CreateDatasetRequest(
        id=unique_id("ztable"),
        name="generated table (zCDP)",
        accounting="zcdp",
        cap_rho=0.5,
        metadata=_labelled_table(),
        source=CsvSource(path=path.name),
    )
    info = DatasetInfo.model_validate(
        owner.admin.upload_dataset(request, {"path": path})["dataset"]
    )
    owner.admin.grant(info.id, analyst.name, rho=0.05)
    return analyst.connection.dataset(info.id)


@pytest.mark.parametrize(
    "make",
    [
        lambda: TopKItemsets(k=5, length=1, rho=RHO, frequency_epsilon=0.02),
        lambda: DPBayesianRuleList(rho=RHO, k_per_class=3, max_length=1, iterations=1000),
    ],
    ids=["TopKItemsets", "DPBayesianRuleList"],
)
def test_a_run_spends_its_planned_rho_on_the_ledger(
    zcdp_table: dpmine.DatasetHandle, make: object
) -> None:
    assert callable(make)
    miner = make()
    plan = miner.plan(zcdp_table)
    assert rho_spent(zcdp_table) == 0
    assert plan.estimate.total_rho_exact is not None
    planned = Decimal(plan.estimate.total_rho_exact)
    assert Decimal(repr(RHO * (1 - CLOSE))) <= planned <= Decimal(repr(RHO))
    report = plan.report()
    for cost in plan.estimate.calls:
        assert f"ρ = {cost.rho_exact}" in report
    assert f"total ρ = {planned} (budget ρ = {RHO:g})" in report
    assert "the run implies (ε = " in report

    miner.mine(zcdp_table)
    if isinstance(plan, ItemsetPlan):  # the planned floor is the one the release gets
        assert isinstance(miner, TopKItemsets)
        assert plan.confirmation is not None
        assert plan.confirmation.kind == miner.count_noise_kind_ == "discrete_gaussian"
        assert miner.count_noise_scale_ == pytest.approx(plan.confirmation.scale, rel=1e-9)
        assert miner.confirmation_margin_ == plan.confirmation.margin
    charged = sum(Decimal(r.zcdp.rho_exact) for r in miner.receipts_ if r.zcdp is not None)
    assert len(miner.receipts_) == len(plan.calls)
    assert rho_spent(zcdp_table) == charged == planned
    assert miner.budget_spent_ == float(charged)


def test_a_budget_in_the_other_unit_or_the_old_quantile_is_refused(
    owner: dpmine.Connection, analyst: Account, zcdp_table: dpmine.DatasetHandle, tmp_path: Path
) -> None:
    for miner in (TopKItemsets(k=3), DPBayesianRuleList()):
        with pytest.raises(ParameterError, match="zCDP rho: give the run's budget as rho="):
            miner.mine(zcdp_table)
    assert rho_spent(zcdp_table) == 0
    info = register_table(owner, tmp_path)
    owner.admin.grant(info.id, analyst.name, 1.0)
    pure = analyst.connection.dataset(info.id)
    # rho=0.1 was the threshold quantile: on a pure dataset it is refused, naming the rename.
    with pytest.raises(ParameterError, match="is now threshold_quantile="):
        TopKItemsets(k=3, rho=0.1).mine(pure)
    assert pure.budget().grant_spent == 0
    with pytest.raises(ParameterError, match=r"give the budget once.*threshold_quantile="):
        DPBayesianRuleList(epsilon=0.5, rho=0.1)
