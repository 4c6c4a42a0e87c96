"""Property-based fuzzing of every operation in the OpenAPI document (schemathesis 4).

Schemathesis generates requests from ``/openapi.json`` (schema-conforming and, with fewer
examples, schema-violating ones) for every operation, with an analyst's key and with an owner's
key, once with random path parameters and once aimed at real datasets. Every request is sent to
the in-process app. The run asserts the API's contract (DESIGN.md "Errors", "The budget ledger"):

* no answer is a 5xx;
* a rejected (4xx) request adds no ledger entry and spends nothing;
* a successful charged request adds exactly one entry (none when replayed);
* afterwards the spent totals equal the sum of the entries, which are all released, and the
  total spent during the run equals the sum of the charges the successful answers reported.

Generation is derandomized and bounded (15 to 28 examples per operation for each role that may
use it, 3 for the other role) so that the run takes well under a minute.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.core.result import Ok
from sqlalchemy import func, select

import dpmine
from dpmine.wire import CreateDatasetRequest, DatasetMetadata, FimiSource
from dpmine_server.db.models import Dataset, Job, LedgerEntry
from dpmine_server.services.container import Services

#: The conftest's ``register(dataset_id, csv_path, metadata, cap=, grants=)`` fixture.
Register = Callable[..., str]

BASE_URL = "http://testserver"
POSITIVE_EXAMPLES = 15
NEGATIVE_EXAMPLES = 8
#: Examples of an operation the role may not use at all (every answer is a 403).
REFUSED_EXAMPLES = 3
#: Examples with random dataset ids (they only reach the 404).
RANDOM_PATH_EXAMPLES = 5
#: Principals whose keys the run needs; owner fuzzing must not rotate or disable them.
PROTECTED = frozenset({"admin", "alice"})


@dataclass
class Outcome:
    """What the fuzzing observed."""

    requests: int = 0
    server_errors: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    charged_entries: set[int] = field(default_factory=set)
    job_ids: set[str] = field(default_factory=set)
    statuses: dict[str, set[int]] = field(default_factory=dict)


def relevant_to(role: str, method: str, path: str) -> bool:
    """Whether the role may use the operation (else it is refused whatever the request)."""
    if path == "/v1/health":
        return role == "analyst"  # needs no key: fuzz it once
    if path.startswith("/v1/admin/"):
        return role == "owner"
    charged = method == "POST" or path.endswith("/budget")
    return role == "analyst" or not charged


def plan(
    role: str, method: str, path: str, real_dataset: str
) -> list[tuple[GenerationMode, int, dict[str, str] | None]]:
    """(mode, examples, fixed path parameters) runs of one operation for one role.

    Requests aimed at a real dataset reach validation, pricing and the ledger; random dataset
    ids only reach the 404, so they get a few examples. Only bodies get schema violations.
    """
    if not relevant_to(role, method, path):
        return [(GenerationMode.POSITIVE, REFUSED_EXAMPLES, None)]
    aimed = "{dataset_id}" in path and method != "DELETE"  # retiring would end the run
    target = {"dataset_id": real_dataset} if aimed else None
    runs = [(GenerationMode.POSITIVE, POSITIVE_EXAMPLES, target)]
    if aimed:
        runs.append((GenerationMode.POSITIVE, RANDOM_PATH_EXAMPLES, None))
    if method in {"POST", "PUT"}:
        runs.append((GenerationMode.NEGATIVE, NEGATIVE_EXAMPLES, target))
    return runs


def ledger_size(services: Services) -> int:
    """Number of ledger entries."""
    with services.sessions() as session:
        return int(session.scalar(select(func.count()).select_from(LedgerEntry)) or 0)


def spent_total(services: Services) -> int:
    """Units spent over all datasets."""
    with services.sessions() as session:
        return int(session.scalar(select(func.sum(Dataset.spent_units))) or 0)


def send(client: TestClient, kwargs: dict[str, Any]) -> httpx.Response | None:
    """Send schemathesis' requests-style arguments through the in-process client."""
    headers: dict[str, bytes] = {}
    for name, value in (kwargs.get("headers") or {}).items():
        try:
            headers[name] = str(value).encode("latin-1")
        except UnicodeEncodeError:
            return None  # not a header an HTTP client can send
    options: dict[str, Any] = {"headers": headers, "params": kwargs.get("params") or None}
    if "json" in kwargs:
        options["json"] = kwargs["json"]
    data, files = kwargs.get("data"), kwargs.get("files")
    if files:
        options["files"] = files
        if isinstance(data, dict):
            options["data"] = data
    elif isinstance(data, dict):
        options["data"] = data
    elif data is not None:
        options["content"] = data if isinstance(data, bytes) else str(data).encode()
    response: httpx.Response = client.request(kwargs["method"], kwargs["url"], **options)
    return response


