"""The two command lines against a real server (DESIGN.md "Testing").

* ``dpmine`` (analyst, :mod:`dpmine.cli`) runs through ``typer.testing.CliRunner`` against a live
  uvicorn server on SQLite (the ``sqlite_server`` fixture of ``tests/conftest.py``), on the UCI
  Mushroom data registered through the client.
* ``dpmine-server`` (owner, :mod:`dpmine_server.cli`) runs through ``CliRunner`` on the same
  SQLite database, data folder and secret as that server (``DPMINE_*`` settings in the
  environment), so a principal, dataset and grant made with the owner CLI are used by the analyst
  CLI, and the owner CLI's ledger export shows exactly what the analyst was released.

Commands are written as shell lines (split with :func:`shlex.split`). Noisy values are checked
against the exact counts of the file with bands far in the discrete Laplace tail (at scale b,
P(|noise| > 30·b) < 1e-13).
"""

from __future__ import annotations

import csv
import gzip
import json
import re
import shlex
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
from rich.table import Table
from typer.testing import CliRunner, Result

import dpmine
from dpmine.cli import _emit, _Options, _read_rows, exit_code_of, hoist_global_options
from dpmine.cli import app as analyst_app
from dpmine.errors import (
    AuthenticationError,
    BudgetExhaustedError,
    ChargeKeptNoResultError,
    DPMineError,
    InvalidRequestError,
    NotFoundError,
    OperationFailedError,
    ParameterError,
    QuerySyntaxError,
    RateLimitedError,
    RequestInProgressError,
    ServerError,
    TransportError,
)
from dpmine.miners import TopKItemsets
from dpmine.queries import parse_query
from dpmine.wire import (
    AuditEventInfo,
    BudgetStatus,
    ComputeQualityResponse,
    DatasetInfo,
    DatasetMetadata,
    LedgerEntryInfo,
    NoisyCountResponse,
    PrincipalCreated,
    PrincipalInfo,
    attributes,
)
from dpmine_server.cli import app as owner_app
from dpmine_server.settings import Settings
from support.datasets import MUSHROOM_PATH, MUSHROOM_ROWS, register_mushroom, unique_id
from support.servers import Account, LiveServer, add_analyst

RUNNER = CliRunner()
#: A wide terminal so that rich does not wrap table cells (rich reads COLUMNS on every print);
#: the DPMINE_URL / DPMINE_API_KEY of the caller's environment must not leak in.
ANALYST_ENV = {"COLUMNS": "250", "DPMINE_URL": "", "DPMINE_API_KEY": ""}
GRANT = 1.0
MUSHROOM = str(MUSHROOM_PATH)


def _answer(status: int) -> httpx.Response:
    """An error answer with this status (for the exit-code mapping)."""
    return httpx.Response(status, request=httpx.Request("GET", "http://dpmine.test/v1/x"))


def _flat(text: str) -> str:
    """Whitespace collapsed, so that assertions do not depend on rich's line wrapping."""
    return " ".join(text.split())


def _mushroom_rows() -> list[dict[str, str]]:
    with gzip.open(MUSHROOM_PATH, "rt", newline="") as handle:
        return list(csv.DictReader(handle))


ROWS = _mushroom_rows()
EDIBLE = sum(row["class"] == "e" for row in ROWS)


def _cells(left: tuple[str, str], right: tuple[str, str]) -> tuple[int, int, int, int]:
    """Exact (E11, E10, E01, E00) of [A = a] <=> [B = b] on the file (owner-side truth)."""
    e11 = e10 = e01 = e00 = 0
    for row in ROWS:
        in_left, in_right = row[left[0]] == left[1], row[right[0]] == right[1]
        e11 += in_left and in_right
        e10 += in_left and not in_right
        e01 += in_right and not in_left
        e00 += not (in_left or in_right)
    return e11, e10, e01, e00


GILL_CLASS = _cells(("gill-size", "b"), ("class", "e"))
QUALITY = "--left '[gill-size = b]' --right '[class = e]'"


# --------------------------------------------------------------------------------------------
# Running the command lines


def dpmine_cli(server: LiveServer, api_key: str, command: str) -> Result:
    """``dpmine --url URL --api-key KEY <command>``."""
    args = ["--url", server.url, "--api-key", api_key, *shlex.split(command)]
    return RUNNER.invoke(analyst_app, args, env=ANALYST_ENV)


def owner_cli(server: LiveServer, command: str) -> Result:
    """``dpmine-server <command>`` on the live server's database, data folder and secret."""
    env = {
        "DPMINE_ENVIRONMENT": "test",
        "DPMINE_DATABASE_URL": server.database_url,
        "DPMINE_DATA_DIR": str(server.data_dir),
        "DPMINE_SECRET_KEY": server.secret_key,
        "DPMINE_BOOTSTRAP_OWNER_KEY": "",
    }
    return RUNNER.invoke(owner_app, shlex.split(command), env=env)


def _ok(result: Result) -> str:
    """The stdout of a command that must have succeeded."""
    assert result.exit_code == 0, (result.exit_code, result.output, repr(result.exception))
    return result.stdout


def _json(result: Result) -> Any:
    """The parsed JSON stdout of a command that must have succeeded."""
    return json.loads(_ok(result))


def _error(result: Result) -> str:
    """The flattened error text of a failed command: a clean exit 2 with one 'error:' line."""
    assert result.exit_code == 2, (result.exit_code, result.output, repr(result.exception))
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    text = _flat(result.stderr)
    assert text.startswith("error:"), text
    return text


# --------------------------------------------------------------------------------------------
# Fixtures


@pytest.fixture(scope="module")
def server(sqlite_server: LiveServer) -> LiveServer:
    return sqlite_server


@pytest.fixture(scope="module")
def owner_connection(server: LiveServer) -> Iterator[dpmine.Connection]:
    with dpmine.connect(server.url, server.owner_key, retries=0) as connection:
        yield connection


@pytest.fixture(scope="module")
def mushroom(owner_connection: dpmine.Connection) -> DatasetInfo:
    return register_mushroom(owner_connection, epsilon_cap=100.0)


@pytest.fixture
def account(
    server: LiveServer, owner_connection: dpmine.Connection, mushroom: DatasetInfo
) -> Iterator[Account]:
    """A fresh analyst with GRANT epsilon on the mushroom dataset."""
    created = add_analyst(server, owner_connection)
    owner_connection.admin.grant(mushroom.id, created.name, GRANT)
    try:
        yield created
    finally:
        created.connection.close()


def _budget(server: LiveServer, account: Account, dataset_id: str) -> BudgetStatus:
    return BudgetStatus.model_validate(
        _json(dpmine_cli(server, account.api_key, f"--json budget {dataset_id}"))
    )


# --------------------------------------------------------------------------------------------
# dpmine: public information (free)


def test_datasets_lists_the_dataset_without_private_counts(
    server: LiveServer, account: Account, mushroom: DatasetInfo
) -> None:
    table = _ok(dpmine_cli(server, account.api_key, "datasets"))
    row = rf"^{re.escape(mushroom.id)}  .*  views\s{{2,}}23\s{{2,}}1\s{{2,}}allow_approximate$"
    assert re.search(row, table, re.M), table
    listed = _json(dpmine_cli(server, account.api_key, "--json datasets"))
    infos = [DatasetInfo.model_validate(entry) for entry in listed]
    assert [info.id for info in infos] == [mushroom.id]  # only the dataset granted to this key
    assert infos[0].metadata == mushroom.metadata
    # n is private: only the public bound n_max is shown (the owner's free-text description of
    # this test dataset happens to state the size, so it is left out here).
    assert str(MUSHROOM_ROWS) not in table
    assert str(MUSHROOM_ROWS) not in json.dumps([entry["metadata"] for entry in listed])


