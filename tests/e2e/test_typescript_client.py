"""A TypeScript client generated from a live server's ``/openapi.json`` works as generated (issue
#22, "REST that any language can use").

``tests/typescript`` holds the client: ``npm run generate`` runs ``openapi-typescript`` with
default options on the live document, ``npm run check`` type-checks ``client.ts`` strictly
against it (minimal requests, which leave out every field with a default, and a typed job
submission, including one that must not type-check), and ``npm start`` runs a noisy count, a
top-K itemsets call and a job on a small table dataset, printing what came back as JSON. The
packages are the pinned ones of ``package-lock.json``, installed by ``npm ci`` once per lock file.

Node and npm come from Debian (``.ci/run`` installs them); without them the test is skipped, and
under CI that is a failure.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from dpmine.wire import DatasetInfo
from dpmine.wire.items import itemset_items
from support.accounts import analyst_account, mine_entries, owner_connection, seeded_server
from support.datasets import REGIONS, register_table, table_metadata
from support.servers import Account, LiveServer

PROJECT = Path(__file__).resolve().parents[1] / "typescript"
#: Where ``npm ci`` records the lock file it installed (node_modules is not in git).
STAMP = PROJECT / "node_modules" / ".dpmine-installed-lock.sha256"
#: What client.ts spends: a count, a top-K call (EM) and a top-K job (Laplace).
SPENT = {"count.noisy": "0.5", "fim.topk_em": "1", "fim.topk_laplace": "1"}


def _npm() -> str:
    """npm's path; skipped (failed under CI) when node or npm is missing."""
    npm = shutil.which("npm")
    if shutil.which("node") is None or npm is None:
        reason = "the TypeScript client test needs Debian's nodejs and npm packages"
        if os.environ.get("CI"):
            pytest.fail(f"{reason} under CI (.ci/run installs them)")
        pytest.skip(reason)
    return npm


def _run(command: list[str], env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        command, cwd=PROJECT, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    if done.returncode != 0:
        raise AssertionError(f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def _install(npm: str) -> None:
    """``npm ci`` unless node_modules already holds this lock file's packages."""
    lock = hashlib.sha256((PROJECT / "package-lock.json").read_bytes()).hexdigest()
    if STAMP.exists() and STAMP.read_text() == lock:
        return
    _run([npm, "ci", "--no-audit", "--no-fund"])
    STAMP.write_text(lock)


@pytest.fixture(scope="module")
def npm() -> str:
    """npm, with the project's pinned packages installed."""
    found = _npm()
    _install(found)
    return found


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with seeded_server(tmp_path_factory.mktemp("typescript"), name="typescript", seed="22") as live:
        yield live


def test_a_generated_typescript_client_counts_mines_and_runs_a_job(
    npm: str, server: LiveServer, tmp_path: Path
) -> None:
    with owner_connection(server) as owner, analyst_account(server, owner) as analyst:
        table: DatasetInfo = register_table(owner, tmp_path, epsilon_cap=5.0)
        owner.admin.grant(table.id, analyst.name, 3.0)
        report = _client_report(npm, server, analyst, table.id)
        entries = mine_entries(owner, table.id, analyst)

    assert isinstance(report["count"]["count"], int)
    assert len(report["top_k"]["itemsets"]) == 3
    assert all(_is_itemset(item) for item in report["top_k"]["itemsets"])
    job = report["job"]
    assert (job["operation"], job["status"]) == ("fim.topk_laplace", "done")
    assert job["submitted_status"] in {"queued", "running", "done"}
    assert len(job["itemsets"]) == 2
    assert all(_is_itemset(item) for item in job["itemsets"])
    # Each call charged its ε once, as its receipt said.
    charged = {entry.operation: Decimal(entry.epsilon_exact) for entry in entries}
    assert charged == {name: Decimal(epsilon) for name, epsilon in SPENT.items()}
    assert len(entries) == len(SPENT)
    receipts = (report["count"], report["top_k"], job)
    assert sorted(Decimal(r["epsilon"]) for r in receipts) == sorted(charged.values())


#: The public item names of the table (its Boolean attributes and attribute=value pairs).
ITEMS = {name for group in itemset_items(table_metadata(), None, None) for name, _ in group}


def _is_itemset(item: dict[str, Any]) -> bool:
    """Public item names and a noisy count (counts are on by default)."""
    items = item["items"]
    return bool(items) and set(items) <= ITEMS and isinstance(item["count"], int)


def _client_report(npm: str, server: LiveServer, analyst: Account, dataset_id: str) -> Any:
    """Generate, type-check and run the client against ``server``; its printed JSON."""
    env = {
        **os.environ,
        "DPMINE_URL": server.url,
        "DPMINE_API_KEY": analyst.api_key,
        "DPMINE_DATASET": dataset_id,
        "DPMINE_ATTRIBUTE": "region",
        "DPMINE_CATEGORY": REGIONS[0],
    }
    _run([npm, "run", "--silent", "generate"], env)
    _run([npm, "run", "--silent", "check"], env)
    return json.loads(_run([npm, "start", "--silent"], env))