def observe(
    services: Services, outcome: Outcome, label: str, response: httpx.Response, before: int
) -> None:
    """Check one answer against the contract and record its charge."""
    outcome.requests += 1
    outcome.statuses.setdefault(label, set()).add(response.status_code)
    added = ledger_size(services) - before
    if response.status_code >= 500:
        request = response.request
        multipart = request.headers.get("content-type", "").startswith("multipart")
        sent = b"<multipart>" if multipart else request.content[:300]
        outcome.server_errors.append(
            f"{label} -> {response.status_code} {response.text[:200]} "
            f"for {request.url.path} {sent!r}"
        )
        return
    if response.status_code >= 400:
        if added:
            outcome.violations.append(
                f"{label} -> {response.status_code} but added {added} entries"
            )
        return
    body = response.json() if "json" in response.headers.get("content-type", "") else None
    receipt = body.get("receipt") if isinstance(body, dict) else None
    if isinstance(receipt, dict):
        expected = 0 if receipt["replayed"] else 1
        if added != expected:
            outcome.violations.append(f"{label}: receipt {receipt} but {added} new entries")
        outcome.charged_entries.add(int(receipt["ledger_entry_id"]))
    elif response.status_code == 202 and isinstance(body, dict) and "id" in body:
        outcome.job_ids.add(str(body["id"]))  # charged at submission, or a retry of a job
        if added not in {0, 1}:
            outcome.violations.append(f"{label}: a job submission added {added} entries")
    elif added:
        outcome.violations.append(f"{label} -> {response.status_code} added {added} entries")


def fuzz_operation(
    client: TestClient,
    services: Services,
    outcome: Outcome,
    operation: Any,
    *,
    role: str,
    key: str,
    mode: GenerationMode,
    examples: int,
    path_parameters: dict[str, str] | None,
) -> None:
    """Run ``operation`` with generated requests; record what happened."""
    strategy = operation.as_strategy(
        generation_mode=mode,
        headers={"authorization": f"Bearer {key}", "x-api-key": key},
        path_parameters=path_parameters,
    )
    label = f"{role} {mode.value} {operation.label}" + (" @real" if path_parameters else "")

    @settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def run(case: Any) -> None:
        name = (case.path_parameters or {}).get("name")
        if name in PROTECTED:
            case.path_parameters["name"] = "someone-else"
        before = ledger_size(services)
        response = send(client, case.as_transport_kwargs(base_url=BASE_URL))
        if response is not None:
            observe(services, outcome, label, response, before)

    try:
        run()
    except Unsatisfiable:
        # Negative mode has nothing to violate in an operation without inputs (GET /v1/health).
        assert mode is GenerationMode.NEGATIVE, label


@pytest.fixture
def baskets(tmp_path: Path, owner: dpmine.Connection, analyst_key: str) -> str:
    """A small transaction dataset for the itemset operations (cap 100, alice holds 50)."""
    del analyst_key  # alice must exist before the grant
    path = tmp_path / "baskets.dat"
    path.write_text("1 2 3\n1 2\n2 3 4\n1 3\n4\n1 2 3 4\n" * 20, encoding="utf-8")
    request = CreateDatasetRequest(
        id="baskets",
        name="Baskets",
        epsilon_cap=100.0,
        metadata=DatasetMetadata(kind="transactions", n_max=1000, items=["1", "2", "3", "4"]),
        source=FimiSource(path=path.name),
    )
    owner.admin.upload_dataset(request, {"path": path})
    owner.admin.grant("baskets", "alice", 50.0)
    return "baskets"


