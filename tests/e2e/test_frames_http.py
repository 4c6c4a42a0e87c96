"""Issue #22, notebook use over real HTTP: ``to_frame()`` of a mined result set has the columns
and rows of its ``to_csv`` file, every file parameter takes a ``str``, and a miner prints what
it is and what it found."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

import dpmine
from dpmine.miners import SerenadeES, TopKItemsets
from dpmine.wire import CreateDatasetRequest, CsvSource
from support.accounts import analyst_account, granted, owner_connection, seeded_server
from support.datasets import MUSHROOM_PATH, mushroom_metadata, unique_id
from support.servers import Account, LiveServer


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with seeded_server(tmp_path_factory.mktemp("frames"), name="frames", seed="22") as live:
        yield live


@pytest.fixture(scope="module")
def owner(server: LiveServer) -> Iterator[dpmine.Connection]:
    with owner_connection(server) as connection:
        yield connection


@pytest.fixture(scope="module")
def mushroom(owner: dpmine.Connection) -> str:
    request = CreateDatasetRequest(
        id=unique_id("mushroom"),
        name="UCI Mushroom",
        epsilon_cap=50.0,
        metadata=mushroom_metadata(),
        source=CsvSource(path=MUSHROOM_PATH.name),
    )
    owner.admin.upload_dataset(request, {"path": MUSHROOM_PATH})
    return request.id


@pytest.fixture
def analyst(server: LiveServer, owner: dpmine.Connection) -> Iterator[Account]:
    with analyst_account(server, owner) as account:
        yield account


def _csv_frame(path: Path) -> tuple[list[str], list[list[str]]]:
    with path.open(newline="", encoding="utf-8") as handle:
        header, *rows = list(csv.reader(handle))
    return header, rows


def test_itemsets_frame_is_the_csv(
    owner: dpmine.Connection, analyst: Account, mushroom: str, tmp_path: Path
) -> None:
    handle = granted(owner, analyst, mushroom, 2.0)
    miner = TopKItemsets(k=4, length=1, epsilon=1.0, columns=["odor", "class"])
    assert (
        repr(miner)
        == "TopKItemsets(k=4, length=1, epsilon=1.0, columns=['odor', 'class'])"[:-1]
        + ") · not mined"
    )
    miner.mine(handle)
    # The picks the counts confirm (all 4 but in about 0.2 % of runs, when a rare item wins
    # a pick by noise at the default threshold_quantile); the files keep every pick.
    confirmed = len(miner.itemsets_)
    assert 1 <= confirmed <= 4
    assert repr(miner).endswith(f"· mined: {confirmed} of 4 itemsets confirmed")
    target = str(tmp_path / "itemsets.csv")  # a str, as a notebook writes it
    miner.to_csv(target)
    miner.to_json(str(tmp_path / "itemsets.json"))
    frame = miner.to_frame()
    header, rows = _csv_frame(Path(target))
    assert isinstance(frame, pd.DataFrame)
    assert list(frame.columns) == header
    assert len(frame) == len(rows) == 4
    assert [str(rank) for rank in frame["rank"]] == [row[0] for row in rows]
    assert list(frame["items"]) == [row[1] for row in rows]
    assert [str(count) for count in frame["noisy_count"]] == [row[2] for row in rows]


def test_serenade_frame_is_the_csv(
    owner: dpmine.Connection, analyst: Account, mushroom: str, tmp_path: Path
) -> None:
    handle = granted(owner, analyst, mushroom, 3.0)
    miner = SerenadeES(epsilon=2.0, rounds=1, n_initial=3).mine(handle)
    verdict = miner.significance()
    found = f"{len(verdict.passed)} of {len(verdict.ranked)} results pass"
    assert repr(miner) == f"SerenadeES(rounds=1, epsilon=2.0, n_initial=3) · mined: {found}"
    target = str(tmp_path / "serenade.csv")
    miner.to_csv(target)
    frame = miner.to_frame()
    header, rows = _csv_frame(Path(target))
    assert list(frame.columns) == header
    assert len(frame) == len(rows) == len(verdict.ranked)
    assert list(frame["left"]) == [row[header.index("left")] for row in rows]
    assert [str(flag) for flag in frame["significant"]] == [
        row[header.index("significant")] for row in rows
    ]
