"""Timing audit over HTTP (DESIGN.md contract item 7: time is an output; issue #7).

One real uvicorn server with padding (50 ms grid, 400 ms base) holds two pairs of
neighbouring datasets:

* for ``fim.topk_em``, baskets built so that the one added row moves c_K across a halving step of
  the former top-down c_K search (10 items t0…t9 in 999 rows, plus the added row; 60 items in
  about 90 % of another 1,000 rows). The former data-dependent mining threshold took 295 ms on one
  side and 11 ms on the other (kernel medians); the kernel now mines at a public threshold;
* for ``serenade.extend_one`` and ``count.noisy``, the bundled Mushroom data and the same rows
  minus one.

100 requests per dataset (500 under ``slow``; randomly interleaved, 8 client threads) are timed
on the client. The threshold event {time > t} is chosen on the first half of the samples (the
split that separates the datasets best) and tested on the second half with one-sided
Clopper-Pearson bounds in both directions (Bonferroni over the four bounds): the ε lower bound
must not exceed 0.1. At both sizes the same test flags a 2 ms shift of tightly spread times and
any total separation (``test_threshold_audit_has_power``).

``DPMINE_TIMING_AUDIT_UNPADDED=1`` runs the same audit against a server without padding and only
prints the bounds (how much the padding removes); it asserts nothing. Run against the code before
the fix (no padding, data-dependent threshold) this audit failed on ``fim.topk_em``.
"""

from __future__ import annotations

import csv
import gzip
import logging
import math
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import dpmine
from dpmine.wire import CreateDatasetRequest, CsvSource, DatasetMetadata, FimiSource
from privacy.audit import clopper_pearson
from privacy.sizes import short_and_long
from support.datasets import MUSHROOM_PATH, mushroom_metadata, unique_id
from support.servers import LiveServer, add_analyst
from support.timing import interleaved_response_times

logger = logging.getLogger(__name__)

#: Requests per dataset: short (default) and long (slow).
REQUESTS = short_and_long("requests", 100, 500)
#: Requests per dataset of the diagnostic unpadded run.
DIAGNOSTIC_REQUESTS = 500
THREADS = 8
EPSILON_BOUND = 0.1
ALPHA = 0.05
#: The public base covers the request path of THREADS concurrent clients, whose ledger commits
#: serialize on SQLite: an extend_one (≈ 1 ms of kernel) was seen answered after 0.25 s on a busy
#: disk, past a 150 ms base, and failed closed. The audit's question (do padded times tell
#: neighbours apart?) does not depend on the base, as long as nothing overruns it.
BASE_MS = 400
#: The kernels of one server process take turns (services/kernel_lane.py), so the eight
#: threads' requests are answered one *priced* kernel apart: at scale 1 the hand-set top-K
#: estimate (1.28 s here, for a kernel of tens of milliseconds) made the top-K audit take over
#: four minutes, and a quarter of it about one. A tenth (0.128 s a kernel) still covers every
#: kernel three times, with the 400 ms base to absorb a queue of kernels that run late; the
#: audit's question does not depend on the scale either, as long as nothing overruns (every
#: answer must be a release).
SCALE = 0.1
PADDED_ENV = {
    "DPMINE_TIMING_PADDING": "true",
    "DPMINE_TIMING_GRID_MS": "50",
    "DPMINE_TIMING_BASE_MS": str(BASE_MS),
    "DPMINE_TIMING_SCALE": str(SCALE),
    "DPMINE_TIMING_OVERRUN": "fail",
    "DPMINE_JOB_WORKERS": "2",
}
UNPADDED_ENV = {"DPMINE_TIMING_PADDING": "false"}

