"""The typed connection to a dpmine server (``dpmine.connect``).

Every operation request carries an ``Idempotency-Key``; retries after a dropped connection or a
"still running" answer reuse the key, so the server returns the stored release instead of
charging again. The underlying ``httpx.Client`` can be injected (tests hand in one bound to the
app in-process, or to a live server).
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar, overload
from urllib.parse import quote

import httpx
from pydantic import BaseModel, TypeAdapter

from dpmine.errors import (
    DPMineError,
    OperationFailedError,
    OverloadedError,
    ParameterError,
    RequestInProgressError,
    TransportError,
    checked_parameters,
    error_from_response,
)
from dpmine.queries import parse_query
from dpmine.wire import (
    DATASET_ID_RULE,
    FINAL_JOB_STATES,
    OPERATIONS,
    AuditEventInfo,
    BatchRequest,
    BatchResponse,
    BudgetStatus,
    CapRequest,
    ComputeQualityRequest,
    ComputeQualityResponse,
    CreateDatasetRequest,
    DatasetCap,
    DatasetInfo,
    DatasetMetadata,
    EstimateRequest,
    EstimateResponse,
    Expr,
    GrantInfo,
    GrantRequest,
    GuaranteePolicy,
    GuaranteePolicyRequest,
    JobInfo,
    JobStatus,
    LedgerEntryInfo,
    NoisyCountRequest,
    NoisyCountResponse,
    Operation,
    OperationRequest,
    PlannedCall,
    PrincipalCreated,
    PrincipalCreateRequest,
    PrincipalInfo,
    QualityMode,
    Redescription,
    Role,
    SubmitJobRequest,
    WireModel,
    guarantee_allowed,
    is_dataset_id,
    operation_for,
)

__all__ = ["AdminClient", "Connection", "DatasetHandle", "Job", "connect"]

ModelT = TypeVar("ModelT", bound=BaseModel)
ResponseT = TypeVar("ResponseT", bound=WireModel)
_RETRY_STATUS = {502, 503, 504}


def _overload_wait(retry_after: float | None, attempt: int) -> float:
    """Seconds before retry ``attempt`` of a 429 Overloaded refusal: the server's Retry-After
    (else the usual backoff), spread by up to half again at random so that the clients it
    refused together do not all come back at once."""
    base = retry_after if retry_after is not None else min(0.25 * 2**attempt, 5.0)
    return base * (1.0 + 0.5 * random.random())


def connect(
    url: str,
    api_key: str,
    *,
    http: httpx.Client | None = None,
    timeout: float = 60.0,
    retries: int = 3,
) -> Connection:
    """Connect to the server at ``url`` (e.g. ``http://127.0.0.1:8000``) with an API key."""
    return Connection(url, api_key, http=http, timeout=timeout, retries=retries)


def as_expr(query: Expr | str) -> Expr:
    """A query given as text (``"[A] & [B = x]"``) or as a wire expression."""
    return parse_query(query) if isinstance(query, str) else query


@dataclass(frozen=True, slots=True)
class Job(Generic[ResponseT]):
    """A background job of a known operation: its state and, once done, its release parsed into
    the operation's response model (``Connection.submit``, ``Connection.wait_for_job``)."""

    info: JobInfo
    operation: Operation[Any, ResponseT]

    @property
    def id(self) -> str:
        """The job id."""
        return self.info.id

    @property
    def status(self) -> JobStatus:
        """queued, running, done, failed, cancelled or interrupted."""
        return self.info.status

    def result(self) -> ResponseT | None:
        """The release as the operation's response model; None until the job is done."""
        if self.info.result is None:
            return None
        return self.operation.parse_response(self.info.result)


def _checked_api_key(api_key: str) -> str:
    """The key without surrounding white space (a copied line break), or a ParameterError
    saying what to fix: an empty key, or one that cannot travel in an HTTP header."""
    key = api_key.strip() if isinstance(api_key, str) else ""
    if not key:
        raise ParameterError(
            "the API key is empty: pass the key your data owner gave you (printed once by "
            "`dpmine-server principals add`), e.g. connect(url, os.environ['DPMINE_API_KEY']) "
            "with DPMINE_API_KEY set"
        )
    if not key.isascii() or not key.isprintable() or any(c.isspace() for c in key):
        raise ParameterError(
            "the API key holds spaces, line breaks or non-ASCII characters; copy it exactly "
            "as `dpmine-server principals add` printed it (it starts with 'dpm_')"
        )
    return key


class Connection:
    """A session with one server and one API key."""

    def __init__(
        self,
        url: str,
        api_key: str,
        *,
        http: httpx.Client | None = None,
        timeout: float = 60.0,
        retries: int = 3,
    ) -> None:
        if retries < 0:
            raise ParameterError(f"retries must be >= 0 (got {retries})")
        key = _checked_api_key(api_key)
        self._owns_http = http is None
        self._http = http or httpx.Client(base_url=url, timeout=timeout)
        self._headers = {"Authorization": f"Bearer {key}"}
        self._retries = retries
        self.admin = AdminClient(self)

    def close(self) -> None:
        """Close the HTTP client if this connection created it."""
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def __repr__(self) -> str:  # never show the key
        return f"Connection({str(self._http.base_url)!r})"

    # -- transport -----------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        files: Any = None,
        data: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> httpx.Response:
        """Send a request, retrying transport failures, "in progress" answers and 429
        Overloaded refusals (nothing was charged) with the same Idempotency-Key; raise the
        mapped error for an error answer."""
        headers = dict(self._headers)
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key
        retriable = method == "GET" or idempotency_key is not None
        attempt = 0
        while True:
            try:
                response = self._http.request(
                    method,
                    path,
                    json=json,
                    params=params,
                    files=files,
                    data=data,
                    headers=headers,
                )
            except httpx.TransportError as error:
                if not retriable or attempt >= self._retries:
                    raise TransportError(f"{method} {path}: {error}") from error
            else:
                if response.status_code < 400:
                    return response
                failure = error_from_response(response)
                again = response.status_code in _RETRY_STATUS or isinstance(
                    failure, (RequestInProgressError, OverloadedError)
                )
                if not (retriable and again) or attempt >= self._retries:
                    raise failure
                if isinstance(failure, OverloadedError):
                    attempt += 1
                    time.sleep(_overload_wait(failure.retry_after, attempt))
                    continue
            attempt += 1
            time.sleep(min(0.25 * 2**attempt, 5.0))

    def _get(self, path: str, model: type[ModelT]) -> ModelT:
        return model.model_validate(self.request("GET", path).json())

    def _get_list(self, path: str, model: type[ModelT], **params: Any) -> list[ModelT]:
        adapter = TypeAdapter(list[model])  # type: ignore[valid-type]
        result: list[ModelT] = adapter.validate_python(
            self.request("GET", path, params=params).json()
        )
        return result

    def call(
        self, path: str, body: BaseModel, model: type[ModelT], *, idempotency_key: str | None = None
    ) -> ModelT:
        """POST an operation with a fresh (or given) Idempotency-Key and parse the answer."""
        response = self.request(
            "POST",
            path,
            json=body.model_dump(mode="json"),
            idempotency_key=idempotency_key or str(uuid.uuid4()),
        )
        return model.model_validate(response.json())

    # -- private operations (the wire table, dpmine.wire.OPERATIONS) ----------------------------

    def run(
        self,
        dataset_id: str,
        request: OperationRequest[ResponseT],
        *,
        operation: str | None = None,
        idempotency_key: str | None = None,
    ) -> ResponseT:
        """Run the operation that takes ``request`` on a dataset and return its release.

        ``operation`` names it when several take the same request model (``fim.topk_em`` and
        ``fim.topk_laplace``). Charged once: a retry reuses the (fresh or given) Idempotency-Key.
        """
        chosen = operation_for(request, operation)
        response = self.request(
            "POST",
            chosen.url(dataset_id),
            json=request.model_dump(mode="json"),
            idempotency_key=idempotency_key or str(uuid.uuid4()),
        )
        return chosen.parse_response(response.json())

    def run_batch(
        self,
        dataset_id: str,
        requests: Sequence[OperationRequest[ResponseT]],
        *,
        operation: str | None = None,
        idempotency_key: str | None = None,
    ) -> list[ResponseT]:
        """Run independent calls of inline operations in one request (``POST .../batch``) and
        return their releases in order.

        Each part is its own call (own mechanism, randomness, ledger entry and receipt),
        charged together with the others (the sum of their costs, all or none) and padded once.
        At most ``MAX_BATCH_PARTS`` parts; a part the server refuses refuses the batch, and
        nothing is charged. One Idempotency-Key covers the batch."""
        chosen = [operation_for(request, operation) for request in requests]
        with checked_parameters():
            body = BatchRequest(
                parts=[
                    PlannedCall(operation=op.name, request=request.model_dump(mode="json"))
                    for op, request in zip(chosen, requests, strict=True)
                ]
            )
        response = self.request(
            "POST",
            f"/v1/datasets/{dataset_id}/batch",
            json=body.model_dump(mode="json"),
            idempotency_key=idempotency_key or str(uuid.uuid4()),
        )
        answer = BatchResponse.model_validate(response.json())
        return [op.parse_response(part) for op, part in zip(chosen, answer.parts, strict=True)]

    def submit(
        self,
        dataset_id: str,
        request: OperationRequest[ResponseT],
        *,
        operation: str | None = None,
        idempotency_key: str | None = None,
    ) -> Job[ResponseT]:
        """Run an operation as a background job (charged now); wait with ``wait_for_job``."""
        chosen = operation_for(request, operation)
        info = self._submit_job(dataset_id, chosen.name, request, idempotency_key)
        return Job(info=info, operation=chosen)

    def _submit_job(
        self, dataset_id: str, operation: str, request: BaseModel, idempotency_key: str | None
    ) -> JobInfo:
        body = SubmitJobRequest(operation=operation, request=request.model_dump(mode="json"))
        response = self.request(
            "POST",
            f"/v1/datasets/{dataset_id}/jobs",
            json=body.model_dump(mode="json"),
            idempotency_key=idempotency_key or str(uuid.uuid4()),
        )
        return JobInfo.model_validate(response.json())

    # -- analyst API ---------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """The server's health answer."""
        result: dict[str, Any] = self.request("GET", "/v1/health").json()
        return result

    def datasets(self) -> list[DatasetInfo]:
        """Datasets this key can query (owners: all)."""
        return self._get_list("/v1/datasets", DatasetInfo)

    def dataset(self, dataset_id: str) -> DatasetHandle:
        """A handle on one dataset (fetches its public metadata). An id that breaks the id
        rule (:data:`~dpmine.wire.DATASET_ID_RULE`) is a :class:`ParameterError` before any
        request: it names no dataset, and its text never reaches a URL."""
        if not is_dataset_id(dataset_id):
            raise ParameterError(
                f"{dataset_id!r} is not a dataset id: a dataset id has {DATASET_ID_RULE}; "
                "list datasets to see yours"
            )
        return DatasetHandle(self, self._get(f"/v1/datasets/{dataset_id}", DatasetInfo))

    @overload
    def job(self, job: str) -> JobInfo: ...
    @overload
    def job(self, job: Job[ResponseT]) -> Job[ResponseT]: ...
    def job(self, job: str | Job[Any]) -> JobInfo | Job[Any]:
        """The state of one of your background jobs (a :class:`Job` gets its typed update)."""
        if isinstance(job, str):
            return self._get(f"/v1/jobs/{job}", JobInfo)
        return Job(info=self._get(f"/v1/jobs/{job.id}", JobInfo), operation=job.operation)

    @overload
    def wait_for_job(
        self,
        job: str,
        *,
        poll_seconds: float = ...,
        on_progress: Callable[[JobInfo], None] | None = ...,
        timeout: float | None = ...,
    ) -> JobInfo: ...
    @overload
    def wait_for_job(
        self,
        job: Job[ResponseT],
        *,
        poll_seconds: float = ...,
        on_progress: Callable[[JobInfo], None] | None = ...,
        timeout: float | None = ...,
    ) -> ResponseT: ...
    def wait_for_job(
        self,
        job: str | Job[Any],
        *,
        poll_seconds: float = 0.2,
        on_progress: Callable[[JobInfo], None] | None = None,
        timeout: float | None = None,
    ) -> Any:
        """Poll a job until it is settled (done, failed, cancelled or interrupted).

        Given a job id, return its final :class:`JobInfo`. Given a :class:`Job` (from
        :meth:`submit`), return its release as the operation's response model, or raise
        :class:`OperationFailedError` when it released nothing (its charge stands).
        """
        job_id = job if isinstance(job, str) else job.id
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            info = self.job(job_id)
            if on_progress is not None:
                on_progress(info)
            if info.status in FINAL_JOB_STATES:
                break
            if deadline is not None and time.monotonic() > deadline:
                raise DPMineError(f"job {job_id} still {info.status} after {timeout} s")
            time.sleep(poll_seconds)
        if isinstance(job, str):
            return info
        if info.status != "done" or info.result is None:
            raise OperationFailedError(
                "OperationFailed", info.message or f"job {job_id} {info.status}"
            )
        return job.operation.parse_response(info.result)

    @overload
    def cancel_job(self, job: str) -> JobInfo: ...
    @overload
    def cancel_job(self, job: Job[ResponseT]) -> Job[ResponseT]: ...
    def cancel_job(self, job: str | Job[Any]) -> JobInfo | Job[Any]:
        """Cancel one of your jobs: a queued job never runs, a running one stops at its next
        public progress step. The charge stays; a job already settled is left as it is."""
        job_id = job if isinstance(job, str) else job.id
        info = JobInfo.model_validate(self.request("POST", f"/v1/jobs/{job_id}/cancel").json())
        return info if isinstance(job, str) else Job(info=info, operation=job.operation)


class DatasetHandle:
    """One dataset: its public schema, your budget, and the generic private operations."""

    def __init__(self, connection: Connection, info: DatasetInfo) -> None:
        self.connection = connection
        self.info = info

    @property
    def id(self) -> str:
        """The dataset id."""
        return self.info.id

    @property
    def schema(self) -> DatasetMetadata:
        """The public metadata declared by the owner."""
        return self.info.metadata

    @property
    def guarantee_policy(self) -> GuaranteePolicy:
        """The owner's policy: "pure_only" refuses operations whose guarantee is "approximate"
        (the MCMC samplers, e.g. AltMCMC) before any charge; "allow_approximate" serves all."""
        return self.info.guarantee_policy

    def allows(self, operation: str) -> bool:
        """Whether this dataset serves every call of the operation called ``operation`` under
        its guarantee policy (as of when the handle was fetched), judged by the operation's
        weakest guarantee; e.g. ``allows("tree.mcmc")`` is False under "pure_only", which
        still serves its calls that run the exact sampler (their guarantee is "pure")."""
        known = OPERATIONS.get(operation)
        if known is None:
            raise ParameterError(
                f"unknown operation {operation!r}; known: {', '.join(sorted(OPERATIONS))}"
            )
        return guarantee_allowed(known.guarantee, self.guarantee_policy)

    def __repr__(self) -> str:
        return f"DatasetHandle({self.id!r}, kind={self.schema.kind!r})"

    def budget(self) -> BudgetStatus:
        """Your grant and what is left of it (and of the dataset cap)."""
        return self.connection._get(f"/v1/datasets/{self.id}/budget", BudgetStatus)

    def estimate(self, calls: Sequence[PlannedCall | tuple[str, BaseModel]]) -> EstimateResponse:
        """Exact cost of planned calls and whether they fit; free."""
        with checked_parameters():
            planned = [
                call
                if isinstance(call, PlannedCall)
                else PlannedCall(operation=call[0], request=call[1].model_dump(mode="json"))
                for call in calls
            ]
            body = EstimateRequest(calls=planned)
        response = self.connection.request(
            "POST", f"/v1/datasets/{self.id}/estimate", json=body.model_dump(mode="json")
        )
        return EstimateResponse.model_validate(response.json())

    def run(
        self,
        request: OperationRequest[ResponseT],
        *,
        operation: str | None = None,
        idempotency_key: str | None = None,
    ) -> ResponseT:
        """Run the operation that takes ``request`` on this dataset (``Connection.run``)."""
        return self.connection.run(
            self.id, request, operation=operation, idempotency_key=idempotency_key
        )

    def run_batch(
        self,
        requests: Sequence[OperationRequest[ResponseT]],
        *,
        operation: str | None = None,
        idempotency_key: str | None = None,
    ) -> list[ResponseT]:
        """Run independent calls on this dataset in one request (``Connection.run_batch``)."""
        return self.connection.run_batch(
            self.id, requests, operation=operation, idempotency_key=idempotency_key
        )

    def count(
        self,
        predicate: Expr | str | None = None,
        *,
        epsilon: float,
        idempotency_key: str | None = None,
    ) -> NoisyCountResponse:
        """Noisy number of rows satisfying ``predicate`` (all rows if None); costs ``epsilon``."""
        with checked_parameters():
            body = NoisyCountRequest(
                predicate=None if predicate is None else as_expr(predicate), epsilon=epsilon
            )
        return self.run(body, idempotency_key=idempotency_key)

    def quality(
        self,
        left: Expr | str,
        right: Expr | str,
        *,
        epsilon: float,
        mode: QualityMode = "cells",
        idempotency_key: str | None = None,
    ) -> ComputeQualityResponse:
        """Noisy support cells, Jaccard and p-value of (left, right); costs ``epsilon``."""
        with checked_parameters():
            body = ComputeQualityRequest(
                redescription=Redescription(left=as_expr(left), right=as_expr(right)),
                epsilon=epsilon,
                mode=mode,
            )
        return self.run(body, idempotency_key=idempotency_key)

    def submit(
        self, operation: str, request: BaseModel, *, idempotency_key: str | None = None
    ) -> JobInfo:
        """Run an operation, by name, as a background job (charged now); poll with
        ``wait_for_job``. ``Connection.submit(dataset_id, request)`` is the typed form."""
        return self.connection._submit_job(self.id, operation, request, idempotency_key)


class AdminClient:
    """Owner operations (need an owner's key)."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection

    def add_principal(self, name: str, role: Role) -> PrincipalCreated:
        """Create an owner or analyst; the answer holds the new key (shown once)."""
        with checked_parameters():
            body = PrincipalCreateRequest(name=name, role=role)
        response = self._connection.request("POST", "/v1/admin/principals", json=body.model_dump())
        return PrincipalCreated.model_validate(response.json())

    def principals(self) -> list[PrincipalInfo]:
        """Every principal."""
        return self._connection._get_list("/v1/admin/principals", PrincipalInfo)

    def rotate_key(self, name: str) -> PrincipalCreated:
        """A new key for ``name``; the old key stops working."""
        response = self._connection.request("POST", f"/v1/admin/principals/{name}/rotate-key")
        return PrincipalCreated.model_validate(response.json())

    def disable(self, name: str) -> PrincipalInfo:
        """Disable a principal."""
        response = self._connection.request("POST", f"/v1/admin/principals/{name}/disable")
        return PrincipalInfo.model_validate(response.json())

    def upload_dataset(
        self, request: CreateDatasetRequest, files: dict[str, Path]
    ) -> dict[str, Any]:
        """Register a dataset from local files; ``files`` maps source fields to paths."""
        handles = {field: path.open("rb") for field, path in files.items()}
        try:
            response = self._connection.request(
                "POST",
                "/v1/admin/datasets/upload",
                data={"request": request.model_dump_json()},
                files={field: (files[field].name, handle) for field, handle in handles.items()},
            )
        finally:
            for handle in handles.values():
                handle.close()
        result: dict[str, Any] = response.json()
        return result

    def register_dataset(self, request: CreateDatasetRequest) -> dict[str, Any]:
        """Register a dataset whose source needs no upload (SQL)."""
        response = self._connection.request(
            "POST", "/v1/admin/datasets", json=request.model_dump(mode="json")
        )
        result: dict[str, Any] = response.json()
        return result

    def refresh_dataset(self, dataset_id: str) -> dict[str, Any]:
        """Re-read an SQL dataset's source into its next version (``dataset`` and ``report``);
        operations read only this snapshot. An invalid source raises and the version stays."""
        response = self._connection.request("POST", f"/v1/admin/datasets/{dataset_id}/refresh")
        result: dict[str, Any] = response.json()
        return result

    def cap(self, dataset_id: str) -> DatasetCap:
        """A dataset's cap and what was spent of it."""
        response = self._connection.request("GET", f"/v1/admin/datasets/{dataset_id}/cap")
        return DatasetCap.model_validate(response.json())

    def set_cap(self, dataset_id: str, epsilon_cap: float) -> DatasetCap:
        """Change a dataset's cap (never below what was spent; raising it lets more be learned
        about every row, and the audit log records it)."""
        with checked_parameters():
            body = CapRequest(epsilon_cap=epsilon_cap)
        response = self._connection.request(
            "PUT", f"/v1/admin/datasets/{dataset_id}/cap", json=body.model_dump()
        )
        return DatasetCap.model_validate(response.json())

    def set_guarantee_policy(self, dataset_id: str, policy: GuaranteePolicy) -> DatasetInfo:
        """Change which guarantees a dataset serves from the next call on: "pure_only" refuses
        the operations whose guarantee is "approximate" before any charge (audit-logged)."""
        with checked_parameters():
            body = GuaranteePolicyRequest(guarantee_policy=policy)
        response = self._connection.request(
            "PUT", f"/v1/admin/datasets/{dataset_id}/guarantee-policy", json=body.model_dump()
        )
        return DatasetInfo.model_validate(response.json())

    def retire_dataset(self, dataset_id: str) -> DatasetInfo:
        """Stop all further queries on a dataset."""
        response = self._connection.request("DELETE", f"/v1/admin/datasets/{dataset_id}")
        return DatasetInfo.model_validate(response.json())

    def grant(
        self,
        dataset_id: str,
        analyst: str,
        epsilon: float | None = None,
        *,
        rho: float | None = None,
    ) -> GrantInfo:
        """Set an analyst's allotment on a dataset, in its unit: ``epsilon`` on a pure dataset,
        ``rho`` on a zCDP one."""
        with checked_parameters():
            body = GrantRequest(analyst=analyst, epsilon=epsilon, rho=rho)
        response = self._connection.request(
            "PUT",
            f"/v1/admin/datasets/{dataset_id}/grants",
            json=body.model_dump(exclude_none=True),
        )
        return GrantInfo.model_validate(response.json())

    def revoke_grant(self, dataset_id: str, analyst: str) -> GrantInfo:
        """Stop an analyst's spending on a dataset; what was spent stays spent."""
        response = self._connection.request(
            "DELETE", f"/v1/admin/datasets/{dataset_id}/grants/{quote(analyst, safe='')}"
        )
        return GrantInfo.model_validate(response.json())

    def grants(self, dataset_id: str) -> list[GrantInfo]:
        """All grants on a dataset."""
        return self._connection._get_list(f"/v1/admin/datasets/{dataset_id}/grants", GrantInfo)

    def ledger(self, dataset_id: str | None = None) -> list[LedgerEntryInfo]:
        """Ledger entries (optionally of one dataset)."""
        params = {} if dataset_id is None else {"dataset_id": dataset_id}
        return self._connection._get_list("/v1/admin/ledger", LedgerEntryInfo, **params)

    def ledger_csv(self, dataset_id: str | None = None) -> str:
        """The ledger as CSV text."""
        params: dict[str, Any] = {"format": "csv"}
        if dataset_id is not None:
            params["dataset_id"] = dataset_id
        return self._connection.request("GET", "/v1/admin/ledger", params=params).text

    def verify_ledger(self) -> dict[str, Any]:
        """The ledger consistency check."""
        result: dict[str, Any] = self._connection.request("GET", "/v1/admin/ledger/verify").json()
        return result

    def audit(self) -> list[AuditEventInfo]:
        """The audit log, newest first."""
        return self._connection._get_list("/v1/admin/audit", AuditEventInfo)
