"""Owner endpoints: principals, datasets, grants, ledger and audit exports."""

from __future__ import annotations

import asyncio
import csv
import io
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Annotated, Any, Final, Literal, cast, get_args

import anyio.to_thread
from fastapi import APIRouter, Query, Request, status
from fastapi.responses import PlainTextResponse
from pydantic import Field, TypeAdapter, ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from dpmine.wire import (
    AuditEventInfo,
    CapRequest,
    CreateDatasetRequest,
    CsvSource,
    DatasetCap,
    DatasetInfo,
    DatasetKind,
    DatasetMetadata,
    DatasetSource,
    GrantInfo,
    GrantRequest,
    GuaranteePolicyRequest,
    LedgerEntryInfo,
    PrincipalCreated,
    PrincipalCreateRequest,
    PrincipalInfo,
    WireModel,
)
from dpmine_server.api.common import ERRORS
from dpmine_server.api.deps import OwnerDep, ServicesDep, SessionDep, WriteSessionDep
from dpmine_server.api.upload_folders import make_upload_folder, uploads_dir
from dpmine_server.api.uploads import UploadForm, form_schema, receive_upload_form
from dpmine_server.data.arriving import release
from dpmine_server.data.propose import (
    UnreviewedProposal,
    accept_reviewed,
    loaded_value_warnings,
    parse_label,
    propose_metadata,
)
from dpmine_server.db.models import Principal
from dpmine_server.errors import InvalidRequest
from dpmine_server.services import audit
from dpmine_server.services.container import Services
from dpmine_server.services.exports import ledger_entries
from dpmine_server.services.principals import (
    create_principal,
    principal_info,
    rotate_key,
    set_disabled,
)

router = APIRouter(prefix="/admin", tags=["owner"], responses=ERRORS)


class RegisteredDataset(WireModel):
    """A new dataset and what loading it found (clipped values, ignored columns), with warnings
    about ranges or category lists that look copied from the data (owner only)."""

    dataset: DatasetInfo
    report: dict[str, Any]
    warnings: list[str] = Field(default_factory=list)


ForceQuery = Annotated[
    bool,
    Query(description="Register a propose-metadata proposal whose review.reviewed is false."),
]


def _reviewed(body: CreateDatasetRequest, *, force: bool) -> CreateDatasetRequest:
    """``body`` with reviewed metadata (its owner-only review dropped), or 422 for a proposal
    not marked reviewed, listing the proposal's reasons (ALGORITHMS.md §0.2)."""
    try:
        metadata = accept_reviewed(body.metadata, force=force)
    except UnreviewedProposal as error:
        raise InvalidRequest(str(error)) from error
    return body.model_copy(update={"metadata": metadata})


class LedgerCheck(WireModel):
    """Result of the ledger consistency check."""

    consistent: bool
    problems: list[str] = Field(default_factory=list)


# -- principals ------------------------------------------------------------------------------


@router.post("/principals", response_model=PrincipalCreated, status_code=status.HTTP_201_CREATED)
def add_principal(
    body: PrincipalCreateRequest, owner: OwnerDep, services: ServicesDep, session: WriteSessionDep
) -> PrincipalCreated:
    """Create an owner or analyst; the response holds its API key, shown only once."""
    created = create_principal(
        session, name=body.name, role=body.role, secret=services.settings.secret_key
    )
    audit.record(session, action="principal_created", principal=owner, target=body.name)
    return created


@router.get("/principals", response_model=list[PrincipalInfo])
def list_principals(_owner: OwnerDep, session: SessionDep) -> list[PrincipalInfo]:
    """Every principal (keys are never shown)."""
    return [principal_info(p) for p in session.scalars(select(Principal).order_by(Principal.id))]


@router.post("/principals/{name}/rotate-key", response_model=PrincipalCreated)
def rotate_principal_key(
    name: str, owner: OwnerDep, services: ServicesDep, session: WriteSessionDep
) -> PrincipalCreated:
    """Issue a new key; the old one stops working at once."""
    rotated = rotate_key(session, name, secret=services.settings.secret_key)
    audit.record(session, action="key_rotated", principal=owner, target=name)
    return rotated


