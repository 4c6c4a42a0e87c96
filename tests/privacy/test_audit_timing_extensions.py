"""Serial timing audit of SerenadeES's extension rounds priced against the public cache model
(services/extension_model.py; DESIGN.md contract item 7; issue #23).

A padded live server (100 ms grid, 150 ms base, scale 10, overruns fail closed) holds the
Mushroom data and the same rows minus one (8,124 and 8,123 rows). The same public sequence of
``serenade.extend_one`` calls, an ES run's rounds that each replace one redescription of the
collection (or none), is sent through the real client to both, one call at a time, alternating
between the two datasets. Each answer comes at its padded deadline, a whole number of grid
ticks after its arrival; the number of ticks (its latency floored to the grid) must be the
same on both neighbours, round by round, exactly. The model is in use: the first round (every
position built from the rows) is priced above the later ones (one position built at most); the
scale of 10 keeps that difference above a tick now that a position on these 117 discrete
literals is priced about 3 ms (services/timing.py).
No call overran (an overrun fails the call, which would stop the sequence). The default run is
short; the ``slow`` one replays a whole ES run's 80 rounds.

An answer is never early (it is held to its deadline) but can be late: a loaded machine can
deliver it a tick or two after the deadline. So when the two sequences of ticks differ, the
audit replays the whole sequence on a freshly registered pair of neighbours (fresh stores,
fresh models) and compares, round by round, the earliest tick each side reached over the two
replays. A data-dependent price is deterministic and recurs in the replay; lateness, which
only ever adds ticks, has to strike the same round on the same side twice to survive the
minimum. The broken models (a cache bounded by actual bytes, or filled when kernels finish)
are flagged in tests/services/test_extension_model.py.
"""

from __future__ import annotations

import csv
import gzip
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import dpmine
from dpmine.wire import (
    CategoricalAttribute,
    CreateDatasetRequest,
    CsvSource,
    ExtendOneRequest,
    Redescription,
)
from support.datasets import MUSHROOM_PATH, mushroom_metadata, unique_id
from support.servers import Account, LiveServer, add_analyst

GRID_MS = 100
PADDED_ENV = {
    "DPMINE_TIMING_PADDING": "true",
    "DPMINE_TIMING_GRID_MS": str(GRID_MS),
    "DPMINE_TIMING_BASE_MS": "150",
    "DPMINE_TIMING_SCALE": "10",
    "DPMINE_TIMING_OVERRUN": "fail",
    "DPMINE_TIMING_WARM_EXTENSIONS": "true",
}
POSITIONS = 6
SHORT_ROUNDS = 8
LONG_ROUNDS = 80


def _write(folder: Path, *, drop_first: bool) -> Path:
    with gzip.open(MUSHROOM_PATH, "rt", newline="") as handle:
        rows = list(csv.reader(handle))
    path = folder / f"mushroom-{'minus' if drop_first else 'full'}.csv"
    with path.open("w", newline="") as handle:
        csv.writer(handle).writerows([rows[0], *rows[2 if drop_first else 1 :]])
    return path


def _redescriptions() -> list[Redescription]:
    """Public one-literal pairs of the Mushroom views (left attribute, right attribute)."""
    metadata = mushroom_metadata()
    lefts = [a for a in metadata.attributes if a.view == "left"]
    rights = [a for a in metadata.attributes if a.view == "right"]
    pairs = []
    for index in range(len(lefts) * 2):
        left, right = lefts[index % len(lefts)], rights[(3 * index) % len(rights)]
        assert isinstance(left, CategoricalAttribute)
        assert isinstance(right, CategoricalAttribute)
        pairs.append(
            Redescription.model_validate(
                {
                    "left": {"kind": "cat", "attribute": left.name, "category": left.categories[0]},
                    "right": {
                        "kind": "cat",
                        "attribute": right.name,
                        "category": right.categories[index % len(right.categories)],
                    },
                }
            )
        )
    return pairs


