"""Mining sessions: server-side secret state owned by one analyst on one dataset, expiring
(DESIGN.md "Architecture", services: "mining sessions ... stored in the database")."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session, sessionmaker

from dpmine_server.db.base import make_engine, make_session_factory
from dpmine_server.db.migrate import upgrade_to_head
from dpmine_server.db.models import Dataset, MiningSession, Principal, utcnow
from dpmine_server.services import sessions as mining
from dpmine_server.services.principals import create_principal, get_principal

KIND = "serenade.memo"
STATE = {"memo": {"[a]": 3, "[b]": 1}, "step": 2}


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    """A migrated SQLite database."""
    built = make_engine(f"sqlite:///{tmp_path / 'sessions.sqlite3'}")
    upgrade_to_head(built)
    yield built
    built.dispose()


@pytest.fixture
def db(engine: Engine) -> sessionmaker[Session]:
    """Sessions on the database, with analysts alice and bob and datasets d and e."""
    factory: sessionmaker[Session] = make_session_factory(engine)
    with factory() as session, session.begin():
        for name in ("alice", "bob"):
            create_principal(session, name=name, role="analyst", secret="s" * 32)
        for dataset_id in ("d", "e"):
            session.add(
                Dataset(
                    id=dataset_id,
                    name=dataset_id,
                    kind="table",
                    metadata_json={},
                    source_json={},
                    cap_units=1,
                    spent_units=0,
                    created_at=utcnow(),
                )
            )
    return factory


def principal(db: sessionmaker[Session], name: str) -> Principal:
    """A detached principal."""
    with db() as session:
        return get_principal(session, name)


def start(
    db: sessionmaker[Session],
    owner: Principal,
    *,
    dataset_id: str = "d",
    lifetime: timedelta = mining.DEFAULT_LIFETIME,
) -> str:
    """A committed session of ``owner``."""
    with db() as session, session.begin():
        return mining.create(
            session,
            principal=owner,
            dataset_id=dataset_id,
            kind=KIND,
            state=STATE,
            lifetime=lifetime,
        )


def test_state_round_trips_for_its_owner(db: sessionmaker[Session]) -> None:
    alice = principal(db, "alice")
    session_id = start(db, alice)
    assert str(uuid.UUID(session_id)) == session_id
    with db() as session:
        assert (
            mining.load_state(session, session_id, principal=alice, dataset_id="d", kind=KIND)
            == STATE
        )


@pytest.mark.parametrize(
    ("who", "dataset_id", "kind"),
    [("bob", "d", KIND), ("alice", "e", KIND), ("alice", "d", "other.kind")],
    ids=["other analyst", "other dataset", "other kind"],
)
def test_state_is_invisible_to_anyone_else(
    db: sessionmaker[Session], who: str, dataset_id: str, kind: str
) -> None:
    session_id = start(db, principal(db, "alice"))
    reader = principal(db, who)
    with db() as session:
        assert (
            mining.load_state(
                session, session_id, principal=reader, dataset_id=dataset_id, kind=kind
            )
            is None
        )
    with db() as session, session.begin():
        assert not mining.save_state(
            session,
            session_id,
            {"stolen": True},
            principal=reader,
            dataset_id=dataset_id,
            kind=kind,
        )
    with db() as session:
        row = session.get(MiningSession, session_id)
        assert row is not None
        assert row.state == STATE


def test_unknown_session_is_none(db: sessionmaker[Session]) -> None:
    with db() as session:
        assert (
            mining.load_state(
                session,
                str(uuid.uuid4()),
                principal=principal(db, "alice"),
                dataset_id="d",
                kind=KIND,
            )
            is None
        )


def test_owner_replaces_the_state(db: sessionmaker[Session]) -> None:
    alice = principal(db, "alice")
    session_id = start(db, alice)
    with db() as session, session.begin():
        assert mining.save_state(
            session, session_id, {"step": 3}, principal=alice, dataset_id="d", kind=KIND
        )
    with db() as session:
        assert mining.load_state(
            session, session_id, principal=alice, dataset_id="d", kind=KIND
        ) == {"step": 3}


def test_loaded_state_is_a_copy(db: sessionmaker[Session]) -> None:
    alice = principal(db, "alice")
    session_id = start(db, alice)
    with db() as session:
        loaded = mining.load_state(session, session_id, principal=alice, dataset_id="d", kind=KIND)
        assert loaded is not None
        loaded["step"] = 99
        again = mining.load_state(session, session_id, principal=alice, dataset_id="d", kind=KIND)
    assert again == STATE


def test_expired_session_is_gone(db: sessionmaker[Session]) -> None:
    alice = principal(db, "alice")
    expired = start(db, alice, lifetime=timedelta(seconds=-1))
    live = start(db, alice)
    with db() as session:
        assert (
            mining.load_state(session, expired, principal=alice, dataset_id="d", kind=KIND) is None
        )
    with db() as session, session.begin():
        assert not mining.save_state(
            session, expired, {"step": 9}, principal=alice, dataset_id="d", kind=KIND
        )
    with db() as session, session.begin():
        assert mining.delete_expired(session) == 1
    with db() as session:
        assert session.scalar(select(func.count()).select_from(MiningSession)) == 1
        assert session.get(MiningSession, live) is not None
        assert mining.load_state(session, live, principal=alice, dataset_id="d", kind=KIND) == STATE


def test_sessions_survive_another_connection(engine: Engine, db: sessionmaker[Session]) -> None:
    alice = principal(db, "alice")
    session_id = start(db, alice)
    other_worker = make_session_factory(engine)  # any worker can serve the next call
    with other_worker() as session:
        assert (
            mining.load_state(session, session_id, principal=alice, dataset_id="d", kind=KIND)
            == STATE
        )
