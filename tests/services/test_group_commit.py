"""Group commit of the ledger's release writes (services/group_commit.py), on SQLite and
PostgreSQL: concurrent writes share one durable transaction, each caller returns only after
it, an error of one write stays that caller's, and when the group's transaction fails each
write is applied alone, so that only a write that fails alone fails."""

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


def test_a_failed_group_is_applied_write_by_write_and_only_the_failing_write_fails(
    engine: Engine,
) -> None:
    """The same key twice in one group makes its transaction fail. Each write is then applied
    alone: whichever duplicate comes second fails, every other write commits (its own
    transaction: 1 + 4 commits). Before, the whole group failed and lost five releases."""
    writes = [_insert(key) for key in range(WRITERS)]
    writes[2] = _insert(4)
    committer = GroupCommitter(engine)
    errors, commits = _grouped(engine, writes, committer)
    assert errors[0] is None  # the leader's own group of one committed
    failed = [index for index, error in enumerate(errors) if error is not None]
    assert failed in ([2], [4])
    assert _keys(engine) == [0, 1, 3, 4, 5]
    assert commits == 1 + 4
    committer.commit(_insert(7))  # usable again
    assert _keys(engine) == [0, 1, 3, 4, 5, 7]


def test_writes_that_fail_alone_each_get_their_own_error(engine: Engine) -> None:
    """Every write of the group raises (as against a database that refuses them): each
    caller gets its own write's error and nothing is kept; a group of one is tried once."""
    calls: list[int] = []

    def broken(key: int) -> Callable[[Connection], Exception | None]:
        def write(_connection: Connection) -> Exception | None:
            calls.append(key)
            raise RuntimeError(f"write {key} refused")

        return write

    writes = [_insert(0), *(broken(key) for key in range(1, WRITERS))]
    errors, _commits = _grouped(engine, writes)
    assert errors[0] is None
    for key, error in enumerate(errors[1:], start=1):
        assert isinstance(error, RuntimeError)
        assert str(error) == f"write {key} refused"
    assert _keys(engine) == [0]
    # the group stopped at its first write, then each write ran alone
    assert len(calls) == WRITERS
    assert sorted(calls[1:]) == list(range(1, WRITERS))
    calls.clear()
    with pytest.raises(RuntimeError, match="write 9 refused"):
        GroupCommitter(engine).commit(broken(9))
    assert calls == [9]
