"""``dpmine mine layered`` (issue #26): the CLI of ``DPLayeredTrees`` over real HTTP against a
live server on the bundled UCI Mushroom data. The plan is free and prices the auto preset's
calls; the run makes exactly those calls, the ledger holds exactly its receipts and their sum
is the plan's; the printed queries of every result, parsed back and counted on the exact
data, are the rows its noisy statistics count (stalk-root is missing on 2480 rows); JSON and
CSV hold the printed rows; ``--exclude`` keeps columns out of every released tree (one run)."""

from __future__ import annotations

import csv
import json
import shlex
from decimal import Decimal
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

import dpmine
from dpmine.cli import app as analyst_app
from dpmine.queries import parse_query
from dpmine.wire import EstimateResponse
from dpmine.wire.queries import Redescription
from support.datasets import mushroom_table, register_mushroom
from support.servers import Account, LiveServer

RUNNER = CliRunner()
ANALYST_ENV = {"COLUMNS": "400", "DPMINE_URL": "", "DPMINE_API_KEY": ""}
EPSILON = 20.0
#: |discrete Laplace| of scale b exceeds 40·b with probability < e^-40; a count sums at most
#: (2^3 + 1)² cells of a depth-3 pair's partition.
NOISE_BAND = 40 * 81


def _cli(server: LiveServer, api_key: str, command: str) -> Any:
    """``dpmine --json --url URL --api-key KEY <command>``, its JSON output."""
    args = ["--json", "--url", server.url, "--api-key", api_key, *shlex.split(command)]
    result = RUNNER.invoke(analyst_app, args, env=ANALYST_ENV)
    assert result.exit_code == 0, (result.exit_code, result.output, repr(result.exception))
    return json.loads(result.stdout)


