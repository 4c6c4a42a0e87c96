"""Trust benchmark of issue #21: is what dpmine's miners print true on the exact data?

For every (table, miner, ε) cell, over ``--runs`` whole runs through the analyst client against a
real uvicorn server (SQLite, development mode, release padding off), each shown result (the
default output ``results_``, after the noise-aware test) is checked on the exact data:

* **printed ≡ measured**: the printed query *text*, parsed with :mod:`dpmine.queries` and
  evaluated by this harness (``bench_serenade.evaluate_query``: the README's query semantics,
  missing values included), holds row for row (by position, i.e. by id) the rows the release
  measured. Those are recomputed from the miner's internal representation with the server's own
  code in-process: Serenade's query objects (``ColumnStore.evaluate``), a tree result's active
  cells of the released trees (``tree_leaves`` + the cell of rows outside every leaf), an
  itemset's items from the server's item catalog. Checked on ``all_results_`` too.
* **truly significant**: the §1.3 p-value (``dpmine.stats.p_value``) of the printed queries'
  exact cells ≤ 0.01; **true excess** J − J_ind ≥ 0.05 (J_ind of
  ``dpmine.intervals.independence_jaccard``);
* **coverage**: the share of shown results whose printed joint intervals (|I|, |U|, J, both
  supports, excess, p-value: those ``to_json``/the CLI print) all hold the exact values, and
  per statistic;
* for top-K itemsets: itemsets shown, coverage of the count intervals, printed ≡ measured, and
  the share that are truly among the top K' = ⌈1.5 K⌉ (exact count ≥ the K'-th largest exact
  count of the valid itemsets of that length).

``--zcdp DELTA`` (issue #24): every Serenade and tree-miner cell also runs on a copy of its
table whose ledger counts zCDP ρ, with the budget ρ = the largest ρ whose conversion
ρ + 2√(ρ ln 1/δ) stays ≤ ε (the server's ``rho_cap_for``: the run is (ε, δ)-DP); the report sets
its truly significant shown results per run and median true J of the shown results beside pure
ε's, with the issue's targets on mammals and asia at ε = 1 (Serenade: ≥ 3× the pure figure at a
median true J ≥ 0.75; tree miners: a median true J ≥ pure ε's + 0.05).

Also: ``all_results_`` count, m (results examined) and wall time per run. A run that fails is
recorded with its error and the benchmark goes on. Tables: mammals and asia (the splits of
``bench_serenade``) and the weak health tables of ``trust_views.py`` (declared before any
result). Metadata: ``propose_metadata`` on the written CSVs, confirmed by the owner (the
harness) as proposed.

Usage::

    PYTHONPATH=client:server .venv/bin/python bench/bench_trust.py [--quick] [--runs N]
        [--tables mammals,asia,stroke,heart,pima,mimic,rwas] [--epsilons 1,0.5]
        [--miners SerenadeCS,SerenadeES,AltExpM,AltMCMC,MCMCTreePair,TopKItemsets]
        [--out bench/out] [--baseline f614ac4] [--zcdp 1e-6]

``--baseline COMMIT`` also measures that commit's redescription miners (issue #21's "as many
significant results per run as today": f614ac4, the code before the noise-aware display): a
detached ``git worktree`` of it, its own server (imports checked from /proc) and its own client
(``trust_baseline.py`` in a subprocess), whose default output's printed texts are evaluated here
on the exact data; the report sets this tree's truly significant shown results per run against
the baseline's, PASS when this tree's is at least the baseline's.

Writes ``<out>/trust.json`` (every run, every shown result's checks, the summaries and the
Markdown report; ``trust_partial.json`` after every run); prints Markdown tables.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import heapq
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

import dpmine
from _support import (
    REPO_ROOT,
    ServerHandle,
    comma_names,
    load_average,
    machine_info,
    median,
    mine_whole,
    owner_confirmed,
    server_for_backend,
    unwind_on_sigterm,
)
from bench_foundation import Code, verify_server_code
from bench_serenade import (
    DATA_ROOT,
    SMOKE_KEY,
    VIEW_CHOOSERS,
    HarnessData,
    PreparedData,
    ViewChoice,
    evaluate_query,
    load_harness_data,
    prepare_dataset,
    register_all,
    view_choice,
)
from dpmine.intervals import (
    Interval,
    StatisticIntervals,
    box_intervals,
    excess_range,
    independence_jaccard,
    p_value_range,
)
from dpmine.miners import (
    AltExpM,
    AltMCMC,
    MCMCTreePair,
    MinedItemset,
    MinedTreeRedescription,
    SerenadeCS,
    SerenadeES,
    TopKItemsets,
)
from dpmine.miners.greedy import MinedRedescription
from dpmine.queries import parse_query
from dpmine.significance import CHECKS, failed_checks, passes
from dpmine.stats import p_value
from dpmine.treereds import TreeRedescription, active_cells
from dpmine.wire import And, CreateDatasetRequest, DecisionTree, Not, Or, Redescription
from dpmine.wire.query_tree import attributes
from dpmine_server.data.bitsets import Bitset
from dpmine_server.data.columns import ColumnStore
from dpmine_server.data.loaders import load_store
from dpmine_server.data.propose import propose_metadata
from dpmine_server.dp.zcdp import rho_cap_for
from dpmine_server.operations.itemsets import request_catalog
from dpmine_server.operations.tree_kernels import tree_leaves
from trust_views import HELD_OUT_TABLES, WEAK_TABLES, write_pair

BoolArray = npt.NDArray[np.bool_]

TABLES = ("mammals", "asia", *WEAK_TABLES)
#: Run only when named in ``--tables`` (trust_views.HELD_OUT_TABLES).
HELD_OUT = tuple(HELD_OUT_TABLES)
QUICK_TABLES = ("pima", "mimic")
MINERS = ("SerenadeCS", "SerenadeES", "AltExpM", "AltMCMC", "MCMCTreePair", "TopKItemsets")
EPSILONS = (1.0, 0.5)
RUNS = 5
GRANT_EPSILON = 100_000.0
CLIENT_TIMEOUT_S = 1800.0
#: The targets of issue #21.
P_GOOD = 0.01
EXCESS_GOOD = 0.05
TARGET_PRINTED = 1.0
TARGET_SIGNIFICANT = 0.95
TARGET_EXCESS = 0.90
TARGET_COVERAGE = 0.90
#: Top-K: shown itemsets should be among the exact top K' = ceil(TOPK_SLACK · K).
TOPK_SLACK = 1.5
#: The code before the noise-aware display (issue #21's "today"): ``--baseline`` measures it.
BASELINE_COMMIT = "f614ac4"
#: The miners ``--baseline`` runs at the baseline commit (top-K itemsets are left out).
BASELINE_MINERS = ("SerenadeCS", "SerenadeES", "AltExpM", "AltMCMC", "MCMCTreePair")
#: The script that runs the baseline's own client (see its docstring).
BASELINE_SCRIPT = Path(__file__).resolve().parent / "trust_baseline.py"


@dataclass(frozen=True)
class Config:
    """What one run of the benchmark does."""

    out: Path
    tables: tuple[str, ...]
    miners: tuple[str, ...]
    epsilons: tuple[float, ...]
    runs: int
    #: A commit whose default output is measured too (None: only this tree).
    baseline: str | None = None
    #: The tree miners' preset ("auto" / "paper"; None: their default).
    tree_preset: str | None = None
    #: ``--smoke``: the bundled Mushroom views only (the test suite's check).
    smoke: bool = False
    #: ``--zcdp DELTA``: the Serenade cells also on zCDP copies at (ε, δ) (None: not run).
    zcdp_delta: float | None = None


# -- the tables ----------------------------------------------------------------------------------


def prepare_table(key: str, scratch: Path) -> PreparedData:
    """Write the table's two views and propose + confirm its metadata (owner side)."""
    if key in VIEW_CHOOSERS or key == SMOKE_KEY:
        return prepare_dataset(view_choice(key, DATA_ROOT, scratch), scratch / key)
    return prepare_dataset(weak_table_choice(key, scratch), scratch / key)


def weak_table_choice(key: str, scratch: Path) -> ViewChoice:
    """The declared views of the weak-structure table ``key`` (trust_views.WEAK_TABLES),
    written as two CSV files under ``scratch``."""
    spec = {**WEAK_TABLES, **HELD_OUT_TABLES}[key]
    raw = scratch / f"{key}-raw"
    write_pair(spec, DATA_ROOT, raw)
    return ViewChoice(
        key=key,
        title=spec.title,
        folder=raw,
        left_file="left.csv",
        right_file="right.csv",
        left=list(spec.left),
        right=list(spec.right),
        note=spec.rationale,
    )


