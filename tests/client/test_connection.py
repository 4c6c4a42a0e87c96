"""The client connection against the in-process app (DESIGN.md "The budget ledger": retries).

Transport failures are injected by an ``httpx.MockTransport`` whose handler forwards every
request to the real app (through its ``TestClient``) and fails on purpose where a test says so:
before the request reaches the server (``ConnectError``), or after the server answered (the
answer is dropped, ``ReadError``). The server, its ledger and its database are the real ones.
"""

from __future__ import annotations

import math
import shutil
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, assert_type

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import select
from starlette.exceptions import StarletteDeprecationWarning

import dpmine
from dpmine.errors import (
    AuthenticationError,
    BudgetExhaustedError,
    ConflictError,
    DPMineError,
    IdempotencyConflictError,
    InvalidRequestError,
    NotFoundError,
    OperationFailedError,
    ParameterError,
    PermissionDeniedError,
    RequestInProgressError,
    ServerError,
    TransportError,
)
from dpmine.miners import MCMCTreePair, SerenadeES, TopKItemsets
from dpmine.queries import QuerySyntaxError, parse_query
from dpmine.rule_lists import DPBayesianRuleList
from dpmine.wire import (
    COUNT_NOISY,
    BooleanAttribute,
    CategoricalAttribute,
    CreateDatasetRequest,
    CsvSource,
    DatasetMetadata,
    JobInfo,
    NoisyCountRequest,
    NoisyCountResponse,
    Receipt,
)
from dpmine_server.app import create_app
from dpmine_server.db.models import Dataset, LedgerEntry
from dpmine_server.dp.budget import EPSILON_UNITS_PER_ONE, Epsilon
from dpmine_server.operations.testing import SpinCountRequest
from dpmine_server.services.container import Services, build_services
from dpmine_server.services.ledger import request_fingerprint
from dpmine_server.services.principals import get_principal
from dpmine_server.settings import Settings

with warnings.catch_warnings():  # starlette warns at import that httpx2 should replace httpx
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from fastapi.testclient import TestClient

BASE_URL = "http://testserver"
OWNER_KEY = "client-tests-owner-key-0123456789"
ROWS = 100
FLAGGED = 30  # rows 0..29 have flag = 1
GROUP_A = 40  # rows 0..19 and 60..79 are in group a
FLAGGED_A = 20


# -- the app and a small dataset ------------------------------------------------------------------


def _settings(folder: Path) -> Settings:
    return Settings(
        database_url=f"sqlite:///{folder / 'client.sqlite3'}",
        data_dir=folder / "data",
        bootstrap_owner_key=OWNER_KEY,
        secret_key="client-tests-secret-0123456789abcdef",
        environment="test",
        test_seed=7,
    )


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database the real start-up migrated and bootstrapped once, copied by each test."""
    folder = tmp_path_factory.mktemp("client-template")
    build_services(_settings(folder)).close()
    return folder


@pytest.fixture
def app(tmp_path: Path, template: Path) -> FastAPI:
    """The application on a private copy of the template database."""
    for part in template.glob("client.sqlite3*"):
        shutil.copyfile(part, tmp_path / part.name)
    return create_app(_settings(tmp_path))


@pytest.fixture
def server(app: FastAPI) -> Iterator[TestClient]:
    """The app in-process, lifespan running; server exceptions come back as 500 answers."""
    with TestClient(app, base_url=BASE_URL, raise_server_exceptions=False) as client:
        yield client


@pytest.fixture
def services(server: TestClient, app: FastAPI) -> Services:
    """The running app's services."""
    del server
    built: Services = app.state.services
    return built


@pytest.fixture
def owner(server: TestClient) -> dpmine.Connection:
    """The owner's connection."""
    return dpmine.connect(BASE_URL, OWNER_KEY, http=server, retries=0)


