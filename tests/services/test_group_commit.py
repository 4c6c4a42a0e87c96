"""Group commit of the ledger's release writes (services/group_commit.py), on SQLite and
PostgreSQL: concurrent writes share one durable transaction, each caller returns only after
it, an error of one write stays that caller's, and a failed transaction fails every write of
its group and keeps none of them."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import pytest
from sqlalchemy import Engine, event, text
from sqlalchemy.engine import Connection

from dpmine_server.db.base import make_engine
from dpmine_server.services.group_commit import GroupCommitter
from support.servers import PostgresDatabases

WRITERS = 6


@pytest.fixture(params=["sqlite", "postgres"])
def engine(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Engine]:
    """A database with one table ``g`` on each backend, written as the ledger writes (SQLite:
    ``BEGIN IMMEDIATE`` and synchronous=FULL)."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('group') / 'group.sqlite3'}"
        databases = None
    else:
        databases = request.getfixturevalue("postgres")
        assert isinstance(databases, PostgresDatabases)
        url = databases.create_database()
    built = make_engine(url)
    with built.begin() as connection:
        connection.execute(text("CREATE TABLE g (k INTEGER PRIMARY KEY)"))
    try:
        yield built.execution_options(sqlite_begin="IMMEDIATE")
    finally:
        built.dispose()
        if databases is not None:
            databases.drop_database(url)


def _insert(key: int) -> Callable[[Connection], Exception | None]:
    def write(connection: Connection) -> Exception | None:
        connection.execute(text("INSERT INTO g (k) VALUES (:k)"), {"k": key})
        return None

    return write


def _keys(engine: Engine) -> list[int]:
    with engine.connect() as connection:
        return sorted(int(row[0]) for row in connection.execute(text("SELECT k FROM g")))


def _wait_until(condition: Callable[[], bool]) -> None:
    """Poll ``condition`` (the writers queue within milliseconds; 10 s is a hang)."""
    give_up = time.monotonic() + 10.0
    while not condition():
        assert time.monotonic() < give_up, "the writers did not queue"
        time.sleep(0.002)


def _grouped(
    engine: Engine,
    writes: list[Callable[[Connection], Exception | None]],
    committer: GroupCommitter | None = None,
) -> tuple[list[BaseException | None], int]:
    """Commit ``writes[0]`` alone, held open until every other write has queued behind it,
    then let them go as one group: each caller's error (None: committed) and how many
    transactions committed."""
    committer = committer or GroupCommitter(engine)
    gate = threading.Event()
    commits = [0]

    def count(_connection: Connection) -> None:
        commits[0] += 1

    def first(connection: Connection) -> Exception | None:
        assert gate.wait(10.0)
        return writes[0](connection)

    def run(write: Callable[[Connection], Exception | None]) -> BaseException | None:
        try:
            committer.commit(write)
        except BaseException as error:  # returned to the test
            return error
        return None

    event.listen(engine, "commit", count)
    try:
        with ThreadPoolExecutor(len(writes)) as pool:
            futures: list[Future[BaseException | None]] = [pool.submit(run, first)]
            _wait_until(lambda: committer.waiting == 0)  # the leader took its group of one
            futures += [pool.submit(run, write) for write in writes[1:]]
            _wait_until(lambda: committer.waiting == len(writes) - 1)
            gate.set()
            errors = [future.result(timeout=30) for future in futures]
    finally:
        event.remove(engine, "commit", count)
    return errors, commits[0]


def test_concurrent_writes_share_one_transaction(engine: Engine) -> None:
    errors, commits = _grouped(engine, [_insert(key) for key in range(WRITERS)])
    assert errors == [None] * WRITERS
    assert commits == 2  # the leader's own, then every writer that queued behind it
    assert _keys(engine) == list(range(WRITERS))


def test_an_error_of_one_write_stays_its_own(engine: Engine) -> None:
    def refused(_connection: Connection) -> Exception | None:
        return ValueError("entry 3 is not reserved")

    writes = [_insert(key) for key in range(WRITERS)]
    writes[3] = refused
    errors, _commits = _grouped(engine, writes)
    assert [index for index, error in enumerate(errors) if error is not None] == [3]
    assert isinstance(errors[3], ValueError)
    assert _keys(engine) == [key for key in range(WRITERS) if key != 3]


def test_a_failed_transaction_fails_its_whole_group_and_keeps_nothing(engine: Engine) -> None:
    writes = [_insert(key) for key in range(WRITERS)]
    writes[2] = _insert(4)  # the same key twice in one group: the transaction fails
    committer = GroupCommitter(engine)
    errors, _commits = _grouped(engine, writes, committer)
    assert errors[0] is None  # the leader's own group of one committed
    assert all(error is not None for error in errors[1:])
    assert _keys(engine) == [0]
    committer.commit(_insert(7))  # usable again after a failed group
    assert _keys(engine) == [0, 7]
