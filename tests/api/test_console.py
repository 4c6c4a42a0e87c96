"""The owner console (``/console``) in-process: login (owners only, throttled like the API),
signed expiring sessions, CSRF and same-origin checks on every POST, the security headers, the
pages over the owner operations (grants, principals, ledger, audit, jobs) and the CSV exports.
The browser test is tests/e2e/test_console_browser.py.
"""

from __future__ import annotations

import csv
import io
import re
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

import dpmine
from dpmine.wire import DatasetMetadata
from dpmine_server.api.console import sessions
from dpmine_server.api.console.plot import Charge, cumulative_chart
from dpmine_server.api.console.routes import SECURITY_HEADERS
from dpmine_server.app import create_app
from dpmine_server.operations.testing import TEST_SPIN, SpinCountRequest
from dpmine_server.settings import Settings
from support.inprocess import BASE_URL, TestClient, bearer, connect, open_client

SAME_ORIGIN = {"Origin": BASE_URL}
SECRET = "console-tests-secret-0123456789abcdef"
CSRF = re.compile(r'name="csrf" value="([0-9a-f]{64})"')


@pytest.fixture
def owner_key(owner_headers: dict[str, str]) -> str:
    """The bootstrap owner's API key."""
    return owner_headers["Authorization"].removeprefix("Bearer ")


def login(client: TestClient, key: str) -> httpx.Response:
    """POST the login form as a browser on this origin would."""
    response: httpx.Response = client.post(
        "/console/login", data={"key": key}, headers=SAME_ORIGIN, follow_redirects=False
    )
    return response


def csrf_of(client: TestClient, page: str = "/console/grants") -> str:
    """The CSRF token in a console page's forms."""
    response = client.get(page, follow_redirects=False)
    assert response.status_code == 200, response.text
    match = CSRF.search(response.text)
    assert match, "every page of a logged-in owner carries the CSRF token"
    return match.group(1)


def post_form(
    client: TestClient, path: str, data: dict[str, str], *, token: str | None
) -> httpx.Response:
    """A console form submission (with the CSRF token unless ``token`` is None)."""
    fields = dict(data) if token is None else {**data, "csrf": token}
    response: httpx.Response = client.post(
        path, data=fields, headers=SAME_ORIGIN, follow_redirects=False
    )
    return response


def assert_hardened(response: httpx.Response) -> None:
    """Every console response carries the strict headers; no page runs a script."""
    for name, value in SECURITY_HEADERS.items():
        assert response.headers.get(name) == value, name
    assert "<script" not in response.text.lower()
    assert " style=" not in response.text, "inline styles would break the CSP"


