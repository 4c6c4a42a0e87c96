"""Shared pieces of the routes: the documented error responses and the one code path by which
a route runs a private operation."""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from concurrent.futures import Future
from typing import Annotated, Any

import anyio.to_thread
from fastapi import APIRouter, Body, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel

from dpmine.wire import BatchRequest, DatasetMetadata, ErrorBody, ExtendOneRequest
from dpmine_server.api.deps import (
    AnalystDep,
    Arrival,
    ArrivalDep,
    IdempotencyKeyDep,
    ServicesDep,
)
from dpmine_server.api.examples import openapi_examples
from dpmine_server.db.models import Principal
from dpmine_server.errors import (
    ChargeKeptNoResult,
    OperationFailed,
    RequestInProgress,
    ServerError,
)
from dpmine_server.operations import OperationSpec
from dpmine_server.services.container import Services
from dpmine_server.services.extension_model import ModelGuard, Ticket, running
from dpmine_server.services.extension_pricing import price_extension
from dpmine_server.services.kernel_lane import LanePlace
from dpmine_server.services.release_guard import OVERRAN, ReleaseGuard
from dpmine_server.services.timing import TimingPolicy

__all__ = [
    "ERRORS",
    "OPERATION_ERRORS",
    "arrival_budgets",
    "cold_load_budget",
    "operation_id",
    "operation_router",
    "padded_batch",
    "padded_operation",
    "run_operation",
]

logger = logging.getLogger(__name__)

#: Seconds between two reads of an unsettled original when no padding grid is configured.
_RETRY_POLL_S = 0.02
#: Least time a retry waits past its own deadline for an original that overran.
_RETRY_MIN_GRACE_S = 1.0

#: What each error status means, as the OpenAPI document says it (every error has the same
#: ErrorBody shape; its ``error`` field names the class, e.g. BudgetExhausted).
_ERROR_MEANINGS: dict[int, str] = {
    401: "Missing, unknown or disabled API key.",
    403: "This key may not do this (an owner's key on an analyst's route, or the reverse).",
    404: "Unknown dataset, job or principal, or a dataset not granted to you.",
    409: "BudgetExhausted (nothing charged), RequestInProgress (retry with the same "
    "Idempotency-Key), IdempotencyConflict, or ChargeKeptNoResult (charged, nothing released).",
    413: "The body is over the server's size limit; nothing was read or charged.",
    422: "InvalidRequest: nothing was charged; the detail says what to fix.",
    429: "RateLimited (too many failed logins from this client or for this key), Overloaded "
    "(the server holds its public limit of requests at once; nothing charged; wait "
    "Retry-After seconds and send it again with the same Idempotency-Key) or TooManyJobs (your "
    "jobs not yet shown settled are at the server's limit; nothing charged; submit again once "
    "one is shown settled).",
}
#: Error responses documented on every route (all share the ErrorBody shape).
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": meaning} for code, meaning in _ERROR_MEANINGS.items()
}
#: The routes of private operations can also fail after their charge.
OPERATION_ERRORS: dict[int | str, dict[str, Any]] = {
    **ERRORS,
    500: {
        "model": ErrorBody,
        "description": "OperationFailed: the operation failed after its charge, or did not "
        "finish within its padded time budget; nothing was released and the charge stands.",
    },
}


def operation_id(route: APIRoute) -> str:
    """The OpenAPI operationId of a route: its name (an operation's name with ``_`` for ``.``,
    e.g. ``count_noisy``; a route function's name otherwise), stable across releases."""
    return route.name.replace(".", "_")


def run_operation(
    services: Services,
    *,
    principal: Principal,
    dataset_id: str,
    operation: str,
    request: BaseModel,
    idempotency_key: str | None,
    response: Response,
    guard: ReleaseGuard | None = None,
) -> dict[str, Any]:
    """Validate, charge, compute, store; or replay the stored release of a retry.

    An ``inline`` operation is computed in the calling thread (its release stored only if it
    claims ``guard`` before the deadline); a ``job`` operation is submitted to the job runner
    and waited for (the same ledger entry and job a ``POST .../jobs`` makes).
    """
    executor = services.executor
    spec = executor.spec(operation)
    if spec.mode == "job":
        release = services.jobs.execute(
            principal=principal,
            dataset_id=dataset_id,
            operation=spec.name,
            request=request.model_dump(mode="json"),
            idempotency_key=idempotency_key,
        )
    else:
        release = executor.execute(
            principal=principal,
            dataset_id=dataset_id,
            spec=spec,
            request=request,
            idempotency_key=idempotency_key,
            guard=guard,
        )
    if release.replayed:
        response.headers["Idempotent-Replayed"] = "true"
    response.headers["Cache-Control"] = "no-store"
    return release.body