@pytest.fixture
def csv_file(tmp_path: Path) -> Path:
    """100 rows: flag (Boolean, left view) and group (a/b, right view)."""
    lines = ["flag,group"]
    lines += [f"{int(i < FLAGGED)},{'a' if i < 20 or 60 <= i < 80 else 'b'}" for i in range(ROWS)]
    path = tmp_path / "mini.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def analyst_key(owner: dpmine.Connection, csv_file: Path) -> str:
    """Analyst ``alice``, holding 2.0 on dataset ``mini`` (cap 5)."""
    key = owner.admin.add_principal("alice", "analyst").api_key
    request = CreateDatasetRequest(
        id="mini",
        name="Mini",
        epsilon_cap=5.0,
        metadata=DatasetMetadata(
            kind="views",
            n_max=1000,
            attributes=[
                BooleanAttribute(name="flag", view="left"),
                CategoricalAttribute(name="group", view="right", categories=["a", "b"]),
            ],
        ),
        source=CsvSource(path=csv_file.name),
    )
    owner.admin.upload_dataset(request, {"path": csv_file})
    owner.admin.grant("mini", "alice", 2.0)
    return key


@pytest.fixture
def analyst(server: TestClient, analyst_key: str) -> dpmine.Connection:
    """Alice's connection straight to the app (no injected failures)."""
    return dpmine.connect(BASE_URL, analyst_key, http=server, retries=0)


# -- failure injection ----------------------------------------------------------------------------


@dataclass
class Flaky:
    """MockTransport handler: forwards to the app, failing as scripted (one step per request).

    Steps: ``"ok"``, ``"connect"`` (fail before the server sees the request), ``"drop"`` (the
    server answers, the answer is lost), ``"503"`` (a proxy answers 503).
    """

    app_client: TestClient
    script: list[str] = field(default_factory=list)
    seen: list[httpx.Request] = field(default_factory=list)
    forwarded: int = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        step = self.script.pop(0) if self.script else "ok"
        if step == "connect":
            raise httpx.ConnectError("connection refused", request=request)
        if step == "503":
            return httpx.Response(503, text="upstream unavailable")
        self.forwarded += 1
        answer: httpx.Response = self.app_client.request(
            request.method,
            str(request.url),
            headers={k: v for k, v in request.headers.items() if k.lower() != "content-length"},
            content=request.read(),
        )
        if step == "drop":
            raise httpx.ReadError("connection reset by peer", request=request)
        headers = {k: v for k, v in answer.headers.items() if k.lower() != "content-length"}
        return httpx.Response(answer.status_code, headers=headers, content=answer.content)

    def keys(self) -> list[str | None]:
        """The Idempotency-Key of every request the client sent."""
        return [request.headers.get("idempotency-key") for request in self.seen]


@dataclass
class Sleeps:
    """Records the client's back-off sleeps instead of sleeping; may run a hook on each."""

    durations: list[float] = field(default_factory=list)
    hook: Callable[[], None] | None = None

    def __call__(self, seconds: float) -> None:
        self.durations.append(seconds)
        if self.hook is not None:
            self.hook()


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> Sleeps:
    """Back-off sleeps of ``dpmine.connection`` are recorded, not slept."""
    recorder = Sleeps()
    monkeypatch.setattr(
        "dpmine.connection.time", SimpleNamespace(sleep=recorder, monotonic=time.monotonic)
    )
    return recorder


def flaky_connection(
    flaky: Flaky, key: str, *, retries: int = 3
) -> tuple[dpmine.Connection, httpx.Client]:
    """A connection whose HTTP client goes through ``flaky``."""
    http = httpx.Client(base_url=BASE_URL, transport=httpx.MockTransport(flaky))
    return dpmine.connect(BASE_URL, key, http=http, retries=retries), http


def entries(services: Services) -> list[LedgerEntry]:
    """Every ledger entry."""
    with services.sessions() as session:
        return list(session.scalars(select(LedgerEntry).order_by(LedgerEntry.id)))


def spent(services: Services) -> int:
    """Units spent on ``mini``."""
    with services.sessions() as session:
        dataset = session.get(Dataset, "mini")
        assert dataset is not None
        return dataset.spent_units


