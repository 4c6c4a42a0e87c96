"""``dpmine mine alt-expm | alt-mcmc | tree-pair`` (ALGORITHMS.md §3.7) against a real server.

Like ``test_cli.py``: ``typer.testing.CliRunner`` against a live uvicorn server on SQLite (the
``sqlite_server`` fixture), on the two-view UCI Mushroom data registered through the client. The
checks are on the wiring of the command line: the planned and charged calls (operation names,
exact ε shares), the budget moved by exactly the receipts, the written JSON / CSV / plot files
agreeing with each other and with what is printed, pruning, and one-line errors (exit 2, no
traceback) that charge nothing. The miners' numerical behaviour is tested in
``tests/e2e/test_tree_miners.py``.
"""

from __future__ import annotations

import csv
import json
import re
import shlex
from collections import Counter
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

import dpmine
from dpmine.cli import app as analyst_app
from dpmine.significance import CHECKS
from dpmine.wire import BudgetStatus, DatasetInfo, EstimateResponse
from support.datasets import register_mushroom
from support.servers import Account, LiveServer, add_analyst

RUNNER = CliRunner()
#: Wide enough that long tree queries and the interval columns fit on one line.
ANALYST_ENV = {"COLUMNS": "400", "DPMINE_URL": "", "DPMINE_API_KEY": ""}
GRANT = 200.0
#: Small, fast runs: trees of depth 2, few MCMC iterations.
SMALL = "--depth 2 --iterations 1000 --seed 7"


def _flat(text: str) -> str:
    return " ".join(text.split())


def dpmine_cli(server: LiveServer, api_key: str, command: str) -> Result:
    """``dpmine --url URL --api-key KEY <command>``."""
    args = ["--url", server.url, "--api-key", api_key, *shlex.split(command)]
    return RUNNER.invoke(analyst_app, args, env=ANALYST_ENV)


def _ok(result: Result) -> str:
    assert result.exit_code == 0, (result.exit_code, result.output, repr(result.exception))
    return result.stdout


def _json(result: Result) -> Any:
    return json.loads(_ok(result))


def _error(result: Result) -> str:
    """A clean exit 2 with one 'error:' line and no traceback."""
    assert result.exit_code == 2, (result.exit_code, result.output, repr(result.exception))
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    text = _flat(result.stderr)
    assert text.startswith("error:"), text
    assert "Traceback" not in result.output
    return text


@pytest.fixture(scope="module")
def server(sqlite_server: LiveServer) -> LiveServer:
    return sqlite_server


@pytest.fixture(scope="module")
def owner_connection(server: LiveServer) -> Iterator[dpmine.Connection]:
    with dpmine.connect(server.url, server.owner_key, retries=0) as connection:
        yield connection


@pytest.fixture(scope="module")
def mushroom(owner_connection: dpmine.Connection) -> DatasetInfo:
    return register_mushroom(owner_connection, epsilon_cap=1000.0)


@pytest.fixture
def account(
    server: LiveServer, owner_connection: dpmine.Connection, mushroom: DatasetInfo
) -> Iterator[Account]:
    """A fresh analyst with GRANT ε on the mushroom dataset."""
    created = add_analyst(server, owner_connection)
    owner_connection.admin.grant(mushroom.id, created.name, GRANT)
    try:
        yield created
    finally:
        created.connection.close()


def _remaining(server: LiveServer, account: Account, dataset_id: str) -> Decimal:
    status = BudgetStatus.model_validate(
        _json(dpmine_cli(server, account.api_key, f"--json budget {dataset_id}"))
    )
    return Decimal(repr(status.remaining_epsilon))


def _charged(payload: dict[str, Any]) -> Decimal:
    return sum((Decimal(r["epsilon_exact"]) for r in payload["receipts"]), Decimal(0))