def cold_load_budget(services: Services, policy: TimingPolicy, *, dataset_id: str) -> float:
    """Seconds a request arriving now must add to its budget because its dataset is not
    loaded in this process: the public load budget (the load is padded to it, see
    :meth:`DatasetService._load_version`), or 0 when the current version is resident.
    Decided at arrival, before anything is loaded; residency follows the requests and
    registrations the server has seen, never the data."""
    return arrival_budgets(services, policy, dataset_id=dataset_id, work=_no_work)[1]


def _no_work(_metadata: DatasetMetadata) -> float:
    """The work of a request priced apart (:func:`cold_load_budget`, :func:`_padded_operation`)."""
    return 0.0


def arrival_budgets(
    services: Services,
    policy: TimingPolicy,
    *,
    dataset_id: str,
    work: Callable[[DatasetMetadata], float],
) -> tuple[float, float]:
    """``(budget, cold)`` of a request arriving now, from one read of the dataset's current
    version (the metadata comes from the per-version cache): ``budget = work(metadata)``, the
    padding budget of its public parameters (``policy.base`` when the dataset is unknown: it
    is refused before its charge, unpadded), and ``cold``, the load budget it adds when that
    version is not resident (:func:`cold_load_budget`). Public values only."""
    datasets = services.datasets
    try:
        with services.sessions() as session:
            version = datasets.current_version(session, dataset_id)
            if version is None:
                return policy.base, 0.0
            metadata = datasets.version_metadata(session, dataset_id, version)
    except Exception:  # the dataset was read moments ago; never fail a release here
        logger.exception("no metadata for the padding budget of %s", dataset_id)
        return policy.base, 0.0
    if not policy.enabled or datasets.is_resident(dataset_id, version):
        return work(metadata), 0.0
    return work(metadata), policy.load_budget(metadata)


async def padded_operation(
    services: Services,
    *,
    arrival: Arrival,
    principal: Principal,
    dataset_id: str,
    operation: str,
    request: BaseModel,
    idempotency_key: str | None,
    response: Response,
) -> dict[str, Any]:
    """:func:`run_operation` in a worker thread, its answer held until the padded deadline
    (services/timing.py): fresh releases, replays and failures after the charge alike. Refusals
    before the charge (validation, budget, auth) touch no data and return at once.

    An inline kernel still running at the deadline fails closed there (services/
    release_guard.py); a job's worker settles it at the end of its slot the same way. An
    inline kernel of a padded server runs in its turn in the process's kernel lane, and the
    deadline adds the lane's public wait (services/kernel_lane.py).

    The request holds one of its process's public in-flight places (services/admission.py)
    from arrival to its answer, or is refused 429 at once, before anything is charged."""
    with _lane_place(arrival.place), services.admission.admitted():
        return await _padded_operation(
            services,
            arrival=arrival,
            principal=principal,
            dataset_id=dataset_id,
            operation=operation,
            request=request,
            idempotency_key=idempotency_key,
            response=response,
        )


@contextlib.contextmanager
def _lane_place(place: LanePlace) -> Iterator[None]:
    """Leave ``place`` when the request ends, unless a call thread took it over (that thread
    leaves it when its kernel has really stopped, :func:`_before_deadline`)."""
    try:
        yield
    finally:
        place.leave_unless_handed_over()


async def _arrival_budgets(
    services: Services, dataset_id: str, work: Callable[[DatasetMetadata], float]
) -> tuple[float, float]:
    """:func:`arrival_budgets` with the process's policy, in a worker thread."""
    return await anyio.to_thread.run_sync(
        functools.partial(
            arrival_budgets, services, services.timing, dataset_id=dataset_id, work=work
        )
    )


async def _lane_guard(
    services: Services, place: LanePlace, budget: float, cold: float
) -> ReleaseGuard:
    """The release guard of a padded inline request, its kernel reserved in the lane (or, on
    a test server without the lane, leaving it: the lane audit's broken variant)."""
    if not services.settings.timing_kernel_lane:
        place.leave()
        return ReleaseGuard()
    await anyio.to_thread.run_sync(_reserve, services.timing, place, budget, cold)
    return ReleaseGuard(place)


