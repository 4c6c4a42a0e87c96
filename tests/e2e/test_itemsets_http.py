"""End to end: top-K itemsets over real HTTP against a live uvicorn server (ALGORITHMS.md §4;
DESIGN.md "Testing", "The budget ledger").

Data: the bundled UCI Mushroom file (8124 rows), which is the data of the FIMI ``mushroom.dat``
benchmark. It is registered twice:

* as transactions, written here as a FIMI file: every attribute=value pair of the CSV is an item
  numbered 1, 2, … in column order and sorted value order (as in the FIMI file; a missing
  stalk-root '?' is an item too), one line per mushroom;
* as a ``table`` dataset from the CSV itself, where the items are the attribute=value pairs
  (``odor=n``) and an itemset holds at most one value per attribute.

Exact pair counts come from a 0/1 matrix of the rows. Utility checks use a large ε and a
negligible ρ so that their failure probability is below 1e-6 (bounds in the test docstrings);
released counts are compared within 40 (discrete Laplace of scale ≤ 1: P(|Z| ≥ 40) < 1e-17).
The server's selections are seeded (test mode), its released counts are not (OpenDP).
"""

from __future__ import annotations

import csv
import gzip
import itertools
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import pytest

import dpmine
from dpmine.miners import TopKItemsets
from dpmine.wire import (
    AnyAttribute,
    CategoricalAttribute,
    CreateDatasetRequest,
    CsvSource,
    DatasetMetadata,
    FimiSource,
    TopKItemsetsRequest,
    TopKItemsetsResponse,
)
from support.accounts import (
    analyst_account,
    exact_total,
    granted,
    mine_entries,
    owner_connection,
    seeded_server,
)
from support.datasets import MUSHROOM_PATH, mushroom_metadata, unique_id
from support.servers import Account, LiveServer

Method = Literal["em", "laplace"]
METHODS: tuple[Method, ...] = ("em", "laplace")
MUSHROOM_ROWS = 8124
CAP = 500.0
#: |released count − truth| bound (discrete Laplace of scale K/ε_p ≤ 1).
COUNT_BAND = 40
#: Soundness margin δ: with ε_s = 10, K = 10 (scale 2) and ρ = 1e-9, an itemset whose count is
#: below c_K − δ is selected with probability ≤ ρ + 7021·11·e^{−δ/4} < 1e-6 (Laplace; Gumbel is
#: tighter).
SOUNDNESS = 100
TINY_RHO = 1e-9
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Mushrooms:
    """The rows as a 0/1 matrix over attribute=value items, and the item names."""

    names: tuple[str, ...]
    attribute_of: tuple[str, ...]
    matrix: IntArray

    def count(self, items: tuple[str, ...]) -> int:
        columns = [self.names.index(item) for item in items]
        return int(np.all(self.matrix[:, columns] == 1, axis=1).sum())

    def pair_counts(self) -> dict[tuple[str, str], int]:
        """Exact count of every pair of items of different attributes."""
        gram = self.matrix.T @ self.matrix
        return {
            (self.names[i], self.names[j]): int(gram[i, j])
            for i, j in itertools.combinations(range(len(self.names)), 2)
            if self.attribute_of[i] != self.attribute_of[j]
        }


def read_mushrooms() -> Mushrooms:
    with gzip.open(MUSHROOM_PATH, "rt", newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader)
        rows = list(reader)
    values = [sorted({row[c] for row in rows}) for c in range(len(header))]
    names = tuple(f"{a}={v}" for a, vs in zip(header, values, strict=True) for v in vs)
    attribute_of = tuple(name.split("=", 1)[0] for name in names)
    position = {name: i for i, name in enumerate(names)}
    matrix = np.zeros((len(rows), len(names)), dtype=np.int64)
    for r, row in enumerate(rows):
        for attribute, value in zip(header, row, strict=True):
            matrix[r, position[f"{attribute}={value}"]] = 1
    return Mushrooms(names=names, attribute_of=attribute_of, matrix=matrix)


@pytest.fixture(scope="module")
def mushrooms() -> Mushrooms:
    data = read_mushrooms()
    assert data.matrix.shape[0] == MUSHROOM_ROWS
    return data


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    workdir = tmp_path_factory.mktemp("itemsets-server")
    with seeded_server(workdir, name="itemsets", seed="20101025") as live:
        yield live


