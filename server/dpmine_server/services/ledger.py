"""The privacy-budget ledger: the only way to spend budget (DESIGN.md "The budget ledger").

* Amounts are exact integers (:class:`~dpmine_server.dp.budget.Epsilon`).
* :meth:`Ledger.reserve` checks the dataset cap and the analyst's grant and charges both in one
  transaction (``BEGIN IMMEDIATE`` on SQLite, conditional ``UPDATE`` row locks on PostgreSQL) and
  commits before any data is read. There is no refund afterwards.
* A retry with the same ``Idempotency-Key`` and the same request replays the stored release;
  the same key with another request is refused.
* Entries only move reserved → released | failed | interrupted.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from dpmine.wire import BudgetStatus, Guarantee
from dpmine_server.db.base import rows_affected
from dpmine_server.db.models import Dataset, Grant, LedgerEntry, Principal, utcnow
from dpmine_server.dp.budget import Epsilon
from dpmine_server.errors import (
    BudgetExhausted,
    ChargeKeptNoResult,
    IdempotencyConflict,
    InternalError,
    NotFound,
    RequestInProgress,
)
from dpmine_server.services.instances import dead_owners

__all__ = ["Ledger", "Reservation", "request_fingerprint"]


def request_fingerprint(operation: str, dataset_id: str, body: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of a request, to tell a retry from a different request."""
    canonical = json.dumps(
        {"operation": operation, "dataset": dataset_id, "body": body},
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Reservation:
    """A committed charge, or the stored release of an earlier identical request."""

    entry_id: int
    cost: Epsilon
    guarantee: Guarantee
    created_at: datetime
    remaining_after: Epsilon
    dataset_version: int
    replayed_release: dict[str, Any] | None = None

    @property
    def is_replay(self) -> bool:
        """True when the caller must return the stored release and compute nothing."""
        return self.replayed_release is not None


class Ledger:
    """Reservation, release and reporting of privacy charges."""

    def __init__(
        self, engine: Engine, sessions: sessionmaker[Session], *, instance_id: str | None = None
    ) -> None:
        self._engine = engine
        self._sessions = sessions
        self._instance_id = instance_id

    # -- spending ------------------------------------------------------------------------------

    def reserve(
        self,
        *,
        principal: Principal,
        dataset_id: str,
        operation: str,
        parameters: dict[str, Any],
        cost: Epsilon,
        guarantee: Guarantee,
        idempotency_key: str | None,
        request_hash: str,
    ) -> Reservation:
        """Charge ``cost`` to the dataset cap and the analyst's grant, or replay a retry.

        Raises BudgetExhausted (nothing charged), IdempotencyConflict, RequestInProgress,
        ChargeKeptNoResult (a retry of a request that failed or was interrupted after its
        charge) or NotFound.
        """
        if cost.units <= 0:
            raise InternalError("a reservation needs a positive cost")
        for _attempt in range(3):
            with self._write_session() as session:
                if idempotency_key is not None:
                    earlier = self._find_by_key(session, principal.id, idempotency_key)
                    if earlier is not None:
                        return self._replay(session, earlier, request_hash)
                dataset = session.get(Dataset, dataset_id)
                if dataset is None or dataset.status != "active":
                    raise NotFound(f"dataset {dataset_id!r} is not available")
                self._charge_caps(session, dataset_id, principal.id, cost)
                entry = LedgerEntry(
                    dataset_id=dataset_id,
                    principal_id=principal.id,
                    operation=operation,
                    parameters=parameters,
                    epsilon_units=cost.units,
                    guarantee=guarantee,
                    status="reserved",
                    idempotency_key=idempotency_key,
                    request_hash=request_hash,
                    dataset_version=dataset.version,
                    instance_id=self._instance_id,
                    created_at=utcnow(),
                )
                session.add(entry)
                try:
                    session.flush()
                except IntegrityError:
                    # Another request with the same key won the race; replay it instead.
                    session.rollback()
                    continue
                remaining = self._remaining(session, dataset_id, principal.id)
                session.commit()
                return Reservation(
                    entry_id=entry.id,
                    cost=cost,
                    guarantee=guarantee,
                    created_at=entry.created_at,
                    remaining_after=remaining,
                    dataset_version=dataset.version,
                )
        raise RequestInProgress("the same Idempotency-Key is being used concurrently; retry")

    def _charge_caps(
        self, session: Session, dataset_id: str, analyst_id: int, cost: Epsilon
    ) -> None:
        charged_dataset = rows_affected(
            session.execute(
                update(Dataset)
                .where(Dataset.id == dataset_id)
                .where(Dataset.spent_units + cost.units <= Dataset.cap_units)
                .values(spent_units=Dataset.spent_units + cost.units)
            )
        )
        if charged_dataset != 1:
            left = self._dataset_left(session, dataset_id)
            session.rollback()
            raise BudgetExhausted(
                f"the dataset cap cannot cover this request: requested epsilon="
                f"{cost.exact_str()}, remaining on the dataset={left.exact_str()}; "
                "ask the data owner or request less"
            )
        charged_grant = rows_affected(
            session.execute(
                update(Grant)
                .where(Grant.dataset_id == dataset_id, Grant.analyst_id == analyst_id)
                .where(Grant.spent_units + cost.units <= Grant.limit_units)
                .values(spent_units=Grant.spent_units + cost.units, updated_at=utcnow())
            )
        )
        if charged_grant != 1:
            grant = self._grant(session, dataset_id, analyst_id)
            session.rollback()
            if grant is None:
                raise NotFound(f"dataset {dataset_id!r} is not granted to you")
            left = Epsilon(grant.limit_units - grant.spent_units)
            raise BudgetExhausted(
                f"your grant cannot cover this request: requested epsilon={cost.exact_str()}, "
                f"remaining in your grant={left.exact_str()}; ask the data owner for more"
            )

    def _replay(self, session: Session, entry: LedgerEntry, request_hash: str) -> Reservation:
        if entry.request_hash != request_hash:
            raise IdempotencyConflict(
                "this Idempotency-Key was already used for a different request; "
                "use a new key for a new request"
            )
        if entry.status == "reserved":
            raise RequestInProgress(
                "the request with this Idempotency-Key is still running; retry later with the "
                "same key to get its result (nothing more is charged)"
            )
        if entry.status != "released" or entry.release is None:
            how = "the server stopped during it" if entry.status == "interrupted" else "it failed"
            raise ChargeKeptNoResult(
                f"the request with this Idempotency-Key was charged but {how}: the charge was "
                "kept and no result exists. Use a new Idempotency-Key to ask again (it is "
                "charged again)"
            )
        return Reservation(
            entry_id=entry.id,
            cost=Epsilon(entry.epsilon_units),
            guarantee="pure" if entry.guarantee == "pure" else "approximate",
            created_at=entry.created_at,
            remaining_after=self._remaining(session, entry.dataset_id, entry.principal_id),
            dataset_version=entry.dataset_version,
            replayed_release=entry.release,
        )

    def complete(self, entry_id: int, release: dict[str, Any]) -> None:
        """Store the release of a reserved entry (reserved → released)."""
        self._transition(entry_id, "released", release)

    def fail(self, entry_id: int) -> None:
        """Mark a reserved entry failed; the charge stands (no refund after data access)."""
        self._transition(entry_id, "failed", None)

    def _transition(self, entry_id: int, status: str, release: dict[str, Any] | None) -> None:
        with self._sessions() as session, session.begin():
            changed = rows_affected(
                session.execute(
                    update(LedgerEntry)
                    .where(LedgerEntry.id == entry_id, LedgerEntry.status == "reserved")
                    .values(status=status, release=release, completed_at=utcnow())
                )
            )
            if changed != 1:
                raise InternalError(f"ledger entry {entry_id} is not reserved")

    def interrupt_reserved(
        self,
        *,
        before: datetime | None = None,
        is_alive: Callable[[str | None], bool] | None = None,
    ) -> int:
        """Mark entries left ``reserved`` by dead processes as interrupted (charge kept).

        ``is_alive(instance_id)`` tells live workers apart (their entries are left alone);
        ``before`` limits it to entries reserved before that time.
        """
        with self._write_session() as session, session.begin():
            statement = update(LedgerEntry).where(LedgerEntry.status == "reserved")
            if before is not None:
                statement = statement.where(LedgerEntry.created_at < before)
            if is_alive is not None:
                reserved = LedgerEntry.status == "reserved"
                dead = dead_owners(session, LedgerEntry.instance_id, reserved, is_alive)
                if dead is None:
                    return 0
                statement = statement.where(dead)
            result = session.execute(statement.values(status="interrupted", completed_at=utcnow()))
            return rows_affected(result)

    # -- reading -------------------------------------------------------------------------------

    def budget_status(self, principal: Principal, dataset_id: str) -> BudgetStatus:
        """The analyst's grant and what is left of it and of the dataset cap."""
        with self._sessions() as session:
            grant = self._grant(session, dataset_id, principal.id)
            if grant is None:
                raise NotFound(f"dataset {dataset_id!r} is not granted to you")
            dataset_left = self._dataset_left(session, dataset_id)
            return BudgetStatus(
                dataset_id=dataset_id,
                grant_epsilon=Epsilon(grant.limit_units).display(),
                grant_spent=Epsilon(grant.spent_units).display(),
                dataset_remaining=dataset_left.display(),
                remaining_epsilon=self._remaining(session, dataset_id, principal.id).display(),
            )

    def remaining(self, principal_id: int, dataset_id: str) -> Epsilon:
        """What the analyst can still spend on the dataset: min(grant left, cap left)."""
        with self._sessions() as session:
            return self._remaining(session, dataset_id, principal_id)

    def verify(self) -> list[str]:
        """Consistency problems: spent totals that differ from the sum of their entries."""
        problems: list[str] = []
        with self._sessions() as session:
            totals = dict(
                session.execute(
                    select(LedgerEntry.dataset_id, func.sum(LedgerEntry.epsilon_units)).group_by(
                        LedgerEntry.dataset_id
                    )
                ).all()
            )
            for dataset in session.scalars(select(Dataset)):
                entries = int(totals.get(dataset.id) or 0)
                if entries != dataset.spent_units:
                    problems.append(
                        f"dataset {dataset.id}: spent {dataset.spent_units} units but entries "
                        f"sum to {entries}"
                    )
            grant_totals = {
                (row[0], row[1]): int(row[2])
                for row in session.execute(
                    select(
                        LedgerEntry.dataset_id,
                        LedgerEntry.principal_id,
                        func.sum(LedgerEntry.epsilon_units),
                    ).group_by(LedgerEntry.dataset_id, LedgerEntry.principal_id)
                ).all()
            }
            for grant in session.scalars(select(Grant)):
                entries = grant_totals.get((grant.dataset_id, grant.analyst_id), 0)
                if entries != grant.spent_units:
                    problems.append(
                        f"grant {grant.dataset_id}/{grant.analyst_id}: spent {grant.spent_units} "
                        f"units but entries sum to {entries}"
                    )
            orphan = session.scalar(
                select(func.count())
                .select_from(LedgerEntry)
                .where(LedgerEntry.release.is_not(None), LedgerEntry.status != "released")
            )
            if orphan:
                problems.append(f"{orphan} entries hold a release without status 'released'")
        return problems

    # -- helpers -------------------------------------------------------------------------------

    def _write_session(self) -> Session:
        connection = self._engine.connect().execution_options(sqlite_begin="IMMEDIATE")
        return _OwningSession(connection)

    @staticmethod
    def _find_by_key(session: Session, principal_id: int, key: str) -> LedgerEntry | None:
        return session.scalar(
            select(LedgerEntry).where(
                LedgerEntry.principal_id == principal_id, LedgerEntry.idempotency_key == key
            )
        )

    @staticmethod
    def _grant(session: Session, dataset_id: str, analyst_id: int) -> Grant | None:
        return session.scalar(
            select(Grant).where(Grant.dataset_id == dataset_id, Grant.analyst_id == analyst_id)
        )

    @staticmethod
    def _dataset_left(session: Session, dataset_id: str) -> Epsilon:
        row = session.execute(
            select(Dataset.cap_units, Dataset.spent_units).where(Dataset.id == dataset_id)
        ).one_or_none()
        if row is None:
            raise NotFound(f"dataset {dataset_id!r} is not available")
        return Epsilon(max(row[0] - row[1], 0))

    def _remaining(self, session: Session, dataset_id: str, analyst_id: int) -> Epsilon:
        grant = self._grant(session, dataset_id, analyst_id)
        grant_left = Epsilon(grant.limit_units - grant.spent_units) if grant else Epsilon.zero()
        return min(grant_left, self._dataset_left(session, dataset_id))


class _OwningSession(Session):
    """A session bound to its own connection, which it closes with itself."""

    def __init__(self, connection: Any) -> None:
        super().__init__(bind=connection, expire_on_commit=False)
        self._own_connection = connection

    def close(self) -> None:
        super().close()
        self._own_connection.close()
