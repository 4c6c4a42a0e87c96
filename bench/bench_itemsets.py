"""Benchmark of private top-K frequent itemsets (ALGORITHMS.md §4; Bhaskar et al., KDD 2010).

1. Utility: false negative rate (§4.4) of ``fim.topk_em`` and ``fim.topk_laplace`` on the four
   FIMI datasets, averaged over repeated runs, at the paper's defaults (ε/2 = 0.7, ρ = 0.1,
   K = 10, ℓ = 3) and one-parameter sweeps of ε/2, K and ℓ; plus the relative error of the
   released noisy counts. The private side runs the server's kernel
   (``dpmine_server.operations.itemsets.top_k_itemsets``) in-process on a ``TransactionIndex``
   over a ``ColumnStore`` from ``load_store``: the code the server runs, without HTTP. The true
   top K come from the harness's own parse of the files and pyfim, never from the server.
2. Speed: one DP top-K call through a real uvicorn server over HTTP (cold first call and warm
   medians) against a non-private top-K miner (pyfim Eclat / FP-growth, and mlxtend's fpgrowth
   where affordable) on the in-memory transactions, K in {10, 100}, ℓ = 3; cProfile of the
   server-side kernel where the ratio exceeds 2.
3. A Markdown summary with machine information.

``--zcdp DELTA`` (issue #24) adds a column for zCDP datasets: at K = 10, ℓ = 3 and each ε of
:data:`ZCDP_EPSILONS`, the FNR of the selection that ``TopKItemsets(rho=ρ)`` sends on a zCDP
dataset at the ρ of (ε, δ) (the largest ρ whose ρ + 2√(ρ ln 1/δ) ≤ ε, as the server stores a cap
given as (ε, δ)) beside pure ε's (ε_s = ε/2), with the issue's target on chess at ε = 1: the zCDP
FNR at most half the pure one. The same kernel in-process, counts left out (the FNR is the
selection's alone).

Usage::

    .venv/bin/python bench/bench_itemsets.py [--quick] [--out bench/out] [--zcdp 1e-6]

mlxtend is optional (it is not a project dependency): put it on ``PYTHONPATH`` to time it.
Writes ``<out>/itemsets.json``, ``<out>/itemsets_fnr_*.png`` and profile text files. See
bench/README.md.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import cProfile
import functools
import gc
import gzip
import importlib
import importlib.metadata
import io
import itertools
import json
import math
import pstats
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal, TypeVar

import matplotlib as mpl
import numpy as np
import numpy.typing as npt
import pandas as pd
from matplotlib.figure import Figure

from _support import (
    REPO_ROOT,
    ServerHandle,
    import_pyfim,
    load_average,
    machine_info,
    median,
    owner_confirmed,
    register_files,
    server_for_backend,
    time_calls,
    unwind_on_sigterm,
    wait_if_asked,
    write_bundled_fimi,
)
from dpmine.miners._rho import ZCDP
from dpmine.miners.itemsets import TopKItemsets, confirmation_margin
from dpmine.wire import FimiSource, TopKItemsetsRequest, TopKItemsetsResponse
from dpmine_server.data.itemsets import TransactionIndex, item_catalog
from dpmine_server.data.loaders import load_store
from dpmine_server.data.propose import propose_metadata
from dpmine_server.dp.rng import secure_generator, seeded_generator
from dpmine_server.dp.zcdp import rho_cap_for
from dpmine_server.operations.itemsets import top_k_itemsets

mpl.use("Agg")

#: pyfim (the ``bench`` extra), or None: only ``--smoke`` runs without it.
fim = import_pyfim()
PYFIM_MISSING = "pyfim not installed (pip install -e '.[bench]')"

Method = Literal["em", "laplace"]
#: An itemset as sorted integer item ids (the FIMI tokens).
Itemset = tuple[int, ...]
Ranked = list[tuple[Itemset, int]]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
T = TypeVar("T")

SHARED_DATA = Path("/work/shared/data")
METHODS: tuple[Method, ...] = ("em", "laplace")
RHO = 0.1
COUNT_SHARE = 0.5
EPS_HALF_GRID = (0.04, 0.1, 0.3, 0.7, 2.0)
K_GRID = (10, 50, 100)
LENGTH_GRID = (2, 3, 4)
SPEED_KS = (10, 100)
SPEED_LENGTH = 3
#: Ratio DP / non-private above which the kernel is profiled.
RATIO_TARGET = 2.0
#: ε of the count.noisy calls that measure the fixed cost of one served operation.
FLOOR_EPSILON = 0.01
GRANT_EPSILON = 1e5
DATASET_CAP = 1e6
SEED = 20101201
PYFIM_MINERS = ("eclat", "fpgrowth")


@dataclass(frozen=True)
class FimiDataset:
    """One FIMI file of shared/data (README §1)."""

    name: str
    dataset_id: str
    path: Path


DATASETS = (
    FimiDataset("mushroom", "fimi-mushroom", SHARED_DATA / "fimi_mushroom" / "mushroom.dat"),
    FimiDataset("chess", "fimi-chess", SHARED_DATA / "fimi_chess" / "chess.dat"),
    FimiDataset("retail", "fimi-retail", SHARED_DATA / "fimi_retail" / "retail.dat.gz"),
    FimiDataset(
        "T10I4D100K",
        "fimi-t10i4d100k",
        SHARED_DATA / "fimi_T10I4D100K" / "T10I4D100K.dat.gz",
    ),
)
#: ``--smoke``: one row in this many of the bundled Mushroom table (254 transactions).
SMOKE_EVERY = 32


def smoke_dataset(out: Path) -> FimiDataset:
    """The smoke mode's dataset: the bundled Mushroom table as FIMI transactions (one item per
    attribute=value), written under ``out`` (no shared data needed)."""
    path = out / "smoke-data" / "mushroom.dat"
    write_bundled_fimi(path, every=SMOKE_EVERY)
    return FimiDataset("mushroom-bundled", "fimi-mushroom-bundled", path)


#: mlxtend needs a dense one-hot matrix: retail's is 88,162 x 16,470 (BASELINES §2: 2.9 GiB).
MLXTEND_SKIP = {"retail": "dense one-hot matrix of 1.45 GB (BASELINES §2)"}


@dataclass(frozen=True)
class Setting:
    """One parameter point: ε/2 (= ε_s = ε_p), K and ℓ."""

    eps_half: float
    k: int
    length: int

    @property
    def epsilon(self) -> float:
        """The total ε of one call (selection + counts, split ½/½)."""
        return 2 * self.eps_half


DEFAULT = Setting(eps_half=0.7, k=10, length=3)


def sweep_settings() -> list[Setting]:
    """The defaults and the three one-parameter sweeps around them (duplicates removed)."""
    settings = [Setting(e, DEFAULT.k, DEFAULT.length) for e in EPS_HALF_GRID]
    settings += [Setting(DEFAULT.eps_half, k, DEFAULT.length) for k in K_GRID]
    settings += [Setting(DEFAULT.eps_half, DEFAULT.k, length) for length in LENGTH_GRID]
    return list(dict.fromkeys(settings))


@dataclass(frozen=True)
class Config:
    """What one run measures."""

    quick: bool
    out: Path
    datasets: tuple[FimiDataset, ...]
    runs: int
    warm_calls: int
    mlxtend_repeats: int
    mlxtend_max_seconds: float
    profile_calls: int
    seed: int
    skip_utility: bool
    skip_speed: bool
    wait_quiet: float
    #: ``--smoke``: the bundled Mushroom table as FIMI, padding off (the test suite's check).
    smoke: bool = False
    #: ``--zcdp DELTA``: the zCDP column at (ε, δ) (None: not run).
    zcdp_delta: float | None = None


# -- the data, seen by the harness (non-private) ------------------------------------------------


@dataclass
class TrueData:
    """The harness's own parse of a FIMI file: transactions and per-item row lists."""

    spec: FimiDataset
    transactions: list[list[int]]
    rows_of: dict[int, IntArray]
    _counts: dict[Itemset, int] = field(default_factory=dict)

    @property
    def n_rows(self) -> int:
        """Number of transactions."""
        return len(self.transactions)

    @property
    def n_items(self) -> int:
        """Number of distinct items."""
        return len(self.rows_of)

    def count(self, itemset: Itemset) -> int:
        """Exact number of transactions holding every item of ``itemset``."""
        cached = self._counts.get(itemset)
        if cached is not None:
            return cached
        rows: IntArray | None = None
        for item in itemset:
            item_rows = self.rows_of.get(item)
            if item_rows is None:
                rows = np.zeros(0, dtype=np.int64)
                break
            rows = item_rows if rows is None else np.intersect1d(rows, item_rows, True)
        value = 0 if rows is None else int(rows.size)
        self._counts[itemset] = value
        return value