def laplace_tolerance(epsilon: float, *, false_alarm: float = 1e-6) -> int:
    """Smallest m with P(|Z| > m) <= false_alarm, Z ~ discrete Laplace(1/epsilon) (§0.3):
    P(|Z| > m) = 2a^(m+1)/(1+a), a = exp(-epsilon); the scale is widened by 1 %."""
    alpha = math.exp(-epsilon / 1.01)
    return max(0, math.ceil(math.log(false_alarm * (1 + alpha) / 2) / math.log(alpha)) - 1)


# -- retries --------------------------------------------------------------------------------------


class TestRetries:
    def test_dropped_answer_is_replayed_not_recharged(
        self, server: TestClient, analyst_key: str, services: Services, sleeps: Sleeps
    ) -> None:
        flaky = Flaky(server, ["ok", "drop"])
        connection, http = flaky_connection(flaky, analyst_key)
        with http:
            result = connection.dataset("mini").count("[flag]", epsilon=0.5)
        counts = [r for r in flaky.seen if r.url.path.endswith("/counts")]
        assert len(counts) == 2
        assert flaky.forwarded == 3  # dataset info + both count attempts reached the server
        first_key, second_key = (r.headers["idempotency-key"] for r in counts)
        assert first_key == second_key
        assert str(uuid.UUID(first_key)) == first_key
        assert result.receipt.replayed is True
        [entry] = entries(services)
        assert entry.release is not None
        assert result.count == entry.release["count"]
        assert spent(services) == EPSILON_UNITS_PER_ONE // 2
        assert sleeps.durations == [0.5]

    def test_connect_error_is_retried_with_the_same_key(
        self, server: TestClient, analyst_key: str, services: Services, sleeps: Sleeps
    ) -> None:
        flaky = Flaky(server, ["ok", "connect"])
        connection, http = flaky_connection(flaky, analyst_key)
        with http:
            result = connection.dataset("mini").quality("[flag]", "[group = a]", epsilon=0.4)
        assert flaky.keys()[1] == flaky.keys()[2] is not None
        assert result.receipt.replayed is False  # the server saw the request once
        assert len(entries(services)) == 1
        assert spent(services) == Epsilon.charge("0.4").units
        assert sleeps.durations == [0.5]

    def test_request_in_progress_is_retried_until_released(
        self, server: TestClient, analyst_key: str, services: Services, sleeps: Sleeps
    ) -> None:
        body = NoisyCountRequest(predicate=parse_query("[flag]"), epsilon=0.25)
        parameters = body.model_dump(mode="json")
        with services.sessions() as session:
            alice = get_principal(session, "alice")
        reservation = services.ledger.reserve(  # another worker is computing this request
            principal=alice,
            dataset_id="mini",
            operation="count.noisy",
            parameters=parameters,
            cost=Epsilon.charge(0.25),
            guarantee="pure",
            idempotency_key="in-flight",
            request_hash=request_fingerprint("count.noisy", "mini", parameters),
        )
        stored = NoisyCountResponse(
            count=31,
            receipt=Receipt(
                ledger_entry_id=reservation.entry_id,
                dataset_id="mini",
                operation="count.noisy",
                epsilon=0.25,
                epsilon_exact="0.25",
                guarantee="pure",
                remaining_epsilon=1.75,
                created_at=reservation.created_at,
            ),
        ).model_dump(mode="json")
        calls: list[int] = []

        def finish_on_second_wait() -> None:
            calls.append(1)
            if len(calls) == 2:
                services.ledger.complete(reservation.entry_id, stored)

        sleeps.hook = finish_on_second_wait
        retrying = dpmine.connect(BASE_URL, analyst_key, http=server, retries=3)
        response = retrying.dataset("mini").count(
            "[flag]", epsilon=0.25, idempotency_key="in-flight"
        )
        assert response.count == 31
        assert response.receipt.replayed is True
        assert sleeps.durations == [0.5, 1.0]
        assert len(entries(services)) == 1

    def test_get_is_retried_after_a_503(
        self, server: TestClient, analyst_key: str, sleeps: Sleeps
    ) -> None:
        flaky = Flaky(server, ["503"])
        connection, http = flaky_connection(flaky, analyst_key)
        with http:
            assert [d.id for d in connection.datasets()] == ["mini"]
        assert len(flaky.seen) == 2
        assert sleeps.durations == [0.5]

    def test_retries_run_out(
        self, server: TestClient, analyst_key: str, services: Services, sleeps: Sleeps
    ) -> None:
        flaky = Flaky(server, ["ok"] + ["connect"] * 4)
        connection, http = flaky_connection(flaky, analyst_key, retries=3)
        with http:
            handle = connection.dataset("mini")
            with pytest.raises(TransportError, match="connection refused") as raised:
                handle.count(None, epsilon=0.1)
        assert len(set(flaky.keys()[1:])) == 1
        assert len(flaky.seen) == 5
        assert sleeps.durations == [0.5, 1.0, 2.0]
        assert analyst_key not in str(raised.value)
        assert entries(services) == []

    def test_unkeyed_post_is_not_retried(
        self, server: TestClient, sleeps: Sleeps, services: Services
    ) -> None:
        flaky = Flaky(server, ["connect"])
        connection, http = flaky_connection(flaky, OWNER_KEY)
        with http, pytest.raises(TransportError):
            connection.admin.add_principal("bob", "analyst")
        assert len(flaky.seen) == 1
        assert sleeps.durations == []
        with services.sessions() as session, pytest.raises(Exception, match="bob"):
            get_principal(session, "bob")


