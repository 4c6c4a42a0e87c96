"""Charged operations over HTTP: noisy counts, redescription quality and background jobs.

DESIGN.md "The budget ledger" (charge first, exact amounts, two caps, idempotent retries, no
refund after data access) and ALGORITHMS.md §0.6 / §1.6 (the released counts are the truth plus
discrete Laplace noise). Noisy releases are compared with the known truth of the generated
dataset; the band of each comparison has a false-alarm rate of 1e-6 (see
:func:`laplace_tolerance`), so the whole file stays far below 1e-4.
"""

from __future__ import annotations

import math
import shutil
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

import dpmine
from dpmine.queries import parse_query
from dpmine.wire import (
    And,
    BoolLiteral,
    CalibrateResponse,
    ComputeQualityResponse,
    CreateDatasetRequest,
    DatasetMetadata,
    FimiSource,
    InitialPairsResponse,
    JobInfo,
    NoisyCountRequest,
    NoisyCountResponse,
    Not,
    QualityParameters,
)
from dpmine_server.db.models import Dataset, Grant, Job, LedgerEntry, Principal
from dpmine_server.dp.budget import EPSILON_UNITS_PER_ONE
from dpmine_server.operations.redescriptions import quality_parameters
from dpmine_server.operations.serenade_quality import (
    line_search,
    one_sided,
    sensitivities,
    sensitivity,
)
from dpmine_server.services.container import Services
from dpmine_server.settings import Settings
from support.inprocess import TestClient, bearer, expect_error

#: The conftest's ``register(dataset_id, csv_path, metadata, cap=, grants=)`` fixture.
Register = Callable[..., str]
#: ``register_toy(dataset_id, grants)``: the toy CSV under another id, cap 1.
RegisterToy = Callable[[str, dict[str, float]], str]


# -- helpers --------------------------------------------------------------------------------------


def laplace_tolerance(epsilon: float, *, sensitivity: int = 1, false_alarm: float = 1e-6) -> int:
    """Smallest m with P(|Z| > m) <= false_alarm for Z ~ discrete Laplace(sensitivity/epsilon).

    P(Z = z) ∝ a^|z| with a = exp(-epsilon/sensitivity) (variance 2a/(1-a)²), so the two-sided
    tail is P(|Z| > m) = 2a^(m+1)/(1+a) (ALGORITHMS.md §0.3). The scale is widened by 1 % because
    the mechanism may round its scale up by a few ulps.
    """
    alpha = math.exp(-epsilon / (sensitivity * 1.01))
    return max(0, math.ceil(math.log(false_alarm * (1 + alpha) / 2) / math.log(alpha)) - 1)


def count_body(query: str | None, epsilon: float) -> dict[str, Any]:
    """A ``count.noisy`` request body from a text query."""
    predicate = None if query is None else parse_query(query)
    return NoisyCountRequest(predicate=predicate, epsilon=epsilon).model_dump(mode="json")


def quality_body(left: str, right: str, epsilon: float, mode: str = "cells") -> dict[str, Any]:
    """A ``red.compute_quality`` request body from two text queries."""
    return {
        "redescription": {
            "left": parse_query(left).model_dump(mode="json"),
            "right": parse_query(right).model_dump(mode="json"),
        },
        "epsilon": epsilon,
        "mode": mode,
    }


def post_to(
    client: TestClient, dataset_id: str, route: str, headers: dict[str, str], body: Any
) -> httpx.Response:
    """POST ``body`` as JSON to ``/v1/datasets/{dataset_id}/{route}``."""
    response: httpx.Response = client.post(
        f"/v1/datasets/{dataset_id}/{route}", json=body, headers=headers
    )
    return response


def post_count(
    client: TestClient, dataset_id: str, headers: dict[str, str], body: dict[str, Any]
) -> httpx.Response:
    """POST a ``count.noisy`` request body to the dataset."""
    return post_to(client, dataset_id, "counts", headers, body)


def post_quality(
    client: TestClient, dataset_id: str, headers: dict[str, str], body: dict[str, Any]
) -> httpx.Response:
    """POST a ``red.compute_quality`` request body to the dataset."""
    return post_to(client, dataset_id, "redescriptions/quality", headers, body)


def submit_count_job(
    client: TestClient, dataset_id: str, headers: dict[str, str], request: dict[str, Any]
) -> httpx.Response:
    """Submit a ``count.noisy`` background job with ``request`` to the dataset."""
    return post_to(
        client, dataset_id, "jobs", headers, {"operation": "count.noisy", "request": request}
    )


def with_key(headers: dict[str, str], key: str) -> dict[str, str]:
    """``headers`` plus an Idempotency-Key."""
    return {**headers, "Idempotency-Key": key}


def entries(services: Services) -> list[LedgerEntry]:
    """Every ledger entry, straight from the database."""
    with services.sessions() as session:
        return list(session.scalars(select(LedgerEntry).order_by(LedgerEntry.id)))


def spent(services: Services, dataset_id: str, analyst: str | None = None) -> int:
    """Units spent on the dataset (or by one analyst's grant on it)."""
    with services.sessions() as session:
        if analyst is None:
            dataset = session.get(Dataset, dataset_id)
            assert dataset is not None
            return dataset.spent_units
        grant = session.scalar(
            select(Grant)
            .join(Principal, Principal.id == Grant.analyst_id)
            .where(Grant.dataset_id == dataset_id, Principal.name == analyst)
        )
        assert grant is not None
        return grant.spent_units


def units(epsilon: str) -> int:
    """Exact units of a decimal epsilon string."""
    whole, _, fraction = epsilon.partition(".")
    return int(whole) * EPSILON_UNITS_PER_ONE + int((fraction or "0").ljust(12, "0"))