@router.post("/principals/{name}/disable", response_model=PrincipalInfo)
def disable_principal(name: str, owner: OwnerDep, session: WriteSessionDep) -> PrincipalInfo:
    """Disable a principal (its key stops working)."""
    info = set_disabled(session, name, disabled=True)
    audit.record(session, action="principal_disabled", principal=owner, target=name)
    return info


# -- datasets --------------------------------------------------------------------------------


@router.post("/datasets", response_model=RegisteredDataset, status_code=status.HTTP_201_CREATED)
def register_dataset(
    body: CreateDatasetRequest,
    owner: OwnerDep,
    services: ServicesDep,
    session: WriteSessionDep,
    force: ForceQuery = False,
) -> RegisteredDataset:
    """Register a dataset from an SQL source (files: use the upload endpoint). A proposal from
    propose-metadata is refused until its ``review.reviewed`` is true (or ``force``)."""
    body = _reviewed(body, force=force)
    info, report = services.datasets.register(session, body)
    audit.record(
        session,
        action="dataset_registered",
        principal=owner,
        target=body.id,
        details={"guarantee_policy": body.guarantee_policy},
    )
    warnings = loaded_value_warnings(body.metadata, report.values)
    return RegisteredDataset(dataset=info, report=report.fields(), warnings=warnings)


def _parse_json_field(raw: str, adapter: TypeAdapter[Any], field: str) -> Any:
    try:
        return adapter.validate_json(raw)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or field}: {e['msg']}"
            for e in error.errors()[:10]
        )
        raise InvalidRequest(f"form field {field!r}: {problems}") from error


#: The file fields of the upload forms: the source's path fields.
_FILE_FIELDS: Final = {
    "path": "CSV or FIMI file",
    "left": "left-view CSV",
    "right": "right-view CSV",
}
_UPLOAD_TEXT: Final = {"request": "CreateDatasetRequest as JSON"}
_PROPOSE_TEXT: Final = {
    "source": "DatasetSource as JSON (paths are the field names)",
    "kind": "table, views or transactions",
    "label": "label column and positive value: 'class=p'",
    "views": "JSON object column → 'left'/'right'",
}


@asynccontextmanager
async def _upload_folder(services: Services) -> AsyncIterator[tuple[UploadForm, Path]]:
    """A fresh folder of ``uploads/`` and the form to receive into it; on the way out the
    form's arrivals are released and the folder goes (registration has moved its files out of
    it by then). The folder is locked as this process's while it exists, so that if the process
    dies mid-upload, the next sweep (at a start-up, or before another upload) removes it
    (api/upload_folders.py)."""
    held = await run_in_threadpool(make_upload_folder, uploads_dir(services.settings.data_dir))
    form = UploadForm()
    try:
        yield form, held.path
    finally:
        _release_arrivals(form)
        await run_in_threadpool(held.remove)


async def _receive(
    request: Request,
    services: Services,
    received: tuple[UploadForm, Path],
    text_fields: dict[str, str],
    on_first_file: Callable[[UploadForm], None] | None = None,
) -> None:
    """Receive the request's upload form into ``received`` (from :func:`_upload_folder`)."""
    form, folder = received
    await receive_upload_form(
        request,
        folder,
        text_fields=text_fields,
        file_fields=_FILE_FIELDS,
        limit=services.settings.max_upload_bytes,
        form=form,
        on_first_file=on_first_file,
    )


@asynccontextmanager
async def _received(
    request: Request, services: Services, text_fields: dict[str, str]
) -> AsyncIterator[tuple[UploadForm, Path]]:
    """The request's upload form, received whole, and the folder holding its files."""
    async with _upload_folder(services) as received:
        await _receive(request, services, received, text_fields)
        yield received


def _release_arrivals(form: UploadForm) -> None:
    for arrival in form.arrivals.values():
        release(arrival)


def _text_field(form: UploadForm, name: str) -> str:
    """A required text field of the form."""
    value = form.fields.get(name)
    if value is None:
        raise InvalidRequest(f"form field {name!r} is missing: send it as a text part")
    return value


