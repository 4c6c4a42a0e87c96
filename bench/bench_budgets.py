"""Kernel time against the padding budget of every operation (issue #20, "bounded kernels").

For every operation priced by ``services/timing.py`` (its ``_WORK`` table, test-mode operations
aside) the script runs the server's real kernel in-process — the operation spec's ``validate``,
``cost`` and ``run``, as the executor calls them, with a fresh secure generator per call — with
public default parameters, on

* (a) the bundled data: the demo's UCI Mushroom (``config/demo``, two views, label class = p
  for the rule lists), the test suite's generated table (``tests/support/datasets.py``, label
  smoker) and, when ``/work/shared/data`` is there, European mammals (124 Boolean species ×
  48 numeric climate columns, as ``bench_serenade.py`` prepares it);
* (b) adversarial data built to be slow: ``distinct`` (numeric columns whose values are all
  distinct, for Serenade's thresholds and the trees), ``dense`` (a block of Boolean items true
  in every row: every itemset co-occurs, the worst case of top-K and ``brl.antecedents``) and
  ``reject`` (left literals that are never true, so every quality is 0 and Serenade's rejection
  accepts a proposal with probability e^−c only, run at c = 8, the largest c it serves).

Each (operation, dataset) is timed R times after one first call (the first builds the store's
caches; it is shown apart). The budget is ``TimingPolicy.budget`` with the default settings'
base, scale and grid (development mode: 100 ms + 1 × work, 50 ms grid); an overrun is a kernel
time above the budget (the padded deadline is the budget rounded up to the grid, so this is
the stricter test). The table gives the max and p99 kernel time, the largest kernel/budget
ratio, overruns/R and a one-sided 95 % Clopper–Pearson upper bound on the overrun probability.
A second table gives Serenade's rejection proposals per call against their public cap, and an
upper bound on the seconds per proposal (the whole kernel time over the proposals) against the
budgeted 1e-4 s + 2.5e-9 s per n_max row.

Usage::

    PYTHONPATH=client:server:tests .venv/bin/python bench/bench_budgets.py [--quick]
        [--repeats R] [--operations tree.expmech,...] [--datasets mushroom,distinct,...]
        [--rows N] [--out bench/out]

``--quick``: 5 repetitions and smaller adversarial data (a few minutes on 2 cores); default
20 repetitions. Writes ``<out>/budgets.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
from scipy import stats

from _support import REPO_ROOT, load_average, machine_info, percentile, unwind_on_sigterm
from bench_serenade import VIEW_CHOOSERS, prepare_dataset
from dpmine.wire import (
    MAX_EXACT_RULE_LIST_WORK,
    AnyAttribute,
    AnyLiteral,
    BooleanAttribute,
    BoolLiteral,
    CategoricalAttribute,
    CatLiteral,
    CsvSource,
    DatasetMetadata,
    LabelSpec,
    NumericAttribute,
    NumLiteral,
    QualityParameters,
    Redescription,
    View,
    exact_rule_list_work,
)
from dpmine_server.data.columns import (
    BooleanColumn,
    CategoricalColumn,
    Column,
    ColumnStore,
    NumericColumn,
)
from dpmine_server.data.loaders import load_store
from dpmine_server.dp import mechanisms
from dpmine_server.dp.rng import secure_generator
from dpmine_server.operations import CATALOG
from dpmine_server.operations.base import OperationSpec, no_progress
from dpmine_server.operations.redescriptions import (
    extend_proposals,
    pairs_proposals,
    quality_parameters,
)
from dpmine_server.operations.serenade import REJECTION_MAX_EXPONENT
from dpmine_server.services.timing import _WORK, TimingPolicy
from dpmine_server.services.warmup import warm_compiled_kernels
from dpmine_server.settings import Settings
from support.datasets import table_metadata, write_table_csv

OPERATIONS = tuple(name for name in _WORK if not name.startswith("test."))
BUNDLED = ("mushroom", "table", "mammals")
ADVERSARIAL = ("distinct", "dense", "reject")
DEMO_DATA = REPO_ROOT / "data" / "uci_mushroom" / "agaricus-lepiota.csv.gz"
DEMO_METADATA = REPO_ROOT / "config" / "demo" / "mushroom.metadata.json"
SHARED_DATA = Path("/work/shared/data")
REPEATS, QUICK_REPEATS = 20, 5
ROWS, QUICK_ROWS = 100_000, 20_000
#: ``--smoke`` (the test suite's check that the script runs): one call per case, 2,000-row
#: adversarial data, the repository's own tables only; overruns are reported, not an error
#: (the test suite's machine is loaded, and the suite asserts nothing about time).
SMOKE_REPEATS, SMOKE_ROWS = 1, 2_000
SMOKE_DATASETS = ("mushroom", "table", *ADVERSARIAL)
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Dataset:
    """A loaded store and what it stands for."""

    key: str
    store: ColumnStore
    note: str


@dataclass(frozen=True)
class Case:
    """One operation with public default parameters on one dataset."""

    operation: str
    dataset: str
    request: dict[str, Any]
    note: str = ""


@dataclass
class Result:
    """The timings of one case."""

    operation: str
    dataset: str
    note: str
    budget: float
    first: float
    times: list[float]
    proposals: list[int] = field(default_factory=list)
    cap: int = 0
    n_max: int = 0

    @property
    def overruns(self) -> int:
        return sum(1 for t in self.times if t > self.budget)

    def upper_bound(self) -> float:
        """One-sided Clopper–Pearson upper bound on the overrun probability."""
        runs, bad = len(self.times), self.overruns
        if bad >= runs:
            return 1.0
        return float(stats.beta.ppf(CONFIDENCE, bad + 1, runs - bad))


# -- datasets ----------------------------------------------------------------------------------


def _everyone(rows: int) -> np.ndarray[Any, np.dtype[np.bool_]]:
    return np.ones(rows, dtype=bool)


def mushroom() -> Dataset:
    """The demo's dataset (``make demo``), with the rule lists' label class = p."""
    metadata = DatasetMetadata.model_validate_json(DEMO_METADATA.read_text())
    metadata = metadata.model_copy(update={"label": LabelSpec(attribute="class", positive="p")})
    source = CsvSource(path=DEMO_DATA.name)
    store, _report = load_store(metadata, source, base_dir=DEMO_DATA.parent)
    return Dataset("mushroom", store, "bundled demo data: 8,124 rows, 23 categorical, 2 views")


def table(folder: Path) -> Dataset:
    """The test suite's generated table (tests/support/datasets.py), label smoker."""
    path = write_table_csv(folder)
    metadata = table_metadata().model_copy(
        update={"label": LabelSpec(attribute="smoker", positive="yes")}
    )
    store, _report = load_store(metadata, CsvSource(path=path.name), base_dir=folder)
    return Dataset("table", store, "test fixture: 240 rows, 2 numeric, Boolean, categorical")