def read_csv(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


# -- login and sessions --------------------------------------------------------------------------


def test_pages_need_a_session(client: TestClient) -> None:
    for path in ("/console", "/console/datasets", "/console/ledger", "/console/ledger.csv"):
        response = client.get(path, follow_redirects=False)
        assert response.status_code == 303, path
        assert response.headers["location"] in {"/console/login", "/console/datasets"}
        assert_hardened(response)
    page = client.get("/console/login", follow_redirects=False)
    assert page.status_code == 200
    assert_hardened(page)
    assert 'type="password" name="key"' in page.text
    assert (
        client.get("/console/static/console.css", follow_redirects=False)
        .headers["content-type"]
        .startswith("text/css")
    )


def test_an_owner_logs_in_with_a_hardened_cookie(
    client: TestClient, owner_key: str, api_settings: Settings
) -> None:
    response = login(client, owner_key)
    assert response.status_code == 303, response.text
    assert response.headers["location"] == "/console/datasets"
    cookie = response.headers["set-cookie"]
    assert cookie.startswith(f"{sessions.COOKIE}=")
    for attribute in ("HttpOnly", "Path=/console", "SameSite=strict"):
        assert attribute.lower() in cookie.lower(), attribute
    assert "secure" not in cookie.lower(), "Secure only when the request came over https"
    assert owner_key not in cookie
    page = client.get("/console/datasets", follow_redirects=False)
    assert page.status_code == 200
    assert_hardened(page)
    assert "admin" in page.text  # the bootstrap owner's name
    assert owner_key not in page.text
    assert api_settings.secret_key not in page.text


def test_the_cookie_is_secure_over_https(app: FastAPI, owner_key: str) -> None:
    with TestClient(app, base_url="https://testserver", raise_server_exceptions=False) as https:
        response = https.post(
            "/console/login",
            data={"key": owner_key},
            headers={"Origin": "https://testserver"},
            follow_redirects=False,
        )
        assert response.status_code == 303
        assert "; secure" in response.headers["set-cookie"].lower()
        assert https.get("/console/datasets", follow_redirects=False).status_code == 200


def test_an_analyst_key_is_refused_without_a_session(
    client: TestClient, owner: dpmine.Connection, analyst_key: str
) -> None:
    response = login(client, analyst_key)
    assert response.status_code == 403
    assert "for data owners" in response.text
    assert "set-cookie" not in response.headers
    assert analyst_key not in response.text
    assert_hardened(response)
    assert client.get("/console/datasets", follow_redirects=False).status_code == 303
    events = owner.admin.audit()
    assert any(e.action == "console_refused" for e in events)


def test_a_bad_key_is_401_and_counted_like_an_api_login(
    client: TestClient, owner: dpmine.Connection
) -> None:
    response = login(client, "dpm_" + "x" * 43)
    assert response.status_code == 401
    assert "unknown or disabled API key" in response.text
    assert "set-cookie" not in response.headers
    events = owner.admin.audit()
    assert any(e.action == "auth_failed" for e in events), "the API's failed-login audit"


def test_failed_logins_are_throttled_like_api_logins(api_settings: Settings) -> None:
    strict = api_settings.model_copy(update={"login_failures_per_client": 3})
    with open_client(create_app(strict)) as client:
        statuses = [login(client, "dpm_" + "y" * 43).status_code for _ in range(4)]
        assert statuses == [401, 401, 401, 429]
        refused = login(client, "dpm_" + "y" * 43)
        assert "too many failed logins" in refused.text
        assert int(refused.headers["Retry-After"]) >= 1
        assert_hardened(refused)


def test_login_from_another_origin_is_refused(client: TestClient, owner_key: str) -> None:
    for headers in ({"Origin": "http://evil.example"}, {}):
        response = client.post(
            "/console/login", data={"key": owner_key}, headers=headers, follow_redirects=False
        )
        assert response.status_code == 403, headers
        assert "set-cookie" not in response.headers
    referred = client.post(
        "/console/login",
        data={"key": owner_key},
        headers={"Referer": f"{BASE_URL}/console/login"},
        follow_redirects=False,
    )
    assert referred.status_code == 303, "a same-origin Referer is enough"


def test_logout_ends_the_session_even_for_a_kept_cookie(
    client: TestClient, owner: dpmine.Connection, owner_key: str
) -> None:
    login(client, owner_key)
    token = client.cookies[sessions.COOKIE]
    response = post_form(client, "/console/logout", {}, token=csrf_of(client))
    assert response.status_code == 303
    assert response.headers["location"] == "/console/login"
    client.cookies.set(sessions.COOKIE, token, path="/console")
    assert client.get("/console/datasets", follow_redirects=False).status_code == 303, (
        "a logged-out token is dead"
    )
    actions = [e.action for e in owner.admin.audit()]
    assert {"console_login", "console_logout"} <= set(actions)


def test_rotating_or_disabling_the_owner_ends_its_sessions(
    client: TestClient, owner: dpmine.Connection
) -> None:
    second = owner.admin.add_principal("second-owner", "owner")
    login(client, second.api_key)
    assert client.get("/console/datasets", follow_redirects=False).status_code == 200
    rotated = owner.admin.rotate_key("second-owner")
    assert client.get("/console/datasets", follow_redirects=False).status_code == 303, (
        "the session was bound to the key"
    )
    login(client, rotated.api_key)
    assert client.get("/console/datasets", follow_redirects=False).status_code == 200
    owner.admin.disable("second-owner")
    assert client.get("/console/datasets", follow_redirects=False).status_code == 303


def test_session_tokens_are_signed_and_expire() -> None:
    now = int(time.time())
    started = sessions.new_session(principal_id=1, binding="b", now=now, audit_floor=0)
    token = sessions.encode(started, SECRET)
    assert sessions.decode(token, SECRET, now=now) == started
    assert sessions.decode(token, "another-secret-0123456789abcdef", now=now) is None
    payload, _, signature = token.partition(".")
    assert sessions.decode(f"{payload}x.{signature}", SECRET, now=now) is None
    assert sessions.decode(payload, SECRET, now=now) is None
    assert sessions.decode(f"{payload}.é", SECRET, now=now) is None
    idle = now + sessions.IDLE_S + 1
    assert sessions.decode(token, SECRET, now=idle) is None
    busy = replace(started, seen=now + sessions.ABSOLUTE_S - 10)
    late = now + sessions.ABSOLUTE_S + 1
    assert sessions.decode(sessions.encode(busy, SECRET), SECRET, now=late) is None
    assert sessions.csrf_token(SECRET, "a") != sessions.csrf_token(SECRET, "b")


def test_same_origin_reads_origin_then_referer() -> None:
    assert sessions.same_origin("h:1", "http://h:1", None)
    assert not sessions.same_origin("h:1", "http://h:2", "http://h:1/console")
    assert sessions.same_origin("h:1", "null", "http://h:1/console/grants")
    assert not sessions.same_origin("h:1", None, None)
    assert not sessions.same_origin(None, "http://h:1", None)


# -- CSRF ----------------------------------------------------------------------------------------


def test_a_post_without_the_csrf_token_or_from_elsewhere_changes_nothing(
    client: TestClient, owner: dpmine.Connection, owner_key: str, toy: str, bob_key: str
) -> None:
    del bob_key  # bob must exist
    login(client, owner_key)
    token = csrf_of(client)
    grant = {"dataset_id": toy, "analyst": "bob", "epsilon": "1.5"}
    for sent in (None, "0" * 64):
        refused = post_form(client, "/console/grants", grant, token=sent)
        assert refused.status_code == 403
        assert "CSRF token" in refused.text
        assert_hardened(refused)
    foreign = client.post(
        "/console/grants",
        data={**grant, "csrf": token},
        headers={"Origin": "http://evil.example"},
        follow_redirects=False,
    )
    assert foreign.status_code == 403
    assert "Origin/Referer" in foreign.text
    assert [g.analyst for g in owner.admin.grants(toy)] == ["alice"]
    assert (
        client.get(
            "/console/grants", params={"dataset_id": toy}, follow_redirects=False
        ).status_code
        == 200
    )
    accepted = post_form(client, "/console/grants", grant, token=token)
    assert accepted.status_code == 303
    assert {g.analyst: g.epsilon for g in owner.admin.grants(toy)} == {"alice": 5.0, "bob": 1.5}


# -- grants, principals --------------------------------------------------------------------------


def test_grants_are_set_changed_and_revoked(
    client: TestClient,
    owner: dpmine.Connection,
    owner_key: str,
    analyst: dpmine.Connection,
    toy: str,
) -> None:
    login(client, owner_key)
    token = csrf_of(client)
    changed = post_form(
        client,
        "/console/grants",
        {"dataset_id": toy, "analyst": "alice", "epsilon": "2"},
        token=token,
    )
    assert changed.status_code == 303
    assert "Grant saved" in client.get(changed.headers["location"], follow_redirects=False).text
    analyst.dataset(toy).count(None, epsilon=0.5)
    below = post_form(
        client,
        "/console/grants",
        {"dataset_id": toy, "analyst": "alice", "epsilon": "0.1"},
        token=token,
    )
    assert below.status_code == 422
    assert "already spent" in below.text
    bad = post_form(
        client,
        "/console/grants",
        {"dataset_id": toy, "analyst": "alice", "epsilon": "x"},
        token=token,
    )
    assert bad.status_code == 422
    assert "not a number" in bad.text
    revoke = {"dataset_id": toy, "analyst": "alice"}
    unconfirmed = post_form(client, "/console/grants/revoke", revoke, token=token)
    assert unconfirmed.status_code == 422
    assert "tick the confirmation box" in unconfirmed.text
    assert owner.admin.grants(toy)[0].remaining == 1.5, "nothing changed unconfirmed"
    revoked = post_form(client, "/console/grants/revoke", {**revoke, "confirm": "yes"}, token=token)
    assert revoked.status_code == 303
    [grant] = owner.admin.grants(toy)
    assert (grant.epsilon, grant.spent, grant.remaining) == (0.5, 0.5, 0.0)
    with pytest.raises(dpmine.BudgetExhaustedError):
        analyst.dataset(toy).count(None, epsilon=0.1)
    actions = [e.action for e in owner.admin.audit()]
    assert {"grant_set", "grant_revoked"} <= set(actions)
    assert owner.admin.verify_ledger()["consistent"]


def test_budgets_show_as_exact_decimals(
    client: TestClient,
    owner_key: str,
    analyst: dpmine.Connection,
    toy: str,
) -> None:
    """Issue #22: three charges of 0.1 and one of 0.0234567 on a grant of 1 show as 1, 0.3234567
    and 0.6765433 (not 1.0, a float's 0.30000000000000004 or a rounded 0.323457)."""
    login(client, owner_key)
    grant = {"dataset_id": toy, "analyst": "alice", "epsilon": "1"}
    assert post_form(client, "/console/grants", grant, token=csrf_of(client)).status_code == 303
    for epsilon in (0.1, 0.1, 0.1, 0.0234567):
        analyst.dataset(toy).count(None, epsilon=epsilon)
    grants = " ".join(client.get("/console/grants").text.split())
    cells = '<td class="num">1</td> <td class="num">0.3234567</td><td class="num">0.6765433</td>'
    assert cells in grants, grants
    datasets = client.get("/console/datasets").text
    assert "alice: ε 0.3234567</li>" in datasets
    assert f"{toy}: ε 0.3234567</li>" in datasets


def test_revoking_an_unspent_grant_removes_it(
    client: TestClient, owner: dpmine.Connection, owner_key: str, toy: str
) -> None:
    login(client, owner_key)
    revoked = post_form(
        client,
        "/console/grants/revoke",
        {"dataset_id": toy, "analyst": "alice", "confirm": "yes"},
        token=csrf_of(client),
    )
    assert revoked.status_code == 303
    assert owner.admin.grants(toy) == []
    again = post_form(
        client,
        "/console/grants/revoke",
        {"dataset_id": toy, "analyst": "alice", "confirm": "yes"},
        token=csrf_of(client),
    )
    assert again.status_code == 404
    assert "holds no grant" in again.text


def test_principals_are_added_rotated_and_disabled_with_keys_shown_once(
    client: TestClient, owner: dpmine.Connection, owner_key: str
) -> None:
    login(client, owner_key)
    token = csrf_of(client, "/console/principals")
    added = post_form(
        client, "/console/principals", {"name": "carol", "role": "analyst"}, token=token
    )
    assert added.status_code == 200
    assert_hardened(added)
    key = re.search(r'<output class="key">(dpm_[A-Za-z0-9_\-]+)</output>', added.text)
    assert key, added.text
    carol = connect(key.group(1), client)
    assert carol.datasets() == []
    listing = client.get("/console/principals", follow_redirects=False).text
    assert "carol" in listing
    assert key.group(1) not in listing
    duplicate = post_form(
        client, "/console/principals", {"name": "carol", "role": "analyst"}, token=token
    )
    assert duplicate.status_code == 409
    invalid = post_form(
        client, "/console/principals", {"name": "no spaces", "role": "analyst"}, token=token
    )
    assert invalid.status_code == 422
    rotated = post_form(client, "/console/principals/carol/rotate-key", {}, token=token)
    new_key = re.search(r'<output class="key">(dpm_[A-Za-z0-9_\-]+)</output>', rotated.text)
    assert new_key
    assert new_key.group(1) != key.group(1)
    with pytest.raises(dpmine.AuthenticationError):
        carol.datasets()
    assert connect(new_key.group(1), client).datasets() == []
    disabled = post_form(
        client, "/console/principals/carol/disable", {"confirm": "carol"}, token=token
    )
    assert disabled.status_code == 303
    with pytest.raises(dpmine.AuthenticationError):
        connect(new_key.group(1), client).datasets()
    assert [p.disabled for p in owner.admin.principals() if p.name == "carol"] == [True]


# -- ledger, audit, jobs, datasets ----------------------------------------------------------------


def test_ledger_page_filters_charts_and_csv(
    client: TestClient, owner_key: str, analyst: dpmine.Connection, toy: str, bob_key: str
) -> None:
    del bob_key
    login(client, owner_key)
    analyst.dataset(toy).count(None, epsilon=0.25)
    analyst.dataset(toy).count("[smoker]", epsilon=0.5)
    page = client.get("/console/ledger", params={"principal": "alice"}, follow_redirects=False)
    assert page.status_code == 200
    assert_hardened(page)
    assert "2 matching entries" in page.text
    assert "<polyline" in page.text
    assert "alice: ε 0.75" in page.text
    exported = client.get(
        "/console/ledger.csv", params={"principal": "alice", "dataset": toy}, follow_redirects=False
    )
    assert exported.status_code == 200
    assert exported.headers["content-type"].startswith("text/csv")
    assert "attachment" in exported.headers["content-disposition"]
    rows = read_csv(exported.text)
    assert [r["epsilon_exact"] for r in rows] == ["0.25", "0.5"]
    assert {r["principal"] for r in rows} == {"alice"}
    assert "release" not in rows[0], "releases stay in the API export"
    today = datetime.now(UTC).date()
    for params, expected in (
        ({"principal": "bob"}, 0),
        ({"status": "released"}, 2),
        ({"status": "failed"}, 0),
        ({"since": today.isoformat(), "until": today.isoformat()}, 2),
        ({"since": (today + timedelta(days=1)).isoformat()}, 0),
    ):
        assert (
            len(
                read_csv(
                    client.get("/console/ledger.csv", params=params, follow_redirects=False).text
                )
            )
            == expected
        )
    bad = client.get("/console/ledger", params={"since": "yesterday"}, follow_redirects=False)
    assert bad.status_code == 422
    assert "YYYY-MM-DD" in bad.text
    link = re.search(r'href="(/console/ledger\.csv\?[^"]*)"', page.text)
    assert link
    assert "principal=alice" in link.group(1)


def test_audit_page_and_csv(
    client: TestClient, owner: dpmine.Connection, owner_key: str, toy: str
) -> None:
    login(client, owner_key)
    page = client.get("/console/audit", params={"action": "grant_set"}, follow_redirects=False)
    assert page.status_code == 200
    assert f"{toy}/alice" in page.text
    rows = read_csv(
        client.get(
            "/console/audit.csv", params={"action": "grant_set"}, follow_redirects=False
        ).text
    )
    assert [r["target"] for r in rows] == [f"{toy}/alice"]
    assert rows[0]["principal"] == "admin"
    assert rows[0]["details"] == '{"epsilon": 5.0}'
    everything = read_csv(client.get("/console/audit.csv", follow_redirects=False).text)
    assert len(everything) == len(owner.admin.audit())


def test_datasets_page_shows_metadata_cap_and_spending(
    client: TestClient, owner_key: str, analyst: dpmine.Connection, toy: str
) -> None:
    analyst.dataset(toy).count(None, epsilon=1.25)
    login(client, owner_key)
    page = client.get("/console/datasets", follow_redirects=False)
    assert page.status_code == 200
    assert toy in page.text
    assert "views" in page.text
    row = re.search(rf"<td>{toy}</td>.*?</tr>", page.text, re.S)
    assert row
    assert re.findall(r'<td class="num">([^<]+)</td>', row.group(0)) == ["10", "1.25", "8.75"]
    assert "n<sub>max</sub> = 1000" in page.text, "the public metadata, in words"
    assert "<caption>left view</caption>" in page.text, "a table per view"
    assert "ε spent per dataset" in page.text
    assert "ε spent per analyst" in page.text


@pytest.fixture
def ztoy(
    owner: dpmine.Connection,
    register: Callable[..., str],
    toy_csv: Path,
    toy_metadata: DatasetMetadata,
) -> str:
    """The toy data on a zCDP ledger capped at ρ = 0.05 (issue #24), and analyst carol."""
    owner.admin.add_principal("carol", "analyst")
    return register("ztoy", toy_csv, toy_metadata, cap=0.05, zcdp=True)


def test_a_zcdp_dataset_is_granted_in_rho_and_listed_with_its_unit(
    client: TestClient, owner: dpmine.Connection, owner_key: str, ztoy: str
) -> None:
    login(client, owner_key)
    grant = {"dataset_id": ztoy, "analyst": "carol", "epsilon": "0.02"}  # the form's amount
    assert post_form(client, "/console/grants", grant, token=csrf_of(client)).status_code == 303
    [granted] = owner.admin.grants(ztoy)
    assert granted.zcdp is not None
    assert granted.zcdp.rho_exact == "0.02", "the amount is read in the dataset's unit, rho"
    row = re.search(rf"<td>{ztoy}</td>.*?</tr>", client.get("/console/datasets").text, re.S)
    assert row
    assert "zCDP: ρ cap 0.05, spent 0.0; ε at δ=1e-06 (default)" in row.group(0)


def test_a_cap_is_changed_and_a_dataset_retired_from_the_datasets_page(
    client: TestClient, owner_key: str, analyst: dpmine.Connection, toy: str
) -> None:
    """The cap form saves (never below what was spent, an error that says so), and retiring
    needs the dataset's id typed: a missing or wrong confirmation changes nothing."""
    analyst.dataset(toy).count(None, epsilon=1.25)
    login(client, owner_key)
    token = csrf_of(client, "/console/datasets")
    saved = post_form(client, f"/console/datasets/{toy}/cap", {"epsilon_cap": "4"}, token=token)
    assert (saved.status_code, saved.headers["location"]) == (
        303,
        "/console/datasets?notice=cap_set",
    )
    page = client.get("/console/datasets?notice=cap_set").text
    assert "Cap saved." in page
    row = re.search(rf"<td>{toy}</td>.*?</tr>", page, re.S)
    assert row
    assert re.findall(r'<td class="num">([^<]+)</td>', row.group(0)) == ["4", "1.25", "2.75"]
    below = post_form(client, f"/console/datasets/{toy}/cap", {"epsilon_cap": "1"}, token=token)
    assert below.status_code == 422
    assert "already spent 1.25" in below.text
    for confirm in ("", "wrong"):
        kept = post_form(
            client, f"/console/datasets/{toy}/retire", {"confirm": confirm}, token=token
        )
        assert kept.status_code == 422
        assert "type its id" in kept.text
    assert analyst.dataset(toy).count(None, epsilon=0.25).count is not None
    retired = post_form(client, f"/console/datasets/{toy}/retire", {"confirm": toy}, token=token)
    assert retired.status_code == 303
    assert "Dataset retired" in client.get("/console/datasets?notice=retired").text
    with pytest.raises(dpmine.NotFoundError):
        analyst.dataset(toy).count(None, epsilon=0.25)
    no_token = post_form(client, f"/console/datasets/{toy}/cap", {"epsilon_cap": "9"}, token=None)
    assert no_token.status_code in {403, 422}


def test_jobs_page_lists_running_jobs(
    client: TestClient, owner_key: str, toy: str, analyst_headers: dict[str, str]
) -> None:
    login(client, owner_key)
    body = SpinCountRequest(epsilon=0.5, seconds=30.0).model_dump(mode="json")
    submitted = client.post(
        f"/v1/datasets/{toy}/jobs",
        json={"operation": TEST_SPIN.name, "request": body},
        headers=analyst_headers,
        follow_redirects=False,
    )
    assert submitted.status_code == 202, submitted.text
    job_id = submitted.json()["id"]
    try:
        page = client.get("/console/jobs", follow_redirects=False)
        assert page.status_code == 200
        assert job_id in page.text
        assert TEST_SPIN.name in page.text
    finally:
        client.post(f"/v1/jobs/{job_id}/cancel", headers=analyst_headers, follow_redirects=False)


def test_unknown_console_pages_are_404_pages(client: TestClient, owner_key: str) -> None:
    login(client, owner_key)
    response = client.get("/console/nothing-here", follow_redirects=False)
    assert response.status_code == 404
    assert_hardened(response)
    assert "no such console page" in response.text
    api = client.get("/v1/admin/principals", headers=bearer(owner_key), follow_redirects=False)
    assert api.status_code == 200
    assert "content-security-policy" not in api.headers


# -- the chart -----------------------------------------------------------------------------------


def test_cumulative_chart_steps_up_per_label() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    charges = [
        Charge(start, "a", Decimal(1)),
        Charge(start + timedelta(hours=1), "b", Decimal("0.5")),
        Charge(start + timedelta(hours=2), "a", Decimal(2)),
    ]
    chart = cumulative_chart("t", charges)
    assert [(s.label, s.total) for s in chart.series] == [("a", 3), ("b", Decimal("0.5"))]
    assert chart.y_ticks[-1][1] == "5", "the axis ends at a round value above the largest total"
    ys = [float(p.split(",")[1]) for p in chart.series[0].points.split()]
    assert ys == sorted(ys, reverse=True), "a cumulative line never goes down (SVG y grows down)"
    assert (chart.start, chart.end) == ("2026-01-01 00:00", "2026-01-01 02:00")
    assert cumulative_chart("t", []).series == ()
    tenths = cumulative_chart("t", [Charge(start, "c", Decimal("0.1"))] * 3)
    assert [s.total for s in tenths.series] == [Decimal("0.3")], "exact, not 0.30000000000000004"
    many = cumulative_chart(
        "t", [Charge(start, str(i), Decimal(1 + i)) for i in range(10)], max_lines=8
    )
    assert (len(many.series), many.hidden) == (8, 2)
