"""Runs a private operation the one permitted way (DESIGN.md "Architecture", contract item 3).

validate (public metadata only) → price → check the owner's guarantee policy against the
request's guarantee → charge the ledger (committed) → load the columns → run the kernel with
the server's generator → store the release in the ledger entry → return it.
Anything that fails before the charge costs nothing; anything after it keeps the charge and
releases nothing (the error message is generic, never data-dependent).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np
from pydantic import BaseModel, ValidationError
from sqlalchemy.orm import Session, sessionmaker

from dpmine.wire import (
    BatchRequest,
    DatasetMetadata,
    Guarantee,
    GuaranteePolicy,
    Receipt,
    guarantee_allowed,
)
from dpmine_server.db.models import Dataset, Job, LedgerEntry, Principal
from dpmine_server.dp.budget import (
    AccountingUnit,
    BudgetError,
    Epsilon,
    LedgerAmount,
    Rho,
    ledger_amount,
)
from dpmine_server.dp.candidates import ProposalPool, drawing_from
from dpmine_server.dp.mechanisms import CountNoiseKind, count_noise
from dpmine_server.dp.zcdp import DEFAULT_DELTA
from dpmine_server.errors import (
    Forbidden,
    InvalidRequest,
    JobCancelled,
    OperationFailed,
)
from dpmine_server.operations import CATALOG, OperationSpec
from dpmine_server.operations.base import Progress, no_progress
from dpmine_server.operations.redescriptions import SharedProposals, batch_shared_proposals
from dpmine_server.services.accounting import (
    dataset_delta,
    dataset_unit,
    display_remaining,
    rho_amounts,
)
from dpmine_server.services.datasets import DatasetService
from dpmine_server.services.failpoints import FailPoints
from dpmine_server.services.ledger import (
    Ledger,
    PartCharge,
    Reservation,
    request_fingerprint,
)
from dpmine_server.services.release_guard import OVERRAN, ReleaseGuard

__all__ = [
    "BatchRelease",
    "Executor",
    "Pending",
    "PendingBatch",
    "PricedCall",
    "Release",
    "batch_part_key",
    "check_guarantee_policy",
]

logger = logging.getLogger(__name__)


def check_guarantee_policy(
    dataset_id: str, operation: str, guarantee: Guarantee, policy: GuaranteePolicy
) -> None:
    """Refuse (Forbidden) a request whose guarantee the dataset's policy does not serve.

    Called after validation and pricing (free, public metadata only) and before the charge
    and any data read, by calls, jobs and estimates alike, with the request's guarantee
    (:meth:`~dpmine_server.operations.base.OperationSpec.request_guarantee`). Privacy: the
    decision depends only on that guarantee, a public function of the request and the public
    metadata, and on the owner's setting, so refusing reveals nothing about the rows
    (docs/operators.md, "Guarantee policy"; ALGORITHMS.md §0.1 on the MCMC operations'
    approximate guarantee)."""
    if guarantee_allowed(guarantee, policy):
        return
    raise Forbidden(
        f"{operation} releases the final state of an MCMC chain (guarantee {guarantee!r}: "
        f"epsilon-DP only at convergence), and dataset {dataset_id!r} serves only exact "
        "guarantees (its owner set guarantee_policy 'pure_only'); nothing was charged. Use an "
        "operation with a pure guarantee (tree.expmech, e.g. the AltExpM miner, or tree.mcmc "
        "with sampler='exact' where its public work bound fits, for trees; "
        "brl.sample_rule_list_exact, sampler='exact', for rule lists), or "
        "ask the data owner to allow approximate guarantees on this dataset"
    )


@dataclass(frozen=True, slots=True)
class PricedCall:
    """A validated request, the ε its kernel runs at (``cost``) and what the ledger debits for
    it in the dataset's unit (``charge``: the same ε on a pure dataset, its ρ on a zCDP one)."""

    spec: OperationSpec[Any, Any]
    request: BaseModel
    cost: Epsilon
    guarantee: Guarantee
    charge: LedgerAmount


@dataclass(frozen=True, slots=True)
class Pending:
    """A charged request whose release is still to be computed."""

    priced: PricedCall
    dataset_id: str
    reservation: Reservation
    principal: Principal
    #: zCDP datasets: the delta the receipt shows ρ at (value, whether the public default).
    delta: tuple[Decimal, bool] = (DEFAULT_DELTA, True)