# -- error mapping --------------------------------------------------------------------------------


def _expect(
    action: Callable[[], Any], cls: type[ServerError], error: str, status: int
) -> ServerError:
    with pytest.raises(cls) as raised:
        action()
    failure = raised.value
    assert type(failure) is cls
    assert (failure.error, failure.status_code) == (error, status)
    assert failure.detail
    assert str(failure) == f"{error}: {failure.detail}"
    assert failure.response is not None
    return failure


class TestErrorMapping:
    def test_invalid_request(self, analyst: dpmine.Connection) -> None:
        handle = analyst.dataset("mini")
        failure = _expect(
            lambda: handle.count("[flagg]", epsilon=0.1), InvalidRequestError, "InvalidRequest", 422
        )
        assert "'flagg'" in failure.detail

    def test_idempotency_conflict(self, analyst: dpmine.Connection) -> None:
        handle = analyst.dataset("mini")
        handle.count(None, epsilon=0.1, idempotency_key="k1")
        _expect(
            lambda: handle.count("[flag]", epsilon=0.1, idempotency_key="k1"),
            IdempotencyConflictError,
            "IdempotencyConflict",
            409,
        )
        assert issubclass(IdempotencyConflictError, ConflictError)

    def test_missing_key(self, server: TestClient) -> None:
        """Issue #22: an empty key is refused before any request, saying what to fix (it
        was httpx's 'Illegal header value'); a copied line break around a key is dropped."""
        with pytest.raises(ParameterError, match="the API key is empty: pass the key"):
            dpmine.connect(BASE_URL, "", http=server, retries=0)
        with pytest.raises(ParameterError, match="spaces, line breaks"):
            dpmine.connect(BASE_URL, "dpm_one\ntwo", http=server, retries=0)
        copied = dpmine.connect(BASE_URL, " dpm_guessed-key-0123456789\n", http=server, retries=0)
        _expect(copied.datasets, AuthenticationError, "Unauthorized", 401)
        anonymous = server.get("/v1/datasets")  # no key at all: the server's answer
        assert anonymous.status_code == 401

    def test_unknown_key(self, server: TestClient) -> None:
        stranger = dpmine.connect(BASE_URL, "dpm_guessed-key-0123456789", http=server, retries=0)
        failure = _expect(stranger.datasets, AuthenticationError, "Unauthorized", 401)
        assert "guessed" not in str(failure)

    def test_permission_denied(self, analyst: dpmine.Connection) -> None:
        _expect(analyst.admin.principals, PermissionDeniedError, "Forbidden", 403)

    def test_not_found(self, analyst: dpmine.Connection) -> None:
        _expect(lambda: analyst.dataset("nope"), NotFoundError, "NotFound", 404)
        _expect(lambda: analyst.job("no-job"), NotFoundError, "NotFound", 404)

    @pytest.mark.parametrize("dataset_id", ["Mini", "mini/budget", "../admin", "", "m" * 65])
    def test_a_text_that_breaks_the_id_rule_is_refused_before_any_request(
        self, dataset_id: str
    ) -> None:
        """A connection to no server at all: a request would fail with a TransportError."""
        nowhere = dpmine.connect("http://127.0.0.1:9", "unused-key", retries=0)
        with pytest.raises(dpmine.ParameterError) as refused:
            nowhere.dataset(dataset_id)
        assert f"{dataset_id!r} is not a dataset id: a dataset id has 1 to 64" in str(refused.value)

    def test_conflict(self, owner: dpmine.Connection) -> None:
        _expect(lambda: owner.admin.add_principal("admin", "owner"), ConflictError, "Conflict", 409)

    def test_budget_exhausted(self, analyst: dpmine.Connection, services: Services) -> None:
        handle = analyst.dataset("mini")
        _expect(
            lambda: handle.count(None, epsilon=2.5),
            BudgetExhaustedError,
            "BudgetExhausted",
            409,
        )
        assert spent(services) == 0

    def test_request_in_progress_without_retries(
        self, analyst: dpmine.Connection, services: Services
    ) -> None:
        parameters = {"predicate": None, "epsilon": 0.1}
        with services.sessions() as session:
            alice = get_principal(session, "alice")
        services.ledger.reserve(
            principal=alice,
            dataset_id="mini",
            operation="count.noisy",
            parameters=parameters,
            cost=Epsilon.charge(0.1),
            guarantee="pure",
            idempotency_key="busy",
            request_hash=request_fingerprint("count.noisy", "mini", parameters),
        )
        handle = analyst.dataset("mini")
        _expect(
            lambda: handle.count(None, epsilon=0.1, idempotency_key="busy"),
            RequestInProgressError,
            "RequestInProgress",
            409,
        )

    def test_operation_failed(self, analyst: dpmine.Connection) -> None:
        # test.spin_inline with fail=True raises in its kernel, after the charge (test mode
        # only; a registered dataset stays loaded, so removing its file breaks nothing).
        failing = SpinCountRequest(epsilon=0.1, seconds=0.0, fail=True)
        _expect(
            lambda: analyst.call("/v1/datasets/mini/test/spin-inline", failing, NoisyCountResponse),
            OperationFailedError,
            "OperationFailed",
            500,
        )

    def test_every_error_is_a_dpmine_error(self) -> None:
        for cls in (TransportError, ServerError, BudgetExhaustedError, OperationFailedError):
            assert issubclass(cls, DPMineError)