#: (operation, path, body) of every audited request; ε small so 1000 calls fit the grant.
OPERATIONS: list[tuple[str, str, dict[str, Any]]] = [
    (
        "fim.topk_em",
        "itemsets/top-k-em",
        # ε large enough that Γ < 500: c_K (999 or 1000) is searched above the floor.
        {"k": 10, "min_length": 2, "max_length": 3, "epsilon": 2.0, "with_counts": False},
    ),
    (
        "serenade.extend_one",
        "redescriptions/serenade/extend",
        {
            "mode": "es",
            "collection": [
                {
                    "left": {"kind": "cat", "attribute": "cap-shape", "category": "x"},
                    "right": {"kind": "cat", "attribute": "odor", "category": "n"},
                }
            ],
            "epsilon": 0.01,
            "quality": {"x0": 812.0},
        },
    ),
    (
        "count.noisy",
        "counts",
        {"predicate": {"kind": "cat", "attribute": "odor", "category": "n"}, "epsilon": 0.01},
    ),
]
#: Which neighbouring pair each operation is audited on.
PAIRS = {"fim.topk_em": "baskets", "serenade.extend_one": "mushroom", "count.noisy": "mushroom"}


def _write_mushroom(folder: Path, *, drop_first: bool) -> Path:
    with gzip.open(MUSHROOM_PATH, "rt", newline="") as handle:
        rows = list(csv.reader(handle))
    path = folder / f"mushroom-{'minus' if drop_first else 'full'}.csv"
    with path.open("w", newline="") as handle:
        csv.writer(handle).writerows([rows[0], *rows[2 if drop_first else 1 :]])
    return path


BASKET_ITEMS = ["z", *(f"t{i}" for i in range(10)), *(f"m{j}" for j in range(60))]


def _write_baskets(folder: Path, *, added: bool) -> Path:
    """c_K of the 2- and 3-itemsets is 999 without the added row and 1,000 with it."""
    chance = random.Random(5)
    rows = []
    for row in range(2_000):
        basket = ["z"]
        if row < 999:
            basket += [f"t{i}" for i in range(10)]
        if row >= 1_000:
            basket += [f"m{j}" for j in range(60) if chance.random() < 0.9]
        rows.append(basket)
    if added:
        rows.append(["z", *(f"t{i}" for i in range(10))])
    path = folder / f"baskets-{'plus' if added else 'base'}.dat"
    path.write_text("\n".join(" ".join(basket) for basket in rows) + "\n")
    return path


def _register(owner: dpmine.Connection, path: Path) -> str:
    source = FimiSource(path=path.name) if path.suffix == ".dat" else CsvSource(path=path.name)
    metadata = (
        DatasetMetadata(kind="transactions", n_max=5_000, items=BASKET_ITEMS)
        if path.suffix == ".dat"
        else mushroom_metadata()
    )
    request = CreateDatasetRequest(
        id=unique_id("timing"),
        name="timing audit",
        epsilon_cap=10_000.0,
        metadata=metadata,
        source=source,
    )
    registered = owner.admin.upload_dataset(request, {"path": path})
    dataset_id: str = registered["dataset"]["id"]
    return dataset_id


class TimingServer:
    """A live server with the two neighbouring datasets and an analyst granted on both."""

    def __init__(self, workdir: Path, env: dict[str, str]) -> None:
        self.server = LiveServer(
            database_url=f"sqlite:///{workdir / 'timing.sqlite3'}",
            workdir=workdir,
            name="timing",
            extra_env=env,
        )

    def __enter__(self) -> TimingServer:
        self.server.start()
        with dpmine.connect(self.server.url, self.server.owner_key, retries=0) as owner:
            folder = self.server.workdir
            self.pairs = {
                "mushroom": [
                    _register(owner, _write_mushroom(folder, drop_first=drop))
                    for drop in (False, True)
                ],
                "baskets": [
                    _register(owner, _write_baskets(folder, added=added)) for added in (False, True)
                ],
            }
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
            seed=7,
        )


def _loss(successes_0: int, successes_1: int, trials_0: int, trials_1: int) -> float:
    tail = ALPHA / 4  # two bounds per direction, two directions
    lower_0, upper_0 = clopper_pearson([successes_0], trials_0, tail)
    lower_1, upper_1 = clopper_pearson([successes_1], trials_1, tail)
    bounds = [0.0]
    for lower, upper in ((lower_1[0], upper_0[0]), (lower_0[0], upper_1[0])):
        if lower > 0 and upper > 0:
            bounds.append(math.log(lower) - math.log(upper))
    return max(bounds)


