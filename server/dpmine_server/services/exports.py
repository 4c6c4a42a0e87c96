"""Ledger exports for owners (JSON/CSV through the API and the CLI)."""

from __future__ import annotations

from pydantic import TypeAdapter
from sqlalchemy import select
from sqlalchemy.orm import Session

from dpmine.wire import LedgerEntryInfo, LedgerStatus
from dpmine_server.db.models import Dataset, LedgerEntry, Principal
from dpmine_server.dp.budget import Epsilon, Rho
from dpmine_server.services.accounting import dataset_delta, dataset_unit, display_total

_LEDGERSTATUS: TypeAdapter[LedgerStatus] = TypeAdapter(LedgerStatus)

__all__ = ["ledger_entries"]


def ledger_entries(session: Session, *, dataset_id: str | None = None) -> list[LedgerEntryInfo]:
    """Ledger entries in order, optionally of one dataset. An entry of a zCDP dataset shows its
    exact rho in ``rho_exact`` and, in the epsilon fields, the epsilon that rho implies at the
    dataset's delta (for reading; the ledger counts rho)."""
    statement = (
        select(LedgerEntry, Principal.name, Dataset)
        .join(Principal, Principal.id == LedgerEntry.principal_id)
        .join(Dataset, Dataset.id == LedgerEntry.dataset_id)
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
            epsilon=display_total(dataset, entry.epsilon_units),
            epsilon_exact=_epsilon_text(dataset, entry.epsilon_units),
            guarantee="pure" if entry.guarantee == "pure" else "approximate",
            status=_LEDGERSTATUS.validate_python(entry.status),
            parameters=entry.parameters,
            release=entry.release,
            idempotency_key=entry.idempotency_key,
            created_at=entry.created_at,
            completed_at=entry.completed_at,
            accounting=dataset_unit(dataset),
            rho_exact=Rho(entry.epsilon_units).exact_str()
            if dataset_unit(dataset) == "zcdp"
            else None,
            delta=float(dataset_delta(dataset)[0]) if dataset_unit(dataset) == "zcdp" else None,
        )
        for entry, name, dataset in session.execute(statement).all()
    ]


def _epsilon_text(dataset: Dataset, units: int) -> str:
    """The exact epsilon of a pure entry; a zCDP entry's implied epsilon, as its float's text."""
    if dataset_unit(dataset) == "zcdp":
        return repr(display_total(dataset, units))
    return Epsilon(units).exact_str()