def _register_upload(
    form: UploadForm, owner: Principal, services: Services, session: Session, *, force: bool
) -> RegisteredDataset:
    """The registration of a received upload form (on a worker thread: it loads the data)."""
    body = _reviewed(
        _parse_json_field(
            _text_field(form, "request"), TypeAdapter(CreateDatasetRequest), "request"
        ),
        force=force,
    )
    info, report = services.datasets.register(session, body, files=form.files)
    warnings = loaded_value_warnings(body.metadata, report.values)
    audit.record(
        session,
        action="dataset_registered",
        principal=owner,
        target=body.id,
        details={"guarantee_policy": body.guarantee_policy},
    )
    return RegisteredDataset(dataset=info, report=report.fields(), warnings=warnings)


@router.post(
    "/datasets/upload",
    response_model=RegisteredDataset,
    status_code=status.HTTP_201_CREATED,
    openapi_extra=form_schema(
        "Body_upload_dataset", _UPLOAD_TEXT, _FILE_FIELDS, required=["request"]
    ),
)
async def upload_dataset(
    request: Request,
    owner: OwnerDep,
    services: ServicesDep,
    session: WriteSessionDep,
    force: ForceQuery = False,
) -> RegisteredDataset:
    """Register a dataset from uploaded files (a multipart form: ``request``, the
    CreateDatasetRequest as JSON, and one file part per path field of its source: ``path``, or
    ``left`` and ``right``). A proposal from propose-metadata is refused until its
    ``review.reviewed`` is true (or ``force``). Each file is written once, as it arrives, into
    the data folder's ``uploads/``, and moved into the dataset's folder.

    When ``request`` comes before the file of a CSV source (as the client sends it), the
    registration starts with the file's first bytes and parses it as it arrives
    (``data/arriving.py``); it can only finish once the whole form has been received and
    checked, and fails if the upload does, so the outcome is the one of parsing after the
    upload. Otherwise it starts once the form is in."""
    early: asyncio.Future[RegisteredDataset] | None = None

    def start_early(received: UploadForm) -> None:
        nonlocal early
        if _parses_as_it_arrives(received, force=force):
            snapshot = UploadForm(fields=dict(received.fields), files=dict(received.files))
            register = partial(_register_upload, snapshot, owner, services, session, force=force)
            # Its own limiter: while it waits for bytes it holds no token of the worker threads
            # that the upload's writes need (40 early registrations could otherwise starve them).
            early = asyncio.ensure_future(
                anyio.to_thread.run_sync(register, limiter=anyio.CapacityLimiter(1))
            )

    async with _upload_folder(services) as received:
        try:
            await _receive(request, services, received, _UPLOAD_TEXT, start_early)
        except BaseException:
            if early is not None:  # its reads fail with the upload: wait for it to clean up
                await asyncio.wait([early])
                if not early.cancelled():
                    early.exception()  # retrieved: the upload's error is the answer
            raise
        if early is not None:
            return await early
        form, _folder = received
        return await run_in_threadpool(
            _register_upload, form, owner, services, session, force=force
        )


def _parses_as_it_arrives(form: UploadForm, *, force: bool) -> bool:
    """Whether a registration may start on a form whose first file part has just begun: its
    ``request`` came first and is valid, names a CSV source, and that file is its ``path``.
    (Anything else waits for the whole form, whose errors then come in the usual order.)"""
    raw = form.fields.get("request")
    if raw is None or set(form.files) != {"path"}:
        return False
    try:
        body = _reviewed(
            _parse_json_field(raw, TypeAdapter(CreateDatasetRequest), "request"), force=force
        )
    except InvalidRequest:
        return False
    return isinstance(body.source, CsvSource)