def test_schema_shows_the_public_metadata(
    server: LiveServer, account: Account, mushroom: DatasetInfo
) -> None:
    table = _ok(dpmine_cli(server, account.api_key, f"schema {mushroom.id}"))
    assert "views schema" in table
    assert re.search(r"^gill-size\s{2,}left\s{2,}categorical\s{2,}b, n\b", table, re.M), table
    assert re.search(r"^class\s{2,}right\s{2,}categorical\s{2,}e, p\b", table, re.M), table
    assert "public row bound n_max = 10000" in _flat(table)
    schema = _json(dpmine_cli(server, account.api_key, f"--json schema {mushroom.id}"))
    info = DatasetInfo.model_validate(schema)
    assert info.metadata == mushroom.metadata
    assert len(info.metadata.attributes) == 23
    assert "serves pure and approximate guarantees" in _flat(table)


def test_datasets_and_schema_show_the_owners_guarantee_policy(
    server: LiveServer,
    owner_connection: dpmine.Connection,
    account: Account,
    mushroom: DatasetInfo,
) -> None:
    """Issue #25: a "pure_only" dataset says so in the list and under the schema."""
    owner_connection.admin.set_guarantee_policy(mushroom.id, "pure_only")
    try:
        table = _ok(dpmine_cli(server, account.api_key, "datasets"))
        assert re.search(r"\s{2,}1\s{2,}pure_only$", table, re.M), table
        schema = _flat(_ok(dpmine_cli(server, account.api_key, f"schema {mushroom.id}")))
        assert "serves pure guarantees only (the MCMC samplers are refused)" in schema
        listed = _json(dpmine_cli(server, account.api_key, "--json datasets"))
        assert [entry["guarantee_policy"] for entry in listed] == ["pure_only"]
    finally:
        owner_connection.admin.set_guarantee_policy(mushroom.id, "allow_approximate")


def test_budget_shows_the_grant(
    server: LiveServer, account: Account, mushroom: DatasetInfo
) -> None:
    table = _ok(dpmine_cli(server, account.api_key, f"budget {mushroom.id}"))
    assert re.search(r"^1\s{2,}0\s{2,}1\s{2,}100$", table, re.M), table
    status = _budget(server, account, mushroom.id)
    assert (status.grant_epsilon, status.grant_spent, status.remaining_epsilon) == (1.0, 0.0, 1.0)


def test_a_zcdp_dataset_shows_rho_in_the_budget_and_the_receipt(
    server: LiveServer, owner_connection: dpmine.Connection, account: Account
) -> None:
    """Issue #24, over real HTTP: on a zCDP dataset a count at ε = 0.1 is debited its ρ
    (ε²/2 = 0.005, rounded up), and `dpmine budget` and the receipt show ρ."""
    zcdp = register_mushroom(owner_connection, cap_rho=1.0)
    owner_connection.admin.grant(zcdp.id, account.name, rho=0.5)
    table = _ok(dpmine_cli(server, account.api_key, f"count {zcdp.id} --epsilon 0.1"))
    assert re.search(r"ran at ε=0\.1, charged ρ=0\.00500000000\d* \(pure\)", _flat(table)), table
    status = _budget(server, account, zcdp.id)
    assert status.accounting == "zcdp"
    assert status.zcdp is not None
    assert status.zcdp.rho_exact == "0.5"
    assert status.zcdp.rho_spent == pytest.approx(0.005)
    assert status.zcdp.delta_is_default
    shown = _ok(dpmine_cli(server, account.api_key, f"budget {zcdp.id}"))
    assert "(zCDP)" in shown
    assert re.search(r"^0\.5\s{2,}0\.005\s{2,}0\.495\s{2,}", shown, re.M), shown


ZCDP_MINERS = [
    "serenade-es",
    "serenade-cs",
    "alt-expm --k 1",
    "alt-mcmc --k 1 --iterations 1000",
    "tree-pair --in-trees 1 --iterations 1000",
    "layered --seeds 1 --layers 1",
    "itemsets --k 3 --length 1",
]


def test_every_miner_takes_rho_on_a_zcdp_dataset(
    server: LiveServer, owner_connection: dpmine.Connection, account: Account
) -> None:
    """Issue #24 item 3: every ``mine`` command takes --rho; its plan lists each call's ρ, the
    total in ρ and the (ε, δ) the run implies; a run's caption gives the ρ spent. --epsilon
    and --rho together (e.g. the old top-K --rho, now --threshold-quantile), or neither, are
    refused before any call."""
    zcdp = register_mushroom(owner_connection, cap_rho=1.0)
    owner_connection.admin.grant(zcdp.id, account.name, rho=0.5)
    for miner in ZCDP_MINERS:
        command = f"mine {miner.split()[0]} {zcdp.id} --rho 0.0174 {' '.join(miner.split()[1:])}"
        table = _flat(_ok(dpmine_cli(server, account.api_key, f"{command} --plan-only")))
        assert "ρ each" in table, (miner, table)
        assert re.search(r"total ρ=0\.01739\d*; remaining ρ=0\.5;", table), (miner, table)
        assert "the run implies (ε = 0.99" in table, (miner, table)
    ran = f"mine tree-pair {zcdp.id} --rho 0.0174 --in-trees 1 --depth 2 --iterations 1000"
    assert re.search(r"ρ spent = 0\.01739\d*", _flat(_ok(dpmine_cli(server, account.api_key, ran))))
    both = f"mine itemsets {zcdp.id} --epsilon 1 --rho 0.1"
    assert "give the budget once" in _error(dpmine_cli(server, account.api_key, both))
    neither = f"mine alt-expm {zcdp.id}"
    assert "give the run's budget" in _error(dpmine_cli(server, account.api_key, neither))
    pure_unit = f"mine layered {zcdp.id} --epsilon 1"
    assert "give the run's budget as rho=" in _error(dpmine_cli(server, account.api_key, pure_unit))
    status = _budget(server, account, zcdp.id)
    assert status.zcdp is not None
    assert status.zcdp.rho_spent == pytest.approx(0.0174, rel=1e-4)  # the one run only


# --------------------------------------------------------------------------------------------
# dpmine: private operations (charged)


def test_count_prints_a_noisy_integer_and_its_receipt(
    server: LiveServer, account: Account, mushroom: DatasetInfo
) -> None:
    table = _ok(dpmine_cli(server, account.api_key, f"count {mushroom.id} --epsilon 0.1"))
    match = re.search(
        r"^\(all rows\)\s{2,}(-?\d+) \[(\d+), (\d+)\]\s{2,}noise scale 10$", table, re.M
    )
    assert match is not None, table
    count, low, high = map(int, match.groups())
    assert abs(count - MUSHROOM_ROWS) < 300  # scale 10
    # The 90 % interval of discrete Laplace noise of scale 10: P(|Z| > t) = 2q^(t+1)/(1 + q),
    # q = e^(−0.1), is 0.095 at t = 23 and 0.105 at t = 22.
    assert (low, high) == (max(count - 23, 0), count + 23)
    receipt = r"charged ε=0\.1 \(pure\) · ledger entry \d+ · remaining ε=0\.9"
    assert re.search(receipt, _flat(table)), table

    command = f"--json count {mushroom.id} --epsilon 0.2 --where '[class = e]'"
    response = NoisyCountResponse.model_validate_json(
        _ok(dpmine_cli(server, account.api_key, command))
    )
    assert abs(response.count - EDIBLE) < 150  # scale 5
    assert response.receipt.operation == "count.noisy"
    assert response.receipt.dataset_id == mushroom.id
    assert response.receipt.epsilon_exact == "0.2"
    assert response.receipt.guarantee == "pure"
    assert response.receipt.remaining_epsilon == pytest.approx(0.7)
    assert not response.receipt.replayed