def mammals(folder: Path) -> Dataset | None:
    """European mammals as bench_serenade.py prepares it (None without the shared data)."""
    sub, chooser = VIEW_CHOOSERS["mammals"]
    if not (SHARED_DATA / sub).is_dir():
        return None
    prepared = prepare_dataset(chooser(SHARED_DATA / sub), folder / "mammals")
    store, _report = load_store(prepared.metadata, prepared.source, base_dir=prepared.directory)
    return Dataset("mammals", store, "shared data: 2,221 rows, 124 Boolean × 48 numeric")


def _store(attributes: list[AnyAttribute], columns: dict[str, Column], rows: int) -> ColumnStore:
    metadata = DatasetMetadata(kind="views", n_max=rows, attributes=attributes)
    return ColumnStore(metadata, n_rows=rows, columns=columns)


def distinct(rows: int) -> Dataset:
    """Left: 6 Boolean (density 0.3), a categorical of 5 values and a numeric target; right: 4
    numeric columns of all-distinct values and a Boolean. n_max = the rows."""
    generator = np.random.default_rng(20)
    attributes: list[AnyAttribute] = []
    columns: dict[str, Column] = {}
    for j in range(6):
        attributes.append(BooleanAttribute(name=f"b{j}", view="left"))
        truth = generator.random(rows) < 0.3
        columns[f"b{j}"] = BooleanColumn.from_arrays(f"b{j}", truth, _everyone(rows))
    groups = ("g0", "g1", "g2", "g3", "g4")
    attributes.append(CategoricalAttribute(name="g", view="left", categories=list(groups)))
    columns["g"] = CategoricalColumn("g", groups, generator.integers(0, 5, rows).astype(np.int32))
    attributes.append(NumericAttribute(name="t", view="left", lo=0.0, hi=1.0))
    columns["t"] = NumericColumn.from_values("t", generator.random(rows), lo=0.0, hi=1.0)
    for j in range(4):
        attributes.append(NumericAttribute(name=f"x{j}", view="right", lo=0.0, hi=1.0))
        columns[f"x{j}"] = NumericColumn.from_values(
            f"x{j}", generator.permutation(rows) / rows, lo=0.0, hi=1.0
        )
    attributes.append(BooleanAttribute(name="r", view="right"))
    columns["r"] = BooleanColumn.from_arrays("r", generator.random(rows) < 0.5, _everyone(rows))
    note = f"adversarial: {rows:,} rows, 4 all-distinct numeric right columns"
    return Dataset("distinct", _store(attributes, columns, rows), note)


