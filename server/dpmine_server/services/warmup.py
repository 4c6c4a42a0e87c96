"""Warm a process before it serves: compiled kernels, resident datasets and a frozen heap
(issue #20, item 6; issue #23, item 1).

A process's first call must not pay for work that no public value bounds: numba loading or
compiling the tree samplers (seconds, once per process) and parsing a dataset (time grows with
the private row count). A server therefore loads every active dataset before it accepts
requests (:meth:`DatasetService.preload`; every load is padded to the public load budget, so
even the start-up time tells nothing about n) and each worker process does the same and runs
the compiled kernels once on a tiny synthetic table before it takes its first job.

After the kernels' warm-up and before the datasets load, the process's heap is frozen
(:func:`freeze_heap`). A warmed server holds about 3·10⁵ Python objects (FastAPI, pydantic,
SQLAlchemy, numba); CPython's full collection traverses all of them (230–290 ms measured on
the development machine) and starts whenever enough objects have survived since the last one,
that is inside whichever kernel happens to allocate them. Such a pause overruns any budget whose
kernel takes less than it (counts, qualities, top-K on small tables), and since how much a
kernel allocates can depend on the rows, so can whether the pause falls inside it. Frozen
objects are never traversed again: the longest full collection inside 108 kernel calls on
synthetic tables fell from 178–202 ms to 9–12 ms (bench/README.md, "Padding budgets").
"""

from __future__ import annotations

import csv
import gc
import importlib
import logging
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa

from dpmine.wire import (
    BooleanAttribute,
    CategoricalAttribute,
    CsvSource,
    DatasetMetadata,
    NumericAttribute,
    TreeMCMCRequest,
    TreePairMCMCRequest,
)
from dpmine_server.data.cell_scan import TokenBytes, scan_numbers
from dpmine_server.data.columns import ColumnStore, NumericColumn
from dpmine_server.data.itemset_miner import select_dense
from dpmine_server.data.itemsets import transaction_index
from dpmine_server.data.loaders import load_store
from dpmine_server.dp.budget import Epsilon
from dpmine_server.dp.mechanisms import LogWeightSampler
from dpmine_server.dp.rng import secure_generator
from dpmine_server.operations import CATALOG
from dpmine_server.operations.base import no_progress
from dpmine_server.operations.rule_list_exact import uncaptured_counts
from dpmine_server.operations.serenade_quality import counts_quality, kernel_quality
from dpmine_server.operations.serenade_thresholds import (
    class_interval_counts,
    grid_for,
    pair_interval_quality,
)
from dpmine_server.services.datasets import DatasetService

__all__ = [
    "LOAD_MODULES",
    "freeze_heap",
    "import_load_modules",
    "warm_compiled_kernels",
    "warm_process",
]

logger = logging.getLogger(__name__)

_ROWS = 64
_METADATA = DatasetMetadata(
    kind="views",
    n_max=_ROWS,
    attributes=[
        NumericAttribute(name="x", lo=0.0, hi=1.0, view="left"),
        CategoricalAttribute(name="c", categories=["a", "b", "c"], view="left"),
        NumericAttribute(name="y", lo=0.0, hi=1.0, view="right"),
        BooleanAttribute(name="b", view="right"),
    ],
)


def _write_table(folder: Path) -> Path:
    path = folder / "warmup.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["x", "c", "y", "b"])
        for row in range(_ROWS):
            writer.writerow(
                [row / _ROWS, "abc"[row % 3], (row * 7 % _ROWS) / _ROWS, "yes" if row % 2 else "no"]
            )
    return path


def _warm_itemset_miner(store: ColumnStore) -> None:
    """Every compiled entry of the itemset miner (data/itemset_miner.py) once: the row
    transpose, the spectrum, the selection, the dense counts and their selection."""
    index = transaction_index(store)
    lengths = (1, 2)
    spectrum, _work = index.spectrum(1, lengths)
    top = int(np.flatnonzero(spectrum)[-1])
    index.select(1, lengths, {top: [0]})
    counts, _work = index.dense(lengths)
    select_dense(counts, {int(counts.max()): [0]})


