"""Tree-based DP redescription benchmark of dpmine (issue #10) against SplitT and LayeredT.

1. Wall time of whole runs of ``AltExpM.stable``, ``AltMCMC.stable`` and ``MCMCTreePair`` with
   the paper's defaults (ALGORITHMS.md §3.8: MCIter 10,000, depth 3 split levels in the spec's
   convention, InTr = k = 4, ω = 0.1), and of the layered ``DPLayeredTrees`` (issue #26) with
   its defaults (4 seeds of 4 layers, depth 3), at ε ∈ {0.1, 1}, five runs each, through the
   analyst client against a real uvicorn server (SQLite), on European mammals and Asia (and
   teeth, the scaling set, with ``--datasets``).
2. The non-private SplitT and LayeredT of python-clired 6.0.9 (BASELINES.md §1 parameters) run
   in the same script as capped subprocesses of a separate interpreter (``--clired-python``,
   a throwaway venv with the package and its missing XML defs; see bench/README.md).
3. Utility, computed by this harness with direct data access (the evaluator of
   ``bench_serenade``): true Jaccard (median, quartiles), share with true p ≤ 0.01, median
   excess J − J_ind over the independence baseline J_ind = (s_L s_R / n) / (s_L + s_R −
   s_L s_R / n), Spearman's ρ of noisy vs true Jaccard; for the redescriptions kept by the
   public pruning rule (standard error of the noisy J ≤ 0.07, ``treereds.prune_by_precision``;
   the targets use this set), by the §3.7 support pruning (noisy support ≥ T_prune; 500 on
   mammals as in the paper, the same share of rows, 22.5 %, elsewhere) and for all of them.
   The same figures for SplitT/LayeredT's output, from clired's own exact cells (card_*).
4. One scatter figure per dataset at ε = 1: noisy vs true Jaccard, a panel per miner, pruned
   points hollow.

Usage::

    .venv/bin/python bench/bench_trees.py [--quick] [--runs N] [--datasets mammals,asia]
        [--miners AltExpM,AltMCMC,MCMCTreePair,DPLayeredTrees] [--epsilons 1,0.1] [--out bench/out]
        [--clired-python /tmp/clired-venv/bin/python] [--clired splittrees,layeredtrees]

Writes ``<out>/trees.json`` and ``<out>/trees_scatter_<dataset>.png``; prints Markdown tables.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import matplotlib as mpl
from matplotlib.figure import Figure

import dpmine
from _support import (
    ServerHandle,
    add_server_timing_arguments,
    comma_names,
    load_average,
    machine_info,
    median,
    mine_whole,
    percentile,
    server_for_backend,
    server_timing_settings,
    unwind_on_sigterm,
)
from bench_serenade import (
    DATA_ROOT,
    GRANT_EPSILON,
    SMOKE_KEY,
    HarnessData,
    PreparedData,
    load_harness_data,
    prepare_dataset,
    read_clired_queries,
    register_all,
    run_capped,
    spearman,
    true_counts,
    view_choice,
)
from bench_trust import weak_table_choice
from dpmine.miners import AltExpM, AltMCMC, DPLayeredTrees, MCMCTreePair
from dpmine.miners.layered import SeedRule
from dpmine.miners.tree_auto import LayeredOrder
from dpmine.treereds import DEFAULT_MAX_JACCARD_ERROR
from dpmine.wire.statistics import p_value
from dpmine_server.data.columns import ColumnStore
from dpmine_server.data.loaders import load_store
from trust_views import WEAK_TABLES

mpl.use("Agg")

#: "AltMCMC" runs tree.mcmc's default sampler ("auto": exact wherever its public work bound
#: fits, issue #25 item 2); "AltMCMC-chain" the same miner with every tree from the chain.
MINERS = (
    "AltExpM",
    "AltMCMC",
    "MCMCTreePair",
    "DPLayeredTrees",
    "DPLayeredAuto",
    "DPLayeredAutoLayers",
    "DPLayeredAutoStrong",
    "DPLayeredAutoSeeded",
    "DPLayeredAutoJaccard",
    "DPLayeredAutoJaccardSeeds",
    "DPLayeredAutoJaccardUniform",
    "DPLayeredAutoPair",
    "DPLayeredAutoPairUniform",
    "AltMCMC-chain",
    "AltMCMC-depth1",
    "AltMCMC-chain-depth1",
)
#: "AltMCMC-depth1" / "AltMCMC-chain-depth1": the same two at depth 1, where tree.mcmc's exact
#: sampler fits every view (its histogram path). Run only when named in ``--miners``.
DEFAULT_MINERS = tuple(name for name in MINERS if not name.endswith("-depth1"))
#: The layered auto candidates (issue #26), declared before they were measured: ``order``
#: of :func:`dpmine.miners.tree_auto.auto_layered`.
LAYERED_AUTO_ORDERS: dict[str, LayeredOrder] = {
    "DPLayeredAuto": "seeds",
    "DPLayeredAutoLayers": "layers",
    "DPLayeredAutoStrong": "strong",
    "DPLayeredAutoSeeded": "strong",
    "DPLayeredAutoJaccard": "strong",
    "DPLayeredAutoJaccardSeeds": "seeds",
    "DPLayeredAutoJaccardUniform": "strong",
    "DPLayeredAutoPair": "seeds",
    "DPLayeredAutoPairUniform": "seeds",
}
#: Candidates H, I (``final_release="pair"``, declared before they were measured).
LAYERED_PAIR = ("DPLayeredAutoPair", "DPLayeredAutoPairUniform")
#: Candidates E, F, G (``query_rule="jaccard"``, declared before they were measured): the
#: seed rule of each layered auto candidate ("uniform" when not listed).
LAYERED_SEED_RULES: dict[str, SeedRule] = {
    "DPLayeredAutoSeeded": "expmech",
    "DPLayeredAutoJaccard": "expmech",
    "DPLayeredAutoJaccardSeeds": "expmech",
    "DPLayeredAutoPair": "expmech",
}
#: The layered auto candidates whose layers choose their queries by noisy Jaccard.
LAYERED_JACCARD = (
    "DPLayeredAutoJaccard",
    "DPLayeredAutoJaccardSeeds",
    "DPLayeredAutoJaccardUniform",
)
#: ``--smoke`` runs one miner per code path: the layered auto candidates differ only in the
#: public order their preset tries (unit-tested), so the seeded one (auto preset and private
#: seeds) stands for them, and the pair one for the Jaccard rule and the pair final release.
SMOKE_MINERS = (
    "AltExpM",
    "AltMCMC",
    "MCMCTreePair",
    "DPLayeredTrees",
    "DPLayeredAutoSeeded",
    "DPLayeredAutoPair",
    "AltMCMC-chain",
)
DATASETS = ("mammals", "asia", "teeth", "stroke", "heart")
EPSILONS = (1.0, 0.1)
RUNS = 5
# Paper defaults (ALGORITHMS.md §3.8).
IN_TREES = 4
OMEGA = 0.1
MC_ITERATIONS = 10_000
DEPTH = 3
#: §3.7 pruning: 500 on MAMMAL (2,221 rows); elsewhere the same share of the rows.
PRUNE_MAMMALS = 500.0
PRUNE_SHARE = 0.225
#: The public pruning rule: standard error of the noisy Jaccard at most the miners' default.
MAX_JACCARD_ERROR = DEFAULT_MAX_JACCARD_ERROR
P_GOOD = 0.01
CLIENT_TIMEOUT_S = 1800.0
CLIRED_ALGOS = ("splittrees", "layeredtrees")
CLIRED_PARAMETERS = {"min_itm_in": "0.1", "max_var_s0": "4", "max_var_s1": "4", "verbosity": "1"}
CLIRED_TIMEOUT_S = 900.0
DEFAULT_CLIRED_PYTHON = Path("/tmp/clired-venv/bin/python")
TARGET_RATIO = 0.3
TARGET_SPEARMAN = 0.9
TARGET_J_GAP = 0.2


@dataclass(frozen=True)
class Config:
    """What one run of the benchmark does."""

    out: Path
    datasets: tuple[str, ...]
    miners: tuple[str, ...]
    epsilons: tuple[float, ...]
    runs: int
    clired: tuple[str, ...]
    clired_python: Path
    clired_runs: int
    #: ``--smoke``: the bundled Mushroom views, release padding off (the test suite's check).
    smoke: bool = False
    #: MCMCTreePair's ``pair_score`` ("paper" or "gain"); None: the miner's default.
    pair_score: str | None = None
    #: ``--no-padding``: release padding off (utility comparisons on a loaded machine).
    no_padding: bool = False
    #: ``--calibration``, ``--max-in-flight``: the server's timing settings (DPMINE_* → value).
    timing_settings: Mapping[str, str] = field(default_factory=dict)


# -- utility of one redescription ----------------------------------------------------------------


@dataclass(frozen=True)
class Scored:
    """Noisy (None for clired) and true statistics of one redescription."""

    noisy_support: float | None
    noisy_jaccard: float | None
    true_jaccard: float
    true_p: float
    excess: float
    kept: bool
    #: Kept by the §3.7 support threshold (``kept`` is the public standard-error rule).
    kept_by_support: bool = True
    #: The harness's |I| and |U| equal the server evaluator's (in-process, same files).
    agrees: bool = True
    #: Passes the noise-aware significance test (issue #21): the miner's default output.
    shown: bool = True


def independence_jaccard(n: int, s_left: int, s_right: int) -> float:
    """Expected Jaccard if the two supports were independent: E[I] = s_L s_R / n."""
    if n == 0:
        return 0.0
    inter = s_left * s_right / n
    union = s_left + s_right - inter
    return inter / union if union > 0 else 0.0


def score(n: int, s_left: int, s_right: int, inter: int, union: int) -> tuple[float, float, float]:
    """(true J, true p, J − J_ind)."""
    jaccard = inter / union if union else 0.0
    return (
        jaccard,
        p_value(n, s_left, s_right, inter),
        jaccard - independence_jaccard(n, s_left, s_right),
    )


@dataclass(frozen=True)
class RunRecord:
    """One whole DP run (or one clired run) and its scored redescriptions."""

    dataset: str
    miner: str
    epsilon: float | None
    repetition: int
    seed: int | None
    wall_s: float
    cpu_s: float | None
    charged_calls: int
    threshold: float
    load_average: tuple[float, float, float]
    reds: list[Scored]
    status: str = "ok"
    note: str = ""
    #: The charged calls by "operation guarantee" (a tree.mcmc call is "pure" when its exact
    #: sampler ran, "approximate" for the chain): which sampler drew the trees.
    guarantees: dict[str, int] = field(default_factory=dict)


def make_miner(
    name: str, epsilon: float, seed: int, pair_score: str | None = None
) -> AltExpM | AltMCMC | MCMCTreePair | DPLayeredTrees:
    """A miner with the paper's defaults (stable alternation: InTr = k = 4, RMIter = 1;
    DPLayeredTrees: its paper preset, 4 seeds of 4 layers; the DPLayeredAuto candidates: preset
    auto, nothing else given); ``pair_score`` is MCMCTreePair's score when given (else the
    miner's default)."""
    if name == "DPLayeredTrees":
        return DPLayeredTrees(epsilon=epsilon, depth=DEPTH, seed=seed)
    if name in LAYERED_AUTO_ORDERS:
        order = LAYERED_AUTO_ORDERS[name]
        # Candidate D: C with each seed a private depth-1 tree on a drawn target; E–G: the
        # Jaccard query rule.
        return DPLayeredTrees(
            epsilon=epsilon,
            preset="auto",
            order=order,
            seed_rule=LAYERED_SEED_RULES.get(name, "uniform"),
            query_rule="jaccard" if name in LAYERED_JACCARD else "majority",
            final_release="pair" if name in LAYERED_PAIR else "partition",
            seed=seed,
        )
    if name == "AltExpM":
        return AltExpM.stable(IN_TREES, epsilon=epsilon, depth=DEPTH, seed=seed)
    if name.startswith("AltMCMC"):
        # = AltMCMC.stable(k) with the iteration count spelt out
        return AltMCMC(
            in_trees=IN_TREES,
            rm_iterations=1,
            iterations=MC_ITERATIONS,
            epsilon=epsilon,
            depth=1 if name.endswith("-depth1") else DEPTH,
            seed=seed,
            sampler="mcmc" if name.startswith("AltMCMC-chain") else "auto",
        )
    options: dict[str, Any] = {} if pair_score is None else {"pair_score": pair_score}
    return MCMCTreePair(
        in_trees=IN_TREES,
        omega=OMEGA,
        iterations=MC_ITERATIONS,
        epsilon=epsilon,
        depth=DEPTH,
        seed=seed,
        **options,
    )