# -- the key stays secret -------------------------------------------------------------------------


def test_repr_never_shows_the_key(analyst: dpmine.Connection, analyst_key: str) -> None:
    handle = analyst.dataset("mini")
    shown = [repr(analyst), str(analyst), repr(handle), str(handle), repr(analyst.admin)]
    assert shown[0] == "Connection('http://testserver')"
    for text in shown:
        assert analyst_key not in text
        assert analyst_key[4:14] not in text


# -- queries as text ------------------------------------------------------------------------------


class TestTextQueries:
    def test_text_and_expression_queries_are_the_same_request(
        self, analyst: dpmine.Connection, services: Services
    ) -> None:
        handle = analyst.dataset("mini")
        text = handle.count("[flag] & [group = a]", epsilon=1.0, idempotency_key="same")
        expr = handle.count(
            parse_query("[flag] & [group = a]"), epsilon=1.0, idempotency_key="same"
        )
        assert expr.receipt.replayed is True  # the same request, so the stored release
        assert expr.count == text.count
        assert abs(text.count - FLAGGED_A) <= laplace_tolerance(1.0)
        assert len(entries(services)) == 1

    def test_text_quality(self, analyst: dpmine.Connection) -> None:
        result = analyst.dataset("mini").quality("[flag]", "[group = a]", epsilon=1.0)
        cells = result.cells
        assert cells.e11 is not None
        assert abs(cells.e11 - FLAGGED_A) <= laplace_tolerance(1.0)
        assert cells.e01 is not None
        assert abs(cells.e01 - (GROUP_A - FLAGGED_A)) <= laplace_tolerance(1.0)

    def test_bad_text_fails_before_any_request(
        self, server: TestClient, analyst_key: str, services: Services
    ) -> None:
        flaky = Flaky(server)
        connection, http = flaky_connection(flaky, analyst_key)
        with http:
            handle = connection.dataset("mini")
            sent = len(flaky.seen)
            with pytest.raises(QuerySyntaxError):
                handle.count("[flag] &", epsilon=0.1)
        assert len(flaky.seen) == sent
        assert entries(services) == []


