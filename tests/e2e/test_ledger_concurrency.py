"""Concurrent spending races against a live server, on SQLite and PostgreSQL (DESIGN.md "The
budget ledger": both caps checked and charged in one transaction; idempotent retries).

64 requests of epsilon 0.1 start together (a barrier releases the threads at once, each with its
own connection and Idempotency-Key) against a budget that fits exactly k = 10 of them. Whatever
the interleaving, exactly k must succeed and be charged, the others must be refused with nothing
charged, and every total must be exact.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import dpmine
from dpmine.wire import NoisyCountResponse
from support.datasets import register_table
from support.servers import Account, LiveServer, add_analyst, http_client

REQUESTS = 64
STEP = Decimal("0.1")


def as_float(exact: Decimal) -> float:
    """The float the server displays for an exact amount."""
    return float(Fraction(exact))


@dataclass(frozen=True)
class Outcome:
    """What one racing request got back: a release or an error."""

    analyst: str
    key: str
    response: NoisyCountResponse | None
    error: dpmine.DPMineError | None


def race(
    server: LiveServer,
    dataset_id: str,
    accounts: list[Account],
    *,
    requests: int = REQUESTS,
    key: Callable[[int], str] = lambda _i: str(uuid.uuid4()),
    retries: int = 0,
) -> list[Outcome]:
    """Fire ``requests`` counts of epsilon 0.1 at once, round-robin over the accounts."""
    barrier = threading.Barrier(requests)
    with dpmine.connect(server.url, accounts[0].api_key) as connection:
        info = connection.dataset(dataset_id).info

    def one(index: int) -> Outcome:
        account = accounts[index % len(accounts)]
        idempotency_key = key(index)
        with (
            http_client(server.url) as http,
            dpmine.connect(server.url, account.api_key, http=http, retries=retries) as connection,
        ):
            handle = dpmine.DatasetHandle(connection, info)
            barrier.wait(timeout=60)
            try:
                response = handle.count("[smoker]", epsilon=0.1, idempotency_key=idempotency_key)
            except dpmine.DPMineError as error:
                return Outcome(account.name, idempotency_key, None, error)
            return Outcome(account.name, idempotency_key, response, None)

    with ThreadPoolExecutor(max_workers=requests) as pool:
        return list(pool.map(one, range(requests)))


def check_race(
    owner: dpmine.Connection, dataset_id: str, outcomes: list[Outcome], *, winners: int
) -> list[Outcome]:
    """Exactly ``winners`` succeeded and were charged; the rest were refused for free."""
    succeeded = [o for o in outcomes if o.response is not None]
    refused = [o for o in outcomes if o.response is None]
    unexpected = [o.error for o in refused if not isinstance(o.error, dpmine.BudgetExhaustedError)]
    assert unexpected == [], "every losing request must be refused with BudgetExhausted"
    assert len(succeeded) == winners
    assert all(
        isinstance(o.error, dpmine.ServerError) and o.error.status_code == 409 for o in refused
    )

    entries = owner.admin.ledger(dataset_id)
    assert len(entries) == winners
    assert all(entry.status == "released" for entry in entries)
    assert all(entry.epsilon_exact == "0.1" for entry in entries)
    assert sum((Decimal(e.epsilon_exact) for e in entries), Decimal(0)) == STEP * winners
    assert sorted(o.response.receipt.ledger_entry_id for o in succeeded if o.response) == sorted(
        entry.id for entry in entries
    )
    by_id = {entry.id: entry for entry in entries}
    for outcome in succeeded:
        assert outcome.response is not None
        entry = by_id[outcome.response.receipt.ledger_entry_id]
        assert entry.idempotency_key == outcome.key
        assert entry.principal == outcome.analyst
        assert NoisyCountResponse.model_validate(entry.release) == outcome.response
    assert owner.admin.verify_ledger() == {"consistent": True, "problems": []}
    return succeeded


def grant_spent(owner: dpmine.Connection, dataset_id: str) -> dict[str, float]:
    """Each analyst's spent total on the dataset, as the owner sees it."""
    return {grant.analyst: grant.spent for grant in owner.admin.grants(dataset_id)}


def test_the_grant_binds(
    any_server: LiveServer, owner: dpmine.Connection, analyst: Account, tmp_path: Path
) -> None:
    info = register_table(owner, tmp_path, epsilon_cap=50.0)
    owner.admin.grant(info.id, analyst.name, 1.0)
    outcomes = race(any_server, info.id, [analyst])
    succeeded = check_race(owner, info.id, outcomes, winners=10)
    assert all("your grant cannot cover" in str(o.error) for o in outcomes if o.error)
    # The charges were serialised: each winner saw a different remaining amount.
    remaining = sorted(o.response.receipt.remaining_epsilon for o in succeeded if o.response)
    assert remaining == sorted(as_float(Decimal(1) - STEP * i) for i in range(1, 11))
    budget = analyst.connection.dataset(info.id).budget()
    assert budget.grant_spent == 1.0
    assert budget.remaining_epsilon == 0.0
    assert budget.dataset_remaining == 49.0
    assert grant_spent(owner, info.id) == {analyst.name: 1.0}


