"""End to end: Serenade mining over real HTTP against a live uvicorn server (ALGORITHMS.md §2;
DESIGN.md "Testing", "The budget ledger").

Data:

* the bundled UCI Mushroom file as a two-view dataset (``support.datasets.register_mushroom``:
  cap, gill, stalk and veil attributes on the left, class, odor, ring, spore print, population,
  habitat and bruises on the right; 23 categorical attributes);
* a small generated two-view dataset with numeric right attributes (``support.datasets``'
  table rows: smoker and region on the left, age ∈ [0, 100] and score ∈ [-10, 10] on the right).

SerenadeES and SerenadeCS run with small settings through the ``dpmine`` client; the ledger must
hold exactly the charged calls (ids, operations, exact ε), and the analyst's budget must move by
exactly their sum. Bad requests are refused with 4xx before any charge: unknown attributes, a
literal outside the public schema, a query not in Serenade form or longer than max_literals,
x0 ≥ N_max, 'continuous' thresholds at too much ε per call, a budget that does not fit.
The server runs in test mode with a fixed seed (reproducible selections).
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from decimal import Decimal

import pytest
from pydantic import BaseModel

import dpmine
from dpmine.miners import SerenadeCS, SerenadeES
from dpmine.queries import literals, serenade_query
from dpmine.wire import (
    AnyAttribute,
    BooleanAttribute,
    BoolLiteral,
    CalibrateRequest,
    CalibrateResponse,
    CategoricalAttribute,
    CatLiteral,
    CreateDatasetRequest,
    CsvSource,
    DatasetMetadata,
    ExtendOneRequest,
    ExtendOneResponse,
    InitialPairsRequest,
    InitialPairsResponse,
    LedgerEntryInfo,
    Not,
    NumericAttribute,
    NumLiteral,
    QualityParameters,
    Redescription,
    SerenadeOptions,
)
from support.accounts import (
    analyst_account,
    exact_total,
    granted,
    mine_entries,
    owner_connection,
    seeded_server,
)
from support.datasets import (
    REGIONS,
    mushroom_metadata,
    register_mushroom,
    table_rows,
    unique_id,
)
from support.servers import Account, LiveServer

MUSHROOM_X0 = 812.0  # 10 % of the 8124 rows, a public count chosen by the analyst
TABLE_X0 = 24.0
PICO = Decimal("1e-12")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    workdir = tmp_path_factory.mktemp("serenade-server")
    with seeded_server(workdir, name="serenade", seed="20230101") as live:
        yield live


@pytest.fixture(scope="module")
def owner(server: LiveServer) -> Iterator[dpmine.Connection]:
    with owner_connection(server) as connection:
        yield connection


@pytest.fixture(scope="module")
def mushroom(owner: dpmine.Connection) -> str:
    return register_mushroom(owner, epsilon_cap=100.0).id


def numeric_metadata() -> DatasetMetadata:
    attributes: list[AnyAttribute] = [
        BooleanAttribute(name="smoker", view="left"),
        CategoricalAttribute(name="region", view="left", categories=list(REGIONS)),
        NumericAttribute(name="age", view="right", lo=0.0, hi=100.0),
        NumericAttribute(name="score", view="right", lo=-10.0, hi=10.0),
    ]
    return DatasetMetadata(kind="views", n_max=1_000, attributes=attributes)


@pytest.fixture(scope="module")
def numeric(owner: dpmine.Connection, tmp_path_factory: pytest.TempPathFactory) -> str:
    """240 generated rows, two views, numeric right attributes (missing scores included)."""
    path = tmp_path_factory.mktemp("numeric") / "people.csv"
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["smoker", "region", "age", "score"])
        writer.writeheader()
        writer.writerows(table_rows())
    request = CreateDatasetRequest(
        id=unique_id("people"),
        name="generated people, two views",
        epsilon_cap=100.0,
        metadata=numeric_metadata(),
        source=CsvSource(path=path.name),
    )
    owner.admin.upload_dataset(request, {"path": path})
    return request.id


@pytest.fixture
def analyst(server: LiveServer, owner: dpmine.Connection) -> Iterator[Account]:
    with analyst_account(server, owner) as account:
        yield account


def entries_of(
    owner: dpmine.Connection, dataset_id: str, analyst: Account
) -> list[LedgerEntryInfo]:
    """The analyst's ledger entries on the dataset, in ledger order."""
    return sorted(mine_entries(owner, dataset_id, analyst), key=lambda e: e.id)


def assert_ledger_matches(
    owner: dpmine.Connection,
    dataset: dpmine.DatasetHandle,
    analyst: Account,
    miner: SerenadeES | SerenadeCS,
) -> Decimal:
    """The analyst's ledger entries are exactly the miner's receipts; returns their sum."""
    entries = entries_of(owner, dataset.id, analyst)
    receipts = miner.receipts_
    assert [e.id for e in entries] == [r.ledger_entry_id for r in receipts]
    assert [e.operation for e in entries] == [r.operation for r in receipts]
    assert [e.epsilon_exact for e in entries] == [r.epsilon_exact for r in receipts]
    assert all(e.status == "released" for e in entries)
    total = exact_total(entries)
    assert miner.budget_spent_ == float(total)
    assert dataset.budget().grant_spent == pytest.approx(float(total), abs=1e-9)
    return total