def read_transactions(path: Path) -> list[list[int]]:
    """FIMI lines as sorted lists of distinct integer items (a final newline adds no line)."""
    if path.suffix == ".gz":
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            text = handle.read()
    else:
        text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [sorted({int(token) for token in line.split()}) for line in lines]


def rows_by_item(transactions: list[list[int]]) -> dict[int, IntArray]:
    """Sorted row indices of every item."""
    lengths = np.fromiter(map(len, transactions), dtype=np.int64, count=len(transactions))
    items = np.fromiter(
        itertools.chain.from_iterable(transactions), dtype=np.int64, count=int(lengths.sum())
    )
    rows = np.repeat(np.arange(len(transactions), dtype=np.int64), lengths)
    order = np.argsort(items, kind="stable")  # stable: rows stay sorted within an item
    items_sorted, rows_sorted = items[order], rows[order]
    unique, starts = np.unique(items_sorted, return_index=True)
    parts = np.split(rows_sorted, starts[1:])
    return {int(item): part for item, part in zip(unique, parts, strict=True)}


def load_true_data(spec: FimiDataset) -> TrueData:
    """Parse ``spec`` for the harness."""
    transactions = read_transactions(spec.path)
    return TrueData(spec=spec, transactions=transactions, rows_of=rows_by_item(transactions))


# -- non-private top K ---------------------------------------------------------------------------


def rank(itemsets: Sequence[tuple[Itemset, int]], k: int) -> Ranked:
    """The first ``k`` in (count desc, lexicographic by item id) order (§4.4 [REC])."""
    return sorted(itemsets, key=lambda entry: (-entry[1], entry[0]))[:k]


