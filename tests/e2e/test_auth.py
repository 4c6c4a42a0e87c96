"""Authentication and authorisation against a live server, on SQLite and PostgreSQL (DESIGN.md
"Who uses it", "Errors": 401 for a missing/unknown/disabled key, 403 for the wrong role, 404
for a dataset that is not granted; nothing is ever charged on a refusal; API keys never leak).
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import httpx
import pytest

import dpmine
from dpmine.wire import CreateDatasetRequest, CsvSource, NoisyCountRequest, SqlSource
from support.datasets import register_mushroom, register_table, table_metadata, write_table_csv
from support.servers import Account, LiveServer, add_analyst

PUBLIC_PREFIX = len("dpm_") + 6  # what the server shows of a key (PrincipalInfo.key_prefix)


def send(
    server: LiveServer,
    method: str,
    path: str,
    *,
    key: str | None = None,
    headers: dict[str, str] | None = None,
    **kwargs: Any,
) -> httpx.Response:
    """One raw HTTP request (no client-side mapping of the answer)."""
    sent_headers = dict(headers or {})
    if key is not None:
        sent_headers["Authorization"] = f"Bearer {key}"
    return httpx.request(method, f"{server.url}{path}", headers=sent_headers, timeout=30, **kwargs)


def assert_refused(response: httpx.Response, status: int, error: str) -> dict[str, str]:
    """The answer is the documented error shape with this status and class name."""
    assert response.status_code == status, (
        f"{response.request.method} {response.request.url.path}: expected {status} {error}, "
        f"got {response.status_code} {response.text[:300]}"
    )
    body: dict[str, str] = response.json()
    assert set(body) == {"error", "detail"}
    assert body["error"] == error
    return body


def fake_key() -> str:
    """A well-formed key that no principal holds."""
    return "dpm_" + secrets.token_urlsafe(32)


@pytest.fixture
def granted(owner: dpmine.Connection, analyst: Account, tmp_path: Path) -> str:
    """A small table dataset on which the analyst holds 1.0."""
    info = register_table(owner, tmp_path)
    owner.admin.grant(info.id, analyst.name, 1.0)
    return info.id


# -- 401 -------------------------------------------------------------------------------------------


def test_missing_or_malformed_key_is_401(any_server: LiveServer) -> None:
    for headers in (
        {},
        {"Authorization": ""},
        {"Authorization": "Bearer"},
        {"Authorization": "Token abc"},
        {"Authorization": f"Basic {any_server.owner_key}"},
    ):
        response = send(any_server, "GET", "/v1/datasets", headers=headers)
        body = assert_refused(response, 401, "Unauthorized")
        assert "Authorization: Bearer" in body["detail"]
        assert response.headers["WWW-Authenticate"] == "Bearer"
    assert send(any_server, "GET", "/v1/health").status_code == 200, "health needs no key"


def test_unknown_key_is_401_and_charges_nothing(
    any_server: LiveServer, owner: dpmine.Connection, granted: str
) -> None:
    unknown = fake_key()
    for method, path, body in (
        ("GET", "/v1/datasets", None),
        ("GET", f"/v1/datasets/{granted}/budget", None),
        ("POST", f"/v1/datasets/{granted}/counts", {"epsilon": 0.5}),
        ("GET", "/v1/admin/ledger", None),
    ):
        response = send(any_server, method, path, key=unknown, json=body)
        refused = assert_refused(response, 401, "Unauthorized")
        assert "unknown or disabled API key" in refused["detail"]
    assert_refused(
        send(any_server, "GET", "/v1/datasets", headers={"X-API-Key": unknown}),
        401,
        "Unauthorized",
    )
    assert owner.admin.ledger(granted) == []
    failures = [event for event in owner.admin.audit() if event.action == "auth_failed"]
    assert failures, "failed authentications are audited"
    assert all(unknown[PUBLIC_PREFIX:] not in json.dumps(e.details) for e in failures)


def test_disabled_key_is_401(
    any_server: LiveServer, owner: dpmine.Connection, analyst: Account, granted: str
) -> None:
    handle = analyst.connection.dataset(granted)
    handle.count(None, epsilon=0.25)
    disabled = owner.admin.disable(analyst.name)
    assert disabled.disabled
    with pytest.raises(dpmine.AuthenticationError) as refused:
        handle.count(None, epsilon=0.25)
    assert refused.value.status_code == 401, refused.value
    assert_refused(
        send(any_server, "GET", "/v1/datasets", key=analyst.api_key), 401, "Unauthorized"
    )
    entries = owner.admin.ledger(granted)
    assert [entry.epsilon_exact for entry in entries] == ["0.25"], "nothing charged once disabled"
    assert next(p for p in owner.admin.principals() if p.name == analyst.name).disabled


def test_rotated_key_old_fails_new_works(
    any_server: LiveServer, owner: dpmine.Connection, analyst: Account, granted: str
) -> None:
    rotated = owner.admin.rotate_key(analyst.name)
    assert rotated.api_key != analyst.api_key
    assert rotated.principal.key_prefix == rotated.api_key[:PUBLIC_PREFIX]
    assert_refused(
        send(any_server, "GET", f"/v1/datasets/{granted}/budget", key=analyst.api_key),
        401,
        "Unauthorized",
    )
    with dpmine.connect(any_server.url, rotated.api_key, retries=0) as renewed:
        budget = renewed.dataset(granted).budget()
        assert budget.grant_epsilon == 1.0
        assert renewed.dataset(granted).count(None, epsilon=0.5).receipt.epsilon_exact == "0.5"
    assert [entry.principal for entry in owner.admin.ledger(granted)] == [analyst.name]


# -- 404 / 403 -----------------------------------------------------------------------------------


def test_analyst_without_grant_sees_nothing(
    any_server: LiveServer, owner: dpmine.Connection, analyst: Account
) -> None:
    info = register_mushroom(owner)
    connection = analyst.connection
    assert info.id not in [d.id for d in connection.datasets()]
    key = analyst.api_key
    count = NoisyCountRequest(epsilon=0.5).model_dump(mode="json")
    quality = {
        "redescription": {
            "left": {"kind": "cat", "attribute": "cap-shape", "category": "x"},
            "right": {"kind": "cat", "attribute": "class", "category": "e"},
        },
        "epsilon": 0.5,
    }
    attempts: list[tuple[str, str, dict[str, Any] | None]] = [
        ("GET", f"/v1/datasets/{info.id}", None),
        ("GET", f"/v1/datasets/{info.id}/budget", None),
        ("POST", f"/v1/datasets/{info.id}/counts", count),
        ("POST", f"/v1/datasets/{info.id}/redescriptions/quality", quality),
        (
            "POST",
            f"/v1/datasets/{info.id}/estimate",
            {"calls": [{"operation": "count.noisy", "request": count}]},
        ),
        ("POST", f"/v1/datasets/{info.id}/jobs", {"operation": "count.noisy", "request": count}),
    ]
    for method, path, body in attempts:
        refused = assert_refused(
            send(any_server, method, path, key=key, json=body), 404, "NotFound"
        )
        # The answer is the same as for a dataset that does not exist: no existence leak.
        missing = send(
            any_server, method, path.replace(info.id, "no-such-dataset"), key=key, json=body
        )
        assert refused["detail"].replace(info.id, "X") == missing.json()["detail"].replace(
            "no-such-dataset", "X"
        )
    with pytest.raises(dpmine.NotFoundError):
        connection.dataset(info.id)
    assert owner.admin.ledger(info.id) == []
    assert owner.admin.verify_ledger()["consistent"]


def test_retired_dataset_is_gone_for_analysts(
    owner: dpmine.Connection, analyst: Account, granted: str
) -> None:
    handle = analyst.connection.dataset(granted)
    handle.count(None, epsilon=0.25)
    retired = owner.admin.retire_dataset(granted)
    assert retired.status == "retired"
    assert granted not in [d.id for d in analyst.connection.datasets()]
    with pytest.raises(dpmine.NotFoundError):
        handle.count(None, epsilon=0.25)
    entries = owner.admin.ledger(granted)
    assert [entry.status for entry in entries] == ["released"], (
        "the ledger of a retired dataset stays"
    )


def test_analyst_cannot_use_owner_endpoints(
    any_server: LiveServer, owner: dpmine.Connection, analyst: Account, granted: str, tmp_path: Path
) -> None:
    key = analyst.api_key
    sql = CreateDatasetRequest(
        id="stolen-sql",
        name="x",
        epsilon_cap=1000.0,
        metadata=table_metadata(),
        source=SqlSource(url="sqlite:///x.db", table="t"),
    ).model_dump(mode="json")
    attempts: list[tuple[str, str, dict[str, Any]]] = [
        ("POST", "/v1/admin/principals", {"json": {"name": "mallory", "role": "owner"}}),
        ("GET", "/v1/admin/principals", {}),
        ("POST", "/v1/admin/principals/admin/rotate-key", {}),
        ("POST", "/v1/admin/principals/admin/disable", {}),
        ("POST", f"/v1/admin/principals/{analyst.name}/rotate-key", {}),
        ("POST", "/v1/admin/datasets", {"json": sql}),
        ("DELETE", f"/v1/admin/datasets/{granted}", {}),
        (
            "PUT",
            f"/v1/admin/datasets/{granted}/grants",
            {"json": {"analyst": analyst.name, "epsilon": 999.0}},
        ),
        ("GET", f"/v1/admin/datasets/{granted}/grants", {}),
        ("GET", "/v1/admin/ledger", {}),
        ("GET", "/v1/admin/ledger", {"params": {"format": "csv"}}),
        ("GET", "/v1/admin/ledger/verify", {}),
        ("GET", "/v1/admin/audit", {}),
        (
            "POST",
            "/v1/admin/datasets/propose-metadata",
            {
                "data": {"source": '{"format": "csv", "path": "path"}', "kind": "table"},
                "files": {"path": ("t.csv", b"a,b\n1,2\n")},
            },
        ),
    ]
    for method, path, kwargs in attempts:
        body = assert_refused(send(any_server, method, path, key=key, **kwargs), 403, "Forbidden")
        assert "owner" in body["detail"]
    csv_path = write_table_csv(tmp_path)
    upload = CreateDatasetRequest(
        id="stolen-upload",
        name="x",
        epsilon_cap=1000.0,
        metadata=table_metadata(),
        source=CsvSource(path=csv_path.name),
    )
    with pytest.raises(dpmine.PermissionDeniedError):
        analyst.connection.admin.upload_dataset(upload, {"path": csv_path})

    # Nothing changed.
    assert {"stolen-sql", "stolen-upload"}.isdisjoint(d.id for d in owner.datasets())
    names = {p.name: p for p in owner.admin.principals()}
    assert "mallory" not in names
    assert not names["admin"].disabled
    assert analyst.connection.dataset(granted).budget().grant_epsilon == 1.0
    with dpmine.connect(any_server.url, key, retries=0) as same_key:
        assert same_key.dataset(granted).budget().remaining_epsilon == 1.0


def test_owner_cannot_spend(owner: dpmine.Connection, granted: str) -> None:
    handle = owner.dataset(granted)
    with pytest.raises(dpmine.PermissionDeniedError) as refused:
        handle.count(None, epsilon=0.5)
    assert "analyst" in refused.value.detail
    with pytest.raises(dpmine.PermissionDeniedError):
        handle.quality("[smoker]", "[region = north]", epsilon=0.5)
    with pytest.raises(dpmine.PermissionDeniedError):
        handle.submit("count.noisy", NoisyCountRequest(epsilon=0.5))
    assert owner.admin.ledger(granted) == []


# -- keys never leak -------------------------------------------------------------------------------


def test_api_keys_never_appear_in_logs_or_audit(
    any_server: LiveServer, owner: dpmine.Connection, granted: str
) -> None:
    keys = [any_server.owner_key]
    account = add_analyst(any_server, owner)
    with account.connection:
        keys.append(account.api_key)
        owner.admin.grant(granted, account.name, 0.5)
        account.connection.dataset(granted).count("[smoker]", epsilon=0.25)
        rotated = owner.admin.rotate_key(account.name)
        keys.append(rotated.api_key)
        for key in (account.api_key, fake_key()):  # an old and an unknown key
            keys.append(key)
            send(any_server, "GET", "/v1/datasets", key=key)
            send(any_server, "GET", "/v1/datasets", headers={"X-API-Key": key})
        with dpmine.connect(any_server.url, rotated.api_key, retries=0) as renewed:
            renewed.dataset(granted).count(None, epsilon=0.25)
        owner.admin.disable(account.name)
        send(any_server, "GET", "/v1/datasets", key=rotated.api_key)

    log = any_server.log_text()
    assert '"GET /v1/datasets HTTP/1.1"' in log, "the access log must be on for this check"
    exports = json.dumps(
        [
            [event.model_dump(mode="json") for event in owner.admin.audit()],
            [principal.model_dump(mode="json") for principal in owner.admin.principals()],
            [entry.model_dump(mode="json") for entry in owner.admin.ledger()],
            owner.admin.ledger_csv(),
        ]
    )
    for key in keys:
        secret = key[PUBLIC_PREFIX:]
        assert secret not in log, "an API key appears in the server log"
        assert secret not in exports, "an API key appears in the audit log or an export"