def assert_views(red: Redescription, metadata: DatasetMetadata) -> None:
    for side, expr in (("left", red.left), ("right", red.right)):
        for literal in literals(expr):
            assert metadata.attribute(literal.attribute).view == side


# --------------------------------------------------------------------------------------------
# Mining runs


def test_serenade_es_on_mushroom(owner: dpmine.Connection, analyst: Account, mushroom: str) -> None:
    dataset = granted(owner, analyst, mushroom, 2.0)
    miner = SerenadeES(preset="paper", epsilon=1.0, n_initial=4, rounds=6, x0=MUSHROOM_X0)
    plan = miner.plan(dataset)
    assert entries_of(owner, mushroom, analyst) == []  # planning is free
    miner.mine(dataset)
    total = assert_ledger_matches(owner, dataset, analyst, miner)
    assert total == Decimal(plan.estimate.total_epsilon_exact) == Decimal(1)
    assert [r.operation for r in miner.receipts_] == [c.operation for c in plan.calls]
    # One result per distinct final position: 4 unless two positions ended equal (initial
    # pairs are drawn with replacement; about 1 run in 190 here), never a duplicate.
    shown = [found.redescription.model_dump_json() for found in miner.redescriptions_]
    assert 1 <= len(shown) <= 4
    assert len(set(shown)) == len(shown)
    metadata = mushroom_metadata()
    for found in miner.redescriptions_:
        assert_views(found.redescription, metadata)
        assert 0.0 <= found.noisy_jaccard <= 1.0


def test_serenade_cs_on_mushroom(owner: dpmine.Connection, analyst: Account, mushroom: str) -> None:
    dataset = granted(owner, analyst, mushroom, 2.0)
    miner = SerenadeCS(
        preset="paper", epsilon=1.0, n_initial=4, tau=2, x0=MUSHROOM_X0, min_jaccard=0.2
    )
    plan = miner.plan(dataset)
    miner.mine(dataset)
    total = assert_ledger_matches(owner, dataset, analyst, miner)
    assert total <= Decimal(plan.estimate.total_epsilon_exact)
    assert Decimal(plan.estimate.total_epsilon_exact) <= Decimal(1) + len(plan.calls) * PICO
    assert len(miner.redescriptions_) <= 4
    for found in miner.redescriptions_:
        assert_views(found.redescription, mushroom_metadata())
        assert found.noisy_jaccard >= 0.2


@pytest.mark.parametrize("mode", ["continuous", "grid"])
def test_serenade_es_with_numeric_thresholds(
    owner: dpmine.Connection, analyst: Account, numeric: str, mode: str
) -> None:
    dataset = granted(owner, analyst, numeric, 1.0)
    options = SerenadeOptions.model_validate({"threshold_mode": mode})
    miner = SerenadeES(
        preset="paper", epsilon=0.5, n_initial=6, rounds=6, x0=TABLE_X0, options=options
    )
    miner.mine(dataset)
    assert set(miner.threshold_modes_) == {mode}
    assert_ledger_matches(owner, dataset, analyst, miner)
    metadata = numeric_metadata()
    rows = table_rows()
    data_values = {
        "age": {float(row["age"]) for row in rows},
        "score": {float(row["score"]) for row in rows if row["score"]},
    }
    bounds: list[float] = []
    for found in miner.redescriptions_:
        assert_views(found.redescription, metadata)
        for literal in literals(found.redescription.right):
            if not isinstance(literal, NumLiteral):
                continue
            attribute = metadata.attribute(literal.attribute)
            assert isinstance(attribute, NumericAttribute)
            for bound in (literal.lower, literal.upper):
                if bound is None:
                    continue
                assert attribute.lo <= bound <= attribute.hi
                bounds.append(bound)
                if mode == "continuous":  # drawn inside a cell, never a data value (§1.4)
                    assert bound not in data_values[literal.attribute]
    assert bounds, "numeric right attributes only: every pair has a threshold"


def test_serenade_cs_with_numeric_thresholds(
    owner: dpmine.Connection, analyst: Account, numeric: str
) -> None:
    dataset = granted(owner, analyst, numeric, 1.0)
    miner = SerenadeCS(
        preset="paper", epsilon=0.5, n_initial=3, tau=2, x0=TABLE_X0, min_jaccard=0.0
    )
    plan = miner.plan(dataset)
    miner.mine(dataset)
    total = assert_ledger_matches(owner, dataset, analyst, miner)
    # J_min = 0: no chain stops early, unchanged extensions skip their quality call only.
    assert total <= Decimal(plan.estimate.total_epsilon_exact)
    assert len(miner.redescriptions_) == 3


# --------------------------------------------------------------------------------------------
# Refusals: 4xx, nothing charged


def call(
    analyst: Account, dataset_id: str, endpoint: str, body: BaseModel, model: type[BaseModel]
) -> BaseModel:
    return analyst.connection.call(
        f"/v1/datasets/{dataset_id}/redescriptions/serenade/{endpoint}", body, model
    )


