"""The owner console in a real headless browser (Debian's ``chromium`` driven by Selenium through
``chromedriver``) against a real uvicorn server: an owner logs in with its key, grants a budget
through the page, an analyst spends it over HTTP with the dpmine client, and the ledger page
shows the charge and the jobs page the analyst's job; the owner registers a data-folder file
from its reviewed metadata proposal; an analyst's key gets no session; the pages keep to their
content security policy; a POST without the CSRF token changes nothing.

Skipped when chromium or chromedriver is missing, except under CI (``CI`` set): there it fails.
Selenium is given both binaries, so it downloads nothing.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from selenium.webdriver import Chrome as WebDriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.command import Command
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import Select, WebDriverWait

import dpmine
from dpmine_server.api.console import sessions
from dpmine_server.api.console.routes import SECURITY_HEADERS
from dpmine_server.operations.testing import SpinCountRequest
from support.datasets import register_table, write_table_csv
from support.servers import LiveServer, add_analyst

CHROMIUM_ARGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
)


def _binary(*candidates: str) -> str | None:
    for candidate in candidates:
        found = shutil.which(candidate)
        if found:
            return found
    return None


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    """A headless Chromium with a throwaway profile, logging its console messages."""
    chromium = _binary("chromium", "chromium-browser")
    driver_path = _binary("chromedriver")
    if chromium is None or driver_path is None:
        reason = "the console browser test needs Debian's chromium and chromium-driver packages"
        if os.environ.get("CI"):
            pytest.fail(f"{reason} under CI (.ci/run installs them)")
        pytest.skip(reason)
    options = Options()
    options.binary_location = chromium
    for argument in (*CHROMIUM_ARGS, f"--user-data-dir={tmp_path_factory.mktemp('chromium')}"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = WebDriver(service=Service(executable_path=driver_path), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def _arrive(browser: WebDriver, url: str) -> None:
    """Wait until a click or a form submission has loaded ``url`` (clicks do not wait)."""
    WebDriverWait(browser, 30).until(expected_conditions.url_to_be(url))
    WebDriverWait(browser, 30).until(
        lambda driver: driver.execute_script("return document.readyState") == "complete"
    )


def _submit_key(browser: WebDriver, server: LiveServer, key: str) -> None:
    browser.get(f"{server.url}/console/login")
    field = browser.find_element(By.NAME, "key")
    field.send_keys(key)
    field.submit()


def _csp_violations(browser: WebDriver) -> list[str]:
    """Messages of the browser console about a refused resource (``get_log`` is untyped)."""
    entries: list[dict[str, str]] = browser.execute(Command.GET_LOG, {"type": "browser"})["value"]
    return [
        entry["message"]
        for entry in entries
        if "Content Security Policy" in entry["message"] or "Refused to" in entry["message"]
    ]


def test_owner_grants_in_the_browser_and_sees_the_analysts_charge(
    browser: WebDriver, sqlite_server: LiveServer, tmp_path: Path
) -> None:
    server = sqlite_server
    with dpmine.connect(server.url, server.owner_key, retries=0) as owner:
        dataset = register_table(owner, tmp_path).id
        analyst = add_analyst(server, owner)

    _submit_key(browser, server, server.owner_key)
    _arrive(browser, f"{server.url}/console/datasets")
    assert dataset in browser.find_element(By.TAG_NAME, "table").text
    assert server.owner_key not in browser.page_source
    assert browser.execute_script("return document.cookie") == "", "the session is HttpOnly"
    header = browser.find_element(By.TAG_NAME, "header")
    assert header.value_of_css_property("background-color") == "rgba(29, 53, 87, 1)", (
        "the stylesheet loads under the CSP"
    )

    browser.find_element(By.LINK_TEXT, "Grants").click()
    _arrive(browser, f"{server.url}/console/grants")
    form = browser.find_element(By.ID, "set-grant")
    Select(form.find_element(By.NAME, "dataset_id")).select_by_value(dataset)
    Select(form.find_element(By.NAME, "analyst")).select_by_value(analyst.name)
    form.find_element(By.NAME, "epsilon").send_keys("1.5")
    form.find_element(By.TAG_NAME, "button").click()
    _arrive(browser, f"{server.url}/console/grants?notice=grant_set")
    assert "Grant saved." in browser.find_element(By.CLASS_NAME, "notice").text
    rows = [row.text for row in browser.find_elements(By.CSS_SELECTOR, "table tbody tr")]
    assert any(dataset in row and analyst.name in row and "1.5" in row for row in rows), rows

    with analyst.connection:
        analyst.connection.dataset(dataset).count(None, epsilon=0.25)

    browser.find_element(By.LINK_TEXT, "Ledger").click()
    _arrive(browser, f"{server.url}/console/ledger")
    ledger = [row.text for row in browser.find_elements(By.CSS_SELECTOR, "#ledger tbody tr")]
    assert any(analyst.name in row and dataset in row and "0.25" in row for row in ledger), ledger
    assert browser.find_elements(By.CSS_SELECTOR, "figure.chart svg polyline")
    assert f"{analyst.name}: ε 0.25" in browser.page_source
    assert _csp_violations(browser) == []

    # The jobs page shows an analyst's job with its charge (queued, running or finished).
    with dpmine.connect(server.url, analyst.api_key, retries=0) as again:
        job = again.dataset(dataset).submit(
            "test.spin", SpinCountRequest(epsilon=0.125, seconds=0.0)
        )
    browser.find_element(By.LINK_TEXT, "Jobs").click()
    _arrive(browser, f"{server.url}/console/jobs")
    jobs = [row.text for row in browser.find_elements(By.CSS_SELECTOR, "table tbody tr")]
    assert any(job.id in row and "0.125" in row and "test.spin" in row for row in jobs), jobs

    # The owner lowers the cap, then retires the dataset after typing its id.
    browser.find_element(By.LINK_TEXT, "Datasets").click()
    _arrive(browser, f"{server.url}/console/datasets")
    cap = browser.find_element(By.NAME, "epsilon_cap")
    cap.clear()
    cap.send_keys("3")
    cap.submit()
    _arrive(browser, f"{server.url}/console/datasets?notice=cap_set")
    assert "Cap saved." in browser.find_element(By.CLASS_NAME, "notice").text
    with dpmine.connect(server.url, server.owner_key, retries=0) as owner:
        assert owner.admin.cap(dataset).epsilon_cap == 3.0
    browser.find_element(By.XPATH, "//summary[text()='retire…']").click()
    confirm = browser.find_element(By.NAME, "confirm")
    confirm.send_keys(dataset)
    confirm.submit()
    _arrive(browser, f"{server.url}/console/datasets?notice=retired")
    assert "retired" in browser.find_element(By.TAG_NAME, "table").text
    assert _csp_violations(browser) == []

    # The owner registers a file of the data folder from its reviewed metadata proposal.
    incoming = server.data_dir / "incoming"
    incoming.mkdir(parents=True, exist_ok=True)
    source = f"incoming/{write_table_csv(incoming).name}"
    browser.get(f"{server.url}/console/datasets")
    browser.find_element(By.LINK_TEXT, "Register a dataset").click()
    _arrive(browser, f"{server.url}/console/datasets/new")
    form = browser.find_element(By.ID, "propose")
    form.find_element(By.NAME, "dataset_id").send_keys("from-the-browser")
    form.find_element(By.NAME, "path").send_keys(source)
    form.find_element(By.TAG_NAME, "button").click()
    review = WebDriverWait(browser, 60).until(
        expected_conditions.presence_of_element_located((By.ID, "review"))
    )
    reviewed = review.find_element(By.NAME, "reviewed")
    assert not reviewed.is_selected(), "never ticked by the server"
    review.find_element(By.NAME, "epsilon_cap").send_keys("2")
    reviewed.click()
    review.find_element(By.XPATH, ".//button[text()='Register']").click()
    WebDriverWait(browser, 60).until(
        expected_conditions.text_to_be_present_in_element((By.TAG_NAME, "h1"), "registered")
    )
    with dpmine.connect(server.url, server.owner_key, retries=0) as owner:
        assert owner.admin.cap("from-the-browser").epsilon_cap == 2.0
    assert _csp_violations(browser) == []

    browser.find_element(By.XPATH, "//button[text()='Log out']").click()
    _arrive(browser, f"{server.url}/console/login")
    assert browser.get_cookie(sessions.COOKIE) is None

    _submit_key(browser, server, analyst.api_key)
    refusal = WebDriverWait(browser, 30).until(
        expected_conditions.presence_of_element_located((By.CLASS_NAME, "error"))
    )
    assert "for data owners" in refusal.text
    assert browser.get_cookie(sessions.COOKIE) is None
    browser.get(f"{server.url}/console/ledger")
    _arrive(browser, f"{server.url}/console/login")  # no session for an analyst


def test_headers_and_csrf_over_plain_http(sqlite_server: LiveServer) -> None:
    server = sqlite_server
    origin = {"Origin": server.url}
    with httpx.Client(base_url=server.url, timeout=30) as http:
        page = http.get("/console/login")
        for name, value in SECURITY_HEADERS.items():
            assert page.headers[name] == value, name
        logged_in = http.post("/console/login", data={"key": server.owner_key}, headers=origin)
        assert logged_in.status_code == 303
        grants = http.get("/console/grants")
        token = re.search(r'name="csrf" value="([0-9a-f]{64})"', grants.text)
        assert token
        fields = {"name": "mallory", "role": "owner"}
        refused = http.post("/console/principals", data=fields, headers=origin)
        assert refused.status_code == 403
        assert (
            refused.headers["Content-Security-Policy"]
            == SECURITY_HEADERS["Content-Security-Policy"]
        )
        cross = http.post(
            "/console/principals",
            data={**fields, "csrf": token.group(1)},
            headers={"Origin": "http://attacker.example"},
        )
        assert cross.status_code == 403
    with dpmine.connect(server.url, server.owner_key, retries=0) as owner:
        assert "mallory" not in {p.name for p in owner.admin.principals()}


@pytest.mark.parametrize(
    ("page", "rendered", "asset"),
    [
        (
            "/docs",
            "#swagger-ui .opblock-summary-path[data-path='/v1/health']",
            "/docs-assets/swagger-ui-bundle.js",
        ),
        ("/redoc", "redoc h1", "/docs-assets/redoc.standalone.js"),
        ("/", "a[href='/docs']", None),
    ],
)
def test_the_api_docs_render_from_the_server_alone(
    browser: WebDriver, sqlite_server: LiveServer, page: str, rendered: str, asset: str | None
) -> None:
    """Swagger UI and ReDoc draw the API from the server's own files: the page renders, and
    every resource the browser fetched came from the server (issue #22, offline installs); the
    index page too."""
    server = sqlite_server
    browser.get(f"{server.url}{page}")
    shown = WebDriverWait(browser, 60).until(
        expected_conditions.presence_of_element_located((By.CSS_SELECTOR, rendered))
    )
    assert shown.text.startswith("dpmine") if page == "/redoc" else shown.is_displayed()
    fetched: list[tuple[str, int]] = [
        (name, status)
        for name, status in browser.execute_script(
            "return performance.getEntriesByType('resource')"
            ".map(entry => [entry.name, entry.responseStatus])"
        )
    ]
    local = [(name, status) for name, status in fetched if name.startswith(f"{server.url}/")]
    assert asset is None or f"{server.url}{asset}" in {name for name, _ in local}, fetched
    assert {status for _, status in local} <= {200}, local
    # Only ReDoc's footer logo is asked of another host (its maker's CDN), and the page's
    # content security policy refuses it: no request leaves (status 0).
    foreign = [entry for entry in fetched if entry not in local]
    logo = "https://cdn.redoc.ly/redoc/logo-mini.svg"
    assert foreign == ([(logo, 0)] if page == "/redoc" else []), foreign
    refused = _csp_violations(browser)
    assert len(refused) == len(foreign), refused
    assert all(logo in message and "img-src" in message for message in refused), refused
