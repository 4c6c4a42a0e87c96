"""Server errors: one base class carrying its status code, one JSON shape for all of them.

Messages say what was wrong and what to do, and never anything about the data (DESIGN.md
"Errors"). Every error raised before the ledger reservation costs nothing.

Plain Python, so that services and kernels raise them without importing the web framework; the
API layer (:mod:`dpmine_server.api.errors`) turns them into HTTP responses.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "BudgetExhausted",
    "ChargeKeptNoResult",
    "Conflict",
    "Forbidden",
    "IdempotencyConflict",
    "InternalError",
    "InvalidRequest",
    "JobCancelled",
    "NotFound",
    "OperationFailed",
    "Overloaded",
    "PayloadTooLarge",
    "RateLimited",
    "RequestInProgress",
    "ServerError",
    "TooManyJobs",
    "Unauthorized",
]


class ServerError(Exception):
    """Base of every error the API reports on purpose."""

    status_code = 500
    headers: dict[str, str] | None = None

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidRequest(ServerError):
    """The request is malformed or out of range; nothing was charged."""

    status_code = 422


class Unauthorized(ServerError):
    """Missing, unknown or disabled API key."""

    status_code = 401
    headers = {"WWW-Authenticate": "Bearer"}  # noqa: RUF012  (class constant, never mutated)


class Forbidden(ServerError):
    """The principal may not do this."""

    status_code = 403


class NotFound(ServerError):
    """Unknown dataset, principal, job or session (or not granted to this analyst)."""

    status_code = 404


class Conflict(ServerError):
    """The request conflicts with the current state (e.g. a dataset id already in use)."""

    status_code = 409


class PayloadTooLarge(ServerError):
    """An upload exceeds the server's size limit; nothing was stored."""

    status_code = 413


class BudgetExhausted(ServerError):
    """The cost does not fit the dataset cap or the analyst's grant; nothing was charged."""

    status_code = 409


class RequestInProgress(ServerError):
    """A request with this Idempotency-Key is still running; retry later for its result."""

    status_code = 409
    headers = {"Retry-After": "1"}  # noqa: RUF012  (class constant, never mutated)


class IdempotencyConflict(ServerError):
    """The Idempotency-Key was used before for a different request."""

    status_code = 409


class ChargeKeptNoResult(ServerError):
    """A retry of a request that was charged but released nothing (it failed or the server
    stopped during it): the charge stands and there is no result to replay."""

    status_code = 409


class RateLimited(ServerError):
    """Too many failed logins; wait ``Retry-After`` seconds."""

    status_code = 429

    def __init__(self, message: str, *, retry_after: int = 1) -> None:
        super().__init__(message)
        self.headers = {"Retry-After": str(retry_after)}


class Overloaded(ServerError):
    """The API process holds its public limit of requests at once (DPMINE_MAX_IN_FLIGHT);
    refused before anything was read or charged: send it again after ``Retry-After`` seconds
    with the same Idempotency-Key."""

    status_code = 429

    def __init__(self, message: str, *, retry_after: int = 1) -> None:
        super().__init__(message)
        self.headers = {"Retry-After": str(retry_after)}


class TooManyJobs(ServerError):
    """The analyst already has its public limit of jobs not yet shown settled
    (DPMINE_MAX_OPEN_JOBS); refused before anything was charged: submit again once one of
    them is shown settled (or cancel one)."""

    status_code = 429
    headers = {"Retry-After": "1"}  # noqa: RUF012  (class constant, never mutated)


class OperationFailed(ServerError):
    """The operation failed after its charge; the charge stands and nothing was released."""

    status_code = 500


class JobCancelled(ServerError):
    """The analyst cancelled the job: it stopped at a public progress step, the charge stands
    and nothing was released."""

    status_code = 409

    #: What a cancelled job says, however its kernel ended (services/workers.py: stopped at a
    #: progress step, withheld at its slot's end, or still running there).
    MESSAGE: ClassVar[str] = (
        "the job was cancelled (by you or the data owner); the charge stands and nothing was"
        " released"
    )


class InternalError(AssertionError):
    """A bug in the engine (never a user mistake)."""