def _proposal_check(data: PreparedData) -> None:
    """The proposal ``prepare_dataset`` confirmed must be the one ``propose_metadata`` makes."""
    fresh = owner_confirmed(propose_metadata(data.source, kind="views", base_dir=data.directory))
    if fresh != data.metadata:
        raise RuntimeError(f"{data.key}: the confirmed metadata is not the proposal")


# -- exact evaluation ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Truth:
    """A table in the harness: its parse (for printed text) and the server's store (for what a
    release measured), both from the same files."""

    data: PreparedData
    harness: HarnessData
    store: ColumnStore

    @property
    def n_rows(self) -> int:
        """Every row of the table."""
        return self.harness.n_rows

    def printed_rows(self, text: str) -> BoolArray:
        """Rows of the printed ``text`` under the README's semantics (harness evaluator)."""
        return evaluate_query(parse_query(text), self.harness)

    def server_rows(self, text: str) -> BoolArray:
        """Rows of the printed ``text`` by the server's evaluator (a cross-check of the
        harness)."""
        return self.store.evaluate(parse_query(text)).to_bool_array()


@dataclass(frozen=True)
class Exact:
    """Exact statistics of a pair of row sets."""

    n: int
    left: int
    right: int
    inter: int
    union: int
    jaccard: float
    p: float
    excess: float


def exact_of(left: BoolArray, right: BoolArray) -> Exact:
    """|L|, |R|, |I|, |U|, J, the §1.3 p-value and J − J_ind over all rows."""
    n = int(left.size)
    s_left, s_right = int(left.sum()), int(right.sum())
    inter, union = int((left & right).sum()), int((left | right).sum())
    jaccard = inter / union if union else 0.0
    x, y = (s_left / n, s_right / n) if n else (0.0, 0.0)
    return Exact(
        n=n,
        left=s_left,
        right=s_right,
        inter=inter,
        union=union,
        jaccard=jaccard,
        p=p_value(n, s_left, s_right, inter),
        excess=jaccard - independence_jaccard(x, y),
    )


def rows_key(left: BoolArray, right: BoolArray) -> str:
    """A digest of the pair of row sets a result's printed texts hold: two results with the
    same key are the same redescription, however their queries read."""
    digest = hashlib.sha256(np.packbits(left).tobytes())
    digest.update(np.packbits(right).tobytes())
    return digest.hexdigest()[:16]


def distinct_significant(results: Sequence[Checked] | Sequence[BaselineChecked]) -> int:
    """Distinct row-set pairs among the truly significant results of one run."""
    return len({r.rows_key for r in results if r.exact["p"] <= P_GOOD})


def _inside(interval: Interval | None, value: float) -> bool | None:
    if interval is None:
        return None
    return interval.low - 1e-9 <= value <= interval.high + 1e-9


def coverage_of(intervals: StatisticIntervals, exact: Exact) -> dict[str, bool | None]:
    """Which printed joint intervals hold the exact value (None: not printed)."""
    return {
        "support": _inside(intervals.support, exact.inter),
        "union": _inside(intervals.union, exact.union),
        "jaccard": _inside(intervals.jaccard, exact.jaccard),
        "support_left": _inside(intervals.support_left, exact.left),
        "support_right": _inside(intervals.support_right, exact.right),
        "excess": _inside(intervals.excess, exact.excess),
        "p_value": _inside(intervals.p_value, exact.p),
    }


@dataclass
class Checked:
    """One result of a run and its checks on the exact data."""

    left: str
    right: str
    shown: bool
    printed_is_measured: bool
    #: The harness and the server's evaluator agree on the printed text's rows.
    evaluators_agree: bool
    exact: dict[str, float]
    noisy_jaccard: float
    jaccard_interval: tuple[float, float]
    coverage: dict[str, bool | None]
    #: Rows where printed and measured differ (left, right), when they do.
    differing_rows: tuple[int, int] = (0, 0)
    #: :func:`rows_key` of the printed rows.
    rows_key: str = ""
    #: Whether it passes the test as it read the same release before 2026-11-28
    #: (:func:`intervals_before`).
    shown_whole_box: bool = False
    #: The checks of the noise-aware test it failed (``dpmine.significance.CHECKS`` names).
    failed_checks: tuple[str, ...] = ()

    @property
    def covered(self) -> bool:
        """Every printed interval holds its exact value."""
        return all(v for v in self.coverage.values() if v is not None)


def check_pair(
    truth: Truth,
    *,
    left_text: str,
    right_text: str,
    measured: tuple[BoolArray, BoolArray],
    intervals: StatisticIntervals,
    noisy_jaccard: float,
    shown: bool,
    shown_whole_box: bool = False,
    failed_checks: tuple[str, ...] = (),
) -> Checked:
    """Evaluate the printed text, compare with the measured rows, score on the exact data."""
    left, right = truth.printed_rows(left_text), truth.printed_rows(right_text)
    agree = bool(
        np.array_equal(left, truth.server_rows(left_text))
        and np.array_equal(right, truth.server_rows(right_text))
    )
    differ = (int((left != measured[0]).sum()), int((right != measured[1]).sum()))
    exact = exact_of(left, right)
    return Checked(
        left=left_text,
        right=right_text,
        shown=shown,
        printed_is_measured=differ == (0, 0),
        evaluators_agree=agree,
        exact=asdict(exact),
        noisy_jaccard=noisy_jaccard,
        jaccard_interval=(intervals.jaccard.low, intervals.jaccard.high),
        coverage=coverage_of(intervals, exact),
        differing_rows=differ,
        rows_key=rows_key(left, right),
        shown_whole_box=shown_whole_box,
        failed_checks=failed_checks,
    )


def intervals_before(
    result: MinedRedescription | MinedTreeRedescription,
) -> StatisticIntervals | None:
    """The joint intervals as the test read them before 2026-11-28, from the same release: the
    result's box without the range of E10 + E01 (tree results), the excess's ends over the
    whole box (``excess_range(box, splits=1)``) and the p-value's upper end from the whole
    box's corners (``p_value_range(box, refine=False)``); None where the result has no box of
    four cells ("paper" quality mode)."""
    box = result.joint_box
    if box is None:
        return None
    box = replace(box, difference=None)
    now = result.joint_intervals
    plain = box_intervals(box, level=now.level, scale=now.scale, kind=now.noise)
    return replace(
        plain, excess=excess_range(box, splits=1), p_value=p_value_range(box, refine=False)
    )


# -- redescription miners ------------------------------------------------------------------------

Miner = SerenadeCS | SerenadeES | AltExpM | AltMCMC | MCMCTreePair


def _seed(name: str, epsilon: float, repetition: int) -> int:
    """The public seed of a run's attribute draws (tree miners), the same for both codes."""
    return 7919 * repetition + 31 * MINERS.index(name) + int(10 * epsilon)


def make_miner(
    name: str,
    epsilon: float,
    seed: int,
    tree_preset: str | None = None,
    rho: float | None = None,
) -> Miner:
    """A miner as a new user gets it: defaults (Serenade's ``auto`` preset), ε (or ``rho`` on a
    zCDP dataset), a seed for the tree miners' public attribute draws; ``tree_preset``
    ("auto" / "paper", None: the default) picks the tree miners' preset."""
    trees: dict[str, Any] = {} if tree_preset is None else {"preset": tree_preset}
    if rho is not None:  # the budget is ρ; ε stays at the miners' default
        epsilon = 1.0
    if name in ("SerenadeCS", "SerenadeES"):
        serenade = SerenadeCS if name == "SerenadeCS" else SerenadeES
        return serenade(epsilon=epsilon, rho=rho)
    if name == "AltExpM":
        return AltExpM(epsilon=epsilon, rho=rho, seed=seed, **trees)
    if name == "AltMCMC":
        return AltMCMC(epsilon=epsilon, rho=rho, seed=seed, **trees)
    if name == "MCMCTreePair":
        return MCMCTreePair(epsilon=epsilon, rho=rho, seed=seed, **trees)
    raise ValueError(f"unknown miner {name}")


@dataclass(frozen=True)
class _TreeMeasure:
    """What a tree result measured: its leaf queries and the released pair's trees."""

    red: TreeRedescription
    shape: tuple[int, int]
    partition: bool
    round: int


def capture_tree_measures(
    miner: AltExpM | AltMCMC | MCMCTreePair,
) -> dict[int, tuple[MinedTreeRedescription, _TreeMeasure]]:
    """Record, for every result the miner builds, the leaf query it measured (its internal
    representation, which the result object does not keep). Keyed by ``id`` with the result
    held, so that ids stay unique."""
    captured: dict[int, tuple[MinedTreeRedescription, _TreeMeasure]] = {}
    original = miner._result_of

    def recording(red: TreeRedescription, *args: Any, **kwargs: Any) -> MinedTreeRedescription:
        result = original(red, *args, **kwargs)
        measure = _TreeMeasure(
            red=red, shape=kwargs["shape"], partition=kwargs["partition"], round=result.round
        )
        captured[id(result)] = (result, measure)
        return result

    setattr(miner, "_result_of", recording)  # noqa: B010 (an instance attribute on purpose)
    return captured


