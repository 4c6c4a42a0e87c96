"""The request path's share of the timing calibration: the measured base (issue #23).

Every padded budget is ``base + scale · work`` (services/timing.py). ``work`` prices the kernel;
``base`` pays for what every request does besides it: authentication, request parsing, the
metadata read, the ledger's reservation and release transactions, the receipt and the response.
Under admission control (services/admission.py) at most ``limit`` requests are in flight in one
process, and their bookkeeping shares one interpreter, so the last of ``limit`` requests that
arrive together finishes its bookkeeping after about ``limit`` times one request's cost.

:func:`measure_request_path` measures that worst case directly: a real application (the
server's own app, a fresh SQLite database and a synthetic one-column table, padding off) is
sent ``limit`` ``count.noisy`` calls at once, through its HTTP interface in this process, and
the time from their release to the last answer is taken, the worst over ``repeats`` bursts.
The file stores ``burst / limit`` (seconds per request) and the server's base becomes
``max(floor, margin · DPMINE_MAX_IN_FLIGHT · seconds per request)``
(``RequestPathCalibration.base_seconds``, services/calibration_file.py): the margin (3, as
for the kernels) covers a machine up to three times slower than during the measurement, and
the floor (``MIN_FAIL_CLOSED_BASE_MS``, 20 ms) keeps a base above one scheduler time slice of
a busy Linux machine and the event loop's timer granularity, whatever the measurement says.

The measurement is conservative: the sending client runs in the same interpreter, so its own
work (building and reading the HTTP messages) is counted with the server's.

Privacy: the table is generated from public sizes (a column of ``flag`` values, every second
row true), never a registered dataset; the measurement is public configuration.
"""

from __future__ import annotations

import secrets
import tempfile
import threading
import time
import uuid
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from dpmine.wire import BooleanAttribute, CreateDatasetRequest, CsvSource, DatasetMetadata
from dpmine_server.app import create_app
from dpmine_server.services.calibration_file import RequestPathCalibration
from dpmine_server.settings import Settings

with warnings.catch_warnings():  # starlette's TestClient warns about its httpx backend
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

__all__ = ["PATH_ROWS", "measure_request_path"]

#: Rows of the synthetic table: small, so that the kernel's own share stays negligible.
PATH_ROWS = 1_000
_DATASET = "calibration-path"


def _table(folder: Path) -> Path:
    path = folder / "flags.csv"
    rows = ["yes" if row % 2 == 0 else "no" for row in range(PATH_ROWS)]
    path.write_text("\n".join(["flag", *rows]) + "\n", encoding="utf-8")
    return path


def _checked(response: httpx.Response) -> httpx.Response:
    if response.status_code >= 300:
        raise RuntimeError(
            f"{response.request.method} {response.request.url.path} failed during the "
            f"request-path calibration: {response.text[:300]}"
        )
    return response


def measure_request_path(limit: int, bursts: int) -> RequestPathCalibration:
    """Send ``limit`` ``count.noisy`` calls at once to a fresh in-process server, ``bursts``
    times after one untimed burst; the worst burst's time (see the module docstring)."""
    with tempfile.TemporaryDirectory(prefix="dpmine-calibrate-path-") as work:
        folder = Path(work)
        owner_key = "dpm_" + secrets.token_urlsafe(32)
        settings = Settings(
            environment="development",
            database_url=f"sqlite:///{folder / 'path.sqlite3'}",
            data_dir=folder / "data",
            bootstrap_owner_key=owner_key,
            timing_padding=False,
            max_in_flight=limit,
            job_workers=1,
        )
        base_url = "http://calibration"
        with TestClient(create_app(settings), base_url=base_url) as http:
            owner = {"Authorization": f"Bearer {owner_key}"}
            metadata = DatasetMetadata(
                kind="table", n_max=PATH_ROWS, attributes=[BooleanAttribute(name="flag")]
            )
            request = CreateDatasetRequest(
                id=_DATASET,
                name="request-path calibration",
                epsilon_cap=1e6,
                metadata=metadata,
                source=CsvSource(path="flags.csv"),
            )
            table = _table(folder)
            with table.open("rb") as handle:
                _checked(
                    http.post(
                        "/v1/admin/datasets/upload",
                        data={"request": request.model_dump_json()},
                        files={"path": (table.name, handle)},
                        headers=owner,
                    )
                )
            principal = {"name": "calibration", "role": "analyst"}
            created = _checked(http.post("/v1/admin/principals", json=principal, headers=owner))
            grant = {"analyst": "calibration", "epsilon": 1e6}
            _checked(http.put(f"/v1/admin/datasets/{_DATASET}/grants", json=grant, headers=owner))
            headers = {"Authorization": f"Bearer {created.json()['api_key']}"}
            body = {"predicate": {"kind": "bool", "attribute": "flag"}, "epsilon": 0.01}
            path = f"/v1/datasets/{_DATASET}/counts"

            def call(start: threading.Barrier) -> float:
                start.wait()
                key = {"Idempotency-Key": str(uuid.uuid4())}
                _checked(http.post(path, json=body, headers=headers | key))
                return time.perf_counter()

            worst = 0.0
            with ThreadPoolExecutor(max_workers=limit) as pool:
                for burst in range(bursts + 1):
                    start = threading.Barrier(limit + 1)
                    finished = [pool.submit(call, start) for _ in range(limit)]
                    start.wait()
                    began = time.perf_counter()
                    last = max(future.result() for future in finished)
                    if burst:
                        worst = max(worst, last - began)
    return RequestPathCalibration(
        limit=limit, bursts=bursts, burst_seconds=worst, seconds_per_request=worst / limit
    )
