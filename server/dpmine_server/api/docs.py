"""The server's own pages for people: ``/docs`` (Swagger UI), ``/redoc`` and an index at ``/``.

FastAPI's default pages load Swagger UI and ReDoc from a CDN, so they are blank on a machine
without internet access. Here their scripts, styles and icon come from the ``fastapi-offline``
wheel (a dependency of the ``[server]`` extra) and are served under ``/docs-assets``: the pages
work offline. A content security policy keeps the browser on this server: ReDoc's footer
would fetch a logo from its maker's CDN (the policy refuses it, and ReDoc then leaves it out),
and Swagger UI's online validator is switched off.
"""

from __future__ import annotations

import base64
import hashlib
import re
from html import escape
from typing import Any

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles

from dpmine_server import __version__

__all__ = ["ASSETS", "INDEX", "add_docs", "docs_policy"]

#: Where the Swagger UI and ReDoc files are served.
ASSETS = "/docs-assets"
#: What ``GET /`` names: a person's way in, and the machine-readable description.
INDEX = {
    "docs": ("/docs", "interactive API documentation (Swagger UI)"),
    "redoc": ("/redoc", "API reference (ReDoc)"),
    "openapi": ("/openapi.json", "OpenAPI description of the API"),
    "console": ("/console", "the data owner's console (owner key)"),
    "health": ("/v1/health", "liveness and database check"),
}

_INLINE_SCRIPT = re.compile(rb"<script>(.*?)</script>", re.DOTALL)


def docs_policy(page: bytes) -> str:
    """The content security policy of a documentation page: scripts from this server and the
    page's own inline scripts (by hash), nothing fetched from any other host. Styles may be
    inline: ReDoc and Swagger UI style their elements from script."""
    hashes = " ".join(
        f"'sha256-{base64.b64encode(hashlib.sha256(script).digest()).decode()}'"
        for script in _INLINE_SCRIPT.findall(page)
    )
    return (
        f"default-src 'none'; script-src 'self' {hashes}".rstrip()
        + "; style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self' data:; "
        "connect-src 'self'; worker-src 'self' blob:; frame-ancestors 'none'; base-uri 'none'; "
        "form-action 'none'"
    )


def _guarded(page: HTMLResponse) -> HTMLResponse:
    page.headers["Content-Security-Policy"] = docs_policy(bytes(page.body))
    page.headers["X-Content-Type-Options"] = "nosniff"
    return page


def add_docs(app: FastAPI) -> None:
    """Serve the documentation pages with local assets; create the app with ``docs_url=None``
    and ``redoc_url=None`` so that FastAPI's CDN pages are not added as well."""
    app.mount(ASSETS, StaticFiles(packages=[("fastapi_offline", "static")]), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    def swagger_ui(request: Request) -> HTMLResponse:
        root = _root(request)
        page = get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{root}{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS}/favicon.png",
            oauth2_redirect_url=None,
            # No badge from Swagger's online validator: it would send it the spec's URL.
            swagger_ui_parameters={"validatorUrl": None},
        )
        return _guarded(page)

    @app.get("/redoc", include_in_schema=False)
    def redoc(request: Request) -> HTMLResponse:
        root = _root(request)
        page = get_redoc_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{root}{ASSETS}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{ASSETS}/favicon.png",
            with_google_fonts=False,
        )
        return _guarded(page)

    @app.get("/", include_in_schema=False)
    def index(request: Request) -> Response:
        """Where to go from here: an HTML list for a browser, JSON for anything else."""
        root = _root(request)
        links = {name: f"{root}{path}" for name, (path, _) in INDEX.items()}
        if "text/html" in request.headers.get("accept", ""):
            return _guarded(HTMLResponse(_index_html(app.title, links, icon=f"{root}{ASSETS}")))
        body: dict[str, Any] = {"name": app.title, "version": __version__, **links}
        return JSONResponse(body)


def _root(request: Request) -> str:
    """The prefix a reverse proxy serves the app under (ASGI ``root_path``), or ''."""
    return str(request.scope.get("root_path", "")).rstrip("/")


def _index_html(title: str, links: dict[str, str], *, icon: str) -> str:
    items = "\n".join(
        f'<li><a href="{escape(links[name])}">{escape(links[name])}</a>: {escape(what)}</li>'
        for name, (_, what) in INDEX.items()
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<link rel="icon" href="{escape(icon)}/favicon.png">'
        f"<title>{escape(title)} {escape(__version__)}</title></head>\n"
        f"<body><h1>{escape(title)} {escape(__version__)}</h1>\n"
        "<p>A differentially private data-mining server. Analysts use the <code>dpmine</code> "
        "client or the HTTP API; the data owner uses the console or "
        "<code>dpmine-server</code>.</p>\n"
        f"<ul>\n{items}\n</ul></body></html>\n"
    )
