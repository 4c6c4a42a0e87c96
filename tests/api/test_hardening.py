"""Hardening found by review (issue #9), through the in-process app: body limits before
authentication and parsing, strict parsing, the estimate caps, retries of requests that were
charged but released nothing, failed-login throttling and its bounded audit trail, and one code
path for unknown and not-granted datasets."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from sqlalchemy import event, func, select
from starlette.types import Message

import dpmine
from dpmine.wire import MAX_ESTIMATE_CALLS, MAX_ESTIMATE_DISTINCT_CALLS
from dpmine_server.api.limits import BodySizeLimit, LoginGuard, LoginThrottle
from dpmine_server.app import create_app
from dpmine_server.db.models import AuditEvent, Dataset
from dpmine_server.services.audit import MAX_FAILED_LOGIN_ROWS, FailedLogins
from dpmine_server.services.container import Services
from dpmine_server.services.ledger import request_fingerprint
from dpmine_server.services.principals import get_principal
from dpmine_server.settings import Settings
from support.inprocess import TestClient, bearer, expect_error, open_client

SMALL_LIMIT = 64 * 1024


def _bad_key() -> str:
    return "dpm_" + secrets.token_urlsafe(32)


def _audit_rows(services: Services, prefix: str = "auth_failed") -> list[AuditEvent]:
    with services.sessions() as session:
        return list(session.scalars(select(AuditEvent).where(AuditEvent.action.startswith(prefix))))


@pytest.fixture
def small_client(api_settings: Settings) -> Iterator[TestClient]:
    """An app whose JSON bodies are limited to 64 KiB."""
    settings = api_settings.model_copy(update={"max_json_bytes": SMALL_LIMIT})
    with open_client(create_app(settings)) as client:
        yield client


# -- 1. body size limits --------------------------------------------------------------------------


class TestBodyLimits:
    def test_declared_oversized_body_is_413_before_authentication(
        self, small_client: TestClient, owner_headers: dict[str, str]
    ) -> None:
        body = b"{" + b" " * SMALL_LIMIT + b"}"
        for headers in ({}, bearer(_bad_key()), owner_headers):
            response = small_client.post(
                "/v1/datasets/anything/estimate",
                content=body,
                headers={**headers, "Content-Type": "application/json"},
            )
            detail = expect_error(response, 413, "PayloadTooLarge")
            assert str(SMALL_LIMIT) in detail
            assert "DPMINE_MAX_JSON_BYTES" in detail
        # The bad key never reached authentication: nothing was audited.
        audit = small_client.get("/v1/admin/audit", headers=owner_headers).json()
        assert [e for e in audit if e["action"].startswith("auth_failed")] == []

    def test_streamed_body_without_length_is_counted(
        self, small_client: TestClient, owner_headers: dict[str, str]
    ) -> None:
        def chunks() -> Iterator[bytes]:
            for _ in range(8):
                yield b" " * (16 * 1024)
            yield b"{}"

        response = small_client.post(
            "/v1/datasets/anything/estimate",
            content=chunks(),
            headers={**owner_headers, "Content-Type": "application/json"},
        )
        expect_error(response, 413, "PayloadTooLarge")

    def test_bodies_within_the_limit_still_work(
        self, small_client: TestClient, owner_headers: dict[str, str]
    ) -> None:
        response = small_client.post(
            "/v1/admin/principals",
            json={"name": "carol", "role": "analyst", "padding": "x" * 1000},
            headers=owner_headers,
        )
        expect_error(response, 422, "InvalidRequest")  # parsed: an unknown field
        ok = small_client.post(
            "/v1/admin/principals", json={"name": "carol", "role": "analyst"}, headers=owner_headers
        )
        assert ok.status_code == 201, ok.text

    def test_upload_routes_take_the_upload_limit(
        self, small_client: TestClient, owner_headers: dict[str, str]
    ) -> None:
        rows = "x,y\n" + "1,2\n" * (SMALL_LIMIT // 4 + 10)  # larger than the JSON limit
        response = small_client.post(
            "/v1/admin/datasets/propose-metadata",
            data={"source": json.dumps({"type": "csv", "path": "path"}), "kind": "table"},
            files={"path": ("big.csv", rows.encode(), "text/csv")},
            headers=owner_headers,
        )
        assert response.status_code != 413, response.text

    @pytest.mark.parametrize("declared", [True, False])
    def test_fifty_megabytes_are_refused_without_being_read(self, declared: bool) -> None:
        """The middleware alone, fed 1 MiB chunks of a 50 MB body: it pulls none of them when
        the length is declared and stops right after the limit when it is not."""
        pulled = 0
        chunk = b"x" * (1024 * 1024)
        total_chunks = 50
        sent: list[Message] = []
        reached_app = False

        async def receive() -> Message:
            nonlocal pulled
            pulled += 1
            return {"type": "http.request", "body": chunk, "more_body": pulled < total_chunks}

        async def send(message: Message) -> None:
            sent.append(message)

        async def app(_scope: Any, receive_: Any, _send: Any) -> None:
            nonlocal reached_app
            reached_app = True
            while True:  # reads the whole body, as a JSON parser would
                message = await receive_()
                if not message.get("more_body"):
                    break
            raise AssertionError("the app must never see the whole body")

        headers = [(b"content-length", str(50 * len(chunk)).encode())] if declared else []
        middleware = BodySizeLimit(app, default_limit=1024 * 1024, limits={})
        scope = {"type": "http", "method": "POST", "path": "/v1/x", "headers": headers}
        started = time.perf_counter()
        anyio.run(middleware, scope, receive, send)
        assert time.perf_counter() - started < 1.0
        assert sent[0]["status"] == 413
        assert json.loads(sent[1]["body"])["error"] == "PayloadTooLarge"
        if declared:
            assert (pulled, reached_app) == (0, False)
        else:
            assert pulled == 2  # the limit is 1 MiB: the second chunk passes it

    def test_a_flood_of_unknown_keys_is_refused_at_once(
        self, client: TestClient, toy: str, analyst_headers: dict[str, str]
    ) -> None:
        body = json.dumps({"epsilon": 0.5, **{f"k{i}": i for i in range(200_000)}})
        started = time.perf_counter()
        response = client.post(
            f"/v1/datasets/{toy}/counts",
            content=body,
            headers={**analyst_headers, "Content-Type": "application/json"},
        )
        elapsed = time.perf_counter() - started
        assert "fields given" in expect_error(response, 422, "InvalidRequest")
        assert elapsed < 2.5  # the validation errors of 200,000 keys took several seconds


# -- 2. strict parsing through the API ------------------------------------------------------------


class TestStrictParsing:
    @pytest.mark.parametrize(
        "body",
        [
            {"epsilon": "0.5"},
            {"epsilon": True},
            {"predicate": {"kind": "bool", "attribute": "smoker", "negated": "yes"}, "epsilon": 1},
            {"predicate": {"kind": "num", "attribute": "age", "lower": "30"}, "epsilon": 1},
        ],
    )
    def test_coercible_strings_are_refused_and_free(
        self, client: TestClient, toy: str, analyst_headers: dict[str, str], body: dict[str, Any]
    ) -> None:
        response = client.post(f"/v1/datasets/{toy}/counts", json=body, headers=analyst_headers)
        expect_error(response, 422, "InvalidRequest")
        budget = client.get(f"/v1/datasets/{toy}/budget", headers=analyst_headers).json()
        assert budget["grant_spent"] == 0

    def test_an_int_epsilon_is_a_float(
        self, client: TestClient, toy: str, analyst_headers: dict[str, str]
    ) -> None:
        response = client.post(
            f"/v1/datasets/{toy}/counts", json={"epsilon": 1}, headers=analyst_headers
        )
        assert response.status_code == 200, response.text

    def test_estimate_calls_are_parsed_strictly(
        self, client: TestClient, toy: str, analyst_headers: dict[str, str]
    ) -> None:
        calls = [{"operation": "count.noisy", "request": {"epsilon": "0.5"}}]
        response = client.post(
            f"/v1/datasets/{toy}/estimate", json={"calls": calls}, headers=analyst_headers
        )
        assert "call 0" in expect_error(response, 422, "InvalidRequest")


# -- 3. the estimate endpoint's caps --------------------------------------------------------------


class TestEstimateCaps:
    def test_too_many_calls_is_a_clear_422(
        self, client: TestClient, toy: str, analyst_headers: dict[str, str]
    ) -> None:
        call = {"operation": "count.noisy", "request": {"epsilon": 0.001}}
        response = client.post(
            f"/v1/datasets/{toy}/estimate",
            json={"calls": [call] * (MAX_ESTIMATE_CALLS + 1)},
            headers=analyst_headers,
        )
        detail = expect_error(response, 422, "InvalidRequest")
        assert f"at most {MAX_ESTIMATE_CALLS} calls" in detail

    def test_too_many_different_calls_is_a_clear_422(
        self, client: TestClient, toy: str, analyst_headers: dict[str, str]
    ) -> None:
        calls = [
            {"operation": "count.noisy", "request": {"epsilon": (i + 1) / 10**6}}
            for i in range(MAX_ESTIMATE_DISTINCT_CALLS + 1)
        ]
        response = client.post(
            f"/v1/datasets/{toy}/estimate", json={"calls": calls}, headers=analyst_headers
        )
        assert "different calls" in expect_error(response, 422, "InvalidRequest")

    def test_a_long_plan_of_repeated_calls_is_priced_exactly(
        self, client: TestClient, toy: str, analyst_headers: dict[str, str]
    ) -> None:
        calls = [
            {"operation": "count.noisy", "request": {"epsilon": 0.0001}},
            {"operation": "count.noisy", "request": {"epsilon": 0.0002}},
        ] * 10_000
        response = client.post(
            f"/v1/datasets/{toy}/estimate", json={"calls": calls}, headers=analyst_headers
        )
        assert response.status_code == 200, response.text
        estimate = response.json()
        assert estimate["total_epsilon_exact"] == "3"
        assert len(estimate["calls"]) == 20_000
        assert estimate["calls"][1]["epsilon_exact"] == "0.0002"


# -- 4. retries of requests that were charged but released nothing --------------------------------


def _reserve_count(services: Services, dataset_id: str, key: str, epsilon: float) -> int:
    spec = services.executor.spec("count.noisy")
    parameters = spec.request_model.model_validate({"epsilon": epsilon}).model_dump(mode="json")
    with services.sessions() as session:
        alice = get_principal(session, "alice")
        session.expunge(alice)
    reservation = services.ledger.reserve(
        principal=alice,
        dataset_id=dataset_id,
        operation=spec.name,
        parameters=parameters,
        cost=spec.cost(spec.request_model.model_validate(parameters)),
        guarantee="pure",
        idempotency_key=key,
        request_hash=request_fingerprint(spec.name, dataset_id, parameters),
    )
    return reservation.entry_id


class TestRetriesWithoutAResult:
    def test_in_flight_then_interrupted(
        self, client: TestClient, toy: str, analyst_headers: dict[str, str], services: Services
    ) -> None:
        _reserve_count(services, toy, "crashed", 0.5)  # as if a request were still running
        headers = {**analyst_headers, "Idempotency-Key": "crashed"}
        url = f"/v1/datasets/{toy}/counts"
        running = client.post(url, json={"epsilon": 0.5}, headers=headers)
        assert "still running" in expect_error(running, 409, "RequestInProgress")
        assert running.headers["retry-after"] == "1"
        assert services.ledger.interrupt_reserved() == 1  # the server died: recovery
        retry = client.post(url, json={"epsilon": 0.5}, headers=headers)
        detail = expect_error(retry, 409, "ChargeKeptNoResult")
        assert "charge was kept and no result exists" in detail
        assert "new Idempotency-Key" in detail
        with services.sessions() as session:
            dataset = session.get_one(Dataset, toy)
            assert dataset.spent_units == 50 * 10**10  # charged once, never again
        assert services.ledger.verify() == []

    def test_the_client_maps_it(
        self, toy: str, analyst: dpmine.Connection, services: Services
    ) -> None:
        entry = _reserve_count(services, toy, "doomed", 0.25)
        services.ledger.fail(entry)
        with pytest.raises(dpmine.ChargeKeptNoResultError) as refused:
            analyst.dataset(toy).count(None, epsilon=0.25, idempotency_key="doomed")
        assert refused.value.status_code == 409
        assert isinstance(refused.value, dpmine.ConflictError)


# -- 5. failed logins -----------------------------------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class TestFailedLogins:
    def test_a_flood_of_bad_keys_writes_few_rows_and_good_keys_keep_working(
        self,
        client: TestClient,
        owner: dpmine.Connection,
        analyst: dpmine.Connection,
        toy: str,
        services: Services,
    ) -> None:
        clock = _Clock()
        guard = LoginGuard(
            LoginThrottle(per_client=60, global_limit=600, window_seconds=60, clock=clock),
            FailedLogins(window_s=60, clock=clock),
        )
        client.app.state.login_guard = guard  # type: ignore[attr-defined]
        assert analyst.dataset(toy).budget().grant_spent == 0  # alice logged in before
        assert owner.admin.principals()

        statuses: dict[int, int] = {}
        retry_after: set[str] = set()
        for _ in range(2000):
            response = client.get("/v1/datasets", headers=bearer(_bad_key()))
            statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
            if response.status_code == 429:
                assert response.json()["error"] == "RateLimited"
                retry_after.add(response.headers["retry-after"])
        assert statuses == {401: 60, 429: 1940}
        assert retry_after == {"1"}  # one failed login per second refills the bucket
        # Keys that logged in before are not held back (their database check still runs).
        assert analyst.dataset(toy).budget().grant_spent == 0
        assert len(_audit_rows(services)) == MAX_FAILED_LOGIN_ROWS

        # A key never seen before waits for the bucket like a bad one...
        carol = owner.admin.add_principal("carol", "analyst").api_key
        held = client.get("/v1/datasets", headers=bearer(carol))
        assert held.status_code == 429
        clock.now += 2  # ...for a moment only
        assert client.get("/v1/datasets", headers=bearer(carol)).status_code == 200

        clock.now += 60  # the window ends: the next login writes the summary
        assert owner.admin.principals()
        rows = _audit_rows(services)
        assert len(rows) == MAX_FAILED_LOGIN_ROWS + 1
        [summary] = [r for r in rows if r.action == "auth_failed_summary"]
        assert summary.details["failed_logins"] == 2001 - MAX_FAILED_LOGIN_ROWS
        assert summary.details["refused_429"] == 1941
        with services.sessions() as session:
            assert (session.scalar(select(func.count()).select_from(AuditEvent)) or 0) < 40

    def test_defaults_are_generous_for_one_client(self, api_settings: Settings) -> None:
        guard = LoginGuard.from_settings(api_settings)
        for _ in range(api_settings.login_failures_per_client):
            assert guard.throttle.retry_after(["client:x"]) is None
            guard.throttle.failed(["client:x"])
        assert guard.throttle.retry_after(["client:x"]) == 1
        assert guard.throttle.retry_after(["client:y"]) is None  # another address


# -- 6. unknown and not-granted datasets ----------------------------------------------------------


class TestSamePathForUnknownAndNotGranted:
    def test_same_statements_and_same_answer(
        self, client: TestClient, toy: str, bob_key: str, services: Services
    ) -> None:
        statements: list[str] = []

        def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
            statements.append(statement)

        def run(dataset_id: str) -> tuple[list[str], dict[str, Any]]:
            statements.clear()
            event.listen(services.engine, "before_cursor_execute", record)
            try:
                response = client.get(f"/v1/datasets/{dataset_id}", headers=bearer(bob_key))
            finally:
                event.remove(services.engine, "before_cursor_execute", record)
            body = response.json()
            assert response.status_code == 404
            body["detail"] = body["detail"].replace(repr(dataset_id), "<id>")
            return list(statements), body

        run(toy)  # warm-up: the key is then in the authentication cache for both calls
        not_granted = run(toy)
        unknown = run("no-such-data")
        assert not_granted == unknown
        queries = [s for s in not_granted[0] if "grants" in s]
        assert len(queries) == 1  # one query joins the dataset and the grant
        assert "datasets" in queries[0]