def _reserve(policy: TimingPolicy, place: LanePlace, budget: float, cold: float) -> float:
    """Reserve the kernel of a request of this ``budget`` (plus ``cold``, its load) in its
    process's lane; the public wait (services/kernel_lane.py)."""
    pre, kernel = policy.lane_reservation(budget, cold)
    return place.reserve(pre, kernel)


async def _padded_operation(
    services: Services,
    *,
    arrival: Arrival,
    principal: Principal,
    dataset_id: str,
    operation: str,
    request: BaseModel,
    idempotency_key: str | None,
    response: Response,
) -> dict[str, Any]:
    """:func:`padded_operation` once admitted."""
    policy = services.timing
    place = arrival.place
    inline = services.executor.spec(operation).mode != "job"
    settings = services.settings
    modelled = (
        inline
        and policy.fails_closed
        and settings.timing_warm_extensions
        and settings.timing_kernel_lane
        and isinstance(request, ExtendOneRequest)
    )
    priced_cold = functools.partial(policy.budget, operation, request)
    # A call the cache model prices needs its cold price only when the model cannot price it.
    budget, cold = await _arrival_budgets(
        services, dataset_id, _no_work if modelled else priced_cold
    )
    guard: ReleaseGuard | None = None
    ticket: Ticket | None = None
    if inline and policy.fails_closed:
        if modelled and cold == 0.0:
            assert isinstance(request, ExtendOneRequest)
            # Priced against the public cache model of its store (services/extension_model.py).
            priced = await anyio.to_thread.run_sync(
                functools.partial(
                    price_extension,
                    services,
                    policy,
                    dataset_id=dataset_id,
                    request=request,
                    arrival=arrival.time,
                    reserve=functools.partial(_reserve, policy, place, cold=0.0),
                )
            )
            if priced is not None:
                budget, ticket = priced
                guard = ModelGuard(ticket, place)
        if modelled and ticket is None:
            budget, cold = await _arrival_budgets(services, dataset_id, priced_cold)
        if guard is None:
            guard = await _lane_guard(services, place, budget, cold)
    else:
        place.leave()  # no inline kernel here (a job's runs on a worker's public schedule)
    call = functools.partial(
        run_operation,
        services,
        principal=principal,
        dataset_id=dataset_id,
        operation=operation,
        request=request,
        idempotency_key=idempotency_key,
        response=response,
        guard=guard,
    )
    if ticket is not None:
        call = functools.partial(_with_ticket, ticket, call)
    return await _padded(
        services,
        policy,
        operation,
        call,
        guard,
        arrival.time,
        budget + place.wait,
        cold,
        job=not inline,
    )


