"""The fast request path of the ledger (issue #9) keeps every guarantee, on SQLite and
PostgreSQL: racing reservations never exceed the dataset cap or a grant, totals stay exact, the
reservation commits without waiting for the disk while the release commit is durable, and the
in-process writer queue of SQLite is fair (FIFO) and bounded in time."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import Engine, event, select
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session, sessionmaker

from dpmine_server.db.base import WriterLock, is_sqlite, make_engine, make_session_factory
from dpmine_server.db.migrate import upgrade_to_head
from dpmine_server.db.models import Dataset, Grant, Principal, utcnow
from dpmine_server.dp.budget import AccountingUnit, Epsilon, LedgerAmount, Rho
from dpmine_server.errors import BudgetExhausted, ServerError
from dpmine_server.services.ledger import Ledger, request_fingerprint
from dpmine_server.services.principals import create_principal, get_principal
from support.servers import PostgresDatabases

SECRET = "ledger-fast-path-secret-0123456789"
TENTH = Epsilon.cap("0.1")


@pytest.fixture(params=["sqlite", "postgres"])
def engine(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Engine]:
    """A migrated database on each backend."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('fast') / 'ledger.sqlite3'}"
        databases = None
    else:
        databases = request.getfixturevalue("postgres")
        assert isinstance(databases, PostgresDatabases)
        url = databases.create_database()
    built = make_engine(url)
    upgrade_to_head(built)
    try:
        yield built
    finally:
        built.dispose()
        if databases is not None:
            databases.drop_database(url)


@pytest.fixture
def sessions(engine: Engine) -> sessionmaker[Session]:
    factory: sessionmaker[Session] = make_session_factory(engine)
    return factory


def _setup(
    sessions: sessionmaker[Session],
    cap: str,
    grants: dict[str, str],
    unit: AccountingUnit = "pure",
) -> list[Principal]:
    amount = Rho if unit == "zcdp" else Epsilon
    with sessions() as session, session.begin():
        for name in grants:
            create_principal(session, name=name, role="analyst", secret=SECRET)
        session.add(
            Dataset(
                id="d",
                name="d",
                kind="table",
                metadata_json={},
                source_json={},
                version=1,
                status="active",
                cap_units=amount.cap(cap).units,
                spent_units=0,
                accounting=unit,
                created_at=utcnow(),
            )
        )
    principals = []
    with sessions() as session, session.begin():
        for name, limit in grants.items():
            principal = get_principal(session, name)
            session.add(
                Grant(
                    dataset_id="d",
                    analyst_id=principal.id,
                    limit_units=amount.cap(limit).units,
                    spent_units=0,
                    updated_at=utcnow(),
                )
            )
            session.expunge(principal)
            principals.append(principal)
    return principals


def _reserve(
    ledger: Ledger, principal: Principal, key: str | None = None, cost: LedgerAmount = TENTH
) -> int:
    body = {"epsilon": "0.1", "nonce": key or uuid.uuid4().hex}
    reservation = ledger.reserve(
        principal=principal,
        dataset_id="d",
        operation="count.noisy",
        parameters=body,
        cost=cost,
        guarantee="pure",
        idempotency_key=key,
        request_hash=request_fingerprint("count.noisy", "d", body),
    )
    if not reservation.is_replay:
        ledger.complete(reservation.entry_id, {"receipt": {}, "value": 1})
    return reservation.entry_id


