"""Analyst dataset routes: health, listing, public schema, budget and free exact estimates.

DESIGN.md "Trust and privacy contract" (items 2 and 5: nothing but public metadata leaves the
server) and "The budget ledger" (analysts read their budget and ask for dry-run costs for free).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

import dpmine
from dpmine.queries import parse_query
from dpmine.wire import (
    BudgetStatus,
    DatasetInfo,
    DatasetMetadata,
    EstimateResponse,
    NoisyCountRequest,
)
from dpmine_server.db.models import Dataset, LedgerEntry
from dpmine_server.services.container import Services
from dpmine_server.settings import Settings

ANALYST_ROUTES = [
    ("GET", "/v1/datasets"),
    ("GET", "/v1/datasets/toy"),
    ("GET", "/v1/datasets/toy/budget"),
    ("POST", "/v1/datasets/toy/estimate"),
    ("POST", "/v1/datasets/toy/counts"),
    ("POST", "/v1/datasets/toy/redescriptions/quality"),
    ("POST", "/v1/datasets/toy/jobs"),
    ("GET", "/v1/jobs/some-job"),
]


def expect_error(response: httpx.Response, status: int, error: str) -> str:
    """Assert the status and the one error shape ``{"error", "detail"}``; return the detail."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error", "detail"}
    assert body["error"] == error
    assert isinstance(body["detail"], str)
    assert body["detail"]
    return str(body["detail"])


def count_body(query: str | None, epsilon: float) -> dict[str, Any]:
    """A ``count.noisy`` request body from a text query."""
    predicate = None if query is None else parse_query(query)
    return NoisyCountRequest(predicate=predicate, epsilon=epsilon).model_dump(mode="json")


def spent_units(services: Services, dataset_id: str) -> int:
    """The dataset's spent total straight from the database."""
    with services.sessions() as session:
        dataset = session.get(Dataset, dataset_id)
        assert dataset is not None
        return dataset.spent_units


def ledger_size(services: Services) -> int:
    """Number of ledger entries, straight from the database."""
    with services.sessions() as session:
        return int(session.scalar(select(func.count()).select_from(LedgerEntry)) or 0)


class TestHealth:
    def test_health_needs_no_key(self, client: TestClient) -> None:
        response = client.get("/v1/health")
        assert response.status_code == 200
        assert response.json() == {
            "status": "ok",
            "version": "0.1.0",
            "database": "sqlite",
            "timing_calibration": None,  # no DPMINE_TIMING_CALIBRATION file in force
            "max_in_flight": 1000,  # test mode's default DPMINE_MAX_IN_FLIGHT
            "timing_base_ms": 0.0,  # test mode's padding: no base
            "timing_job_base_ms": 0.0,  # nor for jobs (no calibration measured the job path)
            "full_collections": "automatic",  # zero budgets: no idle collector
        }


class TestAuthentication:
    @pytest.mark.parametrize(("method", "path"), ANALYST_ROUTES)
    def test_missing_key_is_401(self, client: TestClient, method: str, path: str) -> None:
        response = client.request(method, path, json={})
        expect_error(response, 401, "Unauthorized")
        assert response.headers["www-authenticate"] == "Bearer"

    def test_unknown_key_is_401(self, client: TestClient) -> None:
        response = client.get("/v1/datasets", headers={"Authorization": "Bearer dpm_not-a-key"})
        detail = expect_error(response, 401, "Unauthorized")
        assert "dpm_not-a-key" not in detail

    def test_non_bearer_scheme_is_401(self, client: TestClient, analyst_key: str) -> None:
        response = client.get("/v1/datasets", headers={"Authorization": f"Basic {analyst_key}"})
        expect_error(response, 401, "Unauthorized")

    def test_x_api_key_header_is_accepted(self, client: TestClient, analyst_key: str) -> None:
        response = client.get("/v1/datasets", headers={"X-API-Key": analyst_key})
        assert response.status_code == 200
        assert response.json() == []