def prepare_table(key: str, scratch: Path) -> PreparedData:
    """The trimmed views of ``key``: a redescription set of ``bench_serenade`` or a
    weak-structure table of ``trust_views`` (stroke, heart), metadata proposed and confirmed."""
    if key not in WEAK_TABLES:
        return prepare_dataset(view_choice(key, DATA_ROOT, scratch), scratch / key)
    return prepare_dataset(weak_table_choice(key, scratch), scratch / key)


def prune_threshold(data: PreparedData) -> float:
    """T_prune of §3.7 for this dataset."""
    return PRUNE_MAMMALS if data.key == "mammals" else round(PRUNE_SHARE * data.n_rows, -1)


def run_dp_once(
    handle: dpmine.DatasetHandle,
    data: PreparedData,
    truth: HarnessData,
    store: ColumnStore,
    *,
    miner_name: str,
    epsilon: float,
    repetition: int,
    pair_score: str | None = None,
) -> RunRecord:
    """Time one whole ``mine()`` over HTTP, then score every result on the data."""
    seed = 1000 * repetition + MINERS.index(miner_name) * 10 + int(epsilon < 1)
    miner = make_miner(miner_name, epsilon, seed, pair_score)
    threshold = prune_threshold(data)
    load = load_average()
    start = time.perf_counter()
    mine_whole(miner, handle)
    wall = time.perf_counter() - start
    kept_ids = {id(found) for found in miner.reliable(MAX_JACCARD_ERROR)}
    by_support = {id(found) for found in miner.pruned(threshold)}
    shown_ids = {id(found) for found in miner.results_}
    reds: list[Scored] = []
    for found in miner.redescriptions_:
        exact = true_counts(found.redescription, truth)
        left = store.evaluate(found.redescription.left)
        right = store.evaluate(found.redescription.right)
        agrees = (left & right).count() == exact.support and (left | right).count() == exact.union
        true_j, true_p, excess = score(
            truth.n_rows, exact.left, exact.right, exact.support, exact.union
        )
        reds.append(
            Scored(
                noisy_support=found.statistics.intersection,
                noisy_jaccard=found.statistics.jaccard,
                true_jaccard=true_j,
                true_p=true_p,
                excess=excess,
                kept=id(found) in kept_ids,
                agrees=agrees,
                kept_by_support=id(found) in by_support,
                shown=id(found) in shown_ids,
            )
        )
    return RunRecord(
        dataset=data.key,
        miner=miner_name,
        epsilon=epsilon,
        repetition=repetition,
        seed=seed,
        wall_s=round(wall, 3),
        cpu_s=None,
        charged_calls=len(miner.receipts_),
        threshold=threshold,
        load_average=load,
        reds=reds,
        guarantees=dict(Counter(f"{r.operation} {r.guarantee}" for r in miner.receipts_)),
    )