# --------------------------------------------------------------------------------------------
# --plan-only: priced, free


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        # standard: InTr 1, RMIter 3 -> 1 + 3 trees, 3 leaf counts; ε_unit = 14 / 7 = 2
        ("alt-expm --epsilon 14 --setting standard --k 3", {"tree.expmech": 4}),
        # stable: InTr 3, RMIter 1 -> 3·2 trees, 3 leaf counts; ε_unit = 18 / 9 = 2
        ("alt-mcmc --epsilon 18 --setting stable --k 3", {"tree.mcmc": 6}),
        # explicit InTr 2, RMIter 2 override the setting -> 2·3 trees, 4 leaf counts; 20/10
        ("alt-mcmc --epsilon 20 --in-trees 2 --rm-iterations 2", {"tree.mcmc": 6}),
    ],
)
def test_plan_only_prices_the_alternations_without_charging(
    server: LiveServer,
    account: Account,
    mushroom: DatasetInfo,
    command: str,
    expected: dict[str, int],
) -> None:
    before = _remaining(server, account, mushroom.id)
    verb, rest = command.split(" ", 1)
    estimate = EstimateResponse.model_validate(
        _json(
            dpmine_cli(
                server, account.api_key, f"--json mine {verb} {mushroom.id} {rest} --plan-only"
            )
        )
    )
    operations = Counter(call.operation for call in estimate.calls)
    leaf_counts = operations.pop("tree.leaf_counts")
    assert dict(operations) == expected
    assert leaf_counts == len(estimate.calls) - sum(expected.values())
    assert {call.epsilon_exact for call in estimate.calls} == {"2"}
    assert Decimal(estimate.total_epsilon_exact) == 2 * len(estimate.calls)
    assert estimate.fits is (Decimal(estimate.total_epsilon_exact) <= Decimal(repr(GRANT)))
    assert _remaining(server, account, mushroom.id) == before


@pytest.mark.parametrize(
    "case",
    [
        # auto chooses the rounds: 1 drawn attribute, then per round a tree and a release.
        ("alt-expm", "", "tree.expmech", None),
        # --k given under auto: RMIter 2, so 1 + 2 trees and 2 releases.
        ("alt-expm", "--k 2", "tree.expmech", 2),
        # tree-pair under auto: --in-trees given, 3 pairs and 3 releases.
        ("tree-pair", "--in-trees 3", "tree.pair_mcmc", 3),
    ],
)
def test_preset_auto_buys_a_row_count_and_keeps_the_options_given(
    server: LiveServer,
    account: Account,
    mushroom: DatasetInfo,
    case: tuple[str, str, str, int | None],
) -> None:
    """``--preset auto`` plans the auto preset of the Python miners (issue #21 item 4): a noisy
    row count first, then depth, rounds and the ε split from it; options given win. Free."""
    verb, options, trees, leaf_counts = case
    before = _remaining(server, account, mushroom.id)
    command = f"mine {verb} {mushroom.id} --epsilon 8 --preset auto {options} --plan-only"
    estimate = EstimateResponse.model_validate(
        _json(dpmine_cli(server, account.api_key, f"--json {command}"))
    )
    operations = Counter(call.operation for call in estimate.calls)
    assert estimate.calls[0].operation == "count.noisy"
    assert operations["count.noisy"] == 1
    releases = operations["tree.leaf_counts"]
    assert releases >= 1
    if leaf_counts is not None:
        assert releases == leaf_counts
    if trees == "tree.expmech":
        assert operations[trees] == 1 + releases
    else:
        assert operations[trees] == releases
    assert Decimal(estimate.total_epsilon_exact) <= 8
    text = _flat(_ok(dpmine_cli(server, account.api_key, command)))
    assert "preset auto" in text, text
    paper = EstimateResponse.model_validate(
        _json(
            dpmine_cli(
                server, account.api_key, f"--json mine {verb} {mushroom.id} --epsilon 8 --plan-only"
            )
        )
    )
    assert "count.noisy" not in {call.operation for call in paper.calls}
    assert _remaining(server, account, mushroom.id) == before


def test_plan_only_of_tree_pair_splits_epsilon_by_omega(
    server: LiveServer, account: Account, mushroom: DatasetInfo
) -> None:
    result = dpmine_cli(
        server,
        account.api_key,
        f"mine tree-pair {mushroom.id} --epsilon 8 --in-trees 2 --omega 0.25 --plan-only "
        "--pair-score paper",
    )
    text = _flat(_ok(result))
    # ε_iter = 8 / 2 = 4: the pair with ω·4 = 1, its leaf counts with (1 − ω)·4 = 3.
    assert "tree.pair_mcmc 2 1" in text, text
    assert "tree.leaf_counts 2 3" in text, text
    assert "total ε=8;" in text
    assert "fits: True" in text
    # The signal report: the pair score (sensitivity 1, range 1) gives c·R = ω·4/2 = 0.5.
    assert "tree.pair_mcmc (both): 2 draw(s) at ε = 1: c·R = 0.5" in text, text
    assert "UNIFORM-LIKE" in text
    assert "tree.leaf_counts: 2 release(s) at ε = 3" in text, text


