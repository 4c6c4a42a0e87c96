"""Console sessions: HMAC-signed, expiring tokens in an HttpOnly cookie, and CSRF tokens.

A token names a principal and a random session id; it never holds an API key. It is signed with
a key derived from ``DPMINE_SECRET_KEY``, so every server process accepts it. It expires
:data:`IDLE_S` seconds after the last page and :data:`ABSOLUTE_S` seconds after the login; it
is bound to the principal's current API key (rotating the key ends its sessions). Logging out
is written to the audit log, which every process reads (see ``routes.py``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from dataclasses import asdict, dataclass
from urllib.parse import urlsplit

__all__ = [
    "ABSOLUTE_S",
    "COOKIE",
    "IDLE_S",
    "ConsoleSession",
    "csrf_token",
    "decode",
    "encode",
    "key_binding",
    "new_session",
    "same_origin",
]

#: The cookie holding the signed session token (path ``/console`` only).
COOKIE = "dpmine_console"
#: A session ends this long after its last page.
IDLE_S = 30 * 60
#: A session ends this long after its login, however busy.
ABSOLUTE_S = 8 * 3600
_LABEL = b"dpmine console session v1"


@dataclass(frozen=True, slots=True)
class ConsoleSession:
    """What a console token says: who, which session, since when, and where its audit starts."""

    sid: str
    principal_id: int
    key_binding: str
    issued: int
    seen: int
    audit_floor: int


def _signing_key(secret: str) -> bytes:
    """A key for console tokens only, derived from the server secret."""
    return hmac.new(secret.encode(), _LABEL, hashlib.sha256).digest()


def _mac(secret: str, message: bytes) -> str:
    return hmac.new(_signing_key(secret), message, hashlib.sha256).hexdigest()


def key_binding(secret: str, key_hash: str) -> str:
    """A value that changes when the principal's API key changes (not the key's hash itself)."""
    return _mac(secret, b"key|" + key_hash.encode())[:32]


def new_session(*, principal_id: int, binding: str, now: int, audit_floor: int) -> ConsoleSession:
    """A fresh session with a random 64-bit id."""
    return ConsoleSession(
        sid=secrets.token_hex(8),
        principal_id=principal_id,
        key_binding=binding,
        issued=now,
        seen=now,
        audit_floor=audit_floor,
    )


def encode(session: ConsoleSession, secret: str) -> str:
    """``payload.signature``, both URL-safe."""
    payload = base64.urlsafe_b64encode(json.dumps(asdict(session)).encode()).decode()
    return f"{payload}.{_mac(secret, payload.encode())}"


def decode(token: str, secret: str, *, now: int) -> ConsoleSession | None:
    """The session of a genuine, unexpired token; None for anything else."""
    payload, _, signature = token.partition(".")
    if not hmac.compare_digest(signature.encode(), _mac(secret, payload.encode()).encode()):
        return None
    try:
        session = ConsoleSession(**json.loads(base64.urlsafe_b64decode(payload)))
        fresh = session.issued <= session.seen <= now + 60 and (
            now - session.seen <= IDLE_S and now - session.issued <= ABSOLUTE_S
        )
    except (ValueError, TypeError):
        return None
    return session if fresh else None


def csrf_token(secret: str, sid: str) -> str:
    """The CSRF token of a session: every console form carries it in a hidden field."""
    return _mac(secret, b"csrf|" + sid.encode())


def same_origin(host: str | None, origin: str | None, referer: str | None) -> bool:
    """Whether a POST came from a page of this host: its ``Origin`` (or, when the browser sent
    none, its ``Referer``) names the host the request was sent to."""
    if not host:
        return False
    source = origin if origin and origin != "null" else referer
    return source is not None and urlsplit(source).netloc == host