# -- invalid parameters: one-line ParameterError, nothing sent -------------------------------------


def _refused_before_sending(
    server: TestClient, key: str, call: Callable[[dpmine.DatasetHandle], object]
) -> ParameterError:
    """The ParameterError of ``call`` on dataset ``mini``; asserts that no request was sent."""
    flaky = Flaky(server)
    connection, http = flaky_connection(flaky, key)
    with http:
        handle = connection.dataset("mini")
        sent = len(flaky.seen)
        with pytest.raises(ParameterError) as info:
            call(handle)
    assert len(flaky.seen) == sent
    return info.value


class TestParameters:
    @pytest.mark.parametrize(
        ("call", "message"),
        [
            (lambda h: h.count(epsilon=0), "epsilon must be > 0 (got 0)"),
            (lambda h: h.count("[flag]", epsilon=-1.0), "epsilon must be > 0 (got -1)"),
            (lambda h: h.count(epsilon=math.inf), "epsilon must be a finite number (got inf)"),
            (lambda h: h.count(epsilon=5000), "epsilon must be <= 1000 (got 5000)"),
            (
                lambda h: h.quality("[flag]", "[group = a]", epsilon=0.1, mode="exact"),
                "mode must be 'cells' or 'paper' (got 'exact')",
            ),
            (lambda h: h.estimate([]), "calls must have at least 1 item (got [])"),
            (
                lambda h: TopKItemsets(k=0, epsilon=1.0).plan(h),
                "k must be a whole number of at least 1",
            ),
            (
                lambda h: SerenadeES(epsilon=1.0, x0=5.0, x0_fraction=0.1).plan(h),
                "give exactly one of x0",
            ),
            (lambda h: SerenadeES(epsilon=1.0, x0=5.0, rounds=0).mine(h), "rounds must be"),
            (lambda h: MCMCTreePair(omega=1.5).plan(h), "omega must be in (0, 1)"),
            (lambda h: DPBayesianRuleList(alpha=(0.0, 1.0)).plan(h), "alpha takes two positive"),
        ],
    )
    def test_invalid_parameters_raise_before_anything_is_sent(
        self,
        server: TestClient,
        analyst_key: str,
        services: Services,
        call: Callable[[dpmine.DatasetHandle], object],
        message: str,
    ) -> None:
        error = _refused_before_sending(server, analyst_key, call)
        assert message in str(error), str(error)
        assert isinstance(error, DPMineError)
        assert isinstance(error, ValueError)  # `except ValueError` keeps working
        assert "\n" not in str(error)
        assert entries(services) == []

    def test_the_exact_message_of_a_zero_epsilon(
        self, server: TestClient, analyst_key: str
    ) -> None:
        error = _refused_before_sending(server, analyst_key, lambda h: h.count(epsilon=0))
        assert str(error) == "epsilon must be > 0 (got 0)"
        assert error.errors[0]["loc"] == ("epsilon",)

    def test_a_bad_query_text_is_a_parameter_error(
        self, server: TestClient, analyst_key: str
    ) -> None:
        error = _refused_before_sending(
            server, analyst_key, lambda h: h.count("[flag] &", epsilon=0.1)
        )
        assert isinstance(error, QuerySyntaxError)
        assert "expected a literal" in str(error)

    def test_admin_parameters(self, owner: dpmine.Connection) -> None:
        with pytest.raises(ParameterError, match="role must be 'owner' or 'analyst'"):
            owner.admin.add_principal("bob", "auditor")  # type: ignore[arg-type]
        with pytest.raises(ParameterError, match=r"epsilon must be > 0 \(got -1\)"):
            owner.admin.grant("mini", "alice", -1.0)

    def test_negative_retries(self) -> None:
        with pytest.raises(ParameterError, match=r"retries must be >= 0 \(got -1\)"):
            dpmine.connect(BASE_URL, "key", retries=-1)


