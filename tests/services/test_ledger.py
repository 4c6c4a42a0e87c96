"""The privacy-budget ledger on a real (temp) SQLite database (DESIGN.md "The budget ledger").

Exact amounts, the two caps in one transaction, idempotent replays, the status machine
reserved → released | failed | interrupted, crash recovery, the consistency check, and
concurrent spending (DP-ENGINES.md R1, R2). Every test runs on a dataset of each ledger unit,
pure epsilon and zCDP rho (issue #24): the ledger's arithmetic is the same integers.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select, text, update
from sqlalchemy.orm import Session, sessionmaker

from dpmine_server.db.base import make_engine, make_session_factory
from dpmine_server.db.migrate import upgrade_to_head
from dpmine_server.db.models import Dataset, Grant, LedgerEntry, Principal, utcnow
from dpmine_server.dp.budget import EPSILON_UNITS_PER_ONE, AccountingUnit, Epsilon, Rho
from dpmine_server.errors import (
    BudgetExhausted,
    ChargeKeptNoResult,
    IdempotencyConflict,
    InternalError,
    NotFound,
    RequestInProgress,
)
from dpmine_server.services.ledger import Ledger, Reservation, request_fingerprint
from dpmine_server.services.principals import create_principal, get_principal

SECRET = "ledger-tests-secret-0123456789"
ONE = EPSILON_UNITS_PER_ONE
#: The unit of the datasets the current test creates (set by the ``unit`` fixture).
_UNIT: list[AccountingUnit] = ["pure"]


@pytest.fixture(autouse=True, params=["pure", "zcdp"])
def unit(request: pytest.FixtureRequest) -> Iterator[AccountingUnit]:
    """Run the test on datasets of this ledger unit."""
    _UNIT[0] = request.param
    yield request.param
    _UNIT[0] = "pure"


def amount() -> type[Epsilon] | type[Rho]:
    """The amount type of the current unit."""
    return Rho if _UNIT[0] == "zcdp" else Epsilon


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    """A migrated SQLite database."""
    built = make_engine(f"sqlite:///{tmp_path / 'ledger.sqlite3'}")
    upgrade_to_head(built)
    yield built
    built.dispose()


@pytest.fixture
def sessions(engine: Engine) -> sessionmaker[Session]:
    """Sessions on the database."""
    factory: sessionmaker[Session] = make_session_factory(engine)
    return factory


@pytest.fixture
def ledger(engine: Engine, sessions: sessionmaker[Session]) -> Ledger:
    """The ledger under test."""
    return Ledger(engine, sessions)


def add_analyst(sessions: sessionmaker[Session], name: str) -> Principal:
    """A new analyst (detached, attributes loaded)."""
    with sessions() as session, session.begin():
        create_principal(session, name=name, role="analyst", secret=SECRET)
    with sessions() as session:
        return get_principal(session, name)


def add_dataset(
    sessions: sessionmaker[Session],
    dataset_id: str,
    *,
    cap: str,
    grants: dict[Principal, str],
    status: str = "active",
) -> None:
    """A dataset row with its cap and grants (no data: the ledger never reads data)."""
    with sessions() as session, session.begin():
        session.add(
            Dataset(
                id=dataset_id,
                name=dataset_id,
                kind="table",
                metadata_json={},
                source_json={},
                version=1,
                status=status,
                cap_units=amount().cap(cap).units,
                spent_units=0,
                accounting=_UNIT[0],
                created_at=utcnow(),
            )
        )
        session.flush()
        for principal, limit in grants.items():
            session.add(
                Grant(
                    dataset_id=dataset_id,
                    analyst_id=principal.id,
                    limit_units=amount().cap(limit).units,
                    spent_units=0,
                    updated_at=utcnow(),
                )
            )


@pytest.fixture
def alice(sessions: sessionmaker[Session]) -> Principal:
    """Analyst alice."""
    return add_analyst(sessions, "alice")


@pytest.fixture
def bob(sessions: sessionmaker[Session]) -> Principal:
    """Analyst bob."""
    return add_analyst(sessions, "bob")


def reserve(
    ledger: Ledger,
    principal: Principal,
    dataset_id: str,
    epsilon: float | str,
    *,
    key: str | None = None,
    body: dict[str, Any] | None = None,
) -> Reservation:
    """Reserve a ``count.noisy``-like charge."""
    parameters = body if body is not None else {"epsilon": str(epsilon)}
    return ledger.reserve(
        principal=principal,
        dataset_id=dataset_id,
        operation="count.noisy",
        parameters=parameters,
        cost=amount().charge(epsilon),
        guarantee="pure",
        idempotency_key=key,
        request_hash=request_fingerprint("count.noisy", dataset_id, parameters),
    )


def spent(
    sessions: sessionmaker[Session], dataset_id: str, analyst: Principal | None = None
) -> int:
    """Units spent on the dataset, or by one analyst's grant."""
    with sessions() as session:
        if analyst is None:
            dataset = session.get(Dataset, dataset_id)
            assert dataset is not None
            return dataset.spent_units
        grant = session.scalar(
            select(Grant).where(Grant.dataset_id == dataset_id, Grant.analyst_id == analyst.id)
        )
        assert grant is not None
        return grant.spent_units


