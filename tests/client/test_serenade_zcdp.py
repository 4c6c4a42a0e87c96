"""SerenadeES and SerenadeCS on a zCDP dataset (issue #24 item 3), against a real uvicorn server
on SQLite (``sqlite_server``) through the real client:

* the budget is ``rho=``; the auto preset spends it with the pure-ε prices (an EM draw at ε
  costs ε²/8, a quality check or the row count ε²/2), and the server's exact estimate of the
  planned calls stays within it;
* ``plan().report()`` shows the ρ of each call and the (ε, δ) the run implies;
* ``mine()`` charges the ledger what the receipts say, within the budget (ES: the whole budget
  but for the rounding down of every call; CS: at most its plan);
* a budget in the other unit is refused before any call, and costs nothing.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest

import dpmine
from dpmine.cli import _spent
from dpmine.errors import ParameterError
from dpmine.miners import SerenadeCS, SerenadeES
from dpmine.miners._rho import ZCDP, implied_epsilon, spent_of_planned
from dpmine.miners.greedy import DrawPrices, auto_cs, auto_es, zcdp_epsilon
from dpmine.wire import CreateDatasetRequest, CsvSource, DatasetInfo, Receipt, ZcdpAmounts
from support.accounts import rho_spent
from support.datasets import register_table, table_metadata, unique_id, write_table_csv
from support.servers import Account, LiveServer

#: Within (ε = 1, δ = 10⁻⁶): ρ + 2√(ρ ln 10⁶) = 0.998.
RHO = 0.0174
#: Every call's ε is rounded down to a nano-ε and its ρ up to a pico-ρ: the run's ρ is within
#: this fraction of the budget (the split keeps a 10⁻⁶ margin).
CLOSE = 1e-5


@pytest.fixture(scope="module")
def any_server(sqlite_server: LiveServer) -> LiveServer:
    """SQLite only: conftest's ``owner`` and ``analyst`` then connect to it."""
    return sqlite_server


@pytest.fixture
def zcdp_table(owner: dpmine.Connection, analyst: Account, tmp_path: Path) -> dpmine.DatasetHandle:
    """The generated 240-row table as a zCDP dataset capped at (ε = 1, δ = 10⁻⁶); the analyst
    holds ρ = 0.05."""
    path = write_table_csv(tmp_path)
    request = CreateDatasetRequest(
        id=unique_id("ztable"),
        name="generated table (zCDP)",
        accounting="zcdp",
        epsilon_cap=1.0,
        cap_delta=1e-6,
        metadata=table_metadata(),
        source=CsvSource(path=path.name),
    )
    info = DatasetInfo.model_validate(
        owner.admin.upload_dataset(request, {"path": path})["dataset"]
    )
    owner.admin.grant(info.id, analyst.name, rho=0.05)
    return analyst.connection.dataset(info.id)


def test_the_zcdp_split_costs_exactly_the_budget() -> None:
    split, calls = (0.5, 0.3, 0.2), (4, 3, 4)
    e = zcdp_epsilon(RHO, split, calls)
    rho = sum(
        weight * n * (e * share / n) ** 2
        for weight, share, n in zip((1 / 8, 1 / 8, 1 / 2), split, calls, strict=True)
    )
    assert rho == pytest.approx(RHO, rel=1e-12)
    assert implied_epsilon(RHO, 1e-6) == pytest.approx(0.998, abs=1e-3)


def test_auto_rules_choose_in_rho() -> None:
    """At the same prices, I is the most results whose draws fit ρ at ε²/8 and checks at ε²/2."""
    prices = DrawPrices(c_per_epsilon=200.0, log_pairs=3.0, log_extend_one=3.0, check=0.02)
    n_es, rounds, _ = auto_es(RHO, prices, max_rounds=40, composition=ZCDP)

    def es_cost(i: int) -> float:
        return i * (prices.pair**2 / 8 + prices.extend(i) ** 2 / 8 + prices.check**2 / 2)

    assert es_cost(n_es) <= RHO
    assert n_es == 20 or es_cost(n_es + 1) > RHO
    assert rounds == min(n_es, 40)
    n_cs, tau, _ = auto_cs(RHO, prices, max_tau=4, composition=ZCDP)
    chain = prices.pair**2 / 8 + tau * prices.extend(1) ** 2 / 8 + (tau + 1) * prices.check**2 / 2
    assert n_cs * chain <= RHO


