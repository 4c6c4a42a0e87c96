"""The request path's share of the timing calibration: the measured base (issue #23).

Every padded budget is ``base + scale · work`` (services/timing.py). ``work`` prices the kernel;
``base`` pays for what every request does besides it: authentication, request parsing, the
metadata read, the ledger's reservation and release transactions, the receipt and the response.
Under admission control (services/admission.py) at most ``limit`` requests are in flight in one
process, and their bookkeeping shares one interpreter, so the last of ``limit`` requests that
arrive together finishes its bookkeeping after about ``limit`` times one request's cost.

:func:`measure_request_path` measures that worst case directly: a real server process
(uvicorn serving this package's app, a fresh SQLite database and a synthetic one-column table,
padding off) is sent ``limit`` ``count.noisy`` calls at once over localhost HTTP, by as many
client threads of this process, and the time from their release to the last answer is taken,
the worst over ``bursts`` bursts.
The file stores ``burst / limit`` (seconds per request) and the server's base becomes
``max(floor, margin · DPMINE_MAX_IN_FLIGHT · seconds per request)``
(``RequestPathCalibration.base_seconds``, services/calibration_file.py): the margin (3, as
for the kernels) covers a machine up to three times slower than during the measurement, and
the floor (``MIN_FAIL_CLOSED_BASE_MS``, 20 ms) keeps a base above one scheduler time slice of
a busy Linux machine and the event loop's timer granularity, whatever the measurement says.

The job path (``TimingPolicy.for_jobs``, services/timing.py). A background job's budget is
counted from its submission; before its kernel starts the job is handed to a worker process
(the queue, the claim transaction, its rows read again), and after the kernel the worker writes
the settled state, which must be stored before the state is shown (services/workers.py
``PublicSchedule``, services/jobs.py ``_shown_at``). The same server therefore runs ``jobs``
``count.noisy`` jobs one at a time after an untimed one (with padding off the pool starts at
the first job), and the worst time from a job's submission to its settled state, read from the
server's own database, is stored as ``job_seconds``; jobs take the base
``max(base, 2 · margin · job_seconds)`` (each half of it covers the whole measured path
``margin`` times). One at a time is the case to measure: a job queued behind another starts on
the public schedule when the slot comes free, and its hand-over from then is the same.

The clients run in this process, beside the server as an analyst's would on another machine:
on a machine with few cores their work competes with the server's, which errs on the long
side.

Why the base is ``margin · limit · c`` and what that costs (revisited for issue #23 item 3).
Admission lets ``limit`` requests in at the same instant, so the rule must cover that case:
their paths share one interpreter (one core at a time) and one database writer, and the last
of them has its release stored only after about ``limit · c``; every one of them is answered at
``arrival + base + …``, so no deadline is overrun while the machine is at most ``margin`` times
slower than during the measurement. A smaller base would be a bet on arrivals being spread out,
and a lost bet is an overrun that fails closed with its charge kept. A base keyed to the
in-flight count at arrival (public, services/admission.py) would not hold either: later
arrivals share the interpreter with an earlier request and delay it too. The price is a cap:
a saturated process answers at most ``limit / base = 1 / (margin · c)`` requests per second,
whatever the limit, and uses at most ``1 / margin`` of a core for them. Capacity therefore comes
from a smaller ``c`` (group commit of the releases, services/group_commit.py; one read of the
dataset's version for the budgets, api/common.py ``arrival_budgets``) and from more API
processes on more cores, each with its own ``limit``. ``c`` is measured with one process on
the machine: ``P`` processes on ``K < P`` cores that all fill up at once run up to ``P / K``
times slower, which the margin absorbs only while ``P / K < margin``.

Privacy: the table is generated from public sizes (a column of ``flag`` values, every second
row true), never a registered dataset; the measurement is public configuration.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from dpmine.wire import BooleanAttribute, CreateDatasetRequest, CsvSource, DatasetMetadata
from dpmine_server.db.models import Job, as_utc
from dpmine_server.services.calibration_file import RequestPathCalibration

__all__ = ["PATH_ROWS", "measure_request_path"]

#: Rows of the synthetic table: small, so that the kernel's own share stays negligible.
PATH_ROWS = 1_000
_DATASET = "calibration-path"
_START_TIMEOUT_S = 120.0


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


@contextmanager
def _server(folder: Path, owner_key: str, limit: int) -> Iterator[str]:
    """A real server (``python -m uvicorn``, this interpreter, the app of this package) on a
    free localhost port, on a fresh SQLite file in ``folder``, padding off; its base URL.
    Stopped by its process id."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = os.environ | {
        "DPMINE_ENVIRONMENT": "development",
        "DPMINE_DATABASE_URL": f"sqlite:///{folder / 'path.sqlite3'}",
        "DPMINE_DATA_DIR": str(folder / "data"),
        "DPMINE_BOOTSTRAP_OWNER_KEY": owner_key,
        "DPMINE_TIMING_PADDING": "false",
        "DPMINE_TIMING_CALIBRATION": "",
        "DPMINE_MAX_IN_FLIGHT": str(limit),
        "DPMINE_JOB_WORKERS": "1",
        "DPMINE_CONFIG_FILE": str(_empty_config(folder)),
    }
    command = [sys.executable, "-m", "uvicorn", "--factory", "dpmine_server.app:create_app"]
    command += ["--host", "127.0.0.1", "--port", str(port), "--no-access-log"]
    log = (folder / "server.log").open("wb")
    process = subprocess.Popen(command, env=env, cwd=folder, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while True:
            try:
                if httpx.get(f"{url}/v1/health", timeout=2.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    "the calibration server did not start: "
                    + (folder / "server.log").read_text(errors="replace")[-2000:]
                )
            time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def _empty_config(folder: Path) -> Path:
    path = folder / "empty.toml"
    path.write_text("", encoding="utf-8")
    return path


def _register(http: httpx.Client, folder: Path, owner_key: str) -> dict[str, str]:
    """The synthetic table registered, an analyst granted on it: the analyst's headers."""
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
    return {"Authorization": f"Bearer {created.json()['api_key']}"}


_COUNT = {"predicate": {"kind": "bool", "attribute": "flag"}, "epsilon": 0.01}
_JOB_POLL_S = 0.005
_FINAL = frozenset({"done", "failed", "cancelled", "interrupted"})


def _run_jobs(url: str, headers: dict[str, str], jobs: int) -> list[str]:
    """Submit ``jobs`` ``count.noisy`` jobs one after another, each once the previous one is
    settled (padding is off: a job is shown settled when it is); their ids."""
    ids: list[str] = []
    with httpx.Client(base_url=url, timeout=60.0) as client:
        for _ in range(jobs):
            key = {"Idempotency-Key": str(uuid.uuid4())}
            body = {"operation": "count.noisy", "request": _COUNT}
            submitted = _checked(
                client.post(f"/v1/datasets/{_DATASET}/jobs", json=body, headers=headers | key)
            )
            job_id = str(submitted.json()["id"])
            deadline = time.monotonic() + 60.0
            while True:
                shown = _checked(client.get(f"/v1/jobs/{job_id}", headers=headers)).json()
                if shown["status"] in _FINAL:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"calibration job {job_id} did not settle in 60 s")
                time.sleep(_JOB_POLL_S)
            if shown["status"] != "done":
                raise RuntimeError(f"calibration job {job_id} ended {shown['status']}: {shown}")
            ids.append(job_id)
    return ids