def _propose_upload(form: UploadForm, folder: Path) -> DatasetMetadata:
    """The metadata proposal of a received form (on a worker thread: it reads the data)."""
    parsed_source = _parse_json_field(
        _text_field(form, "source"), TypeAdapter(DatasetSource), "source"
    )
    kind_text, kinds = _text_field(form, "kind"), get_args(DatasetKind)
    if kind_text not in kinds:
        raise InvalidRequest(f"form field 'kind' is {kind_text!r}; use one of {list(kinds)}")
    kind = cast(DatasetKind, kind_text)
    views = form.fields.get("views")
    view_map = (
        _parse_json_field(views, TypeAdapter(dict[str, Literal["left", "right"]]), "views")
        if views
        else None
    )
    label = form.fields.get("label")
    updates = {field: stored.path.name for field, stored in form.files.items()}
    try:
        return propose_metadata(
            parsed_source.model_copy(update=updates),
            kind=kind,
            base_dir=folder,
            label=parse_label(label) if label else None,
            views=view_map,
        )
    except ValueError as error:
        raise InvalidRequest(str(error)) from error


@router.post(
    "/datasets/propose-metadata",
    response_model=DatasetMetadata,
    openapi_extra=form_schema(
        "Body_propose",
        _PROPOSE_TEXT,
        _FILE_FIELDS,
        required=["source", "kind"],
        enums={"kind": list(get_args(DatasetKind))},
    ),
)
async def propose(request: Request, _owner: OwnerDep, services: ServicesDep) -> DatasetMetadata:
    """Suggest public metadata from the data, for the owner to review and confirm (a multipart
    form: ``source``, ``kind``, optional ``label`` and ``views``, and the file parts).

    Identifier-like and high-cardinality columns are left out and ranges rounded outward; the
    reasons are in ``review.notes``. Registration refuses the proposal until the owner sets
    ``review.reviewed`` to true (or forces it)."""
    async with _received(request, services, _PROPOSE_TEXT) as (form, folder):
        return await run_in_threadpool(_propose_upload, form, folder)


@router.post("/datasets/{dataset_id}/refresh", response_model=RegisteredDataset)
def refresh_dataset(
    dataset_id: str, owner: OwnerDep, services: ServicesDep, session: WriteSessionDep
) -> RegisteredDataset:
    """Re-read an SQL source, validate it and keep it as the dataset's next version.

    Operations only ever read the snapshot taken at registration or at the last refresh. A
    source that no longer matches the public metadata is refused and the current version stays.
    """
    info, report = services.datasets.refresh(session, dataset_id)
    audit.record(
        session,
        action="dataset_refreshed",
        principal=owner,
        target=dataset_id,
        details={"version": info.version},
    )
    return RegisteredDataset(dataset=info, report=report.fields())


@router.get("/datasets/{dataset_id}/cap", response_model=DatasetCap)
def get_cap(
    dataset_id: str, _owner: OwnerDep, services: ServicesDep, session: SessionDep
) -> DatasetCap:
    """A dataset's cap and what was spent of it."""
    return services.datasets.cap(session, dataset_id)


@router.put("/datasets/{dataset_id}/cap", response_model=DatasetCap)
def set_cap(
    dataset_id: str,
    body: CapRequest,
    owner: OwnerDep,
    services: ServicesDep,
    session: WriteSessionDep,
) -> DatasetCap:
    """Change a dataset's cap: the total ε ever spent on it. It cannot fall below what was
    spent; raising it lets more be learned about every row (the audit log keeps who and when)."""
    before = services.datasets.cap(session, dataset_id)
    changed = services.datasets.set_cap(session, dataset_id, body.epsilon_cap)
    audit.record(
        session,
        action="dataset_cap_set",
        principal=owner,
        target=dataset_id,
        details={"from": before.epsilon_cap_exact, "to": changed.epsilon_cap_exact},
    )
    return changed


@router.put("/datasets/{dataset_id}/guarantee-policy", response_model=DatasetInfo)
def set_guarantee_policy(
    dataset_id: str,
    body: GuaranteePolicyRequest,
    owner: OwnerDep,
    services: ServicesDep,
    session: WriteSessionDep,
) -> DatasetInfo:
    """Change which guarantees a dataset serves: "pure_only" refuses the operations whose
    guarantee is "approximate" (tree.mcmc, tree.pair_mcmc, brl.sample_rule_list) before any
    charge; "allow_approximate" serves them. Applies from the next call (audit-logged)."""
    before = services.datasets.get(session, dataset_id).guarantee_policy
    changed = services.datasets.set_guarantee_policy(session, dataset_id, body.guarantee_policy)
    audit.record(
        session,
        action="dataset_guarantee_policy_set",
        principal=owner,
        target=dataset_id,
        details={"from": before, "to": changed.guarantee_policy},
    )
    return changed