def test_mine_layered_spends_its_plan_and_prints_what_it_measured(
    any_server: LiveServer, owner: dpmine.Connection, analyst: Account, tmp_path: Path
) -> None:
    info = register_mushroom(owner, epsilon_cap=3 * EPSILON)
    owner.admin.grant(info.id, analyst.name, 3 * EPSILON)
    dataset = analyst.connection.dataset(info.id)
    excluded = {"odor", "spore-print-color"}
    run = f"mine layered {info.id} --epsilon {EPSILON:g} --seed 5 --exclude odor,spore-print-color"

    plan = EstimateResponse.model_validate(_cli(any_server, analyst.api_key, f"{run} --plan-only"))
    assert dataset.budget().grant_spent == 0.0  # the plan is free
    operations = [call.operation for call in plan.calls]
    assert operations[0] == "count.noisy"  # the auto preset's n̂, then seeds × layers
    layers = operations[1:]
    assert len(layers) >= 2
    assert layers == ["tree.expmech", "tree.leaf_counts"] * (len(layers) // 2)
    planned = Decimal(plan.total_epsilon_exact)
    assert Decimal(str(EPSILON)) - Decimal("1e-6") <= planned <= Decimal(str(EPSILON))

    json_file, csv_file = tmp_path / "r.json", tmp_path / "r.csv"
    payload = _cli(
        any_server,
        analyst.api_key,
        f"{run} --all --output {json_file} --output {csv_file}",
    )
    assert payload["miner"] == "DPLayeredTrees"
    receipts = payload["receipts"]
    assert [r["operation"] for r in receipts] == operations
    # The plan priced at the public n_max, the run chose again at its n̂: the same calls and
    # the same total ε up to the nano-ε rounding of each share.
    charged = sum(Decimal(r["epsilon_exact"]) for r in receipts)
    assert Decimal(str(EPSILON)) - Decimal("1e-6") <= charged <= Decimal(str(EPSILON))
    ledger = owner.admin.ledger(info.id)
    assert {entry.id for entry in ledger} == {r["ledger_entry_id"] for r in receipts}
    assert sum(Decimal(entry.epsilon_exact) for entry in ledger) == charged
    assert abs(Decimal(repr(dataset.budget().grant_spent)) - charged) <= Decimal("1e-9")

    # Printed ≡ measured: the printed texts, counted on the exact data, are the noisy counts.
    shown = payload["redescriptions"]
    assert shown, "at ε 20 on Mushroom the final releases yield results"
    for row in shown:
        exact = mushroom_table(
            Redescription(left=parse_query(row["left"]), right=parse_query(row["right"]))
        )
        band = NOISE_BAND * row["noise_scale"]
        noisy = (row["noisy_support_left"], row["noisy_support_right"], row["noisy_intersection"])
        assert all(abs(n - e) <= band for n, e in zip(noisy, exact, strict=True)), (row, exact)

    # JSON and CSV hold the printed rows, in the printed order.
    written = json.loads(json_file.read_text(encoding="utf-8"))
    printed = [(r["left"], r["right"]) for r in shown]
    assert [(r["left"], r["right"]) for r in written["redescriptions"]] == printed
    with csv_file.open(newline="", encoding="utf-8") as handle:
        assert [(r["left"], r["right"]) for r in csv.DictReader(handle)] == printed

    # --exclude: no released tree splits on the excluded columns.
    used = {
        split["attribute"]
        for pair in written["trees"]
        for tree in pair.values()
        for split in tree["splits"]
    }
    assert used
    assert not used & excluded


def test_mine_layered_with_selected_seeds_makes_the_planned_calls(
    any_server: LiveServer, owner: dpmine.Connection, analyst: Account
) -> None:
    """--seed-rule expmech: each seed is one more ``tree.expmech`` before its layers; the run
    makes the planned calls and the ledger holds exactly its receipts."""
    info = register_mushroom(owner, epsilon_cap=EPSILON)
    owner.admin.grant(info.id, analyst.name, EPSILON)
    run = f"mine layered {info.id} --epsilon 8 --seed 3 --seed-rule expmech --seeds 2 --layers 2"
    plan = EstimateResponse.model_validate(_cli(any_server, analyst.api_key, f"{run} --plan-only"))
    operations = [call.operation for call in plan.calls]
    per_seed = ["tree.expmech", *["tree.expmech", "tree.leaf_counts"] * 2]
    assert operations == ["count.noisy", *per_seed * 2]
    payload = _cli(any_server, analyst.api_key, f"{run} --all")
    receipts = payload["receipts"]
    assert [r["operation"] for r in receipts] == operations
    ledger = owner.admin.ledger(info.id)
    assert {entry.id for entry in ledger} == {r["ledger_entry_id"] for r in receipts}
    charged = sum(Decimal(r["epsilon_exact"]) for r in receipts)
    assert Decimal(8) - Decimal("1e-6") <= charged <= Decimal(8)


def test_mine_layered_with_pair_final_releases_makes_the_planned_calls(
    any_server: LiveServer, owner: dpmine.Connection, analyst: Account
) -> None:
    """--final-release pair --query-rule jaccard: each seed's layers steer and one
    ``red.compute_quality`` release measures its last pair; a bad choice is refused before
    any charge."""
    info = register_mushroom(owner, epsilon_cap=EPSILON)
    owner.admin.grant(info.id, analyst.name, EPSILON)
    dataset = analyst.connection.dataset(info.id)
    base = f"mine layered {info.id} --epsilon 8 --seed 3 --seeds 2 --layers 2"
    bad = ["--url", any_server.url, "--api-key", analyst.api_key, *shlex.split(base)]
    refused = RUNNER.invoke(analyst_app, [*bad, "--final-release", "cells"], env=ANALYST_ENV)
    assert refused.exit_code != 0
    assert "--final-release must be 'partition' or 'pair'" in refused.output
    assert dataset.budget().grant_spent == 0.0
    run = f"{base} --final-release pair --query-rule jaccard"
    plan = EstimateResponse.model_validate(_cli(any_server, analyst.api_key, f"{run} --plan-only"))
    operations = [call.operation for call in plan.calls]
    per_seed = [*["tree.expmech", "tree.leaf_counts"] * 2, "red.compute_quality"]
    assert operations == ["count.noisy", *per_seed * 2]
    payload = _cli(any_server, analyst.api_key, f"{run} --all")
    receipts = payload["receipts"]
    assert [r["operation"] for r in receipts] == operations
    ledger = owner.admin.ledger(info.id)
    assert {entry.id for entry in ledger} == {r["ledger_entry_id"] for r in receipts}
    assert len(payload["redescriptions"]) <= 2  # one result per seed at most