def test_budgets_print_as_exact_decimals(
    server: LiveServer, account: Account, mushroom: DatasetInfo
) -> None:
    """Issue #22: after ε = 0.3 of a grant of 1, every place shows 0.7 left: the receipt line,
    the budget table, a plan and the client's Plan text (never 0.7000000000000001 or 7e-01)."""
    counted = _flat(_ok(dpmine_cli(server, account.api_key, f"count {mushroom.id} --epsilon 0.3")))
    assert re.search(r"charged ε=0\.3 \(pure\) · ledger entry \d+ · remaining ε=0\.7$", counted)
    table = _ok(dpmine_cli(server, account.api_key, f"budget {mushroom.id}"))
    assert re.search(r"^1\s{2,}0\.3\s{2,}0\.7\s{2,}\d+(\.\d+)?$", table, re.M), table
    command = f"mine itemsets {mushroom.id} --k 3 --epsilon 0.2 --frequency-epsilon 0.1 --plan-only"
    plan = _flat(_ok(dpmine_cli(server, account.api_key, command)))
    assert "total ε=0.3; remaining ε=0.7; fits: True" in plan, plan
    assert "confirmation: a pick is shown when its noisy count reaches" in plan, plan
    miner = TopKItemsets(k=3, epsilon=0.5, frequency_epsilon=0.25)
    priced = miner.plan(account.connection.dataset(mushroom.id))
    assert str(priced) == f"{len(priced.calls)} calls, total ε=0.75, remaining ε=0.7, fits: False"
    with pytest.raises(BudgetExhaustedError, match=r"costs ε=0\.75 but only ε=0\.7 remains"):
        miner.mine(account.connection.dataset(mushroom.id))
    # Seven significant digits are shown whole (a float's 6-digit %g would show 0.7 again).
    tiny = _flat(_ok(dpmine_cli(server, account.api_key, f"count {mushroom.id} --epsilon 5e-7")))
    receipt = r"charged ε=0\.0000005 \(pure\) · ledger entry \d+ · remaining ε=0\.6999995$"
    assert re.search(receipt, tiny), tiny


def test_count_table_shows_the_canonical_predicate(
    server: LiveServer, account: Account, mushroom: DatasetInfo
) -> None:
    command = f"count {mushroom.id} --epsilon 0.1 --where '[class=e]&![odor=n]'"
    table = _ok(dpmine_cli(server, account.api_key, command))
    match = re.search(r"^\[class = e\] & !\[odor = n\]\s{2,}(-?\d+) \[", table, re.M)
    assert match is not None, table
    truth = sum(row["class"] == "e" and row["odor"] != "n" for row in ROWS)
    assert abs(int(match.group(1)) - truth) < 300


def test_quality_cells_mode(server: LiveServer, account: Account, mushroom: DatasetInfo) -> None:
    table = _ok(
        dpmine_cli(server, account.api_key, f"quality {mushroom.id} {QUALITY} --epsilon 0.2")
    )
    assert "noisy quality" in table
    receipt = r"charged ε=0\.2 \(pure\) · ledger entry \d+ · remaining ε=0\.8"
    assert re.search(receipt, _flat(table)), table
    with_interval = r"\s{2,}([\d.]+) \[([\d.]+), ([\d.]+)\]"
    row = re.search(r"^\[gill-size = b\]\s{2,}\[class = e\]" + with_interval * 3, table, re.M)
    assert row is not None, table
    support, support_low, support_high, _, _, _, jaccard, j_low, j_high = map(float, row.groups())
    assert abs(support - GILL_CLASS[0]) < 150  # scale 5
    assert support_low <= support <= support_high  # the 90 % interval around the release
    assert 0.0 <= j_low <= jaccard <= j_high <= 1.0
    assert "noise scale 5 per cell" in _flat(table)
    # The excess over independence, J − J_ind, with its 90 % interval (issue #21).
    assert "J − J_ind [90 %]" in _flat(table)
    signed = r"\s{2,}(-?[\d.]+) \[(-?[\d.]+), (-?[\d.]+)\]"
    excess = re.search(with_interval * 3 + signed, table)
    assert excess is not None, table
    e_value, e_low, e_high = map(float, excess.groups()[-3:])
    assert -1.0 <= e_low <= e_value <= e_high <= 1.0

    command = f"--json quality {mushroom.id} {QUALITY} --epsilon 0.2"
    response = ComputeQualityResponse.model_validate_json(
        _ok(dpmine_cli(server, account.api_key, command))
    )
    assert response.mode == "cells"
    cells = response.cells
    noisy = [value for value in (cells.e11, cells.e10, cells.e01, cells.e00) if value is not None]
    assert len(noisy) == 4
    assert all(abs(value - exact) < 150 for value, exact in zip(noisy, GILL_CLASS, strict=True))
    assert cells.intersection is None
    assert response.statistics.support == max(noisy[0], 0)
    assert response.statistics.n_rows == sum(max(value, 0) for value in noisy)
    assert response.statistics.p_value is not None
    assert 0.0 <= response.statistics.p_value <= 1.0
    assert response.receipt.remaining_epsilon == pytest.approx(0.6)


def test_quality_paper_mode(server: LiveServer, account: Account, mushroom: DatasetInfo) -> None:
    command = f"--json quality {mushroom.id} {QUALITY} --epsilon 0.5 --mode paper"
    response = ComputeQualityResponse.model_validate_json(
        _ok(dpmine_cli(server, account.api_key, command))
    )
    e11, e10, e01, _ = GILL_CLASS
    assert response.mode == "paper"
    assert response.cells.e11 is None
    assert response.cells.intersection is not None
    assert response.cells.union is not None
    assert abs(response.cells.intersection - e11) < 120  # scale 4
    assert abs(response.cells.union - (e11 + e10 + e01)) < 120
    assert response.statistics.p_value is None
    assert response.receipt.epsilon_exact == "0.5"


def test_budget_decreases_by_exactly_what_was_charged(
    server: LiveServer, account: Account, mushroom: DatasetInfo
) -> None:
    for epsilon in ("0.1", "0.2", "0.3"):
        _ok(dpmine_cli(server, account.api_key, f"count {mushroom.id} --epsilon {epsilon}"))
    status = _budget(server, account, mushroom.id)
    assert status.grant_spent == pytest.approx(0.6)
    assert status.remaining_epsilon == pytest.approx(0.4)
    table = _ok(dpmine_cli(server, account.api_key, f"budget {mushroom.id}"))
    assert re.search(r"^1\s{2,}0\.6\s{2,}0\.4\s{2,}", table, re.M), table


# --------------------------------------------------------------------------------------------
# dpmine: errors are one clean 'error:' line and exit code 2