def _job_seconds(database: Path, ids: list[str]) -> float:
    """The worst time from submission to the settled state stored over these jobs, read from
    the calibration server's own database (the analyst's view truncates them to the second)."""
    engine = create_engine(f"sqlite:///{database}")
    try:
        with Session(engine) as session:
            rows = session.execute(
                select(Job.created_at, Job.updated_at).where(Job.id.in_(ids))
            ).all()
    finally:
        engine.dispose()
    if len(rows) != len(ids):
        raise RuntimeError(f"the calibration server stored {len(rows)} of {len(ids)} jobs")
    return max((as_utc(done) - as_utc(made)).total_seconds() for made, done in rows)


def measure_request_path(
    limit: int, bursts: int, jobs: int | None = None
) -> RequestPathCalibration:
    """Send ``limit`` ``count.noisy`` calls at once to a fresh server process, ``bursts``
    times after one untimed burst; the worst burst's time (see the module docstring). Then
    the job path: ``jobs`` (default ``4 · bursts``) ``count.noisy`` jobs one at a time after
    one untimed job, the worst time from a job's submission to its settled state stored (the
    hand-over to a worker process, a kernel of well under a millisecond, the final write:
    what a job's base pays for besides its kernel, services/timing.py
    ``TimingPolicy.for_jobs``)."""
    timed_jobs = jobs if jobs is not None else 4 * bursts
    with tempfile.TemporaryDirectory(prefix="dpmine-calibrate-path-") as work:
        folder = Path(work)
        owner_key = "dpm_" + secrets.token_urlsafe(32)
        with _server(folder, owner_key, limit) as url:
            with httpx.Client(base_url=url, timeout=60.0) as admin:
                headers = _register(admin, folder, owner_key)
            body = _COUNT
            path = f"/v1/datasets/{_DATASET}/counts"
            clients = [httpx.Client(base_url=url, timeout=60.0) for _ in range(limit)]

            def call(client: httpx.Client, start: threading.Barrier) -> float:
                start.wait()
                key = {"Idempotency-Key": str(uuid.uuid4())}
                _checked(client.post(path, json=body, headers=headers | key))
                return time.perf_counter()

            worst = 0.0
            try:
                with ThreadPoolExecutor(max_workers=limit) as pool:
                    for burst in range(bursts + 1):  # the first opens the connections
                        start = threading.Barrier(limit + 1)
                        finished = [pool.submit(call, client, start) for client in clients]
                        start.wait()
                        began = time.perf_counter()
                        last = max(future.result() for future in finished)
                        if burst:
                            worst = max(worst, last - began)
            finally:
                for client in clients:
                    client.close()
            job_ids = _run_jobs(url, headers, timed_jobs + 1)[1:]  # the first one untimed
        job_worst = _job_seconds(folder / "path.sqlite3", job_ids)
    return RequestPathCalibration(
        limit=limit,
        bursts=bursts,
        burst_seconds=worst,
        seconds_per_request=worst / limit,
        jobs=timed_jobs,
        job_seconds=job_worst,
    )