@pytest.fixture(scope="module")
def owner(server: LiveServer) -> Iterator[dpmine.Connection]:
    with owner_connection(server) as connection:
        yield connection


@pytest.fixture(scope="module")
def fimi_dataset(
    owner: dpmine.Connection, mushrooms: Mushrooms, tmp_path_factory: pytest.TempPathFactory
) -> str:
    """The Mushroom rows as a FIMI file (items "1" … "126"), registered as transactions."""
    path = tmp_path_factory.mktemp("fimi") / "mushroom.dat"
    lines = (
        " ".join(str(int(c) + 1) for c in np.flatnonzero(row)) + "\n" for row in mushrooms.matrix
    )
    path.write_text("".join(lines), encoding="ascii")
    request = CreateDatasetRequest(
        id=unique_id("fimi-mushroom"),
        name="FIMI mushroom",
        epsilon_cap=CAP,
        metadata=DatasetMetadata(
            kind="transactions",
            n_max=10_000,
            items=[str(k + 1) for k in range(len(mushrooms.names))],
        ),
        source=FimiSource(path=path.name),
    )
    owner.admin.upload_dataset(request, {"path": path})
    return request.id


@pytest.fixture(scope="module")
def table_dataset(owner: dpmine.Connection) -> str:
    """The Mushroom CSV registered as a single table of categorical attributes."""
    attributes: list[AnyAttribute] = [
        CategoricalAttribute(name=a.name, categories=a.categories)
        for a in mushroom_metadata().attributes
        if isinstance(a, CategoricalAttribute)
    ]
    request = CreateDatasetRequest(
        id=unique_id("mushroom-table"),
        name="UCI Mushroom (table)",
        epsilon_cap=CAP,
        metadata=DatasetMetadata(kind="table", n_max=10_000, attributes=attributes),
        source=CsvSource(path=MUSHROOM_PATH.name),
    )
    owner.admin.upload_dataset(request, {"path": MUSHROOM_PATH})
    return request.id


@pytest.fixture
def analyst(server: LiveServer, owner: dpmine.Connection) -> Iterator[Account]:
    with analyst_account(server, owner) as account:
        yield account


def fimi_names(mushrooms: Mushrooms, items: tuple[str, ...]) -> tuple[str, ...]:
    """attribute=value names of FIMI item numbers."""
    return tuple(mushrooms.names[int(item) - 1] for item in items)


# --------------------------------------------------------------------------------------------
# Mining over HTTP


@pytest.mark.parametrize("method", METHODS)
def test_top_pairs_of_the_fimi_file(
    owner: dpmine.Connection,
    analyst: Account,
    fimi_dataset: str,
    mushrooms: Mushrooms,
    method: Method,
) -> None:
    """K = 10 pairs at ε = 20 (ε_s = ε_p = 10): every released pair has a true count of at
    least c_K − 100 and a released count within 40 of it; the ledger holds exactly ε."""
    handle = granted(owner, analyst, fimi_dataset, 50.0)
    miner = TopKItemsets(k=10, length=2, epsilon=20.0, method=method, threshold_quantile=TINY_RHO)
    assert miner.plan(handle).total_epsilon == 20.0
    miner.mine(handle)
    truth = mushrooms.pair_counts()
    c_k = sorted(truth.values(), reverse=True)[9]
    assert len(miner.itemsets_) == 10
    assert len({itemset.items for itemset in miner.itemsets_}) == 10
    for itemset in miner.itemsets_:
        names = fimi_names(mushrooms, itemset.items)
        assert len(names) == 2
        exact = mushrooms.count(names)
        assert exact >= c_k - SOUNDNESS, (names, exact, c_k)
        assert itemset.noisy_count is not None
        assert abs(itemset.noisy_count - exact) < COUNT_BAND
    (receipt,) = miner.receipts_
    assert receipt.operation == f"fim.topk_{method}"
    assert receipt.epsilon_exact == "20"
    assert receipt.remaining_epsilon == 30.0
    entries = mine_entries(owner, fimi_dataset, analyst)
    assert [entry.id for entry in entries] == [receipt.ledger_entry_id]
    assert exact_total(entries) == Decimal(20)
    assert entries[0].status == "released"
    assert TopKItemsetsResponse.model_validate(entries[0].release).receipt == receipt
    assert handle.budget().grant_spent == 20.0