@pytest.mark.parametrize("miner_class", [SerenadeES, SerenadeCS])
def test_auto_plan_and_run_spend_rho_within_the_budget(
    zcdp_table: dpmine.DatasetHandle, miner_class: type[SerenadeES] | type[SerenadeCS]
) -> None:
    miner = miner_class(rho=RHO, x0=20.0, y0_fraction=0)  # no row count: the plan is final
    plan = miner.plan(zcdp_table)
    assert rho_spent(zcdp_table) == 0  # planning is free
    assert plan.estimate.accounting == "zcdp"
    assert plan.estimate.total_rho_exact is not None
    planned = Decimal(plan.estimate.total_rho_exact)
    assert planned <= Decimal(repr(RHO))
    assert planned >= Decimal(repr(RHO * (1 - CLOSE)))
    report = plan.report()
    for cost in plan.estimate.calls:
        assert f"{cost.operation} at ε = " in report
        assert f"ρ = {cost.rho_exact}" in report
    assert f"total ρ = {plan.estimate.total_rho_exact}" in report
    implied = implied_epsilon(float(planned), 1e-6)
    assert f"the run implies (ε = {implied:.4g}, δ = 1e-06)" in report
    assert "total ρ=" in str(plan)

    miner.mine(zcdp_table)
    receipts = miner.receipts_
    charged = sum(Decimal(r.zcdp.rho_exact) for r in receipts if r.zcdp is not None)
    assert all(r.accounting == "zcdp" and r.zcdp is not None for r in receipts)
    assert rho_spent(zcdp_table) == charged  # the ledger holds exactly the receipts
    assert miner.budget_spent_ == float(charged)  # in the dataset's unit: ρ, not ε
    assert _spent(receipts) == f"ρ spent = {charged}"  # the CLI's captions, likewise
    message = miner.nothing_passed()
    assert message is None or f"ρ spent: {charged}." in message
    assert charged <= planned
    if miner_class is SerenadeES:  # no early stop: the whole plan, repeats merged at equal ρ
        assert charged >= planned - Decimal(len(receipts)) * Decimal("1e-12") - Decimal(
            repr(RHO * CLOSE)
        )


def test_the_auto_row_count_takes_two_percent_of_rho(zcdp_table: dpmine.DatasetHandle) -> None:
    plan = SerenadeES(rho=RHO).plan(zcdp_table)
    first = plan.estimate.calls[0]
    assert first.operation == "count.noisy"
    assert float(first.epsilon_exact) == pytest.approx(math.sqrt(2 * 0.02 * RHO), rel=1e-6)
    assert plan.estimate.total_rho_exact is not None
    assert Decimal(plan.estimate.total_rho_exact) <= Decimal(repr(RHO))
    assert "noisy row count (same ρ)" in plan.report()
    miner = SerenadeES(rho=RHO).mine(zcdp_table)
    assert rho_spent(zcdp_table) <= Decimal(repr(RHO))
    assert miner.settings_.accounting == "zcdp"


def test_a_budget_in_the_other_unit_is_refused_and_costs_nothing(
    owner: dpmine.Connection, analyst: Account, zcdp_table: dpmine.DatasetHandle, tmp_path: Path
) -> None:
    for miner in (SerenadeES(), SerenadeCS(epsilon=0.5)):
        with pytest.raises(ParameterError, match="zCDP rho: give the run's budget as rho="):
            miner.plan(zcdp_table)
        with pytest.raises(ParameterError, match="as rho="):
            miner.mine(zcdp_table)
    assert rho_spent(zcdp_table) == 0
    info = register_table(owner, tmp_path)
    owner.admin.grant(info.id, analyst.name, 1.0)
    pure = analyst.connection.dataset(info.id)
    with pytest.raises(ParameterError, match="pure epsilon: give the run's budget as epsilon="):
        SerenadeES(rho=RHO).mine(pure)
    assert pure.budget().grant_spent == 0
    with pytest.raises(ParameterError, match="give the budget once"):
        SerenadeCS(epsilon=0.5, rho=RHO)
    with pytest.raises(ParameterError, match="rho must be a positive number"):
        SerenadeES(rho=-1.0)


def _receipt(epsilon_exact: str, rho_exact: str | None) -> Receipt:
    """A receipt of ``epsilon_exact``; on a zCDP dataset (``rho_exact``) its ε is the implied
    one, which does not add up."""
    zcdp = (
        None
        if rho_exact is None
        else ZcdpAmounts(
            rho=float(rho_exact),
            rho_exact=rho_exact,
            delta=1e-6,
            delta_is_default=False,
            epsilon=float(epsilon_exact),
        )
    )
    return Receipt(
        ledger_entry_id=1,
        dataset_id="d",
        operation="red.compute_quality",
        epsilon=float(epsilon_exact),
        epsilon_exact=epsilon_exact,
        guarantee="pure",
        remaining_epsilon=1.0,
        created_at=datetime.now(UTC),
        accounting="pure" if rho_exact is None else "zcdp",
        zcdp=zcdp,
    )


def test_an_early_stop_states_its_spend_in_the_datasets_unit() -> None:
    """SerenadeCS's early-stop sentence: ρ adds up exactly on a zCDP dataset (the implied ε of
    each receipt would not), ε on a pure one."""
    zcdp = [_receipt("0.2", "0.005"), _receipt("0.3", "0.0075")]
    assert spent_of_planned(zcdp, "0.0174") == "ρ spent: 0.0125 of the 0.0174 planned."
    pure = [_receipt("0.25", None), _receipt("0.5", None)]
    assert spent_of_planned(pure, "1.500") == "ε spent: 0.75 of the 1.5 planned."
