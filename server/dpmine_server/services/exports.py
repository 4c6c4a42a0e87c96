"""Ledger exports for owners (JSON/CSV through the API and the CLI)."""

from __future__ import annotations

from pydantic import TypeAdapter
from sqlalchemy import select
from sqlalchemy.orm import Session

from dpmine.wire import LedgerEntryInfo, LedgerStatus
from dpmine_server.db.models import LedgerEntry, Principal
from dpmine_server.dp.budget import Epsilon

_LEDGERSTATUS: TypeAdapter[LedgerStatus] = TypeAdapter(LedgerStatus)

__all__ = ["ledger_entries"]


def ledger_entries(session: Session, *, dataset_id: str | None = None) -> list[LedgerEntryInfo]:
    """Ledger entries in order, optionally of one dataset."""
    statement = (
        select(LedgerEntry, Principal.name)
        .join(Principal, Principal.id == LedgerEntry.principal_id)
        .order_by(LedgerEntry.id)
    )
    if dataset_id is not None:
        statement = statement.where(LedgerEntry.dataset_id == dataset_id)
    return [
        LedgerEntryInfo(
            id=entry.id,
            dataset_id=entry.dataset_id,
            principal=name,
            operation=entry.operation,
            epsilon=Epsilon(entry.epsilon_units).display(),
            epsilon_exact=Epsilon(entry.epsilon_units).exact_str(),
            guarantee="pure" if entry.guarantee == "pure" else "approximate",
            status=_LEDGERSTATUS.validate_python(entry.status),
            parameters=entry.parameters,
            release=entry.release,
            idempotency_key=entry.idempotency_key,
            created_at=entry.created_at,
            completed_at=entry.completed_at,
        )
        for entry, name in session.execute(statement).all()
    ]
