"""End to end: a miner whose call fails after its charge keeps what the run released before it.

A charged call can fail on the server (its kernel overran the padded deadline, raised, or lost
its worker): the answer is ``OperationFailed``, the charge stands and nothing is released. A
miner used to lose the whole run there. Now it ends the phase it is in, keeps every release
made before the failure, tells the analyst where it stopped and what that call cost
(``stopped_``, a :class:`~dpmine.miners.RunStoppedWarning`, ``stop_reason_``, the CLI's
output), and counts the failed call's charge in ``budget_spent_``.

The failures are real server failures at chosen calls: each live server runs in test mode with
``DPMINE_TEST_FAIL_CALLS`` (server/dpmine_server/services/failpoints.py), which makes the N-th
call of an operation raise in its kernel after its charge, as a kernel error does. Data: the
bundled UCI Mushroom file (``support.datasets.register_mushroom``). Checked against the
server's ledger: the analyst's entries are the receipts plus one failed entry (one per part
of a failed batch) whose exact charge is the one the miner reports, in ε or, on a zCDP
dataset, in ρ.
"""

from __future__ import annotations

import json
import pickle
import shlex
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal

import pytest
from typer.testing import CliRunner

import dpmine
from dpmine.cli import app as analyst_app
from dpmine.miners import AltExpM, RunStoppedWarning, SerenadeCS, SerenadeES
from dpmine.wire import LedgerEntryInfo
from support.accounts import (
    analyst_account,
    exact_total,
    granted,
    mine_entries,
    owner_connection,
    rho_spent,
    seeded_server,
)
from support.datasets import register_mushroom
from support.servers import Account, LiveServer

MUSHROOM_X0 = 812.0
RUNNER = CliRunner()
ANALYST_ENV = {"COLUMNS": "400", "DPMINE_URL": "", "DPMINE_API_KEY": ""}


@contextmanager
def _failing_server(
    factory: pytest.TempPathFactory, name: str, fail_calls: str
) -> Iterator[LiveServer]:
    """A live test-mode server on a fresh SQLite file whose ``fail_calls`` fail after their
    charge (``DPMINE_TEST_FAIL_CALLS``)."""
    extra = {"DPMINE_TEST_FAIL_CALLS": fail_calls}
    with seeded_server(factory.mktemp(name), name=name, seed="20261129", extra_env=extra) as live:
        yield live