def run_dp_stage(
    prepared: Sequence[PreparedData], truths: Mapping[str, HarnessData], config: Config
) -> tuple[list[RunRecord], dict[str, int]]:
    """One server; every (dataset, ε, miner) ``runs`` times, repetition outermost. Also the
    server log's missed deadlines (``ServerHandle.timing_warnings``)."""
    records: list[RunRecord] = []
    total = config.runs * len(prepared) * len(config.epsilons) * len(config.miners)
    with (
        tempfile.TemporaryDirectory(prefix="dpmine-bench-trees-") as work,
        server_for_backend(
            "sqlite",
            Path(work),
            extra_env=_server_settings(config),
        ) as server,
    ):
        try:
            _grid(
                server,
                prepared=prepared,
                truths=truths,
                config=config,
                records=records,
                total=total,
            )
        except BaseException:
            print(f"server log tail:\n{server.log_tail()}", file=sys.stderr)
            raise
        warnings = server.timing_warnings()
        shutil.copyfile(server.log, config.out / "server.log")  # the owner's view of the runs
    return records, warnings


def _grid(
    server: ServerHandle,
    *,
    prepared: Sequence[PreparedData],
    truths: Mapping[str, HarnessData],
    config: Config,
    records: list[RunRecord],
    total: int,
) -> None:
    # Every run of the grid on one dataset, plus the warm-up counts (large ε included).
    spend = sum(config.epsilons) * len(config.miners) * config.runs
    key = register_all(server, prepared, grant=max(GRANT_EPSILON, 2 * spend + 1))
    with server.connect(key, timeout=CLIENT_TIMEOUT_S) as connection:
        handles = {data.key: connection.dataset(data.key) for data in prepared}
        stores = {
            data.key: load_store(data.metadata, data.source, base_dir=data.directory)[0]
            for data in prepared
        }
        for data in prepared:  # the first data access loads the files: keep it out of timings
            handles[data.key].count(epsilon=0.01)
        for repetition in range(config.runs):
            for data in prepared:
                for epsilon in config.epsilons:
                    for name in config.miners:
                        record = run_dp_once(
                            handles[data.key],
                            data,
                            truths[data.key],
                            stores[data.key],
                            miner_name=name,
                            epsilon=epsilon,
                            repetition=repetition,
                            pair_score=config.pair_score,
                        )
                        records.append(record)
                        partial = config.out / "trees_partial.json"
                        partial.write_text(json.dumps([asdict(r) for r in records]) + "\n")
                        kept = [r.true_jaccard for r in record.reds if r.kept]
                        print(
                            f"  [{len(records):3}/{total}] {data.key:8} {name:12} ε={epsilon:<4g} "
                            f"run {repetition + 1}: {record.wall_s:7.1f} s, "
                            f"{len(record.reds):3} reds ({len(kept)} kept), kept true J median "
                            f"{(median(kept) if kept else float('nan')):.3f}, "
                            f"load {record.load_average[0]:.2f}",
                            flush=True,
                        )


