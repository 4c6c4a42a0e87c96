"""HTTP side of the server errors: every error as one JSON shape, ``{"error", "detail"}``.

The error classes are plain Python (:mod:`dpmine_server.errors`), raised by services and kernels
that import no web framework; this module, in the API layer, turns them into responses.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from dpmine.wire import ErrorBody
from dpmine_server.errors import ServerError

__all__ = ["add_exception_handlers"]


def _body(error: str, detail: str) -> dict[str, str]:
    return ErrorBody(error=error, detail=detail).model_dump()


def _validation_detail(error: RequestValidationError) -> str:
    parts = []
    for item in error.errors()[:10]:
        location = ".".join(str(part) for part in item.get("loc", ()) if part != "body")
        parts.append(f"{location or 'body'}: {_message(item)}")
    return "; ".join(parts) + " (fix these fields and send the request again)"


def _message(item: Mapping[str, Any]) -> str:
    """Pydantic's message, except for an unknown tag of a tagged union (a job's ``operation``):
    that one names the tag and the valid ones in words."""
    context = item.get("ctx") or {}
    if item.get("type") == "union_tag_invalid":
        field = str(context.get("discriminator", "tag")).strip("'")
        return f"unknown {field} {context.get('tag')!r}; use one of {context.get('expected_tags')}"
    return str(item.get("msg", "invalid"))


def add_exception_handlers(app: FastAPI) -> None:
    """Serialise every error as ``{"error": ..., "detail": ...}``."""

    @app.exception_handler(ServerError)
    async def _server_error(_request: Request, exc: ServerError) -> JSONResponse:
        return JSONResponse(
            _body(type(exc).__name__, exc.message), exc.status_code, headers=exc.headers
        )

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(_body("InvalidRequest", _validation_detail(exc)), 422)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        names = {404: "NotFound", 405: "MethodNotAllowed", 401: "Unauthorized"}
        name = names.get(exc.status_code, "HTTPError")
        return JSONResponse(_body(name, str(exc.detail)), exc.status_code)

    @app.exception_handler(Exception)
    async def _unexpected(_request: Request, _exc: Exception) -> JSONResponse:
        return JSONResponse(
            _body("InternalError", "the server hit an internal error; the owner can see the log"),
            500,
        )