@pytest.mark.parametrize("unit", ["pure", "zcdp"])
def test_racing_reservations_never_exceed_the_cap_or_a_grant(
    engine: Engine, sessions: sessionmaker[Session], unit: AccountingUnit
) -> None:
    # The cap fits exactly 10 charges; alice's grant only 3; bob and carol could take all 10.
    limits = {"alice": "0.3", "bob": "10", "carol": "10"}
    alice, bob, carol = _setup(sessions, "1.0", limits, unit)
    tenth = Rho(TENTH.units) if unit == "zcdp" else TENTH
    ledger = Ledger(engine, sessions)
    requests = 48
    barrier = threading.Barrier(requests)
    accounts = [alice, bob, carol]

    def one(index: int) -> tuple[str, str]:
        principal = accounts[index % 3]
        barrier.wait()
        try:
            _reserve(ledger, principal, key=f"k{index}", cost=tenth)
        except BudgetExhausted:
            return principal.name, "refused"
        return principal.name, "charged"

    with ThreadPoolExecutor(requests) as pool:
        outcomes = list(pool.map(one, range(requests)))
    charged = [name for name, result in outcomes if result == "charged"]
    assert len(charged) == 10
    assert charged.count("alice") <= 3
    assert ledger.verify() == []
    with sessions() as session:
        assert session.scalar(select(Dataset.spent_units)) == 10 * TENTH.units
        grants = dict(session.execute(select(Grant.analyst_id, Grant.spent_units)).all())
    assert grants[alice.id] == charged.count("alice") * TENTH.units
    assert sum(grants.values()) == 10 * TENTH.units


def test_racing_retries_of_one_key_charge_once(
    engine: Engine, sessions: sessionmaker[Session]
) -> None:
    [alice] = _setup(sessions, "10", {"alice": "10"})
    ledger = Ledger(engine, sessions)
    barrier = threading.Barrier(8)

    def one(_index: int) -> str:
        barrier.wait()
        try:
            return str(_reserve(ledger, alice, key="same"))
        except ServerError as error:  # in progress / already completed elsewhere
            return type(error).__name__

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(8)))
    assert ledger.verify() == []
    with sessions() as session:
        assert session.scalar(select(Dataset.spent_units)) == TENTH.units


def test_only_the_reservation_skips_the_disk_wait(
    engine: Engine, sessions: sessionmaker[Session]
) -> None:
    [alice] = _setup(sessions, "10", {"alice": "10"})
    ledger = Ledger(engine, sessions)
    modes: list[str] = []
    query = "PRAGMA synchronous" if is_sqlite(engine) else "SHOW synchronous_commit"

    def on_commit(connection: Connection) -> None:
        modes.append(str(connection.exec_driver_sql(query).scalar()))

    # SQLite: the reservation has its own pool of synchronous=NORMAL connections.
    engines = [engine, ledger._reserve_engine] if is_sqlite(engine) else [engine]
    for each in engines:
        event.listen(each, "commit", on_commit)
    try:
        _reserve(ledger, alice)
        _reserve(ledger, alice)
        with engine.begin() as connection:  # any other transaction afterwards
            connection.exec_driver_sql("SELECT 1")
    finally:
        for each in engines:
            event.remove(each, "commit", on_commit)
    # reserve, complete, reserve, complete, other: SQLite 1 = NORMAL, 2 = FULL.
    if is_sqlite(engine):
        assert modes == ["1", "2", "1", "2", "2"]
    else:  # the cluster's own setting elsewhere (test clusters may run without fsync)
        with engine.connect() as connection:
            default = str(connection.exec_driver_sql(query).scalar())
        assert modes == ["off", default, "off", default, default]


def test_the_writer_lock_is_fifo_and_times_out() -> None:
    lock = WriterLock()
    assert lock.acquire(1)
    order: list[int] = []

    def waiter(index: int) -> None:
        assert lock.acquire(5)
        order.append(index)
        lock.release()

    threads = []
    for index in range(6):
        thread = threading.Thread(target=waiter, args=(index,))
        thread.start()
        threads.append(thread)
        time.sleep(0.02)  # queued in this order
    assert not lock.acquire(0.01)  # held: a short wait gives up (and leaves the queue)
    lock.release()
    for thread in threads:
        thread.join(5)
    assert order == list(range(6))
    assert lock.acquire(0.01)  # free again
    lock.release()