# -- clired SplitT / LayeredT --------------------------------------------------------------------


def _prefs_xml(left: Path, right: Path, cache: Path, algo: str) -> str:
    parameters = {
        "LHS_data": str(left),
        "RHS_data": str(right),
        "result_rep": f"{cache}/",
        "out_base": "results",
        "queries_named_file": str(cache / "results_named.queries"),
        "mining_algo": algo,
        **CLIRED_PARAMETERS,
    }
    lines = ["<root>"]
    lines += [
        f"<parameter><name>{name}</name><value>{value}</value></parameter>"
        for name, value in parameters.items()
    ]
    return "\n".join([*lines, "</root>", ""])


def _cells(row: Mapping[str, str]) -> tuple[int, int, int, int, int]:
    """(n, s_L, s_R, I, U) from clired's card_* columns (rows with a missing value, if any,
    count in n only)."""
    cells = {k[5:]: int(float(v)) for k, v in row.items() if k.startswith("card_") and v}
    n = sum(cells.values())
    inter, left_only, right_only = cells.get("Exx", 0), cells.get("Exo", 0), cells.get("Eox", 0)
    return n, left_only + inter, right_only + inter, inter, left_only + right_only + inter


def run_clired(data: PreparedData, algo: str, config: Config, repetition: int) -> RunRecord:
    """One capped clired run on the trimmed CSVs; scored from its exact output cells."""
    cache = config.out / "trees_clired" / data.key / algo
    if cache.exists():
        shutil.rmtree(cache)
    cache.mkdir(parents=True)
    left, right = cache / "left.csv", cache / "right.csv"
    shutil.copy2(data.directory / "left.csv", left)
    shutil.copy2(data.directory / "right.csv", right)
    prefs = cache / "prefs.xml"
    prefs.write_text(_prefs_xml(left, right, cache, algo))
    load = load_average()
    code, wall, cpu = run_capped(
        [str(config.clired_python), "-m", "blocks.mine.exec_clired", str(prefs)],
        cwd=cache,
        log=cache / "clired.log",
        timeout_s=CLIRED_TIMEOUT_S,
    )
    status = "timeout" if code is None else "ok" if code == 0 else "failed"
    reds: list[Scored] = []
    for row in read_clired_queries(cache / "results.queries") if status == "ok" else []:
        n, s_left, s_right, inter, union = _cells(row)
        true_j, true_p, excess = score(n, s_left, s_right, inter, union)
        reds.append(Scored(None, None, true_j, true_p, excess, kept=True))
    print(
        f"  {algo:12} on {data.key}: {status}, {wall:.1f} s (CPU {cpu:.1f} s), {len(reds)} reds",
        flush=True,
    )
    return RunRecord(
        dataset=data.key,
        miner="SplitT" if algo == "splittrees" else "LayeredT",
        epsilon=None,
        repetition=repetition,
        seed=None,
        wall_s=round(wall, 3),
        cpu_s=round(cpu, 3),
        charged_calls=0,
        threshold=0.0,
        load_average=load,
        reds=reds,
        status=status,
        note="" if status == "ok" else f"see {cache / 'clired.log'}",
    )


