"""The main job (``make demo``): a real server, a real dataset, a private analysis over HTTP.

1. starts ``dpmine-server serve`` (uvicorn) on embedded SQLite under ``var/demo``;
2. as the data owner: registers the bundled UCI Mushroom data as a two-view dataset with its
   confirmed public metadata (``config/demo/mushroom.metadata.json``), creates an analyst and
   grants it ε = 2;
3. as the analyst, through the ``dpmine`` client over HTTP: a private top-10 frequent itemset
   run (Bhaskar et al.'s exponential mechanism, with noisy counts, frequencies from a noisy row
   count, and association rules derived from them), then a SerenadeES redescription mining run
   (auto preset: initial pairs, extension rounds, noisy quality) between the cap/gill/odor view
   and the stalk/ring/spore/habitat/class view, showing the redescriptions that pass the
   noise-aware significance test, with intervals that hold together with probability ≥ 99 %;
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
from decimal import Decimal
from pathlib import Path

import httpx
from rich.console import Console
from rich.markup import escape
from rich.table import Table

import dpmine
from dpmine.amounts import epsilon_sum, epsilon_text
from dpmine.intervals import format_with_interval
from dpmine.miners import SerenadeES, TopKItemsets
from dpmine.wire import CreateDatasetRequest, CsvSource, DatasetMetadata, Receipt

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "var" / "demo"
DATA = ROOT / "data" / "uci_mushroom" / "agaricus-lepiota.csv.gz"
METADATA = ROOT / "config" / "demo" / "mushroom.metadata.json"
#: The server compiles its kernels before it serves (nothing compiles inside a padded request);
#: the first start after an install does it from scratch: about 40 s alone on 2 cores, over a
#: minute beside other work. After this long without an answer, say so; give up after the other.
SLOW_START_S = 5.0
START_TIMEOUT_S = 300
ATTRIBUTION = (
    "UCI Machine Learning Repository, Mushroom data set (J. Schlimmer, 1987), "
    "doi:10.24432/C5959T, licensed CC BY 4.0"
)
console = Console()
#: A receipt and the run of the demo it paid for ("itemsets", "SerenadeES").
RunReceipt = tuple[str, Receipt]


def eps(value: float | Decimal | str) -> str:
    """A budget amount as the demo prints every one of them: ε and its exact decimal."""
    return f"ε {epsilon_text(value)}"


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
    started = time.monotonic()
    told = False
    while time.monotonic() < started + START_TIMEOUT_S:
        if process.poll() is not None:
            raise SystemExit(f"the server exited early; see {WORK / 'server.log'}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/health", timeout=1).status_code == 200:
                return process
        except httpx.TransportError:
            pass
        if not told and time.monotonic() > started + SLOW_START_S:
            console.print(
                "the server is starting: its first start after an install compiles the kernels "
                "before it serves (a minute or two on 2 cores; later starts reuse them)"
            )
            told = True
        time.sleep(0.2)
    process.terminate()  # a graceful stop also stops the server's worker processes
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
    raise SystemExit(
        f"the server did not start within {START_TIMEOUT_S} s; see {WORK / 'server.log'}"
    )


def owner_setup(url: str, owner_key: str) -> str:
    """Register the dataset, create the analyst, grant ε = 1; returns the analyst's key."""
    with dpmine.connect(url, owner_key) as owner:
        request = CreateDatasetRequest(
            id="mushroom",
            name="UCI Mushroom (two views: cap and gills | stalk, ring, spores, class)",
            description="Mushrooms of 23 species: 22 categorical attributes and their edibility.",
            attribution=ATTRIBUTION,
            epsilon_cap=5.0,
            metadata=DatasetMetadata.model_validate_json(METADATA.read_text()),
            source=CsvSource(path=DATA.name),
        )
        owner.admin.upload_dataset(request, {"path": DATA})
        analyst = owner.admin.add_principal("demo-analyst", "analyst")
        owner.admin.grant("mushroom", "demo-analyst", 2.0)
    console.print(f"[bold]owner[/]: registered 'mushroom', created an analyst, granted {eps(2)}")
    return analyst.api_key


def explain_noise(counts: list[int], n_hat: int | None) -> None:
    """Say why a noisy count can pass the row count and a frequency can pass 1."""
    console.print(
        "  Every count above carries noise, so a count can exceed the true number of rows (not "
        "released: the analyst only has the noisy row count"
        + ("" if n_hat is None else f" {n_hat}")
        + "), and a frequency, noisy count / noisy row count, can exceed 1. That is the privacy "
        "at work, not an error."
    )
    if n_hat is not None and any(count > n_hat for count in counts):
        console.print(
            f"  Here {sum(c > n_hat for c in counts)} count(s) exceed the noisy row count."
        )