@pytest.mark.parametrize("method", METHODS)
def test_default_miner_run_on_the_fimi_file(
    owner: dpmine.Connection, analyst: Account, fimi_dataset: str, method: Method
) -> None:
    """The paper's defaults (K = 10, ε = 1.4, ρ = 0.1; ``length="auto"`` serves ℓ = 3 here):
    ten distinct 3-itemsets of the item universe with integer counts, and exactly 1.4
    charged."""
    handle = granted(owner, analyst, fimi_dataset, 2.0)
    miner = TopKItemsets(method=method).mine(handle)
    assert miner.length_ == (3, 3)
    universe = set(handle.schema.items)
    assert len({itemset.items for itemset in miner.itemsets_}) == 10
    for rank, itemset in enumerate(miner.itemsets_, start=1):
        assert itemset.rank == rank
        assert len(set(itemset.items)) == 3
        assert set(itemset.items) <= universe
        assert isinstance(itemset.noisy_count, int)
    assert [r.epsilon_exact for r in miner.receipts_] == ["1.4"]
    assert exact_total(mine_entries(owner, fimi_dataset, analyst)) == Decimal("1.4")
    assert handle.budget().remaining_epsilon == float(Decimal(2) - Decimal("1.4"))


@pytest.mark.parametrize("method", METHODS)
def test_attribute_itemsets_of_the_table(
    owner: dpmine.Connection,
    analyst: Account,
    table_dataset: str,
    mushrooms: Mushrooms,
    method: Method,
) -> None:
    """Items are attribute=value pairs with at most one value per attribute; with ε = 20 the
    released pairs are sound (as above) and counts, frequencies and rules are consistent."""
    handle = granted(owner, analyst, table_dataset, 30.0)
    miner = TopKItemsets(
        k=10,
        length=2,
        epsilon=20.0,
        method=method,
        threshold_quantile=TINY_RHO,
        frequency_epsilon=1.0,
    )
    miner.mine(handle)
    truth = mushrooms.pair_counts()
    c_k = sorted(truth.values(), reverse=True)[9]
    n_hat = miner.noisy_row_count_
    assert n_hat is not None
    assert abs(n_hat - MUSHROOM_ROWS) < COUNT_BAND
    for itemset in miner.itemsets_:
        attributes = [item.split("=", 1)[0] for item in itemset.items]
        assert all("=" in item for item in itemset.items)
        assert len(set(attributes)) == 2
        # The printed query is the conjunction of the items' literals.
        assert itemset.query == " & ".join(
            "[{} = {}]".format(*item.split("=", 1)) for item in itemset.items
        )
        exact = mushrooms.count(itemset.items)
        assert exact >= c_k - SOUNDNESS, (itemset.items, exact, c_k)
        assert itemset.noisy_count is not None
        assert abs(itemset.noisy_count - exact) < COUNT_BAND
        assert itemset.noisy_frequency == max(itemset.noisy_count, 0) / n_hat
    assert [r.operation for r in miner.receipts_] == [f"fim.topk_{method}", "count.noisy"]
    assert exact_total(mine_entries(owner, table_dataset, analyst)) == Decimal(21)
    for rule in miner.rules(min_confidence=0.0):
        assert 0.0 <= rule.confidence <= 1.0


def test_single_attribute_values_over_a_length_range(
    owner: dpmine.Connection, analyst: Account, table_dataset: str, mushrooms: Mushrooms
) -> None:
    """Lengths 2..3 at ε = 20: every released itemset is valid for the table's attributes."""
    handle = granted(owner, analyst, table_dataset, 20.0)
    miner = TopKItemsets(
        k=5, length=(2, 3), epsilon=20.0, with_counts=False, threshold_quantile=TINY_RHO
    )
    miner.mine(handle)
    for itemset in miner.itemsets_:
        assert len(itemset.items) in (2, 3)
        assert len({item.split("=", 1)[0] for item in itemset.items}) == len(itemset.items)
        assert set(itemset.items) <= set(mushrooms.names)
        assert itemset.noisy_count is None