def wait_for_job(
    client: TestClient, headers: dict[str, str], job_id: str, timeout: float = 60.0
) -> JobInfo:
    """Poll a job until it is done or failed. The app's job workers start with each test
    (3–5 s on an idle machine, more than 15 s seen with the suite's two workers and other
    load), so the timeout is generous: a job that finishes is seen within 20 ms anyway."""
    deadline = time.monotonic() + timeout
    while True:
        response = client.get(f"/v1/jobs/{job_id}", headers=headers)
        assert response.status_code == 200, response.text
        info = JobInfo.model_validate(response.json())
        if info.status in {"done", "failed"}:
            return info
        assert time.monotonic() < deadline, f"job still {info.status}"
        time.sleep(0.02)


@pytest.fixture
def register_toy(register: Register, toy_csv: Path, toy_metadata: DatasetMetadata) -> RegisterToy:
    """Upload the toy CSV again as ``dataset_id`` with a cap of 1 and the given grants."""

    def upload(dataset_id: str, grants: dict[str, float]) -> str:
        return register(dataset_id, toy_csv, toy_metadata, cap=1.0, grants=grants)

    return upload


# -- noisy counts ---------------------------------------------------------------------------------


class TestNoisyCount:
    @pytest.mark.parametrize(
        "query",
        [
            "[smoker]",
            "![smoker]",
            "!([smoker])",
            "[color = red]",
            "[age <= 40]",
            "[90 <= age]",
            "[smoker] & [color = red]",
        ],
    )
    def test_count_is_truth_plus_bounded_noise(
        self,
        client: TestClient,
        toy: str,
        toy_truth: dict[str, int],
        analyst_headers: dict[str, str],
        query: str,
    ) -> None:
        response = post_count(client, toy, analyst_headers, count_body(query, 1.0))
        assert response.status_code == 200, response.text
        released = NoisyCountResponse.model_validate(response.json())
        assert abs(released.count - toy_truth[query]) <= laplace_tolerance(1.0)

    def test_missing_values_separate_negated_literal_from_complement(
        self, toy_truth: dict[str, int]
    ) -> None:
        # The toy data must exercise the rule (§1.1), else the tests above prove nothing.
        missing = toy_truth["!([smoker])"] - toy_truth["![smoker]"]
        assert missing > 2 * laplace_tolerance(1.0)

    def test_count_of_all_rows(
        self,
        client: TestClient,
        toy: str,
        toy_truth: dict[str, int],
        analyst_headers: dict[str, str],
    ) -> None:
        response = post_count(client, toy, analyst_headers, {"epsilon": 2.0})
        assert response.status_code == 200
        assert abs(response.json()["count"] - toy_truth["all"]) <= laplace_tolerance(2.0)

    def test_mushroom_counts(
        self, client: TestClient, mushroom: str, analyst_headers: dict[str, str]
    ) -> None:
        for query, truth in ((None, 8124), ("[class = e]", 4208), ("[class = p]", 3916)):
            response = post_count(client, mushroom, analyst_headers, count_body(query, 1.0))
            assert response.status_code == 200, response.text
            assert abs(response.json()["count"] - truth) <= laplace_tolerance(1.0)

    def test_release_is_charged_and_recorded(
        self,
        client: TestClient,
        toy: str,
        analyst_headers: dict[str, str],
        services: Services,
    ) -> None:
        key = str(uuid.uuid4())
        body = count_body("[smoker]", 0.5)
        response = post_count(client, toy, with_key(analyst_headers, key), body)
        assert response.status_code == 200
        assert response.headers["cache-control"] == "no-store"
        assert "idempotent-replayed" not in response.headers
        released = NoisyCountResponse.model_validate(response.json())
        receipt = released.receipt
        assert (receipt.dataset_id, receipt.operation, receipt.guarantee) == (
            toy,
            "count.noisy",
            "pure",
        )
        assert (receipt.epsilon, receipt.epsilon_exact, receipt.remaining_epsilon) == (
            0.5,
            "0.5",
            4.5,
        )
        assert receipt.replayed is False
        [entry] = entries(services)
        assert entry.id == receipt.ledger_entry_id
        assert (entry.status, entry.operation, entry.guarantee) == (
            "released",
            "count.noisy",
            "pure",
        )
        assert entry.epsilon_units == EPSILON_UNITS_PER_ONE // 2
        assert entry.idempotency_key == key
        assert entry.parameters == body
        assert entry.release == response.json()
        assert entry.dataset_version == 1
        assert entry.completed_at is not None
        assert spent(services, toy) == spent(services, toy, "alice") == entry.epsilon_units
        assert services.ledger.verify() == []

    def test_request_without_key_is_charged_every_time(
        self, client: TestClient, toy: str, analyst_headers: dict[str, str], services: Services
    ) -> None:
        for _ in range(2):
            response = post_count(client, toy, analyst_headers, count_body(None, 0.1))
            assert response.status_code == 200
        assert [e.idempotency_key for e in entries(services)] == [None, None]
        assert spent(services, toy) == units("0.2")


# -- redescription quality ------------------------------------------------------------------------