def _with_ticket(ticket: Ticket, call: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run ``call`` with its extension ticket active (its kernel reads the pinned candidate
    sets; services/extension_model.py)."""
    with running(ticket):
        return call()


async def padded_batch(
    services: Services,
    *,
    arrival: Arrival,
    principal: Principal,
    dataset_id: str,
    batch: BatchRequest,
    idempotency_key: str | None,
    response: Response,
) -> dict[str, Any]:
    """A batch of inline calls (executor.execute_batch) in a worker thread, held like one call
    (:func:`padded_operation`) until the padded deadline of its public batch budget
    (:meth:`TimingPolicy.batch_budget`, the parts' work added up and one base, plus the
    lane's wait). Refusals before the charge (a bad part, budget, auth) touch no data and
    return at once. Admitted like one call (services/admission.py)."""
    with _lane_place(arrival.place), services.admission.admitted():
        return await _padded_batch(
            services,
            arrival=arrival,
            principal=principal,
            dataset_id=dataset_id,
            batch=batch,
            idempotency_key=idempotency_key,
            response=response,
        )


async def _padded_batch(
    services: Services,
    *,
    arrival: Arrival,
    principal: Principal,
    dataset_id: str,
    batch: BatchRequest,
    idempotency_key: str | None,
    response: Response,
) -> dict[str, Any]:
    """:func:`padded_batch` once admitted."""
    policy = services.timing
    place = arrival.place
    parts = [(part.operation, part.request) for part in batch.parts]
    budget, cold = await _arrival_budgets(
        services, dataset_id, functools.partial(policy.batch_budget, parts)
    )
    guard: ReleaseGuard | None = None
    if policy.fails_closed:
        guard = await _lane_guard(services, place, budget, cold)
    else:
        place.leave()

    def call() -> dict[str, Any]:
        release = services.executor.execute_batch(
            principal=principal,
            dataset_id=dataset_id,
            batch=batch,
            idempotency_key=idempotency_key,
            guard=guard,
        )
        if release.replayed:
            response.headers["Idempotent-Replayed"] = "true"
        response.headers["Cache-Control"] = "no-store"
        return {"parts": release.bodies}

    return await _padded(
        services, policy, "batch", call, guard, arrival.time, budget + place.wait, cold
    )


async def _padded(
    services: Services,
    policy: TimingPolicy,
    label: str,
    call: Callable[[], dict[str, Any]],
    guard: ReleaseGuard | None,
    arrival: float,
    budget: float,
    cold: float,
    *,
    job: bool = False,
) -> dict[str, Any]:
    """Run ``call`` and hold its answer (release, replay or failure after the charge) until the
    padded deadline of ``budget + cold`` after ``arrival``; with a ``guard``, an overrun fails
    closed at that deadline. ``job``: ``call`` waits for a job shown settled on the jobs'
    public schedule (:func:`_hold`)."""
    hold = functools.partial(_hold, policy, arrival, label, budget + cold, job=job)
    try:
        if guard is None:
            body = await anyio.to_thread.run_sync(call)
        else:
            deadline = arrival + policy.deadline_offset(budget + cold)
            body = await _before_deadline(services, call, guard, deadline=deadline)
    except (RequestInProgress, ChargeKeptNoResult):
        # A retry of a charged request: its answer must not tell whether the original's
        # kernel is still running or how it ended before the original itself shows it.
        return await _answer_retry(policy, call, hold, grace=max(budget, _RETRY_MIN_GRACE_S))
    except ServerError as error:
        if not isinstance(error, OperationFailed):
            raise  # refused before the charge: no data was read
        await hold()
        raise
    except Exception:
        await hold()
        raise
    await hold()
    return body


async def _before_deadline(
    services: Services,
    call: Callable[[], dict[str, Any]],
    guard: ReleaseGuard,
    *,
    deadline: float,
) -> dict[str, Any]:
    """Run ``call`` in a worker thread; at the monotonic ``deadline``, settle it as an overrun
    unless its kernel has claimed its release (services/release_guard.py). The overrun answer
    is given at the deadline; the abandoned thread's kernel is stopped by the guard's expiry
    (``stoppable``) and its release is withheld. A call that claimed in time is waited for
    (only its ledger write is left)."""
    outcome: Future[dict[str, Any]] = Future()
    place = guard.place

    def work() -> None:
        if place is not None:
            place.hand_over()  # this thread leaves it, once its kernel has stopped
        try:
            outcome.set_result(call())
        except BaseException as error:  # handed to the awaiting route below
            outcome.set_exception(error)
        finally:
            if place is not None:
                place.leave()

    with anyio.move_on_after(max(deadline - time.monotonic(), 0.0)):
        await anyio.to_thread.run_sync(work, abandon_on_cancel=True)
    if not outcome.done() and guard.expire():
        entry_ids = guard.entry_ids
        if entry_ids:  # else the executor fails it before reading any data
            # Answered now; the entries are failed alongside (a kernel that never reaches a
            # progress call would otherwise leave them reserved). The kernel's own thread fails
            # them too when it stops: both writes are conditional on "reserved".
            threading.Thread(
                target=services.ledger.interrupt,
                args=(entry_ids,),
                kwargs={"status": "failed"},
                name="dpmine-overrun",
                daemon=True,
            ).start()
        raise OperationFailed(OVERRAN)
    return await anyio.to_thread.run_sync(outcome.result)


async def _answer_retry(
    policy: TimingPolicy,
    call: Callable[[], dict[str, Any]],
    hold: Callable[[], Awaitable[None]],
    *,
    grace: float,
) -> dict[str, Any]:
    """Answer a retry (same Idempotency-Key, same request) as the original is answered.

    The retry is held to its *own* padded deadline first. Its budget is the original's (same
    operation, same parameters, same public metadata) and it arrived later, so by then the
    original's deadline has passed and the original is settled: released, or failed (an
    overrun fails closed at that deadline). Only then is the ledger read again: the stored
    release is replayed and a failed original gives ChargeKeptNoResult. An original still
    unsettled (only in test mode's release-late setting, or while its store commits) is polled
    on the public grid for at most ``grace`` more seconds (its budget, at least a second), and
    then answered 409 RequestInProgress. What the retry shows, and when, is therefore a
    function of public values and of the original's own shown outcome, never of how far its
    kernel had got when the retry arrived (issue #20, "retry oracle").
    """
    await hold()
    step = policy.grid if policy.enabled and policy.grid > 0 else _RETRY_POLL_S
    give_up = time.monotonic() + grace
    while True:
        try:
            return await anyio.to_thread.run_sync(call)
        except RequestInProgress:
            if time.monotonic() >= give_up:
                raise
        await anyio.sleep(step)


async def _hold(
    policy: TimingPolicy, arrival: float, operation: str, budget: float, *, job: bool = False
) -> None:
    """Sleep until the padded deadline of a request that arrived at ``arrival`` (monotonic)
    with this budget; past it, return at once when overruns fail closed (the answer is the
    deadline's), else sleep to the first grid tick after now (test mode's late release).

    ``job``: the synchronous route of a job-mode operation, answered once its job is shown
    settled (services/jobs.py ``execute``). That time is on the jobs' public schedule, which
    counts the jobs' base and any wait for a worker slot, so it is always past this request's
    own deadline; an overrun of the job is the worker's to report (services/workers.py), and
    logging one here for every job call would bury the real ones."""
    if not policy.enabled:
        return
    elapsed = time.monotonic() - arrival
    if elapsed > policy.deadline_offset(budget) and not job:
        # The owner's signal to raise DPMINE_TIMING_SCALE (never shown to the analyst).
        logger.warning(
            "%s overran its padding budget: %.3f s against %.3f s", operation, elapsed, budget
        )
    if policy.fails_closed:  # an overrun was settled at the deadline: nothing to wait for
        await anyio.sleep(max(arrival + policy.deadline_offset(budget) - time.monotonic(), 0.0))
    else:
        await anyio.sleep(policy.remaining(arrival, budget))


def operation_router(specs: Sequence[OperationSpec[Any, Any]]) -> APIRouter:
    """A router with one ``POST /datasets/{dataset_id}/<spec.path>`` per operation.

    Every endpoint is the same thin function (validate, charge, compute, store via
    :func:`run_operation`); its body parameter is typed with the operation's request model so
    the OpenAPI document shows the exact request and response schemas. The route answers with
    the release whatever the operation's mode: an ``inline`` operation is computed in the
    request, a ``job`` operation by the job runner while the request waits (``POST .../jobs``
    returns at once for either).
    """
    router = APIRouter(tags=["operations"])
    for spec in specs:
        router.add_api_route(
            f"/datasets/{{dataset_id}}/{spec.path}",
            _operation_endpoint(spec),
            methods=["POST"],
            response_model=spec.response_model,
            responses=OPERATION_ERRORS,
            summary=f"{spec.summary} ({spec.name})",
            name=spec.name,
        )
    return router


def _operation_endpoint(spec: OperationSpec[Any, Any]) -> Callable[..., Awaitable[dict[str, Any]]]:
    async def endpoint(
        arrival: ArrivalDep,
        dataset_id: str,
        body: BaseModel,
        services: ServicesDep,
        analyst: AnalystDep,
        idempotency_key: IdempotencyKeyDep,
        response: Response,
    ) -> dict[str, Any]:
        return await padded_operation(
            services,
            arrival=arrival,
            principal=analyst,
            dataset_id=dataset_id,
            operation=spec.name,
            request=body,
            idempotency_key=idempotency_key,
            response=response,
        )

    signature = inspect.signature(endpoint)
    examples = openapi_examples(spec.name)
    body_annotation: Any = (
        spec.request_model
        if examples is None
        else Annotated[spec.request_model, Body(openapi_examples=examples)]
    )
    parameters = [
        parameter.replace(annotation=body_annotation) if parameter.name == "body" else parameter
        for parameter in signature.parameters.values()
    ]
    typed: Any = endpoint
    typed.__signature__ = signature.replace(parameters=parameters)
    typed.__name__ = spec.name.replace(".", "_")
    typed.__doc__ = (
        f"{spec.summary} Costs the request's ε, charged to the ledger before any data is read; "
        "send an Idempotency-Key so that a retry returns the stored release. The answer is "
        "held until a deadline computed from public parameters (README, Timing)."
    )
    return endpoint