def dense(rows: int, items: int = 12) -> Dataset:
    """A table of ``items`` Boolean attributes true in every row and a label y (every second
    row): every itemset of the block has count n, the miners' and top-K's worst case."""
    attributes: list[AnyAttribute] = [BooleanAttribute(name=f"i{j}") for j in range(items)]
    columns: dict[str, Column] = {
        f"i{j}": BooleanColumn.from_arrays(f"i{j}", _everyone(rows), _everyone(rows))
        for j in range(items)
    }
    attributes.append(BooleanAttribute(name="y"))
    columns["y"] = BooleanColumn.from_arrays("y", np.arange(rows) % 2 == 0, _everyone(rows))
    metadata = DatasetMetadata(
        kind="table",
        n_max=rows,
        attributes=attributes,
        label=LabelSpec(attribute="y", positive="true"),
    )
    store = ColumnStore(metadata, n_rows=rows, columns=columns)
    return Dataset("dense", store, f"adversarial: {rows:,} rows, {items} items in every row")


def reject(rows: int) -> Dataset:
    """Left: 4 Boolean attributes never true (every |I| = 0, so every Q = 0); right: 3 numeric
    columns of all-distinct values. Serenade's rejection then accepts with probability e^−c."""
    generator = np.random.default_rng(21)
    attributes: list[AnyAttribute] = []
    columns: dict[str, Column] = {}
    for j in range(4):
        attributes.append(BooleanAttribute(name=f"b{j}", view="left"))
        columns[f"b{j}"] = BooleanColumn.from_arrays(f"b{j}", ~_everyone(rows), _everyone(rows))
    for j in range(3):
        attributes.append(NumericAttribute(name=f"x{j}", view="right", lo=0.0, hi=1.0))
        columns[f"x{j}"] = NumericColumn.from_values(
            f"x{j}", generator.permutation(rows) / rows, lo=0.0, hi=1.0
        )
    note = f"adversarial: {rows:,} rows, Q = 0 everywhere, c = 8"
    return Dataset("reject", _store(attributes, columns, rows), note)


# -- default requests --------------------------------------------------------------------------


def _literal(attribute: AnyAttribute) -> AnyLiteral:
    """A literal of ``attribute``: true, its first category, or its middle half."""
    if isinstance(attribute, BooleanAttribute):
        return BoolLiteral(attribute=attribute.name)
    if isinstance(attribute, CategoricalAttribute):
        return CatLiteral(attribute=attribute.name, category=attribute.categories[0])
    width = attribute.hi - attribute.lo
    return NumLiteral(
        attribute=attribute.name, lower=attribute.lo + width / 4, upper=attribute.hi - width / 4
    )


def _sides(metadata: DatasetMetadata) -> tuple[AnyAttribute, AnyAttribute]:
    """A left and a right attribute (two different attributes of a table), not the label."""
    label = metadata.label.attribute if metadata.label else None
    usable = [a for a in metadata.attributes if a.name != label]
    if metadata.kind == "views":
        return (
            next(a for a in usable if a.view == "left"),
            next(a for a in usable if a.view == "right"),
        )
    return usable[0], usable[1]


def _pair(metadata: DatasetMetadata) -> Redescription:
    left, right = _sides(metadata)
    return Redescription(left=_literal(left), right=_literal(right))


def _quality(metadata: DatasetMetadata) -> dict[str, float]:
    """x0 at 10 % of n_max (public), the steepness by the server's line search."""
    return {"x0": max(1.0, 0.1 * metadata.n_max)}


