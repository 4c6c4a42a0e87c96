"""The owner console: server-rendered pages under ``/console`` over the owner operations.

Every change goes through the same functions as the owner API (``api/routes/admin.py``), so
it is validated and audited the same way. Owners log in by pasting an API key once; the
browser then holds only a signed session cookie (``sessions.py``). Every POST needs the
session's CSRF token and a same-origin ``Origin``/``Referer``; every page is sent with a strict
content security policy (no script at all) and ``Cache-Control: no-store``.
"""

from __future__ import annotations

import csv
import hmac
import io
import json
import logging
import time
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, TypeVar
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Form, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, RedirectResponse, Response
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials
from fastapi.templating import Jinja2Templates
from pydantic import ValidationError
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from dpmine.amounts import epsilon_text
from dpmine.wire import (
    AuditEventInfo,
    CapRequest,
    CreateDatasetRequest,
    DatasetCap,
    DatasetMetadata,
    GrantInfo,
    GrantRequest,
    GuaranteePolicyRequest,
    LedgerEntryInfo,
    PrincipalCreated,
    PrincipalCreateRequest,
)
from dpmine_server.api.console import sessions
from dpmine_server.api.console.plot import Charge, Chart, cumulative_chart
from dpmine_server.api.console.registration import (
    Fields,
    FormProblems,
    MetadataRow,
    ReviewForm,
    SourceForm,
    data_files,
    metadata_rows,
)
from dpmine_server.api.deps import ServicesDep, SessionDep, WriteSessionDep, get_principal
from dpmine_server.api.routes import admin
from dpmine_server.data.propose import (
    UnreviewedProposal,
    accept_reviewed,
    loaded_value_warnings,
    propose_metadata,
)
from dpmine_server.db.models import AuditEvent, Dataset, Job, LedgerEntry, Principal
from dpmine_server.dp.budget import Epsilon
from dpmine_server.errors import (
    Conflict,
    Forbidden,
    InvalidRequest,
    NotFound,
    RateLimited,
    ServerError,
    Unauthorized,
)
from dpmine_server.services import audit
from dpmine_server.services.container import Services
from dpmine_server.services.datasets import dataset_cap, dataset_info
from dpmine_server.services.exports import ledger_entries
from dpmine_server.services.principals import principal_info

__all__ = ["SECURITY_HEADERS", "router"]

logger = logging.getLogger(__name__)

_HERE = Path(__file__).parent
templates = Jinja2Templates(directory=_HERE / "templates")
# Budgets as people read them: the exact decimal, never a float's residue or exponent.
templates.env.filters["epsilon"] = epsilon_text

#: Sent with every console response. ``same-origin`` (not ``no-referrer``): with no-referrer,
#: browsers send ``Origin: null`` on form posts and the same-origin check could not work.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
#: Rows shown on a ledger or audit page (the CSV export has them all).
PAGE_ROWS = 500
_LOGOUT = "console_logout"
_NOTICES = {
    "grant_set": "Grant saved.",
    "grant_revoked": "Grant revoked: the analyst can spend nothing more on that dataset.",
    "disabled": "Principal disabled: its key stopped working.",
    "cap_set": "Cap saved.",
    "policy_set": "Guarantee policy saved: it applies from the next call.",
    "retired": "Dataset retired: it takes no more queries; its ledger stays.",
    "job_cancelled": (
        "Cancel requested: a queued job never runs, a running one stops at its next progress "
        "step; the charge stays."
    ),
}
#: Owner mistakes a console form shows beside the form (nothing was changed).
_FORM_ERRORS = (InvalidRequest, NotFound, Conflict)
#: Finished jobs shown on the jobs page (newest first).
JOB_HISTORY_ROWS = 100
#: The owner API's ledger columns minus the idempotency keys and the releases themselves.
_LEDGER_CSV_COLUMNS = tuple(
    column for column in admin.LEDGER_EXPORT_COLUMNS if column not in {"idempotency_key", "release"}
)
_AUDIT_CSV_COLUMNS = ("id", "at", "principal", "action", "target", "details")


class LoginRequired(Exception):
    """No valid console session: the browser goes to the login page."""


# -- responses -----------------------------------------------------------------------------------