def _cells(store: ColumnStore, tree: DecisionTree) -> list[BoolArray]:
    """Rows of every leaf of ``tree`` and, last, the rows outside every leaf."""
    leaves = tree_leaves(store, tree)
    everyone = store.all_rows().words
    outside = everyone & ~np.bitwise_or.reduce(leaves, axis=0)
    return [
        Bitset(np.ascontiguousarray(words), store.n_rows).to_bool_array()
        for words in [*leaves, outside]
    ]


def tree_measured(
    truth: Truth, trees: tuple[DecisionTree, DecisionTree], measure: _TreeMeasure
) -> tuple[BoolArray, BoolArray]:
    """The rows a tree result's statistics count: the union of its active cells."""
    sides = []
    for tree, query, n_leaves in zip(
        trees, (measure.red.left, measure.red.right), measure.shape, strict=True
    ):
        cells = _cells(truth.store, tree)
        rows = np.zeros(truth.n_rows, dtype=bool)
        for cell in active_cells(query, n_leaves, outside=measure.partition):
            rows |= cells[cell]
        sides.append(rows)
    return sides[0], sides[1]


def serenade_measured(truth: Truth, red: Redescription) -> tuple[BoolArray, BoolArray]:
    """The rows of the query objects Serenade sent to ``red.compute_quality``."""
    return (
        truth.store.evaluate(red.left).to_bool_array(),
        truth.store.evaluate(red.right).to_bool_array(),
    )


@dataclass
class RunRecord:
    """One whole run of one miner and its checked results."""

    table: str
    miner: str
    epsilon: float
    repetition: int
    status: str
    wall_s: float
    load_average: tuple[float, float, float]
    shown: int = 0
    all_results: int = 0
    examined: int = 0
    epsilon_spent: float = 0.0
    results: list[Checked] = field(default_factory=list)
    itemsets: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""
    #: "zcdp": run on the table's zCDP copy with the budget ``rho`` ((ε, δ) by its conversion).
    unit: str = "pure"
    rho: float | None = None
    rho_spent: float | None = None


def run_redescriptions(
    handle: dpmine.DatasetHandle,
    truth: Truth,
    *,
    name: str,
    epsilon: float,
    repetition: int,
    tree_preset: str | None = None,
    rho: float | None = None,
) -> RunRecord:
    """One whole ``mine()`` over HTTP, then every result checked on the exact data."""
    miner = make_miner(name, epsilon, _seed(name, epsilon, repetition), tree_preset, rho)
    captured = (
        capture_tree_measures(miner)
        if isinstance(miner, AltExpM | AltMCMC | MCMCTreePair)
        else None
    )
    load = load_average()
    start = time.perf_counter()
    mine_whole(miner, handle)
    wall = time.perf_counter() - start
    verdict = miner.significance()
    shown = {id(r) for r in verdict.passed}
    everything: Sequence[MinedRedescription | MinedTreeRedescription] = verdict.ranked
    summary = verdict.summary
    checked: list[Checked] = []
    for result in everything:
        before = intervals_before(result)
        shown_whole_box = before is not None and passes(
            before, threshold=summary.threshold, min_jaccard=summary.min_jaccard
        )
        if isinstance(result, MinedTreeRedescription):
            assert captured is not None
            assert isinstance(miner, AltExpM | AltMCMC | MCMCTreePair)
            measure = captured[id(result)][1]
            measured = tree_measured(truth, miner.trees_[measure.round], measure)
            noisy_j = result.statistics.jaccard
        else:
            measured = serenade_measured(truth, result.redescription)
            noisy_j = result.noisy_jaccard
        checked.append(
            check_pair(
                truth,
                left_text=result.left,
                right_text=result.right,
                measured=measured,
                intervals=result.joint_intervals,
                noisy_jaccard=noisy_j,
                shown=id(result) in shown,
                shown_whole_box=shown_whole_box,
                failed_checks=failed_checks(
                    result.joint_intervals,
                    threshold=summary.threshold,
                    min_jaccard=summary.min_jaccard,
                ),
            )
        )
    return RunRecord(
        table=truth.data.key,
        miner=name,
        epsilon=epsilon,
        repetition=repetition,
        status="ok",
        wall_s=round(wall, 3),
        load_average=load,
        shown=summary.passed,
        all_results=summary.total,
        examined=summary.examined,
        epsilon_spent=miner.budget_spent_,
        results=checked,
        unit="pure" if rho is None else "zcdp",
        rho=rho,
        rho_spent=None
        if rho is None
        else float(sum(Decimal(r.zcdp.rho_exact) for r in miner.receipts_ if r.zcdp is not None)),
    )


# -- top-K itemsets ------------------------------------------------------------------------------


def exact_kth_count(matrix: BoolArray, group_of: Sequence[int], length: int, k: int) -> int:
    """The k-th largest exact count among valid itemsets of ``length`` items (at most one item
    per group), by pairs in descending count with the Apriori bound (a triple's count ≤ each of
    its pairs'). Lengths 1–3."""
    counts_1 = matrix.sum(axis=0).astype(np.int64)
    m = matrix.shape[1]
    valid = np.array(group_of)[:, None] != np.array(group_of)[None, :]
    if length == 1:
        ranked = np.sort(counts_1)[::-1]
        return int(ranked[k - 1]) if ranked.size >= k else 0
    as_int = matrix.astype(np.int32)
    pairs = as_int.T @ as_int
    upper = np.triu(valid, 1)
    if length == 2:
        ranked = np.sort(pairs[upper])[::-1]
        return int(ranked[k - 1]) if ranked.size >= k else 0
    if length != 3:
        raise ValueError("the harness checks itemsets of length 1 to 3")
    order = np.argwhere(upper)
    order = order[np.argsort(-pairs[upper], kind="stable")]
    top: list[int] = []  # min-heap of the k largest triple counts
    seen: set[tuple[int, int, int]] = set()
    for i, j in order:
        bound = int(pairs[i, j])
        if len(top) == k and bound <= top[0]:
            break
        both = matrix[:, i] & matrix[:, j]
        triple = both.astype(np.int32) @ as_int
        for third in range(m):
            if not (valid[i, third] and valid[j, third]):
                continue
            key = tuple(sorted((int(i), int(j), third)))
            if key in seen:
                continue
            seen.add((key[0], key[1], key[2]))
            count = int(triple[third])
            if len(top) < k:
                heapq.heappush(top, count)
            elif count > top[0]:
                heapq.heapreplace(top, count)
    return top[0] if len(top) == k else 0


def run_itemsets(
    handle: dpmine.DatasetHandle, truth: Truth, *, epsilon: float, repetition: int
) -> RunRecord:
    """One ``TopKItemsets`` run at its defaults, checked on the exact data."""
    miner = TopKItemsets(epsilon=epsilon)
    load = load_average()
    start = time.perf_counter()
    mine_whole(miner, handle)
    wall = time.perf_counter() - start
    schema = truth.data.metadata
    catalog = request_catalog(miner.request_, schema)
    item_rows = np.column_stack(
        [truth.store.evaluate(literal).to_bool_array() for literal in catalog.literals]
    )
    length = miner.length_[1]
    k_prime = math.ceil(TOPK_SLACK * miner.k)
    kth = exact_kth_count(item_rows, catalog.group_of, length, k_prime)
    checked: list[dict[str, Any]] = []
    for itemset in miner.all_itemsets_:
        checked.append(_check_itemset(truth, itemset, catalog.names, item_rows, kth))
    return RunRecord(
        table=truth.data.key,
        miner="TopKItemsets",
        epsilon=epsilon,
        repetition=repetition,
        status="ok",
        wall_s=round(wall, 3),
        load_average=load,
        shown=len(miner.itemsets_),
        all_results=len(checked),
        examined=len(checked),
        epsilon_spent=miner.budget_spent_,
        itemsets=checked,
    )


def _check_itemset(
    truth: Truth,
    itemset: MinedItemset,
    names: Sequence[str],
    item_rows: BoolArray,
    kth: int,
) -> dict[str, Any]:
    measured = np.ones(truth.n_rows, dtype=bool)
    for item in itemset.items:
        measured &= item_rows[:, names.index(item)]
    true_count = int(measured.sum())
    printed = None if itemset.query is None else truth.printed_rows(itemset.query)
    covered = (
        None
        if itemset.count_low is None or itemset.count_high is None
        else itemset.count_low <= true_count <= itemset.count_high
    )
    return {
        "items": list(itemset.items),
        "shown": itemset.confirmed is not False,
        "query": itemset.query,
        "noisy_count": itemset.noisy_count,
        "count_interval": [itemset.count_low, itemset.count_high],
        "true_count": true_count,
        "covered": covered,
        "printed_is_measured": printed is not None and bool(np.array_equal(printed, measured)),
        "differing_rows": None if printed is None else int((printed != measured).sum()),
        "in_top_k_prime": true_count >= kth,
        "kth_prime_count": kth,
    }