def mine_itemsets(mushroom: dpmine.DatasetHandle) -> list[RunReceipt]:
    """Top-10 itemsets of length 1-3 (ε = 0.5 + 0.1 for the row count) and their rules."""
    miner = TopKItemsets(k=10, length=(1, 3), epsilon=0.5, frequency_epsilon=0.1)
    plan = miner.plan(mushroom)
    console.print(
        f"[bold]run 1, itemsets[/]: plan of {len(plan.calls)} calls, "
        f"{eps(plan.estimate.total_epsilon_exact)}"
    )
    with console.status("mining the top-10 itemsets on the server"):
        miner.mine(mushroom)
    table = Table("rank", "itemset", "noisy count [90 %, all 10]", "noisy frequency")
    table.title = "top-10 frequent itemsets (exponential mechanism)"
    for itemset in miner.itemsets_:
        frequency = itemset.noisy_frequency
        table.add_row(
            str(itemset.rank),
            escape(" & ".join(itemset.items)),
            f"{itemset.noisy_count} [{itemset.count_low}, {itemset.count_high}]",
            "-" if frequency is None else f"{frequency:.3f}",
        )
    console.print(table)
    for note in miner.notes():
        console.print(f"  {escape(note)}")
    explain_noise(
        [i.noisy_count for i in miner.itemsets_ if i.noisy_count is not None],
        miner.noisy_row_count_,
    )
    rules = miner.rules(min_confidence=0.95)[:5]
    for rule in rules:
        console.print(
            f"  rule {escape(' & '.join(rule.antecedent))} → {escape(' & '.join(rule.consequent))}"
            f"  confidence {rule.confidence:.3f} (from noisy counts)"
        )
    return [("1 itemsets", receipt) for receipt in miner.receipts_]


def redescriptions(mushroom: dpmine.DatasetHandle) -> list[RunReceipt]:
    """SerenadeES with the auto preset: ε = 1 in all, the noisy row count behind x0 included;
    I, K and the split chosen from public quantities so that every draw carries signal."""
    miner = SerenadeES(epsilon=1.0, progress=True)
    plan = miner.plan(mushroom)
    console.print(
        f"[bold]run 2, SerenadeES[/]: plan of {eps(plan.estimate.total_epsilon_exact)} in all "
        "(the run chooses its number of calls from its noisy row count, within that ε)"
    )
    miner.mine(mushroom)
    table = Table("left query (cap, gills, odor)", "right query (stalk, ring, spores, class, …)")
    table.add_column("noisy |I| [joint]")
    table.add_column("noisy J [joint]")
    table.add_column("J − J_ind [joint]")
    table.add_column("p-value [joint]")
    table.title = "SerenadeES redescriptions that pass the noise-aware test"
    for found in miner.results_:  # by the lower end of J's interval
        joint = found.joint_intervals
        excess = found.noisy_excess
        p = found.statistics.p_value
        table.add_row(
            escape(found.left),
            escape(found.right),
            escape(format_with_interval(found.statistics.support, joint.support, ".0f")),
            escape(format_with_interval(found.noisy_jaccard, joint.jaccard)),
            "-" if excess is None else escape(format_with_interval(excess, joint.excess)),
            "-" if p is None else escape(format_with_interval(p, joint.p_value, ".2g")),
        )
    table.caption = miner.significance_.describe()
    console.print(table)
    message = miner.nothing_passed()
    if message is not None:
        console.print(f"  {escape(message)}")
    console.print(
        "  noisy |I| and J come from noisy cell counts, so |I| can exceed the row count and J "
        "is only an estimate of the true Jaccard. Every interval of the run holds the true "
        "value, all of them together, with probability at least 99 %; a result is shown when "
        'its intervals still say "significant, above independence, J ≥ 0.3" at their worst '
        f"end. miner.all_results_ has all {len(miner.all_results_)} results."
    )
    return [("2 SerenadeES", receipt) for receipt in miner.receipts_]


def analyse(url: str, analyst_key: str) -> list[RunReceipt]:
    """The analyst's private run over HTTP; returns the receipts of every charged call."""
    with dpmine.connect(url, analyst_key) as connection:
        mushroom = connection.dataset("mushroom")
        console.print(
            f"[bold]analyst[/]: budget before: {eps(mushroom.budget().remaining_epsilon)}"
        )
        receipts = mine_itemsets(mushroom)
        receipts += redescriptions(mushroom)
    return receipts


def print_receipts(receipts: list[RunReceipt]) -> None:
    """The budget receipt: charges grouped by run and operation, the exact total, what is left."""
    groups: dict[tuple[str, str, str, str], list[Receipt]] = {}
    for run, receipt in receipts:
        key = (run, receipt.operation, receipt.epsilon_exact, receipt.guarantee)
        groups.setdefault(key, []).append(receipt)
    table = Table(
        "run", "operation", "calls", "ε each", "guarantee", "ledger entries", title="budget receipt"
    )
    for (run, operation, epsilon, guarantee), group in groups.items():
        ids = [r.ledger_entry_id for r in group]
        span = str(ids[0]) if len(ids) == 1 else f"{min(ids)}–{max(ids)}"
        table.add_row(run, operation, str(len(group)), eps(epsilon), guarantee, span)
    total = epsilon_sum(r.epsilon_exact for _, r in receipts)
    table.caption = f"spent {eps(total)}; remaining {eps(receipts[-1][1].remaining_epsilon)}"
    console.print(table)
    console.print(
        "  Amounts are exact. A miner rounds each call's ε down to a whole nano-ε so that its "
        "run never spends more than asked: SerenadeES given ε 1 spends a few nano-ε less."
    )


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
