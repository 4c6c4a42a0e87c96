"""The client's exception tree and its mapping from error answers (dpmine.errors, DESIGN.md
"Errors": the client maps ``{"error", "detail"}`` to a tree rooted at ``DPMineError``)."""

from __future__ import annotations

import math

import httpx
import pytest
from pydantic import ValidationError

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
    OverloadedError,
    ParameterError,
    PayloadTooLargeError,
    PermissionDeniedError,
    QuerySyntaxError,
    RateLimitedError,
    RequestInProgressError,
    ServerError,
    TooManyJobsError,
    TransportError,
    checked_parameters,
    error_from_response,
    parameter_error,
)
from dpmine.wire import (
    NoisyCountRequest,
    SerenadeOptions,
    TopKItemsetsRequest,
    TreeMCMCRequest,
)
from dpmine_server import errors as server_errors

#: The tree drawn in the module docstring of dpmine.errors: class -> its parents.
TREE: dict[type[DPMineError], type[Exception] | tuple[type[Exception], ...]] = {
    DPMineError: Exception,
    ParameterError: (DPMineError, ValueError),
    QuerySyntaxError: ParameterError,
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
    OverloadedError: RateLimitedError,
    TooManyJobsError: RateLimitedError,
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
    ("Overloaded", 429, OverloadedError),
    ("TooManyJobs", 429, TooManyJobsError),
]


def answer(status: int, body: object | None = None, text: str | None = None) -> httpx.Response:
    """An error answer to a request, as the client would receive it."""
    request = httpx.Request("POST", "http://dpmine.test/v1/datasets/x/counts")
    if text is not None:
        return httpx.Response(status, text=text, request=request)
    return httpx.Response(status, json=body, request=request)


def test_tree_matches_the_docstring() -> None:
    for cls, parent in TREE.items():
        assert cls.__bases__ == (parent if isinstance(parent, tuple) else (parent,)), cls
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


# -- parameters refused on the client -------------------------------------------------------------


def _validation_error(build: object) -> ValidationError:
    assert callable(build)
    with pytest.raises(ValidationError) as info:
        build()
    return info.value


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: NoisyCountRequest(epsilon=0), "epsilon must be > 0 (got 0)"),
        (lambda: NoisyCountRequest(epsilon=-0.5), "epsilon must be > 0 (got -0.5)"),
        (lambda: NoisyCountRequest(epsilon=2000.0), "epsilon must be <= 1000 (got 2000)"),
        (lambda: NoisyCountRequest(epsilon=math.nan), "epsilon must be a finite number (got nan)"),
        (lambda: NoisyCountRequest(epsilon="a lot"), "epsilon must be a number (got 'a lot')"),
        (
            lambda: NoisyCountRequest(epsilon=1.0, colour="red"),
            "colour is not a parameter here; remove it",
        ),
        (
            lambda: SerenadeOptions.model_validate({"threshold_mode": "fine"}),
            "threshold_mode must be 'auto', 'continuous' or 'grid' (got 'fine')",
        ),
        (
            lambda: SerenadeOptions.model_validate({"max_literals": 0}),
            "max_literals must be >= 1 (got 0)",
        ),
        (
            lambda: TopKItemsetsRequest(k=5, min_length=3, max_length=2, epsilon=1.0),
            "max_length 2 is below min_length 3",  # a model check: its message alone
        ),
    ],
)
def test_validation_errors_become_one_line_parameter_errors(build: object, message: str) -> None:
    error = parameter_error(_validation_error(build))
    assert isinstance(error, ParameterError)
    assert isinstance(error, ValueError)
    assert message in str(error)
    assert "\n" not in str(error)
    assert "pydantic" not in str(error)
    assert error.errors, "the details stay available"


def test_several_problems_name_the_first_and_count_the_others() -> None:
    error = parameter_error(_validation_error(lambda: TreeMCMCRequest.model_validate({})))
    assert str(error).endswith("is required; and 2 more problems")
    assert len(error.errors) == 3


def test_checked_parameters_converts_and_hides_the_pydantic_error() -> None:
    with pytest.raises(ParameterError) as info, checked_parameters():
        NoisyCountRequest(epsilon=0)
    assert str(info.value) == "epsilon must be > 0 (got 0)"
    assert info.value.__cause__ is None
    assert info.value.__suppress_context__
    with checked_parameters():
        assert NoisyCountRequest(epsilon=0.5).epsilon == 0.5


def test_a_long_input_is_shortened() -> None:
    error = parameter_error(_validation_error(lambda: NoisyCountRequest(epsilon="x" * 10_000)))
    assert len(str(error)) < 100
    assert str(error).endswith("…)")


def test_query_syntax_errors_are_parameter_errors() -> None:
    error = QuerySyntaxError("[A", 3, "expected ']'", "close the literal with ']'", "end of input")
    assert isinstance(error, ParameterError)
    assert isinstance(error, DPMineError)
    assert isinstance(error, ValueError)
    assert str(error) == (
        "expected ']' at column 3 in \"[A\" but found end of input; close the literal with ']'"
    )
