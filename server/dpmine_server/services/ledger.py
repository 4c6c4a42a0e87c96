"""The privacy-budget ledger: the only way to spend budget (DESIGN.md "The budget ledger").

* Amounts are exact integers in the dataset's unit (:class:`~dpmine_server.dp.budget.Epsilon`
  on a "pure" dataset, :class:`~dpmine_server.dp.budget.Rho` on a "zcdp" one; the ``*_units``
  columns hold either, and a charge in the other unit is refused by the charging statement).
* :meth:`Ledger.reserve` checks the dataset cap and the analyst's grant and charges both in one
  transaction (``BEGIN IMMEDIATE`` on SQLite, conditional ``UPDATE … RETURNING`` row locks on
  PostgreSQL) and commits before any data is read. There is no refund afterwards. The release
  commit is the durable one (the argument is in :meth:`Ledger.reserve`).
* A retry with the same ``Idempotency-Key`` and the same request replays the stored release;
  the same key with another request is refused.
* Entries only move reserved → released | failed | interrupted.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Engine,
    Row,
    bindparam,
    event,
    exists,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from dpmine.wire import BudgetStatus, Guarantee
from dpmine_server.db.base import UtcDateTime, is_sqlite, make_engine, rows_affected
from dpmine_server.db.models import Dataset, Grant, Job, LedgerEntry, Principal, utcnow
from dpmine_server.dp.budget import AccountingUnit, LedgerAmount, Rho, ledger_amount
from dpmine_server.errors import (
    BudgetExhausted,
    ChargeKeptNoResult,
    IdempotencyConflict,
    InternalError,
    NotFound,
    RequestInProgress,
)
from dpmine_server.services.accounting import (
    dataset_unit,
    display_remaining,
    display_total,
    zcdp_amounts,
)
from dpmine_server.services.group_commit import GroupCommitter
from dpmine_server.services.instances import dead_owners

__all__ = ["Ledger", "PartCharge", "Reservation", "batch_cost", "request_fingerprint"]


def _unit_of(amount: LedgerAmount) -> AccountingUnit:
    """The ledger unit an amount is counted in."""
    return "zcdp" if isinstance(amount, Rho) else "pure"


# The statements of the request path, built once (building them per call cost ~1 ms).
_COST = bindparam("cost", type_=BigInteger())
_CHARGE_DATASET = (
    update(Dataset)
    .where(
        Dataset.id == bindparam("ds_id"),
        Dataset.status == "active",
        Dataset.accounting == bindparam("unit"),
        Dataset.spent_units + _COST <= Dataset.cap_units,
    )
    .values(spent_units=Dataset.spent_units + _COST)
    .returning(Dataset.version, Dataset.cap_units - Dataset.spent_units)
)
_CHARGE_GRANT = (
    update(Grant)
    .where(
        Grant.dataset_id == bindparam("ds_id"),
        Grant.analyst_id == bindparam("analyst"),
        Grant.spent_units + _COST <= Grant.limit_units,
    )
    .values(
        spent_units=Grant.spent_units + _COST,
        updated_at=bindparam("now", type_=UtcDateTime()),
    )
    .returning(Grant.limit_units - Grant.spent_units)
)
_DATASET_STATE = select(
    Dataset.status, Dataset.cap_units, Dataset.spent_units, Dataset.accounting
).where(Dataset.id == bindparam("ds_id"))
_GRANT_STATE = select(Grant.limit_units, Grant.spent_units).where(
    Grant.dataset_id == bindparam("ds_id"), Grant.analyst_id == bindparam("analyst")
)
_FIND_BY_KEY = select(
    LedgerEntry.id,
    LedgerEntry.dataset_id,
    LedgerEntry.principal_id,
    LedgerEntry.request_hash,
    LedgerEntry.status,
    LedgerEntry.release,
    LedgerEntry.epsilon_units,
    LedgerEntry.guarantee,
    LedgerEntry.created_at,
    LedgerEntry.dataset_version,
).where(
    LedgerEntry.principal_id == bindparam("principal_id"),
    LedgerEntry.idempotency_key == bindparam("key"),
)
_INSERT_ENTRY = insert(LedgerEntry).returning(LedgerEntry.id)
_TRANSITION = (
    update(LedgerEntry)
    .where(LedgerEntry.id == bindparam("entry_id"), LedgerEntry.status == "reserved")
    .values(
        status=bindparam("new_status"),
        release=bindparam("new_release", type_=LedgerEntry.release.type),
        completed_at=bindparam("done_at", type_=UtcDateTime()),
    )
)


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
    cost: LedgerAmount
    guarantee: Guarantee
    created_at: datetime
    remaining_after: LedgerAmount
    dataset_version: int
    replayed_release: dict[str, Any] | None = None

    @property
    def is_replay(self) -> bool:
        """True when the caller must return the stored release and compute nothing."""
        return self.replayed_release is not None


@dataclass(frozen=True, slots=True)
class PartCharge:
    """One part of a batch to charge: its own ledger entry, cost and idempotency record."""

    operation: str
    parameters: dict[str, Any]
    cost: LedgerAmount
    guarantee: Guarantee
    idempotency_key: str | None
    request_hash: str


def batch_cost(costs: Sequence[LedgerAmount]) -> LedgerAmount:
    """The charge of a batch: the sum of its parts' costs, each as its operation declares it in
    the dataset's unit.

    Sequential composition (ALGORITHMS.md §0.2): the parts are separate mechanisms with their
    own randomness on the same dataset, so the batch is (Σ εᵢ)-DP on a pure dataset and
    (Σ ρᵢ)-zCDP on a zCDP one (zCDP composes by adding ρ, Bun & Steinke 2016, Lemma 2.3). The
    parts of one batch are priced for one dataset, hence in one unit; adding amounts of two
    units raises TypeError."""
    if not costs:
        raise InternalError("a batch needs at least one part")
    unit = type(costs[0])
    if any(type(cost) is not unit for cost in costs):
        raise TypeError("the parts of one batch must be priced in one accounting unit")
    return unit(sum(cost.units for cost in costs))


class Ledger:
    """Reservation, release and reporting of privacy charges."""

    def __init__(
        self, engine: Engine, sessions: sessionmaker[Session], *, instance_id: str | None = None
    ) -> None:
        self._engine = engine
        self._sessions = sessions
        self._instance_id = instance_id
        self._sqlite = is_sqlite(engine)
        # Write transactions: BEGIN IMMEDIATE (and the in-process writer queue) on SQLite. The
        # reservation alone commits without waiting for the disk (see reserve): on SQLite through
        # its own pool of synchronous=NORMAL connections (the same file and writer queue),
        # disposed with the main engine; on PostgreSQL with SET LOCAL in its transaction.
        self._write_engine = engine.execution_options(sqlite_begin="IMMEDIATE")
        self._releases = GroupCommitter(self._write_engine)
        self._reserve_engine = self._write_engine
        database = engine.url.database or ""
        if self._sqlite and database != ":memory:" and not database.startswith("file:"):
            # (An in-memory database cannot be shared by a second pool: it keeps FULL.)
            reserve_engine = make_engine(
                engine.url.render_as_string(hide_password=False), synchronous="NORMAL"
            ).execution_options(sqlite_begin="IMMEDIATE")
            self._reserve_engine = reserve_engine
            event.listen(engine, "engine_disposed", lambda _engine: reserve_engine.dispose())

    def set_instance(self, instance_id: str) -> None:
        """Name this process in the entries it reserves (for crash recovery)."""
        self._instance_id = instance_id

    # -- spending ------------------------------------------------------------------------------

    def reserve(
        self,
        *,
        principal: Principal,
        dataset_id: str,
        operation: str,
        parameters: dict[str, Any],
        cost: LedgerAmount,
        guarantee: Guarantee,
        idempotency_key: str | None,
        request_hash: str,
    ) -> Reservation:
        """Charge ``cost`` to the dataset cap and the analyst's grant, or replay a retry.

        ``cost`` is in the dataset's unit (Epsilon on a pure dataset, Rho on a zCDP one): the
        charging statement also requires ``datasets.accounting`` to match it, so an amount in
        the wrong unit can never be added to a ledger (InternalError, nothing charged).

        One write transaction (SQLAlchemy Core, no ORM loads): the idempotency lookup, then
        ``UPDATE datasets SET spent = spent + :cost WHERE id = :id AND status = 'active' AND
        spent + :cost <= cap RETURNING ...``, the same conditional update of the grant, and the
        insert of the entry. The updates are atomic check-and-charge statements (row locks on
        PostgreSQL, the write lock from ``BEGIN IMMEDIATE`` on SQLite), so concurrent
        reservations can never overrun the cap or the grant; a failed condition rolls back
        everything, so nothing is charged.

        **Durability.** The reservation commits before any data is read, but it is committed
        *without waiting for the disk* (``synchronous=NORMAL`` on SQLite in WAL mode,
        ``SET LOCAL synchronous_commit = off`` on PostgreSQL); :meth:`complete` (and
        :meth:`fail`) commit durably (``synchronous=FULL`` / the server's default), and the
        response is sent only after that. This is safe because both logs are sequential: a
        durable commit flushes the log up to its own commit record, so it makes every commit
        before it durable too, in particular this reservation (the release updates the entry
        this transaction inserted, so it necessarily comes after it). Hence a reservation can be
        lost only in an OS crash or power failure *before* its release commit reached the disk,
        and then nothing was released: the response had not been sent. Losing it therefore
        loses no charge that protected a release (the same holds for a crash of the PostgreSQL
        server: its release commit then fails, and the caller answers an error). A crash of
        the API process (SIGKILL) loses nothing: the commit is in the OS page cache (SQLite)
        or in PostgreSQL, and the entry is marked interrupted at the next start with its
        charge kept. Visibility is unchanged: the charge is visible to every other transaction
        once committed, before data is read, so the caps are never overrun.

        Raises BudgetExhausted (nothing charged), IdempotencyConflict, RequestInProgress,
        ChargeKeptNoResult (a retry of a request that failed or was interrupted after its
        charge) or NotFound.
        """
        if cost.units <= 0:
            raise InternalError("a reservation needs a positive cost")
        for _attempt in range(3):
            try:
                with self._reserve_engine.begin() as connection:
                    if not self._sqlite:
                        connection.exec_driver_sql("SET LOCAL synchronous_commit = off")
                    if idempotency_key is not None:
                        earlier = connection.execute(
                            _FIND_BY_KEY, {"principal_id": principal.id, "key": idempotency_key}
                        ).one_or_none()
                        if earlier is not None:
                            return self._replay(connection, earlier, request_hash)
                    version, dataset_left = self._charge_dataset(connection, dataset_id, cost)
                    grant_left = self._charge_grant(connection, dataset_id, principal.id, cost)
                    created_at = utcnow()
                    entry_id = connection.execute(
                        _INSERT_ENTRY,
                        {
                            "dataset_id": dataset_id,
                            "principal_id": principal.id,
                            "operation": operation,
                            "parameters": parameters,
                            "epsilon_units": cost.units,
                            "guarantee": guarantee,
                            "status": "reserved",
                            "idempotency_key": idempotency_key,
                            "request_hash": request_hash,
                            "release": None,
                            "dataset_version": version,
                            "instance_id": self._instance_id,
                            "created_at": created_at,
                        },
                    ).scalar_one()
                    reservation = Reservation(
                        entry_id=int(entry_id),
                        cost=cost,
                        guarantee=guarantee,
                        created_at=created_at,
                        remaining_after=type(cost)(max(min(grant_left, dataset_left), 0)),
                        dataset_version=int(version),
                    )
                return reservation  # committed when the block above exited
            except IntegrityError:
                if idempotency_key is None:
                    raise
                # Another request with the same key won the race (rolled back): replay it.
                continue
        raise RequestInProgress("the same Idempotency-Key is being used concurrently; retry")

    def reserve_batch(
        self, *, principal: Principal, dataset_id: str, parts: Sequence[PartCharge]
    ) -> list[Reservation]:
        """Charge every part of a batch in one transaction, or replay the batch's retry.

        As :meth:`reserve`, but the dataset cap and the grant are checked and charged once for
        :func:`batch_cost` of the parts, and one entry per part is inserted, all in the same
        transaction: either every part is charged or none is (BudgetExhausted names the total).
        The batch's Idempotency-Key is stored per part (``parts[i].idempotency_key``, derived by
        the caller) with a request hash of the *whole* batch and the part's index, so a retry of
        the same batch replays every part, and any other body under the same key is refused at
        its first part (IdempotencyConflict), whatever its number of parts."""
        if not parts or any(part.cost.units <= 0 for part in parts):
            raise InternalError("a batch reservation needs parts of positive cost")
        total = batch_cost([part.cost for part in parts])
        for _attempt in range(3):
            try:
                with self._reserve_engine.begin() as connection:
                    if not self._sqlite:
                        connection.exec_driver_sql("SET LOCAL synchronous_commit = off")
                    replay = self._replay_batch(connection, principal, parts)
                    if replay is not None:
                        return replay
                    version, dataset_left = self._charge_dataset(connection, dataset_id, total)
                    grant_left = self._charge_grant(connection, dataset_id, principal.id, total)
                    remaining = type(total)(max(min(grant_left, dataset_left), 0))
                    created_at = utcnow()
                    reservations = []
                    for part in parts:
                        entry_id = connection.execute(
                            _INSERT_ENTRY,
                            {
                                "dataset_id": dataset_id,
                                "principal_id": principal.id,
                                "operation": part.operation,
                                "parameters": part.parameters,
                                "epsilon_units": part.cost.units,
                                "guarantee": part.guarantee,
                                "status": "reserved",
                                "idempotency_key": part.idempotency_key,
                                "request_hash": part.request_hash,
                                "release": None,
                                "dataset_version": version,
                                "instance_id": self._instance_id,
                                "created_at": created_at,
                            },
                        ).scalar_one()
                        reservations.append(
                            Reservation(
                                entry_id=int(entry_id),
                                cost=part.cost,
                                guarantee=part.guarantee,
                                created_at=created_at,
                                remaining_after=remaining,
                                dataset_version=int(version),
                            )
                        )
                return reservations  # committed when the block above exited
            except IntegrityError:
                if parts[0].idempotency_key is None:
                    raise
                continue  # another request with the same key won the race: replay it
        raise RequestInProgress("the same Idempotency-Key is being used concurrently; retry")

    def _replay_batch(
        self, connection: Connection, principal: Principal, parts: Sequence[PartCharge]
    ) -> list[Reservation] | None:
        """The stored parts of an earlier batch under the same key (None: a new batch)."""
        if parts[0].idempotency_key is None:
            return None
        replayed = []
        for index, part in enumerate(parts):
            earlier = connection.execute(
                _FIND_BY_KEY, {"principal_id": principal.id, "key": part.idempotency_key}
            ).one_or_none()
            if earlier is None:
                if index == 0:
                    return None
                raise IdempotencyConflict(  # a batch is stored whole: only another body gets here
                    "this Idempotency-Key was already used for a different request; "
                    "use a new key for a new request"
                )
            replayed.append(self._replay(connection, earlier, part.request_hash))
        return replayed

    @staticmethod
    def _charge_dataset(
        connection: Connection, dataset_id: str, cost: LedgerAmount
    ) -> tuple[int, int]:
        """Charge the dataset cap; (version, units left on the cap) after the charge."""
        row = connection.execute(
            _CHARGE_DATASET, {"ds_id": dataset_id, "cost": cost.units, "unit": _unit_of(cost)}
        ).one_or_none()
        if row is not None:
            return int(row[0]), int(row[1])
        state = connection.execute(_DATASET_STATE, {"ds_id": dataset_id}).one_or_none()
        if state is None or state[0] != "active":
            raise NotFound(f"dataset {dataset_id!r} is not available")
        if state[3] != _unit_of(cost):
            raise InternalError(
                f"a charge in {cost.NAME} cannot go to dataset {dataset_id!r}, whose ledger "
                f"counts {state[3]!r}; nothing was charged"
            )
        left = type(cost)(max(int(state[1]) - int(state[2]), 0))
        raise BudgetExhausted(
            f"the dataset cap cannot cover this request: requested {cost.NAME}="
            f"{cost.exact_str()}, remaining on the dataset={left.exact_str()}; "
            "ask the data owner or request less"
        )

    @staticmethod
    def _charge_grant(
        connection: Connection, dataset_id: str, analyst_id: int, cost: LedgerAmount
    ) -> int:
        """Charge the analyst's grant; units left in it after the charge."""
        row = connection.execute(
            _CHARGE_GRANT,
            {
                "ds_id": dataset_id,
                "analyst": analyst_id,
                "cost": cost.units,
                "now": utcnow(),
            },
        ).one_or_none()
        if row is not None:
            return int(row[0])
        grant = connection.execute(
            _GRANT_STATE, {"ds_id": dataset_id, "analyst": analyst_id}
        ).one_or_none()
        if grant is None:
            raise NotFound(f"dataset {dataset_id!r} is not granted to you")
        left = type(cost)(max(int(grant[0]) - int(grant[1]), 0))
        raise BudgetExhausted(
            f"your grant cannot cover this request: requested {cost.NAME}={cost.exact_str()}, "
            f"remaining in your grant={left.exact_str()}; ask the data owner for more"
        )

    def _replay(self, connection: Connection, entry: Row[Any], request_hash: str) -> Reservation:
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
        grant = connection.execute(
            _GRANT_STATE, {"ds_id": entry.dataset_id, "analyst": entry.principal_id}
        ).one_or_none()
        state = connection.execute(_DATASET_STATE, {"ds_id": entry.dataset_id}).one()
        grant_left = int(grant[0]) - int(grant[1]) if grant is not None else 0
        unit: AccountingUnit = "zcdp" if state[3] == "zcdp" else "pure"
        return Reservation(
            entry_id=int(entry.id),
            cost=ledger_amount(unit, int(entry.epsilon_units)),
            guarantee="pure" if entry.guarantee == "pure" else "approximate",
            created_at=entry.created_at,
            remaining_after=ledger_amount(
                unit, max(min(grant_left, int(state[1]) - int(state[2])), 0)
            ),
            dataset_version=int(entry.dataset_version),
            replayed_release=entry.release,
        )

    def complete(self, entry_id: int, release: dict[str, Any]) -> None:
        """Store the release of a reserved entry (reserved → released), durably, before it is
        shown. Concurrent releases share one durable transaction (services/group_commit.py:
        each returns only once that transaction has committed, so the crash-safety argument of
        :meth:`reserve` holds for each of them)."""

        def write(connection: Connection) -> Exception | None:
            changed = rows_affected(
                connection.execute(
                    _TRANSITION,
                    {
                        "entry_id": entry_id,
                        "new_status": "released",
                        "new_release": release,
                        "done_at": utcnow(),
                    },
                )
            )
            return (
                None if changed == 1 else InternalError(f"ledger entry {entry_id} is not reserved")
            )

        self._releases.commit(write)

    def complete_many(self, releases: Sequence[tuple[int, dict[str, Any]]]) -> None:
        """Store the releases of a batch's reserved entries in one durable transaction (all or
        none: a batch is shown whole)."""
        with self._write_engine.begin() as connection:
            for entry_id, release in releases:
                changed = rows_affected(
                    connection.execute(
                        _TRANSITION,
                        {
                            "entry_id": entry_id,
                            "new_status": "released",
                            "new_release": release,
                            "done_at": utcnow(),
                        },
                    )
                )
                if changed != 1:
                    raise InternalError(f"ledger entry {entry_id} is not reserved")

    def fail(self, entry_id: int) -> None:
        """Mark a reserved entry failed; the charge stands (no refund after data access)."""
        self._transition(entry_id, "failed", None)

    def _transition(self, entry_id: int, status: str, release: dict[str, Any] | None) -> None:
        # Durable (synchronous=FULL / synchronous_commit on): this commit also makes the
        # reservation before it durable (see reserve), and the response waits for it.
        with self._write_engine.begin() as connection:
            changed = rows_affected(
                connection.execute(
                    _TRANSITION,
                    {
                        "entry_id": entry_id,
                        "new_status": status,
                        "new_release": release,
                        "done_at": utcnow(),
                    },
                )
            )
            if changed != 1:
                raise InternalError(f"ledger entry {entry_id} is not reserved")

    def interrupt(self, entry_ids: Sequence[int], *, status: str = "interrupted") -> int:
        """Mark these entries ``status`` (interrupted, or failed) if still reserved: their job's
        worker died, the job was never handed to one, or it failed before its kernel ran. The
        charge stands. Returns how many changed."""
        if not entry_ids:
            return 0
        with self._write_engine.begin() as connection:
            return rows_affected(
                connection.execute(
                    update(LedgerEntry)
                    .where(LedgerEntry.id.in_(list(entry_ids)), LedgerEntry.status == "reserved")
                    .values(status=status, completed_at=utcnow())
                )
            )

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
        # Entries of jobs handed to the queue engine belong to their worker, not to the API
        # process that reserved them: the queue's recovery settles them (services/queues.py).
        queued = exists(
            select(Job.id).where(
                Job.ledger_entry_id == LedgerEntry.id, Job.queue_job_id.is_not(None)
            )
        )
        reserved = (LedgerEntry.status == "reserved") & ~queued
        with self._write_session() as session, session.begin():
            statement = update(LedgerEntry).where(reserved)
            if before is not None:
                statement = statement.where(LedgerEntry.created_at < before)
            if is_alive is not None:
                dead = dead_owners(session, LedgerEntry.instance_id, reserved, is_alive)
                if dead is None:
                    return 0
                statement = statement.where(dead)
            result = session.execute(statement.values(status="interrupted", completed_at=utcnow()))
            return rows_affected(result)

    # -- reading -------------------------------------------------------------------------------

    def budget_status(self, principal: Principal, dataset_id: str) -> BudgetStatus:
        """The analyst's grant and what is left of it and of the dataset cap, in the dataset's
        unit (on a zCDP dataset: the exact rho in ``zcdp``, the epsilon fields as it implies)."""
        with self._sessions() as session:
            grant = self._grant(session, dataset_id, principal.id)
            dataset = session.get(Dataset, dataset_id)
            if grant is None or dataset is None:
                raise NotFound(f"dataset {dataset_id!r} is not granted to you")
            unit = dataset_unit(dataset)
            dataset_left = self._dataset_left(session, dataset_id)
            remaining = self._remaining(session, dataset_id, principal.id)
            return BudgetStatus(
                dataset_id=dataset_id,
                grant_epsilon=display_total(dataset, grant.limit_units),
                grant_spent=display_total(dataset, grant.spent_units),
                dataset_remaining=display_remaining(unit, dataset_left.units),
                remaining_epsilon=display_remaining(unit, remaining.units),
                accounting=unit,
                zcdp=zcdp_amounts(
                    dataset, grant.limit_units, spent=grant.spent_units, remaining=remaining.units
                ),
            )

    def remaining(self, principal_id: int, dataset_id: str) -> LedgerAmount:
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
    def _grant(session: Session, dataset_id: str, analyst_id: int) -> Grant | None:
        return session.scalar(
            select(Grant).where(Grant.dataset_id == dataset_id, Grant.analyst_id == analyst_id)
        )

    @staticmethod
    def _dataset_left(session: Session, dataset_id: str) -> LedgerAmount:
        row = session.execute(
            select(Dataset.cap_units, Dataset.spent_units, Dataset.accounting).where(
                Dataset.id == dataset_id
            )
        ).one_or_none()
        if row is None:
            raise NotFound(f"dataset {dataset_id!r} is not available")
        unit: AccountingUnit = "zcdp" if row[2] == "zcdp" else "pure"
        return ledger_amount(unit, max(row[0] - row[1], 0))

    def _remaining(self, session: Session, dataset_id: str, analyst_id: int) -> LedgerAmount:
        dataset_left = self._dataset_left(session, dataset_id)
        grant = self._grant(session, dataset_id, analyst_id)
        grant_units = grant.limit_units - grant.spent_units if grant else 0
        return type(dataset_left)(min(grant_units, dataset_left.units))


class _OwningSession(Session):
    """A session bound to its own connection, which it closes with itself."""

    def __init__(self, connection: Any) -> None:
        super().__init__(bind=connection, expire_on_commit=False)
        self._own_connection = connection

    def close(self) -> None:
        super().close()
        self._own_connection.close()
