"""The documentation pages of a live server load everything from the server itself (issue #22,
offline installs): ``/docs`` and ``/redoc`` name only local scripts, styles and icons, each of
which answers with its non-empty file; ``/`` names the ways in and each of them answers.

The headless-browser check that the pages really render offline is in test_console_browser.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from html.parser import HTMLParser

import httpx
import pytest

from dpmine_server.api.docs import INDEX
from support.servers import LiveServer, http_client

#: The attributes through which a page makes the browser fetch something.
FETCHING_ATTRIBUTES = {"src", "href", "spec-url"}


class _Urls(HTMLParser):
    """Every URL an HTML page asks the browser to fetch, with its tag."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [(tag, v) for k, v in attrs if k in FETCHING_ATTRIBUTES and v is not None]


def _fetched_urls(page: str) -> list[tuple[str, str]]:
    parser = _Urls()
    parser.feed(page)
    return parser.urls


@pytest.fixture(scope="module")
def client(sqlite_server: LiveServer) -> Iterator[httpx.Client]:
    with http_client(sqlite_server.url) as opened:
        yield opened


@pytest.mark.parametrize(
    ("page", "expected"),
    [
        (
            "/docs",
            {
                ("link", "/docs-assets/swagger-ui.css"),
                ("link", "/docs-assets/favicon.png"),
                ("script", "/docs-assets/swagger-ui-bundle.js"),
            },
        ),
        (
            "/redoc",
            {
                ("link", "/docs-assets/favicon.png"),
                ("redoc", "/openapi.json"),
                ("script", "/docs-assets/redoc.standalone.js"),
            },
        ),
    ],
)
def test_docs_pages_load_only_local_files(
    client: httpx.Client, page: str, expected: set[tuple[str, str]]
) -> None:
    response = client.get(page)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert set(_fetched_urls(response.text)) == expected
    # Nothing else on the page names another host (the inline script's spec URL included).
    assert re.findall(r"(?:https?:)?//[\w.-]+", response.text) == []
    if page == "/docs":  # Swagger UI reads the spec URL from its inline script
        assert "url: '/openapi.json'" in response.text
    for tag, url in expected:
        asset = client.get(url)
        assert asset.status_code == 200, url
        assert len(asset.content) > 1000, url
        kind = asset.headers["content-type"]
        if tag == "script":
            assert kind.startswith(("text/javascript", "application/javascript")), (url, kind)
        elif url.endswith(".css"):
            assert kind.startswith("text/css"), (url, kind)


def test_the_bundles_are_the_real_swagger_ui_and_redoc(client: httpx.Client) -> None:
    swagger = client.get("/docs-assets/swagger-ui-bundle.js").text
    redoc = client.get("/docs-assets/redoc.standalone.js").text
    assert "SwaggerUIBundle" in swagger
    assert "Redoc" in redoc
    assert ".swagger-ui" in client.get("/docs-assets/swagger-ui.css").text


def test_the_index_names_every_way_in_and_each_answers(
    client: httpx.Client, sqlite_server: LiveServer
) -> None:
    index = client.get("/", headers={"Accept": "application/json"})
    assert index.status_code == 200
    body = index.json()
    assert body["name"] == "dpmine"
    assert {name: body[name] for name in INDEX} == {
        "docs": "/docs",
        "redoc": "/redoc",
        "openapi": "/openapi.json",
        "console": "/console",
        "health": "/v1/health",
    }
    for name in INDEX:
        answer = client.get(body[name], follow_redirects=True)
        assert answer.status_code == 200, (name, answer.status_code)
    # A browser gets the same links as a page.
    page = client.get("/", headers={"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"})
    assert page.headers["content-type"].startswith("text/html")
    assert {url for tag, url in _fetched_urls(page.text) if tag == "a"} == {
        body[name] for name in INDEX
    }
    assert sqlite_server.is_running()


def test_unknown_paths_are_still_404(client: httpx.Client) -> None:
    assert client.get("/docs-assets/no-such-file.js").status_code == 404
    assert client.get("/no-such-page").status_code == 404
