"""Typed dependencies of the routes (``Annotated`` aliases, one place)."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Request
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from dpmine_server.api.limits import LoginGuard
from dpmine_server.db.models import Principal
from dpmine_server.errors import Forbidden, InvalidRequest, RateLimited, Unauthorized
from dpmine_server.services import audit
from dpmine_server.services.container import Services
from dpmine_server.services.kernel_lane import LanePlace
from dpmine_server.services.principals import KEY_PREFIX, PrincipalCache, authenticate, hash_key

__all__ = [
    "AnalystDep",
    "Arrival",
    "ArrivalDep",
    "IdempotencyKeyDep",
    "OwnerDep",
    "PrincipalDep",
    "ServicesDep",
    "SessionDep",
    "WriteSessionDep",
    "flush_failed_logins",
    "get_login_guard",
]

logger = logging.getLogger(__name__)


def _services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


async def get_services(request: Request) -> Services:
    """The app's services (``async``: resolved on the event loop, no worker-thread hop)."""
    return _services(request)


ServicesDep = Annotated[Services, Depends(get_services)]


def get_session(services: ServicesDep) -> Iterator[Session]:
    """A session that commits on success and rolls back on error (never used by the ledger)."""
    with services.sessions() as session:
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise


# scope="function": commit before the response is sent, so a client that got 201 sees its row.
SessionDep = Annotated[Session, Depends(get_session, scope="function")]


def get_write_session(services: ServicesDep) -> Iterator[Session]:
    """Like :func:`get_session` for routes that read and then write (``BEGIN IMMEDIATE`` on
    SQLite); the route must not open another write transaction while it is in use."""
    with services.write_sessions() as session:
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise


WriteSessionDep = Annotated[Session, Depends(get_write_session, scope="function")]


# Documented in the OpenAPI document as security schemes; checked by get_principal.
_BEARER = HTTPBearer(auto_error=False, description="Authorization: Bearer <API key>")
_API_KEY = APIKeyHeader(name="X-API-Key", auto_error=False, description="The API key")


def get_login_guard(request: Request) -> LoginGuard:
    """The app's failed-login throttle and audit aggregation (made on first use)."""
    state = request.app.state
    guard: LoginGuard | None = getattr(state, "login_guard", None)
    if guard is None:
        guard = state.login_guard = LoginGuard.from_settings(_services(request).settings)
    return guard


def get_principal_cache(request: Request) -> PrincipalCache:
    """The app's short cache of authenticated principals (made on first use)."""
    state = request.app.state
    cache: PrincipalCache | None = getattr(state, "principal_cache", None)
    if cache is None:
        settings = _services(request).settings
        cache = state.principal_cache = PrincipalCache(
            ttl_s=settings.auth_cache_ttl_s, max_entries=settings.auth_cache_size
        )
    return cache


def _write_audit(services: Services, events: list[tuple[str, dict[str, Any]]]) -> None:
    if events:
        with services.write_sessions() as session, session.begin():
            audit.record_all(session, events)


def flush_failed_logins(app: FastAPI) -> None:
    """Write the pending summary of failed logins (at shutdown; a failure is only logged)."""
    guard: LoginGuard | None = getattr(app.state, "login_guard", None)
    services: Services | None = getattr(app.state, "services", None)
    if guard is None or services is None:
        return
    try:
        _write_audit(services, guard.failures.flush())
    except Exception:
        logger.exception("could not write the summary of failed logins")


def get_principal(
    request: Request,
    services: ServicesDep,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER)] = None,
    x_api_key: Annotated[str | None, Depends(_API_KEY)] = None,
) -> Principal:
    """The principal holding the presented key (401 otherwise; the key is never logged).

    Failed logins are throttled per client address and in all (429 before any database work;
    keys that logged in before are not held back) and aggregated in the audit log
    (:class:`~dpmine_server.services.audit.FailedLogins`). A key that authenticated within the
    last ``auth_cache_ttl_s`` seconds is not looked up again (:class:`PrincipalCache`).
    """
    key = (x_api_key or (bearer.credentials if bearer else "")).strip()
    if not key:
        raise Unauthorized("send your API key as 'Authorization: Bearer <key>'")
    guard = get_login_guard(request)
    key_hash = hash_key(key, secret=services.settings.secret_key)
    # Only the public key prefix of something shaped like a key, never other text.
    shown = key[:10] if key.startswith(KEY_PREFIX) else "(not a dpmine key)"
    client = [f"client:{request.client.host if request.client else 'unknown'}"]
    known = guard.is_known(key_hash)
    if not known:
        wait = guard.throttle.retry_after(client)
        if wait is not None:
            _write_audit(services, guard.failures.failed(shown, refused=True))
            raise RateLimited(
                f"too many failed logins from this address; retry in {wait} s with a valid key",
                retry_after=wait,
            )
    cache = get_principal_cache(request)
    principal = cache.get(key_hash)
    if principal is None:
        generation = cache.generation()
        with services.sessions() as session:
            principal = authenticate(session, key, secret=services.settings.secret_key)
            if principal is not None:
                session.expunge(principal)
        if principal is not None:
            cache.put(key_hash, principal, generation)
    if principal is not None:
        if not known:
            guard.remember(key_hash)
        _write_audit(services, guard.failures.due())
        return principal
    guard.forget(key_hash)
    guard.throttle.failed(client)
    _write_audit(services, guard.failures.failed(shown, refused=False))
    raise Unauthorized("unknown or disabled API key; ask the data owner for a valid key")


PrincipalDep = Annotated[Principal, Depends(get_principal)]


def require_owner(principal: PrincipalDep) -> Principal:
    """Owners only."""
    if principal.role != "owner":
        raise Forbidden("this needs an owner's key")
    return principal


async def require_analyst(principal: PrincipalDep) -> Principal:
    """Analysts only (owners manage, analysts query; on the event loop, no thread hop)."""
    if principal.role != "analyst":
        raise Forbidden("owners manage datasets; query them with an analyst's key")
    return principal


OwnerDep = Annotated[Principal, Depends(require_owner)]
AnalystDep = Annotated[Principal, Depends(require_analyst)]


async def get_idempotency_key(
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key")] = None,
) -> str | None:
    """The client's Idempotency-Key (1–200 printable characters), if any (on the event loop)."""
    if idempotency_key is None:
        return None
    key = idempotency_key.strip()
    if not 1 <= len(key) <= 200 or not key.isprintable():
        raise InvalidRequest("Idempotency-Key must be 1 to 200 printable characters (a UUID)")
    return key


IdempotencyKeyDep = Annotated[str | None, Depends(get_idempotency_key)]


@dataclass(frozen=True)
class Arrival:
    """When a data-touching request arrived and its place in its process's kernel lane."""

    #: ``time.monotonic()`` at arrival: the origin of the padded deadline (services/timing.py).
    time: float
    #: Registered in arrival order (services/kernel_lane.py); left by the route that runs the
    #: request or the call thread it hands it to, else when the request ends.
    place: LanePlace


async def request_arrival(request: Request) -> AsyncIterator[Arrival]:
    """The request's :class:`Arrival` (resolved first, on the event loop, so lane places are
    numbered in arrival order); its place is left at the end unless a call thread holds it
    (a request refused by authentication or validation never reached its route)."""
    services = _services(request)
    if services.collector is not None:  # a body read during a collection: its window's end
        await services.collector.hold()
    now = time.monotonic()
    place = services.kernel_lane.register(now)
    try:
        yield Arrival(now, place)
    finally:
        place.leave_unless_handed_over()


ArrivalDep = Annotated[Arrival, Depends(request_arrival)]
