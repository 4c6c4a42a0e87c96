"""Tables of the engine's database (DESIGN.md "Data at rest").

Budget amounts are integers in pico-units of their dataset's ledger unit, epsilon or rho
(:mod:`dpmine_server.dp.budget`; ``datasets.accounting``). Ledger
entries are append-only: only their status, release and completion time ever change.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from dpmine_server.db.base import Base, UtcDateTime

__all__ = [
    "AuditEvent",
    "Dataset",
    "Grant",
    "Job",
    "LedgerEntry",
    "Principal",
    "ServerState",
    "as_utc",
    "utcnow",
]


def utcnow() -> datetime:
    """Timezone-aware now."""
    return datetime.now(UTC)


def as_utc(moment: datetime) -> datetime:
    """``moment`` as an aware UTC time (SQLite hands back naive ones)."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


class Principal(Base):
    """An owner or an analyst; the API key is stored only as an HMAC hash."""

    __tablename__ = "principals"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    role: Mapped[str] = mapped_column(String(16))
    key_prefix: Mapped[str] = mapped_column(String(16))
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    disabled: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class Dataset(Base):
    """A registered dataset: public metadata, its source, its cap and what was spent, and the
    owner's guarantee policy ("allow_approximate" or "pure_only", public like the metadata)."""

    __tablename__ = "datasets"
    __table_args__ = (
        CheckConstraint("spent_units >= 0 AND spent_units <= cap_units", name="ck_dataset_cap"),
    )

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    description: Mapped[str] = mapped_column(Text, default="")
    attribution: Mapped[str] = mapped_column(Text, default="")
    kind: Mapped[str] = mapped_column(String(16))
    metadata_json: Mapped[dict[str, Any]] = mapped_column(JSON)
    source_json: Mapped[dict[str, Any]] = mapped_column(JSON)
    version: Mapped[int] = mapped_column(Integer, default=1)
    status: Mapped[str] = mapped_column(String(16), default="active")
    cap_units: Mapped[int] = mapped_column(BigInteger)
    spent_units: Mapped[int] = mapped_column(BigInteger, default=0)
    guarantee_policy: Mapped[str] = mapped_column(String(24), default="allow_approximate")
    #: The ledger's unit (issue #24): "pure" (the *_units columns of the dataset, its grants
    #: and its entries count pico-epsilon) or "zcdp" (they count pico-rho).
    accounting: Mapped[str] = mapped_column(String(8), default="pure")
    #: zCDP only: the owner's delta (exact decimal text) for showing rho as (epsilon, delta);
    #: None when the cap was given as rho (the public default delta is shown).
    accounting_delta: Mapped[str | None] = mapped_column(String(40), default=None)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class Grant(Base):
    """An analyst's allotment on a dataset, inside the dataset cap."""

    __tablename__ = "grants"
    __table_args__ = (
        UniqueConstraint("dataset_id", "analyst_id"),
        CheckConstraint("spent_units >= 0 AND spent_units <= limit_units", name="ck_grant_limit"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    dataset_id: Mapped[str] = mapped_column(ForeignKey("datasets.id"))
    analyst_id: Mapped[int] = mapped_column(ForeignKey("principals.id"))
    limit_units: Mapped[int] = mapped_column(BigInteger)
    spent_units: Mapped[int] = mapped_column(BigInteger, default=0)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class LedgerEntry(Base):
    """One charge. Status: reserved → released | failed | interrupted; the charge always stays.

    ``idempotency_key`` with ``request_hash`` doubles as the idempotency record: a retry with the
    same key replays ``release`` instead of drawing fresh noise.
    """

    __tablename__ = "ledger_entries"
    __table_args__ = (
        UniqueConstraint("principal_id", "idempotency_key", name="uq_ledger_idempotency"),
        Index("ix_ledger_dataset", "dataset_id", "id"),
        CheckConstraint("epsilon_units > 0", name="ck_ledger_positive"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    dataset_id: Mapped[str] = mapped_column(ForeignKey("datasets.id"))
    principal_id: Mapped[int] = mapped_column(ForeignKey("principals.id"))
    operation: Mapped[str] = mapped_column(String(64))
    parameters: Mapped[dict[str, Any]] = mapped_column(JSON)
    epsilon_units: Mapped[int] = mapped_column(BigInteger)
    guarantee: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16), default="reserved")
    idempotency_key: Mapped[str | None] = mapped_column(String(200), nullable=True)
    request_hash: Mapped[str] = mapped_column(String(64))
    release: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True), nullable=True)
    dataset_version: Mapped[int] = mapped_column(Integer)
    instance_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    completed_at: Mapped[datetime | None] = mapped_column(UtcDateTime, nullable=True)


class Job(Base):
    """A background operation run by a worker process; its result lives in the ledger entry it
    charged. Status: queued → running → done | failed | cancelled | interrupted (its worker
    died); a job leaves ``queued`` once, so it is never run twice."""

    __tablename__ = "jobs"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    principal_id: Mapped[int] = mapped_column(ForeignKey("principals.id"))
    dataset_id: Mapped[str] = mapped_column(ForeignKey("datasets.id"))
    operation: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16), default="queued")
    progress: Mapped[float] = mapped_column(Float, default=0.0)
    message: Mapped[str] = mapped_column(Text, default="")
    request: Mapped[dict[str, Any]] = mapped_column(JSON)
    idempotency_key: Mapped[str] = mapped_column(String(200))
    ledger_entry_id: Mapped[int | None] = mapped_column(
        ForeignKey("ledger_entries.id"), nullable=True
    )
    instance_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    queue_job_id: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    remaining_units: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class AuditEvent(Base):
    """Append-only log of owner actions, authentication failures and refusals."""

    __tablename__ = "audit_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    principal_id: Mapped[int | None] = mapped_column(ForeignKey("principals.id"), nullable=True)
    action: Mapped[str] = mapped_column(String(64))
    target: Mapped[str] = mapped_column(String(200), default="")
    details: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class ServerState(Base):
    """Named values the server keeps about itself, e.g. the check value of its secret key."""

    __tablename__ = "server_state"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