@router.delete("/datasets/{dataset_id}", response_model=DatasetInfo)
def retire_dataset(
    dataset_id: str, owner: OwnerDep, services: ServicesDep, session: WriteSessionDep
) -> DatasetInfo:
    """Retire a dataset: no further queries; its ledger is kept."""
    info = services.datasets.retire(session, dataset_id)
    audit.record(session, action="dataset_retired", principal=owner, target=dataset_id)
    return info


# -- grants ----------------------------------------------------------------------------------


@router.put("/datasets/{dataset_id}/grants", response_model=GrantInfo)
def set_grant(
    dataset_id: str,
    body: GrantRequest,
    owner: OwnerDep,
    services: ServicesDep,
    session: WriteSessionDep,
) -> GrantInfo:
    """Create or change an analyst's allotment on a dataset."""
    grant = services.datasets.set_grant(session, dataset_id, body.analyst, body.epsilon, body.rho)
    audit.record(
        session,
        action="grant_set",
        principal=owner,
        target=f"{dataset_id}/{body.analyst}",
        details={"epsilon": body.epsilon} if body.rho is None else {"rho": body.rho},
    )
    return grant


@router.delete("/datasets/{dataset_id}/grants/{analyst}", response_model=GrantInfo)
def revoke_grant(
    dataset_id: str, analyst: str, owner: OwnerDep, services: ServicesDep, session: WriteSessionDep
) -> GrantInfo:
    """Stop an analyst's spending on a dataset. What was spent stays spent: a grant with charges
    shrinks to them (the ledger check still adds up), one without is deleted."""
    revoked = services.datasets.revoke_grant(session, dataset_id, analyst)
    audit.record(
        session,
        action="grant_revoked",
        principal=owner,
        target=f"{dataset_id}/{analyst}",
        details={"epsilon": revoked.epsilon},
    )
    return revoked


@router.get("/datasets/{dataset_id}/grants", response_model=list[GrantInfo])
def list_grants(
    dataset_id: str, _owner: OwnerDep, services: ServicesDep, session: SessionDep
) -> list[GrantInfo]:
    """All grants on a dataset."""
    services.datasets.get(session, dataset_id)
    return services.datasets.list_grants(session, dataset_id)


# -- ledger and audit ------------------------------------------------------------------------

#: The columns of the owner API's ledger export (the console's leaves out the last two kinds).
LEDGER_EXPORT_COLUMNS = (
    "id",
    "dataset_id",
    "principal",
    "operation",
    "epsilon_exact",
    "guarantee",
    "status",
    "idempotency_key",
    "created_at",
    "completed_at",
    "parameters",
    "release",
)


@router.get("/ledger", response_model=list[LedgerEntryInfo])
def export_ledger(
    _owner: OwnerDep,
    session: SessionDep,
    dataset_id: str | None = None,
    export_format: Annotated[Literal["json", "csv"], Query(alias="format")] = "json",
) -> Any:
    """Every ledger entry (optionally of one dataset), as JSON or CSV."""
    entries = ledger_entries(session, dataset_id=dataset_id)
    if export_format == "json":
        return entries
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(LEDGER_EXPORT_COLUMNS)
    for entry in entries:
        row = entry.model_dump(mode="json")
        writer.writerow(
            json.dumps(row[c]) if c in {"parameters", "release"} else row[c]
            for c in LEDGER_EXPORT_COLUMNS
        )
    return PlainTextResponse(buffer.getvalue(), media_type="text/csv")


@router.get("/ledger/verify", response_model=LedgerCheck)
def verify_ledger(_owner: OwnerDep, services: ServicesDep) -> LedgerCheck:
    """Check that every spent total equals the sum of its entries."""
    problems = services.ledger.verify()
    return LedgerCheck(consistent=not problems, problems=problems)


@router.get("/audit", response_model=list[AuditEventInfo])
def export_audit(_owner: OwnerDep, session: SessionDep) -> list[AuditEventInfo]:
    """The audit log, newest first."""
    return audit.list_events(session)
