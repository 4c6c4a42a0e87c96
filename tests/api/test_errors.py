"""Server errors: one JSON shape and one status per class (DESIGN.md "Errors").

Each class is raised for real through the API where the engine has a way to reach it; the
exception handlers are also checked directly on a route added to the real app, including the
generic answer to an unexpected exception (no internals, no data in the message).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

import dpmine_server.errors
from dpmine_server.dp.budget import Epsilon
from dpmine_server.errors import (
    BudgetExhausted,
    ChargeKeptNoResult,
    Conflict,
    Forbidden,
    IdempotencyConflict,
    InternalError,
    InvalidRequest,
    JobCancelled,
    NotFound,
    OperationFailed,
    Overloaded,
    PayloadTooLarge,
    RateLimited,
    RequestInProgress,
    ServerError,
    TooManyJobs,
    Unauthorized,
)
from dpmine_server.services.container import Services
from dpmine_server.services.ledger import request_fingerprint
from dpmine_server.services.principals import get_principal
from dpmine_server.settings import Settings

GENERIC_DETAIL = "the server hit an internal error; the owner can see the log"


def error_body(response: httpx.Response) -> tuple[int, str, str]:
    """(status, error, detail) of an error response, after checking its shape."""
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error", "detail"}, body
    assert isinstance(body["error"], str)
    assert isinstance(body["detail"], str)
    return response.status_code, body["error"], body["detail"]


# -- the handlers ---------------------------------------------------------------------------------

CLASSES: list[tuple[type[ServerError], int, dict[str, str]]] = [
    (InvalidRequest, 422, {}),
    (Unauthorized, 401, {"www-authenticate": "Bearer"}),
    (Forbidden, 403, {}),
    (NotFound, 404, {}),
    (Conflict, 409, {}),
    (BudgetExhausted, 409, {}),
    (RequestInProgress, 409, {"retry-after": "1"}),
    (IdempotencyConflict, 409, {}),
    (ChargeKeptNoResult, 409, {}),
    (JobCancelled, 409, {}),
    (OperationFailed, 500, {}),
    (PayloadTooLarge, 413, {}),
    (RateLimited, 429, {"retry-after": "1"}),
    (Overloaded, 429, {"retry-after": "1"}),
    (TooManyJobs, 429, {"retry-after": "1"}),
]


def _raiser(error: Exception) -> Callable[[], None]:
    def endpoint() -> None:
        raise error

    return endpoint


@pytest.fixture
def raising(app: FastAPI, client: TestClient) -> TestClient:
    """The test client of an app with a ``/raise/<name>`` route per error kind."""
    for cls, _status, _headers in CLASSES:
        message = f"what to do about {cls.__name__}"
        app.add_api_route(f"/raise/{cls.__name__}", _raiser(cls(message)))
    app.add_api_route("/raise/RuntimeError", _raiser(RuntimeError("row 17 has age 42")))
    app.add_api_route("/raise/InternalError", _raiser(InternalError("ledger invariant broken")))
    return client


def test_every_server_error_class_is_covered() -> None:
    def subclasses(cls: type[ServerError]) -> set[type[ServerError]]:
        direct = set(cls.__subclasses__())
        return direct.union(*(subclasses(c) for c in direct))

    assert subclasses(ServerError) == {cls for cls, _, _ in CLASSES}


def test_every_server_error_class_is_exported() -> None:
    exported = set(dpmine_server.errors.__all__)
    missing = {cls.__name__ for cls, _, _ in CLASSES} - exported
    assert not missing, f"dpmine_server.errors.__all__ lacks {sorted(missing)}"
    assert dpmine_server.errors.__all__ == sorted(dpmine_server.errors.__all__)


@pytest.mark.parametrize(
    ("cls", "status", "headers"), CLASSES, ids=[cls.__name__ for cls, _, _ in CLASSES]
)
def test_handler_maps_class_to_status_and_shape(
    raising: TestClient, cls: type[ServerError], status: int, headers: dict[str, str]
) -> None:
    response = raising.get(f"/raise/{cls.__name__}")
    assert error_body(response) == (status, cls.__name__, f"what to do about {cls.__name__}")
    for name, value in headers.items():
        assert response.headers[name] == value


@pytest.mark.parametrize("name", ["RuntimeError", "InternalError"])
def test_unexpected_errors_are_generic(raising: TestClient, name: str) -> None:
    status, error, detail = error_body(raising.get(f"/raise/{name}"))
    assert (status, error, detail) == (500, "InternalError", GENERIC_DETAIL)


def test_validation_errors_name_the_fields(
    client: TestClient, toy: str, analyst_headers: dict[str, str]
) -> None:
    response = client.post(
        f"/v1/datasets/{toy}/counts", json={"epsilon": "lots"}, headers=analyst_headers
    )
    status, error, detail = error_body(response)
    assert (status, error) == (422, "InvalidRequest")
    assert detail.startswith("epsilon: ")
    assert detail.endswith("(fix these fields and send the request again)")
    missing = client.post(f"/v1/datasets/{toy}/counts", headers=analyst_headers)
    status, error, detail = error_body(missing)
    assert (status, error) == (422, "InvalidRequest")
    assert detail.startswith("body: ")


def test_unknown_route_and_wrong_method(client: TestClient) -> None:
    assert error_body(client.get("/v1/nothing-here")) == (404, "NotFound", "Not Found")
    status, error, _ = error_body(client.delete("/v1/health"))
    assert (status, error) == (405, "MethodNotAllowed")


# -- each class, reached for real -----------------------------------------------------------------


class TestReachedThroughTheApi:
    def test_invalid_request(
        self, client: TestClient, toy: str, analyst_headers: dict[str, str]
    ) -> None:
        body = {"predicate": {"kind": "bool", "attribute": "height"}, "epsilon": 0.1}
        response = client.post(f"/v1/datasets/{toy}/counts", json=body, headers=analyst_headers)
        status, error, detail = error_body(response)
        assert (status, error) == (422, "InvalidRequest")
        assert "'height'" in detail

    def test_unauthorized(self, client: TestClient) -> None:
        response = client.get("/v1/datasets")
        assert error_body(response)[:2] == (401, "Unauthorized")
        assert response.headers["www-authenticate"] == "Bearer"

    def test_forbidden(self, client: TestClient, analyst_headers: dict[str, str]) -> None:
        response = client.get("/v1/admin/audit", headers=analyst_headers)
        assert error_body(response)[:2] == (403, "Forbidden")

    def test_not_found(self, client: TestClient, analyst_headers: dict[str, str]) -> None:
        response = client.get("/v1/datasets/absent", headers=analyst_headers)
        assert error_body(response)[:2] == (404, "NotFound")

    def test_conflict(self, client: TestClient, owner_headers: dict[str, str]) -> None:
        body = {"name": "admin", "role": "owner"}
        response = client.post("/v1/admin/principals", json=body, headers=owner_headers)
        assert error_body(response)[:2] == (409, "Conflict")

    def test_budget_exhausted_names_amounts_only(
        self, client: TestClient, toy: str, analyst_headers: dict[str, str]
    ) -> None:
        response = client.post(
            f"/v1/datasets/{toy}/counts", json={"epsilon": 5.5}, headers=analyst_headers
        )
        status, error, detail = error_body(response)
        assert (status, error) == (409, "BudgetExhausted")
        assert "requested epsilon=5.5" in detail
        assert "remaining in your grant=5" in detail

    def test_request_in_progress(
        self,
        client: TestClient,
        toy: str,
        analyst_headers: dict[str, str],
        services: Services,
    ) -> None:
        parameters = {"predicate": None, "epsilon": 0.1}
        with services.sessions() as session:
            alice = get_principal(session, "alice")
        services.ledger.reserve(  # a request with this key is still being computed
            principal=alice,
            dataset_id=toy,
            operation="count.noisy",
            parameters=parameters,
            cost=Epsilon.charge(0.1),
            guarantee="pure",
            idempotency_key="busy-key",
            request_hash=request_fingerprint("count.noisy", toy, parameters),
        )
        response = client.post(
            f"/v1/datasets/{toy}/counts",
            json=parameters,
            headers={**analyst_headers, "Idempotency-Key": "busy-key"},
        )
        assert error_body(response)[:2] == (409, "RequestInProgress")
        assert response.headers["retry-after"] == "1"

    def test_idempotency_conflict(
        self, client: TestClient, toy: str, analyst_headers: dict[str, str]
    ) -> None:
        headers = {**analyst_headers, "Idempotency-Key": "once"}
        url = f"/v1/datasets/{toy}/counts"
        assert client.post(url, json={"epsilon": 0.1}, headers=headers).status_code == 200
        response = client.post(url, json={"epsilon": 0.2}, headers=headers)
        assert error_body(response)[:2] == (409, "IdempotencyConflict")

    def test_operation_failed_is_generic(
        self,
        *,
        client: TestClient,
        toy: str,
        toy_csv: Path,
        api_settings: Settings,
        analyst_headers: dict[str, str],
        services: Services,
    ) -> None:
        version_dir = api_settings.data_dir / "datasets" / toy / "v1"
        (version_dir / f"path-{toy_csv.name}").unlink()
        shutil.rmtree(version_dir / "packed")  # else the load maps it and needs no source
        services.datasets.unload(toy)  # registration left it loaded: the next count must load
        response = client.post(
            f"/v1/datasets/{toy}/counts", json={"epsilon": 0.1}, headers=analyst_headers
        )
        status, error, detail = error_body(response)
        assert (status, error) == (500, "OperationFailed")
        for private in ("toy.csv", "does not exist", str(api_settings.data_dir)):
            assert private not in detail