def entries(sessions: sessionmaker[Session]) -> list[LedgerEntry]:
    """Every entry, oldest first."""
    with sessions() as session:
        return list(session.scalars(select(LedgerEntry).order_by(LedgerEntry.id)))


RELEASE = {"count": 12, "receipt": {"ledger_entry_id": 1}}


# -- exact arithmetic and the two caps ------------------------------------------------------------


class TestCaps:
    def test_ten_tenths_fill_a_cap_of_one_exactly(
        self, ledger: Ledger, sessions: sessionmaker[Session], alice: Principal
    ) -> None:
        assert sum([0.1] * 10) != 1.0  # what float bookkeeping would get wrong
        add_dataset(sessions, "d", cap="1", grants={alice: "1"})
        for _ in range(10):
            ledger.complete(reserve(ledger, alice, "d", 0.1).entry_id, RELEASE)
        assert spent(sessions, "d") == spent(sessions, "d", alice) == ONE
        assert ledger.remaining(alice.id, "d") == amount().zero()
        with pytest.raises(BudgetExhausted, match="remaining on the dataset=0;"):
            reserve(ledger, alice, "d", 0.1)
        with pytest.raises(BudgetExhausted):
            reserve(ledger, alice, "d", "0.000000000001")  # one unit
        assert len(entries(sessions)) == 10
        assert ledger.verify() == []

    def test_dataset_cap_binds_before_a_larger_grant(
        self, ledger: Ledger, sessions: sessionmaker[Session], alice: Principal, bob: Principal
    ) -> None:
        add_dataset(sessions, "d", cap="1", grants={alice: "5", bob: "5"})
        reserve(ledger, alice, "d", 0.6)
        with pytest.raises(BudgetExhausted, match=r"dataset cap.*remaining on the dataset=0\.4"):
            reserve(ledger, bob, "d", 0.6)
        assert spent(sessions, "d", bob) == 0
        reserve(ledger, bob, "d", 0.4)
        assert spent(sessions, "d") == ONE

    def test_grant_binds_inside_the_cap(
        self, ledger: Ledger, sessions: sessionmaker[Session], alice: Principal
    ) -> None:
        add_dataset(sessions, "d", cap="5", grants={alice: "0.5"})
        reserve(ledger, alice, "d", 0.3)
        with pytest.raises(BudgetExhausted, match=r"your grant.*remaining in your grant=0\.2"):
            reserve(ledger, alice, "d", 0.3)
        assert spent(sessions, "d") == spent(sessions, "d", alice) == amount().charge(0.3).units
        assert len(entries(sessions)) == 1

    def test_remaining_is_the_smaller_of_grant_and_cap(
        self, ledger: Ledger, sessions: sessionmaker[Session], alice: Principal, bob: Principal
    ) -> None:
        add_dataset(sessions, "d", cap="1", grants={alice: "0.7", bob: "0.9"})
        reserve(ledger, bob, "d", 0.5)
        assert ledger.remaining(alice.id, "d") == amount().charge("0.5")
        status = ledger.budget_status(alice, "d")
        assert status.accounting == _UNIT[0]
        if status.zcdp is None:
            assert (status.grant_epsilon, status.grant_spent) == (0.7, 0.0)
            assert (status.dataset_remaining, status.remaining_epsilon) == (0.5, 0.5)
        else:  # rho exactly; epsilon as implied (total) or one generic call's (remaining)
            assert (status.zcdp.rho_exact, status.zcdp.rho_spent) == ("0.7", 0.0)
            assert status.zcdp.rho_remaining == 0.5
            assert status.remaining_epsilon == 1.0  # sqrt(2 * 0.5)
            assert status.grant_epsilon == status.zcdp.epsilon > 0.7

    def test_a_charge_in_the_other_unit_is_refused(
        self, ledger: Ledger, sessions: sessionmaker[Session], alice: Principal
    ) -> None:
        add_dataset(sessions, "d", cap="1", grants={alice: "1"})
        other = Epsilon if _UNIT[0] == "zcdp" else Rho
        with pytest.raises(InternalError, match="cannot go to dataset 'd'"):
            ledger.reserve(
                principal=alice,
                dataset_id="d",
                operation="count.noisy",
                parameters={},
                cost=other.charge("0.1"),
                guarantee="pure",
                idempotency_key=None,
                request_hash="0" * 64,
            )
        assert spent(sessions, "d") == spent(sessions, "d", alice) == 0
        assert entries(sessions) == []

    @pytest.mark.parametrize("case", ["no grant", "retired", "unknown"])
    def test_unavailable_datasets_are_not_found(
        self,
        ledger: Ledger,
        sessions: sessionmaker[Session],
        alice: Principal,
        bob: Principal,
        case: str,
    ) -> None:
        add_dataset(sessions, "d", cap="1", grants={bob: "1"})
        add_dataset(sessions, "old", cap="1", grants={alice: "1"}, status="retired")
        dataset_id = {"no grant": "d", "retired": "old", "unknown": "zzz"}[case]
        with pytest.raises(NotFound):
            reserve(ledger, alice, dataset_id, 0.1)
        assert entries(sessions) == []
        assert spent(sessions, "d") == spent(sessions, "old") == 0

    def test_a_reservation_needs_a_positive_cost(
        self, ledger: Ledger, sessions: sessionmaker[Session], alice: Principal
    ) -> None:
        add_dataset(sessions, "d", cap="1", grants={alice: "1"})
        with pytest.raises(InternalError):
            ledger.reserve(
                principal=alice,
                dataset_id="d",
                operation="count.noisy",
                parameters={},
                cost=amount().zero(),
                guarantee="pure",
                idempotency_key=None,
                request_hash="0" * 64,
            )


