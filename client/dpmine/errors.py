"""The client's exception tree, mapped from the server's error body ``{"error", "detail"}``.

::

    DPMineError
    ├── ParameterError            (also a ValueError) a bad parameter, refused before sending
    │   └── QuerySyntaxError      a query text that does not parse
    ├── TransportError            the server could not be reached (after retries)
    └── ServerError               the server answered with an error
        ├── InvalidRequestError   422: fix the request (nothing was charged)
        ├── AuthenticationError   401: missing/unknown/disabled key
        ├── PermissionDeniedError 403
        ├── NotFoundError         404: unknown or not granted
        ├── PayloadTooLargeError  413: a body over the server's limit (nothing was read)
        ├── RateLimitedError      429: too many failed logins; wait ``retry_after`` seconds
        │   ├── OverloadedError   429: server at its in-flight limit (nothing charged; retried)
        │   └── TooManyJobsError  429: your jobs not yet settled are at the limit (nothing charged)
        ├── ConflictError         409
        │   ├── BudgetExhaustedError      nothing was charged
        │   ├── IdempotencyConflictError  the key was used for a different request
        │   ├── RequestInProgressError    retry later with the same Idempotency-Key
        │   ├── ChargeKeptNoResultError   charged, nothing released: use a new key
        │   └── JobCancelledError         you cancelled the job; the charge stands
        └── OperationFailedError  500: failed after its charge; nothing released
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

if TYPE_CHECKING:
    import httpx  # for annotations only: importing httpx loads its CLI (rich, pygments)

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
    "OverloadedError",
    "ParameterError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "QuerySyntaxError",
    "RateLimitedError",
    "RequestInProgressError",
    "ServerError",
    "TooManyJobsError",
    "TransportError",
    "checked_parameters",
    "error_from_response",
    "parameter_error",
]


class DPMineError(Exception):
    """Base of every error raised by the client."""


class ParameterError(DPMineError, ValueError):
    """A parameter out of range or of the wrong kind, refused on the client before anything was
    sent (nothing was charged). Also a ``ValueError``; ``errors`` holds pydantic's details when
    the check was a wire model's."""

    def __init__(self, message: str, errors: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.errors = errors or []


#: Widest excerpt of a query text that a QuerySyntaxError quotes.
EXCERPT_WIDTH = 60
_FOUND_WIDTH = 40


class QuerySyntaxError(ParameterError):
    """A query text that does not parse (ALGORITHMS.md §1.1): the 1-based ``column`` of the
    problem, what was expected and found there, and a fix. The message quotes at most
    :data:`EXCERPT_WIDTH` characters of the text around the column, on one line."""

    def __init__(
        self, text: str, column: int, problem: str, hint: str, found: str | None = None
    ) -> None:
        self.text = text
        self.column = column
        self.problem = problem
        self.hint = hint
        self.found = found
        found_part = "" if found is None else f" but found {_shorten(found, _FOUND_WIDTH)}"
        size = "" if len(text) <= EXCERPT_WIDTH else f" (of a {len(text)}-character text)"
        super().__init__(
            f'{problem} at column {column} in "{excerpt(text, column)}"{size}{found_part}; {hint}'
        )


def excerpt(text: str, column: int, width: int = EXCERPT_WIDTH) -> str:
    """At most ``width`` characters of ``text`` around the 1-based ``column`` on one line, with
    ``…`` where text was cut."""
    start = min(max(0, column - 1 - width // 2), max(0, len(text) - width))
    end = min(len(text), start + width)
    shown = "".join(" " if char.isspace() else char for char in text[start:end])
    return ("…" if start > 0 else "") + shown + ("…" if end < len(text) else "")


def _shorten(text: str, width: int) -> str:
    flat = "".join(" " if char.isspace() else char for char in text)
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def parameter_error(error: ValidationError) -> ParameterError:
    """A one-line :class:`ParameterError` for a wire model's ``ValidationError``: the first
    problem's field and what to fix, e.g. ``epsilon must be > 0 (got 0)``."""
    details = error.errors(include_url=False)
    first = _describe(details[0]) if details else str(error).splitlines()[0]
    more = len(details) - 1
    extra = f"; and {more} more problem{'s' if more > 1 else ''}" if more > 0 else ""
    return ParameterError(f"{first}{extra}", [dict(detail) for detail in details])


@contextmanager
def checked_parameters() -> Iterator[None]:
    """Turn a wire model's ``ValidationError`` raised inside into a :class:`ParameterError`."""
    try:
        yield
    except ValidationError as error:
        raise parameter_error(error) from None


_BOUNDS = {
    "greater_than": ("gt", ">"),
    "greater_than_equal": ("ge", ">="),
    "less_than": ("lt", "<"),
    "less_than_equal": ("le", "<="),
    "multiple_of": ("multiple_of", "a multiple of"),
}
_KINDS = {
    "finite_number": "a finite number",
    "float_type": "a number",
    "float_parsing": "a number",
    "int_type": "a whole number",
    "int_parsing": "a whole number",
    "int_from_float": "a whole number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "string_type": "a text",
    "list_type": "a list",
    "tuple_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
}
_SIZES = {
    "too_short": ("min_length", "at least"),
    "string_too_short": ("min_length", "at least"),
    "too_long": ("max_length", "at most"),
    "string_too_long": ("max_length", "at most"),
}


def _describe(detail: Any) -> str:
    """``<field> must be …`` for one pydantic error detail."""
    field = _field(tuple(detail.get("loc", ())))
    fix = _requirement(str(detail.get("type", "")), detail.get("ctx") or {})
    if fix is None:
        message = str(detail.get("msg", "is invalid")).removeprefix("Value error, ")
        return f"{field}: {message}" if detail.get("loc") else message
    if fix.startswith("must"):
        fix += f" (got {_shorten(_number(detail.get('input')), _FOUND_WIDTH)})"
    return f"{field} {fix}"


def _requirement(kind: str, context: dict[str, Any]) -> str | None:
    """What a value of this pydantic error type must be, or None for a custom check."""
    if kind in _BOUNDS and _BOUNDS[kind][0] in context:
        key, relation = _BOUNDS[kind]
        return f"must be {relation} {_number(context[key])}"
    if kind in _SIZES and _SIZES[kind][0] in context:
        key, relation = _SIZES[kind]
        unit = "character" if kind.startswith("string") else "item"
        plural = "" if context[key] == 1 else "s"
        return f"must have {relation} {context[key]} {unit}{plural}"
    if kind in {"literal_error", "enum"} and "expected" in context:
        return f"must be {context['expected']}"
    fixed = {"missing": "is required", "extra_forbidden": "is not a parameter here; remove it"}
    if kind in fixed:
        return fixed[kind]
    return f"must be {_KINDS[kind]}" if kind in _KINDS else None


def _field(loc: tuple[Any, ...]) -> str:
    """``split[2]``, ``options.max_literals``: where the problem is."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else str(part)
    return text or "the value"


def _number(value: Any) -> str:
    """A number as written by a person (``0``, ``1000``, ``0.5``), anything else by ``repr``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return repr(value)
    return f"{value:g}" if isinstance(value, float) and value.is_integer() else str(value)


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
    """The job was cancelled (by you or the data owner) before it released anything; the charge
    stands."""


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


class OverloadedError(RateLimitedError):
    """The server holds its public limit of requests at once; nothing was charged. A request
    with an Idempotency-Key (every operation call) is sent again after :attr:`retry_after`
    seconds, up to the connection's ``retries``; this is raised when they run out."""


class TooManyJobsError(RateLimitedError):
    """You already have the server's limit of jobs not yet shown settled; nothing was charged.
    Not retried: submit again once one of your jobs is shown settled, or cancel one."""


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
    "Overloaded": OverloadedError,
    "TooManyJobs": TooManyJobsError,
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
