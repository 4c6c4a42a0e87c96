"""The owner console's forms over real HTTP against a real uvicorn server (issue #22, item 9):
registering a dataset from a reviewed metadata proposal, the metadata shown as tables, errors
shown on the form with the owner's input kept (never the bare error page), confirmations for
revoke and disable, and the jobs page (real progress, ε, cancel, history).

Forms are filled as a browser would send them: :class:`FormReader` collects a form's fields from
the page (hidden inputs, ticked boxes, chosen options, text areas). The browser test is
tests/e2e/test_console_browser.py.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import httpx
import pytest

import dpmine
from dpmine_server.operations.testing import SpinCountRequest
from support.datasets import register_table, write_table_csv
from support.servers import LiveServer, add_analyst

CSRF = re.compile(r'name="csrf" value="([0-9a-f]{64})"')


class FormReader(HTMLParser):
    """The fields a browser would send for the form with id ``form_id`` (unchanged)."""

    def __init__(self, form_id: str) -> None:
        super().__init__()
        self.form_id = form_id
        self.inside = False
        self.fields: list[tuple[str, str]] = []
        self._select: str | None = None
        self._textarea: str | None = None
        self._text = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.inside = found.get("id") == self.form_id
        if not self.inside or ("name" not in found and tag not in {"option"}):
            return
        if tag == "input":
            checkbox = found.get("type") == "checkbox"
            if not checkbox or "checked" in found:
                self.fields.append((found["name"], found.get("value", "")))
        elif tag == "select":
            self._select = found["name"]
        elif tag == "option" and self._select is not None and "selected" in found:
            self.fields.append((self._select, found.get("value", "")))
        elif tag == "textarea":
            self._textarea, self._text = found["name"], ""

    def handle_data(self, data: str) -> None:
        if self._textarea is not None:
            self._text += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self.inside = False
        elif tag == "select":
            self._select = None
        elif tag == "textarea" and self._textarea is not None:
            self.fields.append((self._textarea, self._text))
            self._textarea = None


def form_of(page: str, form_id: str) -> dict[str, str]:
    """The fields of a form on ``page`` (the last value of a repeated name; see :func:`notes`)."""
    reader = FormReader(form_id)
    reader.feed(page)
    assert reader.fields, f"no form {form_id!r} on the page"
    return dict(reader.fields)


def with_notes(page: str, fields: dict[str, str]) -> dict[str, str | list[str]]:
    """``fields`` plus every repeated ``note`` field of the review form, as a browser sends."""
    reader = FormReader("review")
    reader.feed(page)
    return {**fields, "note": [v for k, v in reader.fields if k == "note"]}


@pytest.fixture(scope="module")
def console(sqlite_server: LiveServer) -> Iterator[httpx.Client]:
    """A browser-like HTTP client logged in to the console as the bootstrap owner."""
    server = sqlite_server
    with httpx.Client(base_url=server.url, timeout=60, headers={"Origin": server.url}) as http:
        assert http.post("/console/login", data={"key": server.owner_key}).status_code == 303
        yield http


@pytest.fixture(scope="module")
def owner(sqlite_server: LiveServer) -> Iterator[dpmine.Connection]:
    with dpmine.connect(sqlite_server.url, sqlite_server.owner_key, retries=0) as connection:
        yield connection


def token(console: httpx.Client) -> str:
    match = CSRF.search(console.get("/console/datasets").text)
    assert match
    return match.group(1)


def assert_form_page(response: httpx.Response, title: str, *problems: str) -> None:
    """A refused form: the form's own page (not the error page) with the reasons on it."""
    assert response.status_code in {404, 409, 422}, response.text
    assert f"<h1>{title}" in response.text
    assert "Error 4" not in response.text
    for problem in problems:
        assert problem in response.text, (problem, response.text)


