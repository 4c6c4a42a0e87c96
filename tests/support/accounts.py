"""Helpers of the end-to-end modules that run their own seeded live server (DESIGN.md "Testing",
"The budget ledger"): the server's lifetime, the owner's connection, a fresh analyst per test,
grants and the analyst's ledger entries.

The fixtures themselves stay in the test modules as thin wrappers around these context managers,
so that pytest finds them without plugins and each module keeps its own server name and seed.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path

import dpmine
from dpmine.wire import LedgerEntryInfo
from support.servers import Account, LiveServer, add_analyst


@contextmanager
def seeded_server(
    workdir: Path, *, name: str, seed: str, extra_env: Mapping[str, str] | None = None
) -> Iterator[LiveServer]:
    """A live server on a fresh SQLite file in ``workdir``, in test mode with ``seed`` (and
    ``extra_env``'s further settings)."""
    live = LiveServer(
        database_url=f"sqlite:///{workdir / 'dpmine.sqlite3'}",
        workdir=workdir,
        name=name,
        extra_env={"DPMINE_TEST_SEED": seed, **(extra_env or {})},
    )
    live.start()
    try:
        yield live
    finally:
        live.stop()


def owner_connection(server: LiveServer) -> dpmine.Connection:
    """The bootstrap owner's connection (no retries: tests want the first answer)."""
    return dpmine.connect(server.url, server.owner_key, retries=0)


@contextmanager
def analyst_account(server: LiveServer, owner: dpmine.Connection) -> Iterator[Account]:
    """A fresh analyst on ``server`` (no grants yet); its connection is closed afterwards."""
    account = add_analyst(server, owner)
    try:
        yield account
    finally:
        account.connection.close()


def granted(
    owner: dpmine.Connection, analyst: Account, dataset_id: str, epsilon: float
) -> dpmine.DatasetHandle:
    """Grant ``epsilon`` to the analyst and open the dataset with the analyst's key."""
    owner.admin.grant(dataset_id, analyst.name, epsilon)
    return analyst.connection.dataset(dataset_id)


def mine_entries(
    owner: dpmine.Connection, dataset_id: str, analyst: Account
) -> list[LedgerEntryInfo]:
    """The analyst's ledger entries on the dataset."""
    return [e for e in owner.admin.ledger(dataset_id) if e.principal == analyst.name]


def exact_total(entries: list[LedgerEntryInfo]) -> Decimal:
    """The exact sum of the entries' ε."""
    return sum((Decimal(entry.epsilon_exact) for entry in entries), Decimal(0))


def rho_spent(handle: dpmine.DatasetHandle) -> Decimal:
    """The ρ the analyst of ``handle`` has spent on its zCDP dataset, as the ledger reports."""
    status = handle.budget()
    assert status.zcdp is not None
    assert status.zcdp.rho_spent is not None
    return Decimal(repr(status.zcdp.rho_spent))