# -- idempotency ----------------------------------------------------------------------------------


class TestIdempotency:
    @pytest.fixture(autouse=True)
    def _dataset(self, sessions: sessionmaker[Session], alice: Principal, bob: Principal) -> None:
        add_dataset(sessions, "d", cap="2", grants={alice: "1", bob: "1"})

    def test_retry_replays_the_stored_release(
        self, ledger: Ledger, sessions: sessionmaker[Session], alice: Principal
    ) -> None:
        first = reserve(ledger, alice, "d", 0.25, key="k")
        assert not first.is_replay
        ledger.complete(first.entry_id, RELEASE)
        again = reserve(ledger, alice, "d", 0.25, key="k")
        assert again.is_replay
        assert again.replayed_release == RELEASE
        assert (again.entry_id, again.cost) == (first.entry_id, first.cost)
        assert again.remaining_after == amount().charge("0.75")
        assert spent(sessions, "d") == amount().charge(0.25).units

    def test_same_key_other_request_is_a_conflict(
        self, ledger: Ledger, sessions: sessionmaker[Session], alice: Principal
    ) -> None:
        first = reserve(ledger, alice, "d", 0.25, key="k")
        with pytest.raises(IdempotencyConflict):
            reserve(ledger, alice, "d", 0.5, key="k")  # while still reserved
        ledger.complete(first.entry_id, RELEASE)
        with pytest.raises(IdempotencyConflict):
            reserve(ledger, alice, "d", 0.25, key="k", body={"epsilon": "0.25", "x": 1})
        assert len(entries(sessions)) == 1

    def test_retry_while_running_is_in_progress(
        self, ledger: Ledger, sessions: sessionmaker[Session], alice: Principal
    ) -> None:
        reserve(ledger, alice, "d", 0.25, key="k")
        with pytest.raises(RequestInProgress):
            reserve(ledger, alice, "d", 0.25, key="k")
        assert len(entries(sessions)) == 1

    def test_retry_after_a_failure_is_refused_and_not_recharged(
        self, ledger: Ledger, sessions: sessionmaker[Session], alice: Principal
    ) -> None:
        first = reserve(ledger, alice, "d", 0.25, key="k")
        ledger.fail(first.entry_id)
        with pytest.raises(ChargeKeptNoResult, match="charge was kept and no result exists"):
            reserve(ledger, alice, "d", 0.25, key="k")
        assert spent(sessions, "d") == amount().charge(0.25).units  # the charge stands
        second = reserve(ledger, alice, "d", 0.25, key="k2")
        assert second.entry_id != first.entry_id
        assert spent(sessions, "d") == amount().charge(0.5).units

    def test_keys_belong_to_one_principal(
        self, ledger: Ledger, sessions: sessionmaker[Session], alice: Principal, bob: Principal
    ) -> None:
        mine = reserve(ledger, alice, "d", 0.25, key="shared")
        theirs = reserve(ledger, bob, "d", 0.25, key="shared")
        assert mine.entry_id != theirs.entry_id
        assert not theirs.is_replay
        assert spent(sessions, "d") == amount().charge(0.5).units

    def test_requests_without_keys_are_never_replayed(
        self, ledger: Ledger, sessions: sessionmaker[Session], alice: Principal
    ) -> None:
        first = reserve(ledger, alice, "d", 0.25)
        second = reserve(ledger, alice, "d", 0.25)
        assert first.entry_id != second.entry_id
        assert len(entries(sessions)) == 2

    def test_fingerprint_is_canonical(self) -> None:
        a = request_fingerprint("count.noisy", "d", {"epsilon": 0.1, "predicate": None})
        b = request_fingerprint("count.noisy", "d", {"predicate": None, "epsilon": 0.1})
        assert a == b
        assert len(a) == 64
        assert a != request_fingerprint("count.noisy", "e", {"epsilon": 0.1, "predicate": None})
        assert a != request_fingerprint("red.compute_quality", "d", {"epsilon": 0.1})
        assert a != request_fingerprint("count.noisy", "d", {"epsilon": 0.2, "predicate": None})


