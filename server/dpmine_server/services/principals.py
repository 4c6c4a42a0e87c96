"""Principals (owners, analysts) and their API keys, stored only as HMAC-SHA256 hashes."""

from __future__ import annotations

import hashlib
import hmac
import secrets

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from dpmine.wire import PrincipalCreated, PrincipalInfo, Role
from dpmine_server.db.models import Principal, utcnow
from dpmine_server.errors import Conflict, NotFound

__all__ = [
    "KEY_PREFIX",
    "authenticate",
    "create_principal",
    "get_principal",
    "hash_key",
    "new_api_key",
    "principal_info",
    "rotate_key",
    "set_disabled",
]

KEY_PREFIX = "dpm_"


def new_api_key() -> str:
    """A fresh key with 256 bits of entropy."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_key(api_key: str, *, secret: str) -> str:
    """HMAC-SHA256 of the key under the server secret (a pepper: a stolen database alone does
    not allow offline guessing, and keys are random anyway)."""
    return hmac.new(secret.encode(), api_key.encode(), hashlib.sha256).hexdigest()


def principal_info(principal: Principal) -> PrincipalInfo:
    """Wire view of a principal (never the key)."""
    return PrincipalInfo(
        id=principal.id,
        name=principal.name,
        role="owner" if principal.role == "owner" else "analyst",
        disabled=principal.disabled,
        key_prefix=principal.key_prefix,
        created_at=principal.created_at,
    )


def create_principal(
    session: Session, *, name: str, role: Role, secret: str, api_key: str | None = None
) -> PrincipalCreated:
    """Create a principal and return its key, shown only this once."""
    key = api_key or new_api_key()
    principal = Principal(
        name=name,
        role=role,
        key_prefix=key[: len(KEY_PREFIX) + 6],
        key_hash=hash_key(key, secret=secret),
        disabled=False,
        created_at=utcnow(),
    )
    session.add(principal)
    try:
        session.flush()
    except IntegrityError as error:
        session.rollback()
        raise Conflict(f"a principal named {name!r} already exists; pick another name") from error
    return PrincipalCreated(principal=principal_info(principal), api_key=key)


def get_principal(session: Session, name: str) -> Principal:
    """The principal called ``name``."""
    principal = session.scalar(select(Principal).where(Principal.name == name))
    if principal is None:
        raise NotFound(f"no principal named {name!r}")
    return principal


def authenticate(session: Session, api_key: str, *, secret: str) -> Principal | None:
    """The enabled principal holding ``api_key``, or None."""
    principal = session.scalar(
        select(Principal).where(Principal.key_hash == hash_key(api_key, secret=secret))
    )
    if principal is None or principal.disabled:
        return None
    return principal


def rotate_key(session: Session, name: str, *, secret: str) -> PrincipalCreated:
    """Replace a principal's key; the old key stops working at once."""
    principal = get_principal(session, name)
    key = new_api_key()
    principal.key_hash = hash_key(key, secret=secret)
    principal.key_prefix = key[: len(KEY_PREFIX) + 6]
    session.flush()
    return PrincipalCreated(principal=principal_info(principal), api_key=key)


def set_disabled(session: Session, name: str, *, disabled: bool) -> PrincipalInfo:
    """Disable (or re-enable) a principal."""
    principal = get_principal(session, name)
    principal.disabled = disabled
    session.flush()
    return principal_info(principal)