class TestQuality:
    def test_cells_are_truth_plus_bounded_noise(
        self,
        client: TestClient,
        toy: str,
        toy_truth: dict[str, int],
        analyst_headers: dict[str, str],
    ) -> None:
        response = post_quality(
            client, toy, analyst_headers, quality_body("[smoker]", "[member]", 1.0)
        )
        assert response.status_code == 200, response.text
        released = ComputeQualityResponse.model_validate(response.json())
        assert released.mode == "cells"
        cells = released.cells
        noisy = {"e11": cells.e11, "e10": cells.e10, "e01": cells.e01, "e00": cells.e00}
        for name, value in noisy.items():
            assert value is not None
            assert abs(value - toy_truth[name]) <= laplace_tolerance(1.0), name
        assert (cells.intersection, cells.union) == (None, None)
        # Derived statistics are post-processing of the four released cells (clamped at 0).
        e11, e10, e01, e00 = (max(v or 0, 0) for v in noisy.values())
        stats = released.statistics
        assert stats.support == e11
        assert stats.union == e11 + e10 + e01
        assert stats.n_rows == e11 + e10 + e01 + e00
        assert stats.jaccard == pytest.approx(e11 / (e11 + e10 + e01))
        assert released.receipt.epsilon_exact == "1"

    def test_paper_mode_releases_intersection_and_union(
        self,
        client: TestClient,
        toy: str,
        toy_truth: dict[str, int],
        analyst_headers: dict[str, str],
    ) -> None:
        response = post_quality(
            client, toy, analyst_headers, quality_body("[smoker]", "[member]", 1.0, mode="paper")
        )
        assert response.status_code == 200, response.text
        released = ComputeQualityResponse.model_validate(response.json())
        cells = released.cells
        assert (cells.e11, cells.e10, cells.e01, cells.e00) == (None, None, None, None)
        assert cells.intersection is not None
        assert cells.union is not None
        tolerance = laplace_tolerance(1.0, sensitivity=2)  # Lap(2/ε) on each of |I| and |U|
        assert abs(cells.intersection - toy_truth["e11"]) <= tolerance
        union = toy_truth["e11"] + toy_truth["e10"] + toy_truth["e01"]
        assert abs(cells.union - union) <= tolerance

    def test_mushroom_quality(
        self, client: TestClient, mushroom: str, analyst_headers: dict[str, str]
    ) -> None:
        response = post_quality(
            client,
            mushroom,
            analyst_headers,
            quality_body("[odor = n]", "[spore-print-color = n]", 0.5),
        )
        assert response.status_code == 200, response.text
        released = ComputeQualityResponse.model_validate(response.json())
        assert released.receipt.remaining_epsilon == 4.5
        assert 0.0 <= released.statistics.jaccard <= 1.0


# -- budgets --------------------------------------------------------------------------------------


class TestBudget:
    def test_ten_tenths_fill_a_cap_of_one_exactly(
        self,
        *,
        client: TestClient,
        register_toy: RegisterToy,
        analyst_headers: dict[str, str],
        services: Services,
    ) -> None:
        register_toy("exact", {"alice": 1.0})
        for index in range(10):
            response = post_count(client, "exact", analyst_headers, count_body(None, 0.1))
            assert response.status_code == 200, (index, response.text)
        assert response.json()["receipt"]["remaining_epsilon"] == 0.0
        refused = post_count(client, "exact", analyst_headers, count_body(None, 0.1))
        detail = expect_error(refused, 409, "BudgetExhausted")
        assert "requested epsilon=0.1" in detail
        assert "remaining on the dataset=0;" in detail
        assert spent(services, "exact") == EPSILON_UNITS_PER_ONE
        assert len(entries(services)) == 10

    def test_grant_exhaustion_charges_nothing(
        self,
        *,
        client: TestClient,
        register_toy: RegisterToy,
        analyst_headers: dict[str, str],
        services: Services,
    ) -> None:
        register_toy("small", {"alice": 0.5})
        url = "/v1/datasets/small/counts"
        for _ in range(2):
            assert client.post(url, json=count_body(None, 0.2), headers=analyst_headers).is_success
        refused = client.post(url, json=count_body(None, 0.2), headers=analyst_headers)
        detail = expect_error(refused, 409, "BudgetExhausted")
        assert "your grant" in detail
        assert "remaining in your grant=0.1" in detail
        assert spent(services, "small") == spent(services, "small", "alice") == units("0.4")
        assert len(entries(services)) == 2
        # What is left still fits exactly.
        assert client.post(url, json=count_body(None, 0.1), headers=analyst_headers).is_success

    def test_dataset_cap_binds_across_analysts(
        self,
        *,
        client: TestClient,
        register_toy: RegisterToy,
        analyst_headers: dict[str, str],
        bob_key: str,
        services: Services,
    ) -> None:
        register_toy("shared", {"alice": 0.8, "bob": 0.8})
        url = "/v1/datasets/shared/counts"
        bob = bearer(bob_key)
        assert client.post(url, json=count_body(None, 0.6), headers=analyst_headers).is_success
        refused = client.post(url, json=count_body(None, 0.6), headers=bob)
        detail = expect_error(refused, 409, "BudgetExhausted")
        assert "dataset cap" in detail
        assert "remaining on the dataset=0.4" in detail
        assert spent(services, "shared", "bob") == 0
        assert client.post(url, json=count_body(None, 0.4), headers=bob).is_success
        expect_error(
            client.post(url, json=count_body(None, 1e-9), headers=analyst_headers),
            409,
            "BudgetExhausted",
        )
        assert spent(services, "shared") == EPSILON_UNITS_PER_ONE
        assert services.ledger.verify() == []

    def test_parallel_spending_never_exceeds_the_cap(
        self,
        *,
        client: TestClient,
        register_toy: RegisterToy,
        analyst_headers: dict[str, str],
        services: Services,
    ) -> None:
        register_toy("race", {"alice": 1.0})

        def spend(_: int) -> int:
            response = post_count(client, "race", analyst_headers, count_body(None, 0.1))
            return int(response.status_code)

        with ThreadPoolExecutor(max_workers=8) as pool:
            statuses = sorted(pool.map(spend, range(16)))
        assert statuses == [200] * 10 + [409] * 6
        assert spent(services, "race") == EPSILON_UNITS_PER_ONE
        assert len(entries(services)) == 10
        assert services.ledger.verify() == []


# -- idempotency ----------------------------------------------------------------------------------