class TestListAndShow:
    def test_analyst_lists_only_granted_datasets(
        self,
        *,
        client: TestClient,
        toy: str,
        mushroom: str,
        owner: dpmine.Connection,
        analyst: dpmine.Connection,
        bob_key: str,
    ) -> None:
        assert sorted(d.id for d in analyst.datasets()) == [mushroom, toy]
        bob = dpmine.connect("http://testserver", bob_key, http=client, retries=0)
        assert bob.datasets() == []
        owner.admin.grant(toy, "bob", 1.0)
        assert [d.id for d in bob.datasets()] == [toy]
        assert sorted(d.id for d in owner.datasets()) == [mushroom, toy]

    def test_show_returns_declared_metadata_and_nothing_else(
        self,
        client: TestClient,
        toy: str,
        toy_metadata: DatasetMetadata,
        analyst_headers: dict[str, str],
    ) -> None:
        response = client.get(f"/v1/datasets/{toy}", headers=analyst_headers)
        assert response.status_code == 200
        body = response.json()
        assert set(body) == set(DatasetInfo.model_fields)
        info = DatasetInfo.model_validate(body)
        assert info.metadata == toy_metadata
        assert (info.version, info.status) == (1, "active")
        text = response.text
        for private in ("n_rows", "source", "toy.csv", "spent", "cap"):
            assert private not in text

    def test_mushroom_schema_has_both_views(
        self, mushroom: str, analyst: dpmine.Connection
    ) -> None:
        schema = analyst.dataset(mushroom).schema
        views = {a.name: a.view for a in schema.attributes}
        assert len(views) == 23
        assert views["class"] == "left"
        assert views["habitat"] == "right"
        klass = schema.attribute("class")
        assert klass.type == "categorical"
        assert klass.categories == ["e", "p"]

    def test_ungranted_and_unknown_datasets_look_the_same(
        self, client: TestClient, toy: str, bob_key: str
    ) -> None:
        headers = {"Authorization": f"Bearer {bob_key}"}
        ungranted = expect_error(
            client.get(f"/v1/datasets/{toy}", headers=headers), 404, "NotFound"
        )
        unknown = expect_error(client.get("/v1/datasets/nope", headers=headers), 404, "NotFound")
        assert ungranted.replace(repr(toy), "ID") == unknown.replace(repr("nope"), "ID")

    def test_owner_sees_any_dataset(
        self, client: TestClient, toy: str, owner_headers: dict[str, str]
    ) -> None:
        response = client.get(f"/v1/datasets/{toy}", headers=owner_headers)
        assert response.status_code == 200
        expect_error(client.get("/v1/datasets/nope", headers=owner_headers), 404, "NotFound")


class TestBudget:
    def test_budget_reports_grant_and_cap(
        self, client: TestClient, toy: str, analyst_headers: dict[str, str]
    ) -> None:
        response = client.get(f"/v1/datasets/{toy}/budget", headers=analyst_headers)
        assert response.status_code == 200
        assert BudgetStatus.model_validate(response.json()) == BudgetStatus(
            dataset_id=toy,
            grant_epsilon=5.0,
            grant_spent=0.0,
            dataset_remaining=10.0,
            remaining_epsilon=5.0,
        )
        charged = client.post(
            f"/v1/datasets/{toy}/counts", json=count_body(None, 0.25), headers=analyst_headers
        )
        assert charged.status_code == 200
        after = BudgetStatus.model_validate(
            client.get(f"/v1/datasets/{toy}/budget", headers=analyst_headers).json()
        )
        assert (after.grant_spent, after.remaining_epsilon, after.dataset_remaining) == (
            0.25,
            4.75,
            9.75,
        )

    def test_budget_without_grant_is_404(
        self, client: TestClient, toy: str, bob_key: str, owner_headers: dict[str, str]
    ) -> None:
        bob = {"Authorization": f"Bearer {bob_key}"}
        expect_error(client.get(f"/v1/datasets/{toy}/budget", headers=bob), 404, "NotFound")
        expect_error(
            client.get(f"/v1/datasets/{toy}/budget", headers=owner_headers), 404, "NotFound"
        )