# -- the grid ------------------------------------------------------------------------------------

#: The zCDP copies' cap and the analyst's grant on them, in ρ (far above any run).
ZCDP_GRANT_RHO = 100_000.0
#: The miners that take a ρ budget (issue #24 item 3, Serenade part).
ZCDP_MINERS = ("SerenadeCS", "SerenadeES", "AltExpM", "AltMCMC", "MCMCTreePair")


def zcdp_id(key: str) -> str:
    """The id of a table's zCDP copy."""
    return f"{key}-zcdp"


def zcdp_rho(epsilon: float, delta: float) -> float:
    """The run's ρ budget at (ε, δ): the largest ρ whose ρ + 2√(ρ ln 1/δ) stays ≤ ε (the
    server's own rounding of a cap given as (ε, δ))."""
    return float(rho_cap_for(repr(epsilon), Decimal(repr(delta))).as_decimal())


def register_zcdp_copies(server: ServerHandle, prepared: Sequence[PreparedData]) -> None:
    """Upload each table again as a zCDP dataset (``zcdp_id``) and grant "analyst" ρ there."""
    with server.connect() as owner:
        for data in prepared:
            request = CreateDatasetRequest(
                id=zcdp_id(data.key),
                name=f"{data.choice.title} (zCDP)",
                accounting="zcdp",
                cap_rho=ZCDP_GRANT_RHO,
                metadata=data.metadata,
                source=data.source,
            )
            files = {"left": data.directory / "left.csv", "right": data.directory / "right.csv"}
            owner.admin.upload_dataset(request, files)
            owner.admin.grant(zcdp_id(data.key), "analyst", rho=ZCDP_GRANT_RHO)


def _cells_of(config: Config) -> list[tuple[float, str, float | None]]:
    """(ε, miner, ρ) of every cell: each miner at each ε, and with ``--zcdp`` each Serenade
    and tree miner at the ρ of (ε, δ) too."""
    cells: list[tuple[float, str, float | None]] = []
    for epsilon in config.epsilons:
        for name in config.miners:
            cells.append((epsilon, name, None))
            if config.zcdp_delta is not None and name in ZCDP_MINERS:
                cells.append((epsilon, name, zcdp_rho(epsilon, config.zcdp_delta)))
    return cells


def run_grid(
    prepared: Sequence[PreparedData], truths: Mapping[str, Truth], config: Config
) -> list[RunRecord]:
    """One server; every (table, ε, miner) ``runs`` times, repetition outermost. A failed run
    is recorded with its error."""
    records: list[RunRecord] = []
    with (
        tempfile.TemporaryDirectory(prefix="dpmine-bench-trust-") as work,
        server_for_backend(
            "sqlite", Path(work), extra_env={"DPMINE_TIMING_PADDING": "false"}
        ) as server,
    ):
        key = register_all(server, prepared, grant=GRANT_EPSILON)
        if config.zcdp_delta is not None:
            register_zcdp_copies(server, prepared)
        cells = _cells_of(config)
        total = config.runs * len(prepared) * len(cells)
        with server.connect(key, timeout=CLIENT_TIMEOUT_S) as connection:
            handles = {data.key: connection.dataset(data.key) for data in prepared}
            for data in prepared:  # load the files once, outside the timings
                handles[data.key].count(epsilon=0.01)
                if config.zcdp_delta is not None:
                    zcdp = connection.dataset(zcdp_id(data.key))
                    handles[zcdp_id(data.key)] = zcdp
                    zcdp.count(epsilon=0.01)
            for repetition in range(config.runs):
                for data in prepared:
                    for epsilon, name, rho in cells:
                        record = _one_run(
                            handles[data.key if rho is None else zcdp_id(data.key)],
                            truths[data.key],
                            name,
                            epsilon,
                            repetition,
                            tree_preset=config.tree_preset,
                            rho=rho,
                        )
                        if record.status != "ok":
                            print(f"server log tail:\n{server.log_tail()[-1500:]}")
                        records.append(record)
                        (config.out / "trust_partial.json").write_text(
                            json.dumps([asdict(r) for r in records]) + "\n"
                        )
                        print(f"  [{len(records):3}/{total}] {_progress_line(record)}", flush=True)
    return records


def _one_run(
    handle: dpmine.DatasetHandle,
    truth: Truth,
    name: str,
    epsilon: float,
    repetition: int,
    *,
    tree_preset: str | None = None,
    rho: float | None = None,
) -> RunRecord:
    start = time.perf_counter()
    try:
        if name == "TopKItemsets":
            return run_itemsets(handle, truth, epsilon=epsilon, repetition=repetition)
        return run_redescriptions(
            handle,
            truth,
            name=name,
            epsilon=epsilon,
            repetition=repetition,
            tree_preset=tree_preset,
            rho=rho,
        )
    except Exception as error:  # recorded and reported; the benchmark goes on
        return RunRecord(
            table=truth.data.key,
            miner=name,
            epsilon=epsilon,
            repetition=repetition,
            status="failed",
            wall_s=round(time.perf_counter() - start, 3),
            load_average=load_average(),
            error=f"{type(error).__name__}: {error}\n{traceback.format_exc(limit=6)}",
            unit="pure" if rho is None else "zcdp",
            rho=rho,
        )


def _progress_line(r: RunRecord) -> str:
    budget = f"ε={r.epsilon:<4g}" if r.rho is None else f"ρ={r.rho:.5g} (zCDP, ε={r.epsilon:g})"
    head = f"{r.table:8} {r.miner:13} {budget} run {r.repetition + 1}: {r.wall_s:7.1f} s"
    if r.status != "ok":
        return f"{head}, FAILED {r.error.splitlines()[0]}"
    if r.miner == "TopKItemsets":
        good = sum(bool(i["printed_is_measured"]) for i in r.itemsets)
        return (
            f"{head}, {r.shown} of {r.all_results} picks shown, printed≡measured "
            f"{good}/{len(r.itemsets)} (all picks)"
        )
    shown = [c for c in r.results if c.shown]
    sig = sum(c.exact["p"] <= P_GOOD for c in shown)
    same = sum(c.printed_is_measured for c in r.results)
    return (
        f"{head}, shown {r.shown} / all {r.all_results} (m = {r.examined}), truly significant "
        f"{sig}/{len(shown)}, printed≡measured {same}/{len(r.results)} (all results)"
    )


# -- the baseline commit (--baseline) ------------------------------------------------------------


@contextlib.contextmanager
def baseline_worktree(commit: str) -> Iterator[tuple[Path, str]]:
    """A detached ``git worktree`` of ``commit`` in a temporary folder (this checkout's working
    tree untouched), removed afterwards; yields (folder, short commit)."""
    with tempfile.TemporaryDirectory(prefix="dpmine-trust-baseline-") as scratch:
        folder = Path(scratch) / "code"
        subprocess.run(
            ["git", "-C", str(REPO_ROOT), "worktree", "add", "--detach", str(folder), commit],
            check=True,
            capture_output=True,
        )
        try:
            head = subprocess.run(
                ["git", "-C", str(folder), "rev-parse", "--short", "HEAD"],
                check=True,
                capture_output=True,
                text=True,
            ).stdout.strip()
            yield folder, head
        finally:
            subprocess.run(
                ["git", "-C", str(REPO_ROOT), "worktree", "remove", "--force", str(folder)],
                check=False,
                capture_output=True,
            )


def _baseline_pythonpath(folder: Path) -> str:
    return f"{folder / 'client'}:{folder / 'server'}"


def _baseline_jobs(prepared: Sequence[PreparedData], config: Config) -> list[dict[str, Any]]:
    """The runs of the baseline, in ``run_grid``'s order (repetition outermost)."""
    return [
        {
            "table": data.key,
            "miner": name,
            "epsilon": epsilon,
            "repetition": repetition,
            "seed": _seed(name, epsilon, repetition),
        }
        for repetition in range(config.runs)
        for data in prepared
        for epsilon in config.epsilons
        for name in config.miners
        if name in BASELINE_MINERS
    ]