def test_the_dataset_cap_binds(
    any_server: LiveServer, owner: dpmine.Connection, analyst: Account, tmp_path: Path
) -> None:
    info = register_table(owner, tmp_path, epsilon_cap=1.0)
    owner.admin.grant(info.id, analyst.name, 5.0)
    outcomes = race(any_server, info.id, [analyst])
    check_race(owner, info.id, outcomes, winners=10)
    assert all("dataset cap cannot cover" in str(o.error) for o in outcomes if o.error)
    budget = analyst.connection.dataset(info.id).budget()
    assert budget.grant_spent == 1.0
    assert budget.dataset_remaining == 0.0
    assert budget.remaining_epsilon == 0.0
    assert budget.grant_epsilon == 5.0


def test_two_analysts_compete_for_the_dataset_cap(
    any_server: LiveServer, owner: dpmine.Connection, analyst: Account, tmp_path: Path
) -> None:
    rival = add_analyst(any_server, owner)
    with rival.connection:
        info = register_table(owner, tmp_path, epsilon_cap=1.0)
        owner.admin.grant(info.id, analyst.name, 0.8)
        owner.admin.grant(info.id, rival.name, 0.8)
        outcomes = race(any_server, info.id, [analyst, rival])
        succeeded = check_race(owner, info.id, outcomes, winners=10)
        wins = {
            name: sum(1 for o in succeeded if o.analyst == name)
            for name in (analyst.name, rival.name)
        }
        assert all(count <= 8 for count in wins.values()), wins
        spent = grant_spent(owner, info.id)
        assert spent == {name: as_float(STEP * count) for name, count in wins.items()}
        entries = owner.admin.ledger(info.id)
        for name, count in wins.items():
            mine = [entry for entry in entries if entry.principal == name]
            assert sum((Decimal(e.epsilon_exact) for e in mine), Decimal(0)) == STEP * count
        assert analyst.connection.dataset(info.id).budget().dataset_remaining == 0.0
        assert rival.connection.dataset(info.id).budget().dataset_remaining == 0.0


def test_both_caps_bind_together(
    any_server: LiveServer, owner: dpmine.Connection, analyst: Account, tmp_path: Path
) -> None:
    """Grants of 0.5 each inside a cap of 1.0: both grants and the cap run out at once."""
    rival = add_analyst(any_server, owner)
    with rival.connection:
        info = register_table(owner, tmp_path, epsilon_cap=1.0)
        owner.admin.grant(info.id, analyst.name, 0.5)
        owner.admin.grant(info.id, rival.name, 0.5)
        outcomes = race(any_server, info.id, [analyst, rival])
        succeeded = check_race(owner, info.id, outcomes, winners=10)
        assert sorted(o.analyst for o in succeeded) == sorted([analyst.name] * 5 + [rival.name] * 5)
        assert grant_spent(owner, info.id) == {analyst.name: 0.5, rival.name: 0.5}


def test_concurrent_retries_of_one_key_charge_once(
    any_server: LiveServer, owner: dpmine.Connection, analyst: Account, tmp_path: Path
) -> None:
    threads = 16
    info = register_table(owner, tmp_path, epsilon_cap=5.0)
    owner.admin.grant(info.id, analyst.name, 1.0)
    key = str(uuid.uuid4())
    # Retries: a copy that arrives while the first is computing is told "in progress" (409)
    # and the client retries it with the same key until the stored release is there.
    outcomes = race(any_server, info.id, [analyst], requests=threads, key=lambda _i: key, retries=8)
    errors = [o.error for o in outcomes if o.error is not None]
    assert errors == []
    responses = [o.response for o in outcomes if o.response is not None]
    assert len(responses) == threads
    first = next(r for r in responses if not r.receipt.replayed)
    assert sum(1 for r in responses if not r.receipt.replayed) == 1, "one computation only"
    for response in responses:
        assert response.count == first.count
        assert response.receipt.model_copy(update={"replayed": False}) == first.receipt
    entries = owner.admin.ledger(info.id)
    assert [entry.idempotency_key for entry in entries] == [key]
    assert entries[0].epsilon_exact == "0.1"
    assert analyst.connection.dataset(info.id).budget().grant_spent == 0.1
    assert owner.admin.verify_ledger() == {"consistent": True, "problems": []}