# -- the status machine ---------------------------------------------------------------------------


class TestTransitions:
    @pytest.fixture(autouse=True)
    def _dataset(self, sessions: sessionmaker[Session], alice: Principal) -> None:
        add_dataset(sessions, "d", cap="1", grants={alice: "1"})

    @pytest.mark.parametrize(
        ("first", "second"),
        [("complete", "complete"), ("complete", "fail"), ("fail", "complete"), ("fail", "fail")],
    )
    def test_only_reserved_entries_move(
        self,
        ledger: Ledger,
        sessions: sessionmaker[Session],
        alice: Principal,
        first: str,
        second: str,
    ) -> None:
        entry_id = reserve(ledger, alice, "d", 0.1).entry_id

        def move(action: str) -> None:
            if action == "complete":
                ledger.complete(entry_id, RELEASE)
            else:
                ledger.fail(entry_id)

        move(first)
        [before] = entries(sessions)
        with pytest.raises(InternalError, match="not reserved"):
            move(second)
        [after] = entries(sessions)
        assert (after.status, after.release) == (before.status, before.release)

    def test_unknown_entry(self, ledger: Ledger) -> None:
        with pytest.raises(InternalError):
            ledger.complete(12345, RELEASE)
        with pytest.raises(InternalError):
            ledger.fail(12345)

    def test_interrupt_reserved_keeps_the_charge(
        self, ledger: Ledger, sessions: sessionmaker[Session], alice: Principal
    ) -> None:
        stale = reserve(ledger, alice, "d", 0.1, key="stale")
        done = reserve(ledger, alice, "d", 0.1, key="done")
        ledger.complete(done.entry_id, RELEASE)
        cutoff = utcnow()
        fresh = reserve(ledger, alice, "d", 0.1, key="fresh")
        assert ledger.interrupt_reserved(before=cutoff) == 1
        statuses = {e.id: e.status for e in entries(sessions)}
        assert statuses == {
            stale.entry_id: "interrupted",
            done.entry_id: "released",
            fresh.entry_id: "reserved",
        }
        assert spent(sessions, "d") == amount().charge("0.3").units
        with pytest.raises(ChargeKeptNoResult, match="server stopped during it"):
            reserve(ledger, alice, "d", 0.1, key="stale")
        with pytest.raises(InternalError):
            ledger.complete(stale.entry_id, RELEASE)
        assert ledger.interrupt_reserved(before=utcnow() + timedelta(seconds=1)) == 1