def _basic_cases(dataset: Dataset) -> list[Case]:
    metadata = dataset.store.metadata
    key = dataset.key
    cases = [
        Case("count.noisy", key, {"epsilon": 0.1}),
        Case("fim.topk_em", key, {"k": 10, "min_length": 1, "max_length": 3, "epsilon": 1.4}),
        Case("fim.topk_laplace", key, {"k": 10, "min_length": 1, "max_length": 3, "epsilon": 1.4}),
    ]
    if metadata.kind == "transactions":
        return cases
    pair = _pair(metadata).model_dump(mode="json")
    quality = _quality(metadata)
    cases += [
        Case("red.compute_quality", key, {"redescription": pair, "epsilon": 0.1}),
        Case("serenade.initial_pairs", key, {"epsilon": 1.0, "quality": quality}),
        Case(
            "serenade.extend_one",
            key,
            {"mode": "cs", "collection": [pair], "epsilon": 1.0, "quality": quality},
        ),
    ]
    return cases


def _tree_target(metadata: DatasetMetadata, view: View) -> dict[str, Any]:
    """The first attribute of ``view`` as a tree target (numeric: the default 10 bins)."""
    attribute = next(a for a in metadata.attributes if a.view == view)
    return {"kind": "attribute", "attribute": attribute.name}


def _tree_cases(dataset: Dataset) -> list[Case]:
    metadata = dataset.store.metadata
    if metadata.kind != "views":
        return []
    key = dataset.key
    single = {"view": "right", "target": _tree_target(metadata, "left"), "epsilon": 1.0}
    left_target = _tree_target(metadata, "left")["attribute"]
    left_tree = _released_tree(dataset.store, "left", _tree_target(metadata, "right"))
    right_tree = _released_tree(dataset.store, "right", _tree_target(metadata, "left"))
    trees = {"left_tree": left_tree, "right_tree": right_tree, "epsilon": 1.0}
    return [
        Case("tree.expmech", key, single),
        Case("tree.mcmc", key, single),
        Case("tree.pair_mcmc", key, {"attribute": left_target, "epsilon": 1.0}),
        Case("tree.leaf_counts", key, trees),
    ]


def _released_tree(store: ColumnStore, view: View, target: dict[str, Any]) -> dict[str, Any]:
    """A tree released by one (untimed) ``tree.expmech`` call: the input of leaf counts."""
    request = {"view": view, "target": target, "epsilon": 1.0}
    fields = _run(CATALOG["tree.expmech"], store, request)
    tree: dict[str, Any] = fields["tree"].model_dump(mode="json")
    return tree


def _rule_list_cases(dataset: Dataset) -> list[Case]:
    metadata = dataset.store.metadata
    if metadata.label is None:
        return []
    key = dataset.key
    selected = _run(CATALOG["brl.antecedents"], dataset.store, {"epsilon": 1.0})
    antecedents: list[Any] = []
    for selection in selected["by_class"]:  # both classes' lists, as the client joins them
        for antecedent in selection["antecedents"]:
            dumped = antecedent.model_dump(mode="json")
            if dumped not in antecedents:
                antecedents.append(dumped)
    return [
        Case("brl.antecedents", key, {"epsilon": 1.0}),
        Case("brl.sample_rule_list", key, {"antecedents": antecedents, "epsilon": 1.0}),
        _exact_rule_list_case(key, antecedents, metadata.n_max),
        Case("brl.point_estimates", key, {"rules": antecedents[:5], "epsilon": 1.0}),
    ]


def _exact_rule_list_case(key: str, antecedents: list[Any], n_max: int) -> Case:
    """``brl.sample_rule_list_exact`` at its worst: max_rules 3 over the most antecedents whose
    public work fits the server's cap (its work does not depend on the data otherwise)."""
    size = len(antecedents)
    while size > 1 and exact_rule_list_work(size, 3, n_max) > MAX_EXACT_RULE_LIST_WORK:
        size -= 1
    body = {"antecedents": antecedents[:size], "epsilon": 1.0, "max_rules": 3}
    return Case("brl.sample_rule_list_exact", key, body, f"M = {size}, L = 3")


def _continuous_cases(dataset: Dataset, c: float) -> list[Case]:
    """Serenade's initial pairs (20 draws) and one extension with continuous thresholds at
    coefficient c per draw (the ε that gives it, from the public quality parameters)."""
    metadata = dataset.store.metadata
    quality = _quality(metadata)
    params = quality_parameters(QualityParameters.model_validate(quality), metadata.n_max)
    per_epsilon = params.coefficient(1.0)
    pair = _pair(metadata).model_dump(mode="json")
    draws, note = 20, f"c = {c:g}"
    options = {"threshold_mode": "continuous"}
    pairs = {"count": draws, "epsilon": c / per_epsilon * draws, "quality": quality}
    extend = {"mode": "cs", "collection": [pair], "epsilon": c / per_epsilon, "quality": quality}
    return [
        Case("serenade.initial_pairs", dataset.key, {**pairs, "options": options}, note),
        Case("serenade.extend_one", dataset.key, {**extend, "options": options}, note),
    ]