class TestIdempotency:
    def test_retry_replays_the_stored_release(
        self, client: TestClient, toy: str, analyst_headers: dict[str, str], services: Services
    ) -> None:
        key = str(uuid.uuid4())
        url = f"/v1/datasets/{toy}/redescriptions/quality"
        body = quality_body("[smoker]", "[color = red]", 0.5)
        first = client.post(url, json=body, headers=with_key(analyst_headers, key))
        second = client.post(url, json=body, headers=with_key(analyst_headers, key))
        assert (first.status_code, second.status_code) == (200, 200)
        assert second.headers["idempotent-replayed"] == "true"
        replay = second.json()
        assert replay["receipt"].pop("replayed") is True
        original = first.json()
        assert original["receipt"].pop("replayed") is False
        assert replay == original  # the same noise, never fresh noise
        assert len(entries(services)) == 1
        assert spent(services, toy) == units("0.5")

    def test_same_key_with_another_request_is_refused(
        self, client: TestClient, toy: str, analyst_headers: dict[str, str], services: Services
    ) -> None:
        headers = with_key(analyst_headers, "key-1")
        url = f"/v1/datasets/{toy}/counts"
        assert client.post(url, json=count_body(None, 0.1), headers=headers).is_success
        refused = client.post(url, json=count_body("[smoker]", 0.1), headers=headers)
        detail = expect_error(refused, 409, "IdempotencyConflict")
        assert "new key" in detail
        assert len(entries(services)) == 1

    def test_keys_belong_to_one_analyst(
        self,
        *,
        client: TestClient,
        owner_headers: dict[str, str],
        toy: str,
        analyst_headers: dict[str, str],
        bob_key: str,
        services: Services,
    ) -> None:
        client.put(
            f"/v1/admin/datasets/{toy}/grants",
            json={"analyst": "bob", "epsilon": 1.0},
            headers=owner_headers,
        )
        url = f"/v1/datasets/{toy}/counts"
        alice = client.post(url, json=count_body(None, 0.1), headers=with_key(analyst_headers, "k"))
        bob = client.post(url, json=count_body(None, 0.1), headers=with_key(bearer(bob_key), "k"))
        assert (alice.status_code, bob.status_code) == (200, 200)
        assert bob.json()["receipt"]["replayed"] is False
        assert len(entries(services)) == 2

    @pytest.mark.parametrize("key", ["x" * 201, "   "])
    def test_malformed_key_is_refused(
        self,
        client: TestClient,
        toy: str,
        analyst_headers: dict[str, str],
        services: Services,
        key: str,
    ) -> None:
        response = post_count(client, toy, with_key(analyst_headers, key), count_body(None, 0.1))
        assert "Idempotency-Key" in expect_error(response, 422, "InvalidRequest")
        assert entries(services) == []


# -- refusals before the charge -------------------------------------------------------------------

_HALF = And(terms=[BoolLiteral(attribute="smoker")] * 33)
_TOO_MANY = And(terms=[_HALF, _HALF]).model_dump(mode="json")  # 66 literals, each And is legal


def _nested(depth: int) -> dict[str, Any]:
    expr: Any = BoolLiteral(attribute="smoker")
    for _ in range(depth - 1):
        expr = Not(term=expr)
    dumped: dict[str, Any] = expr.model_dump(mode="json")
    return dumped


BAD_COUNTS: list[tuple[str, Any, str]] = [
    (
        "unknown attribute",
        {"predicate": {"kind": "bool", "attribute": "smokr"}, "epsilon": 1},
        "smokr",
    ),
    (
        "wrong literal kind",
        {"predicate": {"kind": "cat", "attribute": "smoker", "category": "yes"}, "epsilon": 1},
        "'smoker' is boolean",
    ),
    (
        "undeclared category",
        {"predicate": {"kind": "cat", "attribute": "color", "category": "purple"}, "epsilon": 1},
        "'purple'",
    ),
    (
        "bound outside the public range",
        {"predicate": {"kind": "num", "attribute": "age", "lower": 5}, "epsilon": 1},
        "public range",
    ),
    (
        "inverted bounds",
        {"predicate": {"kind": "num", "attribute": "age", "lower": 60, "upper": 30}, "epsilon": 1},
        "lower bound",
    ),
    ("zero epsilon", {"epsilon": 0}, "epsilon"),
    ("negative epsilon", {"epsilon": -1}, "epsilon"),
    ("huge epsilon", {"epsilon": 1001}, "epsilon"),
    ("epsilon as text", {"epsilon": "a lot"}, "epsilon"),
    ("missing epsilon", {"predicate": None}, "epsilon"),
    ("client-chosen seed", {"epsilon": 1, "seed": 7}, "seed"),
    ("too many literals", {"predicate": _TOO_MANY, "epsilon": 1}, "literals"),
    ("too deep", {"predicate": _nested(17), "epsilon": 1}, "nested"),
]