@pytest.fixture
def fuzz_toy(
    register: Register, analyst_key: str, toy_csv: Path, toy_metadata: DatasetMetadata
) -> str:
    """The toy data with room for many charges (cap 100, alice holds 50)."""
    del analyst_key
    return register("toy", toy_csv, toy_metadata, cap=100.0, grants={"alice": 50.0})


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run in a temp folder: a generated SQL source URL must not create files in the repo."""
    folder = tmp_path / "cwd"
    folder.mkdir()
    monkeypatch.chdir(folder)
    return folder


def wait_for_jobs(services: Services, job_ids: set[str], timeout: float = 20.0) -> list[Job]:
    """The jobs, once none is queued or running."""
    deadline = time.monotonic() + timeout
    while True:
        with services.sessions() as session:
            jobs = list(session.scalars(select(Job).where(Job.id.in_(job_ids))))
        if all(job.status in {"done", "failed"} for job in jobs) or time.monotonic() > deadline:
            return jobs
        time.sleep(0.05)


@pytest.mark.usefixtures("in_tmp")
def test_fuzz_every_operation(
    *,
    client: TestClient,
    services: Services,
    owner_headers: dict[str, str],
    analyst_key: str,
    fuzz_toy: str,
    baskets: str,
) -> None:
    document = client.get("/openapi.json").json()
    schema = schemathesis.openapi.from_dict(document)
    results = list(schema.get_all_operations())
    assert all(isinstance(result, Ok) for result in results), results
    operations = [result.ok() for result in results if isinstance(result, Ok)]
    assert len(operations) >= 22
    owner_key = owner_headers["Authorization"].removeprefix("Bearer ")
    outcome = Outcome()
    spent_before = spent_total(services)
    entries_before = ledger_size(services)
    ordered = sorted(operations, key=lambda op: op.method.upper() == "DELETE")
    for role, key in (("analyst", analyst_key), ("owner", owner_key)):
        for operation in ordered:
            real = baskets if "/itemsets/" in operation.path else fuzz_toy
            for mode, examples, target in plan(
                role, operation.method.upper(), operation.path, real
            ):
                fuzz_operation(
                    client,
                    services,
                    outcome,
                    operation,
                    role=role,
                    key=key,
                    mode=mode,
                    examples=examples,
                    path_parameters=target,
                )

    jobs = wait_for_jobs(services, outcome.job_ids)
    assert all(job.status in {"done", "failed"} for job in jobs), "jobs still running"
    outcome.charged_entries |= {job.ledger_entry_id for job in jobs if job.ledger_entry_id}

    assert not outcome.server_errors, "\n".join(sorted(set(outcome.server_errors))[:40])
    assert not outcome.violations, "\n".join(outcome.violations[:40])
    # Something was charged and something was refused, or the run proved little.
    assert outcome.charged_entries
    assert any(code >= 400 for codes in outcome.statuses.values() for code in codes)

    assert services.ledger.verify() == []
    verified = client.get("/v1/admin/ledger/verify", headers=owner_headers)
    assert verified.json() == {"consistent": True, "problems": []}
    with services.sessions() as session:
        entries = list(session.scalars(select(LedgerEntry)))
        datasets = list(session.scalars(select(Dataset)))
    assert len(entries) - entries_before == len(outcome.charged_entries)
    assert {entry.id for entry in entries} == outcome.charged_entries
    assert {entry.status for entry in entries} == {"released"}
    released = sum(entry.epsilon_units for entry in entries if entry.status == "released")
    assert sum(dataset.spent_units for dataset in datasets) == released
    assert spent_total(services) - spent_before == released
