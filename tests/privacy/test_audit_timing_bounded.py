"""Timing audit of the itemset kernels on adversarial neighbours, over real HTTP with padding on
(DESIGN.md contract item 7: time is an output; issue #20 item 2, "unbounded top-K work").

One uploaded row lifts every itemset of that row from count B − 1 to the explicit threshold B
at once, so a kernel whose work follows the mined set runs much longer on the neighbour:

* ``fim.topk_em``: a 60-item block held by 20 = B − 1 rows (K = 5, ε = 0.25, no counts: the
  one-sided scale K/ε = 20, B = 21), itemsets of 1 to 4 items; the neighbour holds the block 21
  times (C(60, ≤ 4) ≈ 524,000 itemsets reach B);
* ``brl.antecedents``: 120 Boolean attributes, 20 = B − 1 positive rows with every attribute
  true (k_per_class = 5, ε = 0.25), antecedents of 1 to 3 items; the neighbour has one more
  (C(120, ≤ 3) ≈ 288,000 antecedents reach B).

A live server with production-like padding (50 ms grid, 150 ms base) answers the same request on
both datasets, randomly interleaved; :func:`timing_epsilon` (the threshold event chosen on the
first half, Clopper-Pearson on the second) bounds the ε that response times alone reveal. It
must not exceed the ε charged for the call. Before the fix (mining at B with a budget guessed
from n_max and the item count) both operations failed it: the neighbour's kernel overran its
padding and was released at a later tick.

The default run is short (:data:`SHORT_REQUESTS` per dataset); the ``slow`` variant takes
:data:`LONG_REQUESTS` for a tighter bound.
"""

from __future__ import annotations

import csv
import logging
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import dpmine
from dpmine.wire import (
    BooleanAttribute,
    CreateDatasetRequest,
    CsvSource,
    DatasetMetadata,
    FimiSource,
    LabelSpec,
)
from privacy.test_audit_timing import timing_epsilon
from support.datasets import unique_id
from support.servers import LiveServer, add_analyst
from support.timing import interleaved_response_times

logger = logging.getLogger(__name__)

EPSILON = 0.25
SHORT_REQUESTS = 40
LONG_REQUESTS = 300
THREADS = 4
PADDED_ENV = {
    "DPMINE_TIMING_PADDING": "true",
    "DPMINE_TIMING_GRID_MS": "50",
    "DPMINE_TIMING_BASE_MS": "150",
    "DPMINE_TIMING_SCALE": "1",
    "DPMINE_TIMING_OVERRUN": "fail",
    "DPMINE_JOB_WORKERS": "1",
}
#: B − 1 = the one-sided scale K/ε = 20 (both operations: B = min(1 + ⌈K/ε⌉, ⌊Γ⌋ + 1) = 21).
BLOCK_ROWS = 20

BLOCK = [f"b{i}" for i in range(60)]
FILLER = [f"f{i}" for i in range(4)]
ATTRIBUTES = [f"a{i}" for i in range(120)]

#: (operation, path, body, pair) of each audited call.
CALLS: list[tuple[str, str, dict[str, Any], str]] = [
    (
        "fim.topk_em",
        "itemsets/top-k-em",
        {"k": 5, "min_length": 1, "max_length": 4, "epsilon": EPSILON, "with_counts": False},
        "baskets",
    ),
    (
        "brl.antecedents",
        "rule-lists/antecedents",
        {"k_per_class": 5, "max_length": 3, "epsilon": EPSILON},
        "attributes",
    ),
]


def _write_baskets(folder: Path, *, added: bool) -> Path:
    """The block in BLOCK_ROWS (+ 1) rows, among 30 two-item filler rows."""
    chance = random.Random(11)
    rows = [" ".join(chance.sample(FILLER, 2)) for _ in range(30)]
    rows += [" ".join(BLOCK)] * (BLOCK_ROWS + int(added))
    path = folder / f"block-{'plus' if added else 'base'}.dat"
    path.write_text("\n".join(rows) + "\n")
    return path


def _write_attributes(folder: Path, *, added: bool) -> Path:
    """BLOCK_ROWS (+ 1) positive rows with every attribute true, 40 random negative rows."""
    chance = random.Random(12)
    rows = [["1"] * len(ATTRIBUTES) + ["1"] for _ in range(BLOCK_ROWS + int(added))]
    rows += [[chance.choice("01") for _ in ATTRIBUTES] + ["0"] for _ in range(40)]
    path = folder / f"attributes-{'plus' if added else 'base'}.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow([*ATTRIBUTES, "y"])
        writer.writerows(rows)
    return path