# --------------------------------------------------------------------------------------------
# Mining: receipts, budget, files


def test_alt_expm_writes_json_csv_and_plot_that_agree_with_the_output(
    server: LiveServer, account: Account, mushroom: DatasetInfo, tmp_path: Path
) -> None:
    before = _remaining(server, account, mushroom.id)
    json_file, csv_file, plot_file = tmp_path / "r.json", tmp_path / "r.csv", tmp_path / "r.png"
    result = dpmine_cli(
        server,
        account.api_key,
        f"--json mine alt-expm {mushroom.id} --epsilon 12 --setting stable --k 2 --depth 2 "
        f"--seed 3 --min-support 1 --min-jaccard 0 --p-max 1 --all "
        f"--output {json_file} --output {csv_file} --plot {plot_file}",
    )
    payload = _json(result)
    assert payload["miner"] == "AltExpM"
    # stable k=2: 2 × (tree on the other view, tree back, leaf counts), ε_unit = 12 / 6 = 2.
    operations = [r["operation"] for r in payload["receipts"]]
    assert operations == ["tree.expmech", "tree.expmech", "tree.leaf_counts"] * 2
    assert {r["epsilon_exact"] for r in payload["receipts"]} == {"2"}
    assert _charged(payload) == 12
    assert before - _remaining(server, account, mushroom.id) == 12

    written = json.loads(json_file.read_text(encoding="utf-8"))
    assert written["miner"] == "AltExpM"
    assert len(written["trees"]) == 2
    assert all(pair["left"]["depth"] == 2 for pair in written["trees"])
    assert written["receipts"] == payload["receipts"]
    # With these loose filters the depth-2 pairs of Mushroom yield redescriptions.
    assert written["redescriptions"], "expected redescriptions with min support 1, J 0, p 1"
    printed = [(r["left"], r["right"], r["noisy_jaccard"]) for r in payload["redescriptions"]]
    in_json = [(r["left"], r["right"], r["noisy_jaccard"]) for r in written["redescriptions"]]
    assert printed == in_json
    with csv_file.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["left"], r["right"]) for r in rows] == [(r[0], r[1]) for r in in_json]
    assert [float(r["noise_scale"]) for r in rows] == [0.5] * len(rows)  # 1 / ε_unit
    assert plot_file.read_bytes().startswith(b"\x89PNG")


def test_alt_mcmc_table_lists_every_redescription_and_the_spend(
    server: LiveServer, account: Account, mushroom: DatasetInfo, tmp_path: Path
) -> None:
    json_file = tmp_path / "r.json"
    result = dpmine_cli(
        server,
        account.api_key,
        f"mine alt-mcmc {mushroom.id} --epsilon 5 --setting standard --k 2 {SMALL} "
        f"--min-support 1 --min-jaccard 0 --p-max 1 --all --output {json_file}",
    )
    text = _flat(_ok(result))
    written = json.loads(json_file.read_text(encoding="utf-8"))
    assert [r["operation"] for r in written["receipts"]] == [
        "tree.mcmc",
        *["tree.mcmc", "tree.leaf_counts"] * 2,
    ]
    assert "AltMCMC redescriptions" in text
    for red in written["redescriptions"]:
        assert _flat(red["left"]) in text
        assert _flat(red["right"]) in text
    found = len(written["redescriptions"])
    passed = sum(red["significant"] for red in written["redescriptions"])
    assert f"{passed} of {found} results pass the noise-aware test" in text
    assert "from 2 tree pairs; 5 charged calls, ε spent = 5" in text