@pytest.fixture(scope="module")
def es_and_trees(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """The 3rd and 6th ``serenade.extend_one``, the 2nd ``serenade.initial_pairs`` and the 2nd
    ``tree.leaf_counts`` call fail."""
    calls = (
        "serenade.extend_one@3,serenade.extend_one@6,serenade.initial_pairs@2,tree.leaf_counts@2"
    )
    with _failing_server(tmp_path_factory, "stops-a", calls) as live:
        yield live


@pytest.fixture(scope="module")
def chains(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """The 2nd, 5th and 8th ``serenade.extend_one`` calls fail (inside a batch of three each)."""
    calls = "serenade.extend_one@2,serenade.extend_one@5,serenade.extend_one@8"
    with _failing_server(tmp_path_factory, "stops-b", calls) as live:
        yield live


def _ledger(
    owner: dpmine.Connection, dataset: dpmine.DatasetHandle, analyst: Account
) -> tuple[list[LedgerEntryInfo], list[LedgerEntryInfo]]:
    """The analyst's released and failed entries on the dataset."""
    entries = mine_entries(owner, dataset.id, analyst)
    released = [entry for entry in entries if entry.status == "released"]
    failed = [entry for entry in entries if entry.status != "released"]
    assert len(released) + len(failed) == len(entries)
    return released, failed


def _assert_charges(
    owner: dpmine.Connection,
    dataset: dpmine.DatasetHandle,
    analyst: Account,
    miner: SerenadeES | SerenadeCS | AltExpM,
    failed_parts: int,
) -> None:
    """Released entries are the receipts; the failed ones are the stopped call's parts, at the
    exact charge ``stopped_`` reports; ``budget_spent_`` and the grant count both."""
    released, failed = _ledger(owner, dataset, analyst)
    assert [e.id for e in released] == [r.ledger_entry_id for r in miner.receipts_]
    assert len(failed) == failed_parts
    stopped = miner.stopped_
    assert stopped is not None
    assert stopped.unit == "ε"
    assert stopped.charged is not None
    assert Decimal(stopped.charged) == exact_total(failed) > 0
    total = exact_total(released) + exact_total(failed)
    assert miner.budget_spent_ == float(total)
    assert dataset.budget().grant_spent == pytest.approx(float(total), abs=1e-9)


def test_es_measures_the_collection_it_held_when_a_round_failed(
    es_and_trees: LiveServer,
) -> None:
    with (
        owner_connection(es_and_trees) as owner,
        analyst_account(es_and_trees, owner) as analyst,
    ):
        dataset = granted(owner, analyst, register_mushroom(owner, epsilon_cap=5.0).id, 2.0)
        miner = SerenadeES(preset="paper", epsilon=1.0, n_initial=4, rounds=6, x0=MUSHROOM_X0)
        with pytest.warns(RunStoppedWarning, match="extension round 3 of 6"):
            miner.mine(dataset)
        stopped = miner.stopped_
        assert stopped is not None
        assert stopped.call == "serenade.extend_one (extension round 3 of 6)"
        assert "failed after its charge" in stopped.error
        operations = [r.operation for r in miner.receipts_]
        # The pairs, two rounds, then one check per distinct redescription held.
        assert operations[:3] == ["serenade.initial_pairs"] + ["serenade.extend_one"] * 2
        checks = operations[3:]
        assert checks == ["red.compute_quality"] * len(miner.all_results_)
        assert 1 <= len(checks) <= 4
        assert miner.significance_.examined == len(checks)
        assert "SerenadeES made 2 of its K = 6 extension rounds" in miner.stop_reason_
        assert "stopped early" in repr(miner)
        restored = pickle.loads(pickle.dumps(miner))  # a mined miner can be kept as it is
        assert restored.stopped_ == stopped
        assert restored.budget_spent_ == miner.budget_spent_
        _assert_charges(owner, dataset, analyst, miner, failed_parts=1)

        # A run whose first draw fails has nothing to measure: it says so and what it cost.
        other = granted(owner, analyst, register_mushroom(owner, epsilon_cap=5.0).id, 2.0)
        empty = SerenadeES(preset="paper", epsilon=1.0, n_initial=4, rounds=6, x0=MUSHROOM_X0)
        with pytest.warns(RunStoppedWarning, match=r"serenade\.initial_pairs"):
            empty.mine(other)
        assert empty.receipts_ == []
        assert empty.all_results_ == []
        assert "made 0 of its K = 6 extension rounds and 0 quality checks" in empty.stop_reason_
        message = empty.nothing_passed()
        assert message is not None
        assert "stopped early at serenade.initial_pairs (the run's first draw)" in message
        _assert_charges(owner, other, analyst, empty, failed_parts=1)

        # On a zCDP dataset the failed call's charge is in ρ, and budget_spent_ adds it up.
        info = register_mushroom(owner, cap_rho=1.0)
        owner.admin.grant(info.id, analyst.name, rho=0.5)
        zcdp = analyst.connection.dataset(info.id)
        in_rho = SerenadeES(preset="paper", rho=0.05, n_initial=4, rounds=6, x0=MUSHROOM_X0)
        with pytest.warns(RunStoppedWarning, match="extension round 3 of 6"):
            in_rho.mine(zcdp)  # its third round is the server's 6th extend_one call
        stopped = in_rho.stopped_
        assert stopped is not None
        assert stopped.unit == "ρ"
        assert stopped.charged is not None
        released, failed = _ledger(owner, zcdp, analyst)
        assert len(failed) == 1
        assert failed[0].rho_exact is not None
        assert Decimal(stopped.charged) == Decimal(failed[0].rho_exact) > 0
        charged = sum(Decimal(entry.rho_exact or "0") for entry in released + failed)
        assert Decimal(repr(in_rho.budget_spent_)) == charged
        assert rho_spent(zcdp) == charged


def test_a_tree_miner_keeps_the_releases_before_the_failed_one(es_and_trees: LiveServer) -> None:
    with (
        owner_connection(es_and_trees) as owner,
        analyst_account(es_and_trees, owner) as analyst,
    ):
        dataset = granted(owner, analyst, register_mushroom(owner, epsilon_cap=5.0).id, 2.0)
        miner = AltExpM(epsilon=1.0, in_trees=2, rm_iterations=2, concurrent_iterations=1, seed=7)
        with pytest.warns(RunStoppedWarning, match=r"tree\.leaf_counts in iteration 1"):
            miner.mine(dataset)
        operations = [r.operation for r in miner.receipts_]
        # Iteration 1: a tree, then per round a tree and a leaf-count release; the second
        # release failed, and iteration 2 never started.
        assert operations == ["tree.expmech", "tree.expmech", "tree.leaf_counts", "tree.expmech"]
        assert len(miner.leaf_counts_) == 1
        assert miner.examined_ > 0
        assert miner.all_results_, "the first release's results are kept"
        assert {result.round for result in miner.all_results_} == {0}
        message = miner.nothing_passed(min_jaccard=1.0)
        assert message is not None
        assert "The run stopped early at tree.leaf_counts in iteration 1" in message
        _assert_charges(owner, dataset, analyst, miner, failed_parts=1)


def test_cs_chains_end_at_their_last_check_when_a_batch_fails(chains: LiveServer) -> None:
    with owner_connection(chains) as owner, analyst_account(chains, owner) as analyst:
        dataset = granted(owner, analyst, register_mushroom(owner, epsilon_cap=5.0).id, 2.0)
        miner = SerenadeCS(
            preset="paper", epsilon=1.0, n_initial=3, tau=2, x0=MUSHROOM_X0, min_jaccard=0.0
        )
        with pytest.warns(RunStoppedWarning, match=r"a batch of 3 serenade\.extend_one calls"):
            miner.mine(dataset)
        operations = [r.operation for r in miner.receipts_]
        assert operations == ["serenade.initial_pairs"] + ["red.compute_quality"] * 3
        # Every chain keeps its first check (J_min = 0), one result per distinct chain end.
        assert 1 <= len(miner.all_results_) <= 3
        assert [stop.steps for stop in miner.chain_stops_] == [0, 0, 0]  # no draw released
        assert "3 chain(s) ended when the run stopped, after 0, 0, 0 of their τ = 2 steps" in (
            miner.stop_reason_
        )
        assert miner.stop_reason_.startswith("The run stopped early at a batch of 3")
        # The whole batch was charged: three failed entries.
        _assert_charges(owner, dataset, analyst, miner, failed_parts=3)

        # The CLI shows where the run stopped (no Python warning) and counts the charge.
        info = register_mushroom(owner, epsilon_cap=5.0)
        owner.admin.grant(info.id, analyst.name, 2.0)
        command = (
            f"--json --url {chains.url} --api-key {analyst.api_key} mine serenade-cs {info.id} "
            f"--preset paper --epsilon 1 --initial 3 --tau 2 --x0 {MUSHROOM_X0:g} "
            "--min-chain-jaccard 0 --all"
        )
        result = RUNNER.invoke(analyst_app, shlex.split(command), env=ANALYST_ENV)
        assert result.exit_code == 0, (result.output, repr(result.exception))
        assert "RunStoppedWarning" not in result.output
        payload = json.loads(result.stdout)
        assert payload["stopped"].startswith("The run stopped early at a batch of 3")
        released, failed = _ledger(owner, analyst.connection.dataset(info.id), analyst)
        assert len(failed) == 3
        assert payload["budget_spent"] == float(exact_total(released) + exact_total(failed))

        # An analyst who wants a stopped run to be an error turns the warning into one.
        strict = SerenadeCS(
            preset="paper", epsilon=1.0, n_initial=3, tau=2, x0=MUSHROOM_X0, min_jaccard=0.0
        )
        third = granted(owner, analyst, register_mushroom(owner, epsilon_cap=5.0).id, 2.0)
        with warnings.catch_warnings():
            warnings.simplefilter("error", RunStoppedWarning)
            with pytest.raises(RunStoppedWarning, match=r"a batch of 3 serenade\.extend_one"):
                strict.mine(third)