# --------------------------------------------------------------------------------------------
# Idempotency and refusals


def test_idempotent_replay(owner: dpmine.Connection, analyst: Account, fimi_dataset: str) -> None:
    handle = granted(owner, analyst, fimi_dataset, 5.0)
    path = f"/v1/datasets/{handle.id}/itemsets/top-k-em"
    request = TopKItemsetsRequest(k=5, min_length=2, epsilon=1.0)
    key = str(uuid.uuid4())
    first = analyst.connection.call(path, request, TopKItemsetsResponse, idempotency_key=key)
    again = analyst.connection.call(path, request, TopKItemsetsResponse, idempotency_key=key)
    assert not first.receipt.replayed
    assert again.receipt.replayed
    assert again.itemsets == first.itemsets
    assert again.receipt.ledger_entry_id == first.receipt.ledger_entry_id
    assert again.model_dump(exclude={"receipt"}) == first.model_dump(exclude={"receipt"})
    (entry,) = mine_entries(owner, fimi_dataset, analyst)
    assert entry.idempotency_key == key
    assert entry.epsilon_exact == "1"
    assert handle.budget().grant_spent == 1.0
    # The same key with a different request is refused and charges nothing.
    other = TopKItemsetsRequest(k=4, min_length=2, epsilon=1.0)
    with pytest.raises(dpmine.IdempotencyConflictError) as conflict:
        analyst.connection.call(path, other, TopKItemsetsResponse, idempotency_key=key)
    assert conflict.value.status_code == 409
    assert handle.budget().grant_spent == 1.0


BAD_REQUESTS = [
    pytest.param({"k": 1000, "min_length": 1, "epsilon": 1.0}, id="k-above-universe"),
    pytest.param({"k": 1001, "min_length": 2, "epsilon": 1.0}, id="k-above-limit"),
    pytest.param({"k": 1, "min_length": 7, "epsilon": 1.0}, id="length-7"),
    pytest.param({"k": 1, "min_length": 2, "max_length": 7, "epsilon": 1.0}, id="max-length-7"),
    pytest.param({"k": 1, "min_length": 3, "max_length": 2, "epsilon": 1.0}, id="empty-range"),
    pytest.param({"k": 1, "min_length": 2, "epsilon": -1.0}, id="negative-epsilon"),
    pytest.param({"k": 1, "min_length": 2, "epsilon": 0.0}, id="zero-epsilon"),
    pytest.param({"k": 1, "min_length": 2, "epsilon": 1.0, "rho": 1.0}, id="rho-1"),
    pytest.param({"k": 0, "min_length": 2, "epsilon": 1.0}, id="k-zero"),
]


@pytest.mark.parametrize("body", BAD_REQUESTS)
def test_bad_requests_are_refused_before_any_charge(
    owner: dpmine.Connection, analyst: Account, fimi_dataset: str, body: dict[str, Any]
) -> None:
    handle = granted(owner, analyst, fimi_dataset, 5.0)
    before = handle.budget()
    for method in METHODS:
        with pytest.raises(dpmine.InvalidRequestError) as refused:
            analyst.connection.request(
                "POST",
                f"/v1/datasets/{handle.id}/itemsets/top-k-{method}",
                json=body,
                idempotency_key=str(uuid.uuid4()),
            )
        assert refused.value.status_code == 422
    assert mine_entries(owner, fimi_dataset, analyst) == []
    assert handle.budget() == before


def test_table_requests_are_checked_against_its_items(
    owner: dpmine.Connection, analyst: Account, table_dataset: str
) -> None:
    handle = granted(owner, analyst, table_dataset, 5.0)
    assert TopKItemsets(k=1, length=6, epsilon=1.0).plan(handle).fits  # 23 attributes
    values = sum(
        len(a.categories) for a in handle.schema.attributes if isinstance(a, CategoricalAttribute)
    )
    assert values < 1000
    with pytest.raises(dpmine.InvalidRequestError, match=f"exceeds the {values} possible"):
        TopKItemsets(k=1000, length=1, epsilon=1.0).mine(handle)
    assert mine_entries(owner, table_dataset, analyst) == []
    assert owner.admin.verify_ledger() == {"consistent": True, "problems": []}
