"""The main job (``make demo``): a real server, a real dataset, a private analysis over HTTP.

1. starts ``dpmine-server serve`` (uvicorn) on embedded SQLite under ``var/demo``;
2. as the data owner: registers the bundled UCI Mushroom data as a two-view dataset with its
   confirmed public metadata (``config/demo/mushroom.metadata.json``), creates an analyst and
   grants it ε = 1;
3. as the analyst, through the ``dpmine`` client over HTTP: a noisy row count, then the noisy
   quality (support cells, Jaccard, p-value) of every redescription "[odor = c] ⟺ [class = p]"
   over the public odor categories, ranked by noisy Jaccard;
4. prints the results and the budget receipts, shows the owner's ledger check, stops the server.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
from rich.console import Console
from rich.markup import escape
from rich.progress import track
from rich.table import Table

import dpmine
from dpmine.wire import CreateDatasetRequest, CsvSource, DatasetMetadata, NumericAttribute, Receipt

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "var" / "demo"
DATA = ROOT / "data" / "uci_mushroom" / "agaricus-lepiota.csv.gz"
METADATA = ROOT / "config" / "demo" / "mushroom.metadata.json"
ATTRIBUTION = (
    "UCI Machine Learning Repository, Mushroom data set (J. Schlimmer, 1987), "
    "doi:10.24432/C5959T, licensed CC BY 4.0"
)
console = Console()


def free_port() -> int:
    """A free TCP port on localhost."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_server(owner_key: str, port: int) -> subprocess.Popen[bytes]:
    """``dpmine-server serve`` on SQLite under var/demo; waits until /v1/health answers."""
    env = {
        **os.environ,
        "DPMINE_DATABASE_URL": f"sqlite:///{WORK / 'dpmine.sqlite3'}",
        "DPMINE_DATA_DIR": str(WORK / "data"),
        "DPMINE_BOOTSTRAP_OWNER_KEY": owner_key,
        "DPMINE_SECRET_KEY": secrets.token_urlsafe(48),
    }
    log = (WORK / "server.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "dpmine_server.cli", "serve", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the server exited early; see {WORK / 'server.log'}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/health", timeout=1).status_code == 200:
                return process
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    process.kill()
    raise SystemExit("the server did not start within 60 s")


def owner_setup(url: str, owner_key: str) -> str:
    """Register the dataset, create the analyst, grant ε = 1; returns the analyst's key."""
    with dpmine.connect(url, owner_key) as owner:
        request = CreateDatasetRequest(
            id="mushroom",
            name="UCI Mushroom (two views: cap and gills | stalk, ring, spores, class)",
            description="8,124 mushrooms of 23 species described by 22 categorical attributes.",
            attribution=ATTRIBUTION,
            epsilon_cap=5.0,
            metadata=DatasetMetadata.model_validate_json(METADATA.read_text()),
            source=CsvSource(path=DATA.name),
        )
        owner.admin.upload_dataset(request, {"path": DATA})
        analyst = owner.admin.add_principal("demo-analyst", "analyst")
        owner.admin.grant("mushroom", "demo-analyst", 1.0)
    console.print("[bold]owner[/]: registered 'mushroom', created analyst, granted ε = 1")
    return analyst.api_key


def analyse(url: str, analyst_key: str) -> list[Receipt]:
    """The analyst's private run over HTTP; returns the receipts of every charged call."""
    receipts: list[Receipt] = []
    with dpmine.connect(url, analyst_key) as connection:
        mushroom = connection.dataset("mushroom")
        console.print(
            f"[bold]analyst[/]: budget before: ε = {mushroom.budget().remaining_epsilon:g}"
        )
        n_hat = mushroom.count(epsilon=0.1)
        receipts.append(n_hat.receipt)
        console.print(f"noisy number of mushrooms: {n_hat.count}")
        odor = mushroom.schema.attribute("odor")
        assert not isinstance(odor, NumericAttribute)
        categories = getattr(odor, "categories", [])
        share = 0.9 / len(categories)
        rows = []
        for category in track(categories, description="noisy quality per odor", console=console):
            left, right = f"[odor = {category}]", "[class = p]"
            result = mushroom.quality(left, right, epsilon=share)
            receipts.append(result.receipt)
            rows.append((left, right, result))
    rows.sort(key=lambda row: row[2].statistics.jaccard, reverse=True)
    table = Table("left query", "right query", "noisy |I|", "noisy |U|", "noisy J", "p-value")
    table.title = "redescriptions 'odor ⟺ poisonous', ranked by noisy Jaccard"
    for left, right, result in rows:
        stats = result.statistics
        p_value = "-" if stats.p_value is None else f"{stats.p_value:.2g}"
        table.add_row(
            escape(left),
            escape(right),
            str(stats.support),
            str(stats.union),
            f"{stats.jaccard:.3f}",
            p_value,
        )
    console.print(table)
    return receipts


def print_receipts(receipts: list[Receipt]) -> None:
    """The budget receipt: every charge, the total and what is left."""
    table = Table("ledger entry", "operation", "ε", "guarantee", title="budget receipt")
    for receipt in receipts:
        table.add_row(
            str(receipt.ledger_entry_id),
            receipt.operation,
            receipt.epsilon_exact,
            receipt.guarantee,
        )
    total = sum((float(r.epsilon_exact) for r in receipts), 0.0)
    table.caption = f"spent ε ≈ {total:.4g}; remaining ε = {receipts[-1].remaining_epsilon:g}"
    console.print(table)


def main() -> None:
    """Run the whole demo and always stop the server."""
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    owner_key = "dpm_owner_" + secrets.token_urlsafe(32)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = start_server(owner_key, port)
    console.print(f"server up at {url} (SQLite at {WORK / 'dpmine.sqlite3'})")
    try:
        analyst_key = owner_setup(url, owner_key)
        receipts = analyse(url, analyst_key)
        print_receipts(receipts)
        with dpmine.connect(url, owner_key) as owner:
            check = owner.admin.verify_ledger()
            entries = owner.admin.ledger("mushroom")
        console.print(
            f"[bold]owner[/]: ledger has {len(entries)} entries; consistent: {check['consistent']}"
        )
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
        console.print("server stopped")


if __name__ == "__main__":
    main()