def timing_epsilon(times_0: np.ndarray, times_1: np.ndarray) -> tuple[float, float]:
    """(ε lower bound, threshold): the threshold event {t > threshold} and its complement,
    chosen on the first half of each side, bounded with Clopper-Pearson on the second half."""
    half_0, half_1 = len(times_0) // 2, len(times_1) // 2
    pick_0, test_0 = times_0[:half_0], times_0[half_0:]
    pick_1, test_1 = times_1[:half_1], times_1[half_1:]
    candidates = np.unique(np.concatenate([pick_0, pick_1]))
    best, threshold = -1.0, float(candidates[0])
    for value in candidates:
        gap = abs(float(np.mean(pick_0 > value)) - float(np.mean(pick_1 > value)))
        if gap > best:
            best, threshold = gap, float(value)
    above_0, above_1 = int(np.sum(test_0 > threshold)), int(np.sum(test_1 > threshold))
    n_0, n_1 = len(test_0), len(test_1)
    epsilon = max(
        _loss(above_0, above_1, n_0, n_1),
        _loss(n_0 - above_0, n_1 - above_1, n_0, n_1),
    )
    return epsilon, threshold


def _report(label: str, name: str, times_0: np.ndarray, times_1: np.ndarray) -> float:
    epsilon, threshold = timing_epsilon(times_0, times_1)
    logger.info(
        f"{label} {name}: median {np.median(times_0) * 1e3:.1f} / {np.median(times_1) * 1e3:.1f}"
        f" ms, threshold {threshold * 1e3:.1f} ms, ε lower bound {epsilon:.3f}"
    )
    return epsilon


@pytest.fixture(scope="module")
def padded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TimingServer]:
    with TimingServer(tmp_path_factory.mktemp("timing-padded"), PADDED_ENV) as server:
        yield server


@REQUESTS
@pytest.mark.parametrize(("name", "path", "body"), OPERATIONS, ids=[op[0] for op in OPERATIONS])
def test_padded_response_times_do_not_tell_neighbours_apart(
    padded: TimingServer, name: str, path: str, body: dict[str, Any], requests: int
) -> None:
    times_0, times_1 = padded.response_times(path, body, PAIRS[name], requests)
    epsilon = _report("padded", name, times_0, times_1)
    # Every answer waited for the public deadline (the base at least).
    assert min(times_0.min(), times_1.min()) >= BASE_MS / 1000
    assert epsilon <= EPSILON_BOUND, (
        f"{name}: response times separate neighbouring datasets (ε ≥ {epsilon:.3f} from timing "
        "alone); the kernel overran its padding budget"
    )


@pytest.mark.skipif(
    not os.environ.get("DPMINE_TIMING_AUDIT_UNPADDED"),
    reason="diagnostic: set DPMINE_TIMING_AUDIT_UNPADDED=1 to measure the unpadded channel",
)
def test_unpadded_timing_channel_report(tmp_path: Path) -> None:
    with TimingServer(tmp_path, UNPADDED_ENV) as server:
        for name, path, body in OPERATIONS:
            times = server.response_times(path, body, PAIRS[name], DIAGNOSTIC_REQUESTS)
            _report("unpadded", name, *times)


@REQUESTS
def test_threshold_audit_has_power(requests: int) -> None:
    """The audit flags a 2 ms shift in tightly spread response times."""
    rng = np.random.default_rng(3)
    fast = 0.010 + rng.normal(0, 0.0005, requests)
    slow = 0.012 + rng.normal(0, 0.0005, requests)
    assert timing_epsilon(fast, slow)[0] > 1.0
    same = 0.010 + rng.normal(0, 0.0005, requests)
    assert timing_epsilon(fast, same)[0] <= EPSILON_BOUND
    # A total separation (every time on one side above every time on the other).
    assert timing_epsilon(fast, fast + 1.0)[0] > 2.0
