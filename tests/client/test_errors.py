"""The client's exception tree and its mapping from error answers (dpmine.errors, DESIGN.md
"Errors": the client maps ``{"error", "detail"}`` to a tree rooted at ``DPMineError``)."""

from __future__ import annotations

import httpx
import pytest

import dpmine
import dpmine.errors
from dpmine.errors import (
    AuthenticationError,
    BudgetExhaustedError,
    ChargeKeptNoResultError,
    ConflictError,
    DPMineError,
    IdempotencyConflictError,
    InvalidRequestError,
    JobCancelledError,
    NotFoundError,
    OperationFailedError,
    PayloadTooLargeError,
    PermissionDeniedError,
    RateLimitedError,
    RequestInProgressError,
    ServerError,
    TransportError,
    error_from_response,
)
from dpmine_server import errors as server_errors

#: The tree drawn in the module docstring of dpmine.errors: class -> its parent.
TREE: dict[type[DPMineError], type[Exception]] = {
    DPMineError: Exception,
    TransportError: DPMineError,
    ServerError: DPMineError,
    InvalidRequestError: ServerError,
    IdempotencyConflictError: ConflictError,
    AuthenticationError: ServerError,
    PermissionDeniedError: ServerError,
    NotFoundError: ServerError,
    ConflictError: ServerError,
    BudgetExhaustedError: ConflictError,
    RequestInProgressError: ConflictError,
    ChargeKeptNoResultError: ConflictError,
    JobCancelledError: ConflictError,
    OperationFailedError: ServerError,
    PayloadTooLargeError: ServerError,
    RateLimitedError: ServerError,
}

#: Every error the server sends (dpmine_server.errors class names) with its status.
SERVER_ERRORS: list[tuple[str, int, type[ServerError]]] = [
    ("InvalidRequest", 422, InvalidRequestError),
    ("IdempotencyConflict", 409, IdempotencyConflictError),
    ("Unauthorized", 401, AuthenticationError),
    ("Forbidden", 403, PermissionDeniedError),
    ("NotFound", 404, NotFoundError),
    ("Conflict", 409, ConflictError),
    ("BudgetExhausted", 409, BudgetExhaustedError),
    ("RequestInProgress", 409, RequestInProgressError),
    ("OperationFailed", 500, OperationFailedError),
    ("PayloadTooLarge", 413, PayloadTooLargeError),
    ("ChargeKeptNoResult", 409, ChargeKeptNoResultError),
    ("JobCancelled", 409, JobCancelledError),
    ("RateLimited", 429, RateLimitedError),
]


def answer(status: int, body: object | None = None, text: str | None = None) -> httpx.Response:
    """An error answer to a request, as the client would receive it."""
    request = httpx.Request("POST", "http://dpmine.test/v1/datasets/x/counts")
    if text is not None:
        return httpx.Response(status, text=text, request=request)
    return httpx.Response(status, json=body, request=request)


def test_tree_matches_the_docstring() -> None:
    for cls, parent in TREE.items():
        assert cls.__bases__ == (parent,), cls
        assert cls.__name__ in (dpmine.errors.__doc__ or ""), cls
    exported = {getattr(dpmine.errors, name) for name in dpmine.errors.__all__}
    assert {cls for cls in exported if isinstance(cls, type)} == set(TREE)


def test_errors_are_reexported_by_the_package() -> None:
    for cls in TREE:
        assert getattr(dpmine, cls.__name__) is cls


@pytest.mark.parametrize(
    ("name", "status", "cls"), SERVER_ERRORS, ids=[name for name, _, _ in SERVER_ERRORS]
)
def test_server_error_names_map_to_classes(name: str, status: int, cls: type[ServerError]) -> None:
    response = answer(status, {"error": name, "detail": "what to do"})
    failure = error_from_response(response)
    assert type(failure) is cls
    assert (failure.error, failure.detail, failure.status_code) == (name, "what to do", status)
    assert failure.response is response
    assert str(failure) == f"{name}: what to do"


def test_every_server_error_class_has_a_client_class() -> None:
    def subclasses(cls: type[server_errors.ServerError]) -> set[str]:
        direct = cls.__subclasses__()
        return {c.__name__ for c in direct}.union(*(subclasses(c) for c in direct))

    mapped = {name for name, _, _ in SERVER_ERRORS}
    assert subclasses(server_errors.ServerError) == mapped
    for name, status, _ in SERVER_ERRORS:
        assert getattr(server_errors, name).status_code == status


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (401, AuthenticationError),
        (403, PermissionDeniedError),
        (404, NotFoundError),
        (409, ConflictError),
        (422, InvalidRequestError),
        (429, RateLimitedError),
        (500, ServerError),
        (502, ServerError),
        (418, ServerError),
    ],
)
def test_unknown_names_fall_back_on_the_status(status: int, cls: type[ServerError]) -> None:
    failure = error_from_response(answer(status, {"error": "SomethingNew", "detail": "d"}))
    assert type(failure) is cls
    assert failure.error == "SomethingNew"


@pytest.mark.parametrize(
    "response",
    [
        answer(502, text="<html>bad gateway</html>"),
        answer(404, {"detail": "Not Found"}),
        answer(409, ["error", "detail"]),
        answer(500, text=""),
    ],
    ids=["html", "no error field", "not an object", "empty"],
)
def test_bodies_that_are_not_error_bodies(response: httpx.Response) -> None:
    failure = error_from_response(response)
    assert failure.error == f"HTTP{response.status_code}"
    assert failure.detail == response.text[:500]
    expected = {404: NotFoundError, 409: ConflictError}.get(response.status_code, ServerError)
    assert type(failure) is expected


def test_long_bodies_are_truncated() -> None:
    failure = error_from_response(answer(503, text="x" * 5000))
    assert len(failure.detail) == 500


def test_rate_limited_carries_retry_after() -> None:
    request = httpx.Request("GET", "http://dpmine.test/v1/datasets")
    body = {"error": "RateLimited", "detail": "too many failed logins"}
    response = httpx.Response(429, json=body, headers={"Retry-After": "7"}, request=request)
    failure = error_from_response(response)
    assert isinstance(failure, RateLimitedError)
    assert failure.retry_after == 7.0
    assert RateLimitedError("RateLimited", "no answer").retry_after is None


def test_errors_without_an_answer() -> None:
    failure = ServerError("BudgetExhausted", "no answer attached")
    assert failure.status_code is None
    assert failure.response is None
    assert isinstance(TransportError("GET /v1/health: refused"), DPMineError)
