"""Synthetic adversarial cases and the timing calibration (issue #23, "measured budgets").

Shared by ``dpmine-server calibrate`` and ``bench/bench_budgets.py``. Every priced operation
(services/timing.py) runs its real kernel (the operation spec's ``validate``, ``cost`` and
``run``, as the executor calls them, with a fresh secure generator per call and no ledger:
nothing is released) with public default parameters on synthetic data built to be slow:

* ``distinct``: numeric columns whose values are all distinct (Serenade's thresholds, trees);
* ``dense``: a block of Boolean items true in every row (every itemset co-occurs: the worst
  case of top-K and ``brl.antecedents``);
* ``reject``: left literals that are never true, so every quality is 0 and Serenade's
  rejection accepts a proposal with probability e^−c only, run at c just below 8 (the
  largest c it serves);
* ``wide``: 120 Boolean × 48 all-distinct numeric columns (European mammals' shape: Serenade's
  grid-mode pairs count every left literal against every right column).

:func:`calibrate` times each case and derives, per operation, the factor
``max over cases and repetitions of (kernel seconds / hand-set work units)`` and the floor
(the smallest case's worst time), the content of the public calibration file
(services/calibration_file.py). ``tree.mcmc`` runs a chain or an exact sampler, whose seconds
per work unit differ: each case records which one it ran (services/timing.py
``pricing_variant``), and each sampler also gets a factor and a floor over its own cases, by
which its calls are priced. Every case of a sampler still gets ``margin`` times its worst time.

Privacy: the data are generated from a fixed seed and public sizes only; no registered
dataset is read, so the factors (and the budgets derived from them) are public values.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from dpmine.wire import (
    MAX_EXACT_RULE_LIST_WORK,
    AnyAttribute,
    AnyLiteral,
    BooleanAttribute,
    BoolLiteral,
    CategoricalAttribute,
    CatLiteral,
    DatasetMetadata,
    LabelSpec,
    NumericAttribute,
    NumLiteral,
    QualityParameters,
    Redescription,
    TreeMCMCRequest,
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
from dpmine_server.dp.rng import secure_generator
from dpmine_server.operations import CATALOG
from dpmine_server.operations.base import OperationSpec, no_progress
from dpmine_server.operations.redescriptions import quality_parameters
from dpmine_server.operations.serenade import REJECTION_MAX_EXPONENT
from dpmine_server.operations.trees import mcmc_sampler
from dpmine_server.public_cache import clear_public_caches
from dpmine_server.services.calibration_file import (
    CALIBRATION_VERSION,
    MARGIN,
    CalibrationCase,
    OperationCalibration,
    TimingCalibration,
    VariantCalibration,
)
from dpmine_server.services.timing import PRICED_OPERATIONS, operation_work, pricing_variant

__all__ = [
    "ADVERSARIAL",
    "Case",
    "Dataset",
    "adversarial",
    "calibrate",
    "cases_for",
    "dense",
    "distinct",
    "reject",
    "run_kernel",
]

ADVERSARIAL = ("distinct", "dense", "reject", "wide")
#: Rows of the adversarial data and timed calls per case: full and ``--quick`` calibrations.
SIZES, QUICK_SIZES = (20_000, 100_000), (5_000,)
REPEATS, QUICK_REPEATS = 5, 2


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


# -- datasets ----------------------------------------------------------------------------------


def _everyone(rows: int) -> np.ndarray[Any, np.dtype[np.bool_]]:
    return np.ones(rows, dtype=bool)


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


def wide(rows: int, left: int = 120, right: int = 48) -> Dataset:
    """Many columns, as on European mammals: ``left`` Boolean attributes (density 0.3) and
    ``right`` numeric columns of all-distinct values. Serenade's grid-mode pairs count every
    left literal against every right column's grid cells, a term the narrow tables leave
    small."""
    generator = np.random.default_rng(22)
    attributes: list[AnyAttribute] = []
    columns: dict[str, Column] = {}
    for j in range(left):
        attributes.append(BooleanAttribute(name=f"b{j}", view="left"))
        truth = generator.random(rows) < 0.3
        columns[f"b{j}"] = BooleanColumn.from_arrays(f"b{j}", truth, _everyone(rows))
    for j in range(right):
        attributes.append(NumericAttribute(name=f"x{j}", view="right", lo=0.0, hi=1.0))
        columns[f"x{j}"] = NumericColumn.from_values(
            f"x{j}", generator.permutation(rows) / rows, lo=0.0, hi=1.0
        )
    note = f"adversarial: {rows:,} rows, {left} Boolean × {right} all-distinct numeric"
    return Dataset("wide", _store(attributes, columns, rows), note)


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
    # The miners send the steepness they got from the free serenade.calibrate, so their calls
    # compute one steepness's sensitivities where a call leaving it to the server searches
    # the grid (services/timing.py prices the two apart): both are measured.
    searched = quality_parameters(QualityParameters.model_validate(quality), metadata.n_max).s
    cases.append(Case("red.compute_quality", key, {"redescription": pair, "epsilon": 0.1}))
    for given, note in ((quality, ""), (quality | {"s": searched}, "s given")):
        extend = {"mode": "cs", "collection": [pair], "epsilon": 1.0, "quality": given}
        cases += [
            Case("serenade.initial_pairs", key, {"epsilon": 1.0, "quality": given}, note),
            Case("serenade.extend_one", key, extend, note),
        ]
    # Grid-mode initial pairs (the auto presets' first call) are priced by other terms than
    # the continuous ones above (services/timing.py ``_pairs_setup_work``): measured apart.
    grid = {"epsilon": 1.0, "quality": quality | {"s": searched}}
    grid_options = {"options": {"threshold_mode": "grid"}}
    cases.append(Case("serenade.initial_pairs", key, grid | grid_options, "s given, grid"))
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
        Case("tree.mcmc", key, single | {"sampler": "mcmc"}),
        *_exact_tree_cases(metadata, key),
        *_exact_numeric_tree_cases(metadata, key),
        Case("tree.pair_mcmc", key, {"attribute": left_target, "epsilon": 1.0}),
        Case("tree.leaf_counts", key, trees),
    ]


def _exact_tree_cases(metadata: DatasetMetadata, key: str) -> list[Case]:
    """``tree.mcmc``'s exact sampler at depth 3 on the left view's Boolean and categorical
    attributes, when it fits (the calibrated factor of ``tree.mcmc`` is then the larger of the
    chain's and the exact sampler's, so both paths' budgets cover their measured times)."""
    target = _tree_target(metadata, "right")
    discrete = [a.name for a in metadata.attributes if a.view == "left" and a.type != "numeric"]
    request = {
        "view": "left",
        "target": target,
        "epsilon": 1.0,
        "columns": [*discrete, target["attribute"]],
        "sampler": "auto",
    }
    model = TreeMCMCRequest.model_validate(request)
    try:
        CATALOG["tree.mcmc"].validate(model, metadata)
    except ValueError:
        return []
    if mcmc_sampler(model, metadata) != "exact":
        return []
    return [Case("tree.mcmc", key, request | {"sampler": "exact"}, note="exact sampler")]


def _exact_numeric_tree_cases(metadata: DatasetMetadata, key: str) -> list[Case]:
    """``tree.mcmc``'s exact sampler on the right view's first numeric attribute alone, at the
    largest depth ≤ 3 that fits: its lattice thresholds in split groups, as many as the data
    has distinct values (all of them on ``distinct``: the bound's worst case)."""
    numeric = [a.name for a in metadata.attributes if a.view == "right" and a.type == "numeric"]
    if not numeric:
        return []
    target = _tree_target(metadata, "left")
    for depth in (3, 2, 1):
        request = {
            "view": "right",
            "target": target,
            "depth": depth,
            "epsilon": 1.0,
            "columns": [numeric[0], target["attribute"]],
            "sampler": "auto",
        }
        model = TreeMCMCRequest.model_validate(request)
        try:
            CATALOG["tree.mcmc"].validate(model, metadata)
        except ValueError:
            continue
        if mcmc_sampler(model, metadata) == "exact":
            note = "exact sampler, numeric split groups"
            return [Case("tree.mcmc", key, request | {"sampler": "exact"}, note=note)]
    return []


def _released_tree(store: ColumnStore, view: View, target: dict[str, Any]) -> dict[str, Any]:
    """A tree released by one (untimed) ``tree.expmech`` call: the input of leaf counts."""
    request = {"view": view, "target": target, "epsilon": 1.0}
    fields = run_kernel(CATALOG["tree.expmech"], store, request)
    tree: dict[str, Any] = fields["tree"].model_dump(mode="json")
    return tree


def _rule_list_cases(dataset: Dataset) -> list[Case]:
    metadata = dataset.store.metadata
    if metadata.label is None:
        return []
    key = dataset.key
    selected = run_kernel(CATALOG["brl.antecedents"], dataset.store, {"epsilon": 1.0})
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


def adversarial(key: str, rows: int) -> Dataset:
    """The adversarial dataset ``key`` (:data:`ADVERSARIAL`) at ``rows`` rows (``reject`` and
    ``wide`` at a quarter of them, at least 1,000, ``wide`` at most 5,000: their kernels are
    the slowest per row)."""
    builders: dict[str, Callable[[], Dataset]] = {
        "distinct": lambda: distinct(rows),
        "dense": lambda: dense(rows),
        "reject": lambda: reject(max(rows // 4, 1_000)),
        "wide": lambda: wide(min(max(rows // 4, 1_000), 5_000)),
    }
    return builders[key]()


def run_kernel(
    spec: OperationSpec[Any, Any], store: ColumnStore, body: dict[str, Any]
) -> dict[str, Any]:
    """One call of an operation's kernel as the executor makes it (nothing is released)."""
    request = spec.request_model.model_validate(body)
    spec.validate(request, store.metadata)
    return spec.run(store, request, spec.cost(request), secure_generator(), no_progress)


def _timed(case: Case, store: ColumnStore, repeats: int) -> tuple[float, float, str | None]:
    """The hand-set work of ``case``, its worst kernel time over ``repeats`` calls after one
    untimed first call, and the kernel variant it ran (services/timing.py
    ``pricing_variant``). The first call pays what a serving process pays in its warm-up
    (imports, compiled kernels); each timed call runs on a :meth:`~dpmine_server.data.columns.
    ColumnStore.fresh_copy` of the store, as the first request after a load does, since the
    budget is priced without knowing which values earlier requests left cached. Timing calls
    on a store that the first call had filled measured ``serenade.extend_one`` drawing from
    cached candidate sets (1 ms on ``wide`` at 2,000 rows) against work priced for building
    them (220 ms on a fresh store), so its budget fell short of every first call. For the
    same reason each timed call finds the process's caches of public values empty
    (:func:`~dpmine_server.public_cache.clear_public_caches`: quality parameters, lattices,
    prior tables, noise builders), as a request with parameters this process has not seen
    does: 10–16 ms more on small Serenade and tree calls (a calibration of version 2 timed
    them filled)."""
    spec = CATALOG[case.operation]
    request = spec.request_model.model_validate(case.request)
    spec.validate(request, store.metadata)
    cost = spec.cost(request)
    work = operation_work(case.operation, request, store.metadata)
    variant = pricing_variant(case.operation, request, store.metadata)
    worst = 0.0
    for repetition in range(repeats + 1):
        fresh = store.fresh_copy() if repetition else store
        if repetition:
            clear_public_caches()
        start = time.perf_counter()
        spec.run(fresh, request, cost, secure_generator(), no_progress)
        elapsed = time.perf_counter() - start
        if repetition:
            worst = max(worst, elapsed)
    return work, worst, variant


def machine() -> dict[str, Any]:
    """The machine the factors were measured on (public: written into the file)."""
    cpu = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        cpu = platform.processor() or None
    return {
        "cpu_model": cpu,
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": np.__version__,
    }


def _factor_and_floor(measured: Sequence[CalibrationCase]) -> tuple[float, float]:
    """The largest seconds per work unit over ``measured`` (at least 1e-9: a kernel faster
    than the clock still gets a positive factor) and the smallest case's worst time."""
    factor = max([case.max_seconds / case.work for case in measured] + [1e-9])
    return factor, min(case.max_seconds for case in measured)


def _variants(measured: Sequence[CalibrationCase]) -> dict[str, VariantCalibration]:
    """Per kernel variant among ``measured``: the factor and floor over its cases alone (the
    operation's own factor stays the largest over all of them)."""
    names = sorted({case.variant for case in measured if case.variant is not None})
    variants = {}
    for name in names:
        factor, floor = _factor_and_floor([case for case in measured if case.variant == name])
        variants[name] = VariantCalibration(factor=factor, floor_seconds=floor)
    return variants


def _operation(measured: list[CalibrationCase]) -> OperationCalibration:
    """One operation's calibration: factor and floor over every case, and per variant."""
    factor, floor = _factor_and_floor(measured)
    return OperationCalibration(
        factor=factor, floor_seconds=floor, cases=measured, variants=_variants(measured)
    )


def calibrate(
    sizes: Sequence[int],
    repeats: int,
    *,
    quick: bool = False,
    operations: Sequence[str] = PRICED_OPERATIONS,
    report: Callable[[str], None] | None = None,
) -> TimingCalibration:
    """Time every priced operation on the adversarial data at each of ``sizes`` rows and
    return the calibration (factor, floor and cases per operation of ``operations``, and per
    kernel variant where the operation has several, :func:`_variants`; :data:`MARGIN`). A
    case refused before its charge (not applicable to that dataset) is skipped, as is a case
    whose hand-set work is zero."""
    say = report or (lambda _line: None)
    cases: dict[str, list[CalibrationCase]] = {name: [] for name in operations}
    for rows in sizes:
        for key in ADVERSARIAL:
            dataset = adversarial(key, rows)
            say(f"{dataset.key}: {dataset.note}")
            for case in cases_for(dataset):
                if case.operation not in cases:
                    continue
                try:
                    work, worst, variant = _timed(case, dataset.store, repeats)
                except ValueError as error:
                    say(f"  {case.operation:24} skipped: {error}")
                    continue
                if work <= 0:
                    continue
                n_max = dataset.store.metadata.n_max
                cases[case.operation].append(
                    CalibrationCase(
                        dataset=key,
                        note=case.note,
                        n_max=n_max,
                        work=work,
                        max_seconds=worst,
                        variant=variant,
                    )
                )
                say(f"  {case.operation:24} work {work:10.4f}, max {worst:8.4f} s")
    calibrated = {name: _operation(measured) for name, measured in cases.items() if measured}
    return TimingCalibration(
        version=CALIBRATION_VERSION,
        margin=MARGIN,
        created=datetime.now(UTC).isoformat(timespec="seconds"),
        quick=quick,
        machine=machine(),
        operations=calibrated,
    )
