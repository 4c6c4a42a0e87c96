"""Seconds per unit of the itemset kernels' public work bounds, on adversarial shapes
(ALGORITHMS.md §4.1; the constants of ``dpmine_server.operations.itemset_plan.CostModel``).

The padding budget of ``fim.topk_*`` and ``brl.antecedents`` is (public work units) × (seconds
per unit). A unit's cost depends on the data's shape (long occurrence lists scan memory in order,
scattered ones jump), so each constant is the largest median over shapes built to be slow:

* ``step`` / ``node`` / ``report`` (``dense_report``): the miner's time is fitted as
  a·steps + b·nodes + c·reports (non-negative least squares) over (a) identical rows (every
  subset frequent, long lists), (b) rows of random items from a large catalog at B = 1 (a node
  per occurring pair, tiny lists), (c) random rows each repeated B times at B (every prefix
  frequent, lists of B rows), (d) random rows over 200,000 items, (e) attribute-like rows (one
  item of each of 40 groups); then dense counting of a 4-million-itemset universe (random
  writes) gives the dense report's cost;
* ``entry`` / ``item_row``: building the miner's input from transaction lists / from one bitset
  per item of attribute data;
* ``cell``: a dense universe's per-itemset work (allocation, spectrum, member selection);
* ``block``: per possible count, the spectrum's blocks and their largest values;
* ``draw_item`` / ``draw_row``: per item of a tail draw (unrank, count), and per item × row when
  the item's bitset must be built from a full-length row list (cache miss); ``rank_entry``: the
  rank table, per group × length.

With ``--fimi FOLDER`` it also reports, for the FIMI files of FOLDER (the metadata an owner
would confirm from ``propose-metadata``), the padding budget of ``fim.topk_em`` before this
model (2e-7 · n_max · items · 2^(ℓ−2) s) and after, the plan, and the server kernel's real
time (in-process; cold = the first call, which builds the miner's input).

Usage::

    PYTHONPATH=client:server .venv/bin/python bench/calibrate_itemsets.py [--repeats 3]
        [--fimi /path/to/data] [--out DIR] [--smoke]

``--out DIR`` also writes ``DIR/calibrate_itemsets.json``; ``--smoke`` (the test suite's check
that the script runs) measures once, every shape and cost on a tenth of its rows, and runs the
FIMI part on the bundled Mushroom table.

Prints the measured medians and the model's constants side by side (the model must be above).
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
from scipy import optimize

from _support import machine_info, write_bundled_fimi
from dpmine.wire import BooleanAttribute, DatasetMetadata, FimiSource, TopKItemsetsRequest
from dpmine_server.data.columns import (
    BooleanColumn,
    ColumnStore,
    ItemColumns,
)
from dpmine_server.data.itemset_miner import (
    MinerWork,
    RowItems,
    mine_dense,
    mine_spectrum,
    rows_from_columns,
)
from dpmine_server.data.itemsets import TransactionIndex, item_catalog
from dpmine_server.data.loaders import load_store
from dpmine_server.data.propose import propose_metadata
from dpmine_server.dp.rng import seeded_generator
from dpmine_server.dp.topk import noisy_top_k_blocks
from dpmine_server.operations.itemset_plan import COSTS
from dpmine_server.operations.itemsets import _Tail, request_plan, top_k_itemsets

#: ``--smoke``: the share of the rows of the shapes and cost sections (the same shapes, smaller).
SMOKE_SCALE = 0.1


def _scaled(n_rows: int, scale: float) -> int:
    """``n_rows`` at ``scale`` (at least one row)."""
    return max(round(n_rows * scale), 1)


def _median_seconds(run: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _rows(rows: list[list[int]], n_items: int) -> RowItems:
    lists: list[list[int]] = [[] for _ in range(n_items)]
    for position, row in enumerate(rows):
        for item in row:
            lists[item].append(position)
    return rows_from_columns([np.asarray(rows, dtype=np.int64) for rows in lists], len(rows))


def _random_rows(n_rows: int, n_items: int, width: int, seed: int) -> list[list[int]]:
    rng = seeded_generator(seed)
    return [sorted(rng.choice(n_items, size=width, replace=False).tolist()) for _ in range(n_rows)]


def _shapes(scale: float = 1.0) -> dict[str, tuple[RowItems, int, tuple[int, int]]]:
    def rows(n_rows: int) -> int:
        return _scaled(n_rows, scale)

    repeated = [row for row in _random_rows(rows(1500), 2000, 20, 9) for _ in range(4)]
    return {
        "identical rows, w 30, l 1-3": (_rows([list(range(30))] * rows(3000), 30), 1, (1, 3)),
        "random rows, m 2000, w 30, B 1": (
            _rows(_random_rows(rows(4000), 2000, 30, 1), 2000),
            1,
            (1, 3),
        ),
        "random rows x4, m 2000, w 20, B 4": (_rows(repeated, 2000), 4, (1, 3)),
        "random rows, m 200000, w 12, B 1": (
            _rows(_random_rows(rows(20_000), 200_000, 12, 10), 200_000),
            1,
            (1, 3),
        ),
        "one item of each of 40 groups, B 1": (
            _rows(
                [[3 * g + int(c) for g, c in enumerate(row)] for row in _groups(rows(3000))], 120
            ),
            1,
            (1, 3),
        ),
    }


def scan_shapes(repeats: int, scale: float = 1.0) -> dict[str, float]:
    """Fit seconds = step·steps + node·nodes + report·reports over the shapes (their rows at
    ``scale``); then the dense report's cost. Returns the fitted constants and each shape's
    measured/fitted ratio."""
    observed: list[tuple[str, float, MinerWork]] = []
    for name, (rows, threshold, lengths) in _shapes(scale).items():
        _spectrum, work = mine_spectrum(rows, min_count=threshold, lengths=lengths)  # warm
        seconds = _median_seconds(
            functools.partial(mine_spectrum, rows, min_count=threshold, lengths=lengths), repeats
        )
        observed.append((name, seconds, work))
    matrix = np.array([[w.steps, w.nodes, w.reports] for _n, _s, w in observed], dtype=float)
    seconds_seen = np.array([seconds for _n, seconds, _w in observed])
    # Relative least squares: every shape counts alike, whatever its size.
    fitted, _residual = optimize.nnls(matrix / seconds_seen[:, None], np.ones(len(observed)))
    result = {"step": float(fitted[0]), "node": float(fitted[1]), "report": float(fitted[2])}
    for name, seconds, work in observed:
        result[f"ratio {name}"] = seconds / float(np.dot(fitted, [*work]))
    # Dense counting of C(290, 3) ≈ 4.0e6 itemsets: random writes into 16 MB.
    n_items = 290
    metadata = DatasetMetadata(
        kind="transactions", n_max=10, items=[f"i{i}" for i in range(n_items)]
    )
    catalog = item_catalog(metadata)
    terms = catalog.ranks(3).terms()
    offsets = np.array([0, 0, 0, 0, catalog.universe_size([3])], dtype=np.int64)
    ends = catalog.group_ends()
    dense_rows = _rows(_random_rows(_scaled(2000, scale), n_items, 30, 2), n_items)

    def count_densely() -> tuple[npt.NDArray[np.int32], MinerWork]:
        return mine_dense(
            dense_rows, lengths=(3, 3), rank_of=terms, block_offset=offsets, group_end=ends
        )

    _counts, work = count_densely()
    seconds = _median_seconds(count_densely, repeats)
    rest = seconds - fitted[0] * work.steps - fitted[1] * work.nodes
    result["dense_report"] = max(rest, 0.0) / work.reports
    return result


def _groups(n_rows: int) -> list[list[int]]:
    rng = seeded_generator(3)
    return [[int(c) for c in row] for row in rng.integers(0, 3, size=(n_rows, 40))]


def build_costs(repeats: int, scale: float = 1.0) -> dict[str, float]:
    """Seconds per (row, item) entry of transaction lists and per item × row of bitsets (the
    data's rows at ``scale``)."""
    n_rows, n_items, width = _scaled(100_000, scale), 5_000, 30
    rows = _random_rows(n_rows, n_items, width, 4)
    row_ids = np.repeat(np.arange(n_rows), width)
    items = np.concatenate([np.asarray(row) for row in rows])
    columns = ItemColumns.from_pairs([f"i{i}" for i in range(n_items)], row_ids, items, n_rows)
    lists = [columns.tidlist(item) for item in range(n_items)]
    entry = _median_seconds(lambda: rows_from_columns(lists, n_rows), repeats)
    table_rows = _scaled(20_000, scale)
    table = _table_store(table_rows, 200)
    index = TransactionIndex(table, item_catalog(table.metadata))
    item_row = _median_seconds(index._build_rows, repeats)
    return {
        "entry": entry / (n_rows * width + n_rows + n_items),
        "item_row": item_row / (table_rows * len(index.catalog.names)),
    }


def _table_store(n_rows: int, n_attributes: int) -> ColumnStore:
    rng = seeded_generator(5)
    attributes = [BooleanAttribute(name=f"b{a}") for a in range(n_attributes)]
    metadata = DatasetMetadata(kind="table", n_max=n_rows, attributes=list(attributes))
    columns = {
        a.name: BooleanColumn.from_arrays(a.name, rng.random(n_rows) < 0.5, np.ones(n_rows, bool))
        for a in attributes
    }
    return ColumnStore(metadata, n_rows=n_rows, columns=dict(columns))


def cell_and_block_costs(repeats: int) -> dict[str, float]:
    """Per itemset of a dense universe (allocation, spectrum, selection) and per count."""
    size = 2**22
    rng = seeded_generator(6)
    counts = rng.integers(0, 50_000, size=size).astype(np.int32)

    def dense_steps() -> None:
        np.zeros(size, dtype=np.int32)
        np.bincount(counts)

    cell = _median_seconds(dense_steps, repeats) / size
    n_max = 1_000_000
    spectrum = np.ones(n_max + 1, dtype=np.int64)
    scores = np.arange(n_max + 1, dtype=np.float64)

    def blocks() -> None:
        kept = np.flatnonzero(spectrum)
        noisy_top_k_blocks(
            scores[kept], spectrum[kept], k=1000, noise="gumbel", scale=20.0, rng=rng
        )

    block = _median_seconds(blocks, repeats) / (n_max + 1)
    return {"cell": cell, "block": block}


def draw_costs(repeats: int, scale: float = 1.0) -> dict[str, float]:
    """One tail draw on a transaction dataset whose items each fill half the rows (their
    number at ``scale``), every item's bitset built from its long row list (a fresh store per
    draw: nothing cached)."""
    n_rows, n_items = _scaled(100_000, scale), 40
    rng = seeded_generator(7)
    row_ids, item_ids = np.nonzero(rng.random((n_rows, n_items)) < 0.5)
    names = [f"i{i}" for i in range(n_items)]
    metadata = DatasetMetadata(kind="transactions", n_max=n_rows, items=names)
    built = ItemColumns.from_pairs(names, row_ids, item_ids, n_rows)
    timings: list[float] = []
    for _ in range(50 * repeats):
        columns = ItemColumns(names, built.indptr, built.indices, n_rows)
        store = ColumnStore(metadata, n_rows=n_rows, items=columns)
        tail = _Tail(TransactionIndex(store, item_catalog(metadata)), (3, 3), threshold=n_rows)
        draw = tail.drawer(0.0)
        start = time.perf_counter()
        draw(rng)
        timings.append(time.perf_counter() - start)
    per_row = statistics.median(timings) / (3 * (n_rows + n_rows // 64 + 1))
    # The fixed part: draws of 6-itemsets over 20,000 items on 64 rows, bitsets cached.
    n_items, small = 20_000, 64
    names = [f"i{i}" for i in range(n_items)]
    few = DatasetMetadata(kind="transactions", n_max=small, items=names)
    row_ids, item_ids = np.nonzero(rng.random((small, n_items)) < 0.01)
    store = ColumnStore(
        few, n_rows=small, items=ItemColumns.from_pairs(names, row_ids, item_ids, small)
    )
    index = TransactionIndex(store, item_catalog(few))
    start = time.perf_counter()
    tail = _Tail(index, (6, 6), threshold=small + 1)
    table = (time.perf_counter() - start) / ((n_items + 1) * 7)
    draw = tail.drawer(0.0)
    fixed = _median_seconds(lambda: [draw(rng) for _ in range(1000)], repeats) / 1000
    return {"draw_item": fixed / 6, "draw_row": per_row, "rank_entry": table}


FIMI_FILES = {
    "mushroom": "fimi_mushroom/mushroom.dat",
    "chess": "fimi_chess/chess.dat",
    "retail": "fimi_retail/retail.dat.gz",
    "T10I4D100K": "fimi_T10I4D100K/T10I4D100K.dat.gz",
}


def fimi_budgets(files: Mapping[str, Path], repeats: int) -> list[dict[str, object]]:
    """Budget before/after and kernel time of fim.topk_em (ε = 1.4, counts on, ℓ = 3) on each
    FIMI file of ``files`` (name -> path)."""
    rows: list[dict[str, object]] = []
    for name, path in files.items():
        source = FimiSource(path=path.name)
        metadata = propose_metadata(source, kind="transactions", base_dir=path.parent)
        store, _report = load_store(metadata, source, base_dir=path.parent)
        index = TransactionIndex(store, item_catalog(metadata))
        for k in (10, 100):
            request = TopKItemsetsRequest(k=k, min_length=3, epsilon=1.4)
            plan = request_plan(request, metadata, "em")

            def run(
                request: TopKItemsetsRequest = request, index: TransactionIndex = index
            ) -> object:
                return top_k_itemsets(
                    index,
                    method="em",
                    k=request.k,
                    lengths=request.lengths,
                    epsilon_selection=0.7,
                    epsilon_counts=0.7,
                    rho=request.rho,
                    rng=seeded_generator(11),
                )

            cold = _median_seconds(run, 1)
            warm = _median_seconds(run, repeats)
            before = 2e-7 * metadata.n_max * len(metadata.items) * 2.0
            regime = "dense" if plan.dense else f"sparse B={plan.threshold} X={plan.draws}"
            rows.append(
                {
                    "dataset": name,
                    "n_max": metadata.n_max,
                    "max_row_width": metadata.max_row_width,
                    "k": k,
                    "plan": regime,
                    "steps_bound": plan.mining.steps,
                    "budget_before_s": round(before, 2),
                    "budget_after_s": round(plan.seconds(), 2),
                    "kernel_cold_s": round(cold, 3),
                    "kernel_warm_s": round(warm, 3),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
        index = TransactionIndex(store, item_catalog(metadata))  # cold again for the next
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--fimi", type=Path, default=None, help="folder of the FIMI files")
    parser.add_argument(
        "--out", type=Path, default=None, help="also write calibrate_itemsets.json there"
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="seconds-long check that the script runs (the test suite's): 1 repeat, a tenth of "
        "the rows; the FIMI part on the bundled Mushroom table written as FIMI (1 row in 32) "
        "instead of --fimi",
    )
    args = parser.parse_args(argv)
    repeats = 1 if args.smoke else args.repeats
    scale = SMOKE_SCALE if args.smoke else 1.0
    files: dict[str, Path] = {}
    with tempfile.TemporaryDirectory(prefix="dpmine-calibrate-itemsets-") as scratch:
        if args.smoke:
            files["mushroom-bundled"] = Path(scratch) / "mushroom.dat"
            write_bundled_fimi(files["mushroom-bundled"], every=32)
        elif args.fimi is not None:
            files = {name: args.fimi / relative for name, relative in FIMI_FILES.items()}
        fimi = fimi_budgets(files, repeats)
    measured = scan_shapes(repeats, scale)
    print(json.dumps(measured, indent=2), flush=True)
    sections: tuple[Callable[[], dict[str, float]], ...] = (
        functools.partial(build_costs, repeats, scale),
        functools.partial(cell_and_block_costs, repeats),  # no rows to scale
        functools.partial(draw_costs, repeats, scale),
    )
    for section in sections:
        part = section()
        print(json.dumps(part, indent=2), flush=True)
        measured.update(part)
    model = {
        "step": COSTS.step,
        "node": COSTS.node,
        "report": COSTS.report,
        "dense_report": COSTS.dense_report,
        "entry": COSTS.entry,
        "item_row": COSTS.item_row,
        "cell": COSTS.cell,
        "block": COSTS.block,
        "draw_item": COSTS.draw_item,
        "draw_row": COSTS.draw_row,
        "rank_entry": COSTS.rank_entry,
    }
    print(json.dumps({"measured": measured, "model": model}, indent=2))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        payload = {"machine": machine_info(), "measured": measured, "model": model, "fimi": fimi}
        (args.out / "calibrate_itemsets.json").write_text(json.dumps(payload, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