def _metadata(kind: str) -> DatasetMetadata:
    if kind == "baskets":
        return DatasetMetadata(kind="transactions", n_max=60, items=[*BLOCK, *FILLER])
    attributes = [BooleanAttribute(name=name) for name in [*ATTRIBUTES, "y"]]
    return DatasetMetadata(
        kind="table",
        n_max=100,
        attributes=list(attributes),
        label=LabelSpec(attribute="y", positive="1"),
    )


class BoundedTimingServer:
    """A padded live server holding both neighbouring pairs, an analyst granted on all four."""

    def __init__(self, workdir: Path) -> None:
        self.server = LiveServer(
            database_url=f"sqlite:///{workdir / 'bounded.sqlite3'}",
            workdir=workdir,
            name="bounded",
            extra_env=PADDED_ENV,
        )

    def __enter__(self) -> BoundedTimingServer:
        self.server.start()
        folder = self.server.workdir
        writers = {"baskets": _write_baskets, "attributes": _write_attributes}
        with dpmine.connect(self.server.url, self.server.owner_key, retries=0) as owner:
            self.pairs: dict[str, list[str]] = {}
            for kind, write in writers.items():
                self.pairs[kind] = []
                for added in (False, True):
                    path = write(folder, added=added)
                    source = FimiSource(path=path.name) if kind == "baskets" else None
                    request = CreateDatasetRequest(
                        id=unique_id("bounded"),
                        name="bounded timing audit",
                        epsilon_cap=10_000.0,
                        metadata=_metadata(kind),
                        source=source or CsvSource(path=path.name),
                    )
                    registered = owner.admin.upload_dataset(request, {"path": path})
                    self.pairs[kind].append(registered["dataset"]["id"])
            account = add_analyst(self.server, owner)
            account.connection.close()
            for pair in self.pairs.values():
                for dataset_id in pair:
                    owner.admin.grant(dataset_id, account.name, 5_000.0)
        self.api_key = account.api_key
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()

    def response_times(
        self, path: str, body: dict[str, Any], pair: str, requests: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Client-side seconds of ``requests`` calls on each dataset of ``pair``, interleaved."""
        return interleaved_response_times(
            self.server.url,
            self.api_key,
            self.pairs[pair],
            path,
            body,
            requests=requests,
            threads=THREADS,
            seed=13,
        )


@pytest.fixture(scope="module")
def padded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BoundedTimingServer]:
    with BoundedTimingServer(tmp_path_factory.mktemp("timing-bounded")) as server:
        yield server


def _audit(server: BoundedTimingServer, call: tuple[str, str, dict[str, Any], str], n: int) -> None:
    name, path, body, pair = call
    server.response_times(path, body, pair, 2)  # load both datasets and compile the miner
    times_0, times_1 = server.response_times(path, body, pair, n)
    epsilon, threshold = timing_epsilon(times_0, times_1)
    logger.warning(
        "%s: median %.1f / %.1f ms, max %.1f / %.1f ms, threshold %.1f ms, ε lower bound %.3f",
        name,
        np.median(times_0) * 1e3,
        np.median(times_1) * 1e3,
        times_0.max() * 1e3,
        times_1.max() * 1e3,
        threshold * 1e3,
        epsilon,
    )
    assert min(times_0.min(), times_1.min()) >= 0.15  # every answer waited for its deadline
    assert epsilon <= EPSILON, (
        f"{name}: response times separate the neighbours (ε ≥ {epsilon:.3f} from timing alone, "
        f"{EPSILON} charged): the kernel overran its padding budget"
    )


@pytest.mark.parametrize("call", CALLS, ids=[call[0] for call in CALLS])
def test_padded_times_of_adversarial_neighbours_agree(
    padded: BoundedTimingServer, call: tuple[str, str, dict[str, Any], str]
) -> None:
    _audit(padded, call, SHORT_REQUESTS)


@pytest.mark.slow
@pytest.mark.parametrize("call", CALLS, ids=[call[0] for call in CALLS])
def test_padded_times_of_adversarial_neighbours_agree_long(
    padded: BoundedTimingServer, call: tuple[str, str, dict[str, Any], str]
) -> None:
    _audit(padded, call, LONG_REQUESTS)