def test_a_dataset_is_registered_from_a_reviewed_proposal(
    console: httpx.Client, owner: dpmine.Connection, sqlite_server: LiveServer
) -> None:
    incoming = sqlite_server.data_dir / "incoming"
    incoming.mkdir(parents=True, exist_ok=True)
    name = f"incoming/{write_table_csv(incoming).name}"
    start = console.get("/console/datasets/new")
    assert start.status_code == 200
    assert name in start.text, "the data folder's files are offered"
    csrf = token(console)

    outside = console.post(
        "/console/datasets/new",
        data={"csrf": csrf, "dataset_id": "people", "kind": "table", "path": "../x.csv"},
    )
    assert_form_page(outside, "Register a dataset", "outside the server&#39;s data folder")
    assert 'value="people"' in outside.text, "the typed id is kept"

    proposed = console.post(
        "/console/datasets/new",
        data={"csrf": csrf, "dataset_id": "people", "kind": "table", "path": name},
    )
    assert proposed.status_code == 200, proposed.text
    assert "The proposal's notes" in proposed.text
    fields = form_of(proposed.text, "review")
    assert "reviewed" not in fields, "the server never ticks the review box"
    assert fields["a0.name"] == "age"
    assert fields["a0.type"] == "numeric"
    assert fields["kind"] == "table"
    assert fields["path"] == name

    assert fields["guarantee_policy"] == "allow_approximate"
    fields.update(
        {"n_max": "5000", "epsilon_cap": "3", "a0.lo": "zero", "guarantee_policy": "pure_only"}
    )
    unreviewed = console.post("/console/datasets/register", data=with_notes(proposed.text, fields))
    assert_form_page(
        unreviewed, "Register a dataset", "lower bound: &#39;zero&#39; is not a number"
    )
    kept = form_of(unreviewed.text, "review")
    assert (kept["n_max"], kept["a0.lo"], kept["epsilon_cap"]) == ("5000", "zero", "3")
    assert kept["guarantee_policy"] == "pure_only"

    kept.update({"a0.lo": "0", "a0.hi": "100"})
    not_ticked = console.post("/console/datasets/register", data=with_notes(proposed.text, kept))
    assert_form_page(not_ticked, "Register a dataset", "I reviewed every attribute")
    assert owner.admin.principals(), "still logged in"
    assert "people" not in {d.id for d in owner.datasets()}

    kept["reviewed"] = "yes"
    registered = console.post("/console/datasets/register", data=with_notes(proposed.text, kept))
    assert registered.status_code == 200, registered.text
    assert "Dataset people registered" in registered.text
    assert "guarantee policy pure_only" in registered.text
    assert "<caption>attributes</caption>" in registered.text
    info = next(d for d in owner.datasets() if d.id == "people")
    assert info.metadata.n_max == 5000
    assert info.metadata.review is None
    assert info.guarantee_policy == "pure_only"
    assert owner.admin.cap("people").epsilon_cap == 3.0
    event = next(e for e in owner.admin.audit() if e.action == "dataset_registered")
    assert (event.target, event.details) == (
        "people",
        {"guarantee_policy": "pure_only", "via": "console"},
    )

    again = console.post("/console/datasets/register", data=with_notes(proposed.text, kept))
    assert_form_page(again, "Register a dataset", "is taken")


def test_metadata_is_shown_as_a_table_per_view(
    console: httpx.Client, owner: dpmine.Connection, tmp_path: Path
) -> None:
    dataset = register_table(owner, tmp_path).id
    page = console.get("/console/datasets")
    assert page.status_code == 200
    assert dataset in page.text
    assert "<caption>attributes</caption>" in page.text
    assert "[0, 100]" in page.text, "a numeric range in words"
    assert '"n_max"' not in page.text, "no raw JSON"


def test_a_grant_below_what_was_spent_is_refused_on_the_form(
    console: httpx.Client, owner: dpmine.Connection, sqlite_server: LiveServer, tmp_path: Path
) -> None:
    dataset = register_table(owner, tmp_path).id
    analyst = add_analyst(sqlite_server, owner)
    owner.admin.grant(dataset, analyst.name, 1.0)
    with analyst.connection:
        analyst.connection.dataset(dataset).count(None, epsilon=0.5)
    fields = {"csrf": token(console), "dataset_id": dataset, "analyst": analyst.name}
    refused = console.post("/console/grants", data={**fields, "epsilon": "0.25"})
    assert_form_page(refused, "Grants", "already spent 0.5")
    kept = form_of(refused.text, "set-grant")
    assert (kept["dataset_id"], kept["analyst"], kept["epsilon"]) == (
        dataset,
        analyst.name,
        "0.25",
    )
    grant = next(g for g in owner.admin.grants(dataset) if g.analyst == analyst.name)
    assert grant.epsilon == 1.0