def test_alt_mcmc_sampler_is_chosen_and_said(
    server: LiveServer, account: Account, mushroom: DatasetInfo
) -> None:
    """--sampler reaches every tree.mcmc call; the output says which sampler drew the trees
    and the guarantee, as the receipts do (Mushroom's categorical views fit the exact
    sampler at depth 2)."""
    base = f"mine alt-mcmc {mushroom.id} --epsilon 2 --setting standard --k 1 {SMALL}"
    for sampler, guarantee, counts in (
        ("exact", "pure", {"exact": 2, "mcmc": 0}),
        ("mcmc", "approximate", {"exact": 0, "mcmc": 2}),
    ):
        payload = _json(dpmine_cli(server, account.api_key, f"--json {base} --sampler {sampler}"))
        trees = [r for r in payload["receipts"] if r["operation"] == "tree.mcmc"]
        assert [r["guarantee"] for r in trees] == [guarantee] * 2
        assert payload["tree_samplers"] == counts
    text = _flat(_ok(dpmine_cli(server, account.api_key, f"{base} --sampler exact")))
    assert "trees: 2 drawn exactly (pure ε-DP)" in text
    text = _flat(_ok(dpmine_cli(server, account.api_key, f"{base} --sampler mcmc")))
    assert "trees: 2 by MCMC (approximate: ε-DP at convergence)" in text


def test_leaf_release_paper_prints_the_papers_noise_scale(
    server: LiveServer, account: Account, mushroom: DatasetInfo
) -> None:
    result = dpmine_cli(
        server,
        account.api_key,
        f"--json mine alt-expm {mushroom.id} --epsilon 6 --setting stable --k 2 --depth 2 "
        "--seed 3 --min-support 1 --min-jaccard 0 --p-max 1 --leaf-release paper",
    )
    reds = _json(result)["redescriptions"]
    assert reds, "expected redescriptions with min support 1, J 0, p 1"
    # ε_unit = 6 / 6 = 1: each of the paper's two releases has scale 2/ε_unit.
    assert {r["noise_scale"] for r in reds} == {2.0}


@pytest.mark.parametrize("threshold", ["1", "1e9"])
def test_tree_pair_prune_keeps_exactly_the_large_noisy_supports(
    server: LiveServer, account: Account, mushroom: DatasetInfo, tmp_path: Path, threshold: str
) -> None:
    json_file = tmp_path / "r.json"
    shown = _json(
        dpmine_cli(
            server,
            account.api_key,
            f"--json mine tree-pair {mushroom.id} --epsilon 160 --in-trees 16 --omega 0.5 "
            f"--depth 2 --iterations 2000 --seed 7 --min-support 1 --min-jaccard 0 --p-max 1 "
            f"--all --output {json_file} --prune {threshold}",
        )
    )
    assert [r["operation"] for r in shown["receipts"]] == [
        "tree.pair_mcmc",
        "tree.leaf_counts",
    ] * 16
    # ε_iter = 10: the pair and its leaf counts 5 each. Sixteen pairs, because about half of the
    # pairs sampled at this ε are one-dominant-leaf trees that yield no redescription (the §3.5
    # score's degenerate optimum), and the check needs some.
    assert {r["epsilon_exact"] for r in shown["receipts"]} == {"5"}
    # The file holds every redescription of the run (all have I ≥ --min-support 1); the output
    # only those with I ≥ --prune: all of them at 1, none at 1e9.
    everything = json.loads(json_file.read_text(encoding="utf-8"))["redescriptions"]
    assert everything, "sixteen depth-2 pairs of Mushroom at ε = 5 give redescriptions"
    kept = [(r["left"], r["right"]) for r in shown["redescriptions"]]
    large = [
        (r["left"], r["right"]) for r in everything if r["noisy_intersection"] >= float(threshold)
    ]
    assert kept == large
    assert len(kept) == (len(everything) if threshold == "1" else 0)


def test_max_jaccard_error_keeps_exactly_the_precise_results(
    server: LiveServer, account: Account, mushroom: DatasetInfo, tmp_path: Path
) -> None:
    """--max-jaccard-error shows the results whose noisy J has at most that standard error
    (the public pruning rule; here among all results, --all), and the table prints each noisy
    J with its error. AltMCMC, whose alternations always give redescriptions on Mushroom (a
    tree pair may give none, §3.5)."""
    json_file = tmp_path / "r.json"
    command = (
        f"mine alt-mcmc {mushroom.id} --epsilon 5 --setting standard --k 2 {SMALL} "
        f"--min-support 1 --min-jaccard 0 --p-max 1 --output {json_file} "
        "--max-jaccard-error 0.05 --all"
    )
    table = _ok(dpmine_cli(server, account.api_key, command))
    everything = json.loads(json_file.read_text(encoding="utf-8"))["redescriptions"]
    assert everything
    precise = [r for r in everything if r["noisy_jaccard_error"] <= 0.05]
    assert f"; {len(precise)} shown with s.e. of noisy J ≤ 0.05;" in " ".join(table.split())
    assert len(re.findall(r"\d\.\d{3} ± \d\.\d{3}", table)) == len(precise)