def test_estimate_and_job_through_the_client(
    analyst: dpmine.Connection, services: Services
) -> None:
    handle = analyst.dataset("mini")
    request = NoisyCountRequest(predicate=parse_query("[flag]"), epsilon=0.1)
    estimate = handle.estimate([("count.noisy", request)] * 3)
    assert (estimate.total_epsilon_exact, estimate.fits) == ("0.3", True)
    assert entries(services) == []
    job = handle.submit("count.noisy", request)
    done = analyst.wait_for_job(job.id, poll_seconds=0.02, timeout=30)
    assert done.status == "done"
    assert done.result is not None
    released = NoisyCountResponse.model_validate(done.result)
    assert abs(released.count - FLAGGED) <= laplace_tolerance(0.1)
    assert handle.budget().grant_spent == pytest.approx(0.1)


def test_run_and_submit_are_typed_by_the_operation_table(analyst: dpmine.Connection) -> None:
    # assert_type is checked by mypy (the project runs it on tests/): a regression to Any fails.
    handle = analyst.dataset("mini")
    request = NoisyCountRequest(predicate=parse_query("[flag]"), epsilon=0.1)
    released = assert_type(analyst.run("mini", request), NoisyCountResponse)
    assert isinstance(released, NoisyCountResponse)
    assert released.receipt.operation == COUNT_NOISY.name
    assert isinstance(assert_type(handle.run(request), NoisyCountResponse), NoisyCountResponse)
    job = assert_type(analyst.submit("mini", request), dpmine.Job[NoisyCountResponse])
    assert (job.operation, job.info.operation) == (COUNT_NOISY, "count.noisy")
    result = assert_type(
        analyst.wait_for_job(job, poll_seconds=0.02, timeout=30), NoisyCountResponse
    )
    assert isinstance(result, NoisyCountResponse)
    assert abs(result.count - FLAGGED) <= laplace_tolerance(0.1)
    # The job's raw JSON result parses into the operation's response model.
    refreshed = assert_type(analyst.job(job), dpmine.Job[NoisyCountResponse])
    assert refreshed.status == "done"
    assert refreshed.result() == result
    info = assert_type(analyst.job(job.id), JobInfo)
    assert info.result == result.model_dump(mode="json")
    # The id form keeps returning the raw JobInfo.
    assert assert_type(analyst.wait_for_job(job.id, timeout=30), JobInfo).status == "done"


def test_owner_revokes_a_grant(owner: dpmine.Connection, analyst: dpmine.Connection) -> None:
    """A revoked grant keeps what was spent and allows nothing more."""
    analyst.dataset("mini").count(epsilon=0.5)
    revoked = owner.admin.revoke_grant("mini", "alice")
    assert (revoked.epsilon, revoked.spent, revoked.remaining) == (0.5, 0.5, 0.0)
    with pytest.raises(dpmine.BudgetExhaustedError):
        analyst.dataset("mini").count(epsilon=0.1)
    assert [g.epsilon for g in owner.admin.grants("mini")] == [0.5]
