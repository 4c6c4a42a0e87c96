"""Request limits enforced before authentication and before any body is parsed.

* :class:`BodySizeLimit` (pure ASGI middleware): a request whose ``Content-Length`` exceeds its
  route's limit is answered 413 without reading a byte of the body; a body without
  ``Content-Length`` (chunked) is counted as it streams and refused once it passes the limit.
* :class:`LoginThrottle`: token buckets on failed logins (per client address, per public key
  prefix and in all), so that a flood of bad keys is answered 429 before any database work.

Both answer with the one error shape ``{"error", "detail"}`` (DESIGN.md "Errors").
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dpmine_server.services.audit import FailedLogins
from dpmine_server.settings import Settings

__all__ = [
    "UPLOAD_FORM_ALLOWANCE",
    "UPLOAD_PATHS",
    "BodySizeLimit",
    "LoginGuard",
    "LoginThrottle",
    "TokenBucket",
]

#: The routes that take file uploads: their limit is ``max_upload_bytes`` plus the allowance.
UPLOAD_PATHS = ("/v1/admin/datasets/upload", "/v1/admin/datasets/propose-metadata")
#: Room for the multipart framing and the form fields (the request's JSON) of an upload.
UPLOAD_FORM_ALLOWANCE = 16 * 1024**2


class _BodyTooLarge(Exception):
    """Raised into the app by the wrapped ``receive`` once a streamed body passes the limit."""


async def _send_error(
    send: Send,
    status: int,
    error: str,
    detail: str,
    headers: Iterable[tuple[str, str]] = (),
) -> None:
    body = json.dumps({"error": error, "detail": detail}).encode()
    raw_headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
        *((name.encode("latin-1"), value.encode("latin-1")) for name, value in headers),
    ]
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


class BodySizeLimit:
    """Refuse request bodies larger than their route's limit with 413 ``PayloadTooLarge``.

    ``limits`` maps exact paths to their own limit (the upload routes); every other path has
    ``default_limit``. Runs before routing, authentication and parsing.
    """

    def __init__(self, app: ASGIApp, *, default_limit: int, limits: dict[str, int]) -> None:
        self.app = app
        self.default_limit = default_limit
        self.limits = dict(limits)

    def limit_for(self, path: str) -> int:
        """The body limit of ``path`` in bytes."""
        return self.limits.get(path.rstrip("/") or "/", self.default_limit)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope["path"])
        declared: int | None = None
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    await _send_error(
                        send, 400, "InvalidRequest", "the Content-Length header is not a number"
                    )
                    return
        if declared is not None and declared > limit:
            await _send_error(send, 413, "PayloadTooLarge", self._detail(limit))
            return

        received = 0
        exceeded = False
        started = False

        async def limited_receive() -> Message:
            nonlocal received, exceeded
            if exceeded:
                raise _BodyTooLarge
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    exceeded = True
                    raise _BodyTooLarge
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if exceeded:
                return  # the app's answer to the aborted body (e.g. "error parsing the body")
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except _BodyTooLarge:
            pass
        except Exception:
            if not exceeded:
                raise
        if exceeded and not started:
            await _send_error(send, 413, "PayloadTooLarge", self._detail(limit))

    @staticmethod
    def _detail(limit: int) -> str:
        return (
            f"the request body exceeds this route's limit of {limit} bytes; send less "
            "(the limits are DPMINE_MAX_JSON_BYTES and, for uploads, DPMINE_MAX_UPLOAD_BYTES)"
        )


@dataclass
class TokenBucket:
    """``capacity`` tokens refilled at ``rate`` per second; one token per event."""

    capacity: float
    rate: float
    tokens: float
    updated: float

    def _refill(self, now: float) -> None:
        self.tokens = min(self.capacity, self.tokens + (now - self.updated) * self.rate)
        self.updated = now

    def available(self, now: float) -> bool:
        """Whether one more event fits (consumes nothing)."""
        self._refill(now)
        return self.tokens >= 1.0

    def take(self, now: float) -> None:
        """Consume one token (may go down to zero, never below)."""
        self._refill(now)
        self.tokens = max(self.tokens - 1.0, 0.0)

    def wait(self, now: float) -> float:
        """Seconds until one token is available."""
        self._refill(now)
        return 0.0 if self.tokens >= 1.0 else (1.0 - self.tokens) / self.rate


class LoginThrottle:
    """Token buckets on *failed* logins; successful logins never spend tokens.

    An attempt is refused (429) when the bucket of its client address, of the presented key's
    public prefix, or the global bucket is empty; :meth:`failed` spends a token of each. The
    per-address and per-prefix buckets refill quickly, so bad keys from one address cannot lock
    out other principals' good keys for long: the limit only slows guessing down.

    A refused attempt is answered before any database work. The buckets live in this process
    (one server process: the limits are per process).
    """

    def __init__(
        self,
        *,
        per_client: int,
        global_limit: int,
        window_seconds: float,
        clock: Callable[[], float] = time.monotonic,
        max_tracked: int = 10_000,
    ) -> None:
        self._per_client = float(per_client)
        self._global = float(global_limit)
        self._window = float(window_seconds)
        self._clock = clock
        self._max_tracked = max_tracked
        self._lock = threading.Lock()
        self._buckets: OrderedDict[str, TokenBucket] = OrderedDict()
        now = clock()
        self._global_bucket = TokenBucket(
            self._global, self._global / self._window, self._global, now
        )

    def _bucket(self, name: str, now: float) -> TokenBucket:
        bucket = self._buckets.get(name)
        if bucket is None:
            rate = self._per_client / self._window
            bucket = TokenBucket(self._per_client, rate, self._per_client, now)
            self._buckets[name] = bucket
            while len(self._buckets) > self._max_tracked:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(name)
        return bucket

    def retry_after(self, keys: Iterable[str]) -> int | None:
        """Seconds to wait (at least 1) when an attempt from ``keys`` must be refused, else
        None."""
        with self._lock:
            now = self._clock()
            waits = [self._global_bucket.wait(now)]
            waits.extend(self._bucket(key, now).wait(now) for key in keys)
            longest = max(waits)
            return None if longest <= 0 else max(1, math.ceil(longest))

    def failed(self, keys: Iterable[str]) -> None:
        """Record a failed login from ``keys`` (client address, key prefix)."""
        with self._lock:
            now = self._clock()
            self._global_bucket.take(now)
            for key in keys:
                self._bucket(key, now).take(now)


class LoginGuard:
    """What the authentication dependency keeps between requests (one per app): the failed-login
    throttle, the audit aggregation of failed logins, and the hashes of keys that logged in
    successfully (those skip the throttle, so a flood of bad keys from a shared address cannot
    lock out keys already in use; the database still checks them every time)."""

    def __init__(
        self,
        throttle: LoginThrottle,
        failures: FailedLogins,
        *,
        max_known: int = 10_000,
    ) -> None:
        self.throttle = throttle
        self.failures = failures
        self._known: OrderedDict[str, None] = OrderedDict()
        self._max_known = max_known
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Settings) -> LoginGuard:
        """The guard configured by the ``login_*`` settings."""
        window = settings.login_failure_window_s
        throttle = LoginThrottle(
            per_client=settings.login_failures_per_client,
            global_limit=settings.login_failures_global,
            window_seconds=window,
        )
        return cls(throttle, FailedLogins(window_s=window))

    def is_known(self, key_hash: str) -> bool:
        """Whether this key hash logged in successfully before."""
        with self._lock:
            return key_hash in self._known

    def remember(self, key_hash: str) -> None:
        """Remember a key hash that just logged in successfully."""
        with self._lock:
            self._known[key_hash] = None
            self._known.move_to_end(key_hash)
            while len(self._known) > self._max_known:
                self._known.popitem(last=False)

    def forget(self, key_hash: str) -> None:
        """Forget a key hash (it failed: disabled or rotated since)."""
        with self._lock:
            self._known.pop(key_hash, None)
