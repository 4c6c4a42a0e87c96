"""The tree miners and DPLayeredTrees on a zCDP dataset (issue #24 item 3): ``rho=`` is the
run's budget, both presets spend it exactly (less the 10⁻⁶ margin and the rounding down of every
call's ε), priced as the server charges (ε²/(8·depth) per ``tree.expmech``, ε²/8 per MCMC draw,
ε²/2 per leaf-count release or row count); ``plan()`` shows each call's ρ and the (ε, δ) the
run implies; ``mine()`` charges the ledger exactly its receipts, within the budget. Pure
functions first, then a real uvicorn server on SQLite through the real client.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

import dpmine
from dpmine.amounts import epsilon_text
from dpmine.errors import ParameterError
from dpmine.miners import AltExpM, AltMCMC, DPLayeredTrees, MCMCTreePair
from dpmine.miners._rho import GENERIC_RHO, RHO_MARGIN, ZCDP, implied_epsilon
from dpmine.miners.tree_auto import TreeKind, auto_layered, auto_tree, tree_cost
from dpmine.miners.trees import TreeSettings, _TreeMinerBase
from dpmine.wire import DatasetMetadata
from support.accounts import rho_spent
from support.datasets import register_mushroom
from support.servers import Account, LiveServer

#: Within (ε = 1, δ = 10⁻⁶): ρ + 2√(ρ ln 10⁶) = 0.998.
RHO = 0.0174
#: The run's ρ is within this fraction below the budget: the 10⁻⁶ margin, every call's ε
#: rounded down (to a nano-ε under auto, a pico-ε under paper) and the server's pico-ρ.
CLOSE = 1e-5

VIEWS = DatasetMetadata.model_validate(
    {
        "kind": "views",
        "n_max": 2000,
        "attributes": [
            *({"type": "boolean", "name": f"l{i}", "view": "left"} for i in range(4)),
            *({"type": "boolean", "name": f"r{i}", "view": "right"} for i in range(4)),
        ],
    }
)


@pytest.fixture(scope="module")
def any_server(sqlite_server: LiveServer) -> LiveServer:
    """SQLite only: conftest's ``owner`` and ``analyst`` then connect to it."""
    return sqlite_server


def _auto_rho(kind: TreeKind, budget: float, n_rows: float, in_trees: int = 1) -> float:
    auto = auto_tree(budget, n_rows, kind=kind, log_units=2.0, in_trees=in_trees, composition=ZCDP)
    leaf = GENERIC_RHO * auto.leaf_epsilon**2
    if kind == "pair":
        return auto.rounds * (tree_cost(kind, auto.depth, auto.tree_epsilon, ZCDP) + leaf)
    trees = in_trees * (auto.rounds + 1) * tree_cost(kind, auto.depth, auto.tree_epsilon, ZCDP)
    return trees + in_trees * auto.rounds * leaf


@pytest.mark.parametrize("kind", ["expmech", "mcmc", "pair"])
@pytest.mark.parametrize("n_rows", [50.0, 2575.0, 50_000.0])  # the fallback, and fitting prices
def test_the_auto_rule_spends_exactly_its_rho(kind: TreeKind, n_rows: float) -> None:
    assert _auto_rho(kind, RHO, n_rows, in_trees=2) == pytest.approx(RHO, rel=1e-12)


@pytest.mark.parametrize("seed_draws", [0, 1])
@pytest.mark.parametrize("n_rows", [50.0, 2575.0])
@pytest.mark.parametrize("pair", [False, True])
def test_the_layered_rule_spends_exactly_its_rho(
    seed_draws: int, n_rows: float, pair: bool
) -> None:
    auto = auto_layered(
        RHO, n_rows, log_units=2.0, seed_draws=seed_draws, pair=pair, composition=ZCDP
    )
    steering = auto.layers if pair else auto.layers - 1
    per_seed = (
        auto.layers * tree_cost("expmech", auto.depth, auto.tree_epsilon, ZCDP)
        + seed_draws * tree_cost("expmech", 1, auto.tree_epsilon, ZCDP)
        + steering * GENERIC_RHO * auto.steer_epsilon**2
        + GENERIC_RHO * auto.final_epsilon**2
    )
    assert auto.seeds * per_seed == pytest.approx(RHO, rel=1e-12)


def _settings_rho(miner: _TreeMinerBase, settings: TreeSettings) -> float:
    """The ρ of a run with ``settings``, call by call, as the server charges it."""
    count = 0.0 if settings.count_epsilon is None else settings.count_epsilon
    rho = GENERIC_RHO * count**2
    tree = tree_cost(miner._kind, settings.depth, settings.tree_epsilon, ZCDP)
    leaf = GENERIC_RHO * settings.leaf_epsilon**2
    if isinstance(miner, DPLayeredTrees):
        layout = miner.layout_
        steer = GENERIC_RHO * layout.steer_epsilon**2
        seed = tree_cost("expmech", 1, settings.tree_epsilon, ZCDP) * miner._seed_draws()
        if layout.examine_every_layer:  # paper: every release at the leaf ε
            steer = leaf
        steering = layout.layers if layout.pair_final else layout.layers - 1
        return rho + layout.seeds * (layout.layers * tree + seed + steering * steer + leaf)
    if isinstance(miner, MCMCTreePair):
        return rho + settings.rounds * (tree + leaf)
    assert isinstance(miner, AltExpM | AltMCMC)
    return rho + miner.in_trees * ((settings.rounds + 1) * tree + settings.rounds * leaf)