class TestRefusals:
    @pytest.mark.parametrize(
        ("body", "fragment"), [case[1:] for case in BAD_COUNTS], ids=[c[0] for c in BAD_COUNTS]
    )
    def test_invalid_count_is_422_and_free(
        self,
        *,
        client: TestClient,
        toy: str,
        analyst_headers: dict[str, str],
        services: Services,
        body: Any,
        fragment: str,
    ) -> None:
        response = post_count(client, toy, analyst_headers, body)
        assert fragment in expect_error(response, 422, "InvalidRequest")
        assert entries(services) == []
        assert spent(services, toy) == 0

    @pytest.mark.parametrize("raw", [b'{"epsilon": NaN}', b'{"epsilon": Infinity}', b"{"])
    def test_non_finite_or_broken_json_is_422(
        self,
        client: TestClient,
        toy: str,
        analyst_headers: dict[str, str],
        services: Services,
        raw: bytes,
    ) -> None:
        response = client.post(
            f"/v1/datasets/{toy}/counts",
            content=raw,
            headers={**analyst_headers, "Content-Type": "application/json"},
        )
        expect_error(response, 422, "InvalidRequest")
        assert entries(services) == []

    @pytest.mark.parametrize(
        ("left", "right", "mode", "fragment"),
        [
            ("[member]", "[smoker]", "cells", "right view"),
            ("[smoker]", "[age <= 40]", "cells", "left view"),
            ("[smoker]", "[member]", "exact", "mode"),
        ],
    )
    def test_invalid_quality_is_422_and_free(
        self,
        *,
        client: TestClient,
        toy: str,
        analyst_headers: dict[str, str],
        services: Services,
        left: str,
        right: str,
        mode: str,
        fragment: str,
    ) -> None:
        response = post_quality(
            client, toy, analyst_headers, quality_body(left, right, 0.5, mode=mode)
        )
        assert fragment in expect_error(response, 422, "InvalidRequest")
        assert entries(services) == []

    def test_owner_cannot_spend(
        self, client: TestClient, toy: str, owner_headers: dict[str, str], services: Services
    ) -> None:
        for path, body in (
            ("counts", count_body(None, 0.1)),
            ("redescriptions/quality", quality_body("[smoker]", "[member]", 0.1)),
            ("jobs", {"operation": "count.noisy", "request": count_body(None, 0.1)}),
        ):
            response = post_to(client, toy, path, owner_headers, body)
            expect_error(response, 403, "Forbidden")
        assert entries(services) == []

    def test_unknown_or_ungranted_dataset_is_404(
        self, client: TestClient, toy: str, bob_key: str, analyst_headers: dict[str, str]
    ) -> None:
        body = count_body(None, 0.1)
        expect_error(
            post_count(client, "nope", analyst_headers, body),
            404,
            "NotFound",
        )
        expect_error(
            post_count(client, toy, bearer(bob_key), body),
            404,
            "NotFound",
        )


@pytest.fixture
def baskets(tmp_path: Path, owner: dpmine.Connection, analyst_key: str) -> str:
    """A small transaction dataset (cap 10, alice holds 5)."""
    del analyst_key  # alice must exist before the grant
    path = tmp_path / "baskets.dat"
    path.write_text("1 2 3\n1 2\n2 3 4\n1 3\n4\n" * 20, encoding="utf-8")
    request = CreateDatasetRequest(
        id="baskets",
        name="Baskets",
        epsilon_cap=10.0,
        metadata=DatasetMetadata(kind="transactions", n_max=1000, items=["1", "2", "3", "4"]),
        source=FimiSource(path=path.name),
    )
    owner.admin.upload_dataset(request, {"path": path})
    owner.admin.grant("baskets", "alice", 5.0)
    return "baskets"


class TestBudgetSplits:
    @pytest.mark.parametrize("method", ["em", "laplace"])
    @pytest.mark.parametrize(
        ("epsilon", "count_share"), [(1.0, 1e-320), (5e-324, 0.5)], ids=["tiny share", "tiny ε"]
    )
    def test_a_split_that_rounds_to_nothing_is_refused_before_the_charge(
        self,
        *,
        client: TestClient,
        baskets: str,
        analyst_headers: dict[str, str],
        services: Services,
        method: str,
        epsilon: float,
        count_share: float,
    ) -> None:
        # Found by the OpenAPI fuzzing: a subnormal share of ε for the counts (or one that
        # underflows to 0.0) reaches the mechanism after the charge, which refuses it (infinite
        # noise scale): the charge stands and nothing is released.
        body = {"k": 1, "min_length": 1, "epsilon": epsilon, "count_share": count_share}
        response = post_to(client, baskets, f"itemsets/top-k-{method}", analyst_headers, body)
        assert response.status_code in {200, 422}, response.text
        if response.status_code == 422:
            assert entries(services) == []


# -- failure after the charge ---------------------------------------------------------------------


class TestFailureAfterCharge:
    def test_charge_stands_and_nothing_is_released(
        self,
        *,
        client: TestClient,
        toy: str,
        toy_csv: Path,
        api_settings: Settings,
        analyst_headers: dict[str, str],
        services: Services,
    ) -> None:
        stored = api_settings.data_dir / "datasets" / toy / "v1" / f"path-{toy_csv.name}"
        stored.unlink()  # the data cannot be loaded any more: the kernel fails after the charge
        shutil.rmtree(stored.parent / "packed")  # (the load would map the packed columns)
        services.datasets.unload(toy)  # (registration left it loaded)
        headers = with_key(analyst_headers, "doomed")
        body = count_body("[smoker]", 0.5)
        response = post_count(client, toy, headers, body)
        detail = expect_error(response, 500, "OperationFailed")
        assert "charge stands" in detail
        assert "toy.csv" not in detail
        [entry] = entries(services)
        assert (entry.status, entry.release) == ("failed", None)
        assert spent(services, toy) == units("0.5")
        # A retry with the same key neither recomputes nor charges again.
        again = post_count(client, toy, headers, body)
        detail = expect_error(again, 409, "ChargeKeptNoResult")
        assert "charge was kept and no result exists" in detail
        assert "new Idempotency-Key" in detail
        assert spent(services, toy) == units("0.5")
        assert services.ledger.verify() == []


# -- background jobs ------------------------------------------------------------------------------