def _warm_serenade_grids(store: ColumnStore) -> None:
    """Serenade's compiled kernels: a numeric column's grid cells and the row classes'
    interval counts of an extension and the qualities of grid pairs
    (operations/serenade_thresholds.py), the quality of integer counts
    (operations/serenade_quality.py) and the exponential mechanism's
    cumulative weights (dp/mechanisms.py ``LogWeightSampler``)."""
    attribute = _METADATA.attribute("x")
    column = store.column("x")
    assert isinstance(attribute, NumericAttribute)
    assert isinstance(column, NumericColumn)
    rows = column.present
    grid_for(column, "x", attribute.lo, attribute.hi, (0.5,))  # an owner's grid
    grid = grid_for(column, "x", attribute.lo, attribute.hi, None)  # the default grid
    class_interval_counts(grid, rows, rows)
    counts = np.arange(4, dtype=np.int64)
    counts_quality(counts, counts, kernel_quality(4, s=0.1, x0=1.0, y0=1.0))
    prefix = np.zeros((1, grid.n_cells + 1), dtype=np.int64)
    quality = kernel_quality(4, s=0.1, x0=1.0)
    pair_interval_quality(grid, prefix, counts[:1], negated=False, quality=quality)
    LogWeightSampler(np.zeros(4))


def warm_compiled_kernels() -> None:
    """Run the compiled kernels once on a synthetic table (no dataset, no ledger: nothing is
    released): ``tree.mcmc`` (its chain and its exact sampler), ``tree.pair_mcmc``, the
    itemset miner, the exact rule-list sampler's count, and the CSV load's decimal scan,
    numeric cell scan and numeric sort (the synthetic table's load), so that numba's compiled
    code is loaded before a request, a job or a dataset's load needs it (a first call would
    otherwise pay seconds inside its padded budget and overrun).
    A failure is logged and left to the first real call. The modules that data/ imports on
    first use are imported first (:func:`import_load_modules`)."""
    import_load_modules()
    try:
        with tempfile.TemporaryDirectory() as folder:
            path = _write_table(Path(folder))
            store, _report = load_store(_METADATA, CsvSource(path=path.name), base_dir=Path(folder))
        # The table's one chunk converts its numbers by the vectorised path; a later chunk of a
        # column that is not integral takes the compiled scan (data/cell_scan.py).
        scan_numbers(pa.array([" 0.5", "?", "x"], pa.string()), TokenBytes.of(["?"]))
        _warm_itemset_miner(store)
        _warm_serenade_grids(store)
        words = np.zeros((2, 1), dtype=np.uint64)
        uncaptured_counts(words, words, np.zeros(1, dtype=np.int64))
        epsilon = Epsilon.charge(1.0)
        single = TreeMCMCRequest(
            view="left", target={"kind": "attribute", "attribute": "y"}, depth=2, epsilon=1.0
        )
        exact = single.model_copy(update={"columns": ["c", "y"], "sampler": "exact"})
        pair = TreePairMCMCRequest(attribute="y", depth=2, epsilon=1.0)
        CATALOG["tree.mcmc"].run(
            store,
            single.model_copy(update={"sampler": "mcmc"}),
            epsilon,
            secure_generator(),
            no_progress,
        )
        CATALOG["tree.mcmc"].run(store, exact, epsilon, secure_generator(), no_progress)
        CATALOG["tree.pair_mcmc"].run(store, pair, epsilon, secure_generator(), no_progress)
    except Exception:
        logger.exception("the compiled tree kernels could not be warmed")


def warm_process(datasets: DatasetService) -> None:
    """Everything a serving process does before its first request or job: load the compiled
    kernels (and the modules a load imports on first use), then the active datasets (each load
    padded to its public budget). Kernels first: a dataset parsed from its source sorts its
    numeric columns with a compiled kernel (data/value_order.py), whose first load must not
    fall inside a padded load; nor may the import of pandas, which the loaders defer."""
    warm_compiled_kernels()
    frozen = freeze_heap()
    loaded = datasets.preload()
    logger.info("process warmed: %d objects frozen, %d datasets resident", frozen, loaded)


#: Modules that data/ imports inside the functions that use them (data/loaders.py, "Imports").
LOAD_MODULES = ("pandas",)


def import_load_modules() -> None:
    """Import :data:`LOAD_MODULES` now, so that no padded load pays for their first import."""
    for name in LOAD_MODULES:
        importlib.import_module(name)


def freeze_heap() -> int:
    """Collect, then move every surviving object to the permanent generation (``gc.freeze``),
    so that no later collection traverses the warmed heap (module docstring); returns how many
    objects are frozen. Frozen objects are still freed when their last reference goes; only a
    reference cycle among them would outlive its use. So the heap is frozen after the kernels'
    warm-up and before the datasets load: what is frozen is the process's code and framework
    state, which lives as long as the process, never a dataset that a new version replaces
    (a dataset is a few Python objects around its arrays, cheap to traverse)."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
