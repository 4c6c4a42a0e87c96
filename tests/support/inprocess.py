"""The real application in-process, for the client and API tests: test-mode settings on a temp
SQLite file, a ``TestClient`` with the lifespan running, ``dpmine`` connections through it, and
the assertions of the one error shape (DESIGN.md "Testing", "Errors").

``starlette.testclient`` warns at import that ``httpx2`` should replace ``httpx``; the warning is
suppressed here only (pyproject's ``filterwarnings = error`` is owned by the lead).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from fastapi import FastAPI
from starlette.exceptions import StarletteDeprecationWarning

import dpmine
from dpmine_server.settings import Settings

with warnings.catch_warnings():
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from fastapi.testclient import TestClient

__all__ = [
    "BASE_URL",
    "TestClient",
    "bearer",
    "connect",
    "expect_error",
    "open_client",
    "settings_for",
]

BASE_URL = "http://testserver"


def settings_for(
    folder: Path,
    *,
    database_file: str,
    owner_key: str,
    secret_key: str,
    test_seed: int,
    job_workers: int,
) -> Settings:
    """Test-mode settings on ``folder``'s SQLite file and data folder."""
    return Settings(
        database_url=f"sqlite:///{folder / database_file}",
        data_dir=folder / "data",
        bootstrap_owner_key=owner_key,
        secret_key=secret_key,
        environment="test",
        test_seed=test_seed,
        job_workers=job_workers,
    )


@contextmanager
def open_client(app: FastAPI) -> Iterator[TestClient]:
    """An in-process HTTP client with the lifespan running; server exceptions come back as 500
    responses, as a real client sees them."""
    with TestClient(app, base_url=BASE_URL, raise_server_exceptions=False) as client:
        yield client


def connect(key: str, http: TestClient) -> dpmine.Connection:
    """A connection with ``key`` through the in-process client (no retries)."""
    return dpmine.connect(BASE_URL, key, http=http, retries=0)


def bearer(key: str) -> dict[str, str]:
    """The Authorization header of an API key."""
    return {"Authorization": f"Bearer {key}"}


def expect_error(response: httpx.Response, status: int, error: str) -> str:
    """Assert the status and the one error shape ``{"error", "detail"}``; return the detail."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "detail"}
    assert body["error"] == error
    return str(body["detail"])