MINERS = [
    lambda preset: AltExpM(rho=RHO, preset=preset, in_trees=2),
    lambda preset: AltMCMC(rho=RHO, preset=preset, rm_iterations=2),
    lambda preset: MCMCTreePair(rho=RHO, preset=preset),
    lambda preset: DPLayeredTrees(rho=RHO, preset=preset, seed_rule="expmech"),
    lambda preset: DPLayeredTrees(
        rho=RHO, preset="auto", final_release="pair" if preset == "auto" else "partition"
    ),
]


@pytest.mark.parametrize("make", MINERS)
@pytest.mark.parametrize("preset", ["paper", "auto"])
def test_both_presets_plan_the_whole_rho(make: object, preset: str) -> None:
    assert callable(make)
    miner = make(preset)
    miner._unit = ZCDP  # what plan() sets on a zCDP dataset
    for n_hat in (None, 1500.0):
        settings = miner._settle(VIEWS, n_hat)
        planned = _settings_rho(miner, settings)
        assert RHO * (1 - CLOSE) <= planned < RHO * (1 - RHO_MARGIN / 2)


@pytest.fixture
def zcdp_mushroom(owner: dpmine.Connection, analyst: Account) -> dpmine.DatasetHandle:
    """Mushroom as a zCDP dataset capped at ρ = 0.5; the analyst holds ρ = 0.1."""
    info = register_mushroom(owner, cap_rho=0.5)
    owner.admin.grant(info.id, analyst.name, rho=0.1)
    return analyst.connection.dataset(info.id)


LIVE = [
    lambda: AltExpM(rho=RHO, rm_iterations=1, depth=2, seed=1),
    lambda: AltMCMC(rho=RHO, preset="auto", rm_iterations=1, depth=2, iterations=1000, seed=2),
    lambda: MCMCTreePair(rho=RHO, in_trees=2, depth=2, iterations=1000, seed=3),
    lambda: DPLayeredTrees(rho=RHO, in_trees=1, layers=2, depth=2, seed=4),
]


@pytest.mark.parametrize("make", LIVE, ids=["AltExpM", "AltMCMC", "MCMCTreePair", "Layered"])
def test_a_run_spends_its_planned_rho_on_the_ledger(
    zcdp_mushroom: dpmine.DatasetHandle, make: object
) -> None:
    assert callable(make)
    miner = make()
    plan = miner.plan(zcdp_mushroom)
    assert rho_spent(zcdp_mushroom) == 0  # planning is free
    assert plan.estimate.total_rho_exact is not None
    planned = Decimal(plan.estimate.total_rho_exact)
    assert Decimal(repr(RHO * (1 - CLOSE))) <= planned <= Decimal(repr(RHO))
    report = plan.report()
    for cost in plan.estimate.calls:
        assert f"{cost.operation} at ε = {epsilon_text(cost.epsilon_exact)}: ρ = " in report
        assert f"ρ = {cost.rho_exact}" in report
    assert f"total ρ = {planned} (budget ρ = {RHO:g})" in report
    assert f"the run implies (ε = {implied_epsilon(float(planned), 1e-6):.4g}, δ = 1e-06)" in (
        report
    )

    miner.mine(zcdp_mushroom)
    charged = sum(Decimal(r.zcdp.rho_exact) for r in miner.receipts_ if r.zcdp is not None)
    assert all(r.accounting == "zcdp" for r in miner.receipts_)
    assert rho_spent(zcdp_mushroom) == charged  # the ledger holds exactly the receipts
    assert miner.budget_spent_ == float(charged)
    assert Decimal(repr(RHO * (1 - CLOSE))) <= charged <= Decimal(repr(RHO))


def test_a_budget_in_the_other_unit_is_refused_and_costs_nothing(
    owner: dpmine.Connection, analyst: Account, zcdp_mushroom: dpmine.DatasetHandle
) -> None:
    for miner in (AltExpM(), MCMCTreePair(epsilon=0.5), DPLayeredTrees(preset="auto")):
        with pytest.raises(ParameterError, match="zCDP rho: give the run's budget as rho="):
            miner.mine(zcdp_mushroom)
    assert rho_spent(zcdp_mushroom) == 0
    info = register_mushroom(owner)
    owner.admin.grant(info.id, analyst.name, 1.0)
    pure = analyst.connection.dataset(info.id)
    with pytest.raises(ParameterError, match="pure epsilon: give the run's budget as epsilon="):
        AltMCMC(rho=RHO).mine(pure)
    assert pure.budget().grant_spent == 0
    with pytest.raises(ParameterError, match="give the budget once"):
        AltExpM(epsilon=0.5, rho=RHO)
    with pytest.raises(ParameterError, match="rho must be a positive number"):
        DPLayeredTrees(rho=0.0)
