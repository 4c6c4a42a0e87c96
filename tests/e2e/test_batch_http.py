"""End to end: batches of independent calls over real HTTP (``POST /v1/datasets/{id}/batch``;
issue #23, item 2) against a live uvicorn server in test mode.

A batch is charged as the sum of its parts, all or none, with one ledger entry and one receipt
per part; an Idempotency-Key covers the whole batch; a bad part, a batch over the grant or over
the public part limit is refused before anything is charged. Data: the bundled Mushroom file.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest

import dpmine
from dpmine.miners import SerenadeCS, SerenadeES
from dpmine.wire import (
    MAX_BATCH_PARTS,
    ComputeQualityRequest,
    ComputeQualityResponse,
    ExtendOneRequest,
    ExtendOneResponse,
    LedgerEntryInfo,
    QualityParameters,
    Redescription,
)
from dpmine_server.operations.redescriptions import batch_shared_proposals
from support.accounts import analyst_account, exact_total, mine_entries, owner_connection
from support.accounts import seeded_server as seeded
from support.datasets import REGIONS, register_mushroom, register_table, table_metadata
from support.servers import Account, LiveServer, http_client


def _literal(attribute: str, category: str) -> dict[str, str]:
    return {"kind": "cat", "attribute": attribute, "category": category}


#: Three quality checks of different redescriptions at different ε (their exact sum: 0.35).
CHECKS: list[tuple[dict[str, str], dict[str, str], float]] = [
    (_literal("cap-shape", "x"), _literal("odor", "n"), 0.1),
    (_literal("gill-size", "b"), _literal("class", "e"), 0.05),
    (_literal("cap-color", "n"), _literal("odor", "f"), 0.2),
]


def _quality(left: dict[str, str], right: dict[str, str], epsilon: float) -> dict[str, Any]:
    return {
        "redescription": {"left": left, "right": right},
        "epsilon": epsilon,
        "mode": "cells",
    }


def _batch(parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"parts": [{"operation": "red.compute_quality", "request": p} for p in parts]}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with seeded(tmp_path_factory.mktemp("batch-server"), name="batch", seed="2311") as live:
        yield live


@pytest.fixture(scope="module")
def owner(server: LiveServer) -> Iterator[dpmine.Connection]:
    with owner_connection(server) as connection:
        yield connection


@pytest.fixture(scope="module")
def dataset_id(owner: dpmine.Connection) -> str:
    return register_mushroom(owner, epsilon_cap=50.0).id


@pytest.fixture
def analyst(server: LiveServer, owner: dpmine.Connection, dataset_id: str) -> Iterator[Account]:
    with analyst_account(server, owner) as account:
        owner.admin.grant(dataset_id, account.name, 1.0)
        yield account


def _post(
    server: LiveServer, account: Account, dataset_id: str, body: dict[str, Any], key: str
) -> Any:
    with http_client(server.url) as client:
        return client.post(
            f"/v1/datasets/{dataset_id}/batch",
            json=body,
            headers={"X-API-Key": account.api_key, "Idempotency-Key": key},
        )


def _spent(account: Account, dataset_id: str) -> float:
    return account.connection.dataset(dataset_id).budget().grant_spent


def test_a_batch_charges_each_part_its_own_entry_and_receipt(
    owner: dpmine.Connection, analyst: Account, dataset_id: str
) -> None:
    handle = analyst.connection.dataset(dataset_id)
    requests = [
        ComputeQualityRequest(
            redescription=Redescription.model_validate({"left": left, "right": right}),
            epsilon=epsilon,
        )
        for left, right, epsilon in CHECKS
    ]
    released = handle.run_batch(requests)
    assert all(isinstance(part, ComputeQualityResponse) for part in released)
    entries = mine_entries(owner, dataset_id, analyst)
    # One ledger line per part, in order, each its part's operation, parameters and exact ε.
    assert [entry.id for entry in entries] == [part.receipt.ledger_entry_id for part in released]
    assert [entry.operation for entry in entries] == ["red.compute_quality"] * 3
    assert [Decimal(entry.epsilon_exact) for entry in entries] == [
        Decimal(str(epsilon)) for _l, _r, epsilon in CHECKS
    ]
    assert [e.parameters["redescription"]["left"]["attribute"] for e in entries] == [
        left["attribute"] for left, _r, _e in CHECKS
    ]
    assert {entry.status for entry in entries} == {"released"}
    # The batch is charged the sum of its parts, and each receipt shows its own part's ε.
    assert exact_total(entries) == Decimal("0.35")
    assert Decimal(str(handle.budget().grant_spent)) == Decimal("0.35")
    assert [part.receipt.epsilon_exact for part in released] == [
        entry.epsilon_exact for entry in entries
    ]
    assert [entry.release for entry in entries] == [
        part.model_dump(mode="json") for part in released
    ]
    # The caps moved by exactly the entries' sum (the ledger's own consistency check).
    assert owner.admin.verify_ledger() == {"consistent": True, "problems": []}


def test_parts_draw_their_own_noise(analyst: Account, dataset_id: str) -> None:
    """Two identical parts are two mechanisms: their noisy cells differ (at ε = 0.01 a cell's
    noise has scale 100, so four equal cells by chance have probability below 10⁻⁸)."""
    handle = analyst.connection.dataset(dataset_id)
    left, right, _epsilon = CHECKS[0]
    request = ComputeQualityRequest(
        redescription=Redescription.model_validate({"left": left, "right": right}), epsilon=0.01
    )
    first, second = handle.run_batch([request, request])
    assert first.receipt.ledger_entry_id != second.receipt.ledger_entry_id
    assert first.cells != second.cells


def test_a_retry_replays_the_batch_and_another_body_is_refused(
    server: LiveServer, owner: dpmine.Connection, analyst: Account, dataset_id: str
) -> None:
    body = _batch([_quality(*check) for check in CHECKS])
    key = str(uuid.uuid4())
    original = _post(server, analyst, dataset_id, body, key)
    assert original.status_code == 200, original.text
    entries = mine_entries(owner, dataset_id, analyst)
    retry = _post(server, analyst, dataset_id, body, key)
    assert retry.status_code == 200, retry.text
    assert retry.headers.get("Idempotent-Replayed") == "true"
    for first, again in zip(original.json()["parts"], retry.json()["parts"], strict=True):
        assert again["receipt"].pop("replayed") is True
        first["receipt"].pop("replayed", None)
        assert again == first
    assert mine_entries(owner, dataset_id, analyst) == entries  # nothing charged again
    for changed in (
        _batch([_quality(*check) for check in CHECKS[:2]]),  # fewer parts
        _batch([_quality(*check) for check in [*CHECKS, CHECKS[0]]]),  # more parts
        _batch([_quality(*check) for check in reversed(CHECKS)]),  # another order
    ):
        refused = _post(server, analyst, dataset_id, changed, key)
        assert refused.status_code == 409, refused.text
        assert refused.json()["error"] == "IdempotencyConflict"
    assert mine_entries(owner, dataset_id, analyst) == entries


def test_a_bad_part_refuses_the_batch_before_any_charge(
    server: LiveServer, owner: dpmine.Connection, analyst: Account, dataset_id: str
) -> None:
    good = [_quality(*check) for check in CHECKS]
    unknown = _quality(_literal("no-such-attribute", "x"), _literal("odor", "n"), 0.1)
    cases = {
        "unknown attribute": ([good[0], unknown, good[1]], 422, "batch part 1"),
        "job operation": (
            [good[0]],
            422,
            "batch part 1 (tree.leaf_counts): tree.leaf_counts runs as a job",
        ),
        "over the grant": ([_quality(*CHECKS[0][:2], 0.6)] * 2, 409, "grant cannot cover"),
    }
    for label, (parts, status, says) in cases.items():
        body = _batch(parts)
        if label == "job operation":
            body["parts"].append({"operation": "tree.leaf_counts", "request": {}})
        refused = _post(server, analyst, dataset_id, body, str(uuid.uuid4()))
        assert refused.status_code == status, (label, refused.text)
        assert says in refused.json()["detail"], (label, refused.text)
        assert mine_entries(owner, dataset_id, analyst) == [], label
        assert _spent(analyst, dataset_id) == 0.0, label
    # Nothing was lost either: the same key, fixed, runs the batch once.
    key = str(uuid.uuid4())
    assert _post(server, analyst, dataset_id, _batch([good[0], unknown]), key).status_code == 422
    fixed = _post(server, analyst, dataset_id, _batch(good[:2]), key)
    assert fixed.status_code == 200, fixed.text
    assert len(mine_entries(owner, dataset_id, analyst)) == 2


def test_the_part_limit_is_enforced_before_any_charge(
    server: LiveServer, owner: dpmine.Connection, analyst: Account, dataset_id: str
) -> None:
    tiny = _quality(*CHECKS[0][:2], 0.001)
    over = _post(server, analyst, dataset_id, _batch([tiny] * (MAX_BATCH_PARTS + 1)), "over")
    assert over.status_code == 422, over.text
    assert f"at most {MAX_BATCH_PARTS}" in over.json()["detail"]
    assert mine_entries(owner, dataset_id, analyst) == []
    full = _post(server, analyst, dataset_id, _batch([tiny] * MAX_BATCH_PARTS), "full")
    assert full.status_code == 200, full.text
    entries: list[LedgerEntryInfo] = mine_entries(owner, dataset_id, analyst)
    assert len(entries) == MAX_BATCH_PARTS
    assert exact_total(entries) == Decimal("0.064")


@pytest.mark.parametrize("batched", [True, False])
def test_serenade_sends_its_independent_calls_in_batches(
    owner: dpmine.Connection, analyst: Account, dataset_id: str, batched: bool
) -> None:
    """ES's final checks and CS's chain starts are independent: batched by default, one by one
    with ``batched=False``; the same calls are charged either way (one receipt each)."""
    handle = analyst.connection.dataset(dataset_id)
    miners: list[SerenadeES | SerenadeCS] = [
        SerenadeES(preset="paper", epsilon=0.4, n_initial=3, rounds=1, x0=812.0, batched=batched),
        SerenadeCS(preset="paper", epsilon=0.4, n_initial=3, tau=1, x0=812.0, batched=batched),
    ]
    for miner in miners:
        before = {entry.id for entry in mine_entries(owner, dataset_id, analyst)}
        miner.mine(handle)
        entries = [e for e in mine_entries(owner, dataset_id, analyst) if e.id not in before]
        assert sorted(e.id for e in entries) == sorted(r.ledger_entry_id for r in miner.receipts_)
        checks = [e for e in entries if e.operation == "red.compute_quality"]
        first_checks = checks[:3] if isinstance(miner, SerenadeCS) else checks
        # The parts of one batch share their reservation's timestamp; separate calls do not.
        shared = len({entry.created_at for entry in first_checks}) == 1
        assert len(first_checks) >= 2  # ES measures a repeated redescription once
        assert shared is batched


def test_extension_draws_sharing_one_proposal_cap_are_each_released(
    owner: dpmine.Connection,
    analyst: Account,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """CS extension draws of a table with numeric attributes at a small ε sample their
    thresholds by rejection, so a batch of them spends one joint proposal cap
    (operations/redescriptions.py ``batch_shared_proposals``): each part is still its own
    draw, charged and released with its own receipt, thresholds on the public lattice."""
    table = register_table(owner, tmp_path_factory.mktemp("batch-table"), epsilon_cap=5.0)
    owner.admin.grant(table.id, analyst.name, 1.0)
    handle = analyst.connection.dataset(table.id)
    pair = Redescription.model_validate(
        {
            "left": {"kind": "bool", "attribute": "smoker"},
            "right": {"kind": "cat", "attribute": "region", "category": REGIONS[0]},
        }
    )
    request = ExtendOneRequest(
        mode="cs", collection=[pair], epsilon=0.05, quality=QualityParameters(x0=100.0)
    )
    assert batch_shared_proposals(
        [("serenade.extend_one", request.model_dump(mode="json"))] * 4, table_metadata()
    )
    released = handle.run_batch([request] * 4)
    assert all(isinstance(part, ExtendOneResponse) for part in released)
    assert all(part.threshold_mode == "continuous" for part in released)
    assert len({part.receipt.ledger_entry_id for part in released}) == 4
    assert all(part.position == 0 for part in released)
    entries = mine_entries(owner, table.id, analyst)
    assert [entry.status for entry in entries] == ["released"] * 4
    assert exact_total(entries) == Decimal("0.2")