def test_revoke_and_disable_ask_for_confirmation(
    console: httpx.Client, owner: dpmine.Connection, sqlite_server: LiveServer, tmp_path: Path
) -> None:
    dataset = register_table(owner, tmp_path).id
    analyst = add_analyst(sqlite_server, owner)
    owner.admin.grant(dataset, analyst.name, 1.0)
    csrf = token(console)
    revoke = {"csrf": csrf, "dataset_id": dataset, "analyst": analyst.name}
    unconfirmed = console.post("/console/grants/revoke", data=revoke)
    assert_form_page(unconfirmed, "Grants", "tick the confirmation box")
    assert analyst.name in {g.analyst for g in owner.admin.grants(dataset)}
    assert console.post(
        "/console/grants/revoke", data={**revoke, "confirm": "yes"}
    ).status_code == (303)
    assert analyst.name not in {g.analyst for g in owner.admin.grants(dataset)}

    disable = f"/console/principals/{analyst.name}/disable"
    mistyped = console.post(disable, data={"csrf": csrf, "confirm": "someone-else"})
    assert_form_page(mistyped, "Principals", "type its name")
    assert not next(p for p in owner.admin.principals() if p.name == analyst.name).disabled
    assert console.post(disable, data={"csrf": csrf, "confirm": analyst.name}).status_code == 303
    assert next(p for p in owner.admin.principals() if p.name == analyst.name).disabled


def _wait_for(what: str, check: object, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not callable(check) or not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_jobs_page_shows_progress_charge_cancel_and_history(
    console: httpx.Client, owner: dpmine.Connection, sqlite_server: LiveServer, tmp_path: Path
) -> None:
    dataset = register_table(owner, tmp_path).id
    analyst = add_analyst(sqlite_server, owner)
    owner.admin.grant(dataset, analyst.name, 2.0)
    handle = analyst.connection.dataset(dataset)
    quick = handle.submit("test.spin", SpinCountRequest(epsilon=0.125, seconds=0.0))
    slow = handle.submit("test.spin", SpinCountRequest(epsilon=0.25, seconds=8.0))

    def section(html: str, table: str) -> str:
        return html[html.index(f'id="{table}"') :].split("</table>", maxsplit=1)[0]

    page = console.get("/console/jobs").text
    active = section(page, "active-jobs")
    assert slow.id in active
    assert "0.25" in active
    assert "<progress" in active
    assert f'action="/console/jobs/{slow.id}/cancel"' in active

    cancelled = console.post(f"/console/jobs/{slow.id}/cancel", data={"csrf": token(console)})
    assert cancelled.status_code == 303
    assert cancelled.headers["location"] == "/console/jobs?notice=job_cancelled"
    _wait_for(
        "both jobs to finish",
        lambda: all(
            job in section(console.get("/console/jobs").text, "job-history")
            for job in (quick.id, slow.id)
        ),
        timeout=180.0,  # the worker processes warm up first (services/warmup.py)
    )
    history = section(console.get("/console/jobs").text, "job-history")
    rows = {job: row for row in history.split("<tr>") for job in (quick.id, slow.id) if job in row}
    assert "done" in rows[quick.id]
    assert "0.125" in rows[quick.id]
    assert "cancelled" in rows[slow.id]
    assert "0.25" in rows[slow.id]
    again = console.post(f"/console/jobs/{slow.id}/cancel", data={"csrf": token(console)})
    assert_form_page(again, "Jobs", "already cancelled")
    event = next(e for e in owner.admin.audit() if e.action == "job_cancelled")
    assert event.target == slow.id
    analyst.connection.close()