@dataclass(frozen=True, slots=True)
class Release:
    """The response body of an operation and whether it was replayed from the ledger."""

    body: dict[str, Any]
    replayed: bool
    entry_id: int


@dataclass(frozen=True, slots=True)
class PendingBatch:
    """A charged batch: one pending part per ledger entry, in the request's order, and the
    parts whose rejection draws share one proposal cap (None: each keeps its own)."""

    parts: list[Pending]
    shared: SharedProposals | None = None


@dataclass(frozen=True, slots=True)
class BatchRelease:
    """The parts' response bodies in order and whether they were replayed from the ledger."""

    bodies: list[dict[str, Any]]
    replayed: bool


def batch_part_key(idempotency_key: str | None, index: int) -> str | None:
    """The ledger's idempotency key of part ``index`` of a batch sent with ``idempotency_key``
    (at most 51 characters whatever the client's key; a namespace that a client's own key, a
    UUID, does not take)."""
    if idempotency_key is None:
        return None
    digest = hashlib.sha256(idempotency_key.encode()).hexdigest()[:40]
    return f"batch/{digest}/{index}"


class Executor:
    """Prices and executes operations for analysts."""

    def __init__(
        self,
        *,
        sessions: sessionmaker[Session],
        ledger: Ledger,
        datasets: DatasetService,
        rng_factory: Callable[[int], np.random.Generator],
        extra_operations: dict[str, OperationSpec[Any, Any]] | None = None,
        fail_points: FailPoints | None = None,
    ) -> None:
        self._sessions = sessions
        self._ledger = ledger
        self._datasets = datasets
        self._rng_factory = rng_factory
        self._catalog = {**CATALOG, **(extra_operations or {})}
        #: Test mode only: calls that fail after their charge (services/failpoints.py).
        self._fail_points = fail_points

    def spec(self, operation: str) -> OperationSpec[Any, Any]:
        """The operation called ``operation``."""
        spec = self._catalog.get(operation)
        if spec is None:
            raise InvalidRequest(
                f"unknown operation {operation!r}; known: {', '.join(sorted(self._catalog))}"
            )
        return spec

    def public_metadata(self, session: Session, dataset_id: str) -> DatasetMetadata:
        """The current public metadata of a dataset (cached per version; no grant check)."""
        return self._datasets.public_metadata(session, dataset_id)

    def price(
        self,
        spec: OperationSpec[Any, Any],
        request: BaseModel | dict[str, Any],
        metadata: DatasetMetadata,
        unit: AccountingUnit,
    ) -> PricedCall:
        """Validate a request against public metadata and compute its exact cost in ``unit``,
        the dataset's ledger unit (free)."""
        if metadata.kind not in spec.dataset_kinds:
            raise InvalidRequest(
                f"{spec.name} does not apply to a {metadata.kind!r} dataset; it needs one of "
                f"{sorted(spec.dataset_kinds)}"
            )
        try:
            model = (
                request
                if isinstance(request, spec.request_model)
                else spec.request_model.model_validate(request)
            )
            spec.validate(model, metadata)
            cost, charge = spec.charge(model, unit)
        except ValidationError as error:
            raise InvalidRequest(_first_errors(error)) from error
        except (ValueError, BudgetError) as error:
            raise InvalidRequest(str(error)) from error
        return PricedCall(
            spec=spec,
            request=model,
            cost=cost,
            guarantee=spec.request_guarantee(model, metadata),
            charge=charge,
        )

    def begin(
        self,
        *,
        principal: Principal,
        dataset_id: str,
        spec: OperationSpec[Any, Any],
        request: BaseModel | dict[str, Any],
        idempotency_key: str | None,
    ) -> Release | Pending:
        """Validate and charge (committed), or return the stored release of a retry."""
        if principal.role != "analyst":
            raise Forbidden("owners manage datasets; query them with an analyst's key")
        with self._sessions() as session:  # metadata cached per (dataset, version)
            served = self._datasets.served_for_analyst(session, dataset_id, principal)
        priced = self.price(spec, request, served.metadata, served.accounting)
        check_guarantee_policy(dataset_id, spec.name, priced.guarantee, served.guarantee_policy)
        parameters = priced.request.model_dump(mode="json")
        reservation = self._ledger.reserve(
            principal=principal,
            dataset_id=dataset_id,
            operation=spec.name,
            parameters=parameters,
            cost=priced.charge,
            guarantee="pure" if priced.guarantee == "pure" else "approximate",
            idempotency_key=idempotency_key,
            request_hash=request_fingerprint(spec.name, dataset_id, parameters),
        )
        if reservation.replayed_release is not None:
            body = dict(reservation.replayed_release)
            body["receipt"] = {**body["receipt"], "replayed": True}
            return Release(body=body, replayed=True, entry_id=reservation.entry_id)
        return Pending(
            priced=priced,
            dataset_id=dataset_id,
            reservation=reservation,
            principal=principal,
            delta=served.delta,
        )

    def finish(
        self,
        pending: Pending,
        progress: Progress = no_progress,
        *,
        settle: Callable[[], bool] | None = None,
        guard: ReleaseGuard | None = None,
    ) -> Release:
        """Compute a charged request and store its release before anyone sees it.

        ``guard`` (services/release_guard.py) settles overruns: the release is stored only if
        the kernel claims it before the request's padded deadline expires the guard; otherwise
        it is withheld and the entry failed (charge kept). ``settle`` (a job's worker) is
        called after that claim: it holds the job's slot until its public deadline and says
        whether the release may still be stored (False: a cancel arrived in the meantime, and
        the release is withheld whatever the kernel did)."""
        # The charge is committed: from here on nothing is refunded.
        entry_id = pending.reservation.entry_id
        try:
            if guard is not None and guard.expired:
                raise OperationFailed(OVERRAN)  # the deadline passed before the kernel began
            body = self._compute(pending, progress, guard)
            if guard is not None and not guard.claim():
                raise OperationFailed(OVERRAN)
            if settle is not None and not settle():
                raise JobCancelled(JobCancelled.MESSAGE)
        except Exception as error:
            overran = guard is not None and guard.expired
            if overran:  # the deadline may have failed the entry already
                self._ledger.interrupt([entry_id], status="failed")
            else:
                self._ledger.fail(entry_id)
            if isinstance(error, JobCancelled) and not overran:
                raise
            if overran:
                logger.warning(
                    "%s overran its padded deadline (entry %s): release withheld",
                    pending.priced.spec.name,
                    entry_id,
                )
                raise OperationFailed(OVERRAN) from None
            logger.exception(
                "operation %s failed after its charge (entry %s)",
                pending.priced.spec.name,
                entry_id,
            )
            raise OperationFailed(
                f"{pending.priced.spec.name} failed after its charge; nothing was released and "
                "the charge stands. The owner can see the server log."
            ) from None
        self._ledger.complete(entry_id, body)
        return Release(body=body, replayed=False, entry_id=entry_id)

    def resume(self, job: Job, entry: LedgerEntry, principal: Principal) -> Pending:
        """The pending computation of a submitted job, rebuilt from the database by the worker
        process that runs it (the request was validated and charged at submission)."""
        spec = self.spec(job.operation)
        request = spec.request_model.model_validate(job.request)
        with self._sessions() as session:
            dataset = session.get(Dataset, job.dataset_id)
            unit = "pure" if dataset is None else dataset_unit(dataset)
            delta = (DEFAULT_DELTA, True) if dataset is None else dataset_delta(dataset)
        # The charge is the entry's, in the dataset's unit. On a pure dataset the kernel runs at
        # that ε, as ever; on a zCDP one its ε is recomputed from the public request, and the
        # kernel never runs unless the entry's ρ is exactly what that ε costs.
        charge = ledger_amount(unit, entry.epsilon_units)
        cost, expected = spec.charge(request, unit)
        if isinstance(charge, Epsilon):
            cost = charge
        elif expected != charge:  # a bug, never the data: the worker fails the entry and logs it
            raise RuntimeError(
                f"job {job.id}: the ledger entry holds rho={charge.exact_str()} but the request "
                f"costs rho={expected.exact_str()}; the kernel was not run"
            )
        reservation = Reservation(
            entry_id=entry.id,
            cost=charge,
            guarantee="pure" if entry.guarantee == "pure" else "approximate",
            created_at=entry.created_at,
            remaining_after=ledger_amount(unit, job.remaining_units or 0),
            dataset_version=entry.dataset_version,
        )
        return Pending(
            priced=PricedCall(
                spec=spec,
                request=request,
                cost=cost,
                guarantee=reservation.guarantee,  # the request's, recorded at submission
                charge=charge,
            ),
            dataset_id=job.dataset_id,
            reservation=reservation,
            principal=principal,
            delta=delta,
        )

    def execute(
        self,
        *,
        principal: Principal,
        dataset_id: str,
        spec: OperationSpec[Any, Any],
        request: BaseModel | dict[str, Any],
        idempotency_key: str | None,
        guard: ReleaseGuard | None = None,
    ) -> Release:
        """:meth:`begin` then :meth:`finish` in the caller's thread; with a ``guard``, the
        kernel's progress calls stop it once the guard has expired."""
        started = self.begin(
            principal=principal,
            dataset_id=dataset_id,
            spec=spec,
            request=request,
            idempotency_key=idempotency_key,
        )
        if isinstance(started, Release):
            return started
        if guard is None:
            return self.finish(started)
        guard.bind(started.reservation.entry_id)
        return self.finish(started, guard.progress, guard=guard)

    def price_batch(
        self,
        dataset_id: str,
        batch: BatchRequest,
        served_metadata: DatasetMetadata,
        policy: GuaranteePolicy,
        unit: AccountingUnit,
    ) -> list[PricedCall]:
        """Every part validated and priced (free), or the whole batch refused naming the first
        bad part and what to fix. Only inline operations: a job's part would run outside the
        request that pads the batch."""
        priced = []
        for index, part in enumerate(batch.parts):
            try:
                spec = self.spec(part.operation)
                if spec.mode != "inline":
                    raise InvalidRequest(
                        f"{spec.name} runs as a job and cannot be batched; call it on its own "
                        "(or submit it with POST .../jobs)"
                    )
                call = self.price(spec, part.request, served_metadata, unit)
                check_guarantee_policy(dataset_id, spec.name, call.guarantee, policy)
                priced.append(call)
            except InvalidRequest as error:
                raise InvalidRequest(
                    f"batch part {index} ({part.operation}): {error.message}; nothing was charged"
                ) from error
            except Forbidden as error:
                raise Forbidden(f"batch part {index}: {error.message}") from error
        return priced

    def begin_batch(
        self,
        *,
        principal: Principal,
        dataset_id: str,
        batch: BatchRequest,
        idempotency_key: str | None,
    ) -> BatchRelease | PendingBatch:
        """Validate every part, then charge them all in one transaction (committed), or return
        the stored releases of a retry. Refusals come before the charge and cost nothing."""
        if principal.role != "analyst":
            raise Forbidden("owners manage datasets; query them with an analyst's key")
        with self._sessions() as session:
            served = self._datasets.served_for_analyst(session, dataset_id, principal)
        priced = self.price_batch(
            dataset_id, batch, served.metadata, served.guarantee_policy, served.accounting
        )
        batch_hash = request_fingerprint("batch", dataset_id, batch.model_dump(mode="json"))
        charges = [
            PartCharge(
                operation=call.spec.name,
                parameters=call.request.model_dump(mode="json"),
                cost=call.charge,
                guarantee="pure" if call.guarantee == "pure" else "approximate",
                idempotency_key=batch_part_key(idempotency_key, index),
                request_hash=request_fingerprint(
                    call.spec.name, dataset_id, {"batch": batch_hash, "part": index}
                ),
            )
            for index, call in enumerate(priced)
        ]
        reservations = self._ledger.reserve_batch(
            principal=principal, dataset_id=dataset_id, parts=charges
        )
        if all(reservation.is_replay for reservation in reservations):
            bodies = []
            for reservation in reservations:
                body = dict(reservation.replayed_release or {})
                body["receipt"] = {**body["receipt"], "replayed": True}
                bodies.append(body)
            return BatchRelease(bodies=bodies, replayed=True)
        shared = batch_shared_proposals(
            [(call.spec.name, call.request.model_dump(mode="json")) for call in priced],
            served.metadata,
        )
        return PendingBatch(
            shared=shared,
            parts=[
                Pending(
                    priced=call,
                    dataset_id=dataset_id,
                    reservation=reservation,
                    principal=principal,
                    delta=served.delta,
                )
                for call, reservation in zip(priced, reservations, strict=True)
            ],
        )

    def finish_batch(self, pending: PendingBatch, guard: ReleaseGuard | None) -> BatchRelease:
        """Compute every part (each with its own generator, seeded by its own entry) and store
        all releases in one transaction, or none: a part that fails, or a batch whose guard
        expired, fails every entry and releases nothing (the charges stand; the message is
        generic, as for one call)."""
        entry_ids = [part.reservation.entry_id for part in pending.parts]
        progress = guard.progress if guard is not None else no_progress
        try:
            if guard is not None and guard.expired:
                raise OperationFailed(OVERRAN)
            bodies = self._compute_parts(pending, progress, guard)
            if guard is not None and not guard.claim():
                raise OperationFailed(OVERRAN)
            self._ledger.complete_many(list(zip(entry_ids, bodies, strict=True)))
        except Exception:
            self._ledger.interrupt(entry_ids, status="failed")
            if guard is not None and guard.expired:
                logger.warning("a batch overran its padded deadline (entries %s)", entry_ids)
                raise OperationFailed(OVERRAN) from None
            logger.exception("a batch failed after its charge (entries %s)", entry_ids)
            raise OperationFailed(
                "the batch failed after its charge; nothing was released and the charges "
                "stand. The owner can see the server log."
            ) from None
        return BatchRelease(bodies=bodies, replayed=False)

    def execute_batch(
        self,
        *,
        principal: Principal,
        dataset_id: str,
        batch: BatchRequest,
        idempotency_key: str | None,
        guard: ReleaseGuard | None = None,
    ) -> BatchRelease:
        """:meth:`begin_batch` then :meth:`finish_batch` in the caller's thread."""
        started = self.begin_batch(
            principal=principal, dataset_id=dataset_id, batch=batch, idempotency_key=idempotency_key
        )
        if isinstance(started, BatchRelease):
            return started
        if guard is not None:
            guard.bind_many([part.reservation.entry_id for part in started.parts])
        return self.finish_batch(started, guard)

    def _compute_parts(
        self, pending: PendingBatch, progress: Progress, guard: ReleaseGuard | None
    ) -> list[dict[str, Any]]:
        """Every part in order; the jointly capped ones (``pending.shared``) in one shared pool
        of the joint cap's proposals, as the batch's timing budget prices them
        (services/timing.py ``batch_budget``)."""
        shared = pending.shared
        pool = ProposalPool(shared.cap) if shared is not None else None
        bodies = []
        for position, part in enumerate(pending.parts):
            if pool is not None and shared is not None and position in shared.parts:
                with drawing_from(pool):
                    bodies.append(self._compute(part, progress, guard))
            else:
                bodies.append(self._compute(part, progress, guard))
        return bodies

    def _compute(
        self, pending: Pending, progress: Progress, guard: ReleaseGuard | None = None
    ) -> dict[str, Any]:
        """The kernel's fields and receipt; an expired ``guard`` stops the kernel at once
        (services/release_guard.py, ``stoppable``)."""
        priced, dataset_id, reservation = pending.priced, pending.dataset_id, pending.reservation
        columns = self._datasets.columns(dataset_id, reservation.dataset_version)
        # Count-like releases draw the discrete Gaussian of the same ρ on a zCDP ledger only
        # (dp/mechanisms.py count_noise): a public function of the dataset's unit.
        kind: CountNoiseKind = (
            "discrete_gaussian" if _unit_of(reservation.cost) == "zcdp" else "laplace"
        )
        with count_noise(kind), guard.stoppable() if guard is not None else nullcontext():
            if self._fail_points is not None:
                self._fail_points.check(priced.spec.name)
            fields = priced.spec.run(
                columns,
                priced.request,
                priced.cost,  # the priced ε (on a zCDP dataset the ledger holds its ρ)
                self._rng_factory(reservation.entry_id),
                progress,
            )
        receipt = Receipt(
            ledger_entry_id=reservation.entry_id,
            dataset_id=dataset_id,
            operation=priced.spec.name,
            epsilon=priced.cost.display(),
            epsilon_exact=priced.cost.exact_str(),
            guarantee="pure" if reservation.guarantee == "pure" else "approximate",
            remaining_epsilon=display_remaining(
                _unit_of(reservation.remaining_after), reservation.remaining_after.units
            ),
            created_at=reservation.created_at,
            accounting=_unit_of(reservation.cost),
            zcdp=(
                rho_amounts(
                    reservation.cost.units,
                    pending.delta,
                    remaining=reservation.remaining_after.units,
                )
                if isinstance(reservation.cost, Rho)
                else None
            ),
        )
        response: BaseModel = priced.spec.response_model.model_validate(
            {**fields, "receipt": receipt}
        )
        return response.model_dump(mode="json")


def _unit_of(amount: LedgerAmount) -> AccountingUnit:
    return "zcdp" if isinstance(amount, Rho) else "pure"


def _first_errors(error: ValidationError) -> str:
    parts = []
    for item in error.errors()[:10]:
        location = ".".join(str(part) for part in item.get("loc", ()))
        parts.append(f"{location or 'request'}: {item.get('msg', 'invalid')}")
    return "; ".join(parts)