def es_rounds(rounds: int) -> list[list[Redescription]]:
    """The collections of an ES-like run: round r replaces position r mod POSITIONS with the
    next public pair, except every third round, which leaves the collection as it was (a draw
    that kept a redescription unextended)."""
    pool = _redescriptions()
    collection = pool[:POSITIONS]
    following = iter(pool[POSITIONS:] * (rounds // len(pool) + 2))
    out = []
    for index in range(rounds):
        if index % 3 == 2:
            collection = list(collection)
            collection[index % POSITIONS] = next(following)
        out.append(list(collection))
    return out


@dataclass
class Neighbours:
    """A padded live server and an analyst with budget on every pair it registers."""

    server: LiveServer
    owner: dpmine.Connection
    analyst: Account

    def fresh_pair(self) -> tuple[str, str]:
        """Register the Mushroom data and the same rows minus one anew (their stores, and so
        their cache models, are untouched) and grant the analyst budget on both."""
        ids = []
        for drop in (False, True):
            path = _write(self.server.workdir, drop_first=drop)
            request = CreateDatasetRequest(
                id=unique_id("extensions"),
                name="extension timing audit",
                epsilon_cap=10_000.0,
                metadata=mushroom_metadata(),
                source=CsvSource(path=path.name),
            )
            dataset_id = self.owner.admin.upload_dataset(request, {"path": path})["dataset"]["id"]
            self.owner.admin.grant(dataset_id, self.analyst.name, 5_000.0)
            ids.append(dataset_id)
        return ids[0], ids[1]


@pytest.fixture(scope="module")
def neighbours(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Neighbours]:
    workdir = tmp_path_factory.mktemp("timing-extensions")
    server = LiveServer(
        database_url=f"sqlite:///{workdir / 'timing.sqlite3'}",
        workdir=workdir,
        name="timing-extensions",
        extra_env=PADDED_ENV,
    )
    server.start()
    try:
        with dpmine.connect(server.url, server.owner_key, retries=0) as owner:
            analyst = add_analyst(server, owner)
            with analyst.connection:
                yield Neighbours(server=server, owner=owner, analyst=analyst)
    finally:
        server.stop()


def _ticks(
    connection: dpmine.Connection, dataset_ids: tuple[str, str], rounds: int
) -> tuple[list[int], list[int]]:
    """Grid ticks of every round's answer on each neighbour, the rounds sent alternately."""
    handles = [connection.dataset(dataset_id) for dataset_id in dataset_ids]
    ticks: tuple[list[int], list[int]] = ([], [])
    for collection in es_rounds(rounds):
        request = ExtendOneRequest(
            mode="es", collection=collection, epsilon=0.01, quality={"x0": 812.0}
        )
        for side, handle in enumerate(handles):
            sent = time.perf_counter()
            handle.run(request)
            latency = time.perf_counter() - sent
            ticks[side].append(math.floor(latency * 1000 / GRID_MS))
    return ticks


def _audit(neighbours: Neighbours, rounds: int) -> list[int]:
    """The ticks of every round, the same on both neighbours (see the module docstring for
    the replay that separates a late answer from a price that depends on the rows)."""
    connection = neighbours.analyst.connection
    full, minus = _ticks(connection, neighbours.fresh_pair(), rounds)
    if full != minus:
        again_full, again_minus = _ticks(connection, neighbours.fresh_pair(), rounds)
        full = [min(a, b) for a, b in zip(full, again_full, strict=True)]
        minus = [min(a, b) for a, b in zip(minus, again_minus, strict=True)]
    assert full == minus, f"padded ticks differ between neighbours: {full} against {minus}"
    return full


def test_es_rounds_are_answered_at_the_same_ticks_on_neighbours(neighbours: Neighbours) -> None:
    ticks = _audit(neighbours, SHORT_ROUNDS)
    assert max(ticks[1:]) < ticks[0]  # priced warm after the first round


@pytest.mark.slow
def test_slow_es_rounds_are_answered_at_the_same_ticks_on_neighbours(
    neighbours: Neighbours,
) -> None:
    _audit(neighbours, LONG_ROUNDS)