# -- the consistency check ------------------------------------------------------------------------


class TestVerify:
    @pytest.fixture(autouse=True)
    def _spend(self, ledger: Ledger, sessions: sessionmaker[Session], alice: Principal) -> None:
        add_dataset(sessions, "d", cap="1", grants={alice: "1"})
        ledger.complete(reserve(ledger, alice, "d", 0.25).entry_id, RELEASE)
        ledger.complete(reserve(ledger, alice, "d", 0.5).entry_id, RELEASE)

    def test_consistent_ledger(self, ledger: Ledger) -> None:
        assert ledger.verify() == []

    def test_failed_and_interrupted_entries_are_consistent(
        self, ledger: Ledger, alice: Principal
    ) -> None:
        ledger.fail(reserve(ledger, alice, "d", 0.1).entry_id)
        reserve(ledger, alice, "d", 0.1)
        ledger.interrupt_reserved(before=utcnow() + timedelta(seconds=1))
        assert ledger.verify() == []

    def test_tampered_dataset_total_is_detected(
        self, ledger: Ledger, sessions: sessionmaker[Session]
    ) -> None:
        with sessions() as session, session.begin():
            session.execute(
                update(Dataset).where(Dataset.id == "d").values(spent_units=Dataset.spent_units - 1)
            )
        [problem] = ledger.verify()
        assert problem.startswith("dataset d: spent")
        assert str(amount().charge("0.75").units) in problem

    def test_tampered_grant_total_is_detected(
        self, ledger: Ledger, sessions: sessionmaker[Session]
    ) -> None:
        with sessions() as session, session.begin():
            session.execute(update(Grant).values(spent_units=0))
        [problem] = ledger.verify()
        assert problem.startswith("grant d/")

    def test_deleted_entry_is_detected(
        self, ledger: Ledger, sessions: sessionmaker[Session]
    ) -> None:
        with sessions() as session, session.begin():
            session.execute(text("DELETE FROM ledger_entries WHERE id = 1"))
        problems = ledger.verify()
        assert len(problems) == 2  # the dataset total and the grant total

    def test_release_without_released_status_is_detected(
        self, ledger: Ledger, sessions: sessionmaker[Session]
    ) -> None:
        with sessions() as session, session.begin():
            session.execute(update(LedgerEntry).where(LedgerEntry.id == 1).values(status="failed"))
        assert ledger.verify() == ["1 entries hold a release without status 'released'"]


# -- concurrency ----------------------------------------------------------------------------------


class TestConcurrency:
    def test_parallel_reservations_never_overspend(
        self, ledger: Ledger, sessions: sessionmaker[Session], alice: Principal, bob: Principal
    ) -> None:
        add_dataset(sessions, "d", cap="1", grants={alice: "1", bob: "1"})
        start = threading.Barrier(8)

        def attempt(index: int) -> bool:
            if index < 8:
                start.wait()
            try:
                reserve(ledger, alice if index % 2 else bob, "d", 0.1)
            except BudgetExhausted:
                return False
            return True

        with ThreadPoolExecutor(max_workers=8) as pool:
            results = list(pool.map(attempt, range(16)))
        assert sum(results) == 10
        assert spent(sessions, "d") == ONE
        assert spent(sessions, "d", alice) + spent(sessions, "d", bob) == ONE
        assert ledger.verify() == []

    def test_parallel_retries_charge_once(
        self, ledger: Ledger, sessions: sessionmaker[Session], alice: Principal
    ) -> None:
        add_dataset(sessions, "d", cap="1", grants={alice: "1"})
        start = threading.Barrier(6)

        def attempt(_: int) -> str:
            start.wait()
            try:
                reserve(ledger, alice, "d", 0.1, key="same")
            except RequestInProgress:
                return "in progress"
            return "charged"

        with ThreadPoolExecutor(max_workers=6) as pool:
            outcomes = sorted(pool.map(attempt, range(6)))
        assert outcomes == ["charged"] + ["in progress"] * 5
        assert len(entries(sessions)) == 1
        assert spent(sessions, "d") == amount().charge(0.1).units