def _run_baseline_client(
    server: ServerHandle, folder: Path, request: dict[str, Any], work: Path
) -> dict[str, Any]:
    """Run ``trust_baseline.py`` on the baseline's client (PYTHONPATH = the baseline only) and
    read its answer; raises if it imported anything else."""
    request_path, result_path = work / "baseline_request.json", work / "baseline_result.json"
    request_path.write_text(json.dumps(request) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPMINE_")}
    env["PYTHONPATH"] = _baseline_pythonpath(folder)
    done = subprocess.run(
        [sys.executable, str(BASELINE_SCRIPT), str(request_path), str(result_path)],
        env=env,
        cwd=work,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"the baseline client exited with status {done.returncode}; server log tail:\n"
            f"{server.log_tail()[-1500:]}"
        )
    answer: dict[str, Any] = json.loads(result_path.read_text())
    for package, where in answer["imports"].items():
        if not Path(where).resolve().is_relative_to(folder.resolve()):
            raise RuntimeError(f"the baseline client imported {package} from {where}")
    return answer


def run_baseline(
    prepared: Sequence[PreparedData], config: Config, commit: str
) -> tuple[str, dict[str, Any]]:
    """The baseline's miners through its own client against its own server (SQLite, padding
    off; the server's imports checked from /proc as in ``bench_foundation``) on the files the
    harness wrote; returns (short commit, the client's answer)."""
    with (
        baseline_worktree(commit) as (folder, head),
        tempfile.TemporaryDirectory(prefix="dpmine-bench-trust-baseline-") as scratch,
    ):
        work = Path(scratch)
        pythonpath = _baseline_pythonpath(folder)
        extra_env = {"DPMINE_TIMING_PADDING": "false", "PYTHONPATH": pythonpath}
        with server_for_backend("sqlite", work, extra_env=extra_env) as server:
            code = Code(label=f"baseline ({head})", root=folder, pythonpath=pythonpath)
            where = verify_server_code(server, code)
            print(f"baseline {head}: server imports {where}", flush=True)
            request = {
                "url": server.url,
                "owner_key": server.owner_key,
                "grant": GRANT_EPSILON,
                "tables": [
                    {"id": d.key, "title": d.choice.title, "folder": str(d.directory)}
                    for d in prepared
                ],
                "jobs": _baseline_jobs(prepared, config),
            }
            answer = _run_baseline_client(server, folder, request, work)
    answer["server_imports"] = where
    return head, answer


def columns_with_missing(harness: HarnessData) -> frozenset[str]:
    """The attributes with a missing value in some row."""
    missing = {name for name, (_, present) in harness.booleans.items() if not present.all()}
    missing |= {name for name, (_, present) in harness.categories.items() if not present.all()}
    missing |= {name for name, values in harness.numbers.items() if np.isnan(values).any()}
    return frozenset(missing)


def _negated_attributes(text: str) -> set[str]:
    """The attributes under a ``!( … )`` of a printed query."""
    found: set[str] = set()
    stack = [parse_query(text)]
    while stack:
        expr = stack.pop()
        if isinstance(expr, Not):
            found |= attributes(expr.term)
        elif isinstance(expr, And | Or):
            stack.extend(expr.terms)
    return found


@dataclass
class BaselineChecked:
    """One result the baseline printed, its text evaluated on the exact data."""

    left: str
    right: str
    exact: dict[str, float]
    noisy_jaccard: float
    evaluators_agree: bool
    #: A ``!( … )`` over an attribute with missing values: the baseline's tree miners measured
    #: a negated leaf as the other leaves, so its printed rows may differ from the measured ones.
    negation_over_missing: bool
    #: :func:`rows_key` of the printed rows.
    rows_key: str = ""


@dataclass
class BaselineRecord:
    """One whole run of the baseline's miner and its printed results checked."""

    table: str
    miner: str
    epsilon: float
    repetition: int
    status: str
    wall_s: float
    shown: int = 0
    epsilon_spent: float = 0.0
    parameters: dict[str, Any] = field(default_factory=dict)
    results: list[BaselineChecked] = field(default_factory=list)
    error: str = ""


def check_baseline(answer: Mapping[str, Any], truths: Mapping[str, Truth]) -> list[BaselineRecord]:
    """Every printed text evaluated with this tree's harness (README query semantics, as
    printed) and scored on the exact data as this tree's results are."""
    missing = {key: columns_with_missing(truth.harness) for key, truth in truths.items()}
    records = []
    for run in answer["runs"]:
        truth = truths[run["table"]]
        checked = []
        for result in run["results"]:
            left, right = truth.printed_rows(result["left"]), truth.printed_rows(result["right"])
            agree = bool(
                np.array_equal(left, truth.server_rows(result["left"]))
                and np.array_equal(right, truth.server_rows(result["right"]))
            )
            negated = _negated_attributes(result["left"]) | _negated_attributes(result["right"])
            checked.append(
                BaselineChecked(
                    left=result["left"],
                    right=result["right"],
                    exact=asdict(exact_of(left, right)),
                    noisy_jaccard=result["noisy_jaccard"],
                    evaluators_agree=agree,
                    negation_over_missing=bool(negated & missing[run["table"]]),
                    rows_key=rows_key(left, right),
                )
            )
        records.append(
            BaselineRecord(
                table=run["table"],
                miner=run["miner"],
                epsilon=run["epsilon"],
                repetition=run["repetition"],
                status=run["status"],
                wall_s=run["wall_s"],
                shown=len(checked),
                epsilon_spent=run.get("epsilon_spent", 0.0),
                parameters=run.get("parameters", {}),
                results=checked,
                error=run["error"],
            )
        )
    return records


def metadata_differences(answer: Mapping[str, Any], truths: Mapping[str, Truth]) -> list[str]:
    """Where the baseline's proposal (name, type, view per attribute) differs from this tree's:
    the printed texts are evaluated under this tree's."""
    notes = []
    for key, proposed in answer["metadata"].items():
        current = truths[key].data.metadata.model_dump(mode="json")["attributes"]
        now = {(a["name"], a["type"], a.get("view")) for a in current}
        then = {(a["name"], a["type"], a["view"]) for a in proposed["attributes"]}
        if now != then:
            notes.append(
                f"{key}: baseline only {sorted(then - now)}; this tree only {sorted(now - then)}"
            )
    return notes


@dataclass(frozen=True)
class BaselineSummary:
    """One (table, miner, ε) cell of the baseline over its runs."""

    table: str
    miner: str
    epsilon: float
    runs_ok: int
    runs_failed: int
    shown_per_run: list[int]
    significant_share: float | None
    significant_per_run: float | None
    excess_share: float | None
    negation_over_missing: int
    evaluators_agree_share: float | None
    parameters: dict[str, Any]
    errors: list[str]
    #: Distinct row-set pairs among the truly significant shown results, per run.
    distinct_significant_per_run: float | None = None


def summarise_baseline(records: Sequence[BaselineRecord]) -> list[BaselineSummary]:
    """One summary per (table, miner, ε), first-seen order."""
    keys = list(dict.fromkeys((r.table, r.miner, r.epsilon) for r in records))
    summaries = []
    for key in keys:
        runs = [r for r in records if (r.table, r.miner, r.epsilon) == key]
        ok = [r for r in runs if r.status == "ok"]
        shown = [c for r in ok for c in r.results]
        significant = [c.exact["p"] <= P_GOOD for c in shown]
        summaries.append(
            BaselineSummary(
                table=key[0],
                miner=key[1],
                epsilon=key[2],
                runs_ok=len(ok),
                runs_failed=len(runs) - len(ok),
                shown_per_run=[r.shown for r in ok],
                significant_share=_share(significant),
                significant_per_run=sum(significant) / len(ok) if ok else None,
                distinct_significant_per_run=(
                    sum(distinct_significant(r.results) for r in ok) / len(ok) if ok else None
                ),
                excess_share=_share([c.exact["excess"] >= EXCESS_GOOD for c in shown]),
                negation_over_missing=sum(c.negation_over_missing for c in shown),
                evaluators_agree_share=_share([c.evaluators_agree for c in shown]),
                parameters=ok[0].parameters if ok else {},
                errors=[r.error.splitlines()[0] for r in runs if r.status != "ok"],
            )
        )
    return summaries


@dataclass(frozen=True)
class BaselineResult:
    """What ``--baseline`` measured: the commit, every run checked, the summaries, where the
    server and the client imported the baseline from, and the metadata differences."""

    commit: str
    head: str
    records: list[BaselineRecord]
    summaries: list[BaselineSummary]
    server_imports: str
    client_imports: dict[str, str]
    metadata_notes: list[str]


def measure_baseline(
    prepared: Sequence[PreparedData],
    truths: Mapping[str, Truth],
    config: Config,
    commit: str,
) -> BaselineResult:
    """Run the baseline (``run_baseline``) and check what it printed on the exact data."""
    head, answer = run_baseline(prepared, config, commit)
    records = check_baseline(answer, truths)
    return BaselineResult(
        commit=commit,
        head=head,
        records=records,
        summaries=summarise_baseline(records),
        server_imports=answer["server_imports"],
        client_imports=answer["imports"],
        metadata_notes=metadata_differences(answer, truths),
    )


# -- summaries -----------------------------------------------------------------------------------


def _share(flags: Sequence[bool]) -> float | None:
    return sum(flags) / len(flags) if flags else None


@dataclass(frozen=True)
class CellSummary:
    """One (table, miner, ε) cell over its runs."""

    table: str
    miner: str
    epsilon: float
    runs_ok: int
    runs_failed: int
    shown_per_run: list[int]
    all_per_run: list[int]
    wall_s: list[float]
    shown_total: int
    significant_share: float | None
    significant_per_run: float | None
    excess_share: float | None
    coverage_share: float | None
    coverage_by_statistic: dict[str, float | None]
    printed_shown_share: float | None
    printed_all_share: float | None
    evaluators_agree_share: float | None
    in_top_k_prime_share: float | None
    errors: list[str]
    #: "zcdp": the cell ran on the zCDP copy at the ρ of (ε, δ) (``rho``).
    unit: str = "pure"
    rho: float | None = None
    #: Median exact J of the shown results (pooled over the runs).
    true_j_median: float | None = None
    #: Distinct row-set pairs among the truly significant shown results, per run.
    distinct_significant_per_run: float | None = None
    #: The same releases tested as before 2026-11-28 (:func:`intervals_before`): results shown
    #: per run, and truly significant among them per run.
    shown_whole_box_per_run: float | None = None
    significant_whole_box_per_run: float | None = None
    #: Hidden results that are truly there (exact p ≤ 0.01 and exact excess ≥ 0.05), per run,
    #: and among them, per run, those that failed each check of the test.
    hidden_true_per_run: float | None = None
    hidden_true_failed_per_run: dict[str, float] | None = None


def summarise(records: Sequence[RunRecord]) -> list[CellSummary]:
    """One summary per (table, miner, ε, unit), first-seen order."""
    keys = list(dict.fromkeys((r.table, r.miner, r.epsilon, r.unit) for r in records))
    return [
        _summary(key, [r for r in records if (r.table, r.miner, r.epsilon, r.unit) == key])
        for key in keys
    ]


def _summary(key: tuple[str, str, float, str], runs: list[RunRecord]) -> CellSummary:
    ok = [r for r in runs if r.status == "ok"]
    shown = [c for r in ok for c in r.results if c.shown]
    every = [c for r in ok for c in r.results]
    items = [i for r in ok for i in r.itemsets]
    stats = ("support", "union", "jaccard", "support_left", "support_right", "excess", "p_value")
    by_stat = {
        s: _share([bool(c.coverage[s]) for c in shown if c.coverage[s] is not None]) for s in stats
    }
    if key[1] == "TopKItemsets":
        coverage = _share([bool(i["covered"]) for i in items if i["covered"] is not None])
        printed_shown = _share([bool(i["printed_is_measured"]) for i in items])
        printed_all = printed_shown
        shown_items = [i for i in items if i.get("shown", True)]
        top = _share([bool(i["in_top_k_prime"]) for i in shown_items])
        # the default output's claim: every shown pick has at least one row (min_count = 1)
        significant = _share([i["true_count"] >= 1 for i in shown_items])
        excess = None
        significant_run = distinct_run = whole_run = whole_significant_run = None
        hidden_run = None
        hidden_failed: dict[str, float] | None = None
    else:
        coverage = _share([c.covered for c in shown])
        printed_shown = _share([c.printed_is_measured for c in shown])
        printed_all = _share([c.printed_is_measured for c in every])
        top = None
        significant = _share([c.exact["p"] <= P_GOOD for c in shown])
        excess = _share([c.exact["excess"] >= EXCESS_GOOD for c in shown])
        significant_run = sum(c.exact["p"] <= P_GOOD for c in shown) / len(ok) if ok else None
        distinct_run = (
            sum(distinct_significant([c for c in r.results if c.shown]) for r in ok) / len(ok)
            if ok
            else None
        )
        whole = [c for c in every if c.shown_whole_box]
        whole_run = len(whole) / len(ok) if ok else None
        whole_significant_run = sum(c.exact["p"] <= P_GOOD for c in whole) / len(ok) if ok else None
        hidden_true = [c for c in every if not c.shown and _truly_there(c)]
        hidden_run = hidden_failed = None
        if ok:
            hidden_run = len(hidden_true) / len(ok)
            hidden_failed = {
                check: sum(check in c.failed_checks for c in hidden_true) / len(ok)
                for check in CHECKS
            }
    return CellSummary(
        table=key[0],
        miner=key[1],
        epsilon=key[2],
        runs_ok=len(ok),
        runs_failed=len(runs) - len(ok),
        shown_per_run=[r.shown for r in ok],
        all_per_run=[r.all_results for r in ok],
        wall_s=[r.wall_s for r in runs],
        shown_total=len(items) if key[1] == "TopKItemsets" else len(shown),
        significant_share=significant,
        significant_per_run=significant_run,
        excess_share=excess,
        coverage_share=coverage,
        coverage_by_statistic=by_stat,
        printed_shown_share=printed_shown,
        printed_all_share=printed_all,
        evaluators_agree_share=_share([c.evaluators_agree for c in every]) if every else None,
        in_top_k_prime_share=top,
        errors=[r.error.splitlines()[0] for r in runs if r.status != "ok"],
        unit=key[3],
        rho=runs[0].rho,
        true_j_median=median([c.exact["jaccard"] for c in shown]) if shown else None,
        distinct_significant_per_run=distinct_run,
        shown_whole_box_per_run=whole_run,
        significant_whole_box_per_run=whole_significant_run,
        hidden_true_per_run=hidden_run,
        hidden_true_failed_per_run=hidden_failed,
    )


def _truly_there(result: Checked) -> bool:
    """Exact p ≤ 0.01 and exact excess ≥ 0.05: what a shown result must be."""
    return result.exact["p"] <= P_GOOD and result.exact["excess"] >= EXCESS_GOOD


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.0f} %"