# -- summaries -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Utility:
    """Pooled utility of a set of redescriptions."""

    count: int
    per_run_median: float
    true_j_q1: float | None
    true_j_median: float | None
    true_j_q3: float | None
    share_p_good: float | None
    excess_median: float | None
    spearman_rho: float | None


def utility(
    runs: Sequence[RunRecord], *, pruned: bool, by_support: bool = False, shown: bool = False
) -> Utility:
    """Utility of the kept (``pruned``: by the standard-error rule, or ``by_support``), the
    ``shown`` (the significance test's) or all redescriptions of ``runs``."""
    chosen = [
        [
            r
            for r in run.reds
            if (not pruned or (r.kept_by_support if by_support else r.kept))
            and (not shown or r.shown)
        ]
        for run in runs
    ]
    reds = [r for run in chosen for r in run]
    true_j = [r.true_jaccard for r in reds]
    noisy = [r.noisy_jaccard for r in reds if r.noisy_jaccard is not None]
    rho = spearman(noisy, true_j)[0] if len(noisy) == len(true_j) else None
    return Utility(
        count=len(reds),
        per_run_median=median([len(run) for run in chosen]) if chosen else 0.0,
        true_j_q1=percentile(true_j, 25) if true_j else None,
        true_j_median=percentile(true_j, 50) if true_j else None,
        true_j_q3=percentile(true_j, 75) if true_j else None,
        share_p_good=sum(r.true_p <= P_GOOD for r in reds) / len(reds) if reds else None,
        excess_median=median([r.excess for r in reds]) if reds else None,
        spearman_rho=rho,
    )


@dataclass(frozen=True)
class Summary:
    """One (dataset, miner, ε) setting over its runs."""

    dataset: str
    miner: str
    epsilon: float | None
    runs: int
    wall_median_s: float
    wall_min_s: float
    wall_max_s: float
    cpu_median_s: float | None
    charged_calls: float
    threshold: float
    pruned: Utility
    pruned_by_support: Utility
    unpruned: Utility
    shown: Utility
    statuses: list[str] = field(default_factory=list)