# --------------------------------------------------------------------------------------------
# The noise-aware significance test (issue #21): the default output, --all, the files


def _failed(record: dict[str, Any], examined: int, min_jaccard: float) -> list[str]:
    """The checks a result fails, recomputed from the interval ends a file carries."""
    joint = record["joint_intervals"]
    checks = {
        "p_value": joint["p_value"][1] <= 0.01 / examined,
        "excess": joint["excess"][0] > 0,
        "jaccard": joint["jaccard"][0] >= min_jaccard,
    }
    return [name for name, holds in checks.items() if not holds]


def test_default_output_is_what_passes_and_all_shows_every_result(
    server: LiveServer, account: Account, mushroom: DatasetInfo, tmp_path: Path
) -> None:
    """By default only the results that pass the noise-aware test are printed, by J's lower
    end; the files hold every result with its joint intervals and ``significant``; ``--all``
    prints every result with a "passes" column. The extraction's filters are loose (support
    1, p 1), so the file holds results the test judges, not only those the paper's noisy
    filters keep."""
    loose = f"--min-support 1 --min-jaccard 0.1 --p-max 1 {SMALL}"
    json_file, csv_file = tmp_path / "r.json", tmp_path / "r.csv"
    shown = _json(
        dpmine_cli(
            server,
            account.api_key,
            f"--json mine alt-mcmc {mushroom.id} --epsilon 5 --setting standard --k 2 {loose} "
            f"--output {json_file} --output {csv_file}",
        )
    )
    written = json.loads(json_file.read_text(encoding="utf-8"))
    everything, summary = written["redescriptions"], written["significance"]
    assert summary["alpha"] == 0.01
    assert summary["min_jaccard"] == 0.1
    assert summary["examined"] >= len(everything) > 0
    lows = [r["joint_intervals"]["jaccard"][0] for r in everything]
    assert lows == sorted(lows, reverse=True)
    for red in everything:
        failed = _failed(red, summary["examined"], 0.1)
        assert red["failed_checks"] == failed
        assert red["significant"] == (not failed)
        low, high = red["joint_intervals"]["jaccard"]
        assert low <= red["noisy_jaccard"] <= high or red["noisy_union"] == 0
    passing = [(r["left"], r["right"]) for r in everything if r["significant"]]
    assert summary["passed"] == len(passing)
    assert [(r["left"], r["right"]) for r in shown["redescriptions"]] == passing
    assert shown["significance"] == summary
    with csv_file.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["left"], r["right"], r["significant"], r["failed_checks"]) for r in rows] == [
        (r["left"], r["right"], str(r["significant"]), ";".join(r["failed_checks"]))
        for r in everything
    ]
    failing = [r for r in everything if not r["significant"]]
    assert failing, "at --p-max 1 and k 2 some results fail the test"
    counts = {c: sum(c in r["failed_checks"] for r in everything) for c in CHECKS}
    assert summary["failed_checks"] == counts
    assert {"joint_p_value_high", "joint_excess_low", "joint_jaccard_low"} <= set(rows[0])

    # --all on another run: every result is printed, marked yes or no with what it failed.
    every_file = tmp_path / "all.json"
    printed = _ok(
        dpmine_cli(
            server,
            account.api_key,
            f"mine alt-mcmc {mushroom.id} --epsilon 5 --setting standard --k 2 {loose} "
            f"--all --output {every_file}",
        )
    )
    table = _flat(printed)
    again = json.loads(every_file.read_text(encoding="utf-8"))
    # Piped, the table is one line per result: its last column says whether it passes.
    marks = re.findall(r"\s{2,}(yes|no: [a-zA-Z, ]+)$", printed, re.M)
    labels = {"p_value": "p", "excess": "excess", "jaccard": "J"}
    assert marks == [
        "no: " + ", ".join(labels[c] for c in r["failed_checks"]) if r["failed_checks"] else "yes"
        for r in again["redescriptions"]
    ]
    assert "passes" in table
    assert f"{again['significance']['passed']} of {len(marks)} results pass" in table


