"""Datasets whose ledger counts zero-concentrated DP (issue #24): registration with a cap as
(ε, δ) or as ρ, grants in ρ, calls charged the ρ of their releases, and the budget, estimate,
cap and ledger views showing ρ with the (ε, δ) it implies. Bad input is refused before anything
is written or charged."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import httpx
import pytest

from dpmine.wire import (
    BudgetStatus,
    CsvSource,
    DatasetCap,
    DatasetMetadata,
    EstimateResponse,
    Receipt,
)
from dpmine_server.dp.budget import Rho
from dpmine_server.dp.zcdp import DEFAULT_DELTA, ReleasePart, rho_cap_for, rho_of_parts
from support.inprocess import TestClient, expect_error

CALL_RHO = rho_of_parts([ReleasePart("pure", Fraction(1, 10))])  # count.noisy at ε = 0.1


def toy_body(metadata: DatasetMetadata, dataset_id: str, **fields: Any) -> dict[str, Any]:
    """A registration body for the toy CSV (fields set to None are left out)."""
    body = {
        "id": dataset_id,
        "name": dataset_id.title(),
        "epsilon_cap": 3.0,
        "metadata": metadata.model_dump(mode="json"),
        "source": CsvSource(path="toy.csv").model_dump(mode="json"),
        **fields,
    }
    return {key: value for key, value in body.items() if value is not None}


def upload(
    client: TestClient, headers: dict[str, str], body: dict[str, Any], files: dict[str, Path]
) -> httpx.Response:
    """POST the upload form: the request as JSON text plus the file fields."""
    handles = {field: (path.name, path.read_bytes()) for field, path in files.items()}
    response: httpx.Response = client.post(
        "/v1/admin/datasets/upload",
        data={"request": json.dumps(body)},
        files=handles,
        headers=headers,
    )
    return response


@pytest.fixture
def zcdp_toy(
    client: TestClient,
    owner_headers: dict[str, str],
    analyst_key: str,
    toy_csv: Path,
    toy_metadata: DatasetMetadata,
) -> str:
    """The toy data as a zCDP dataset capped at (ε = 1, δ = 10⁻⁶); alice holds ρ = 0.01."""
    del analyst_key  # alice must exist before the grant
    body = toy_body(toy_metadata, "ztoy", accounting="zcdp", epsilon_cap=1.0, cap_delta=1e-6)
    response = upload(client, owner_headers, body, {"path": toy_csv})
    assert response.status_code == 201, response.text
    grant = client.put(
        "/v1/admin/datasets/ztoy/grants",
        json={"analyst": "alice", "rho": 0.01},
        headers=owner_headers,
    )
    assert grant.status_code == 200, grant.text
    assert grant.json()["zcdp"]["rho_exact"] == "0.01"
    return "ztoy"


def test_the_cap_is_stored_as_the_rho_its_epsilon_delta_allows(
    client: TestClient, owner_headers: dict[str, str], zcdp_toy: str
) -> None:
    cap = DatasetCap.model_validate(
        client.get(f"/v1/admin/datasets/{zcdp_toy}/cap", headers=owner_headers).json()
    )
    assert cap.accounting == "zcdp"
    assert cap.zcdp is not None
    assert cap.zcdp.rho_exact == rho_cap_for(1, DEFAULT_DELTA).exact_str()
    assert (cap.zcdp.delta, cap.zcdp.delta_is_default) == (1e-6, False)
    assert 0.8 < cap.epsilon_cap <= 1.0  # OpenDP's conversion is tighter than the cap's
    info = client.get(f"/v1/datasets/{zcdp_toy}", headers=owner_headers).json()
    assert info["accounting"] == "zcdp"


def test_calls_are_charged_their_rho_and_the_views_show_it(
    client: TestClient,
    owner_headers: dict[str, str],
    analyst_headers: dict[str, str],
    zcdp_toy: str,
) -> None:
    response = client.post(
        f"/v1/datasets/{zcdp_toy}/counts", json={"epsilon": 0.1}, headers=analyst_headers
    )
    assert response.status_code == 200, response.text
    receipt = Receipt.model_validate(response.json()["receipt"])
    assert (receipt.accounting, receipt.epsilon_exact) == ("zcdp", "0.1")
    assert receipt.zcdp is not None
    assert receipt.zcdp.rho_exact == CALL_RHO.exact_str()
    left = Rho.cap("0.01") - CALL_RHO
    assert receipt.zcdp.rho_remaining == left.display()

    budget = BudgetStatus.model_validate(
        client.get(f"/v1/datasets/{zcdp_toy}/budget", headers=analyst_headers).json()
    )
    assert budget.zcdp is not None
    assert budget.zcdp.rho_spent == CALL_RHO.display()
    assert budget.zcdp.epsilon_spent is not None
    assert 0 < budget.zcdp.epsilon_spent < budget.zcdp.epsilon

    estimate = EstimateResponse.model_validate(
        client.post(
            f"/v1/datasets/{zcdp_toy}/estimate",
            json={"calls": [{"operation": "count.noisy", "request": {"epsilon": 0.1}}]},
            headers=analyst_headers,
        ).json()
    )
    assert (estimate.accounting, estimate.total_rho_exact) == ("zcdp", CALL_RHO.exact_str())
    assert estimate.remaining_rho_exact == left.exact_str()
    assert not estimate.fits  # 0.005 + slack twice is just above the grant of 0.01

    again = client.post(
        f"/v1/datasets/{zcdp_toy}/counts", json={"epsilon": 0.1}, headers=analyst_headers
    )
    assert "requested rho=" in expect_error(again, 409, "BudgetExhausted")

    entries = client.get("/v1/admin/ledger", headers=owner_headers).json()
    [entry] = [e for e in entries if e["dataset_id"] == zcdp_toy]
    assert (entry["accounting"], entry["rho_exact"]) == ("zcdp", CALL_RHO.exact_str())
    verify = client.get("/v1/admin/ledger/verify", headers=owner_headers).json()
    assert verify["consistent"], verify


def test_grants_must_be_in_the_datasets_unit(
    client: TestClient, owner_headers: dict[str, str], zcdp_toy: str, toy: str
) -> None:
    as_epsilon = client.put(
        f"/v1/admin/datasets/{zcdp_toy}/grants",
        json={"analyst": "alice", "epsilon": 1.0},
        headers=owner_headers,
    )
    assert "give the grant as rho" in expect_error(as_epsilon, 422, "InvalidRequest")
    as_rho = client.put(
        f"/v1/admin/datasets/{toy}/grants",
        json={"analyst": "alice", "rho": 0.1},
        headers=owner_headers,
    )
    assert "give the grant as epsilon" in expect_error(as_rho, 422, "InvalidRequest")


@pytest.mark.parametrize(
    "case",
    [
        ({"accounting": "zcdp", "epsilon_cap": 1.0}, "cap_rho, or as epsilon_cap with cap_delta"),
        ({"accounting": "zcdp", "epsilon_cap": 1.0, "cap_delta": 1.0}, "cap_delta"),
        ({"accounting": "zcdp", "cap_rho": 0.0}, "cap_rho"),
        ({"accounting": "zcdp", "cap_rho": 0.1, "cap_delta": 1e-6}, "cap_rho or as epsilon_cap"),
        ({"accounting": "pure", "cap_rho": 0.1}, "takes epsilon_cap only"),
        ({"accounting": "zcdp", "epsilon_cap": 1e-9, "cap_delta": 1e-6}, "less than one unit"),
    ],
)
def test_bad_caps_are_refused_before_anything_is_written(
    client: TestClient,
    owner_headers: dict[str, str],
    toy_csv: Path,
    toy_metadata: DatasetMetadata,
    case: tuple[dict[str, Any], str],
) -> None:
    fields, message = case
    body = toy_body(toy_metadata, "bad", **{"epsilon_cap": None, **fields})
    response = upload(client, owner_headers, body, {"path": toy_csv})
    assert message in expect_error(response, 422, "InvalidRequest")
    listed = client.get("/v1/admin/datasets/bad/cap", headers=owner_headers)
    assert listed.status_code == 404


def test_a_cap_given_as_rho_is_shown_at_the_default_delta(
    client: TestClient, owner_headers: dict[str, str], toy_csv: Path, toy_metadata: DatasetMetadata
) -> None:
    body = toy_body(toy_metadata, "rtoy", accounting="zcdp", epsilon_cap=None, cap_rho=0.05)
    assert upload(client, owner_headers, body, {"path": toy_csv}).status_code == 201
    cap = DatasetCap.model_validate(
        client.get("/v1/admin/datasets/rtoy/cap", headers=owner_headers).json()
    )
    assert cap.zcdp is not None
    assert (cap.zcdp.rho_exact, cap.zcdp.delta, cap.zcdp.delta_is_default) == ("0.05", 1e-6, True)
    # Raising the cap as epsilon converts it at that delta.
    raised = client.put(
        "/v1/admin/datasets/rtoy/cap", json={"epsilon_cap": 1.0}, headers=owner_headers
    )
    assert raised.status_code == 200, raised.text
    assert raised.json()["zcdp"]["rho_exact"] == rho_cap_for(1, DEFAULT_DELTA).exact_str()


def test_a_batch_on_a_zcdp_dataset_charges_each_part_its_rho(
    client: TestClient,
    owner_headers: dict[str, str],
    analyst_headers: dict[str, str],
    zcdp_toy: str,
) -> None:
    part = {"operation": "count.noisy", "request": {"epsilon": 0.05}}
    part_rho = rho_of_parts([ReleasePart("pure", Fraction(1, 20))])
    response = client.post(
        f"/v1/datasets/{zcdp_toy}/batch", json={"parts": [part, part]}, headers=analyst_headers
    )
    assert response.status_code == 200, response.text
    receipts = [Receipt.model_validate(body["receipt"]) for body in response.json()["parts"]]
    assert [receipt.accounting for receipt in receipts] == ["zcdp", "zcdp"]
    assert [receipt.zcdp.rho_exact for receipt in receipts if receipt.zcdp] == [
        part_rho.exact_str()
    ] * 2
    budget = BudgetStatus.model_validate(
        client.get(f"/v1/datasets/{zcdp_toy}/budget", headers=analyst_headers).json()
    )
    assert budget.zcdp is not None
    assert budget.zcdp.rho_spent == (part_rho + part_rho).display()
    entries = client.get("/v1/admin/ledger", headers=owner_headers).json()
    charged = [e["rho_exact"] for e in entries if e["dataset_id"] == zcdp_toy]
    assert charged == [part_rho.exact_str()] * 2
    verify = client.get("/v1/admin/ledger/verify", headers=owner_headers).json()
    assert verify["consistent"], verify