class TestEstimate:
    def _estimate(
        self, client: TestClient, dataset_id: str, headers: dict[str, str], calls: list[Any]
    ) -> httpx.Response:
        response: httpx.Response = client.post(
            f"/v1/datasets/{dataset_id}/estimate", json={"calls": calls}, headers=headers
        )
        return response

    def test_estimate_is_exact_and_free(
        self,
        client: TestClient,
        toy: str,
        analyst_headers: dict[str, str],
        services: Services,
    ) -> None:
        quality = {
            "redescription": {
                "left": parse_query("[smoker]").model_dump(mode="json"),
                "right": parse_query("[member]").model_dump(mode="json"),
            },
            "epsilon": 0.2,
        }
        calls = [
            {"operation": "count.noisy", "request": count_body("[smoker]", 0.1)},
            {"operation": "count.noisy", "request": count_body(None, 0.1)},
            {"operation": "count.noisy", "request": count_body("[color = red]", 0.1)},
            {"operation": "red.compute_quality", "request": quality},
        ]
        response = self._estimate(client, toy, analyst_headers, calls)
        assert response.status_code == 200
        estimate = EstimateResponse.model_validate(response.json())
        assert estimate.total_epsilon_exact == "0.5"  # 3 × 0.1 + 0.2 exactly, not 0.5000000001
        assert [c.epsilon_exact for c in estimate.calls] == ["0.1", "0.1", "0.1", "0.2"]
        assert [c.guarantee for c in estimate.calls] == ["pure"] * 4
        assert (estimate.remaining_epsilon, estimate.fits) == (5.0, True)
        # Free: no ledger entry, nothing spent.
        assert ledger_size(services) == 0
        assert spent_units(services, toy) == 0

    def test_estimate_three_tenths_is_exactly_point_three(
        self, client: TestClient, toy: str, analyst_headers: dict[str, str]
    ) -> None:
        calls = [{"operation": "count.noisy", "request": count_body(None, 0.1)}] * 3
        estimate = EstimateResponse.model_validate(
            self._estimate(client, toy, analyst_headers, calls).json()
        )
        assert estimate.total_epsilon_exact == "0.3"

    def test_estimate_over_budget_says_it_does_not_fit(
        self, client: TestClient, toy: str, analyst_headers: dict[str, str]
    ) -> None:
        calls = [{"operation": "count.noisy", "request": count_body(None, 2.5)}] * 3
        response = self._estimate(client, toy, analyst_headers, calls)
        assert response.status_code == 200
        estimate = EstimateResponse.model_validate(response.json())
        assert (estimate.total_epsilon_exact, estimate.fits) == ("7.5", False)

    def test_estimate_names_the_bad_call(
        self, client: TestClient, toy: str, analyst_headers: dict[str, str]
    ) -> None:
        calls = [
            {"operation": "count.noisy", "request": count_body(None, 0.1)},
            {"operation": "count.noisy", "request": count_body("[smokr]", 0.1)},
        ]
        detail = expect_error(
            self._estimate(client, toy, analyst_headers, calls), 422, "InvalidRequest"
        )
        assert "call 1 (count.noisy)" in detail
        assert "'smokr'" in detail
        assert "smoker" in detail  # the close-name suggestion

    def test_estimate_rejects_unknown_operation_and_wrong_view(
        self, client: TestClient, toy: str, analyst_headers: dict[str, str]
    ) -> None:
        unknown = [{"operation": "count.exact", "request": {"epsilon": 1}}]
        detail = expect_error(
            self._estimate(client, toy, analyst_headers, unknown), 422, "InvalidRequest"
        )
        assert "count.exact" in detail
        assert "count.noisy" in detail  # lists the known operations
        swapped = [
            {
                "operation": "red.compute_quality",
                "request": {
                    "redescription": {
                        "left": parse_query("[member]").model_dump(mode="json"),
                        "right": parse_query("[smoker]").model_dump(mode="json"),
                    },
                    "epsilon": 0.1,
                },
            }
        ]
        detail = expect_error(
            self._estimate(client, toy, analyst_headers, swapped), 422, "InvalidRequest"
        )
        assert "'member'" in detail
        assert "right view" in detail

    def test_estimate_validation_errors(
        self, client: TestClient, toy: str, analyst_headers: dict[str, str]
    ) -> None:
        expect_error(self._estimate(client, toy, analyst_headers, []), 422, "InvalidRequest")
        response = client.post(
            f"/v1/datasets/{toy}/estimate", content=b"not json", headers=analyst_headers
        )
        expect_error(response, 422, "InvalidRequest")

    def test_estimate_needs_a_grant(
        self, client: TestClient, toy: str, bob_key: str, owner_headers: dict[str, str]
    ) -> None:
        calls = [{"operation": "count.noisy", "request": count_body(None, 0.1)}]
        bob = {"Authorization": f"Bearer {bob_key}"}
        expect_error(self._estimate(client, toy, bob, calls), 404, "NotFound")
        expect_error(self._estimate(client, toy, owner_headers, calls), 404, "NotFound")


def test_uploaded_file_is_kept_under_the_data_folder(
    toy: str, api_settings: Settings, toy_csv: Path
) -> None:
    stored = api_settings.data_dir / "datasets" / toy / "v1" / f"path-{toy_csv.name}"
    assert stored.read_bytes() == toy_csv.read_bytes()