def test_when_nothing_passes_the_run_says_so_and_how_to_get_more_signal(
    server: LiveServer, account: Account, mushroom: DatasetInfo
) -> None:
    """At ε = 0.015 (a noise scale of 600 per released cell) no interval excludes J = 0: the
    output says that nothing passed, what was spent and what to change, and --all still has
    the results."""
    command = f"mine alt-mcmc {mushroom.id} --epsilon 0.015 --setting standard --k 1 {SMALL}"
    text = _flat(_ok(dpmine_cli(server, account.api_key, command)))
    assert "AltMCMC redescriptions that pass the noise-aware test: none" in text
    assert "No result passes the noise-aware test (p ≤ α/m = 0.01/" in text
    assert "ε spent: 0.015. For more signal: preset='auto' (CLI --preset auto" in text
    assert "shallower trees (depth, CLI --depth" in text
    assert "a larger ε" in text
    assert "fewer attributes or columns" in text
    payload = _json(dpmine_cli(server, account.api_key, f"--json {command} --all"))
    assert payload["significance"]["passed"] == 0
    assert payload["message"].startswith("No result passes the noise-aware test")
    assert len(payload["redescriptions"]) == payload["significance"]["total"]
    assert all(not red["significant"] for red in payload["redescriptions"])


# --------------------------------------------------------------------------------------------
# Errors: one line, exit 2, nothing charged


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ("tree-pair {ds} --epsilon 1 --omega 1.5", "--omega must be strictly between 0 and 1"),
        ("alt-expm {ds} --epsilon 1 --setting balanced", "--setting must be 'standard' or"),
        ("alt-mcmc {ds} --epsilon 1 --output out.txt", "--output must end in .json or .csv"),
        ("alt-expm {ds} --epsilon 1e-14", "below the ledger's unit"),
        ("alt-mcmc {ds} --epsilon 1 --rm-iterations 0", "rm_iterations must be a whole number"),
        ("tree-pair {ds} --epsilon 1000", "only ε=200 remains; nothing was spent"),
        ("alt-expm no-such-dataset --epsilon 1", "error:"),
        ("tree-pair {ds} --epsilon 1 --depth 99", "too few attributes for a tree of depth 99"),
        ("alt-mcmc {ds} --epsilon 1 --leaf-release exact", "--leaf-release must be 'partition'"),
        ("alt-mcmc {ds} --epsilon 1 --iterations 999", "at least 1000, the server's public"),
        ("alt-mcmc {ds} --epsilon 1 --sampler chain", "--sampler must be 'auto', 'exact' or"),
        ("tree-pair {ds} --epsilon 1 --iterations 10", "at least 1000, the server's public"),
    ],
)
def test_tree_miner_errors_are_one_line_and_charge_nothing(
    server: LiveServer, account: Account, mushroom: DatasetInfo, command: str, message: str
) -> None:
    before = _remaining(server, account, mushroom.id)
    text = _error(dpmine_cli(server, account.api_key, "mine " + command.format(ds=mushroom.id)))
    assert message in text, text
    assert _remaining(server, account, mushroom.id) == before


def test_exclude_keeps_the_columns_out_of_targets_and_splits(
    server: LiveServer, account: Account, mushroom: DatasetInfo, tmp_path: Path
) -> None:
    """--exclude odor,class: no released tree splits on them (the server restricts the
    splits) and no drawn target is one of them; an unknown column charges nothing."""
    json_file = tmp_path / "r.json"
    payload = _json(
        dpmine_cli(
            server,
            account.api_key,
            f"--json mine alt-expm {mushroom.id} --epsilon 12 --setting stable --k 2 --depth 2 "
            f"--seed 1 --exclude odor,class --exclude spore-print-color --output {json_file}",
        )
    )
    assert _charged(payload) == 12
    trees = json.loads(json_file.read_text(encoding="utf-8"))["trees"]
    used = {
        split["attribute"] for pair in trees for tree in pair.values() for split in tree["splits"]
    }
    assert used
    assert not used & {"odor", "class", "spore-print-color"}
    before = _remaining(server, account, mushroom.id)
    text = _error(
        dpmine_cli(
            server, account.api_key, f"mine tree-pair {mushroom.id} --epsilon 1 --columns odor"
        )
    )
    assert "leave the left view no attribute" in text, text
    assert _remaining(server, account, mushroom.id) == before
