"""Principals (owners, analysts) and their API keys, stored only as HMAC-SHA256 hashes.

:class:`PrincipalCache` keeps authenticated principals for a few seconds, keyed by the key's
HMAC (never the key). Disabling a principal or rotating its key empties every cache of this
process (when the change commits, and at once); another process (the CLI, another API worker)
cannot reach them, so there a disabled principal or a rotated key keeps working for at most the
TTL (``DPMINE_AUTH_CACHE_TTL_S``, 0 turns the cache off).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict

from sqlalchemy import event, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from dpmine.wire import PrincipalCreated, PrincipalInfo, Role
from dpmine_server.db.models import Principal, ServerState, utcnow
from dpmine_server.errors import Conflict, NotFound

__all__ = [
    "KEY_PREFIX",
    "PrincipalCache",
    "SecretKeyMismatch",
    "authenticate",
    "check_secret_key",
    "create_principal",
    "get_principal",
    "hash_key",
    "new_api_key",
    "principal_info",
    "rotate_key",
    "set_disabled",
]

KEY_PREFIX = "dpm_"
#: Name of the stored check value of the secret key (table server_state).
SECRET_CHECK_NAME = "secret_key_check"
#: The fixed label whose HMAC under the secret is the check value.
_SECRET_CHECK_LABEL = b"dpmine secret key check v1"


class SecretKeyMismatch(RuntimeError):
    """DPMINE_SECRET_KEY is not the secret this database's API-key hashes were made with."""


def _secret_check_value(secret: str) -> str:
    return hmac.new(secret.encode(), _SECRET_CHECK_LABEL, hashlib.sha256).hexdigest()


def check_secret_key(session: Session, *, secret: str) -> bool:
    """Compare ``secret`` with the check value stored in the database, storing it on the first
    start (returns True then). Raises :class:`SecretKeyMismatch` when it differs.

    The check value is an HMAC of a fixed label: it reveals nothing about the secret. Run it in
    a write transaction (the caller commits).
    """
    expected = _secret_check_value(secret)
    stored = session.get(ServerState, SECRET_CHECK_NAME)
    if stored is None:
        session.add(ServerState(name=SECRET_CHECK_NAME, value=expected, created_at=utcnow()))
        session.flush()
        return True
    if not hmac.compare_digest(stored.value, expected):
        raise SecretKeyMismatch(
            "DPMINE_SECRET_KEY is not the secret this database was created with, so every "
            "stored API key would be refused (401). Start the server with the original "
            "DPMINE_SECRET_KEY; the secret must stay the same for the life of the database"
        )
    return False


class _Revocations:
    """How many times this process disabled a principal or rotated a key."""

    count = 0
    lock = threading.Lock()


def _revoke_cached() -> None:
    """Invalidate every :class:`PrincipalCache` of this process."""
    with _Revocations.lock:
        _Revocations.count += 1


def _revoke_on_commit(session: Session) -> None:
    # Now (no new entry from before the change is stored) and after the commit (an entry read
    # between now and the commit holds the old row).
    _revoke_cached()
    event.listen(session, "after_commit", lambda _session: _revoke_cached(), once=True)


class PrincipalCache:
    """Authenticated principals for ``ttl_s`` seconds, at most ``max_entries``, keyed by the
    key's HMAC. Entries are detached ``Principal`` rows; callers only read them."""

    def __init__(self, *, ttl_s: float, max_entries: int) -> None:
        self._ttl_s = ttl_s
        self._max_entries = max_entries
        self._entries: OrderedDict[str, tuple[Principal, float, int]] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def generation() -> int:
        """Take this before reading the principal from the database; pass it to :meth:`put`."""
        return _Revocations.count

    def get(self, key_hash: str) -> Principal | None:
        """The cached principal of this key hash, if still fresh and not revoked."""
        with self._lock:
            entry = self._entries.get(key_hash)
            if entry is None:
                return None
            principal, expires, generation = entry
            if generation != _Revocations.count or time.monotonic() >= expires:
                del self._entries[key_hash]
                return None
            return principal

    def put(self, key_hash: str, principal: Principal, generation: int) -> None:
        """Keep ``principal`` unless a revocation happened since ``generation`` was taken."""
        if self._ttl_s <= 0:
            return
        with self._lock:
            if generation != _Revocations.count:
                return
            self._entries[key_hash] = (principal, time.monotonic() + self._ttl_s, generation)
            self._entries.move_to_end(key_hash)
            while len(self._entries) > self._max_entries:
                self._entries.popitem(last=False)


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
    _revoke_on_commit(session)
    return PrincipalCreated(principal=principal_info(principal), api_key=key)


def set_disabled(session: Session, name: str, *, disabled: bool) -> PrincipalInfo:
    """Disable (or re-enable) a principal."""
    principal = get_principal(session, name)
    principal.disabled = disabled
    session.flush()
    _revoke_on_commit(session)
    return principal_info(principal)