def summarise(records: Sequence[RunRecord]) -> list[Summary]:
    """One summary per (dataset, miner, ε), first-seen order."""
    keys = list(dict.fromkeys((r.dataset, r.miner, r.epsilon) for r in records))
    summaries = []
    for key in keys:
        runs = [r for r in records if (r.dataset, r.miner, r.epsilon) == key]
        walls = [r.wall_s for r in runs]
        cpus = [r.cpu_s for r in runs if r.cpu_s is not None]
        summaries.append(
            Summary(
                dataset=key[0],
                miner=key[1],
                epsilon=key[2],
                runs=len(runs),
                wall_median_s=median(walls),
                wall_min_s=min(walls),
                wall_max_s=max(walls),
                cpu_median_s=median(cpus) if cpus else None,
                charged_calls=median([r.charged_calls for r in runs]),
                threshold=runs[0].threshold,
                pruned=utility(runs, pruned=True),
                pruned_by_support=utility(runs, pruned=True, by_support=True),
                unpruned=utility(runs, pruned=False),
                shown=utility(runs, pruned=False, shown=True),
                statuses=sorted({r.status for r in runs}),
            )
        )
    return summaries


def _fmt(value: float | None, digits: int = 3) -> str:
    return "–" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.0f}%"


def _eps(value: float | None) -> str:
    return "–" if value is None else f"{value:g}"