def pyfim_search(
    transactions: list[list[int]], *, k: int, length: int, miner: str
) -> tuple[Ranked, list[int]]:
    """Exact top K of length ``length`` with pyfim: find the K-th count by mining at halving
    absolute thresholds, starting at the largest single-item count, then rank. Also returns
    the thresholds mined at (one pyfim pass each, plus one for the single-item counts)."""
    if fim is None:
        raise RuntimeError(PYFIM_MISSING)
    mine = getattr(fim, miner)
    singles = mine(transactions, target="s", supp=-1, zmin=1, zmax=1, report="a")
    threshold = max((int(count) for _, count in singles), default=0)
    tried: list[int] = []
    found: list[tuple[Any, int]] = []
    while threshold > 0:
        tried.append(threshold)
        found = mine(
            transactions, target="s", supp=-threshold, zmin=length, zmax=length, report="a"
        )
        if len(found) >= k or threshold == 1:
            break
        threshold = max(threshold // 2, 1)
    return rank([(tuple(sorted(int(i) for i in s)), int(c)) for s, c in found], k), tried


def pyfim_top_k(transactions: list[list[int]], *, k: int, length: int, miner: str) -> Ranked:
    """The ranking of :func:`pyfim_search` (the timed non-private baseline)."""
    return pyfim_search(transactions, k=k, length=length, miner=miner)[0]


def counted_top_k(transactions: list[list[int]], *, k: int, length: int) -> Ranked:
    """Exact top K of length ``length`` by counting every transaction's ``length``-subsets:
    the truth without pyfim, for the smoke mode's small table only (C(|t|, ℓ) per row)."""
    counts = collections.Counter(
        itertools.chain.from_iterable(itertools.combinations(t, length) for t in transactions)
    )
    return rank(list(counts.items()), k)


@dataclass(frozen=True)
class OneHot:
    """The dense one-hot matrix mlxtend needs (built once, not timed)."""

    frame: pd.DataFrame
    column_sums: IntArray
    items: tuple[int, ...]


def one_hot(data: TrueData) -> OneHot:
    """Transactions x items as a Boolean DataFrame (columns in item-id order)."""
    items = tuple(sorted(data.rows_of))
    dense = np.zeros((data.n_rows, len(items)), dtype=np.bool_)
    for column, item in enumerate(items):
        dense[data.rows_of[item], column] = True
    frame = pd.DataFrame(dense, columns=[str(item) for item in items])
    return OneHot(frame=frame, column_sums=dense.sum(axis=0).astype(np.int64), items=items)


def mlxtend_top_k(matrix: OneHot, *, k: int, length: int, fpgrowth: Callable[..., Any]) -> Ranked:
    """Like :func:`pyfim_top_k` with mlxtend's fpgrowth (sizes 1..ℓ mined, ℓ kept)."""
    n_rows = len(matrix.frame)
    threshold = int(matrix.column_sums.max())
    while True:
        result = fpgrowth(
            matrix.frame, min_support=threshold / n_rows, use_colnames=False, max_len=length
        )
        found = [
            (tuple(sorted(matrix.items[int(i)] for i in itemset)), round(float(support) * n_rows))
            for itemset, support in zip(result["itemsets"], result["support"], strict=True)
            if len(itemset) == length
        ]
        if len(found) >= k or threshold == 1:
            break
        threshold = max(threshold // 2, 1)
    return rank(found, k)


def import_mlxtend_fpgrowth() -> tuple[Callable[..., Any] | None, str | None]:
    """mlxtend's fpgrowth and version, or (None, None) when it is not installed."""
    try:
        module = importlib.import_module("mlxtend.frequent_patterns")
    except ImportError:
        return None, None
    try:
        version: str | None = importlib.metadata.version("mlxtend")
    except importlib.metadata.PackageNotFoundError:
        version = None
    fpgrowth: Callable[..., Any] = module.fpgrowth
    return fpgrowth, version


# -- the private side: the server's kernel in-process --------------------------------------------


@dataclass(frozen=True)
class ServerSide:
    """A ``TransactionIndex`` over the server loader's store; ``item_ids[position]`` = item id."""

    index: TransactionIndex
    item_ids: tuple[int, ...]


def fimi_metadata_source(spec: FimiDataset) -> tuple[Any, FimiSource]:
    """The metadata an owner would confirm (items = the distinct tokens, by integer id)."""
    source = FimiSource(path=spec.path.name)
    metadata = propose_metadata(source, kind="transactions", base_dir=spec.path.parent)
    return owner_confirmed(metadata), source


def load_server_side(spec: FimiDataset) -> ServerSide:
    """Load ``spec`` with the server's loader and build (and warm) its transaction index."""
    metadata, source = fimi_metadata_source(spec)
    store, _report = load_store(metadata, source, base_dir=spec.path.parent)
    index = TransactionIndex(store, item_catalog(metadata))
    index.rows()
    return ServerSide(index=index, item_ids=tuple(int(name) for name in index.catalog.names))


def run_kernel(
    side: ServerSide, method: Method, setting: Setting, rng: np.random.Generator
) -> list[tuple[Itemset, int | None]]:
    """One private top-K call (ε_s = ε_p = ε/2, as the server splits ε with count_share ½)."""
    released = top_k_itemsets(
        side.index,
        method=method,
        k=setting.k,
        lengths=[setting.length],
        epsilon_selection=setting.eps_half,
        epsilon_counts=setting.eps_half,
        rho=RHO,
        rng=rng,
    )
    return [
        (tuple(sorted(side.item_ids[position] for position in itemset)), count)
        for itemset, count in released
    ]


def run_kernel_secure(
    side: ServerSide, method: Method, setting: Setting
) -> list[tuple[Itemset, int | None]]:
    """:func:`run_kernel` with a fresh secure generator, as the server does per request."""
    return run_kernel(side, method, setting, secure_generator())


def timed_results(
    call: Callable[[], T], *, repeats: int, warmup: int = 0
) -> tuple[list[float], list[T]]:
    """Seconds of each of ``repeats`` calls (after ``warmup`` unmeasured ones) and the results."""
    for _ in range(warmup):
        call()
    samples: list[float] = []
    results: list[T] = []
    for _ in range(repeats):
        start = time.perf_counter()
        results.append(call())
        samples.append(time.perf_counter() - start)
    return samples, results


# -- part 1: utility -----------------------------------------------------------------------------


@dataclass(frozen=True)
class UtilityCell:
    """FNR and count error of one (dataset, method, setting) over ``runs`` runs."""

    dataset: str
    method: str
    eps_half: float
    k: int
    length: int
    runs: int
    fnr_mean: float
    fnr_sd: float
    fnr_runs: list[float]
    rel_error_mean: float | None
    rel_error_median: float | None
    abs_error_mean: float
    zero_count_share: float
    kernel_median_s: float
    #: Picks that the client's default output shows (count floor ≥ 1 row, α = 0.01, all K
    #: together; ``TopKItemsets.itemsets_``), as a share of all picks.
    confirmed_share: float = math.nan
    #: Shown picks whose true count is 0 (the test allows this in ≤ 1 % of the runs).
    confirmed_zero: int = 0


def false_negative_rate(truth: Ranked, output: Sequence[Itemset], k: int) -> float:
    """|TopK_true \\ Output| / K (§4.4)."""
    return len({itemset for itemset, _ in truth} - set(output)) / k


def utility_cell(
    data: TrueData,
    side: ServerSide,
    truth: Ranked,
    method: Method,
    setting: Setting,
    *,
    runs: int,
    seed: int,
) -> UtilityCell:
    """``runs`` kernel calls with seeded selection generators; FNR and count errors."""
    fnrs: list[float] = []
    rel_errors: list[float] = []
    abs_errors: list[float] = []
    zero = 0
    confirmed = confirmed_zero = 0
    # the server's count scale K/ε_p; the miner's floor at the defaults (min_count 1, α 0.01)
    margin = confirmation_margin(setting.k, scale=setting.k / setting.eps_half)
    seconds: list[float] = []
    for run in range(runs):
        rng = seeded_generator(seed + run)
        start = time.perf_counter()
        released = run_kernel(side, method, setting, rng)
        seconds.append(time.perf_counter() - start)
        fnrs.append(false_negative_rate(truth, [itemset for itemset, _ in released], setting.k))
        for itemset, noisy in released:
            true_count = data.count(itemset)
            if noisy is None:
                continue
            abs_errors.append(abs(noisy - true_count))
            if noisy - margin >= 1:
                confirmed += 1
                confirmed_zero += true_count == 0
            if true_count > 0:
                rel_errors.append(abs(noisy - true_count) / true_count)
            else:
                zero += 1
    released_total = runs * setting.k
    return UtilityCell(
        dataset=data.spec.name,
        method=method,
        eps_half=setting.eps_half,
        k=setting.k,
        length=setting.length,
        runs=runs,
        fnr_mean=float(np.mean(fnrs)),
        fnr_sd=float(np.std(fnrs, ddof=1)) if runs > 1 else 0.0,
        fnr_runs=fnrs,
        rel_error_mean=float(np.mean(rel_errors)) if rel_errors else None,
        rel_error_median=median(rel_errors) if rel_errors else None,
        abs_error_mean=float(np.mean(abs_errors)) if abs_errors else math.nan,
        zero_count_share=zero / released_total,
        kernel_median_s=median(seconds),
        confirmed_share=confirmed / released_total,
        confirmed_zero=confirmed_zero,
    )


def run_utility(
    data: TrueData, side: ServerSide, config: Config, truths: dict[tuple[int, int], Ranked]
) -> list[UtilityCell]:
    """Every sweep setting and method on one dataset."""
    cells: list[UtilityCell] = []
    for number, setting in enumerate(sweep_settings()):
        truth = truths[(setting.k, setting.length)]
        for method_number, method in enumerate(METHODS):
            seed = config.seed + 1000 * (100 * number + method_number)
            cell = utility_cell(data, side, truth, method, setting, runs=config.runs, seed=seed)
            rel = "   n/a" if cell.rel_error_median is None else f"{cell.rel_error_median:6.2%}"
            print(
                f"  {data.spec.name:10} {method:7} ε/2={setting.eps_half:<4} K={setting.k:<3} "
                f"ℓ={setting.length}  FNR {cell.fnr_mean:5.3f} ± {cell.fnr_sd:5.3f}  "
                f"median rel.err {rel}  zero-count picks {cell.zero_count_share:5.1%}  "
                f"shown {cell.confirmed_share:5.1%} ({cell.confirmed_zero} of count 0)  "
                f"kernel {cell.kernel_median_s * 1e3:7.1f} ms",
                flush=True,
            )
            cells.append(cell)
    return cells


# -- zCDP column (issue #24) -----------------------------------------------------------------------

#: The ε of the zCDP column, each as pure ε and as zCDP at (ε, δ); K and ℓ are the defaults'.
ZCDP_EPSILONS = (1.0, 0.5)
#: Issue #24's target on chess at K = 10, ε = 1: the zCDP FNR at most this share of pure ε's.
ZCDP_FNR_SHARE = 0.5


@dataclass(frozen=True)
class ZcdpCell:
    """The selection FNR of one (dataset, method, ε) at pure ε (ε_s = ε/2, the default split)
    and on a zCDP dataset at the ρ of (ε, δ) (ε_s as ``TopKItemsets(rho=ρ)`` sends it)."""

    dataset: str
    method: str
    k: int
    length: int
    epsilon: float
    delta: float
    rho: float
    pure_selection: float
    zcdp_selection: float
    runs: int
    pure_fnr_runs: list[float]
    zcdp_fnr_runs: list[float]

    @property
    def pure_fnr(self) -> float:
        """Mean FNR at pure ε."""
        return float(np.mean(self.pure_fnr_runs))

    @property
    def zcdp_fnr(self) -> float:
        """Mean FNR at zCDP (ε, δ)."""
        return float(np.mean(self.zcdp_fnr_runs))


def zcdp_rho(epsilon: float, delta: float) -> float:
    """The ρ of (ε, δ): the largest ρ whose ρ + 2√(ρ ln 1/δ) ≤ ε (the server's own rounding)."""
    return float(rho_cap_for(repr(epsilon), Decimal(repr(delta))).as_decimal())


def zcdp_selection(method: Method, k: int, rho: float) -> float:
    """ε_s of the request ``TopKItemsets(k=k, method=method, rho=rho)`` sends on a zCDP
    dataset (counts at the default share)."""
    epsilon, share = TopKItemsets(k=k, method=method, rho=rho).request_epsilon(ZCDP)
    return epsilon * (1 - share)


def selection_fnrs(
    side: ServerSide,
    truth: Ranked,
    method: Method,
    epsilon_selection: float,
    *,
    runs: int,
    seed: int,
) -> list[float]:
    """The FNR of ``runs`` selections at ε_s, K and ℓ the defaults' (seeded generators; no
    counts)."""
    k = DEFAULT.k
    fnrs = []
    for run in range(runs):
        released = top_k_itemsets(
            side.index,
            method=method,
            k=k,
            lengths=[DEFAULT.length],
            epsilon_selection=epsilon_selection,
            epsilon_counts=None,
            rho=RHO,
            rng=seeded_generator(seed + run),
        )
        found = [tuple(sorted(side.item_ids[i] for i in itemset)) for itemset, _ in released]
        fnrs.append(false_negative_rate(truth, found, k))
    return fnrs


def run_zcdp(
    name: str, side: ServerSide, truth: Ranked, config: Config, delta: float
) -> list[ZcdpCell]:
    """The zCDP column of one dataset at K = 10, ℓ = 3 (the same seeds for both units)."""
    cells = []
    for number, (epsilon, method) in enumerate(itertools.product(ZCDP_EPSILONS, METHODS)):
        seed = config.seed + 7_000_000 + 1000 * number
        rho = zcdp_rho(epsilon, delta)
        pure, zcdp = epsilon / 2, zcdp_selection(method, DEFAULT.k, rho)
        cell = ZcdpCell(
            dataset=name,
            method=method,
            k=DEFAULT.k,
            length=DEFAULT.length,
            epsilon=epsilon,
            delta=delta,
            rho=rho,
            pure_selection=pure,
            zcdp_selection=zcdp,
            runs=config.runs,
            pure_fnr_runs=selection_fnrs(side, truth, method, pure, runs=config.runs, seed=seed),
            zcdp_fnr_runs=selection_fnrs(side, truth, method, zcdp, runs=config.runs, seed=seed),
        )
        print(
            f"  {name:10} {method:7} ε={epsilon:<4} pure ε_s={pure:.3f} FNR {cell.pure_fnr:5.3f}"
            f"  zCDP ρ={rho:.5g} ε_s={zcdp:.3f} FNR {cell.zcdp_fnr:5.3f}",
            flush=True,
        )
        cells.append(cell)
    return cells


def zcdp_lines(cells: Sequence[ZcdpCell]) -> list[str]:
    """The zCDP column as Markdown, with the target on chess at ε = 1."""
    if not cells:
        return []
    delta = cells[0].delta
    lines = [
        f"**zCDP datasets (issue #24).** FNR at K = {DEFAULT.k}, ℓ = {DEFAULT.length}, mean over "
        f"{cells[0].runs} runs: pure ε (ε_s = ε/2, in ε) beside zCDP at (ε, δ = {delta:g}) (the "
        "budget in ρ; ε_s as `TopKItemsets(rho=ρ)` sends it: half of ρ to the counts, the "
        "selection's K peeled draws at ε_s²/(8K) for em, ε_s²/2 for laplace). Target on chess at "
        f"ε = 1: zCDP FNR ≤ {ZCDP_FNR_SHARE:g} × pure.",
        "",
        "| dataset | method | pure budget | ε_s | FNR | zCDP budget | ε_s | FNR | target |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in cells:
        target = "–"
        if c.dataset == "chess" and c.epsilon == 1.0:
            target = "PASS" if c.zcdp_fnr <= ZCDP_FNR_SHARE * c.pure_fnr else "MISS"
        lines.append(
            f"| {c.dataset} | {c.method} | ε={c.epsilon:g} | {c.pure_selection:.3f} | "
            f"{c.pure_fnr:.2f} | ρ={c.rho:.5g} (ε={c.epsilon:g}, δ={c.delta:g}) | "
            f"{c.zcdp_selection:.3f} | {c.zcdp_fnr:.2f} | {target} |"
        )
    return lines


def exact_top_k(transactions: list[list[int]], *, k: int, length: int) -> Ranked:
    """The true top K: pyfim Eclat, or without pyfim (``--smoke``) :func:`counted_top_k`."""
    if fim is None:
        return counted_top_k(transactions, k=k, length=length)
    return pyfim_top_k(transactions, k=k, length=length, miner="eclat")


def true_top_ks(data: TrueData, *, with_speed: bool) -> dict[tuple[int, int], Ranked]:
    """Exact top K (pyfim Eclat on the harness's transactions) for every (K, ℓ) needed."""
    needed = {(s.k, s.length) for s in sweep_settings()}
    if with_speed:
        needed |= {(k, SPEED_LENGTH) for k in SPEED_KS}
    if fim is None:  # --smoke without the bench extra
        return {
            (k, length): counted_top_k(data.transactions, k=k, length=length)
            for k, length in sorted(needed)
        }
    return {
        (k, length): pyfim_top_k(data.transactions, k=k, length=length, miner="eclat")
        for k, length in sorted(needed)
    }


# -- part 2: speed (served calls, kernel and non-private miners, interleaved) --------------------


@dataclass(frozen=True)
class BaselineTiming:
    """One non-private top-K miner on one (dataset, K, ℓ)."""

    dataset: str
    miner: str
    k: int
    length: int
    repeats: int
    median_s: float | None
    min_s: float | None
    matches_truth: bool | None
    note: str = ""


@dataclass(frozen=True)
class SpeedCell:
    """One (dataset, method, K): the served call, ``mine()`` and the kernel in-process."""

    dataset: str
    method: str
    k: int
    length: int
    http_samples_s: list[float]
    http_median_s: float
    http_min_s: float
    mine_median_s: float
    kernel_samples_s: list[float]
    kernel_median_s: float
    kernel_min_s: float
    fnr_served: float


@dataclass(frozen=True)
class DatasetSpeed:
    """The speed figures of one dataset."""

    dataset: str
    cold_first_call_s: float
    count_noisy_median_s: float
    cells: list[SpeedCell]
    baselines: list[BaselineTiming]
    thresholds: dict[int, list[int]]


def top_k_request(setting: Setting) -> TopKItemsetsRequest:
    """The wire request of one DP top-K call (ε split ½/½)."""
    return TopKItemsetsRequest(
        k=setting.k,
        min_length=setting.length,
        epsilon=setting.epsilon,
        rho=RHO,
        with_counts=True,
        count_share=COUNT_SHARE,
    )


def served_itemsets(response: TopKItemsetsResponse) -> list[Itemset]:
    """The released itemsets as sorted integer ids."""
    return [tuple(sorted(int(name) for name in entry.items)) for entry in response.itemsets]


def timed(call: Callable[[], T]) -> tuple[float, T]:
    """Wall seconds of one call and its result."""
    start = time.perf_counter()
    result = call()
    return time.perf_counter() - start, result


def same_top_k(found: Ranked, truth: Ranked) -> bool:
    """Whether two rankings hold the same itemsets with the same counts."""
    return sorted(found) == sorted(truth)


@dataclass
class _Samples:
    """Timings collected over the interleaved rounds, keyed by (what, method or miner, K)."""

    seconds: dict[tuple[str, str, int], list[float]] = field(default_factory=dict)
    fnrs: dict[tuple[str, int], list[float]] = field(default_factory=dict)
    exact: dict[tuple[str, int], bool] = field(default_factory=dict)

    def add(self, key: tuple[str, str, int], seconds: float) -> None:
        self.seconds.setdefault(key, []).append(seconds)


class _SpeedRun:
    """The calls of one dataset: served (connection.call, mine()), kernel, pyfim."""

    def __init__(
        self,
        connection: Any,
        spec: FimiDataset,
        side: ServerSide,
        data: TrueData,
        truths: dict[tuple[int, int], Ranked],
    ) -> None:
        self.connection = connection
        self.handle = connection.dataset(spec.dataset_id)
        self.spec = spec
        self.side = side
        self.data = data
        self.truths = truths
        self.samples = _Samples()

    def call(self, method: Method, setting: Setting) -> TopKItemsetsResponse:
        """One DP top-K call over HTTP (one request)."""
        path = f"/v1/datasets/{self.spec.dataset_id}/itemsets/top-k-{method}"
        response: TopKItemsetsResponse = self.connection.call(
            path, top_k_request(setting), TopKItemsetsResponse
        )
        return response

    def round(self, k: int) -> None:
        """One interleaved round for K: per method the served call, mine() and the kernel;
        then every pyfim miner."""
        setting = Setting(DEFAULT.eps_half, k, SPEED_LENGTH)
        truth = self.truths[(k, SPEED_LENGTH)]
        for method in METHODS:
            seconds, response = timed(functools.partial(self.call, method, setting))
            self.samples.add(("http", method, k), seconds)
            fnr = false_negative_rate(truth, served_itemsets(response), k)
            self.samples.fnrs.setdefault((method, k), []).append(fnr)
            miner = TopKItemsets(
                k=k,
                length=SPEED_LENGTH,
                epsilon=setting.epsilon,
                method=method,
                threshold_quantile=RHO,
            )
            self.samples.add(
                ("mine", method, k), timed(functools.partial(miner.mine, self.handle))[0]
            )
            kernel = functools.partial(run_kernel_secure, self.side, method, setting)
            self.samples.add(("kernel", method, k), timed(kernel)[0])
        for name in PYFIM_MINERS if fim is not None else ():
            mine = functools.partial(
                pyfim_top_k, self.data.transactions, k=k, length=SPEED_LENGTH, miner=name
            )
            seconds, found = timed(mine)
            self.samples.add(("baseline", f"pyfim.{name}", k), seconds)
            key = (f"pyfim.{name}", k)
            self.samples.exact[key] = self.samples.exact.get(key, True) and same_top_k(found, truth)

    def cell(self, method: Method, k: int) -> SpeedCell:
        """The figures of one (method, K)."""
        http = self.samples.seconds[("http", method, k)]
        kernel = self.samples.seconds[("kernel", method, k)]
        return SpeedCell(
            dataset=self.spec.name,
            method=method,
            k=k,
            length=SPEED_LENGTH,
            http_samples_s=http,
            http_median_s=median(http),
            http_min_s=min(http),
            mine_median_s=median(self.samples.seconds[("mine", method, k)]),
            kernel_samples_s=kernel,
            kernel_median_s=median(kernel),
            kernel_min_s=min(kernel),
            fnr_served=float(np.mean(self.samples.fnrs[(method, k)])),
        )

    def baseline(self, miner: str, k: int) -> BaselineTiming:
        """The figures of one pyfim miner at K (a skipped one without pyfim)."""
        if fim is None:
            note = PYFIM_MISSING
            return BaselineTiming(self.spec.name, miner, k, SPEED_LENGTH, 0, None, None, None, note)
        seconds = self.samples.seconds[("baseline", miner, k)]
        return BaselineTiming(
            dataset=self.spec.name,
            miner=miner,
            k=k,
            length=SPEED_LENGTH,
            repeats=len(seconds),
            median_s=median(seconds),
            min_s=min(seconds),
            matches_truth=self.samples.exact[(miner, k)],
        )


def time_dataset(
    server: ServerHandle,
    key: str,
    *,
    spec: FimiDataset,
    side: ServerSide,
    data: TrueData,
    truths: dict[tuple[int, int], Ranked],
    config: Config,
) -> DatasetSpeed:
    """Cold first served call, then ``warm_calls`` interleaved rounds per K (so that changes of
    the machine's load hit the private and the non-private timings alike)."""
    with server.connect(key, timeout=600.0) as connection:
        run = _SpeedRun(connection, spec, side, data, truths)
        cold, _ = timed(
            functools.partial(run.call, "em", Setting(DEFAULT.eps_half, SPEED_KS[0], SPEED_LENGTH))
        )
        thresholds: dict[int, list[int]] = {}
        for k in SPEED_KS:  # unmeasured warm-up of the in-process paths
            for name in PYFIM_MINERS if fim is not None else ():
                _, thresholds[k] = pyfim_search(
                    data.transactions, k=k, length=SPEED_LENGTH, miner=name
                )
            run_kernel_secure(side, "em", Setting(DEFAULT.eps_half, k, SPEED_LENGTH))
        for _ in range(config.warm_calls):
            for k in SPEED_KS:
                run.round(k)
        floor = time_calls(
            functools.partial(run.handle.count, None, epsilon=FLOOR_EPSILON),
            repeats=config.warm_calls,
            warmup=1,
        )
    cells = [run.cell(method, k) for k in SPEED_KS for method in METHODS]
    baselines = [run.baseline(f"pyfim.{name}", k) for k in SPEED_KS for name in PYFIM_MINERS]
    for cell in cells:
        print(
            f"  {spec.name:10} {cell.method:7} K={cell.k:<3} HTTP {cell.http_median_s * 1e3:8.1f}"
            f" ms  mine() {cell.mine_median_s * 1e3:8.1f} ms  kernel "
            f"{cell.kernel_median_s * 1e3:8.1f} ms",
            flush=True,
        )
    for baseline in baselines:
        figure = (
            baseline.note if baseline.median_s is None else f"{baseline.median_s * 1e3:8.1f} ms"
        )
        print(f"  {spec.name:10} {baseline.miner:15} K={baseline.k:<3} {figure}", flush=True)
    print(
        f"  {spec.name:10} cold first call {cold:6.2f} s; count.noisy median "
        f"{median(floor) * 1e3:.1f} ms",
        flush=True,
    )
    return DatasetSpeed(
        dataset=spec.name,
        cold_first_call_s=cold,
        count_noisy_median_s=median(floor),
        cells=cells,
        baselines=baselines,
        thresholds=thresholds,
    )


def grant_analyst(server: ServerHandle, name: str, dataset_ids: Sequence[str]) -> str:
    """Create analyst ``name`` with a grant on every dataset; returns its key."""
    with server.connect() as owner:
        created = owner.admin.add_principal(name, "analyst")
        for dataset_id in dataset_ids:
            owner.admin.grant(dataset_id, name, GRANT_EPSILON)
    return created.api_key


def run_served(
    datas: dict[str, TrueData],
    sides: dict[str, ServerSide],
    truths: dict[str, dict[tuple[int, int], Ranked]],
    config: Config,
) -> list[DatasetSpeed]:
    """Start a server (SQLite ledger), register the datasets, time everything, stop it."""
    results: list[DatasetSpeed] = []
    specs = [datas[name].spec for name in datas]
    with (
        tempfile.TemporaryDirectory(prefix="dpmine-bench-itemsets-") as scratch,
        server_for_backend(
            "sqlite",
            Path(scratch),
            extra_env={"DPMINE_TIMING_PADDING": "false"} if config.smoke else None,
        ) as server,
    ):
        try:
            with server.connect(timeout=600.0) as owner:
                for spec in specs:
                    metadata, source = fimi_metadata_source(spec)
                    register_files(
                        owner,
                        dataset_id=spec.dataset_id,
                        name=f"FIMI {spec.name}",
                        metadata=metadata,
                        source=source,
                        files={"path": spec.path},
                        epsilon_cap=DATASET_CAP,
                    )
            key = grant_analyst(server, "itemsets-analyst", [spec.dataset_id for spec in specs])
            for spec in specs:
                results.append(
                    time_dataset(
                        server,
                        key,
                        spec=spec,
                        side=sides[spec.name],
                        data=datas[spec.name],
                        truths=truths[spec.name],
                        config=config,
                    )
                )
        except BaseException:
            print(f"server log tail:\n{server.log_tail()}", file=sys.stderr)
            raise
    return results


def time_mlxtend(
    data: TrueData,
    truths: dict[tuple[int, int], Ranked],
    config: Config,
    fpgrowth: Callable[..., Any] | None,
) -> list[BaselineTiming]:
    """mlxtend's fpgrowth; no more runs once one exceeds ``mlxtend_max_seconds``."""
    name = data.spec.name

    def skipped(note: str) -> list[BaselineTiming]:
        return [
            BaselineTiming(name, "mlxtend.fpgrowth", k, SPEED_LENGTH, 0, None, None, None, note)
            for k in SPEED_KS
        ]

    if fpgrowth is None:
        return skipped("mlxtend not installed")
    if name in MLXTEND_SKIP:
        return skipped(MLXTEND_SKIP[name])
    if config.mlxtend_repeats == 0:
        return skipped("not run (--quick)")
    matrix = one_hot(data)
    timings: list[BaselineTiming] = []
    for k in SPEED_KS:
        samples: list[float] = []
        found: list[Ranked] = []
        for _ in range(config.mlxtend_repeats):
            seconds, ranked = timed(
                functools.partial(
                    mlxtend_top_k, matrix, k=k, length=SPEED_LENGTH, fpgrowth=fpgrowth
                )
            )
            samples.append(seconds)
            found.append(ranked)
            if seconds > config.mlxtend_max_seconds:
                break
        timings.append(
            BaselineTiming(
                dataset=name,
                miner="mlxtend.fpgrowth",
                k=k,
                length=SPEED_LENGTH,
                repeats=len(samples),
                median_s=median(samples),
                min_s=min(samples),
                matches_truth=all(same_top_k(f, truths[(k, SPEED_LENGTH)]) for f in found),
                note=""
                if len(samples) == config.mlxtend_repeats
                else f"stopped after a run over {config.mlxtend_max_seconds:g} s",
            )
        )
        print(f"  {name:10} mlxtend.fpgrowth K={k:<3} {median(samples):8.2f} s", flush=True)
    return timings


# -- part 2: ratios and the profile ---------------------------------------------------------------


@dataclass(frozen=True)
class SpeedRow:
    """One (dataset, method, K) of the speed table."""

    dataset: str
    method: str
    k: int
    http_median_s: float
    mine_median_s: float
    kernel_median_s: float
    best_miner: str
    best_nonprivate_s: float
    ratio_http: float
    ratio_kernel: float
    fnr_served: float


def speed_rows(speeds: list[DatasetSpeed], extra: list[BaselineTiming]) -> list[SpeedRow]:
    """Ratios of the served call and of the kernel to the fastest non-private miner."""
    rows: list[SpeedRow] = []
    for speed in speeds:
        for cell in speed.cells:
            candidates = [
                b
                for b in speed.baselines + extra
                if (b.dataset, b.k) == (cell.dataset, cell.k) and b.median_s is not None
            ]
            best = min(candidates, key=lambda b: b.median_s or math.inf, default=None)
            best_s = math.nan if best is None else best.median_s or math.nan
            rows.append(
                SpeedRow(
                    dataset=cell.dataset,
                    method=cell.method,
                    k=cell.k,
                    http_median_s=cell.http_median_s,
                    mine_median_s=cell.mine_median_s,
                    kernel_median_s=cell.kernel_median_s,
                    best_miner="none" if best is None else best.miner,
                    best_nonprivate_s=best_s,
                    ratio_http=cell.http_median_s / best_s,
                    ratio_kernel=cell.kernel_median_s / best_s,
                    fnr_served=cell.fnr_served,
                )
            )
    return rows


#: Kernel phases: (label, file suffix, function name) of the profiled functions.
PHASES = (
    ("count spectrum (sparse plan)", "dpmine_server/data/itemsets.py", "spectrum"),
    ("picked members (sparse plan)", "dpmine_server/data/itemsets.py", "select"),
    ("dense counts (dense plan)", "dpmine_server/data/itemsets.py", "dense"),
    ("noisy top-K + tail reveal", "dpmine_server/dp/topk.py", "noisy_top_k_blocks"),
    ("exact counts of tail draws (bitset AND)", "dpmine_server/data/itemsets.py", "count"),
    ("count noise (OpenDP)", "dpmine_server/dp/mechanisms.py", "discrete_laplace"),
)


@dataclass(frozen=True)
class ProfileResult:
    """Where one kernel call's time goes (cProfile cumulative times, per call)."""

    dataset: str
    method: str
    k: int
    calls: int
    kernel_s: float
    phases_s: dict[str, float]
    http_overhead_s: float
    count_noisy_s: float
    text_file: str


def cumulative_times(profile: cProfile.Profile) -> dict[tuple[str, str], float]:
    """Cumulative seconds of every (file, function) in a finished profile."""
    profile.create_stats()
    times: dict[tuple[str, str], float] = {}
    for (filename, _line, function), entry in profile.stats.items():
        times[(filename, function)] = times.get((filename, function), 0.0) + float(entry[3])
    return times


def phase_time(times: dict[tuple[str, str], float], suffix: str, function: str) -> float:
    """Cumulative time of ``function`` defined in a file ending with ``suffix``."""
    return sum(t for (file, name), t in times.items() if name == function and file.endswith(suffix))


def profile_kernel(
    side: ServerSide, row: SpeedRow, speed: DatasetSpeed, config: Config
) -> ProfileResult:
    """cProfile ``profile_calls`` kernel calls of ``row``'s cell; writes the pstats text."""
    setting = Setting(DEFAULT.eps_half, row.k, SPEED_LENGTH)
    method: Method = "em" if row.method == "em" else "laplace"
    run_kernel_secure(side, method, setting)  # warm
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(config.profile_calls):
        run_kernel_secure(side, method, setting)
    profile.disable()
    stream = io.StringIO()
    pstats.Stats(profile, stream=stream).strip_dirs().sort_stats("cumulative").print_stats(25)
    times = cumulative_times(profile)
    calls = config.profile_calls
    kernel = phase_time(times, "dpmine_server/operations/itemsets.py", "top_k_itemsets") / calls
    phases = {label: phase_time(times, suffix, fn) / calls for label, suffix, fn in PHASES}
    config.out.mkdir(parents=True, exist_ok=True)
    path = config.out / f"itemsets_profile_{row.dataset}_{row.method}_k{row.k}.txt"
    path.write_text(stream.getvalue())
    return ProfileResult(
        dataset=row.dataset,
        method=row.method,
        k=row.k,
        calls=calls,
        kernel_s=kernel,
        phases_s=phases,
        http_overhead_s=paired_overhead(speed, row),
        count_noisy_s=speed.count_noisy_median_s,
        text_file=str(path),
    )


def paired_overhead(speed: DatasetSpeed, row: SpeedRow) -> float:
    """Median over the rounds of (served call − kernel in-process) for ``row``'s cell: the
    HTTP, authentication, ledger and serialisation cost of one call."""
    cell = next(c for c in speed.cells if (c.method, c.k) == (row.method, row.k))
    pairs = zip(cell.http_samples_s, cell.kernel_samples_s, strict=True)
    return median([http - kernel for http, kernel in pairs])


def profiles_over_target(
    rows: list[SpeedRow], speeds: list[DatasetSpeed], sides: dict[str, ServerSide], config: Config
) -> list[ProfileResult]:
    """Profile the worst cell of every dataset whose served ratio exceeds the target."""
    results: list[ProfileResult] = []
    for speed in speeds:
        mine = [r for r in rows if r.dataset == speed.dataset]
        worst = max(mine, key=lambda r: r.ratio_http)
        if worst.ratio_http > RATIO_TARGET or config.smoke:  # smoke: profile one cell anyway
            results.append(profile_kernel(sides[speed.dataset], worst, speed, config))
    return results


# -- plots ---------------------------------------------------------------------------------------


def _on_sweep(cell: UtilityCell, vary: str) -> bool:
    """Whether ``cell`` has the default value of every parameter except ``vary``."""
    point = {"eps_half": cell.eps_half, "k": float(cell.k), "length": float(cell.length)}
    default = {"eps_half": DEFAULT.eps_half, "k": float(DEFAULT.k), "length": float(DEFAULT.length)}
    return all(point[name] == default[name] for name in point if name != vary)


def _series(
    cells: list[UtilityCell], dataset: str, method: str, vary: str
) -> tuple[list[float], list[float], list[float]]:
    """(x, mean FNR, standard error) of the sweep that varies ``vary`` around the defaults."""
    chosen = sorted(
        (c for c in cells if c.dataset == dataset and c.method == method and _on_sweep(c, vary)),
        key=lambda c: float(getattr(c, vary)),
    )
    return (
        [float(getattr(c, vary)) for c in chosen],
        [c.fnr_mean for c in chosen],
        [c.fnr_sd / math.sqrt(c.runs) for c in chosen],
    )


def plot_utility(cells: list[UtilityCell], datasets: Sequence[str], out: Path) -> list[Path]:
    """FNR vs ε/2 per dataset (the paper's Figure 5) and FNR vs K and vs ℓ."""
    styles = {"em": ("o-", "EM (Alg. 1)"), "laplace": ("s--", "Laplace (Alg. 2)")}
    paths: list[Path] = []
    figure = Figure(figsize=(4 * len(datasets), 3.4))
    axes = figure.subplots(1, len(datasets), squeeze=False)
    for axis, dataset in zip(axes[0], datasets, strict=True):
        for method, (style, label) in styles.items():
            x, y, err = _series(cells, dataset, method, "eps_half")
            axis.errorbar(x, y, yerr=err, fmt=style, capsize=3, label=label)
        axis.set_xscale("log")
        axis.set_xticks(list(EPS_HALF_GRID), [f"{e:g}" for e in EPS_HALF_GRID])
        axis.set_ylim(-0.03, 1.03)
        axis.set_title(f"{dataset} (K={DEFAULT.k}, ℓ={DEFAULT.length})")
        axis.set_xlabel("ε/2")
        axis.grid(alpha=0.3)
    axes[0][0].set_ylabel("false negative rate")
    axes[0][0].legend()
    figure.tight_layout()
    paths.append(out / "itemsets_fnr_epsilon.png")
    figure.savefig(paths[-1], dpi=120)

    figure = Figure(figsize=(4 * len(datasets), 6.4))
    axes = figure.subplots(2, len(datasets), squeeze=False)
    for column, dataset in enumerate(datasets):
        for row, vary in enumerate(("k", "length")):
            axis = axes[row][column]
            for method, (style, label) in styles.items():
                x, y, err = _series(cells, dataset, method, vary)
                axis.errorbar(x, y, yerr=err, fmt=style, capsize=3, label=label)
            axis.set_ylim(-0.03, 1.03)
            axis.set_xticks(list(K_GRID if vary == "k" else LENGTH_GRID))
            axis.set_xlabel("K" if vary == "k" else "ℓ")
            axis.set_title(f"{dataset} (ε/2={DEFAULT.eps_half})")
            axis.grid(alpha=0.3)
    for row in range(2):
        axes[row][0].set_ylabel("false negative rate")
    axes[0][0].legend()
    figure.tight_layout()
    paths.append(out / "itemsets_fnr_k_length.png")
    figure.savefig(paths[-1], dpi=120)
    return paths


# -- reporting -----------------------------------------------------------------------------------


def _fnr(cells: list[UtilityCell], dataset: str, method: str, setting: Setting) -> str:
    for c in cells:
        if (c.dataset, c.method, c.eps_half, c.k, c.length) == (
            dataset,
            method,
            setting.eps_half,
            setting.k,
            setting.length,
        ):
            return f"{c.fnr_mean:.2f} ± {c.fnr_sd:.2f}"
    return "–"


def _rel(cells: list[UtilityCell], dataset: str, method: str, setting: Setting) -> str:
    for c in cells:
        if (c.dataset, c.method, c.eps_half, c.k, c.length) == (
            dataset,
            method,
            setting.eps_half,
            setting.k,
            setting.length,
        ):
            share = f" ({c.zero_count_share:.0%} zero)" if c.zero_count_share > 0 else ""
            share += f"; {c.confirmed_share:.0%} shown, {c.confirmed_zero} of them zero"
            if c.rel_error_mean is None or c.rel_error_median is None:
                return "n/a" + share
            return f"{c.rel_error_mean:.2%} / {c.rel_error_median:.2%}{share}"
    return "–"


def _ms(seconds: float | None) -> str:
    if seconds is None or math.isnan(seconds):
        return "–"
    return f"{seconds * 1e3:,.1f}"


def dataset_lines(
    datas: dict[str, TrueData], truths: dict[str, dict[tuple[int, int], Ranked]]
) -> list[str]:
    """Dataset sizes and the true f_K (count of the K-th itemset) at ℓ = 3."""
    lines = [
        "| dataset | transactions | distinct items | c_K (K=10, ℓ=3) | c_K (K=100, ℓ=3) |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, data in datas.items():
        c10 = truths[name].get((10, 3), [])
        c100 = truths[name].get((100, 3), [])
        lines.append(
            f"| {name} | {data.n_rows:,} | {data.n_items:,} | "
            f"{c10[-1][1] if c10 else '–'} | {c100[-1][1] if c100 else '–'} |"
        )
    return lines


def utility_lines(cells: list[UtilityCell], datasets: Sequence[str], runs: int) -> list[str]:
    """The utility tables: defaults, ε/2 sweep, K and ℓ sweeps, count errors."""
    eps = [Setting(e, DEFAULT.k, DEFAULT.length) for e in EPS_HALF_GRID]
    ks = [Setting(DEFAULT.eps_half, k, DEFAULT.length) for k in K_GRID]
    lengths = [Setting(DEFAULT.eps_half, DEFAULT.k, ell) for ell in LENGTH_GRID]
    lines = [
        f"**Utility.** FNR = |TopK_true \\ Output| / K, mean ± sd over {runs} runs. TopK_true = "
        "the first K itemsets in (count desc, item ids lexicographic) order, mined by the harness "
        "with pyfim on its own parse of the files (never through the server). The private side "
        "calls the server's kernel `dpmine_server.operations.itemsets.top_k_itemsets` in-process "
        "on a `TransactionIndex` over the `ColumnStore` from `load_store` (the code the server "
        "runs, without HTTP), ε split ½ selection / ½ counts, ρ = 0.1. Defaults ε/2 = 0.7, "
        "K = 10, ℓ = 3.",
        "",
        "FNR against ε/2 (K = 10, ℓ = 3):",
        "",
        "| dataset | method | " + " | ".join(f"ε/2={s.eps_half:g}" for s in eps) + " |",
        "|---|---|" + "---:|" * len(eps),
    ]
    for dataset in datasets:
        for method in METHODS:
            row = " | ".join(_fnr(cells, dataset, method, s) for s in eps)
            lines.append(f"| {dataset} | {method} | {row} |")
    lines += [
        "",
        "FNR against K (ε/2 = 0.7, ℓ = 3) and against ℓ (ε/2 = 0.7, K = 10):",
        "",
        "| dataset | method | "
        + " | ".join(f"K={s.k}" for s in ks)
        + " | "
        + " | ".join(f"ℓ={s.length}" for s in lengths)
        + " |",
        "|---|---|" + "---:|" * (len(ks) + len(lengths)),
    ]
    for dataset in datasets:
        for method in METHODS:
            row = " | ".join(_fnr(cells, dataset, method, s) for s in ks + lengths)
            lines.append(f"| {dataset} | {method} | {row} |")
    lines += [
        "",
        "Relative error |ñ − c| / c of the released noisy counts, mean / median over the "
        "released itemsets of all runs (K = 10, ℓ = 3; itemsets with true count 0 left out, "
        "their share given; the mean is dominated by low-count picks where FNR is high):",
        "",
        "| dataset | method | " + " | ".join(f"ε/2={s.eps_half:g}" for s in eps) + " |",
        "|---|---|" + "---:|" * len(eps),
    ]
    for dataset in datasets:
        for method in METHODS:
            row = " | ".join(_rel(cells, dataset, method, s) for s in eps)
            lines.append(f"| {dataset} | {method} | {row} |")
    return lines


def speed_lines(
    rows: list[SpeedRow],
    speeds: list[DatasetSpeed],
    baselines: list[BaselineTiming],
    config: Config,
) -> list[str]:
    """The speed tables: ratios, non-private miners, cold calls and the fixed per-call cost."""
    lines = [
        f"**Speed** (ℓ = {SPEED_LENGTH}, ε = 1.4, ρ = 0.1; times in ms, medians of "
        f"{config.warm_calls} interleaved rounds). DP over HTTP = one `connection.call` to "
        "`/v1/datasets/{id}/itemsets/top-k-{em,laplace}` on a real uvicorn server (1 process, "
        "SQLite ledger, localhost), after one cold call that loaded the dataset; mine() = "
        "`TopKItemsets(...).mine(handle)` (adds the budget-estimate round trip); kernel = the "
        "same computation in-process. Non-private = exact top K from the in-memory transaction "
        "list: largest single-item count, then mining at halving absolute thresholds until "
        "≥ K itemsets, then ranking (pyfim; mlxtend separately, not interleaved). Each round "
        "times, for each K, the served call, mine() and the kernel for both methods, then the "
        "pyfim miners, so that load changes hit all alike. The fastest non-private miner is the "
        "denominator.",
        "",
        "| dataset | K | method | DP over HTTP | mine() | kernel in-process | fastest non-private "
        "| DP / non-private | kernel / non-private | FNR of the timed calls |",
        "|---|---:|---|---:|---:|---:|---|---:|---:|---:|",
    ]
    lines += [
        f"| {r.dataset} | {r.k} | {r.method} | {_ms(r.http_median_s)} | {_ms(r.mine_median_s)} | "
        f"{_ms(r.kernel_median_s)} | {_ms(r.best_nonprivate_s)} ({r.best_miner}) | "
        f"{r.ratio_http:.1f}x | {r.ratio_kernel:.1f}x | {r.fnr_served:.2f} |"
        for r in rows
    ]
    miners = [f"pyfim.{m}" for m in PYFIM_MINERS] + ["mlxtend.fpgrowth"]
    lines += [
        "",
        "Non-private top-K miners (median ms over n runs; ✓ = same itemsets and counts as the "
        "true top K):",
        "",
        "| dataset | K | thresholds mined at | " + " | ".join(miners) + " |",
        "|---|---:|---|" + "---:|" * len(miners),
    ]
    tried = {(speed.dataset, k): t for speed in speeds for k, t in speed.thresholds.items()}
    keys = dict.fromkeys((b.dataset, b.k) for b in baselines)
    for dataset, k in keys:
        cells = []
        for miner in miners:
            found = [b for b in baselines if (b.dataset, b.k, b.miner) == (dataset, k, miner)]
            if not found or found[0].median_s is None:
                cells.append(f"skipped: {found[0].note}" if found else "–")
                continue
            b = found[0]
            mark = " ✓" if b.matches_truth else " ✗"
            cells.append(f"{_ms(b.median_s)}{mark} (n={b.repeats})")
        steps = ", ".join(str(t) for t in tried.get((dataset, k), []))
        lines.append(f"| {dataset} | {k} | {steps} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "| dataset | cold first DP call (load + index + em K=10), s | count.noisy over HTTP, ms |",
        "|---|---:|---:|",
    ]
    lines += [
        f"| {h.dataset} | {h.cold_first_call_s:.2f} | {_ms(h.count_noisy_median_s)} |"
        for h in speeds
    ]
    return lines


def profile_lines(profiles: list[ProfileResult]) -> list[str]:
    """Where the kernel's time goes (cProfile cumulative, per call) for cells over the target."""
    if not profiles:
        return [f"No cell exceeds {RATIO_TARGET:g}x: no profile."]
    labels = [label for label, _, _ in PHASES]
    lines = [
        f"**Profile** of the worst cell per dataset over {RATIO_TARGET:g}x (cProfile of the "
        "server kernel in-process, per call, ms; phases are cumulative and may nest: exact "
        "counts happen inside the tail reveal and after it). HTTP + ledger = median over the "
        "rounds of (DP over HTTP − kernel in-process), measured back to back; count.noisy = "
        "the served cost of the cheapest operation, for scale.",
        "",
        "| cell | kernel total | " + " | ".join(labels) + " | HTTP + ledger | count.noisy |",
        "|---|---:|" + "---:|" * (len(labels) + 2),
    ]
    for p in profiles:
        phases = " | ".join(_ms(p.phases_s[label]) for label in labels)
        lines.append(
            f"| {p.dataset} {p.method} K={p.k} | {_ms(p.kernel_s)} | {phases} | "
            f"{_ms(p.http_overhead_s)} | {_ms(p.count_noisy_s)} |"
        )
    return lines


def markdown_report(
    *,
    info: dict[str, Any],
    config: Config,
    datas: dict[str, TrueData],
    truths: dict[str, dict[tuple[int, int], Ranked]],
    utility: list[UtilityCell],
    zcdp: list[ZcdpCell],
    rows: list[SpeedRow],
    speeds: list[DatasetSpeed],
    baselines: list[BaselineTiming],
    profiles: list[ProfileResult],
    total_seconds: float,
) -> str:
    """The results as Markdown, ready to paste into a closing note."""
    names = list(datas)
    lines = [
        f"### dpmine top-K frequent itemsets benchmark ({datetime.now(UTC):%Y-%m-%d}, "
        f"commit {info.get('git_commit')}{', --quick' if config.quick else ''})",
        "",
        f"Machine: nproc={info['nproc']} ({info.get('cpu_model')}), "
        f"{info.get('memory_gib')} GiB; Python {info['python']}, numpy {info['numpy']}, "
        f"pyfim {info.get('pyfim')}, mlxtend {info.get('mlxtend') or 'not installed'}, "
        f"uvicorn {info.get('uvicorn')}, SQLite {info['sqlite']}. Client, server and the "
        "in-process timings share the machine; load average (1/5/15 min) "
        f"{info.get('load_average_start')} at start, "
        f"{info.get('load_average_speed_start')} when the timings started, "
        f"{info.get('load_average_end')} at end.",
        "",
        *dataset_lines(datas, truths),
        "",
    ]
    if utility:
        lines += [*utility_lines(utility, names, config.runs), ""]
    if zcdp:
        lines += [*zcdp_lines(zcdp), ""]
    if rows:
        lines += [*speed_lines(rows, speeds, baselines, config), "", *profile_lines(profiles), ""]
    lines.append(f"Total run time: {total_seconds:.0f} s.")
    return "\n".join(lines)


# -- main ----------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> Config:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer runs and repeats")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="seconds-long check that the script runs (the test suite's): the bundled Mushroom "
        "table as FIMI (1 row in 32), 1 run, 1 round, padding off; pyfim skipped if missing",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=REPO_ROOT / "bench" / "out",
        help="folder for itemsets.json, plots and profiles (default: bench/out)",
    )
    parser.add_argument(
        "--datasets",
        default=",".join(spec.name for spec in DATASETS),
        help="comma-separated subset of " + ", ".join(spec.name for spec in DATASETS),
    )
    parser.add_argument("--runs", type=int, default=None, help="utility runs (default 10, quick 2)")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--skip-utility", action="store_true")
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="before each timing stage wait up to SECONDS for the 1-minute load average < 0.5",
    )
    parser.add_argument(
        "--zcdp",
        type=float,
        default=None,
        metavar="DELTA",
        help="add the zCDP column: the FNR at (ε, DELTA), the budget in ρ (issue #24; e.g. 1e-6)",
    )
    args = parser.parse_args(argv)
    if args.smoke:
        return Config(
            quick=True,
            out=args.out,
            datasets=(smoke_dataset(args.out),),
            runs=1,
            warm_calls=1,
            mlxtend_repeats=0,
            mlxtend_max_seconds=20.0,
            profile_calls=1,
            seed=args.seed,
            skip_utility=False,
            skip_speed=False,
            wait_quiet=0.0,
            smoke=True,
        )
    if fim is None:
        parser.error(PYFIM_MISSING)
    by_name = {spec.name: spec for spec in DATASETS}
    chosen: list[FimiDataset] = []
    for name in (part.strip() for part in args.datasets.split(",") if part.strip()):
        if name not in by_name:
            parser.error(f"unknown dataset {name!r}")
        chosen.append(by_name[name])
    runs = args.runs or (2 if args.quick else 10)
    if runs < 1:
        parser.error("--runs must be at least 1")
    return Config(
        quick=args.quick,
        out=args.out,
        datasets=tuple(chosen),
        runs=runs,
        warm_calls=3 if args.quick else 5,
        mlxtend_repeats=0 if args.quick else 3,
        mlxtend_max_seconds=20.0,
        profile_calls=2 if args.quick else 5,
        seed=args.seed,
        skip_utility=args.skip_utility,
        skip_speed=args.skip_speed,
        wait_quiet=args.wait_quiet,
        zcdp_delta=args.zcdp,
    )


@contextlib.contextmanager
def _stage(title: str) -> Iterator[None]:
    start = time.perf_counter()
    print(title, flush=True)
    yield
    print(f"  ({time.perf_counter() - start:.0f} s)", flush=True)


def quiet(config: Config) -> None:
    """Wait (up to ``--wait-quiet`` seconds) for the machine to be idle before timing."""
    wait_if_asked(config.wait_quiet, indent="  ")


def load_all(
    config: Config,
) -> tuple[dict[str, TrueData], dict[str, ServerSide], dict[str, dict[tuple[int, int], Ranked]]]:
    """The harness's parse, the server loader's index and the true top K of every dataset."""
    datas: dict[str, TrueData] = {}
    sides: dict[str, ServerSide] = {}
    truths: dict[str, dict[tuple[int, int], Ranked]] = {}
    for spec in config.datasets:
        datas[spec.name] = load_true_data(spec)
        sides[spec.name] = load_server_side(spec)
        truths[spec.name] = true_top_ks(datas[spec.name], with_speed=not config.skip_speed)
        data = datas[spec.name]
        print(f"  {spec.name:10} {data.n_rows:,} transactions, {data.n_items:,} items")
    # The harness holds a second copy of every dataset as Python lists; keep it out of the cyclic
    # GC's full collections, which the kernel's itemset tuples trigger (the server process does
    # not hold these objects).
    gc.collect()
    gc.freeze()
    return datas, sides, truths


@dataclass
class SpeedResults:
    """Everything part 2 measured."""

    speeds: list[DatasetSpeed] = field(default_factory=list)
    mlxtend: list[BaselineTiming] = field(default_factory=list)
    rows: list[SpeedRow] = field(default_factory=list)
    profiles: list[ProfileResult] = field(default_factory=list)
    load_average: tuple[float, float, float] | None = None

    @property
    def baselines(self) -> list[BaselineTiming]:
        """Every non-private timing."""
        return [b for speed in self.speeds for b in speed.baselines] + self.mlxtend


def run_speed(
    config: Config,
    datas: dict[str, TrueData],
    sides: dict[str, ServerSide],
    truths: dict[str, dict[tuple[int, int], Ranked]],
) -> SpeedResults:
    """Part 2: served calls, kernel and pyfim interleaved; then mlxtend; then profiles."""
    fpgrowth, _ = import_mlxtend_fpgrowth()
    results = SpeedResults()
    quiet(config)
    results.load_average = load_average()
    with _stage("[2a] speed: real uvicorn server, kernel and pyfim, interleaved ..."):
        results.speeds = run_served(datas, sides, truths, config)
    with _stage("[2b] mlxtend fpgrowth ..."):
        for name, data in datas.items():
            results.mlxtend += time_mlxtend(data, truths[name], config, fpgrowth)
    results.rows = speed_rows(results.speeds, results.mlxtend)
    with _stage("[2c] profiles of the cells over the target ..."):
        results.profiles = profiles_over_target(results.rows, results.speeds, sides, config)
    return results


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print the tables, write JSON, plots and profiles."""
    config = parse_args(argv)
    unwind_on_sigterm()
    started = time.perf_counter()
    info = machine_info()
    info["pyfim"] = importlib.metadata.version("pyfim") if fim is not None else None
    if fim is None:
        print(f"non-private baseline skipped: {PYFIM_MISSING}", flush=True)
    info["mlxtend"] = import_mlxtend_fpgrowth()[1]
    names = [spec.name for spec in config.datasets]
    print(
        f"dpmine itemsets benchmark: datasets={','.join(names)} runs={config.runs} "
        f"nproc={info['nproc']} load={info['load_average_start']}",
        flush=True,
    )
    with _stage("[0] loading the data (harness parse + server loader) and the true top K ..."):
        datas, sides, truths = load_all(config)
    utility: list[UtilityCell] = []
    if not config.skip_utility:
        with _stage("[1] utility (server kernel in-process) ..."):
            for name in names:
                utility += run_utility(datas[name], sides[name], config, truths[name])
    zcdp: list[ZcdpCell] = []
    if config.zcdp_delta is not None:
        with _stage("[1b] zCDP column (server kernel in-process) ..."):
            for name in names:
                truth = truths[name][(DEFAULT.k, DEFAULT.length)]
                zcdp += run_zcdp(name, sides[name], truth, config, config.zcdp_delta)
    speed = SpeedResults() if config.skip_speed else run_speed(config, datas, sides, truths)
    config.out.mkdir(parents=True, exist_ok=True)
    plots = plot_utility(utility, names, config.out) if utility else []
    total = time.perf_counter() - started
    info["load_average_end"] = load_average()
    info["load_average_speed_start"] = speed.load_average
    report = markdown_report(
        info=info,
        config=config,
        datas=datas,
        truths=truths,
        utility=utility,
        zcdp=zcdp,
        rows=speed.rows,
        speeds=speed.speeds,
        baselines=speed.baselines,
        profiles=speed.profiles,
        total_seconds=total,
    )
    payload = {
        "machine": info,
        "config": {
            "quick": config.quick,
            "datasets": names,
            "runs": config.runs,
            "warm_calls": config.warm_calls,
            "mlxtend_repeats": config.mlxtend_repeats,
            "seed": config.seed,
            "rho": RHO,
            "defaults": asdict(DEFAULT),
            "utility_path": "server kernel top_k_itemsets in-process",
        },
        "true_counts": {
            name: {f"K={k},l={ell}": r[-1][1] if r else None for (k, ell), r in t.items()}
            for name, t in truths.items()
        },
        "utility": [asdict(c) for c in utility],
        "zcdp": [asdict(c) for c in zcdp],
        "speed": [asdict(s) for s in speed.speeds],
        "mlxtend": [asdict(b) for b in speed.mlxtend],
        "ratios": [asdict(r) for r in speed.rows],
        "profiles": [asdict(p) for p in speed.profiles],
        "plots": [str(p) for p in plots],
        "total_seconds": round(total, 1),
        "markdown": report,
    }
    out_file = config.out / "itemsets.json"
    out_file.write_text(json.dumps(payload, indent=2) + "\n")
    print()
    print(report)
    print(f"\nwrote {out_file}" + "".join(f", {p}" for p in plots))
    return 0


if __name__ == "__main__":
    sys.exit(main())