#: Just below c = 8, the largest coefficient served by rejection (float rounding of ε/count).
WORST_C = REJECTION_MAX_EXPONENT - 0.01
#: The paper's regime for initial pairs on mammals (ALGORITHMS.md §7): c ≈ 2.5 per draw.
PAPER_C = 2.5


def cases_for(dataset: Dataset) -> list[Case]:
    """Every applicable operation with its default parameters on ``dataset``."""
    if dataset.key == "reject":
        return _continuous_cases(dataset, WORST_C)
    cases = _basic_cases(dataset)
    if any(isinstance(a, NumericAttribute) for a in dataset.store.metadata.attributes):
        cases += _continuous_cases(dataset, PAPER_C) + _continuous_cases(dataset, WORST_C)
    return cases + _tree_cases(dataset) + _rule_list_cases(dataset)


# -- running -----------------------------------------------------------------------------------


def _run(spec: OperationSpec[Any, Any], store: ColumnStore, body: dict[str, Any]) -> dict[str, Any]:
    request = spec.request_model.model_validate(body)
    spec.validate(request, store.metadata)
    return spec.run(store, request, spec.cost(request), secure_generator(), no_progress)


@contextlib.contextmanager
def counting_proposals() -> Iterator[list[int]]:
    """Counts the rejection proposals the kernels make (``RejectionSampler.draw`` wrapped)."""
    made = [0]
    draw = mechanisms.RejectionSampler.draw

    def counted(sampler: mechanisms.RejectionSampler, *args: Any, **kwargs: Any) -> Any:
        choice, proposals = draw(sampler, *args, **kwargs)
        made[0] += proposals
        return choice, proposals

    with mock.patch.object(mechanisms.RejectionSampler, "draw", counted):
        yield made


def measure(case: Case, store: ColumnStore, policy: TimingPolicy, repeats: int) -> Result:
    """The first call, then ``repeats`` timed calls of the case's kernel."""
    spec = CATALOG[case.operation]
    request = spec.request_model.model_validate(case.request)
    spec.validate(request, store.metadata)
    cost = spec.cost(request)
    budget = policy.budget(case.operation, request, store.metadata)
    cap = _proposal_cap(case.operation, request, store.metadata)
    result = Result(
        case.operation,
        case.dataset,
        case.note,
        budget,
        0.0,
        [],
        cap=cap,
        n_max=store.metadata.n_max,
    )
    for repetition in range(repeats + 1):
        with counting_proposals() as made:
            start = time.perf_counter()
            spec.run(store, request, cost, secure_generator(), no_progress)
            elapsed = time.perf_counter() - start
        if repetition == 0:
            result.first = elapsed
        else:
            result.times.append(elapsed)
            result.proposals.append(made[0])
    return result


def _proposal_cap(operation: str, request: Any, metadata: DatasetMetadata) -> int:
    if operation == "serenade.initial_pairs":
        return pairs_proposals(request, metadata)
    if operation == "serenade.extend_one":
        return extend_proposals(request, metadata)
    return 0


# -- report ------------------------------------------------------------------------------------