def markdown(summaries: Sequence[Summary], n_rows: Mapping[str, int]) -> str:
    """Timing, scaling and utility tables."""
    lines = ["### Wall time of a whole run (s)", ""]
    lines += [
        "| dataset | rows | miner | ε | runs | wall median (min–max) | CPU s | calls "
        "| × LayeredT | ≤ 0.3× |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    layered = {s.dataset: s.wall_median_s for s in summaries if s.miner == "LayeredT"}
    for s in summaries:
        ratio = s.wall_median_s / layered[s.dataset] if s.dataset in layered else None
        ok = (
            "–"
            if ratio is None or s.epsilon is None
            else ("yes" if ratio <= TARGET_RATIO else "no")
        )
        lines.append(
            f"| {s.dataset} | {n_rows[s.dataset]} | {s.miner} | {_eps(s.epsilon)} | {s.runs} | "
            f"{s.wall_median_s:.1f} ({s.wall_min_s:.1f}–{s.wall_max_s:.1f}) | "
            f"{_fmt(s.cpu_median_s, 1)} | {s.charged_calls:g} | {_fmt(ratio, 2)} | {ok} |"
        )
    lines += ["", "### Growth of wall time with rows (relative to mammals)", ""]
    lines += ["| miner | ε | " + " | ".join(n_rows) + " |", "|---|---|" + "---|" * len(n_rows)]
    for miner, epsilon in dict.fromkeys((s.miner, s.epsilon) for s in summaries):
        walls = {
            s.dataset: s.wall_median_s
            for s in summaries
            if (s.miner, s.epsilon) == (miner, epsilon)
        }
        base = walls.get("mammals")
        cells = [
            "–"
            if key not in walls
            else f"{walls[key]:.1f} s" + (f" ({walls[key] / base:.1f}×)" if base else "")
            for key in n_rows
        ]
        lines.append(f"| {miner} | {_eps(epsilon)} | " + " | ".join(cells) + " |")
    lines += ["", "### Utility (true statistics, harness-evaluated)", ""]
    lines += [
        "| dataset | miner | ε | set | reds (per run) | true J q1 / median / q3 "
        "| true p ≤ 0.01 | median J − J_ind | Spearman noisy/true J |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summaries:
        sets = [("all", s.unpruned)]
        if s.epsilon is not None:
            sets[:0] = [
                ("shown (significance test)", s.shown),
                (f"pruned SE(J) ≤ {MAX_JACCARD_ERROR:g}", s.pruned),
                (f"pruned I ≥ {s.threshold:g}", s.pruned_by_support),
            ]
        for label, u in sets:
            lines.append(
                f"| {s.dataset} | {s.miner} | {_eps(s.epsilon)} | {label} | "
                f"{u.count} ({u.per_run_median:g}) | {_fmt(u.true_j_q1)} / "
                f"{_fmt(u.true_j_median)} / {_fmt(u.true_j_q3)} | {_pct(u.share_p_good)} | "
                f"{_fmt(u.excess_median)} | {_fmt(u.spearman_rho)} |"
            )
    lines += ["", *_targets(summaries)]
    return "\n".join(lines) + "\n"


def guarantee_table(records: Sequence[RunRecord]) -> str:
    """The charged calls of every (dataset, miner, ε) by operation and guarantee, summed over
    its runs: where tree.mcmc's exact sampler ran ("pure") and where the chain did."""
    totals: dict[tuple[str, str, float | None], Counter[str]] = {}
    for run in records:
        if run.epsilon is not None:
            totals.setdefault((run.dataset, run.miner, run.epsilon), Counter()).update(
                run.guarantees
            )
    lines = ["", "### Guarantees of the charged calls (all runs)", ""]
    lines += ["| dataset | miner | ε | calls by operation and guarantee |", "|---|---|---|---|"]
    for (dataset, miner, epsilon), counts in totals.items():
        cells = ", ".join(f"{key} × {n}" for key, n in sorted(counts.items()))
        lines.append(f"| {dataset} | {miner} | {_eps(epsilon)} | {cells} |")
    return "\n".join(lines) + "\n"


def _targets(summaries: Sequence[Summary]) -> list[str]:
    layered = next((s for s in summaries if (s.dataset, s.miner) == ("mammals", "LayeredT")), None)
    lines = [f"### Targets at ε = 1 on mammals (pruned set, SE(J) ≤ {MAX_JACCARD_ERROR:g})", ""]
    lines += ["| miner | Spearman ≥ 0.9 | median true J vs LayeredT (gap ≤ 0.2) |", "|---|---|---|"]
    for s in summaries:
        if (s.dataset, s.epsilon) != ("mammals", 1.0):
            continue
        rho = s.pruned.spearman_rho
        gap = (
            None
            if layered is None
            or layered.unpruned.true_j_median is None
            or s.pruned.true_j_median is None
            else layered.unpruned.true_j_median - s.pruned.true_j_median
        )
        rho_ok = "met" if rho is not None and rho >= TARGET_SPEARMAN else "not met"
        lines.append(
            f"| {s.miner} | {_fmt(rho)} ({rho_ok}) | "
            f"{_fmt(s.pruned.true_j_median)} vs "
            f"{_fmt(None if layered is None else layered.unpruned.true_j_median)}: gap "
            f"{_fmt(gap)} ({'met' if gap is not None and gap <= TARGET_J_GAP else 'not met'}) |"
        )
    return lines


# -- figure --------------------------------------------------------------------------------------


def plot_scatter(
    records: Sequence[RunRecord], dataset: str, miners: Sequence[str], out: Path
) -> Path:
    """Noisy vs true Jaccard at ε = 1, a panel per miner; hollow = dropped by pruning."""
    figure = Figure(figsize=(3.6 * len(miners), 3.6))
    axes = figure.subplots(1, len(miners), squeeze=False, sharex=True, sharey=True)[0]
    for axis, miner in zip(axes, miners, strict=True):
        reds = [
            r
            for run in records
            if (run.dataset, run.miner, run.epsilon) == (dataset, miner, 1.0)
            for r in run.reds
        ]
        kept = [r for r in reds if r.kept]
        dropped = [r for r in reds if not r.kept]
        axis.scatter(
            [r.true_jaccard for r in dropped],
            [r.noisy_jaccard for r in dropped],
            s=12,
            facecolors="none",
            edgecolors="grey",
            linewidths=0.6,
            label=f"pruned out ({len(dropped)})",
        )
        axis.scatter(
            [r.true_jaccard for r in kept],
            [r.noisy_jaccard for r in kept],
            s=14,
            color="tab:blue",
            edgecolors="none",
            label=f"kept ({len(kept)})",
        )
        axis.plot([0, 1], [0, 1], color="black", linewidth=0.7)
        axis.set_xlim(-0.02, 1.02)
        axis.set_ylim(-0.02, 1.02)
        axis.grid(alpha=0.3)
        axis.set_title(f"{miner}, ε = 1", fontsize=9)
        axis.set_xlabel("true Jaccard")
        axis.legend(fontsize=7, loc="upper left")
    axes[0].set_ylabel("noisy Jaccard")
    figure.suptitle(f"{dataset}: noisy vs true Jaccard", fontsize=10)
    figure.tight_layout()
    path = out / f"trees_scatter_{dataset}.png"
    figure.savefig(path, dpi=120)
    return path


# -- main ----------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> Config:
    """Command line → Config."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="1 run, mammals, ε = 1 only")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="seconds-long check that the script runs (the test suite's): 1 run at ε = 1 of "
        "every miner on the bundled Mushroom table, padding off, clired not run",
    )
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument(
        "--datasets", default=None, help="comma list of mammals,asia,teeth,stroke,heart"
    )
    parser.add_argument(
        "--pair-score", default=None, choices=("paper", "gain"), help="MCMCTreePair's score"
    )
    parser.add_argument(
        "--no-padding",
        action="store_true",
        help="release padding off: utility only (wall times then omit the padding)",
    )
    add_server_timing_arguments(parser)
    parser.add_argument(
        "--miners", default=None, help=f"comma list (default {','.join(DEFAULT_MINERS)})"
    )
    parser.add_argument("--epsilons", default=None, help="comma list (default 1,0.1)")
    parser.add_argument("--clired", default=",".join(CLIRED_ALGOS), help="'' to skip")
    parser.add_argument("--clired-python", type=Path, default=DEFAULT_CLIRED_PYTHON)
    parser.add_argument("--clired-runs", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out")
    args = parser.parse_args(argv)
    if args.smoke:
        return Config(
            out=args.out.resolve(),
            datasets=(SMOKE_KEY,),
            miners=comma_names(args.miners or ",".join(SMOKE_MINERS), MINERS, "miner"),
            epsilons=(1.0,),
            runs=1,
            clired=(),
            clired_python=args.clired_python,
            clired_runs=0,
            smoke=True,
        )
    default_datasets = "mammals" if args.quick else "mammals,asia"
    default_epsilons = "1" if args.quick else ",".join(f"{e:g}" for e in EPSILONS)
    return Config(
        out=args.out.resolve(),  # clired runs in its own directory: relative paths would break
        datasets=comma_names(args.datasets or default_datasets, DATASETS, "dataset"),
        miners=comma_names(args.miners or ",".join(DEFAULT_MINERS), MINERS, "miner"),
        epsilons=tuple(float(e) for e in (args.epsilons or default_epsilons).split(",")),
        runs=args.runs if args.runs is not None else (1 if args.quick else RUNS),
        clired=comma_names(args.clired, CLIRED_ALGOS, "clired algorithm"),
        clired_python=args.clired_python,
        clired_runs=args.clired_runs,
        pair_score=args.pair_score,
        no_padding=args.no_padding,
        timing_settings=server_timing_settings(args),
    )


def _server_settings(config: Config) -> dict[str, str]:
    """The server's DPMINE_* settings: padding off for ``--smoke`` and ``--no-padding``, and the
    timing settings given (``--calibration``, ``--max-in-flight``)."""
    settings = dict(config.timing_settings)
    if config.smoke or config.no_padding:
        settings["DPMINE_TIMING_PADDING"] = "false"
    return settings


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns the exit status."""
    unwind_on_sigterm()
    config = parse_args(argv)
    config.out.mkdir(parents=True, exist_ok=True)
    started = datetime.now(UTC).isoformat(timespec="seconds")
    with tempfile.TemporaryDirectory(prefix="dpmine-trees-data-") as scratch:
        prepared = []
        for key in config.datasets:
            prepared.append(prepare_table(key, Path(scratch)))
        truths = {data.key: load_harness_data(data) for data in prepared}
        records: list[RunRecord] = []
        for data in prepared:
            for algo in config.clired:
                for repetition in range(config.clired_runs):
                    records.append(run_clired(data, algo, config, repetition))
        dp_records, warnings = run_dp_stage(prepared, truths, config)
        records += dp_records
        n_rows = {data.key: data.n_rows for data in prepared}
    summaries = summarise(records)
    report = markdown(summaries, n_rows)
    checked = [r for run in records if run.epsilon is not None for r in run.reds]
    agreeing = sum(r.agrees for r in checked)
    report += (
        f"\nHarness vs server evaluator: {agreeing}/{len(checked)} redescriptions with equal "
        "|I| and |U|.\n"
    )
    report += guarantee_table(records)
    report += (
        f"\nServer log: {warnings['overruns']} padded deadlines overrun (release withheld), "
        f"{warnings['late_job_claims']} jobs claimed later than their allowance.\n"
    )
    print(report)
    figures = [
        str(plot_scatter(records, key, config.miners, config.out))
        for key in config.datasets
        if 1.0 in config.epsilons and config.miners
    ]
    payload: dict[str, Any] = {
        "started": started,
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine_info(),
        "config": {
            **asdict(config),
            "out": str(config.out),
            "clired_python": str(config.clired_python),
        },
        "defaults": {
            "in_trees": IN_TREES,
            "omega": OMEGA,
            "mc_iterations": MC_ITERATIONS,
            "depth": DEPTH,
            "clired_parameters": CLIRED_PARAMETERS,
        },
        "n_rows": n_rows,
        "summaries": [asdict(s) for s in summaries],
        "runs": [asdict(r) for r in records],
        "figures": figures,
        "harness_agreement": [agreeing, len(checked)],
        "timing_warnings": warnings,
        "report": report,
    }
    path = config.out / "trees.json"
    path.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {path} and {', '.join(figures) or 'no figure'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