def test_bad_count_predicate_text_reports_the_position(
    server: LiveServer, account: Account, mushroom: DatasetInfo
) -> None:
    command = f"count {mushroom.id} --epsilon 0.1 --where '[class = e'"
    message = _error(dpmine_cli(server, account.api_key, command))
    assert 'at column 11 in "[class = e"' in message
    assert "close the literal with ']'" in message


def test_bad_quality_query_text_reports_the_position(
    server: LiveServer, account: Account, mushroom: DatasetInfo
) -> None:
    command = f"quality {mushroom.id} --left '[gill-size = b' --right '[class = e]' --epsilon 0.1"
    message = _error(dpmine_cli(server, account.api_key, command))
    assert 'at column 15 in "[gill-size = b"' in message
    assert _budget(server, account, mushroom.id).grant_spent == 0.0


def test_a_query_on_the_wrong_view_is_refused_before_any_charge(
    server: LiveServer, account: Account, mushroom: DatasetInfo
) -> None:
    swapped = f"quality {mushroom.id} --left '[class = e]' --right '[gill-size = b]' --epsilon 0.1"
    message = _error(dpmine_cli(server, account.api_key, swapped))
    assert "left query: attribute 'class' is in the right view" in message
    unknown = f"count {mushroom.id} --epsilon 0.1 --where '[colour = red]'"
    assert "unknown attribute 'colour'" in _error(dpmine_cli(server, account.api_key, unknown))
    assert _budget(server, account, mushroom.id).grant_spent == 0.0


def test_missing_or_wrong_api_key_exits_2(server: LiveServer, mushroom: DatasetInfo) -> None:
    no_key = RUNNER.invoke(analyst_app, ["--url", server.url, "datasets"], env=ANALYST_ENV)
    assert "no API key: pass --api-key or set DPMINE_API_KEY" in _error(no_key)
    wrong = dpmine_cli(server, "dpm_not_a_real_key_0123456789", f"budget {mushroom.id}")
    assert "Unauthorized: unknown or disabled API key" in _error(wrong)


def test_the_url_and_key_may_come_from_the_environment(
    server: LiveServer, account: Account, mushroom: DatasetInfo
) -> None:
    env = {**ANALYST_ENV, "DPMINE_URL": server.url, "DPMINE_API_KEY": account.api_key}
    listed = _json(RUNNER.invoke(analyst_app, ["--json", "datasets"], env=env))
    assert [entry["id"] for entry in listed] == [mushroom.id]


def test_an_exhausted_budget_exits_2_and_charges_nothing(
    server: LiveServer, account: Account, mushroom: DatasetInfo
) -> None:
    _ok(dpmine_cli(server, account.api_key, f"count {mushroom.id} --epsilon 0.7"))
    message = _error(dpmine_cli(server, account.api_key, f"count {mushroom.id} --epsilon 0.5"))
    assert message.startswith("error: BudgetExhausted:")
    assert "remaining in your grant=0.3" in message
    assert _budget(server, account, mushroom.id).grant_spent == pytest.approx(0.7)


def test_itemsets_show_intervals_explain_the_rank_and_take_columns(
    server: LiveServer, account: Account, mushroom: DatasetInfo
) -> None:
    """``mine itemsets --columns`` mines only those columns' items; the table gives each noisy
    count its interval and says what the rank and the intervals mean; ``--exclude`` likewise
    in JSON, where the default ``--length auto`` says what it chose; a column the schema lacks
    is refused before any charge.

    ``--threshold-quantile 1e-9`` as in the test below: at the default 0.1 a rare item wins a
    pick by noise in 2.4 % of runs here and, unconfirmed, leaves the table short of 3 rows
    (0.28 % of runs)."""
    command = (
        f"mine itemsets {mushroom.id} --k 3 --length 1 --epsilon 0.5 --columns odor,class "
        "--threshold-quantile 1e-9"
    )
    table = _ok(dpmine_cli(server, account.api_key, command))
    flat = _flat(table)
    assert "true count (90%, all together)" in flat
    rows = re.findall(r"^(\d)\s{2,}\[(\S+) = \S+\]\s{2,}(-?\d+)\s{2,}\[(\d+), (\d+)\]", table, re.M)
    assert [int(rank) for rank, *_ in rows] == [1, 2, 3], table
    for _rank, column, noisy, low, high in rows:
        assert column in {"odor", "class"}
        assert int(low) <= max(int(noisy), 0) <= int(high)
    assert "rank = order of the private selection" in flat
    assert "the 3 true counts all lie in their intervals together with probability ≥ 90%" in flat
    payload = _json(
        dpmine_cli(
            server,
            account.api_key,
            f"--json mine itemsets {mushroom.id} --k 2 --epsilon 0.3 "
            "--exclude odor --exclude class,habitat",
        )
    )
    assert payload["length"] == [3, 3]  # --length auto, the default: triples are served here
    assert payload["length_note"].startswith("length auto: 3-itemsets, the longest")
    for itemset in payload["itemsets"]:
        assert len(itemset["items"]) == 3
        assert itemset["items"][0].split("=")[0] not in {"odor", "class", "habitat"}
        assert itemset["count_low"] <= max(itemset["noisy_count"], 0) <= itemset["count_high"]
    assert payload["count_intervals"]["level"] == 0.9
    assert payload["order"].startswith("rank = order of the private selection")
    spent = _budget(server, account, mushroom.id).grant_spent
    assert spent == pytest.approx(0.8)
    refused = _error(
        dpmine_cli(
            server, account.api_key, f"mine itemsets {mushroom.id} --epsilon 0.1 --columns odour"
        )
    )
    assert "unknown column(s) ['odour']; the dataset's columns are ['class'," in refused
    assert _budget(server, account, mushroom.id).grant_spent == pytest.approx(spent)


def test_itemsets_show_only_the_picks_their_counts_confirm(
    server: LiveServer, account: Account, mushroom: DatasetInfo
) -> None:
    """The default table holds the picks whose count floor reaches ``--min-count`` and says
    so; a floor no count can reach leaves nothing shown, with what was spent and what to
    change; ``--all`` lists every pick with its verdict.

    The unreachable floor is twice the table's rows, not one more than them: a pick counted in
    every row (``veil-type = p``) is confirmed at ``rows + 1`` whenever its noise exceeds the
    99% margin plus one, about one run in a hundred; at ``2 · rows`` the noise would have to
    exceed 8,000 rows, over a hundred times its scale at ε = 0.3.

    The first run sets ``--threshold-quantile 1e-9``: at the default 0.1 the selection may pick
    a tail item by noise (by design, with probability ≤ 0.1; 3.6 % of runs on mushroom at K = 3,
    simulated), and a rare item's floor misses 1 row, so "3 of 3" would hold in only ~97 % of
    runs. At 1e-9 every item outside the top 3 scores τ = c_3 − 319 and a tail pick needs a
    Gumbel gap of 319 at scale 12 (probability < 1e-9)."""
    command = (
        f"mine itemsets {mushroom.id} --k 3 --length 1 --epsilon 0.5 --threshold-quantile 1e-9"
    )
    unreachable = 2 * MUSHROOM_ROWS
    shown = _flat(_ok(dpmine_cli(server, account.api_key, command)))
    assert "top-3 itemsets confirmed by their counts" in shown
    assert "shown: the 3 of 3 picks confirmed to have ≥ 1 row (noisy count − " in shown
    assert "true count ≥ (99%, all together)" in shown
    payload = _json(
        dpmine_cli(
            server,
            account.api_key,
            f"--json mine itemsets {mushroom.id} --k 2 --length 1 --epsilon 0.3 "
            f"--min-count {unreachable} --all",
        )
    )
    assert [itemset["confirmed"] for itemset in payload["itemsets"]] == [False, False]
    for itemset in payload["itemsets"]:
        assert itemset["count_floor"] == itemset["noisy_count"] - payload["confirmation"]["margin"]
    confirmation = payload["confirmation"]
    assert (confirmation["shown"], confirmation["picks"]) == (0, 2)
    assert confirmation["message"].startswith(
        f"No pick is confirmed to have ≥ {unreachable} rows. ε spent: 0.3."
    )
    assert "a smaller k" in confirmation["message"]
    assert _budget(server, account, mushroom.id).grant_spent == pytest.approx(0.8)