def _mark(value: float | None, target: float) -> str:
    if value is None:
        return "–"
    return f"{_pct(value)} {'PASS' if value >= target - 1e-12 else 'MISS'}"


def _runs_text(values: Sequence[float]) -> str:
    if not values:
        return "–"
    return f"{median(values):g} ({min(values):g}–{max(values):g})"


def _per_run(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}"


def _at_least(now: float | None, before: float | None) -> str:
    if now is None or before is None:
        return "–"
    return "PASS" if now >= before - 1e-12 else "MISS"


def _versus_baseline(
    summaries: Sequence[CellSummary], baseline: BaselineResult | None
) -> list[str]:
    """The ε = 1 mammals/asia target (current ≥ baseline significant shown results per run)
    and, if the baseline ran, its cells next to this tree's."""
    mine = {
        (s.table, s.miner, s.epsilon): s
        for s in summaries
        if s.miner != "TopKItemsets" and s.unit == "pure"
    }
    if baseline is None:
        lines = [
            "",
            f"### Significant shown results per run on mammals and asia at ε = 1 (target: ≥ the "
            f"baseline commit {BASELINE_COMMIT}; run with --baseline {BASELINE_COMMIT} to "
            "measure it)",
            "",
            "| table | miner | truly significant shown results per run |",
            "|---|---|---|",
        ]
        for (table, miner, epsilon), summary in mine.items():
            if table in ("mammals", "asia") and epsilon == 1.0:
                lines.append(f"| {table} | {miner} | {_per_run(summary.significant_per_run)} |")
        return lines
    then = {(b.table, b.miner, b.epsilon): b for b in baseline.summaries}
    head = baseline.head
    lines = [
        "",
        f"### Significant shown results per run on mammals and asia at ε = 1: this tree vs "
        f"the baseline {head} (target: this tree ≥ baseline)",
        "",
        "Distinct: the same count with results that hold the same pair of row sets counted "
        "once (the baseline's tree miners printed one redescription up to three times).",
        "",
        f"| table | miner | this tree | baseline {head} | target | this tree, distinct | "
        f"baseline {head}, distinct | target, distinct |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key, b in then.items():
        now_cell = mine.get(key)
        if key[0] not in ("mammals", "asia") or key[2] != 1.0 or now_cell is None:
            continue
        now, before = now_cell.significant_per_run, b.significant_per_run
        now_d, before_d = now_cell.distinct_significant_per_run, b.distinct_significant_per_run
        lines.append(
            f"| {key[0]} | {key[1]} | {_per_run(now)} | {_per_run(before)} | "
            f"{_at_least(now, before)} | {_per_run(now_d)} | {_per_run(before_d)} | "
            f"{_at_least(now_d, before_d)} |"
        )
    lines += [
        "",
        f"### Default output of the baseline {head} (its own client and server) and of this "
        "tree, checked on the exact data",
        "",
        f"The baseline's default output is what its CLI printed without display options: "
        f"`redescriptions_` (Serenade's measured collection; the tree miners' results after "
        f"their noisy min_support/min_jaccard/p_max filter). Its printed texts are evaluated as "
        f"printed with this tree's harness: at {head} a tree miner printed a negated leaf as "
        f"`!(path)` but measured the other leaves, which differ only on rows missing a value "
        f"on the path ('¬ over missing': shown results with a `!( … )` over an attribute that "
        f"has missing values).",
        "",
        "| table | miner | ε | code | runs ok/failed | shown/run median (min–max) "
        "| truly significant shown/run | truly significant | excess ≥ 0.05 | ¬ over missing |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key, b in then.items():
        lines.append(
            f"| {key[0]} | {key[1]} | {key[2]:g} | {head} | {b.runs_ok}/{b.runs_failed} | "
            f"{_runs_text(b.shown_per_run)} | {_per_run(b.significant_per_run)} | "
            f"{_pct(b.significant_share)} | {_pct(b.excess_share)} | "
            f"{b.negation_over_missing} |"
        )
        cell = mine.get(key)
        if cell is not None:
            lines.append(
                f"| {key[0]} | {key[1]} | {key[2]:g} | this tree | "
                f"{cell.runs_ok}/{cell.runs_failed} | {_runs_text(cell.shown_per_run)} | "
                f"{_per_run(cell.significant_per_run)} | {_pct(cell.significant_share)} | "
                f"{_pct(cell.excess_share)} | – |"
            )
    agree = [b.evaluators_agree_share for b in baseline.summaries]
    lines += [
        "",
        "Harness vs the server's evaluator on the baseline's printed texts: "
        + ("agree on every result" if all(a in (None, 1.0) for a in agree) else "DISAGREE"),
        "",
        "Metadata the baseline proposed on the same files vs this tree's (the texts are "
        "evaluated under this tree's): "
        + ("; ".join(baseline.metadata_notes) if baseline.metadata_notes else "the same"),
        "",
        "Parameters of the baseline's miners (its defaults; first run of each cell, all in "
        "the JSON):",
        "",
    ]
    lines += [
        f"* {b.table} {b.miner} ε={b.epsilon:g}: "
        f"`{json.dumps(b.parameters, separators=(',', ':'), default=str)}`"
        for b in baseline.summaries
        if b.parameters
    ]
    failures = [(b, e) for b in baseline.summaries for e in b.errors]
    if failures:
        lines += ["", "Failed baseline runs:", ""]
        lines += [f"* {b.table} {b.miner} ε={b.epsilon:g}: {e}" for b, e in failures]
    return lines


def _budget(s: CellSummary) -> str:
    """A cell's budget with its unit: "ε=1", or "ρ=0.01747 (zCDP, ε=1)"."""
    if s.rho is None:
        return f"ε={s.epsilon:g}"
    return f"ρ={s.rho:.5g} (zCDP, ε={s.epsilon:g})"


#: Issue #24's Serenade target at ε = 1 on mammals and asia: zCDP's truly significant shown
#: results per run ≥ this many times pure ε's, at a median true J of the shown results ≥ J.
ZCDP_TARGET_RATIO = 3.0
ZCDP_TARGET_J = 0.75
#: Issue #24's tree-miner target there: zCDP's median true J of the shown results ≥ pure ε's
#: plus this.
ZCDP_TREE_J_GAIN = 0.05


def _zcdp_met(z: CellSummary, p: CellSummary) -> bool:
    """Issue #24's target for the zCDP cell ``z`` against the pure cell ``p``."""
    if z.miner in ("SerenadeCS", "SerenadeES"):
        return (
            z.significant_per_run is not None
            and p.significant_per_run is not None
            and z.significant_per_run >= ZCDP_TARGET_RATIO * p.significant_per_run
            and z.true_j_median is not None
            and z.true_j_median >= ZCDP_TARGET_J
        )
    return (
        z.true_j_median is not None
        and p.true_j_median is not None
        and z.true_j_median >= p.true_j_median + ZCDP_TREE_J_GAIN
    )


def _zcdp_lines(summaries: Sequence[CellSummary], delta: float) -> list[str]:
    """Each Serenade and tree-miner cell on the zCDP copy beside the same cell at pure ε, with
    the targets."""
    pure = {(s.table, s.miner, s.epsilon): s for s in summaries if s.unit == "pure"}
    lines = [
        "",
        f"### zCDP datasets at (ε, δ = {delta:g}) beside pure ε (issue #24)",
        "",
        f"Targets at ε = 1 on mammals and asia: Serenade's zCDP truly significant shown results "
        f"per run ≥ {ZCDP_TARGET_RATIO:g}× pure ε's, at a median true J of the shown results ≥ "
        f"{ZCDP_TARGET_J}; the tree miners' median true J of the shown results ≥ pure ε's + "
        f"{ZCDP_TREE_J_GAIN:g}. Budgets: pure in ε; zCDP in ρ (the largest ρ whose "
        "ρ + 2√(ρ ln 1/δ) ≤ ε).",
        "",
        "| table | miner | pure budget | significant/run | true J median | zCDP budget "
        "| significant/run | true J median | ratio | target |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for z in summaries:
        if z.unit != "zcdp":
            continue
        p = pure.get((z.table, z.miner, z.epsilon))
        if p is None:
            continue
        ratio = (
            None
            if z.significant_per_run is None or not p.significant_per_run
            else z.significant_per_run / p.significant_per_run
        )
        target = "–"
        if z.table in ("mammals", "asia") and z.epsilon == 1.0:
            target = "PASS" if _zcdp_met(z, p) else "MISS"
        lines.append(
            f"| {z.table} | {z.miner} | {_budget(p)} | {_per_run(p.significant_per_run)} | "
            f"{_fmt_j(p.true_j_median)} | {_budget(z)} | {_per_run(z.significant_per_run)} | "
            f"{_fmt_j(z.true_j_median)} | {'–' if ratio is None else f'{ratio:.2f}×'} | "
            f"{target} |"
        )
    return lines


def _whole_box_lines(summaries: Sequence[CellSummary]) -> list[str]:
    """Shown and truly significant shown results per run with the test as it reads a release
    now (the excess's extremes and the p-value's upper end refined over the box; boxes with a
    range of E10 + E01) and as it read the same release before 2026-11-28
    (:func:`intervals_before`)."""
    cells = [s for s in summaries if s.shown_whole_box_per_run is not None]
    if not cells:
        return []
    lines = [
        "",
        "### The test's intervals, now vs before 2026-11-28 (same releases)",
        "",
        "| table | miner | ε | shown/run: now | before | truly significant/run: now | before |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in cells:
        now = sum(s.shown_per_run) / len(s.shown_per_run) if s.shown_per_run else 0.0
        lines.append(
            f"| {s.table} | {s.miner} | {_budget(s)} | {now:.1f} | "
            f"{s.shown_whole_box_per_run:.1f} | {_per_run(s.significant_per_run)} | "
            f"{_per_run(s.significant_whole_box_per_run)} |"
        )
    return lines


def hidden_report(summaries: Sequence[CellSummary]) -> list[str]:
    """Which check of the test hid the results that are truly there (exact p ≤ 0.01, exact
    excess ≥ 0.05): per run, how many such results each check failed (a result can fail
    several)."""
    cells = [s for s in summaries if s.hidden_true_failed_per_run is not None]
    if not cells:
        return []
    lines = [
        "",
        "### Hidden results that are truly there, by the check that hid them (per run)",
        "",
        "| table | miner | ε | hidden, truly there | fail p ≤ α/m | fail excess > 0 "
        "| fail J ≥ min_jaccard |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in cells:
        failed = s.hidden_true_failed_per_run or {}
        lines.append(
            f"| {s.table} | {s.miner} | {_budget(s)} | {_per_run(s.hidden_true_per_run)} | "
            + " | ".join(_per_run(failed.get(check)) for check in CHECKS)
            + " |"
        )
    return lines


def _fmt_j(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def markdown(
    summaries: Sequence[CellSummary],
    n_rows: Mapping[str, int],
    baseline: BaselineResult | None = None,
    zcdp_delta: float | None = None,
) -> str:
    """The report: redescription cells, top-K cells, the baseline if measured, the zCDP
    comparison if run, timings and failures."""
    lines = [
        "### Redescription miners: shown results (`results_`) checked on the exact data",
        "",
        f"Targets (issue #21): printed ≡ measured {TARGET_PRINTED:.0%}; among shown results "
        f"≥ {TARGET_SIGNIFICANT:.0%} truly significant (exact p ≤ {P_GOOD}) and "
        f"≥ {TARGET_EXCESS:.0%} with exact J − J_ind ≥ {EXCESS_GOOD}; joint-interval coverage "
        f"≥ {TARGET_COVERAGE:.0%}. '–': no shown result to judge.",
        "",
        "| table | rows | miner | ε | runs ok/failed | shown/run median (min–max) "
        "| all/run | truly significant | excess ≥ 0.05 | coverage | printed ≡ measured (shown) "
        "| printed ≡ measured (all) | significant/run |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summaries:
        if s.miner == "TopKItemsets":
            continue
        lines.append(
            f"| {s.table} | {n_rows[s.table]} | {s.miner} | {_budget(s)} | "
            f"{s.runs_ok}/{s.runs_failed} | {_runs_text(s.shown_per_run)} | "
            f"{_runs_text(s.all_per_run)} | {_mark(s.significant_share, TARGET_SIGNIFICANT)} | "
            f"{_mark(s.excess_share, TARGET_EXCESS)} | "
            f"{_mark(s.coverage_share, TARGET_COVERAGE)} | "
            f"{_mark(s.printed_shown_share, TARGET_PRINTED)} | "
            f"{_mark(s.printed_all_share, TARGET_PRINTED)} | "
            f"{'–' if s.significant_per_run is None else f'{s.significant_per_run:.1f}'} |"
        )
    lines += [
        "",
        "Coverage by statistic (shown results; the joint intervals the miners print):",
        "",
        "| table | miner | ε | |I| | |U| | J | s_L | s_R | excess | p |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summaries:
        if s.miner == "TopKItemsets":
            continue
        c = s.coverage_by_statistic
        lines.append(
            f"| {s.table} | {s.miner} | {_budget(s)} | "
            + " | ".join(
                _pct(c[k])
                for k in (
                    "support",
                    "union",
                    "jaccard",
                    "support_left",
                    "support_right",
                    "excess",
                    "p_value",
                )
            )
            + " |"
        )
    top = [s for s in summaries if s.miner == "TopKItemsets"]
    if top:
        lines += [
            "",
            "### Top-K itemsets (defaults: K = 10, length 3, EM)",
            "",
            "Shown: the picks whose count confirms ≥ 1 row (99 %, all K together); coverage "
            "and printed ≡ measured over every pick; the last two columns over the shown ones.",
            "",
            f"| table | ε | runs ok/failed | shown/run | picks/run | count-interval coverage "
            f"| printed ≡ measured | shown truly present | shown truly in top ⌈{TOPK_SLACK:g}K⌉ |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for s in top:
            lines.append(
                f"| {s.table} | {s.epsilon:g} | {s.runs_ok}/{s.runs_failed} | "
                f"{_runs_text(s.shown_per_run)} | {_runs_text(s.all_per_run)} | "
                f"{_mark(s.coverage_share, TARGET_COVERAGE)} | "
                f"{_mark(s.printed_shown_share, TARGET_PRINTED)} | "
                f"{_pct(s.significant_share)} | {_pct(s.in_top_k_prime_share)} |"
            )
    lines += _whole_box_lines(summaries)
    lines += hidden_report(summaries)
    lines += _versus_baseline(summaries, baseline)
    if zcdp_delta is not None:
        lines += _zcdp_lines(summaries, zcdp_delta)
    lines += [
        "",
        "### Wall time of one run (s, median (min–max); for planning a full run)",
        "",
        "| table | miner | ε | wall |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {s.table} | {s.miner} | {_budget(s)} | {_runs_text(s.wall_s)} |" for s in summaries
    ]
    agree = [s.evaluators_agree_share for s in summaries if s.evaluators_agree_share is not None]
    lines += [
        "",
        "Harness evaluator vs the server's evaluator on the printed text: "
        + ("agree on every result" if all(a == 1.0 for a in agree) else "DISAGREE on some"),
    ]
    failures = [(s, e) for s in summaries for e in s.errors]
    if failures:
        lines += ["", "### Failed runs", ""]
        lines += [f"* {s.table} {s.miner} {_budget(s)}: {e}" for s, e in failures]
    return "\n".join(lines) + "\n"


# -- main ----------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> Config:
    """Command line → Config."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument(
        "--quick", action="store_true", help=f"1 run, ε = 1, tables {','.join(QUICK_TABLES)}"
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="seconds-long check that the script runs (the test suite's): 1 run at ε = 1 of "
        "every miner on the bundled Mushroom table; no baseline",
    )
    parser.add_argument("--runs", type=int, default=None, help=f"runs per cell (default {RUNS})")
    parser.add_argument(
        "--tables",
        default=None,
        help=f"comma list of {','.join(TABLES)} (default), or the held-out {','.join(HELD_OUT)}",
    )
    parser.add_argument("--miners", default=",".join(MINERS))
    parser.add_argument("--epsilons", default=None, help="comma list (default 1,0.5)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out")
    parser.add_argument(
        "--baseline",
        default="none",
        help=f"also measure this commit's redescription miners, through its own client and "
        f"server (issue #21's figure: {BASELINE_COMMIT}; default none)",
    )
    parser.add_argument(
        "--zcdp",
        type=float,
        default=None,
        metavar="DELTA",
        help="also run the Serenade and tree miners on zCDP copies of the tables at (ε, DELTA), "
        "their budget in ρ (issue #24; e.g. 1e-6)",
    )
    parser.add_argument(
        "--tree-preset",
        choices=("auto", "paper"),
        default=None,
        help="the tree miners' preset (default: theirs)",
    )
    args = parser.parse_args(argv)
    if args.smoke:
        return Config(
            out=args.out.resolve(),
            tables=(SMOKE_KEY,),
            miners=comma_names(args.miners, MINERS, "miner"),
            epsilons=(1.0,),
            runs=1,
            smoke=True,
        )
    tables = args.tables or ",".join(QUICK_TABLES if args.quick else TABLES)
    epsilons = args.epsilons or ("1" if args.quick else ",".join(f"{e:g}" for e in EPSILONS))
    return Config(
        out=args.out.resolve(),
        tables=comma_names(tables, (*TABLES, *HELD_OUT), "table"),
        miners=comma_names(args.miners, MINERS, "miner"),
        epsilons=tuple(float(e) for e in epsilons.split(",")),
        runs=args.runs if args.runs is not None else (1 if args.quick else RUNS),
        baseline=None if args.baseline.lower() == "none" else args.baseline,
        tree_preset=args.tree_preset,
        zcdp_delta=args.zcdp,
    )


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; the exit status is 1 if a run failed or a printed query is not the
    measured one."""
    unwind_on_sigterm()
    config = parse_args(argv)
    config.out.mkdir(parents=True, exist_ok=True)
    started = datetime.now(UTC).isoformat(timespec="seconds")
    with tempfile.TemporaryDirectory(prefix="dpmine-trust-data-") as scratch:
        prepared = [prepare_table(key, Path(scratch)) for key in config.tables]
        for data in prepared:
            _proposal_check(data)
        truths = {
            data.key: Truth(
                data=data,
                harness=load_harness_data(data),
                store=load_store(data.metadata, data.source, base_dir=data.directory)[0],
            )
            for data in prepared
        }
        records = run_grid(prepared, truths, config)
        baseline = (
            None
            if config.baseline is None
            else measure_baseline(prepared, truths, config, config.baseline)
        )
        n_rows = {data.key: data.n_rows for data in prepared}
        views = {
            data.key: {
                "left": data.choice.left,
                "right": data.choice.right,
                "note": data.choice.note,
            }
            for data in prepared
        }
    summaries = summarise(records)
    report = markdown(summaries, n_rows, baseline, config.zcdp_delta)
    print(report)
    payload: dict[str, Any] = {
        "started": started,
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine_info(),
        "config": {**asdict(config), "out": str(config.out)},
        "targets": {
            "printed_is_measured": TARGET_PRINTED,
            "significant": TARGET_SIGNIFICANT,
            "excess": TARGET_EXCESS,
            "coverage": TARGET_COVERAGE,
            "p_good": P_GOOD,
            "excess_good": EXCESS_GOOD,
            "top_k_slack": TOPK_SLACK,
        },
        "n_rows": n_rows,
        "views": views,
        "summaries": [asdict(s) for s in summaries],
        "runs": [asdict(r) for r in records],
        "baseline": None if baseline is None else asdict(baseline),
        "report": report,
    }
    path = config.out / "trust.json"
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    print(f"wrote {path}")
    bad = (
        any(r.status != "ok" for r in records)
        or any(s.printed_all_share is not None and s.printed_all_share < 1 for s in summaries)
        or (baseline is not None and any(r.status != "ok" for r in baseline.records))
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
