"""The client's exception tree, mapped from the server's error body ``{"error", "detail"}``.

::

    DPMineError
    ├── TransportError            the server could not be reached (after retries)
    └── ServerError               the server answered with an error
        ├── InvalidRequestError   422: fix the request (nothing was charged)
        ├── AuthenticationError   401: missing/unknown/disabled key
        ├── PermissionDeniedError 403
        ├── NotFoundError         404: unknown or not granted
        ├── PayloadTooLargeError  413: a body over the server's limit (nothing was read)
        ├── RateLimitedError      429: too many failed logins; wait ``retry_after`` seconds
        ├── ConflictError         409
        │   ├── BudgetExhaustedError      nothing was charged
        │   ├── IdempotencyConflictError  the key was used for a different request
        │   ├── RequestInProgressError    retry later with the same Idempotency-Key
        │   ├── ChargeKeptNoResultError   charged, nothing released: use a new key
        │   └── JobCancelledError         you cancelled the job; the charge stands
        └── OperationFailedError  500: failed after its charge; nothing released
"""

from __future__ import annotations

import httpx

__all__ = [
    "AuthenticationError",
    "BudgetExhaustedError",
    "ChargeKeptNoResultError",
    "ConflictError",
    "DPMineError",
    "IdempotencyConflictError",
    "InvalidRequestError",
    "JobCancelledError",
    "NotFoundError",
    "OperationFailedError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "RateLimitedError",
    "RequestInProgressError",
    "ServerError",
    "TransportError",
    "error_from_response",
]


class DPMineError(Exception):
    """Base of every error raised by the client."""


class TransportError(DPMineError):
    """The server could not be reached or did not answer in time."""


class ServerError(DPMineError):
    """An error answered by the server; ``error`` is the server's class name."""

    def __init__(self, error: str, detail: str, response: httpx.Response | None = None) -> None:
        super().__init__(f"{error}: {detail}")
        self.error = error
        self.detail = detail
        self.response = response

    @property
    def status_code(self) -> int | None:
        """HTTP status of the answer, if there was one."""
        return None if self.response is None else self.response.status_code


class InvalidRequestError(ServerError):
    """The request is malformed or out of range; nothing was charged."""


class AuthenticationError(ServerError):
    """The API key is missing, unknown or disabled."""


class PermissionDeniedError(ServerError):
    """The key's principal may not do this."""


class NotFoundError(ServerError):
    """Unknown dataset, job, principal (or a dataset not granted to you)."""


class PayloadTooLargeError(ServerError):
    """An upload exceeds the server's size limit; nothing was stored."""


class ConflictError(ServerError):
    """The request conflicts with the server's state."""


class BudgetExhaustedError(ConflictError):
    """The privacy budget cannot cover the request; nothing was charged."""


class IdempotencyConflictError(ConflictError):
    """The Idempotency-Key was used before for a different request (409)."""


class RequestInProgressError(ConflictError):
    """The request with this Idempotency-Key is still running."""


class ChargeKeptNoResultError(ConflictError):
    """A retry of a request that was charged but failed or was interrupted: the charge stands
    and no result exists. Send the request again with a new Idempotency-Key (charged again)."""


class JobCancelledError(ConflictError):
    """The job was cancelled at your request before it released anything; the charge stands."""


class RateLimitedError(ServerError):
    """Too many failed logins from here; wait :attr:`retry_after` seconds."""

    @property
    def retry_after(self) -> float | None:
        """The server's Retry-After in seconds, if it sent one."""
        value = None if self.response is None else self.response.headers.get("Retry-After")
        try:
            return None if value is None else float(value)
        except ValueError:
            return None


class OperationFailedError(ServerError):
    """The operation failed after its charge; nothing was released."""


_BY_NAME: dict[str, type[ServerError]] = {
    "InvalidRequest": InvalidRequestError,
    "IdempotencyConflict": IdempotencyConflictError,
    "Unauthorized": AuthenticationError,
    "Forbidden": PermissionDeniedError,
    "NotFound": NotFoundError,
    "Conflict": ConflictError,
    "BudgetExhausted": BudgetExhaustedError,
    "RequestInProgress": RequestInProgressError,
    "ChargeKeptNoResult": ChargeKeptNoResultError,
    "JobCancelled": JobCancelledError,
    "RateLimited": RateLimitedError,
    "OperationFailed": OperationFailedError,
    "PayloadTooLarge": PayloadTooLargeError,
}
_BY_STATUS: dict[int, type[ServerError]] = {
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    413: PayloadTooLargeError,
    422: InvalidRequestError,
    429: RateLimitedError,
}


def error_from_response(response: httpx.Response) -> ServerError:
    """The exception for an error response (by the body's class name, else by status)."""
    try:
        body = response.json()
        name, detail = str(body["error"]), str(body["detail"])
    except (ValueError, KeyError, TypeError):
        name, detail = f"HTTP{response.status_code}", response.text[:500]
    cls = _BY_NAME.get(name) or _BY_STATUS.get(response.status_code, ServerError)
    return cls(name, detail, response)