class TestJobs:
    def test_job_charges_at_submit_and_returns_the_release(
        self,
        client: TestClient,
        toy: str,
        toy_truth: dict[str, int],
        analyst_headers: dict[str, str],
        services: Services,
    ) -> None:
        response = submit_count_job(
            client, toy, with_key(analyst_headers, "job-1"), count_body("[smoker]", 1.0)
        )
        assert response.status_code == 202, response.text
        submitted = JobInfo.model_validate(response.json())
        assert (submitted.dataset_id, submitted.operation) == (toy, "count.noisy")
        assert spent(services, toy) == EPSILON_UNITS_PER_ONE  # charged before computing
        done = wait_for_job(client, analyst_headers, submitted.id)
        assert (done.status, done.progress) == ("done", 1.0)
        assert done.result is not None
        released = NoisyCountResponse.model_validate(done.result)
        assert abs(released.count - toy_truth["[smoker]"]) <= laplace_tolerance(1.0)
        [entry] = entries(services)
        assert (entry.id, entry.status, entry.release) == (
            released.receipt.ledger_entry_id,
            "released",
            done.result,
        )

    def test_job_retry_with_the_same_key_returns_the_same_job(
        self, client: TestClient, toy: str, analyst_headers: dict[str, str], services: Services
    ) -> None:
        body = {
            "operation": "red.compute_quality",
            "request": quality_body("[smoker]", "[member]", 0.3),
        }
        headers = with_key(analyst_headers, "job-retry")
        first = post_to(client, toy, "jobs", headers, body)
        second = post_to(client, toy, "jobs", headers, body)
        assert (first.status_code, second.status_code) == (202, 202)
        assert first.json()["id"] == second.json()["id"]
        wait_for_job(client, analyst_headers, first.json()["id"])
        assert len(entries(services)) == 1
        assert spent(services, toy) == units("0.3")

    def test_job_key_reused_for_another_request_is_refused(
        self, client: TestClient, toy: str, analyst_headers: dict[str, str], services: Services
    ) -> None:
        headers = with_key(analyst_headers, "job-key")
        first = submit_count_job(client, toy, headers, count_body(None, 0.1))
        assert first.status_code == 202
        other = submit_count_job(client, toy, headers, count_body("[smoker]", 0.2))
        expect_error(other, 409, "IdempotencyConflict")
        assert len(entries(services)) == 1

    def test_invalid_jobs_are_refused_before_the_charge(
        self, client: TestClient, toy: str, analyst_headers: dict[str, str], services: Services
    ) -> None:
        url = f"/v1/datasets/{toy}/jobs"
        unknown = client.post(
            url, json={"operation": "mine.everything", "request": {}}, headers=analyst_headers
        )
        assert "mine.everything" in expect_error(unknown, 422, "InvalidRequest")
        invalid = submit_count_job(client, toy, analyst_headers, count_body("[smokr]", 0.1))
        assert "smokr" in expect_error(invalid, 422, "InvalidRequest")
        too_much = submit_count_job(client, toy, analyst_headers, count_body(None, 6.0))
        expect_error(too_much, 409, "BudgetExhausted")
        assert entries(services) == []
        with services.sessions() as session:
            assert session.scalars(select(Job)).all() == []

    def test_jobs_are_private_to_their_principal(
        self,
        client: TestClient,
        toy: str,
        analyst_headers: dict[str, str],
        bob_key: str,
        owner_headers: dict[str, str],
    ) -> None:
        response = submit_count_job(client, toy, analyst_headers, count_body(None, 0.1))
        job_id = response.json()["id"]
        wait_for_job(client, analyst_headers, job_id)
        for headers in (bearer(bob_key), owner_headers):
            expect_error(client.get(f"/v1/jobs/{job_id}", headers=headers), 404, "NotFound")
        expect_error(client.get("/v1/jobs/no-such-job", headers=analyst_headers), 404, "NotFound")

    def test_failed_job_keeps_its_charge(
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
        response = submit_count_job(client, toy, analyst_headers, count_body(None, 0.25))
        assert response.status_code == 202
        failed = wait_for_job(client, analyst_headers, response.json()["id"])
        assert failed.status == "failed"
        assert failed.result is None
        assert "charge stands" in failed.message
        [entry] = entries(services)
        assert entry.status == "failed"
        assert spent(services, toy) == units("0.25")


# -- the removed ES memo (issue #7) ---------------------------------------------------------------


def extend_body(**extra: Any) -> dict[str, Any]:
    """A valid ``serenade.extend_one`` body on the toy data, plus ``extra`` fields."""
    red = {
        "left": parse_query("[smoker]").model_dump(mode="json"),
        "right": parse_query("[member]").model_dump(mode="json"),
    }
    return {
        "mode": "es",
        "collection": [red],
        "epsilon": 0.1,
        "quality": {"x0": 10.0},
        "options": {"threshold_mode": "grid"},
        **extra,
    }


MEMO_FIELDS = [
    ("memo on", {"max_age": 3, "session_id": "11111111-1111-1111-1111-111111111111"}),
    ("memo off", {"max_age": 0}),
    ("null session", {"session_id": None}),
]


class TestNoMemo:
    """SerenadeES's memo reused a winner drawn at one call's ε in later calls charged far less
    (issue #7: it under-charged); it and the mining sessions that held it are gone, and a
    request still naming them is refused before any charge."""

    @pytest.mark.parametrize(
        "extra", [case[1] for case in MEMO_FIELDS], ids=[case[0] for case in MEMO_FIELDS]
    )
    def test_memo_fields_are_refused_before_the_charge(
        self,
        *,
        client: TestClient,
        toy: str,
        analyst_headers: dict[str, str],
        services: Services,
        extra: dict[str, Any],
    ) -> None:
        route = "redescriptions/serenade/extend"
        assert post_to(client, toy, route, analyst_headers, extend_body()).status_code == 200
        before = entries(services)
        response = post_to(client, toy, route, analyst_headers, extend_body(**extra))
        detail = expect_error(response, 422, "InvalidRequest")
        assert "memo" in detail
        assert next(iter(extra)) in detail
        job = post_to(
            client,
            toy,
            "jobs",
            analyst_headers,
            {"operation": "serenade.extend_one", "request": extend_body(**extra)},
        )
        assert "memo" in expect_error(job, 422, "InvalidRequest")
        assert len(entries(services)) == len(before) == 1
        assert spent(services, toy) == units("0.1")

    def test_the_sessions_endpoints_are_gone(
        self, client: TestClient, toy: str, analyst_headers: dict[str, str], services: Services
    ) -> None:
        started = client.post(
            f"/v1/datasets/{toy}/sessions",
            json={"kind": "serenade.es_memo"},
            headers=analyst_headers,
        )
        assert started.status_code in {404, 405}, started.text
        ended = client.delete(f"/v1/datasets/{toy}/sessions/some-id", headers=analyst_headers)
        assert ended.status_code in {404, 405}, ended.text
        assert (
            "/v1/datasets/{dataset_id}/sessions" not in client.get("/openapi.json").json()["paths"]
        )
        assert entries(services) == []


# -- Serenade: calibration, coverage factor, range-calibrated draws (issue #12) -------------------


CALIBRATE = "redescriptions/serenade/calibrate"
PAIRS = "redescriptions/serenade/initial-pairs"


class TestSerenadeCalibration:
    """``serenade.calibrate`` is free and public-only (§2.1); it reports Δ_up, Δ_down, c per
    unit ε (§0.8) and the x0 trade-off; old request bodies keep working."""

    def test_an_old_body_gets_the_range_calibration(
        self, client: TestClient, toy: str, analyst_headers: dict[str, str], services: Services
    ) -> None:
        response = post_to(client, toy, CALIBRATE, analyst_headers, {"x0": 100.0})
        assert response.status_code == 200, response.text
        answer = CalibrateResponse.model_validate(response.json())
        s, sides = line_search(100.0, 1000)
        assert (answer.s, answer.delta, answer.n_max) == (s, sides.symmetric, 1000)
        assert (answer.delta_up, answer.delta_down) == (sides.up, sides.down)
        assert answer.c_per_epsilon == pytest.approx(1.0 / (sides.up + sides.down))
        assert (answer.calibration, answer.y0, answer.s2, answer.tradeoff) == (
            "range",
            None,
            None,
            [],
        )
        fixed = post_to(client, toy, CALIBRATE, analyst_headers, {"x0": 100.0, "s": 0.02})
        assert fixed.json()["delta"] == sensitivity(0.02, 100.0, 1000)
        assert entries(services) == []

    def test_coverage_and_tradeoff(
        self, client: TestClient, toy: str, analyst_headers: dict[str, str], services: Services
    ) -> None:
        body = {
            "x0": 100.0,
            "s": 0.02,
            "y0": 300.0,
            "s2": 0.5,
            "calibration": "symmetric",
            "tradeoff_x0": [50.0, 100.0, 300.0],
        }
        response = post_to(client, toy, CALIBRATE, analyst_headers, body)
        assert response.status_code == 200, response.text
        answer = CalibrateResponse.model_validate(response.json())
        sides = sensitivities(0.02, 100.0, 1000, y0=300.0, s2=0.5)
        assert sides.up > one_sided(0.02, 100.0, 1000).up  # the steep E00 term dominates
        assert (answer.delta_up, answer.delta_down, answer.s2) == (sides.up, sides.down, 0.5)
        assert answer.c_per_epsilon == pytest.approx(1.0 / (2 * sides.symmetric))
        assert [row.x0 for row in answer.tradeoff] == [50.0, 100.0, 300.0]
        for row in answer.tradeoff:
            expected = sensitivities(0.02, row.x0, 1000, y0=300.0, s2=0.5)
            assert (row.s, row.delta_up, row.delta_down) == (0.02, expected.up, expected.down)
            assert row.c_per_epsilon == pytest.approx(1.0 / (2 * expected.symmetric))
        searched = post_to(
            client, toy, CALIBRATE, analyst_headers, {"x0": 100.0, "tradeoff_x0": [50.0, 300.0]}
        )
        rows = CalibrateResponse.model_validate(searched.json()).tradeoff
        assert [row.s for row in rows] == [line_search(x0, 1000)[0] for x0 in (50.0, 300.0)]
        assert rows[0].delta > rows[1].delta  # Δ shrinks as x0 grows
        assert entries(services) == []

    @pytest.mark.parametrize(
        ("body", "message"),
        [
            ({"x0": 100.0, "s2": 0.1}, "give y0 too"),
            ({"x0": 100.0, "tradeoff_x0": [10.0, 1000.0]}, "tradeoff_x0 = 1000.0"),
            ({"x0": 100.0, "y0": -1.0}, "y0"),
            ({"x0": 100.0, "calibration": "loose"}, "calibration"),
        ],
    )
    def test_invalid_bodies_are_422(
        self,
        *,
        client: TestClient,
        toy: str,
        analyst_headers: dict[str, str],
        body: dict[str, Any],
        message: str,
    ) -> None:
        response = post_to(client, toy, CALIBRATE, analyst_headers, body)
        assert response.status_code == 422, response.text
        assert message in response.text


class TestSerenadeQualityOptions:
    """Initial pairs accept the paper's body, the coverage factor and the symmetric switch; the
    release states the calibration it used; bad quality options cost nothing."""

    @pytest.mark.parametrize(
        "quality",
        [
            {"x0": 10.0},
            {"x0": 10.0, "s": 0.1, "y0": 20.0},
            {"x0": 10.0, "y0": 20.0, "s2": 0.2, "calibration": "symmetric"},
        ],
        ids=["paper-body", "coverage", "symmetric"],
    )
    def test_initial_pairs(
        self,
        *,
        client: TestClient,
        toy: str,
        analyst_headers: dict[str, str],
        quality: dict[str, Any],
    ) -> None:
        body = {
            "count": 2,
            "epsilon": 0.1,
            "quality": quality,
            "options": {"threshold_mode": "grid"},
        }
        response = post_to(client, toy, PAIRS, analyst_headers, body)
        assert response.status_code == 200, response.text
        answer = InitialPairsResponse.model_validate(response.json())
        assert len(answer.pairs) == 2
        params = quality_parameters(QualityParameters.model_validate(quality), 1000)
        assert (answer.s, answer.delta) == (params.s, params.delta)
        assert (answer.delta_up, answer.delta_down) == (params.delta_up, params.delta_down)
        assert answer.c_per_epsilon == pytest.approx(params.coefficient(1.0))
        if quality.get("calibration") == "symmetric":
            assert answer.delta_up is None
            assert answer.c_per_epsilon == pytest.approx(1.0 / (2 * answer.delta))
        else:
            assert answer.delta_up is not None
            assert answer.delta_down is not None
            assert answer.c_per_epsilon == pytest.approx(
                1.0 / (answer.delta_up + answer.delta_down)
            )

    @pytest.mark.parametrize(
        ("quality", "message"),
        [
            ({"x0": 10.0, "s2": 0.2}, "give y0 too"),
            ({"x0": 10.0, "function": "jaccard", "y0": 5.0}, "drop y0"),
        ],
    )
    def test_bad_quality_options_are_refused_before_the_charge(
        self,
        *,
        client: TestClient,
        toy: str,
        analyst_headers: dict[str, str],
        services: Services,
        quality: dict[str, Any],
        message: str,
    ) -> None:
        body = {"count": 2, "epsilon": 0.1, "quality": quality}
        response = post_to(client, toy, PAIRS, analyst_headers, body)
        assert response.status_code == 422, response.text
        assert message in response.text
        assert entries(services) == []


class TestSerenadeColumns:
    """``options.columns`` (issue #21): a column the schema does not declare, or a view left
    with no attribute, is refused before the charge with what to fix."""

    @pytest.mark.parametrize(
        ("route", "columns", "message"),
        [
            (PAIRS, ["smoker", "colour"], "unknown column(s) ['colour']"),
            (PAIRS, ["age", "smoker"], "leaves the right view no attribute"),
            ("redescriptions/serenade/extend", ["age", "member"], "leaves out"),
        ],
    )
    def test_bad_columns_are_refused_before_the_charge(
        self,
        *,
        client: TestClient,
        toy: str,
        analyst_headers: dict[str, str],
        services: Services,
        route: str,
        columns: list[str],
        message: str,
    ) -> None:
        options = {"threshold_mode": "grid", "columns": columns}
        body = (
            {"count": 2, "epsilon": 0.1, "quality": {"x0": 10.0}, "options": options}
            if route == PAIRS
            else extend_body(options=options)
        )
        response = post_to(client, toy, route, analyst_headers, body)
        assert message in expect_error(response, 422, "InvalidRequest")
        assert entries(services) == []
        assert spent(services, toy) == 0

    def test_allowed_columns_bound_the_pairs(
        self, *, client: TestClient, toy: str, analyst_headers: dict[str, str]
    ) -> None:
        options = {"threshold_mode": "grid", "columns": ["smoker", "member"]}
        body = {"count": 20, "epsilon": 1.0, "quality": {"x0": 10.0}, "options": options}
        response = post_to(client, toy, PAIRS, analyst_headers, body)
        assert response.status_code == 200, response.text
        pairs = InitialPairsResponse.model_validate(response.json()).pairs
        assert {(pair.left, pair.right) for pair in pairs} == {
            (BoolLiteral(attribute="smoker"), BoolLiteral(attribute="member"))
        }


class TestTextQueries:
    """REST callers may write a query as the README writes it: the text is the same request as
    its tree (one fingerprint, one replay), and a text that does not parse costs nothing."""

    def test_a_text_query_is_the_same_request_as_its_tree(
        self, client: TestClient, toy: str, analyst_headers: dict[str, str]
    ) -> None:
        key = {"Idempotency-Key": "text-then-tree"}
        text = {"predicate": "[age <= 40] & ![smoker]", "epsilon": 0.1}
        first = client.post(
            f"/v1/datasets/{toy}/counts", json=text, headers={**analyst_headers, **key}
        )
        assert first.status_code == 200, first.text
        tree = {
            "predicate": {
                "kind": "and",
                "terms": [
                    {"kind": "num", "attribute": "age", "upper": 40},
                    {"kind": "bool", "attribute": "smoker", "negated": True},
                ],
            },
            "epsilon": 0.1,
        }
        again = client.post(
            f"/v1/datasets/{toy}/counts", json=tree, headers={**analyst_headers, **key}
        )
        assert again.status_code == 200, again.text
        assert again.headers.get("Idempotent-Replayed") == "true"
        assert again.json()["count"] == first.json()["count"]
        quality = client.post(
            f"/v1/datasets/{toy}/redescriptions/quality",
            json={"redescription": {"left": "[smoker]", "right": "[color = red]"}, "epsilon": 0.1},
            headers=analyst_headers,
        )
        assert quality.status_code == 200, quality.text

    def test_a_text_that_does_not_parse_is_refused_before_the_charge(
        self, client: TestClient, toy: str, analyst_headers: dict[str, str]
    ) -> None:
        before = client.get(f"/v1/datasets/{toy}/budget", headers=analyst_headers).json()
        refused = client.post(
            f"/v1/datasets/{toy}/counts",
            json={"predicate": "[age <= ", "epsilon": 0.1},
            headers=analyst_headers,
        )
        detail = expect_error(refused, 422, "InvalidRequest")
        assert "column" in detail
        unknown = client.post(
            f"/v1/datasets/{toy}/counts",
            json={"predicate": "[height <= 3]", "epsilon": 0.1},
            headers=analyst_headers,
        )
        assert "height" in expect_error(unknown, 422, "InvalidRequest")
        after = client.get(f"/v1/datasets/{toy}/budget", headers=analyst_headers).json()
        assert after == before