def test_unknown_dataset_and_bad_mode_exit_2(server: LiveServer, account: Account) -> None:
    assert "NotFound" in _error(dpmine_cli(server, account.api_key, "schema no-such-dataset"))
    malformed = _error(dpmine_cli(server, account.api_key, "schema Mushroom"))
    assert "'Mushroom' is not a dataset id: a dataset id has 1 to 64 characters: lower-case" in (
        malformed
    )
    bad_mode = "quality no-such-dataset --left '[a]' --right '[b]' --epsilon 0.1 --mode fancy"
    assert "--mode must be 'cells' or 'paper'" in _error(
        dpmine_cli(server, account.api_key, bad_mode)
    )


@pytest.mark.parametrize("epsilon", ["0", "1001"])
def test_an_epsilon_outside_the_wire_range_exits_2(
    server: LiveServer, account: Account, mushroom: DatasetInfo, epsilon: str
) -> None:
    result = dpmine_cli(server, account.api_key, f"count {mushroom.id} --epsilon {epsilon}")
    assert "epsilon" in _error(result)


def test_an_epsilon_above_the_wire_range_names_the_bound(
    server: LiveServer, account: Account, mushroom: DatasetInfo
) -> None:
    result = dpmine_cli(server, account.api_key, f"count {mushroom.id} --epsilon 1001")
    assert _error(result) == "error: epsilon must be <= 1000 (got 1001)"
    assert _budget(server, account, mushroom.id).grant_spent == 0.0


# --------------------------------------------------------------------------------------------
# dpmine: usage mistakes are one line without a server; global options in either position


def offline_cli(command: str) -> Result:
    """``dpmine <command>`` with no server behind it (usage errors are caught before)."""
    return RUNNER.invoke(analyst_app, shlex.split(command), env=ANALYST_ENV, prog_name="dpmine")


def _usage_error(result: Result) -> str:
    """One 'error:' line on stderr, exit 2, nothing on stdout, no traceback."""
    text = _error(result)
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stdout == ""
    assert "Traceback" not in result.output
    return text


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ("count d --epsilon 0", "Invalid value for '--epsilon': must be > 0 (got 0)"),
        ("count d --epsilon -2", "must be > 0 (got -2)"),
        ("count d --epsilon nan", "must be > 0 (got nan)"),
        ("count d", "Missing option '--epsilon'; see 'dpmine count --help'"),
        ("count d --epsilon 1 --colour red", "No such option: --colour"),
        ("counts d", "No such command 'counts'"),
        ("quality d --left '[a]' --right '[b]' --epsilon 0", "must be > 0 (got 0)"),
        ("mine serenade-es d --epsilon 1 --rounds 0", "Invalid value for '--rounds'"),
        ("mine serenade-cs d --epsilon 1 --tau 0", "Invalid value for '--tau'"),
        ("mine serenade-es d --epsilon 1 --x0 0", "'--x0': must be > 0 (got 0)"),
        ("mine serenade-es d --epsilon 1 --x0-fraction 1", "must be in (0, 1) (got 1)"),
        ("mine serenade-es d --epsilon 1 --x0 5 --x0-fraction 0.1", "give only one of --x0"),
        ("mine serenade-es d --epsilon 1 --min-jaccard 2", "must be in [0, 1] (got 2)"),
        ("mine serenade-es d --epsilon 1 --preset best", "--preset must be 'auto' or 'paper'"),
        ("mine serenade-cs d --epsilon 1 --filter-by lower", "No such option: --filter-by"),
        ("mine itemsets d --epsilon 1 --k 0", "Invalid value for '--k'"),
        (
            "mine itemsets d --epsilon 1 --threshold-quantile 1",
            "'--threshold-quantile': must be in (0, 1) (got 1)",
        ),
        ("mine itemsets d --epsilon 1 --rho 0.1", "give the budget once: --epsilon on a pure"),
        ("mine alt-expm d", "give the run's budget: --epsilon on a pure-DP dataset, --rho"),
        ("mine serenade-es d --rho 0", "'--rho': must be > 0 (got 0)"),
        ("mine itemsets d --epsilon 1 --frequency-epsilon -1", "must be >= 0 (got -1)"),
        ("mine itemsets d --epsilon 1 --rules 1.5", "must be in [0, 1] (got 1.5)"),
        ("mine itemsets d --epsilon 1 --numeric-bins 1", "must be 0 (no numeric items) or at"),
        ("mine itemsets d --epsilon 1 --output out.txt", "--output must end in .json or .csv"),
        (
            "mine itemsets d --epsilon 1 --output /no/such/folder/out.json",
            "--output: the folder '/no/such/folder' does not exist; create it first",
        ),
        ("mine alt-expm d --epsilon 1 --plot /no/such/folder/p.png", "the folder '/no/such"),
        ("quality d --epsilon 1 '[a]'", 'give the two queries, e.g. quality DATASET "[odor'),
        ("quality d '[a]' '[b]' --left '[a]' --epsilon 1", "as LEFT RIGHT or as --left/--right"),
        ("quality d --left '[a]' --epsilon 1", "give both --left and --right"),
        ("fit rule-list d --epsilon 0", "must be > 0 (got 0)"),
        ("predict rule-list m.json rows.csv --threshold 2", "must be in [0, 1] (got 2)"),
    ],
)
def test_usage_mistakes_are_one_line_without_a_server(command: str, message: str) -> None:
    assert message in _usage_error(offline_cli(command))


def test_help_texts_state_the_ranges_and_keep_their_brackets() -> None:
    count_help = _flat(_ok(offline_cli("count --help")))
    assert "Privacy cost of this call (ε > 0)" in count_help
    assert "x>=0" not in count_help
    assert 'e.g. "[odor = n] & [bruises]"' in count_help
    fit_help = _flat(_ok(offline_cli("fit rule-list --help")))
    assert "[default: 40, or all possible antecedents" in fit_help
    serenade_help = _flat(_ok(offline_cli("mine serenade-es --help")))
    assert "fraction in (0, 1)" in serenade_help
    root_help = _flat(_ok(offline_cli("--help")))
    assert "may come before or after the command" in root_help
    for command in ("", "mine", "fit", "predict"):
        shown = offline_cli(command)  # no command: the help, not an error
        assert "Usage:" in shown.stdout
        assert "error:" not in shown.output


