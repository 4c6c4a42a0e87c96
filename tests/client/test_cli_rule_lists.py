"""``dpmine fit rule-list`` and ``dpmine predict rule-list`` (ALGORITHMS.md §5).

``fit`` runs against a live uvicorn server on SQLite (the ``sqlite_server`` fixture) with the
bundled UCI Mushroom data registered as a labelled table: the planned and charged calls, the
budget moved by exactly the receipts, the printed list agreeing with the saved model, and
one-line errors (exit 2, no traceback) that charge nothing. ``predict`` is offline: a saved model
and a CSV of public rows, no server. The fit's numerical behaviour is tested in
``tests/e2e/test_rule_lists_http.py``.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import shlex
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

import dpmine
from dpmine.cli import app as analyst_app
from dpmine.queries import parse_query
from dpmine.rule_lists import RuleList
from dpmine.wire import (
    BudgetStatus,
    CreateDatasetRequest,
    CsvSource,
    DatasetInfo,
    DatasetMetadata,
    EstimateResponse,
    LabelSpec,
)
from dpmine.wire.rule_lists import Antecedent
from support.datasets import MUSHROOM_PATH, mushroom_metadata, register_mushroom, unique_id
from support.servers import Account, LiveServer, add_analyst

RUNNER = CliRunner()
ANALYST_ENV = {"COLUMNS": "250", "DPMINE_URL": "", "DPMINE_API_KEY": ""}
GRANT = 50.0
SMALL = "--k-per-class 10 --iterations 1000"


def dpmine_cli(server: LiveServer | None, api_key: str, command: str) -> Result:
    """``dpmine [--url URL --api-key KEY] <command>``."""
    prefix = [] if server is None else ["--url", server.url, "--api-key", api_key]
    return RUNNER.invoke(analyst_app, [*prefix, *shlex.split(command)], env=ANALYST_ENV)


def _ok(result: Result) -> str:
    assert result.exit_code == 0, (result.exit_code, result.output, repr(result.exception))
    return result.stdout


def _error(result: Result) -> str:
    """A clean exit 2 with one 'error:' line and no traceback."""
    assert result.exit_code == 2, (result.exit_code, result.output, repr(result.exception))
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    text = " ".join(result.stderr.split())
    assert text.startswith("error:"), text
    assert "Traceback" not in result.output
    return text


def _mushroom_rows(path: Path, count: int) -> Path:
    """The first ``count`` Mushroom rows (label included) as a plain CSV."""
    with gzip.open(MUSHROOM_PATH, "rt", newline="") as source:
        lines = [next(source) for _ in range(count + 1)]
    path.write_text("".join(lines))
    return path


# --------------------------------------------------------------------------------------------
# predict: offline


def _saved_model(path: Path) -> RuleList:
    schema = DatasetMetadata(
        kind="table",
        n_max=10_000,
        attributes=[a.model_copy(update={"view": None}) for a in mushroom_metadata().attributes],
        label=LabelSpec(attribute="class", positive="p"),
    )
    odor = Antecedent.model_validate({"items": [parse_query("[odor = p]").model_dump()]})
    rule_list = RuleList.from_counts(
        [odor], [3, 4000], [2100, 1800], noise_scale=1.0, alpha=(1.0, 1.0), schema=schema
    )
    rule_list.to_json(path)
    return rule_list


def test_predict_writes_one_line_per_row_without_a_server(tmp_path: Path) -> None:
    rule_list = _saved_model(tmp_path / "model.json")
    rows = _mushroom_rows(tmp_path / "rows.csv", 40)
    printed = _ok(dpmine_cli(None, "", f"predict rule-list {tmp_path / 'model.json'} {rows}"))
    lines = list(csv.reader(io.StringIO(printed)))
    assert lines[0] == ["rule", "p_p", "prediction"]
    with rows.open(newline="") as handle:
        odors = [row["odor"] for row in csv.DictReader(handle)]
    assert len(lines) == 1 + len(odors) == 41
    estimates = [rule_list.rules[0].estimate, rule_list.default.estimate]
    for line, odor in zip(lines[1:], odors, strict=True):
        j = 0 if odor == "p" else 1
        assert line == [
            "1" if j == 0 else "default",
            f"{estimates[j]:.6g}",
            "p" if estimates[j] > 0.5 else "e",
        ]
    assert any(line[0] == "1" for line in lines[1:])  # the first 40 rows hold an odor = p

    written = tmp_path / "predictions.csv"
    summary = _ok(
        dpmine_cli(
            None,
            "",
            f"predict rule-list {tmp_path / 'model.json'} {rows} --output {written} "
            "--threshold 0.999",
        )
    )
    assert "40 predictions written" in summary
    with written.open(newline="") as handle:
        saved = list(csv.reader(handle))
    assert [line[:2] for line in saved] == [line[:2] for line in lines]
    assert {line[2] for line in saved[1:]} == {"e"}  # nothing is above 0.999

    as_json = json.loads(
        _ok(dpmine_cli(None, "", f"--json predict rule-list {tmp_path / 'model.json'} {rows}"))
    )
    assert [entry["rule"] for entry in as_json] == [line[0] for line in lines[1:]]


def test_predict_errors_are_one_line(tmp_path: Path) -> None:
    _saved_model(tmp_path / "model.json")
    not_a_model = tmp_path / "other.json"
    not_a_model.write_text('{"format": "x"}')
    rows = _mushroom_rows(tmp_path / "rows.csv", 3)
    text = _error(dpmine_cli(None, "", f"predict rule-list {not_a_model} {rows}"))
    assert "not a saved dpmine rule list" in text
    no_odor = tmp_path / "no-odor.csv"
    no_odor.write_text("cap-shape,class\nx,p\n")
    text = _error(dpmine_cli(None, "", f"predict rule-list {tmp_path / 'model.json'} {no_odor}"))
    assert "no column ['odor']" in text
    missing = tmp_path / "missing.csv"
    text = _error(dpmine_cli(None, "", f"predict rule-list {tmp_path / 'model.json'} {missing}"))
    assert "cannot read" in text


# --------------------------------------------------------------------------------------------
# fit: against a live server


@pytest.fixture(scope="module")
def server(sqlite_server: LiveServer) -> LiveServer:
    return sqlite_server


@pytest.fixture(scope="module")
def owner_connection(server: LiveServer) -> Iterator[dpmine.Connection]:
    with dpmine.connect(server.url, server.owner_key, retries=0) as connection:
        yield connection


@pytest.fixture(scope="module")
def mushroom(owner_connection: dpmine.Connection) -> DatasetInfo:
    """Mushroom as a labelled table (poisonous = positive)."""
    metadata = DatasetMetadata(
        kind="table",
        n_max=10_000,
        attributes=[a.model_copy(update={"view": None}) for a in mushroom_metadata().attributes],
        label=LabelSpec(attribute="class", positive="p"),
    )
    request = CreateDatasetRequest(
        id=unique_id("mushroom-brl"),
        name="mushroom",
        epsilon_cap=1000.0,
        metadata=metadata,
        source=CsvSource(path=MUSHROOM_PATH.name),
    )
    registered = owner_connection.admin.upload_dataset(request, {"path": MUSHROOM_PATH})
    return DatasetInfo.model_validate(registered["dataset"])


@pytest.fixture
def account(
    server: LiveServer, owner_connection: dpmine.Connection, mushroom: DatasetInfo
) -> Iterator[Account]:
    """A fresh analyst with GRANT ε on the labelled mushroom table."""
    created = add_analyst(server, owner_connection)
    owner_connection.admin.grant(mushroom.id, created.name, GRANT)
    try:
        yield created
    finally:
        created.connection.close()


def _remaining(server: LiveServer, account: Account, dataset_id: str) -> Decimal:
    result = dpmine_cli(server, account.api_key, f"--json budget {dataset_id}")
    status = BudgetStatus.model_validate(json.loads(_ok(result)))
    return Decimal(repr(status.remaining_epsilon))


def test_plan_only_prices_three_calls_without_charging(
    server: LiveServer, account: Account, mushroom: DatasetInfo
) -> None:
    before = _remaining(server, account, mushroom.id)
    result = dpmine_cli(
        server,
        account.api_key,
        f"--json fit rule-list {mushroom.id} --epsilon 1.5 --split 1,2,2 {SMALL} --plan-only",
    )
    estimate = EstimateResponse.model_validate(json.loads(_ok(result)))
    assert [(c.operation, c.epsilon_exact) for c in estimate.calls] == [
        ("brl.antecedents", "0.3"),
        ("brl.sample_rule_list_exact", "0.6"),  # auto: 20 antecedents, 3 rules fit the cap
        ("brl.point_estimates", "0.6"),
    ]
    assert Decimal(estimate.total_epsilon_exact) == Decimal("1.5")
    chain = dpmine_cli(
        server,
        account.api_key,
        f"--json fit rule-list {mushroom.id} --epsilon 1.5 {SMALL} --sampler mcmc --plan-only",
    )
    calls = EstimateResponse.model_validate(json.loads(_ok(chain))).calls
    assert [c.operation for c in calls][1] == "brl.sample_rule_list"
    assert _remaining(server, account, mushroom.id) == before


def test_fit_prints_the_list_saves_it_and_charges_the_receipts(
    server: LiveServer, account: Account, mushroom: DatasetInfo, tmp_path: Path
) -> None:
    before = _remaining(server, account, mushroom.id)
    model_path = tmp_path / "model.json"
    printed = _ok(
        dpmine_cli(
            server,
            account.api_key,
            f"fit rule-list {mushroom.id} --epsilon 3 {SMALL} --alpha 1,2 --output {model_path}",
        )
    )
    saved: dict[str, Any] = json.loads(model_path.read_text())
    model = saved["model"]
    assert model["alpha"] == [1.0, 2.0]
    assert saved["params"]["k_per_class"] == 10
    # The printed list is the saved one (rich may wrap nothing: soft_wrap).
    for line in model["text"].splitlines():
        assert line in printed
    assert f"ε spent = {3:g}" in printed
    assert "brl.sample_rule_list_exact: charged ε=1 (pure)" in printed
    assert "rule list drawn exactly among the lists of at most 3 rules (pure ε-DP)" in printed
    assert saved["sampler"] == "exact"
    assert model["guarantee"] == "pure"
    spent = sum((Decimal(r["epsilon_exact"]) for r in saved["receipts"]), Decimal(0))
    assert spent == Decimal(3)
    assert _remaining(server, account, mushroom.id) == before - spent
    # The saved model loads and predicts offline.
    rows = _mushroom_rows(tmp_path / "rows.csv", 20)
    lines = _ok(dpmine_cli(None, "", f"predict rule-list {model_path} {rows}")).splitlines()
    assert len(lines) == 21


def test_exclude_keeps_a_label_proxy_out_of_the_rule_list(
    server: LiveServer,
    account: Account,
    mushroom: DatasetInfo,
    owner_connection: dpmine.Connection,
    tmp_path: Path,
) -> None:
    """odor nearly determines a mushroom's class: ``--exclude odor`` sends the other columns
    as the public set the antecedent selection draws from (the ledger records it, the output
    says it), and no antecedent or rule uses odor."""
    model_path = tmp_path / "model.json"
    printed = _ok(
        dpmine_cli(
            server,
            account.api_key,
            f"fit rule-list {mushroom.id} --epsilon 0.9 {SMALL} "
            f"--exclude odor,spore-print-color --output {model_path}",
        )
    )
    payload = json.loads(model_path.read_text())
    assert payload["params"]["exclude"] == ["odor", "spore-print-color"]
    used = {
        item["attribute"] for antecedent in payload["antecedents"] for item in antecedent["items"]
    }
    assert used
    assert used.isdisjoint({"odor", "spore-print-color", "class"})
    assert "odor" not in payload["model"]["text"]
    expected = [
        a.name
        for a in mushroom.metadata.attributes
        if a.name not in {"odor", "spore-print-color", "class"}
    ]
    assert f"antecedents drawn from the columns {', '.join(expected)}" in " ".join(printed.split())
    selection = payload["receipts"][0]
    assert selection["operation"] == "brl.antecedents"
    (entry,) = [
        e
        for e in owner_connection.admin.ledger(mushroom.id)
        if e.id == selection["ledger_entry_id"]
    ]
    assert entry.parameters["columns"] == expected


def test_fit_with_json_prints_the_saved_payload(
    server: LiveServer, account: Account, mushroom: DatasetInfo
) -> None:
    payload = json.loads(
        _ok(
            dpmine_cli(
                server,
                account.api_key,
                f"--json fit rule-list {mushroom.id} --epsilon 0.9 {SMALL} --method laplace "
                "--sampler mcmc",
            )
        )
    )
    assert [r["operation"] for r in payload["receipts"]] == [
        "brl.antecedents",
        "brl.sample_rule_list",
        "brl.point_estimates",
    ]
    assert payload["sampler"] == "mcmc"
    assert payload["model"]["guarantee"] == "approximate"
    assert payload["params"]["method"] == "laplace"
    assert RuleList.from_dict(payload["model"]).classes == ("e", "p")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ("--epsilon 1 --alpha 1", "--alpha takes 2 numbers"),
        ("--epsilon 1 --split 1,1", "--split takes 3 numbers"),
        ("--epsilon 1 --method greedy", "--method must be 'em' or 'laplace'"),
        ("--epsilon 1 --output model.csv", "--output must end in .json"),
        ("--epsilon 1000", "only ε=50 remains; nothing was spent"),
        ("--epsilon 1 --max-length 9", "max_length"),
        ("--epsilon 1 --iterations 300", "at least 1000, the server's public minimum"),
        ("--epsilon 1 --exclude class", "'class' is the label: a rule list predicts it"),
        ("--epsilon 1 --columns odour,habitat", "unknown column(s) ['odour']; the dataset's"),
    ],
)
def test_fit_errors_are_one_line_and_charge_nothing(
    server: LiveServer, account: Account, mushroom: DatasetInfo, options: str, message: str
) -> None:
    before = _remaining(server, account, mushroom.id)
    text = _error(dpmine_cli(server, account.api_key, f"fit rule-list {mushroom.id} {options}"))
    assert message in text
    assert _remaining(server, account, mushroom.id) == before


def test_fit_refuses_a_dataset_without_a_label(
    server: LiveServer, owner_connection: dpmine.Connection, account: Account
) -> None:
    views = register_mushroom(owner_connection, epsilon_cap=10.0)
    owner_connection.admin.grant(views.id, account.name, 5.0)
    text = _error(dpmine_cli(server, account.api_key, f"fit rule-list {views.id} --epsilon 1"))
    assert "label column" in text
    assert _remaining(server, account, views.id) == Decimal(5)