def _page(request: Request, name: str, status_code: int = 200, **context: Any) -> Response:
    """Render a template; pages of a logged-in owner get the CSRF token and their name."""
    owner: Principal | None = getattr(request.state, "console_owner", None)
    if owner is not None:
        context.setdefault("owner", owner.name)
        sid = request.state.console_session.sid
        context.setdefault("csrf", sessions.csrf_token(_secret(request), sid))
    return templates.TemplateResponse(request, name, context, status_code=status_code)


def _services(request: Request) -> Services:
    found: Services = request.app.state.services
    return found


def _error_page(request: Request, status: int, message: str) -> Response:
    return _page(request, "error.html", status, status=status, message=message)


def _refresh_cookie(request: Request, response: Response) -> None:
    """Slide the idle expiry of a live session (not after a logout)."""
    session: sessions.ConsoleSession | None = getattr(request.state, "console_session", None)
    if session is None or getattr(request.state, "console_logged_out", False):
        return
    renewed = replace(session, seen=int(time.time()))
    _set_cookie(request, response, sessions.encode(renewed, _secret(request)))


def _secret(request: Request) -> str:
    return _services(request).settings.secret_key


def _set_cookie(request: Request, response: Response, token: str) -> None:
    response.set_cookie(
        sessions.COOKIE,
        token,
        path="/console",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


class ConsoleRoute(APIRoute):
    """Console routes answer with pages: errors become an error page (never JSON), a missing
    session a redirect to the login page, and every response carries the security headers."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            try:
                response = await handler(request)
            except LoginRequired:
                response = RedirectResponse("/console/login", status_code=303)
                response.delete_cookie(sessions.COOKIE, path="/console")
            except ServerError as error:
                response = _error_page(request, error.status_code, error.message)
                if error.headers and "Retry-After" in error.headers:
                    response.headers["Retry-After"] = error.headers["Retry-After"]
            except RequestValidationError as error:
                problems = "; ".join(
                    f"{item['loc'][-1]}: {item['msg']}" for item in error.errors()[:5]
                )
                response = _error_page(request, 422, f"fix these fields: {problems}")
            except Exception:
                logger.exception("console page %s failed", request.url.path)
                message = "the server hit an internal error; the owner can see the log"
                response = _error_page(request, 500, message)
            _refresh_cookie(request, response)
            response.headers.update(SECURITY_HEADERS)
            return response

        return guarded


router = APIRouter(prefix="/console", route_class=ConsoleRoute, include_in_schema=False)


# -- sessions ------------------------------------------------------------------------------------


def _logged_out(services: Services, session: sessions.ConsoleSession) -> bool:
    """Whether the owner logged this session out (from any server process)."""
    with services.sessions() as db:
        found = db.scalar(
            select(AuditEvent.id)
            .where(
                AuditEvent.id > session.audit_floor,
                AuditEvent.action == _LOGOUT,
                AuditEvent.target == f"session {session.sid}",
            )
            .limit(1)
        )
    return found is not None


def console_owner(request: Request, services: ServicesDep) -> Principal:
    """The owner of this browser's session (else the login page): the token is genuine and
    fresh, the principal is an enabled owner whose key did not change, and not logged out."""
    token = request.cookies.get(sessions.COOKIE)
    secret = services.settings.secret_key
    session = sessions.decode(token, secret, now=int(time.time())) if token else None
    if session is None:
        raise LoginRequired
    with services.sessions() as db:
        owner = db.get(Principal, session.principal_id)
        if owner is not None:
            db.expunge(owner)
    if (
        owner is None
        or owner.disabled
        or owner.role != "owner"
        or sessions.key_binding(secret, owner.key_hash) != session.key_binding
        or _logged_out(services, session)
    ):
        raise LoginRequired
    request.state.console_owner = owner
    request.state.console_session = session
    return owner


def _check_origin(request: Request) -> None:
    """Refuse a POST that did not come from a page of this server."""
    headers = request.headers
    if not sessions.same_origin(headers.get("host"), headers.get("origin"), headers.get("referer")):
        raise Forbidden(
            "this form was not sent from a console page of this server (Origin/Referer check); "
            "open the console and submit the form again"
        )


Owner = Annotated[Principal, Depends(console_owner)]


def console_writer(request: Request, owner: Owner, csrf: Annotated[str, Form()] = "") -> Principal:
    """The owner, for a state change: same origin and the session's CSRF token."""
    _check_origin(request)
    expected = sessions.csrf_token(_secret(request), request.state.console_session.sid)
    if not hmac.compare_digest(csrf.encode(), expected.encode()):
        raise Forbidden("the form's CSRF token is missing or stale; reload the page and retry")
    return owner


Writer = Annotated[Principal, Depends(console_writer)]


@router.get("")
def home() -> Response:
    """The console starts at the datasets page."""
    return RedirectResponse("/console/datasets", status_code=303)


@router.get("/login")
def login_form(request: Request) -> Response:
    """The login form: paste an owner API key."""
    return _page(request, "login.html")


@router.post("/login")
def login(
    request: Request, services: ServicesDep, key: Annotated[str, Form(max_length=200)] = ""
) -> Response:
    """Check the key like the API does (same throttle and audit of failures); owners only."""
    _check_origin(request)
    try:
        principal = get_principal(
            request,
            services,
            bearer=HTTPAuthorizationCredentials(scheme="Bearer", credentials=key),
        )
    except (Unauthorized, RateLimited) as error:
        page = _page(request, "login.html", error.status_code, error=error.message)
        if isinstance(error, RateLimited) and error.headers:
            page.headers["Retry-After"] = error.headers["Retry-After"]
        return page
    if principal.role != "owner":
        with services.write_sessions() as db, db.begin():
            audit.record(db, action="console_refused", principal=principal)
        refusal = "the console is for data owners; this is an analyst's key"
        return _page(request, "login.html", 403, error=refusal)
    secret = services.settings.secret_key
    with services.write_sessions() as db, db.begin():
        started = sessions.new_session(
            principal_id=principal.id,
            binding=sessions.key_binding(secret, principal.key_hash),
            now=int(time.time()),
            audit_floor=db.scalar(select(func.max(AuditEvent.id))) or 0,
        )
        audit.record(
            db, action="console_login", principal=principal, target=f"session {started.sid}"
        )
    response = RedirectResponse("/console/datasets", status_code=303)
    _set_cookie(request, response, sessions.encode(started, secret))
    return response


@router.post("/logout")
def logout(request: Request, owner: Writer, session: WriteSessionDep) -> Response:
    """End the session everywhere (the audit log records it) and forget the cookie."""
    sid = request.state.console_session.sid
    audit.record(session, action=_LOGOUT, principal=owner, target=f"session {sid}")
    request.state.console_logged_out = True
    response = RedirectResponse("/console/login", status_code=303)
    response.delete_cookie(sessions.COOKIE, path="/console")
    return response


@router.get("/static/console.css")
def stylesheet() -> Response:
    """The console's only stylesheet (the CSP allows styles from this origin only)."""
    return FileResponse(_HERE / "static" / "console.css", media_type="text/css")


# -- datasets and budget -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DatasetRow:
    """A dataset as the console lists it: public info, its cap and what was spent."""

    id: str
    name: str
    kind: str
    version: int
    status: str
    guarantee_policy: str
    accounting: str
    cap: str
    spent: str
    left: str
    metadata: DatasetMetadata
    tables: list[tuple[str, list[MetadataRow]]]


def _dataset_rows(session: Session) -> list[DatasetRow]:
    rows = []
    for dataset in session.scalars(select(Dataset).order_by(Dataset.id)):
        info, cap = dataset_info(dataset), dataset_cap(dataset)
        cap_left = dataset.cap_units - dataset.spent_units
        rows.append(
            DatasetRow(
                id=info.id,
                name=info.name,
                kind=info.metadata.kind,
                version=info.version,
                status=info.status,
                guarantee_policy=info.guarantee_policy,
                accounting=_accounting_text(cap),
                cap=cap.epsilon_cap_exact,
                spent=cap.spent_exact,
                left=repr(cap.remaining) if cap.zcdp else Epsilon(cap_left).exact_str(),
                metadata=info.metadata,
                tables=metadata_rows(info.metadata),
            )
        )
    return rows


def _accounting_text(cap: DatasetCap) -> str:
    """The ledger unit; on a zCDP dataset its exact rho and the delta its ε columns are at."""
    if cap.zcdp is None:
        return "pure ε"
    default = " (default)" if cap.zcdp.delta_is_default else ""
    return (
        f"zCDP: ρ cap {cap.zcdp.rho_exact}, spent {cap.zcdp.rho_spent}; ε at δ="
        f"{cap.zcdp.delta:g}{default}, left ε = largest single call"
    )


def _charts(entries: Sequence[LedgerEntryInfo]) -> tuple[Chart, Chart]:
    """Cumulative ε over time per dataset and per principal."""
    per_dataset = cumulative_chart(
        "ε spent per dataset",
        (Charge(e.created_at, e.dataset_id, Decimal(e.epsilon_exact)) for e in entries),
    )
    per_analyst = cumulative_chart(
        "ε spent per analyst",
        (Charge(e.created_at, e.principal, Decimal(e.epsilon_exact)) for e in entries),
    )
    return per_dataset, per_analyst


def _datasets(
    request: Request, session: Session, *, notice: str = "", error: str = "", status: int = 200
) -> Response:
    return _page(
        request,
        "datasets.html",
        status,
        datasets=_dataset_rows(session),
        charts=_charts(ledger_entries(session)),
        notice=_NOTICES.get(notice, ""),
        error=error,
    )


@router.get("/datasets")
def datasets_page(
    request: Request, _owner: Owner, session: SessionDep, notice: str = ""
) -> Response:
    """Datasets with their public metadata (a table per view), cap and spending, forms to
    change a cap or retire a dataset, and the budget charts."""
    return _datasets(request, session, notice=notice)


def _form_error(request: Request, session: Session, error: ServerError) -> Response:
    """A datasets-page form that changed nothing: the page again, the reason above it."""
    session.rollback()
    return _datasets(request, session, error=error.message, status=error.status_code)


@router.post("/datasets/{dataset_id}/cap")
def set_cap(
    request: Request,
    dataset_id: str,
    owner: Writer,
    services: ServicesDep,
    session: WriteSessionDep,
    epsilon_cap: Annotated[str, Form()],
) -> Response:
    """Change a dataset's cap (the owner API's operation, audited the same way)."""
    try:
        body = _validated(lambda: CapRequest(epsilon_cap=_epsilon(epsilon_cap)))
        admin.set_cap(dataset_id, body, owner, services, session)
    except _FORM_ERRORS as error:
        return _form_error(request, session, error)
    return RedirectResponse("/console/datasets?notice=cap_set", status_code=303)


@router.post("/datasets/{dataset_id}/guarantee-policy")
def set_guarantee_policy(
    request: Request,
    dataset_id: str,
    owner: Writer,
    services: ServicesDep,
    session: WriteSessionDep,
    guarantee_policy: Annotated[str, Form()],
) -> Response:
    """Change which guarantees a dataset serves (the owner API's operation, audited the same
    way)."""
    try:
        body = _validated(
            lambda: GuaranteePolicyRequest.model_validate({"guarantee_policy": guarantee_policy})
        )
        admin.set_guarantee_policy(dataset_id, body, owner, services, session)
    except _FORM_ERRORS as error:
        return _form_error(request, session, error)
    return RedirectResponse("/console/datasets?notice=policy_set", status_code=303)


@router.post("/datasets/{dataset_id}/retire")
def retire(
    request: Request,
    dataset_id: str,
    owner: Writer,
    services: ServicesDep,
    session: WriteSessionDep,
    confirm: Annotated[str, Form()] = "",
) -> Response:
    """Retire a dataset once the owner typed its id to confirm (it cannot be undone here)."""
    try:
        if confirm.strip() != dataset_id:
            raise InvalidRequest(
                f"to retire {dataset_id!r}, type its id in the confirmation box; "
                "nothing was changed"
            )
        admin.retire_dataset(dataset_id, owner, services, session)
    except _FORM_ERRORS as error:
        return _form_error(request, session, error)
    return RedirectResponse("/console/datasets?notice=retired", status_code=303)


# -- registering a dataset -----------------------------------------------------------------------


async def form_fields(request: Request) -> Fields:
    """Every field of the submitted form by name (forms with a variable set of fields)."""
    form = await request.form()
    return lambda name: [value for value in form.getlist(name) if isinstance(value, str)]


FieldsDep = Annotated[Fields, Depends(form_fields)]


def _source_page(
    request: Request, services: Services, source: SourceForm, problems: Sequence[str] = ()
) -> Response:
    return _page(
        request,
        "register.html",
        422 if problems else 200,
        step="source",
        source=source,
        problems=problems,
        files=data_files(services.settings.data_dir),
        data_dir=services.settings.data_dir,
    )


def _review_page(request: Request, review: ReviewForm, problems: Sequence[str] = ()) -> Response:
    return _page(
        request,
        "register.html",
        422 if problems else 200,
        step="review",
        review=review,
        problems=problems,
    )


@router.get("/datasets/new")
def register_form(request: Request, _owner: Owner, services: ServicesDep) -> Response:
    """Step 1: name the data (files of the server's data folder) and its kind."""
    return _source_page(request, services, SourceForm())


@router.post("/datasets/new")
def propose(request: Request, _owner: Writer, services: ServicesDep, fields: FieldsDep) -> Response:
    """Step 2: the metadata proposal for those files, as a form to review and edit. Views of a
    one-file two-view dataset are left for the owner to choose per attribute."""
    source = SourceForm.from_fields(fields)
    data_dir = services.settings.data_dir
    try:
        kind = source.kind_of()
        files = source.files(data_dir)
        located = source.source().model_copy(
            update={part: str(stored.path) for part, stored in files.items()}
        )
        one_file_views = kind == "views" and source.path != ""
        proposal = propose_metadata(
            located,
            kind="table" if one_file_views else kind,
            base_dir=data_dir,
            label=source.label_spec(),
        )
    except FormProblems as error:
        return _source_page(request, services, source, error.problems)
    except (ValueError, OSError) as error:
        return _source_page(request, services, source, [str(error)])
    review = ReviewForm.of_proposal(source, proposal)
    if one_file_views:
        review = replace(
            review,
            notes=(
                "choose the view (left or right) of every attribute you keep",
                *review.notes,
            ),
        )
    return _review_page(request, review)


@router.post("/datasets/register")
def register(
    request: Request,
    owner: Writer,
    services: ServicesDep,
    session: WriteSessionDep,
    fields: FieldsDep,
) -> Response:
    """Step 3: register the reviewed metadata (refused until the owner ticked "reviewed"), as
    ``dpmine-server datasets add`` does: the files are copied into the dataset's folder."""
    review = ReviewForm.from_fields(fields)
    data_dir = services.settings.data_dir
    try:
        files = review.source.files(data_dir)
        problems: list[str] = []
        try:
            metadata = review.metadata()
        except FormProblems as error:
            problems += error.problems
        try:
            cap = review.cap()
        except FormProblems as error:
            problems += error.problems
        if problems:
            raise FormProblems(problems)
        accepted = accept_reviewed(metadata)
        body = _validated(
            lambda: CreateDatasetRequest.model_validate(
                {
                    "id": review.source.dataset_id,
                    "name": review.source.name or review.source.dataset_id,
                    "description": review.description,
                    "epsilon_cap": cap,
                    "guarantee_policy": review.guarantee_policy,
                    "metadata": accepted,
                    "source": review.source.source(),
                }
            )
        )
        info, report = services.datasets.register(session, body, files=files)
    except FormProblems as error:
        return _review_page(request, review, error.problems)
    except UnreviewedProposal:
        tick = "tick “I reviewed every attribute” once you checked them; nothing was registered"
        return _review_page(request, review, [tick])
    except _FORM_ERRORS as error:
        session.rollback()
        return _review_page(request, review, [error.message])
    audit.record(
        session,
        action="dataset_registered",
        principal=owner,
        target=body.id,
        details={"guarantee_policy": body.guarantee_policy, "via": "console"},
    )
    warnings = loaded_value_warnings(accepted, report.values)
    return _page(
        request,
        "registered.html",
        dataset=info,
        tables=metadata_rows(info.metadata),
        report=report,
        warnings=warnings,
    )


# -- grants --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GrantForm:
    """What the owner typed into the grant form (kept when the form comes back with an error)."""

    dataset_id: str = ""
    analyst: str = ""
    epsilon: str = ""


def _grants(
    request: Request,
    services: Services,
    session: Session,
    *,
    notice: str = "",
    error: str = "",
    status: int = 200,
    typed: GrantForm | None = None,
) -> Response:
    datasets = services.datasets.list_all(session)
    grants: list[GrantInfo] = [
        grant for info in datasets for grant in services.datasets.list_grants(session, info.id)
    ]
    analysts = session.scalars(
        select(Principal.name)
        .where(Principal.role == "analyst", Principal.disabled.is_(False))
        .order_by(Principal.name)
    ).all()
    return _page(
        request,
        "grants.html",
        status,
        grants=grants,
        datasets=[d.id for d in datasets if d.status == "active"],
        analysts=analysts,
        notice=_NOTICES.get(notice, ""),
        error=error,
        typed=typed or GrantForm(),
    )


@router.get("/grants")
def grants_page(
    request: Request, _owner: Owner, services: ServicesDep, session: SessionDep, notice: str = ""
) -> Response:
    """Every grant, with forms to set, change and revoke them."""
    return _grants(request, services, session, notice=notice)


def _epsilon(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise InvalidRequest(f"epsilon: {raw!r} is not a number; enter e.g. 0.5") from None
    return value


_T = TypeVar("_T")


def _validated(build: Callable[[], _T]) -> _T:
    """A wire model built from form fields; its validation errors as one clear message."""
    try:
        return build()
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors()[:5]
        )
        raise InvalidRequest(f"fix these fields: {problems}") from error


@router.post("/grants")
def set_grant(
    request: Request,
    owner: Writer,
    services: ServicesDep,
    session: WriteSessionDep,
    dataset_id: Annotated[str, Form()],
    analyst: Annotated[str, Form()],
    epsilon: Annotated[str, Form()],
) -> Response:
    """Create or change a grant (the owner API's operation, audited the same way); a refusal
    (e.g. below what was spent) comes back on the form with the typed values."""
    try:
        # The amount is in the dataset's unit (rho on a zCDP dataset, issue #24).
        dataset = session.get(Dataset, dataset_id)
        unit = "rho" if dataset is not None and dataset.accounting == "zcdp" else "epsilon"
        body = _validated(
            lambda: GrantRequest.model_validate({"analyst": analyst, unit: _epsilon(epsilon)})
        )
        admin.set_grant(dataset_id, body, owner, services, session)
    except _FORM_ERRORS as error:
        session.rollback()
        typed = GrantForm(dataset_id=dataset_id, analyst=analyst, epsilon=epsilon)
        return _grants(
            request, services, session, error=error.message, status=error.status_code, typed=typed
        )
    return RedirectResponse("/console/grants?notice=grant_set", status_code=303)


@router.post("/grants/revoke")
def revoke_grant(
    request: Request,
    owner: Writer,
    services: ServicesDep,
    session: WriteSessionDep,
    dataset_id: Annotated[str, Form()],
    analyst: Annotated[str, Form()],
    confirm: Annotated[str, Form()] = "",
) -> Response:
    """Stop an analyst's spending on a dataset once the owner ticked the confirmation (the owner
    API's operation: what was spent stays spent)."""
    try:
        if confirm != "yes":
            raise InvalidRequest(
                f"to revoke {analyst!r}'s grant on {dataset_id!r}, tick the confirmation box; "
                "nothing was changed"
            )
        admin.revoke_grant(dataset_id, analyst, owner, services, session)
    except _FORM_ERRORS as error:
        session.rollback()
        return _grants(request, services, session, error=error.message, status=error.status_code)
    return RedirectResponse("/console/grants?notice=grant_revoked", status_code=303)


# -- principals ----------------------------------------------------------------------------------


def _principals(
    request: Request, session: Session, *, notice: str = "", error: str = "", status: int = 200
) -> Response:
    principals = [
        principal_info(p) for p in session.scalars(select(Principal).order_by(Principal.id))
    ]
    return _page(
        request,
        "principals.html",
        status,
        principals=principals,
        notice=_NOTICES.get(notice, ""),
        error=error,
    )


@router.get("/principals")
def principals_page(
    request: Request, _owner: Owner, session: SessionDep, notice: str = ""
) -> Response:
    """Every principal (never a key), with forms to add, disable and rotate keys."""
    return _principals(request, session, notice=notice)


def _key_page(request: Request, created: PrincipalCreated, action: str) -> Response:
    """The new key, shown on this response only (it is stored as a hash)."""
    return _page(request, "key.html", created=created, action=action)


@router.post("/principals")
def add_principal(
    request: Request,
    owner: Writer,
    services: ServicesDep,
    session: WriteSessionDep,
    name: Annotated[str, Form()],
    role: Annotated[str, Form()],
) -> Response:
    """Create an owner or an analyst and show its key once."""
    body = _validated(lambda: PrincipalCreateRequest.model_validate({"name": name, "role": role}))
    created = admin.add_principal(body, owner, services, session)
    return _key_page(request, created, "created")


@router.post("/principals/{name}/rotate-key")
def rotate_key(
    request: Request, name: str, owner: Writer, services: ServicesDep, session: WriteSessionDep
) -> Response:
    """Issue a new key (the old one stops working) and show it once."""
    rotated = admin.rotate_principal_key(name, owner, services, session)
    return _key_page(request, rotated, "rotated")


@router.post("/principals/{name}/disable")
def disable(
    request: Request,
    name: str,
    owner: Writer,
    session: WriteSessionDep,
    confirm: Annotated[str, Form()] = "",
) -> Response:
    """Disable a principal once the owner typed its name to confirm: its key stops working
    (the console has no way back)."""
    try:
        if confirm.strip() != name:
            raise InvalidRequest(
                f"to disable {name!r}, type its name in the confirmation box; nothing was changed"
            )
        admin.disable_principal(name, owner, session)
    except _FORM_ERRORS as error:
        session.rollback()
        return _principals(request, session, error=error.message, status=error.status_code)
    return RedirectResponse("/console/principals?notice=disabled", status_code=303)


# -- ledger and audit ----------------------------------------------------------------------------


def _day(raw: str, field: str) -> date | None:
    if not raw:
        return None
    try:
        return date.fromisoformat(raw)
    except ValueError:
        raise InvalidRequest(f"{field}: {raw!r} is not a date; use YYYY-MM-DD") from None


@dataclass(frozen=True, slots=True)
class Filters:
    """The filters of a ledger or audit page; empty fields match everything."""

    dataset: str = ""
    principal: str = ""
    status: str = ""
    action: str = ""
    since: date | None = None
    until: date | None = None

    def in_range(self, moment: datetime) -> bool:
        """Whether ``moment`` falls on a day from ``since`` to ``until`` (both included)."""
        day = moment.date()
        return (self.since is None or day >= self.since) and (
            self.until is None or day <= self.until
        )

    def query(self) -> str:
        """The filters as a query string (for the CSV export link)."""
        fields = {
            "dataset": self.dataset,
            "principal": self.principal,
            "status": self.status,
            "action": self.action,
            "since": self.since.isoformat() if self.since else "",
            "until": self.until.isoformat() if self.until else "",
        }
        return urlencode({k: v for k, v in fields.items() if v})


def filters(
    dataset: str = "",
    principal: str = "",
    status: str = "",
    action: str = "",
    since: str = "",
    until: str = "",
) -> Filters:
    """The page's filters from its query string."""
    return Filters(
        dataset=dataset.strip(),
        principal=principal.strip(),
        status=status.strip(),
        action=action.strip(),
        since=_day(since.strip(), "since"),
        until=_day(until.strip(), "until"),
    )


FiltersDep = Annotated[Filters, Depends(filters)]


def filter_ledger(entries: Iterable[LedgerEntryInfo], chosen: Filters) -> list[LedgerEntryInfo]:
    """The entries that match every filter, in ledger order."""
    return [
        e
        for e in entries
        if (not chosen.dataset or e.dataset_id == chosen.dataset)
        and (not chosen.principal or e.principal == chosen.principal)
        and (not chosen.status or e.status == chosen.status)
        and chosen.in_range(e.created_at)
    ]


def filter_audit(events: Iterable[AuditEventInfo], chosen: Filters) -> list[AuditEventInfo]:
    """The events that match every filter, newest first."""
    return [
        e
        for e in events
        if (not chosen.principal or e.principal == chosen.principal)
        and (not chosen.action or e.action == chosen.action)
        and chosen.in_range(e.at)
    ]


def to_csv(rows: Iterable[dict[str, Any]], columns: Sequence[str]) -> str:
    """CSV with a header; nested values (parameters, details) as JSON."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(columns)
    for row in rows:
        writer.writerow(
            json.dumps(row[c]) if isinstance(row[c], dict | list) else row[c] for c in columns
        )
    return buffer.getvalue()


def _csv_response(text: str, name: str) -> Response:
    return Response(
        text,
        media_type="text/csv",
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )


@router.get("/ledger")
def ledger_page(
    request: Request, _owner: Owner, session: SessionDep, chosen: FiltersDep
) -> Response:
    """Ledger entries (filtered), newest first, with the budget charts of what is shown."""
    entries = filter_ledger(ledger_entries(session), chosen)
    return _page(
        request,
        "ledger.html",
        entries=entries[::-1][:PAGE_ROWS],
        total=len(entries),
        filters=chosen,
        charts=_charts(entries),
        statuses=("reserved", "released", "failed", "interrupted"),
    )


@router.get("/ledger.csv")
def ledger_csv(_owner: Owner, session: SessionDep, chosen: FiltersDep) -> Response:
    """The filtered ledger as CSV (every matching entry, in ledger order)."""
    entries = filter_ledger(ledger_entries(session), chosen)
    rows = (entry.model_dump(mode="json") for entry in entries)
    return _csv_response(to_csv(rows, _LEDGER_CSV_COLUMNS), "dpmine-ledger.csv")


@router.get("/audit")
def audit_page(
    request: Request, _owner: Owner, session: SessionDep, chosen: FiltersDep
) -> Response:
    """The audit log (filtered), newest first."""
    events = filter_audit(audit.list_events(session), chosen)
    return _page(
        request,
        "audit.html",
        events=events[:PAGE_ROWS],
        total=len(events),
        filters=chosen,
    )


@router.get("/audit.csv")
def audit_csv(_owner: Owner, session: SessionDep, chosen: FiltersDep) -> Response:
    """The filtered audit log as CSV, newest first."""
    events = filter_audit(audit.list_events(session), chosen)
    rows = (event.model_dump(mode="json") for event in events)
    return _csv_response(to_csv(rows, _AUDIT_CSV_COLUMNS), "dpmine-audit.csv")


# -- jobs ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobRow:
    """A job as the owner sees it: the real state, progress and times (never shown to the
    analyst, whose view is the padded public schedule of services/jobs.py) and its charge."""

    id: str
    dataset_id: str
    analyst: str
    operation: str
    status: str
    progress: int
    epsilon: str
    message: str
    cancel_requested: bool
    created_at: datetime
    updated_at: datetime

    @property
    def active(self) -> bool:
        """Queued or running: it can still be cancelled."""
        return self.status in {"queued", "running"}


def _job_rows(session: Session, *, active: bool, limit: int | None = None) -> list[JobRow]:
    statuses = ("queued", "running")
    query = (
        select(Job, Principal.name, LedgerEntry.epsilon_units)
        .join(Principal, Principal.id == Job.principal_id)
        .outerjoin(LedgerEntry, LedgerEntry.id == Job.ledger_entry_id)
        .where(Job.status.in_(statuses) if active else Job.status.not_in(statuses))
        .order_by(Job.created_at if active else Job.updated_at.desc())
        .limit(limit)
    )
    return [
        JobRow(
            id=job.id,
            dataset_id=job.dataset_id,
            analyst=name,
            operation=job.operation,
            status=job.status,
            progress=round(100 * (1.0 if job.status == "done" else job.progress)),
            epsilon=Epsilon(units).exact_str() if units is not None else "",
            message=job.message,
            cancel_requested=job.cancel_requested,
            created_at=job.created_at,
            updated_at=job.updated_at,
        )
        for job, name, units in session.execute(query).all()
    ]


def _jobs(
    request: Request, session: Session, *, notice: str = "", error: str = "", status: int = 200
) -> Response:
    return _page(
        request,
        "jobs.html",
        status,
        active=_job_rows(session, active=True),
        history=_job_rows(session, active=False, limit=JOB_HISTORY_ROWS),
        history_rows=JOB_HISTORY_ROWS,
        notice=_NOTICES.get(notice, ""),
        error=error,
    )


@router.get("/jobs")
def jobs_page(request: Request, _owner: Owner, session: SessionDep, notice: str = "") -> Response:
    """Queued and running jobs (oldest first) with their real progress, charge and a cancel
    button, and the latest finished jobs (newest first)."""
    return _jobs(request, session, notice=notice)


@router.post("/jobs/{job_id}/cancel")
def cancel_job(
    request: Request, job_id: str, owner: Writer, services: ServicesDep, session: SessionDep
) -> Response:
    """Cancel a queued or running job: the analyst's own cancel (the charge stays), audited."""
    job = session.get(Job, job_id)
    if job is None or job.status not in {"queued", "running"}:
        shown = "no such job" if job is None else f"it is already {job.status}"
        message = f"job {job_id!r} cannot be cancelled: {shown}; nothing was changed"
        return _jobs(request, session, error=message, status=409 if job else 404)
    details = {"dataset": job.dataset_id, "operation": job.operation}
    session.rollback()  # the cancel writes in its own transaction
    services.jobs.cancel_for_owner(job_id)
    with services.write_sessions() as db, db.begin():
        audit.record(db, action="job_cancelled", principal=owner, target=job_id, details=details)
    return RedirectResponse("/console/jobs?notice=job_cancelled", status_code=303)


@router.api_route("/{rest:path}", methods=["GET", "POST"])
def not_found(request: Request, rest: str) -> Response:
    """Any other console address."""
    del rest
    return _error_page(request, 404, "there is no such console page")