def test_global_options_work_after_the_command(
    server: LiveServer, account: Account, mushroom: DatasetInfo
) -> None:
    before = _json(dpmine_cli(server, account.api_key, f"--json schema {mushroom.id}"))
    after = _json(dpmine_cli(server, account.api_key, f"schema {mushroom.id} --json"))
    assert after == before
    trailing = [
        "budget",
        mushroom.id,
        "--json",
        f"--url={server.url}",
        "--api-key",
        account.api_key,
    ]
    status = BudgetStatus.model_validate(
        _json(RUNNER.invoke(analyst_app, trailing, env=ANALYST_ENV))
    )
    assert status.grant_epsilon == GRANT
    counted = _json(
        dpmine_cli(server, account.api_key, f"count {mushroom.id} --epsilon 0.1 --json")
    )
    assert NoisyCountResponse.model_validate(counted).receipt.epsilon_exact == "0.1"


def test_quality_takes_the_queries_as_arguments_too(
    server: LiveServer, account: Account, mushroom: DatasetInfo
) -> None:
    command = f'quality {mushroom.id} "[gill-size = b]" "[class = e]" --epsilon 0.2 --json'
    result = ComputeQualityResponse.model_validate(
        _json(dpmine_cli(server, account.api_key, command))
    )
    assert result.receipt.epsilon_exact == "0.2"
    cells = result.cells
    noisy = [value for value in (cells.e11, cells.e10, cells.e01, cells.e00) if value is not None]
    assert all(abs(value - exact) < 150 for value, exact in zip(noisy, GILL_CLASS, strict=True))
    assert len(noisy) == 4


def test_server_refusals_exit_2_and_run_failures_exit_1(
    server: LiveServer, account: Account
) -> None:
    refused = dpmine_cli(server, account.api_key, "budget no-such-dataset")
    assert _usage_error(refused).startswith("error: NotFound:")
    unreachable = RUNNER.invoke(
        analyst_app,
        ["datasets", "--url", "http://127.0.0.1:9", "--api-key", account.api_key],
        env=ANALYST_ENV,
    )
    assert unreachable.exit_code == 1, unreachable.output
    text = _flat(unreachable.stderr)
    assert text.startswith("error: GET /v1/datasets:"), text
    assert unreachable.stderr.count("\n") == 1
    assert "Traceback" not in unreachable.output


# --------------------------------------------------------------------------------------------
# dpmine: the pieces of the error and output handling


@pytest.mark.parametrize(
    ("args", "hoisted"),
    [
        (["schema", "x", "--json"], ["--json", "schema", "x"]),
        (
            ["count", "x", "--url", "u", "--epsilon", "1"],
            ["--url", "u", "count", "x", "--epsilon", "1"],
        ),
        (["--json", "datasets"], ["--json", "datasets"]),
        (["budget", "x", "--api-key=k"], ["--api-key=k", "budget", "x"]),
        (["schema", "x", "--url"], ["schema", "x", "--url"]),  # no value: left for click
        (["predict", "rule-list", "--", "--json"], ["predict", "rule-list", "--", "--json"]),
        (["schema", "x", "--json=1"], ["schema", "x", "--json=1"]),
    ],
)
def test_hoist_global_options(args: list[str], hoisted: list[str]) -> None:
    assert hoist_global_options(args) == hoisted


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (ParameterError("epsilon must be > 0 (got 0)"), 2),
        (QuerySyntaxError("[A", 3, "expected ']'", "close it"), 2),
        (InvalidRequestError("InvalidRequest", "d", _answer(422)), 2),
        (NotFoundError("NotFound", "d", _answer(404)), 2),
        (AuthenticationError("Unauthorized", "d", _answer(401)), 2),
        (BudgetExhaustedError("BudgetExhausted", "d"), 2),
        (ServerError("HTTP418", "d", _answer(418)), 2),
        (TransportError("GET /v1/datasets: refused"), 1),
        (OperationFailedError("OperationFailed", "d", _answer(500)), 1),
        (ServerError("HTTP502", "bad gateway", _answer(502)), 1),
        (RequestInProgressError("RequestInProgress", "d"), 1),
        (ChargeKeptNoResultError("ChargeKeptNoResult", "d"), 1),
        (RateLimitedError("RateLimited", "d"), 1),
        (DPMineError("job still running after 60 s"), 1),
    ],
)
def test_exit_codes(error: DPMineError, code: int) -> None:
    assert exit_code_of(error) == code


def test_an_empty_table_is_one_line_with_its_caption() -> None:
    table = Table("left", "right", title="SerenadeES redescriptions")
    table.caption = "3 charged calls, ε spent = 1"
    result = RUNNER.invoke(_emitting(table), [], env=ANALYST_ENV)
    assert result.stdout.splitlines() == [
        "SerenadeES redescriptions: none",
        "3 charged calls, ε spent = 1",
    ]
    table.add_row("a", "b")
    shown = RUNNER.invoke(_emitting(table), [], env=ANALYST_ENV).stdout
    assert shown.splitlines()[1:] == ["left  right", "a     b", "3 charged calls, ε spent = 1"]


def _emitting(table: Table) -> typer.Typer:
    """A one-command app printing ``table`` through the CLI's ``_emit`` (table mode)."""
    app = typer.Typer()

    @app.command()
    def show() -> None:
        _emit(_Options(url="", api_key="", as_json=False), {}, table)

    return app


def test_rows_files_name_the_bad_line_and_refuse_a_header_only_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_bytes("odor,cap-shape\nn,x\nn,caf\xe9\n".encode("latin-1"))
    with pytest.raises(typer.Exit) as info:
        _read_rows(bad)
    assert info.value.exit_code == 2
    message = _flat(capsys.readouterr().err)
    assert f"error: '{bad}' line 3 is not UTF-8 text (byte 0xe9); save the file as UTF-8" == message
    header_only = tmp_path / "header.csv"
    header_only.write_text("odor,cap-shape\n")
    with pytest.raises(typer.Exit):
        _read_rows(header_only)
    assert "has a header but no rows to predict" in capsys.readouterr().err
    good = tmp_path / "good.csv"
    good.write_text("\ufeffodor,cap-shape\nn,x\n", encoding="utf-8")
    assert _read_rows(good) == {"odor": ["n"], "cap-shape": ["x"]}


# --------------------------------------------------------------------------------------------
# dpmine-server (owner CLI) on the live server's database


def _owner_error(result: Result) -> str:
    assert result.exit_code == 2, (result.exit_code, result.output, repr(result.exception))
    text = _flat(result.stderr)
    assert text.startswith("error:"), text
    return text