def extend(collection: list[Redescription], **options: object) -> ExtendOneRequest:
    return ExtendOneRequest(
        mode="es",
        collection=collection,
        epsilon=0.1,
        quality=QualityParameters(x0=MUSHROOM_X0),
        options=SerenadeOptions.model_validate(options),
    )


ODOR_NONE = CatLiteral(attribute="odor", category="n")
CAP_FLAT = CatLiteral(attribute="cap-shape", category="f")
GILL_BROAD = CatLiteral(attribute="gill-size", category="b")
VEIL_WHITE = CatLiteral(attribute="veil-color", category="w")
GOOD = Redescription(left=CAP_FLAT, right=ODOR_NONE)


def test_bad_requests_are_refused_before_any_charge(
    owner: dpmine.Connection, analyst: Account, mushroom: str, numeric: str
) -> None:
    dataset = granted(owner, analyst, mushroom, 1.0)
    people = granted(owner, analyst, numeric, 1.0)
    refused: list[tuple[str, str, BaseModel, type[BaseModel], str]] = [
        (
            mushroom,
            "extend",
            extend(
                [
                    GOOD,
                    Redescription(left=CatLiteral(attribute="hat", category="x"), right=ODOR_NONE),
                ]
            ),
            ExtendOneResponse,
            "collection\\[1\\].*unknown attribute 'hat'",
        ),
        (
            mushroom,
            "extend",
            extend(
                [Redescription(left=CAP_FLAT, right=CatLiteral(attribute="odor", category="zz"))]
            ),
            ExtendOneResponse,
            "not a declared category",
        ),
        (
            mushroom,
            "extend",
            extend([Redescription(left=ODOR_NONE, right=CAP_FLAT)]),  # views swapped
            ExtendOneResponse,
            "collection\\[0\\]",
        ),
        (
            numeric,
            "extend",
            ExtendOneRequest(
                collection=[
                    Redescription(
                        left=BoolLiteral(attribute="smoker"),
                        right=NumLiteral(attribute="age", lower=-5.0),
                    )
                ],
                epsilon=0.1,
                quality=QualityParameters(x0=TABLE_X0),
            ),
            ExtendOneResponse,
            "outside its public range",
        ),
        (
            mushroom,
            "extend",
            extend([Redescription(left=Not(term=CAP_FLAT), right=ODOR_NONE)]),
            ExtendOneResponse,
            "not in Serenade form",
        ),
        (
            mushroom,
            "extend",
            extend(
                [
                    Redescription(
                        left=serenade_query(CAP_FLAT, [("and", GILL_BROAD), ("or", VEIL_WHITE)]),
                        right=ODOR_NONE,
                    )
                ],
                max_literals=2,
            ),
            ExtendOneResponse,
            "max_literals",
        ),
        (
            mushroom,
            "initial-pairs",
            InitialPairsRequest(count=2, epsilon=0.1, quality=QualityParameters(x0=10_000.0)),
            InitialPairsResponse,
            "n_max",
        ),
    ]
    for dataset_id, endpoint, body, model, message in refused:
        with pytest.raises(dpmine.InvalidRequestError, match=message) as caught:
            call(analyst, dataset_id, endpoint, body, model)
        assert caught.value.status_code == 422
    # More ε than the grant covers: refused, nothing charged.
    too_much = InitialPairsRequest(count=2, epsilon=1.5, quality=QualityParameters(x0=MUSHROOM_X0))
    with pytest.raises(dpmine.BudgetExhaustedError) as exhausted:
        call(analyst, mushroom, "initial-pairs", too_much, InitialPairsResponse)
    assert exhausted.value.status_code == 409
    assert entries_of(owner, mushroom, analyst) == []
    assert entries_of(owner, numeric, analyst) == []
    assert dataset.budget().grant_spent == 0.0
    assert people.budget().grant_spent == 0.0
    # The same request within the grant is served and charged exactly once.
    fitting = InitialPairsRequest(count=2, epsilon=1.0, quality=QualityParameters(x0=MUSHROOM_X0))
    served = call(analyst, mushroom, "initial-pairs", fitting, InitialPairsResponse)
    assert isinstance(served, InitialPairsResponse)
    assert len(served.pairs) == 2
    assert [e.epsilon_exact for e in entries_of(owner, mushroom, analyst)] == ["1"]


def test_calibrate_is_free_and_checks_x0(
    owner: dpmine.Connection, analyst: Account, mushroom: str
) -> None:
    granted(owner, analyst, mushroom, 1.0)
    answer = call(
        analyst, mushroom, "calibrate", CalibrateRequest(x0=MUSHROOM_X0), CalibrateResponse
    )
    assert isinstance(answer, CalibrateResponse)
    assert answer.n_max == 10_000
    assert answer.x0 == MUSHROOM_X0
    assert 0.0 < answer.delta < 0.01
    with pytest.raises(dpmine.InvalidRequestError, match="n_max"):
        call(analyst, mushroom, "calibrate", CalibrateRequest(x0=10_000.0), CalibrateResponse)
    assert entries_of(owner, mushroom, analyst) == []