def budget_table(results: Sequence[Result], repeats: int) -> str:
    """The Markdown table of kernel times against budgets."""
    lines = [
        "| operation | dataset | budget s | first s | max s | p99 s | max ratio | "
        f"overruns/{repeats} | 95 % CP upper |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for result in results:
        dataset = result.dataset + (f" ({result.note})" if result.note else "")
        worst = max(result.times)
        lines.append(
            f"| {result.operation} | {dataset} | {result.budget:.3f} | {result.first:.3f} | "
            f"{worst:.3f} | {percentile(result.times, 99):.3f} | {worst / result.budget:.2f} | "
            f"{result.overruns}/{len(result.times)} | {result.upper_bound():.3f} |"
        )
    return "\n".join(lines)


def proposal_table(results: Sequence[Result]) -> str:
    """Serenade's rejection proposals against their cap, and the time per proposal."""
    lines = [
        "| operation | dataset | proposals mean / max | public cap | "
        "µs / proposal (kernel time / proposals: an upper bound) | budgeted µs / proposal |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for result in results:
        if not result.cap:
            continue
        dataset = result.dataset + (f" ({result.note})" if result.note else "")
        mean = sum(result.proposals) / len(result.proposals)
        per = max(t / max(p, 1) for t, p in zip(result.times, result.proposals, strict=True))
        budgeted = 1e-4 + 2.5e-9 * result.n_max
        lines.append(
            f"| {result.operation} | {dataset} | {mean:,.0f} / {max(result.proposals):,} | "
            f"{result.cap:,} | {per * 1e6:.1f} | {budgeted * 1e6:.1f} |"
        )
    return "\n".join(lines)


# -- main --------------------------------------------------------------------------------------


def load_datasets(keys: Sequence[str], rows: int, folder: Path) -> Iterator[Dataset]:
    """The datasets asked for, built or loaded one at a time."""
    builders: dict[str, Callable[[], Dataset | None]] = {
        "mushroom": mushroom,
        "table": lambda: table(folder),
        "mammals": lambda: mammals(folder),
        "distinct": lambda: distinct(rows),
        "dense": lambda: dense(rows),
        "reject": lambda: reject(max(rows // 4, 1_000)),
    }
    for key in keys:
        dataset = builders[key]()
        if dataset is None:
            print(f"  {key}: not available, skipped", flush=True)
            continue
        yield dataset


def parse_arguments(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="5 repetitions, smaller data")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="seconds-long check that the script runs: 1 call per case, 2,000-row adversarial "
        "data, no shared data; overruns reported, exit status 0",
    )
    parser.add_argument("--repeats", type=int, default=None, help="timed calls per case")
    parser.add_argument("--rows", type=int, default=None, help="rows of the adversarial data")
    parser.add_argument("--operations", default=",".join(OPERATIONS))
    parser.add_argument("--datasets", default=",".join(BUNDLED + ADVERSARIAL))
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "out")
    return parser.parse_args(argv)


#: A server process runs with one BLAS/OpenMP thread (dpmine_server/__init__.py); BLAS reads
#: these when numpy loads, so the benchmark restarts itself with them when they are unset.
_ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def main(argv: Sequence[str] | None = None) -> int:
    if any(name not in os.environ for name in _ONE_THREAD):
        os.execve(sys.executable, [sys.executable, *sys.argv], {**_ONE_THREAD, **os.environ})
    unwind_on_sigterm()
    arguments = parse_arguments(argv)
    if arguments.smoke:
        arguments.repeats, arguments.rows = SMOKE_REPEATS, SMOKE_ROWS
        arguments.datasets = ",".join(SMOKE_DATASETS)
    repeats = arguments.repeats or (QUICK_REPEATS if arguments.quick else REPEATS)
    rows = arguments.rows or (QUICK_ROWS if arguments.quick else ROWS)
    operations = set(arguments.operations.split(","))
    policy = TimingPolicy.from_settings(Settings(environment="development"))
    info = machine_info()
    print(f"# Kernel time against the padding budget ({repeats} calls per case)\n")
    print(
        f"policy: base {policy.base:g} s, scale {policy.scale:g}, grid {policy.grid:g} s; "
        f"load average {info['load_average_start']}; nproc {info['nproc']}\n",
        flush=True,
    )
    warm_compiled_kernels()
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="dpmine-bench-budgets-") as work:
        for dataset in load_datasets(arguments.datasets.split(","), rows, Path(work)):
            print(f"{dataset.key}: {dataset.note}", flush=True)
            for case in cases_for(dataset):
                if case.operation not in operations:
                    continue
                try:
                    result = measure(case, dataset.store, policy, repeats)
                except ValueError as error:  # refused before the charge: not applicable here
                    print(f"  {case.operation:24} skipped: {error}", flush=True)
                    continue
                results.append(result)
                print(
                    f"  {case.operation:24} budget {result.budget:8.3f} s, max "
                    f"{max(result.times):8.3f} s, first {result.first:8.3f} s",
                    flush=True,
                )
    report = (
        f"{budget_table(results, repeats)}\n\n{proposal_table(results)}\n\n"
        f"load average at the end: {load_average()}"
    )
    print(f"\n{report}")
    arguments.out.mkdir(parents=True, exist_ok=True)
    output = {
        "machine": info,
        "repeats": repeats,
        "rows": rows,
        "results": [asdict(result) for result in results],
    }
    (arguments.out / "budgets.json").write_text(json.dumps(output, indent=2) + "\n")
    overran = [result.operation for result in results if result.overruns]
    if overran and arguments.smoke:
        print(f"overruns (reported, not an error under --smoke): {', '.join(overran)}")
        return 0
    return 1 if overran else 0


if __name__ == "__main__":
    sys.exit(main())