@pytest.fixture(scope="module")
def cli_metadata(server: LiveServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Metadata proposed by ``datasets propose-metadata`` for a two-view Mushroom dataset."""
    folder = tmp_path_factory.mktemp("owner-cli")
    right = {"class", "odor", "bruises", "habitat"}
    views = folder / "views.json"
    views.write_text(json.dumps({name: "right" if name in right else "left" for name in ROWS[0]}))
    command = f"datasets propose-metadata --kind views --csv {MUSHROOM} --views {views}"
    metadata = DatasetMetadata.model_validate(_json(owner_cli(server, command)))
    assert metadata.kind == "views"
    assert metadata.n_max == 20_000  # 2 × 8124 rounded up to 1, 2 or 5 × 10^k
    assert len(metadata.attributes) == 23
    by_name = {attribute.name: attribute for attribute in metadata.attributes}
    assert by_name["class"].view == "right"
    assert by_name["gill-size"].view == "left"
    stalk_root = by_name["stalk-root"]
    assert stalk_root.type == "categorical"
    assert "?" not in stalk_root.categories  # "?" is a missing-value token
    assert metadata.review is not None
    assert not metadata.review.reviewed  # the owner must review the proposal before 'add'
    path = folder / "metadata.json"
    path.write_text(metadata.model_dump_json())
    refused = owner_cli(
        server,
        f"datasets add {unique_id('unreviewed')} --metadata {path} --epsilon-cap 1 "
        f"--csv {MUSHROOM}",
    )
    assert "has not been reviewed" in _owner_error(refused)
    reviewed = metadata.review.model_copy(update={"reviewed": True})
    path.write_text(metadata.model_copy(update={"review": reviewed}).model_dump_json())
    return path


def _add_dataset(server: LiveServer, metadata: Path, prefix: str, cap: str) -> dict[str, Any]:
    dataset_id = unique_id(prefix)
    command = (
        f"datasets add {dataset_id} --metadata {metadata} --epsilon-cap {cap} --csv {MUSHROOM} "
        "--name 'Mushroom via CLI'"
    )
    added: dict[str, Any] = _json(owner_cli(server, command + " --json"))
    assert DatasetInfo.model_validate(added["dataset"]).id == dataset_id
    return added


@pytest.fixture(scope="module")
def cli_dataset(server: LiveServer, cli_metadata: Path) -> str:
    added = _add_dataset(server, cli_metadata, "cli-mushroom", "3")
    # The load report is for the (trusted) owner only: it may state the row count.
    assert added["report"]["n_rows"] == MUSHROOM_ROWS
    assert added["report"]["missing"]["stalk-root"] == sum(r["stalk-root"] == "?" for r in ROWS)
    dataset_id: str = added["dataset"]["id"]
    return dataset_id


def _new_principal(server: LiveServer, role: str = "analyst") -> PrincipalCreated:
    name = unique_id("cli-analyst")
    created = _json(owner_cli(server, f"principals add {name} --role {role} --json"))
    return PrincipalCreated.model_validate(created)


#: The server remembers an authenticated key this long (DPMINE_AUTH_CACHE_TTL_S): a rotation or
#: a disable made by another process (here the owner CLI) takes effect within it (README).
AUTH_CACHE_TTL_S = float(Settings.model_fields["auth_cache_ttl_s"].default)


def _refused_within_the_auth_cache_ttl(server: LiveServer, api_key: str) -> None:
    """The key is refused (401) at the latest once the live server's auth cache has expired."""
    deadline = time.monotonic() + AUTH_CACHE_TTL_S + 2.0
    with dpmine.connect(server.url, api_key, retries=0) as connection:
        while True:
            try:
                connection.datasets()
            except dpmine.AuthenticationError:
                return
            assert time.monotonic() < deadline, "the key still works after the cache TTL"
            time.sleep(0.25)


def test_owner_cli_principals_lifecycle(server: LiveServer) -> None:
    created = _new_principal(server)
    name = created.principal.name
    assert created.principal.role == "analyst"
    assert created.api_key.startswith(created.principal.key_prefix)
    with dpmine.connect(server.url, created.api_key, retries=0) as connection:
        assert connection.datasets() == []  # the key works on the live server at once

    listing = _ok(owner_cli(server, "principals list --json"))
    principals = [PrincipalInfo.model_validate(p) for p in json.loads(listing)]
    assert name in {p.name for p in principals}
    assert "admin" in {p.name for p in principals if p.role == "owner"}
    assert created.api_key not in listing  # keys are never listed

    rotated = PrincipalCreated.model_validate(
        _json(owner_cli(server, f"principals rotate-key {name} --json"))
    )
    assert rotated.api_key != created.api_key
    _refused_within_the_auth_cache_ttl(server, created.api_key)
    events = _json(owner_cli(server, "audit export --json"))
    failures = [event["details"] for event in events if event["action"] == "auth_failed"]
    assert {"key_prefix": created.api_key[:10]} in failures
    with dpmine.connect(server.url, rotated.api_key, retries=0) as new:
        assert new.datasets() == []

    disabled = PrincipalInfo.model_validate(
        _json(owner_cli(server, f"principals disable {name} --json"))
    )
    assert disabled.disabled
    _refused_within_the_auth_cache_ttl(server, rotated.api_key)

    assert "already exists" in _owner_error(owner_cli(server, f"principals add {name}"))
    bad_role = owner_cli(server, f"principals add {unique_id('x')} --role root")
    assert "--role must be 'owner' or 'analyst'" in _owner_error(bad_role)


def test_owner_cli_datasets_list_and_show(server: LiveServer, cli_dataset: str) -> None:
    listed = _json(owner_cli(server, "datasets list --json"))
    [row] = [row for row in listed if row["id"] == cli_dataset]
    assert row["name"] == "Mushroom via CLI"
    assert (row["kind"], row["status"]) == ("views", "active")
    assert row["epsilon_cap"] == row["spent"] + row["remaining"] > 0
    info = DatasetInfo.model_validate(
        _json(owner_cli(server, f"datasets show {cli_dataset} --json"))
    )
    assert (info.id, info.version, info.status) == (cli_dataset, 1, "active")
    assert "missing-x" in _owner_error(owner_cli(server, "datasets show missing-x"))


def test_owner_cli_grants_then_analyst_cli_then_ledger_export(
    server: LiveServer, cli_dataset: str, tmp_path: Path
) -> None:
    created = _new_principal(server)
    name = created.principal.name
    grant = _json(owner_cli(server, f"grants set {cli_dataset} {name} 0.5 --json"))
    assert (grant["analyst"], grant["dataset_id"], grant["epsilon"]) == (name, cli_dataset, 0.5)
    grants = _json(owner_cli(server, f"grants list {cli_dataset} --json"))
    assert {(g["analyst"], g["epsilon"], g["spent"]) for g in grants} == {(name, 0.5, 0.0)}

    # The analyst CLI uses the key and the grant made by the owner CLI, on the live server.
    command = f"--json count {cli_dataset} --epsilon 0.1 --where '[class = e]'"
    released = NoisyCountResponse.model_validate_json(
        _ok(dpmine_cli(server, created.api_key, command))
    )
    assert abs(released.count - EDIBLE) < 300

    exported = _json(owner_cli(server, f"ledger export --dataset {cli_dataset} --json"))
    entries = [LedgerEntryInfo.model_validate(e) for e in exported]
    assert len(entries) == 1
    entry = entries[0]
    assert (entry.principal, entry.operation, entry.status) == (name, "count.noisy", "released")
    assert (entry.id, entry.epsilon_exact) == (released.receipt.ledger_entry_id, "0.1")
    assert entry.release is not None
    assert entry.release["count"] == released.count  # exactly what was released
    predicate = {"kind": "cat", "attribute": "class", "category": "e", "negated": False}
    assert entry.parameters["predicate"] == predicate

    as_csv = _ok(owner_cli(server, f"ledger export --dataset {cli_dataset} --format csv"))
    rows = list(csv.DictReader(as_csv.splitlines()))
    assert len(rows) == 1
    assert (rows[0]["operation"], rows[0]["epsilon_exact"], rows[0]["principal"]) == (
        "count.noisy",
        "0.1",
        name,
    )
    assert json.loads(rows[0]["release"])["count"] == released.count

    output = tmp_path / "ledger.json"
    _ok(owner_cli(server, f"ledger export --output {output}"))
    assert entry.id in {e["id"] for e in json.loads(output.read_text())}
    bad_format = owner_cli(server, "ledger export --format xml")
    assert "--format must be table, json or csv" in _owner_error(bad_format)

    assert "ledger is consistent" in _ok(owner_cli(server, "ledger verify"))


def test_owner_cli_audit_export(server: LiveServer, cli_dataset: str) -> None:
    name = _new_principal(server).principal.name
    _json(owner_cli(server, f"grants set {cli_dataset} {name} 0.25 --json"))
    events = [
        AuditEventInfo.model_validate(e) for e in _json(owner_cli(server, "audit export --json"))
    ]
    by_target = {(e.action, e.target): e for e in events}
    assert ("dataset_registered", cli_dataset) in by_target
    assert ("principal_created", name) in by_target
    grant = by_target[("grant_set", f"{cli_dataset}/{name}")]
    assert grant.details == {"epsilon": 0.25, "via": "cli"}
    assert [e.id for e in events] == sorted((e.id for e in events), reverse=True)  # newest first

    rows = list(csv.DictReader(_ok(owner_cli(server, "audit export --format csv")).splitlines()))
    assert {"id", "at", "principal", "action", "target", "details"} <= set(rows[0])
    grant_rows = [r for r in rows if r["target"] == f"{cli_dataset}/{name}"]
    assert [json.loads(r["details"]) for r in grant_rows] == [{"epsilon": 0.25, "via": "cli"}]


def test_owner_cli_retire_stops_queries(server: LiveServer, cli_metadata: Path) -> None:
    dataset_id = _add_dataset(server, cli_metadata, "cli-retire", "1")["dataset"]["id"]
    created = _new_principal(server)
    _json(owner_cli(server, f"grants set {dataset_id} {created.principal.name} 0.5 --json"))
    _ok(dpmine_cli(server, created.api_key, f"count {dataset_id} --epsilon 0.1"))

    retired = DatasetInfo.model_validate(
        _json(owner_cli(server, f"datasets retire {dataset_id} --json"))
    )
    assert retired.status == "retired"
    listed = {entry["id"]: entry for entry in _json(owner_cli(server, "datasets list --json"))}
    assert listed[dataset_id]["status"] == "retired"
    after = dpmine_cli(server, created.api_key, f"count {dataset_id} --epsilon 0.1")
    assert after.exit_code == 2, after.output
    # The ledger keeps the charge made before retirement, and nothing after it.
    entries = _json(owner_cli(server, f"ledger export --dataset {dataset_id} --json"))
    assert [(e["status"], e["epsilon_exact"]) for e in entries] == [("released", "0.1")]


def test_serenade_plan_reports_the_signal_and_the_run_shows_intervals(
    server: LiveServer, account: Account, mushroom: DatasetInfo, tmp_path: Path
) -> None:
    """`mine serenade-es`: the auto plan states its settings and each draw's signal; a run
    prints every statistic with its 90 % interval and exports them; paper is still there."""
    plan = _flat(
        _ok(
            dpmine_cli(
                server, account.api_key, f"mine serenade-es {mushroom.id} --epsilon 0.8 --plan-only"
            )
        )
    )
    for expected in ("preset auto", "provisional", "serenade.extend_one", "c·R"):
        assert expected in plan, plan
    paper = _flat(
        _ok(
            dpmine_cli(
                server,
                account.api_key,
                f"mine serenade-es {mushroom.id} "
                "--epsilon 0.8 --preset paper --x0-fraction 0.1 --plan-only",
            )
        )
    )
    assert "preset paper: I = 20, steps = 80" in paper, paper
    assert _budget(server, account, mushroom.id).grant_spent == 0.0  # plans are free

    # The run prints the results that pass the noise-aware test (issue #21), each statistic
    # with its joint interval; the file holds every result with its verdict.
    output = tmp_path / "reds.json"
    command = f"mine serenade-es {mushroom.id} --epsilon 0.8 --min-jaccard 0.5 --output {output}"
    table = _ok(dpmine_cli(server, account.api_key, command))
    written = json.loads(output.read_text())
    saved, summary = written["redescriptions"], written["significance"]
    assert saved, "the auto preset found nothing on mushroom at ε = 0.8"
    assert summary["min_jaccard"] == 0.5
    assert summary["examined"] == len(saved)  # ES: one quality check per result
    lows = [record["joint_intervals"]["jaccard"][0] for record in saved]
    assert lows == sorted(lows, reverse=True)
    for record in saved:
        joint = record["joint_intervals"]
        low, high = record["intervals"]["jaccard"]
        assert low <= record["noisy_statistics"]["jaccard"] <= high
        assert joint["jaccard"][0] <= record["noisy_statistics"]["jaccard"] <= joint["jaccard"][1]
        assert joint["level"] == pytest.approx(1 - 0.01 / len(saved))
        passes = (
            joint["p_value"][1] <= 0.01 / len(saved)
            and joint["excess"][0] > 0
            and joint["jaccard"][0] >= 0.5
        )
        assert record["significant"] == passes
        if passes:  # printed with its joint interval
            shown = f"{record['noisy_statistics']['jaccard']:.2f} [{joint['jaccard'][0]:.2f}, "
            assert shown in table, table
    flat = _flat(table)
    passed = [r for r in saved if r["significant"]]
    assert f"{len(passed)} of {len(saved)} results pass the noise-aware test" in flat
    assert "probability ≥ 99 %" in flat
    assert len(re.findall(r"\d\.\d\d \[\d\.\d\d, \d\.\d\d\]", table)) >= 2 * len(passed)
    if not passed:
        assert "No result passes the noise-aware test" in flat

    # --all prints every result, each with its verdict.
    every = _json(
        dpmine_cli(
            server, account.api_key, f"--json mine serenade-es {mushroom.id} --epsilon 0.2 --all"
        )
    )
    assert len(every["redescriptions"]) == every["significance"]["total"]
    assert sum(r["significant"] for r in every["redescriptions"]) == every["significance"]["passed"]


def test_serenade_takes_columns_and_says_how_the_run_ended(
    server: LiveServer, account: Account, mushroom: DatasetInfo
) -> None:
    """`mine serenade-cs --columns/--exclude`: every released query uses the allowed columns
    only, and the run says how its chains ended; a view left without a column is refused
    before any charge, naming what to fix."""
    payload = _json(
        dpmine_cli(
            server,
            account.api_key,
            f"--json mine serenade-cs {mushroom.id} --epsilon 0.3 --initial 3 --tau 2 --all "
            "--columns cap-color,odor,habitat --columns gill-color --exclude habitat",
        )
    )
    assert payload["columns"] == ["cap-color", "odor", "gill-color"]  # schema order
    for record in payload["redescriptions"]:
        for side in ("left", "right"):
            assert attributes(parse_query(record[side])) <= {"cap-color", "odor", "gill-color"}
    assert "chain" in payload["stop_reason"]
    text = _flat(
        _ok(
            dpmine_cli(
                server,
                account.api_key,
                f"mine serenade-cs {mushroom.id} --epsilon 0.2 --initial 2 --tau 2 "
                "--min-chain-jaccard 0.9 --exclude odor",
            )
        )
    )
    assert "chains stopped before their τ = 2 steps" in text or "Every chain ran all" in text
    spent = _budget(server, account, mushroom.id).grant_spent
    assert 0 < spent <= 0.5 + 1e-9
    refused = _error(
        dpmine_cli(
            server,
            account.api_key,
            f"mine serenade-es {mushroom.id} --epsilon 0.1 --columns odor,class",
        )
    )
    assert "columns and exclude leave the left view no attribute" in refused
    assert _budget(server, account, mushroom.id).grant_spent == pytest.approx(spent)
