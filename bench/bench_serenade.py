"""Serenade benchmark of dpmine: private greedy redescription mining against ReReMi.

1. Wall time of whole ``SerenadeES`` and ``SerenadeCS`` runs (ALGORITHMS.md §2.5) with the
   paper's defaults (§2.6: I = 20, τ = 4, K = 80, split d3 = (0.6, 0.3, 0.1), J_min = 0.3, at
   most 4 literals per query, x0 = 10 % of n as a count, steepness from the server's line
   search) at ε ∈ {0.5, 1, 10}, five runs each, through the analyst client against a real
   uvicorn server (SQLite), on two real two-view datasets: European mammals (species vs
   monthly climate) and Asia (present-day dental traits vs bioclim).
2. Utility, computed by this harness with direct access to the data (never through the
   server): every returned redescription's queries are evaluated with numpy under the §1.1
   semantics, giving its true Jaccard; per setting the true-Jaccard median, quartiles and
   share ≥ 0.3, and Spearman's ρ between the released noisy Jaccard and the true one; one
   scatter figure per dataset (noisy vs true Jaccard, a panel per method × ε).
3. The non-private baseline, ReReMi of python-clired 6.0.9 (BASELINES.md §1), run once per
   dataset in a capped subprocess; its output is cached under ``--out`` and reused.
4. ``--utility`` (issue #12): the auto defaults (``preset="auto"``: only ε and at most 4
   literals per query given) against the paper preset, on mammals, asia and china, per ε ∈
   {0.5, 1, 10}: results, median true J, share ≥ 0.3, share significant (§1.3 p-value on the
   true counts < 0.01), median J − J_ind (J of independent queries of the same supports),
   median support / n, Spearman of noisy against true J, and the coverage of the released
   90 % Jaccard intervals (:mod:`dpmine.intervals`); the targets of the issue are checked for
   auto on mammals and asia. Writes ``<out>/serenade_utility.json``.

Usage::

    .venv/bin/python bench/bench_serenade.py [--quick] [--out bench/out]
                                             [--clired mammals,asia] [--clired-timeout MIN]
    .venv/bin/python bench/bench_serenade.py --utility [--runs N] [--no-padding]

Writes ``<out>/serenade.json``, ``<out>/serenade_scatter_<dataset>.png`` and the ReReMi cache
``<out>/clired/<dataset>/``; prints Markdown tables. See bench/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import math
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import matplotlib as mpl
import numpy as np
import numpy.typing as npt
import pandas as pd
from matplotlib.figure import Figure
from scipy import stats

import dpmine
from _support import (
    REPO_ROOT,
    KeptOpen,
    ServerHandle,
    StoppedRun,
    add_server_timing_arguments,
    load_average,
    machine_info,
    median,
    mine_whole,
    owner_confirmed,
    percentile,
    register_files,
    server_for_backend,
    server_timing_settings,
    unwind_on_sigterm,
    wait_if_asked,
    write_bundled_pair,
)
from dpmine.miners import SerenadeCS, SerenadeES
from dpmine.miners.greedy import MinedRedescription, Preset
from dpmine.wire import (
    MAX_BATCH_PARTS,
    And,
    BooleanAttribute,
    BoolLiteral,
    CalibrateRequest,
    CalibrateResponse,
    CatLiteral,
    ComputeQualityRequest,
    CsvPairSource,
    DatasetMetadata,
    Expr,
    Not,
    NumericAttribute,
    NumLiteral,
    Or,
    Redescription,
    SerenadeOptions,
)
from dpmine.wire.statistics import p_value as binomial_p_value
from dpmine_server.data.loaders import load_store
from dpmine_server.data.propose import propose_metadata
from dpmine_server.services.timing import BATCH_PART_SECONDS

mpl.use("Agg")

DATA_ROOT = Path("/work/shared/data")
Method = Literal["ES", "CS"]
DATASET_KEYS = ("mammals", "asia")
#: Chosen with --datasets only (teeth: 28,886 rows, the scaling set; china: 4,416 rows).
EXTRA_DATASET_KEYS = ("teeth", "china")
#: The utility benchmark of issue #12 (--utility): three shared two-view sets.
UTILITY_DATASET_KEYS = ("mammals", "asia", "china")
UTILITY_RUNS = 3
PRESETS: tuple[Preset, ...] = ("auto", "paper")
#: "Significant": the §1.3 p-value on the true counts below this.
SIGNIFICANCE = 0.01
#: ReReMi's median Jaccard quoted by issue #12 (not measured by --utility).
REREMI_QUOTED = {"mammals": 0.84}
METHODS: tuple[Method, ...] = ("ES", "CS")
EPSILONS = (0.5, 1.0, 10.0)
RUNS = 5
# Serenade defaults (ALGORITHMS.md §2.6).
N_INITIAL = 20
TAU = 4
ROUNDS = 80
SPLIT = (0.6, 0.3, 0.1)
MIN_JACCARD = 0.3
MAX_LITERALS = 4
X0_FRACTION = 0.1
GOOD_JACCARD = 0.3
GRANT_EPSILON = 1_000.0
WARMUP_EPSILON = 0.01
CLIENT_TIMEOUT_S = 900.0
# The literature figure quoted in the issue (not measured here).
LITERATURE_ES_SECONDS = (180.0, 240.0)
LITERATURE_NOTE = "roughly 3–4 minutes for one ES run on 2,500 rows"
# ReReMi (BASELINES.md §1).
CLIRED_VERSION = "6.0.9"
CLIRED_PARAMETERS: dict[str, str] = {
    "mining_algo": "reremi",
    "min_itm_in": "0.1",
    "max_var_s0": "4",
    "max_var_s1": "4",
    "verbosity": "1",
}
#: Files missing from the 6.0.9 wheel (``package_data`` matches only ``*defs*.txt``).
CLIRED_MISSING_FILES = (
    "actions_rdefs_basic.xml",
    "fields_rdefs_basic.xml",
    "fields_rdefs_more.xml",
    "fields_vdefs_basic.xml",
    "fields_vdefs_more.xml",
    "confdef.xsl",
)
CLIRED_TIMEOUT_MIN = 45.0
#: Boolean tokens of the harness's own parser (the same tokens the server's loader accepts).
TRUE_TOKENS = frozenset({"1", "1.0", "true", "t", "yes"})
FALSE_TOKENS = frozenset({"0", "0.0", "false", "f", "no"})

BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]
ObjectArray = npt.NDArray[np.object_]
#: A live server's analyst connection and a handle per dataset (:func:`registered_server`).
Served = tuple[dpmine.Connection, dict[str, dpmine.DatasetHandle]]


@dataclass(frozen=True)
class Config:
    """What one run of the benchmark does."""

    out: Path
    datasets: tuple[str, ...]
    epsilons: tuple[float, ...]
    runs: int
    clired: tuple[str, ...]
    clired_timeout_s: float
    clired_rerun: bool
    install_clired: bool
    skip_serenade: bool
    data_root: Path
    wait_quiet: float
    padding: bool = True
    utility: bool = False
    smoke: bool = False
    batching: bool = False
    #: Extra server settings (``--calibration``, ``--max-in-flight``): DPMINE_* → value.
    server_env: Mapping[str, str] = field(default_factory=dict)


# -- data ----------------------------------------------------------------------------------------


def enabled_columns(types_md: Path, file_name: str) -> list[str]:
    """Columns of ``file_name`` flagged T ("enabled in source") in a dataset's TYPES.md."""
    section: str | None = None
    found: list[str] = []
    for line in types_md.read_text().splitlines():
        if line.startswith("## "):
            section = line[3:].split(":", 1)[0].strip()
            continue
        if section != file_name or not line.startswith("| ") or line.startswith("| column"):
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[3] == "T":
            found.append(cells[0])
    return found


@dataclass(frozen=True)
class ViewChoice:
    """Which files and columns make up one benchmark dataset's two views."""

    key: str
    title: str
    folder: Path
    left_file: str
    right_file: str
    left: list[str]
    right: list[str]
    note: str


def _csv_header(path: Path) -> list[str]:
    return list(pd.read_csv(path, nrows=0).columns)


def mammals_views(folder: Path) -> ViewChoice:
    """Left = all 124 species; right = the 48 monthly temperature/precipitation columns
    (coordinates and bioclim excluded, as in BASELINES.md §1)."""
    left = [c for c in _csv_header(folder / "left.csv") if c != "id"]
    right = [c for c in _csv_header(folder / "right.csv") if "_temp_" in c or c.startswith("prec_")]
    if len(left) != 124 or len(right) != 48:
        raise RuntimeError(f"mammals: expected 124 + 48 columns, found {len(left)} + {len(right)}")
    return ViewChoice(
        key="mammals",
        title="European mammals",
        folder=folder,
        left_file="left.csv",
        right_file="right.csv",
        left=left,
        right=right,
        note="left = 124 species (Boolean); right = 48 monthly *_temp_*/prec_* (numeric)",
    )


def asia_views(folder: Path) -> ViewChoice:
    """Left = the 8 trait columns flagged T; right = the 19 bioclim columns flagged T
    (longitude/latitude dropped), as in BASELINES.md §1."""
    types_md = folder / "TYPES.md"
    left = enabled_columns(types_md, "left.csv")
    right = [
        c for c in enabled_columns(types_md, "right.csv") if c not in {"longitude", "latitude"}
    ]
    if len(left) != 8 or len(right) != 19:
        raise RuntimeError(f"asia: expected 8 + 19 columns, found {len(left)} + {len(right)}")
    return ViewChoice(
        key="asia",
        title="Asia (present-day traits vs climate)",
        folder=folder,
        left_file="left.csv",
        right_file="right.csv.gz",
        left=left,
        right=right,
        note="left = 8 dental-trait means flagged T (numeric); right = bio1..bio19 (numeric)",
    )


def teeth_views(folder: Path) -> ViewChoice:
    """Left = the 11 dental-trait means flagged T; right = bio1..bio19 flagged T (28,886 rows,
    the scaling set of issue #9)."""
    types_md = folder / "TYPES.md"
    left = enabled_columns(types_md, "left.csv")
    right = enabled_columns(types_md, "right.csv")
    if len(left) != 11 or len(right) != 19:
        raise RuntimeError(f"teeth: expected 11 + 19 columns, found {len(left)} + {len(right)}")
    return ViewChoice(
        key="teeth",
        title="Teeth (global dental traits vs climate)",
        folder=folder,
        left_file="left.csv.gz",
        right_file="right.csv.gz",
        left=left,
        right=right,
        note="left = 11 dental-trait means flagged T (numeric); right = bio1..bio19 (numeric)",
    )


def china_views(folder: Path) -> ViewChoice:
    """Left = the 11 dental-trait means flagged T; right = bio1..bio19 and NPP flagged T
    (long/lat dropped): 4,416 rows, the third shared two-view set of issue #12."""
    types_md = folder / "TYPES.md"
    left = enabled_columns(types_md, "left.csv")
    right = [c for c in enabled_columns(types_md, "right.csv") if c not in {"long", "lat"}]
    if len(left) != 11 or len(right) != 20:
        raise RuntimeError(f"china: expected 11 + 20 columns, found {len(left)} + {len(right)}")
    return ViewChoice(
        key="china",
        title="China (dental traits vs climate)",
        folder=folder,
        left_file="left.csv",
        right_file="right.csv",
        left=left,
        right=right,
        note="left = 11 dental-trait means flagged T (numeric); right = bio1..bio19 + NPP",
    )


VIEW_CHOOSERS: dict[str, tuple[str, Callable[[Path], ViewChoice]]] = {
    "mammals": ("rm_european_mammals", mammals_views),
    "asia": ("rm_asia_neogene_present", asia_views),
    "teeth": ("rm_teeth_global", teeth_views),
    "china": ("rm_china_traits", china_views),
}


#: ``--smoke``: the bundled Mushroom table as two views (no shared data needed).
SMOKE_KEY = "mushroom"
SMOKE_EPSILONS = (1.0,)


def bundled_views(scratch: Path) -> ViewChoice:
    """The smoke mode's dataset: one row in 48 of the bundled Mushroom table (170 rows), written
    as a CSV pair under ``scratch`` (``_support.write_bundled_pair``)."""
    folder = scratch / "bundled-mushroom"
    left, right = write_bundled_pair(folder)
    return ViewChoice(
        key=SMOKE_KEY,
        title="Mushroom (bundled, 1 row in 48)",
        folder=folder,
        left_file="left.csv",
        right_file="right.csv",
        left=left,
        right=right,
        note="left = cap, odor and gill attributes; right = the others (categorical)",
    )


def view_choice(key: str, data_root: Path, scratch: Path) -> ViewChoice:
    """The views of dataset ``key``: :data:`SMOKE_KEY` from the repository's bundled data, the
    others from ``data_root`` (the shared data folder)."""
    if key == SMOKE_KEY:
        return bundled_views(scratch)
    folder, chooser = VIEW_CHOOSERS[key]
    return chooser(data_root / folder)


@dataclass(frozen=True)
class PreparedData:
    """Trimmed CSV pair (``id`` + chosen columns) and the owner's confirmed metadata."""

    choice: ViewChoice
    directory: Path
    n_rows: int
    metadata: DatasetMetadata

    @property
    def key(self) -> str:
        """Dataset id on the server."""
        return self.choice.key

    @property
    def source(self) -> CsvPairSource:
        """The CSV pair as the server reads it (relative to ``directory``)."""
        return CsvPairSource(left="left.csv", right="right.csv", id_column="id")

    @property
    def x0(self) -> float:
        """x0 = 10 % of n as a count. The analyst chooses x0 (a public parameter); the harness
        uses the true n for it instead of buying a noisy count."""
        return X0_FRACTION * self.n_rows


def _read_strings(path: Path) -> pd.DataFrame:
    return pd.read_csv(path, dtype=str, keep_default_na=False, na_filter=False)


def prepare_dataset(choice: ViewChoice, directory: Path) -> PreparedData:
    """Write the trimmed CSVs (values copied as text) and propose metadata on them (owner)."""
    directory.mkdir(parents=True, exist_ok=True)
    left = _read_strings(choice.folder / choice.left_file)
    right = _read_strings(choice.folder / choice.right_file)
    if not left["id"].equals(right["id"]):
        raise RuntimeError(f"{choice.key}: the two files' id columns differ")
    left[["id", *choice.left]].to_csv(directory / "left.csv", index=False)
    right[["id", *choice.right]].to_csv(directory / "right.csv", index=False)
    source = CsvPairSource(left="left.csv", right="right.csv", id_column="id")
    # The harness is the owner: it takes the proposal as is.
    metadata = owner_confirmed(propose_metadata(source, kind="views", base_dir=directory))
    return PreparedData(choice=choice, directory=directory, n_rows=len(left), metadata=metadata)


# -- the harness's own query evaluation (§1.1) ---------------------------------------------------


@dataclass(frozen=True)
class HarnessData:
    """Both views as numpy arrays, parsed by the harness itself from the trimmed CSVs."""

    n_rows: int
    booleans: dict[str, tuple[BoolArray, BoolArray]]  # name -> (value, present)
    numbers: dict[str, FloatArray]  # clipped to the public range, NaN = missing
    categories: dict[str, tuple[ObjectArray, BoolArray]]  # name -> (value, present)


def load_harness_data(data: PreparedData) -> HarnessData:
    """Parse every attribute as its public type says; numeric values clipped to [lo, hi]."""
    frame = pd.concat(
        [
            _read_strings(data.directory / "left.csv").drop(columns="id"),
            _read_strings(data.directory / "right.csv").drop(columns="id"),
        ],
        axis=1,
    )
    missing = set(data.metadata.missing_values)
    booleans: dict[str, tuple[BoolArray, BoolArray]] = {}
    numbers: dict[str, FloatArray] = {}
    categories: dict[str, tuple[ObjectArray, BoolArray]] = {}
    for attribute in data.metadata.attributes:
        raw = frame[attribute.name].str.strip()
        present = ~raw.isin(missing).to_numpy()
        if isinstance(attribute, BooleanAttribute):
            lowered = raw.str.lower()
            truth = lowered.isin(TRUE_TOKENS).to_numpy()
            if not (truth | lowered.isin(FALSE_TOKENS).to_numpy() | ~present).all():
                raise ValueError(f"{attribute.name}: a value is not a Boolean token")
            booleans[attribute.name] = (truth & present, present)
        elif isinstance(attribute, NumericAttribute):
            values = pd.to_numeric(raw.where(present), errors="raise").to_numpy(np.float64)
            numbers[attribute.name] = np.clip(values, attribute.lo, attribute.hi)
        else:
            categories[attribute.name] = (raw.to_numpy(dtype=object), present)
    return HarnessData(n_rows=len(frame), booleans=booleans, numbers=numbers, categories=categories)


def evaluate_query(expr: Expr, data: HarnessData) -> BoolArray:
    """Rows where ``expr`` holds: closed numeric bounds; a literal on a missing value is false
    and so is its negation; ``Not`` is the plain complement (wire/queries.py, §1.1)."""
    if isinstance(expr, And | Or):
        parts = [evaluate_query(term, data) for term in expr.terms]
        combined = parts[0].copy()
        for part in parts[1:]:
            if isinstance(expr, And):
                combined &= part
            else:
                combined |= part
        return combined
    if isinstance(expr, Not):
        return ~evaluate_query(expr.term, data)
    inside, present = _literal_rows(expr, data)
    return (present & ~inside) if expr.negated else inside


def _literal_rows(
    literal: BoolLiteral | CatLiteral | NumLiteral, data: HarnessData
) -> tuple[BoolArray, BoolArray]:
    """(rows where the positive literal holds, rows where the attribute is present)."""
    if isinstance(literal, BoolLiteral):
        return data.booleans[literal.attribute]
    if isinstance(literal, CatLiteral):
        labels, known = data.categories[literal.attribute]
        return known & (labels == literal.category), known
    values = data.numbers[literal.attribute]
    present = ~np.isnan(values)
    inside = present.copy()
    if literal.lower is not None:
        inside &= values >= literal.lower
    if literal.upper is not None:
        inside &= values <= literal.upper
    return inside, present


@dataclass(frozen=True)
class TrueCounts:
    """Exact statistics of one redescription (§1.2)."""

    support: int  # |I| = E11
    union: int  # |U|
    left: int
    right: int

    @property
    def jaccard(self) -> float:
        """J = |I| / |U| (0 when U is empty)."""
        return self.support / self.union if self.union else 0.0


def true_counts(red: Redescription, data: HarnessData) -> TrueCounts:
    """Evaluate both queries on the data and count the cells."""
    left = evaluate_query(red.left, data)
    right = evaluate_query(red.right, data)
    return TrueCounts(
        support=int(np.count_nonzero(left & right)),
        union=int(np.count_nonzero(left | right)),
        left=int(np.count_nonzero(left)),
        right=int(np.count_nonzero(right)),
    )


# -- Serenade over HTTP --------------------------------------------------------------------------


@dataclass(frozen=True)
class RedRecord:
    """One released redescription: its queries, noisy statistics and true statistics."""

    left: str
    right: str
    query: dict[str, Any]
    noisy_support: int
    noisy_union: int
    noisy_jaccard: float
    noisy_p_value: float | None
    true_support: int
    true_union: int
    true_jaccard: float
    true_left: int
    true_right: int


@dataclass(frozen=True)
class RunRecord:
    """One whole Serenade run."""

    dataset: str
    method: str
    epsilon: float
    repetition: int
    wall_s: float
    charged_calls: int
    epsilon_spent: float
    threshold_modes: list[str]
    x0: float
    load_average: tuple[float, float, float]
    redescriptions: list[RedRecord]


def make_miner(method: Method, epsilon: float, x0: float) -> SerenadeES | SerenadeCS:
    """A miner with the paper's defaults (§2.6); the steepness comes from the server."""
    options = SerenadeOptions(max_literals=MAX_LITERALS)
    if method == "ES":
        return SerenadeES(
            preset="paper",
            rounds=ROUNDS,
            epsilon=epsilon,
            split=SPLIT,
            n_initial=N_INITIAL,
            x0=x0,
            steepness=None,
            options=options,
        )
    return SerenadeCS(
        preset="paper",
        tau=TAU,
        min_jaccard=MIN_JACCARD,
        epsilon=epsilon,
        split=SPLIT,
        n_initial=N_INITIAL,
        x0=x0,
        steepness=None,
        options=options,
    )


def run_once(
    handle: dpmine.DatasetHandle,
    data: PreparedData,
    truth: HarnessData,
    *,
    method: Method,
    epsilon: float,
    repetition: int,
) -> RunRecord:
    """Time one whole ``mine()`` (plan + every charged call), then score it on the data."""
    miner = make_miner(method, epsilon, data.x0)
    load = load_average()
    start = time.perf_counter()
    mine_whole(miner, handle)
    wall = time.perf_counter() - start
    records: list[RedRecord] = []
    for found in miner.redescriptions_:
        exact = true_counts(found.redescription, truth)
        noisy = found.statistics
        records.append(
            RedRecord(
                left=found.left,
                right=found.right,
                query=found.redescription.model_dump(mode="json"),
                noisy_support=noisy.support,
                noisy_union=noisy.union,
                noisy_jaccard=noisy.jaccard,
                noisy_p_value=noisy.p_value,
                true_support=exact.support,
                true_union=exact.union,
                true_jaccard=exact.jaccard,
                true_left=exact.left,
                true_right=exact.right,
            )
        )
    return RunRecord(
        dataset=data.key,
        method=method,
        epsilon=epsilon,
        repetition=repetition,
        wall_s=round(wall, 3),
        charged_calls=len(miner.receipts_),
        epsilon_spent=miner.budget_spent_,
        threshold_modes=sorted(set(miner.threshold_modes_)),
        x0=data.x0,
        load_average=load,
        redescriptions=records,
    )


@dataclass(frozen=True)
class Calibration:
    """The server's steepness line search for a dataset's x0 (free, public)."""

    s: float
    delta: float
    x0: float
    n_max: int


def calibrate(connection: dpmine.Connection, data: PreparedData) -> Calibration:
    """``serenade.calibrate`` with the harness's x0 and no s: the s the miners will get."""
    response = connection.call(
        f"/v1/datasets/{data.key}/redescriptions/serenade/calibrate",
        CalibrateRequest(x0=data.x0),
        CalibrateResponse,
    )
    return Calibration(s=response.s, delta=response.delta, x0=response.x0, n_max=response.n_max)


@dataclass
class SerenadeStage:
    """Everything the Serenade stage measured."""

    runs: list[RunRecord] = field(default_factory=list)
    calibrations: dict[str, Calibration] = field(default_factory=dict)
    cold_load_s: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0


def register_all(
    server: ServerHandle, prepared: Sequence[PreparedData], grant: float = GRANT_EPSILON
) -> str:
    """Upload every dataset as the owner, then create one analyst with a grant of ``grant`` on
    each; returns its key."""
    with server.connect() as owner:
        for data in prepared:
            register_files(
                owner,
                dataset_id=data.key,
                name=data.choice.title,
                metadata=data.metadata,
                source=data.source,
                files={"left": data.directory / "left.csv", "right": data.directory / "right.csv"},
            )
        created = owner.admin.add_principal("analyst", "analyst")
        for data in prepared:
            owner.admin.grant(data.key, "analyst", grant)
    return created.api_key


@contextmanager
def registered_server(
    prepared: Sequence[PreparedData], config: Config, prefix: str
) -> Iterator[Served]:
    """A live SQLite server with the datasets registered: the analyst's connection and a handle
    per dataset (the server's log tail is printed if anything fails)."""
    with (
        tempfile.TemporaryDirectory(prefix=prefix) as work,
        server_for_backend(
            "sqlite",
            Path(work),
            extra_env=dict(config.server_env)
            | ({} if config.padding else {"DPMINE_TIMING_PADDING": "false"}),
        ) as server,
    ):
        try:
            key = register_all(server, prepared)
            with server.connect(key, timeout=CLIENT_TIMEOUT_S) as connection:
                yield connection, {data.key: connection.dataset(data.key) for data in prepared}
        except BaseException:
            print(f"server log tail:\n{server.log_tail()}", file=sys.stderr)
            raise


class StageServers(KeptOpen[tuple[tuple[str, ...], bool], Served]):
    """The servers of the stages (:func:`registered_server`): a fresh one per stage, or, with
    ``keep`` (``--smoke``), each left running in ``keep`` after its first stage and used again
    by every later stage with the same datasets and padding (datasets registered once)."""

    def stage(
        self, prepared: Sequence[PreparedData], config: Config, prefix: str
    ) -> contextlib.AbstractContextManager[Served]:
        """The analyst's connection and a handle per dataset (:func:`registered_server`)."""
        key = (tuple(data.key for data in prepared), config.padding)
        return self.open(key, functools.partial(registered_server, prepared, config, prefix))


def run_serenade_stage(
    prepared: Sequence[PreparedData],
    truths: Mapping[str, HarnessData],
    config: Config,
    servers: StageServers,
) -> SerenadeStage:
    """Start a server (``servers``), register the datasets, and run every (dataset, ε, method)
    ``runs`` times, interleaved (repetition outermost) so that load changes hit every setting
    alike."""
    stage = SerenadeStage()
    started = time.perf_counter()
    with servers.stage(prepared, config, "dpmine-bench-serenade-") as (connection, handles):
        for data in prepared:
            stage.calibrations[data.key] = calibrate(connection, data)
            start = time.perf_counter()  # the first data access loads the files
            handles[data.key].count(epsilon=WARMUP_EPSILON)
            stage.cold_load_s[data.key] = round(time.perf_counter() - start, 3)
        _run_grid(stage, prepared, handles, truths, config)
    stage.seconds = round(time.perf_counter() - started, 1)
    return stage


def _run_grid(
    stage: SerenadeStage,
    prepared: Sequence[PreparedData],
    handles: Mapping[str, dpmine.DatasetHandle],
    truths: Mapping[str, HarnessData],
    config: Config,
) -> None:
    total = config.runs * len(prepared) * len(config.epsilons) * len(METHODS)
    for repetition in range(config.runs):
        for data in prepared:
            for epsilon in config.epsilons:
                for method in METHODS:
                    record = run_once(
                        handles[data.key],
                        data,
                        truths[data.key],
                        method=method,
                        epsilon=epsilon,
                        repetition=repetition,
                    )
                    stage.runs.append(record)
                    true_j = [r.true_jaccard for r in record.redescriptions]
                    print(
                        f"  [{len(stage.runs):3}/{total}] {data.key:8} {method} ε={epsilon:<4g} "
                        f"run {repetition + 1}: {record.wall_s:6.1f} s, "
                        f"{len(true_j):2} reds, true J median "
                        f"{(median(true_j) if true_j else float('nan')):.3f}, "
                        f"load {record.load_average[0]:.2f}",
                        flush=True,
                    )


def exact_agreement(prepared: Sequence[PreparedData], runs: Sequence[RunRecord]) -> tuple[int, int]:
    """Cross-check of the harness's evaluator: (agreeing, total) redescriptions whose |I| and
    |U| equal those of the server's own evaluator run in-process on the same files. A check of
    the harness only; every utility figure comes from the harness."""
    agree = total = 0
    for data in prepared:
        store, _report = load_store(data.metadata, data.source, base_dir=data.directory)
        for run in runs:
            if run.dataset != data.key:
                continue
            for red in run.redescriptions:
                parsed = Redescription.model_validate(red.query)
                left, right = store.evaluate(parsed.left), store.evaluate(parsed.right)
                total += 1
                agree += (left & right).count() == red.true_support and (
                    left | right
                ).count() == red.true_union
    return agree, total


# -- summaries -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SettingSummary:
    """Pooled figures of one (dataset, method, ε) over its runs."""

    dataset: str
    method: str
    epsilon: float
    runs: int
    wall_median_s: float
    wall_min_s: float
    wall_max_s: float
    calls_median: float
    epsilon_spent_median: float
    threshold_modes: list[str]
    reds_total: int
    reds_per_run_median: float
    true_j_median: float | None
    true_j_q1: float | None
    true_j_q3: float | None
    true_j_share_good: float | None
    noisy_j_median: float | None
    mean_abs_error: float | None
    spearman_rho: float | None
    spearman_p: float | None
    displayed: int
    displayed_share_good: float | None


def spearman(noisy: Sequence[float], true: Sequence[float]) -> tuple[float | None, float | None]:
    """Spearman's ρ (scipy) and its p-value; None when undefined (< 3 points or constant)."""
    if len(noisy) < 3 or len(set(noisy)) < 2 or len(set(true)) < 2:
        return None, None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = stats.spearmanr(noisy, true)
    return float(result.statistic), float(result.pvalue)


def _quantiles(values: Sequence[float]) -> tuple[float | None, float | None, float | None]:
    if not values:
        return None, None, None
    return percentile(values, 25), percentile(values, 50), percentile(values, 75)


def summarise(runs: Sequence[RunRecord]) -> list[SettingSummary]:
    """One summary per (dataset, method, ε), in first-seen order."""
    keys = list(dict.fromkeys((r.dataset, r.method, r.epsilon) for r in runs))
    return [
        _summary(key, [r for r in runs if (r.dataset, r.method, r.epsilon) == key]) for key in keys
    ]


def _summary(key: tuple[str, str, float], runs: list[RunRecord]) -> SettingSummary:
    reds = [red for run in runs for red in run.redescriptions]
    true_j = [red.true_jaccard for red in reds]
    noisy_j = [red.noisy_jaccard for red in reds]
    q1, q2, q3 = _quantiles(true_j)
    rho, p_value = spearman(noisy_j, true_j)
    shown = [red for red in reds if red.noisy_jaccard >= GOOD_JACCARD]
    walls = [run.wall_s for run in runs]
    return SettingSummary(
        dataset=key[0],
        method=key[1],
        epsilon=key[2],
        runs=len(runs),
        wall_median_s=median(walls),
        wall_min_s=min(walls),
        wall_max_s=max(walls),
        calls_median=median([run.charged_calls for run in runs]),
        epsilon_spent_median=median([run.epsilon_spent for run in runs]),
        threshold_modes=sorted({mode for run in runs for mode in run.threshold_modes}),
        reds_total=len(reds),
        reds_per_run_median=median([len(run.redescriptions) for run in runs]),
        true_j_median=q2,
        true_j_q1=q1,
        true_j_q3=q3,
        true_j_share_good=_share(true_j),
        noisy_j_median=median(noisy_j) if noisy_j else None,
        mean_abs_error=(float(np.mean(np.abs(np.subtract(noisy_j, true_j)))) if reds else None),
        spearman_rho=rho,
        spearman_p=p_value,
        displayed=len(shown),
        displayed_share_good=_share([red.true_jaccard for red in shown]),
    )


def _share(values: Sequence[float]) -> float | None:
    return sum(v >= GOOD_JACCARD for v in values) / len(values) if values else None


# -- ReReMi (python-clired 6.0.9) ----------------------------------------------------------------


def clired_package_dir() -> Path | None:
    """The installed ``blocks/mine`` folder of python-clired, or None if not installed."""
    try:
        if importlib.metadata.version("python-clired") != CLIRED_VERSION:
            return None
    except importlib.metadata.PackageNotFoundError:
        return None
    spec = importlib.util.find_spec("blocks.mine")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _pip(*arguments: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", *arguments], check=True)


def ensure_clired(*, install: bool) -> Path:
    """python-clired 6.0.9 with its XML defs in place (BASELINES.md §1 "Packaging bug").

    Installs the wheel into this interpreter's environment if missing (when ``install``), and
    copies the defs files the wheel lacks from the same version's sdist.
    """
    package = clired_package_dir()
    if package is None:
        if not install:
            raise RuntimeError(
                f"python-clired {CLIRED_VERSION} is not installed: "
                f"{sys.executable} -m pip install python-clired=={CLIRED_VERSION}"
            )
        print(f"installing python-clired {CLIRED_VERSION} ...", flush=True)
        _pip("install", f"python-clired=={CLIRED_VERSION}")
        importlib.invalidate_caches()
        package = clired_package_dir()
        if package is None:
            raise RuntimeError("python-clired did not install")
    missing = [name for name in CLIRED_MISSING_FILES if not (package / name).is_file()]
    if missing:
        print(f"copying {len(missing)} defs files from the clired sdist into {package}", flush=True)
        _copy_from_sdist(package, missing)
    return package


def _copy_from_sdist(package: Path, names: Sequence[str]) -> None:
    with tempfile.TemporaryDirectory(prefix="clired-sdist-") as scratch:
        _pip(
            "download",
            "--no-binary",
            ":all:",
            "--no-deps",
            "--dest",
            scratch,
            f"python-clired=={CLIRED_VERSION}",
        )
        archives = list(Path(scratch).glob("*.tar.gz"))
        if len(archives) != 1:
            raise RuntimeError(f"expected one sdist archive, found {archives}")
        with tarfile.open(archives[0]) as archive:
            archive.extractall(scratch, filter="data")
        for name in names:
            found = list(Path(scratch).glob(f"*/blocks/mine/{name}"))
            if len(found) != 1:
                raise RuntimeError(f"{name} not found in the sdist")
            shutil.copy2(found[0], package / name)


@dataclass(frozen=True)
class CliredResult:
    """ReReMi on one dataset: how the run went and the Jaccard (acc) of its output."""

    dataset: str
    status: str  # ok | timeout | failed | skipped
    cached: bool
    measured_at: str | None
    timeout_s: float
    wall_s: float | None
    cpu_s: float | None
    pairs_s: float | None
    returncode: int | None
    redescriptions: int
    jaccard_median: float | None
    jaccard_q1: float | None
    jaccard_q3: float | None
    jaccard_share_good: float | None
    support_median: float | None
    load_average_start: tuple[float, float, float] | None
    load_average_end: tuple[float, float, float] | None
    top: list[dict[str, str]]
    note: str


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _fingerprint(data: PreparedData) -> dict[str, Any]:
    return {
        "version": CLIRED_VERSION,
        "parameters": CLIRED_PARAMETERS,
        "left_sha256": _sha256(data.directory / "left.csv"),
        "right_sha256": _sha256(data.directory / "right.csv"),
    }


def _prefs_xml(inputs: Mapping[str, Path], cache: Path) -> str:
    parameters = {
        "LHS_data": str(inputs["left"]),
        "RHS_data": str(inputs["right"]),
        "result_rep": f"{cache}/",
        "out_base": "results",
        "queries_named_file": str(cache / "results_named.queries"),
        **CLIRED_PARAMETERS,
    }
    lines = ["<root>"]
    lines += [
        f"<parameter><name>{name}</name><value>{value}</value></parameter>"
        for name, value in parameters.items()
    ]
    return "\n".join([*lines, "</root>", ""])


def _stop_group(process: subprocess.Popen[bytes]) -> None:
    """Stop the process group of a child we started (its own session), by its id."""
    for stop_signal, wait_s in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 20.0)):
        if process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, stop_signal)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=wait_s)


def run_capped(
    command: Sequence[str], *, cwd: Path, log: Path, timeout_s: float
) -> tuple[int | None, float, float]:
    """Run ``command`` in its own session with a wall-time cap: (return code, None on timeout;
    wall s; user+sys CPU s of the child, from this process's children rusage)."""
    env = os.environ | {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with log.open("wb") as handle:
        process = subprocess.Popen(
            list(command),
            cwd=cwd,
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    code: int | None = None
    try:
        code = process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        code = None
    finally:
        _stop_group(process)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return code, wall, cpu


_PAIRS_ELAPSED = re.compile(r"End pairs\s+\(\(at [^,]+, elapsed (\d+):(\d+):([\d.]+)\)\)")


def _pairs_seconds(log: Path) -> float | None:
    """Initial-pair search time from clired's own log."""
    match = _PAIRS_ELAPSED.search(log.read_text(errors="replace")) if log.is_file() else None
    if match is None:
        return None
    hours, minutes, seconds = match.groups()
    return int(hours) * 3600 + int(minutes) * 60 + float(seconds)


def read_clired_queries(path: Path) -> list[dict[str, str]]:
    """Rows of a clired ``.queries`` output (tab-separated; acc = Jaccard, card_Exx = |I|)."""
    if not path.is_file():
        return []
    with path.open(newline="") as handle:
        return [dict(row) for row in csv.DictReader(handle, delimiter="\t")]


def run_clired(data: PreparedData, config: Config, *, allowed: bool) -> CliredResult:
    """ReReMi on ``data``, from the cache under ``--out`` when it matches; else (if ``allowed``)
    one capped run, whose record and output are then cached."""
    cache = config.out / "clired" / data.key
    record_path = cache / "run.json"
    fingerprint = _fingerprint(data)
    record = _cached_record(record_path, fingerprint, config)
    if record is None:
        if not allowed:
            return _clired_result(
                data.key, {"status": "skipped"}, cache, cached=False, config=config
            )
        record = _fresh_clired_run(data, cache, fingerprint, config)
        return _clired_result(data.key, record, cache, cached=False, config=config)
    return _clired_result(data.key, record, cache, cached=True, config=config)


def _cached_record(
    record_path: Path, fingerprint: Mapping[str, Any], config: Config
) -> dict[str, Any] | None:
    """A cached run on the same inputs and parameters: finished, or timed out at a cap at least
    as long as the current one."""
    if config.clired_rerun or not record_path.is_file():
        return None
    record: dict[str, Any] = json.loads(record_path.read_text())
    if record.get("fingerprint") != fingerprint:
        return None
    if record["status"] == "ok":
        return record
    if record["status"] == "timeout" and record["timeout_s"] >= config.clired_timeout_s:
        return record
    return None


def _fresh_clired_run(
    data: PreparedData, cache: Path, fingerprint: dict[str, Any], config: Config
) -> dict[str, Any]:
    ensure_clired(install=config.install_clired)
    if cache.exists():
        shutil.rmtree(cache)
    cache.mkdir(parents=True)
    inputs = {side: cache / f"{side}.csv" for side in ("left", "right")}
    for side, path in inputs.items():
        shutil.copy2(data.directory / f"{side}.csv", path)
    prefs = cache / "prefs.xml"
    prefs.write_text(_prefs_xml(inputs, cache))
    print(
        f"  ReReMi on {data.key}: running (cap {config.clired_timeout_s / 60:.0f} min) ...",
        flush=True,
    )
    load_start = load_average()
    code, wall, cpu = run_capped(
        [sys.executable, "-m", "blocks.mine.exec_clired", str(prefs)],
        cwd=cache,
        log=cache / "clired.log",
        timeout_s=config.clired_timeout_s,
    )
    status = "timeout" if code is None else "ok" if code == 0 else "failed"
    record = {
        "fingerprint": fingerprint,
        "status": status,
        "returncode": code,
        "timeout_s": config.clired_timeout_s,
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "load_average_start": load_start,
        "load_average_end": load_average(),
        "command": f"python -m blocks.mine.exec_clired {prefs.name}",
    }
    (cache / "run.json").write_text(json.dumps(record, indent=2) + "\n")
    print(f"  ReReMi on {data.key}: {status} after {wall:.0f} s (CPU {cpu:.0f} s)", flush=True)
    return record


def _clired_result(
    dataset: str, record: Mapping[str, Any], cache: Path, *, cached: bool, config: Config
) -> CliredResult:
    rows = read_clired_queries(cache / "results.queries") if record["status"] == "ok" else []
    named = read_clired_queries(cache / "results_named.queries")
    acc = [float(row["acc"]) for row in rows]
    support = [float(row["card_Exx"]) for row in rows]
    q1, q2, q3 = _quantiles(acc)
    ranked = sorted(named, key=lambda row: -float(row["acc"]))[:3] if rows else []
    notes = {
        "ok": "",
        "timeout": f"stopped at the {record.get('timeout_s', 0) / 60:g}-minute cap",
        "failed": f"exit status {record.get('returncode')}; see {cache / 'clired.log'}",
        "skipped": "not run (--quick, --clired or no cache)",
    }
    load_start = record.get("load_average_start")
    load_end = record.get("load_average_end")
    return CliredResult(
        dataset=dataset,
        status=record["status"],
        cached=cached,
        measured_at=record.get("measured_at"),
        timeout_s=float(record.get("timeout_s", config.clired_timeout_s)),
        wall_s=record.get("wall_s"),
        cpu_s=record.get("cpu_s"),
        pairs_s=_pairs_seconds(cache / "clired.log") if record["status"] != "skipped" else None,
        returncode=record.get("returncode"),
        redescriptions=len(rows),
        jaccard_median=q2,
        jaccard_q1=q1,
        jaccard_q3=q3,
        jaccard_share_good=_share(acc),
        support_median=median(support) if support else None,
        load_average_start=tuple(load_start) if load_start else None,
        load_average_end=tuple(load_end) if load_end else None,
        top=[{k: row[k] for k in ("query_LHS", "query_RHS", "acc", "card_Exx")} for row in ranked],
        note=notes[record["status"]],
    )


# -- figures -------------------------------------------------------------------------------------


def plot_scatter(
    runs: Sequence[RunRecord],
    summaries: Sequence[SettingSummary],
    data: PreparedData,
    epsilons: Sequence[float],
    out: Path,
) -> Path:
    """Noisy vs true Jaccard of every released redescription (paper Figure 3 style): a panel
    per method × ε, the diagonal and the 0.3 display threshold; colours = runs."""
    figure = Figure(figsize=(3.3 * len(epsilons), 3.3 * len(METHODS)))
    axes = figure.subplots(len(METHODS), len(epsilons), squeeze=False, sharex=True, sharey=True)
    colours = mpl.colormaps["tab10"]
    for row, method in enumerate(METHODS):
        for column, epsilon in enumerate(epsilons):
            axis = axes[row][column]
            chosen = [
                r for r in runs if (r.dataset, r.method, r.epsilon) == (data.key, method, epsilon)
            ]
            for run in chosen:
                axis.scatter(
                    [red.true_jaccard for red in run.redescriptions],
                    [red.noisy_jaccard for red in run.redescriptions],
                    s=14,
                    alpha=0.7,
                    color=colours(run.repetition % 10),
                    edgecolors="none",
                    label=f"run {run.repetition + 1}",
                )
            axis.plot([0, 1], [0, 1], color="grey", linewidth=0.8)
            axis.axhline(GOOD_JACCARD, color="tab:red", linewidth=0.6, linestyle="--")
            axis.axvline(GOOD_JACCARD, color="tab:red", linewidth=0.6, linestyle=":")
            axis.set_xlim(-0.02, 1.02)
            axis.set_ylim(-0.02, 1.02)
            axis.grid(alpha=0.3)
            summary = next(
                (
                    s
                    for s in summaries
                    if (s.dataset, s.method, s.epsilon) == (data.key, method, epsilon)
                ),
                None,
            )
            rho = (
                "–"
                if summary is None or summary.spearman_rho is None
                else (f"{summary.spearman_rho:.2f}")
            )
            count = sum(len(r.redescriptions) for r in chosen)
            axis.set_title(f"Serenade{method}, ε={epsilon:g}  (ρ={rho}, n={count})", fontsize=9)
            if row == len(METHODS) - 1:
                axis.set_xlabel("true Jaccard")
            if column == 0:
                axis.set_ylabel("noisy (reported) Jaccard")
    axes[0][0].legend(fontsize=7, loc="upper left")
    figure.suptitle(f"{data.choice.title}: noisy vs true Jaccard", fontsize=11)
    figure.tight_layout()
    path = out / f"serenade_scatter_{data.key}.png"
    figure.savefig(path, dpi=120)
    return path


# -- reporting -----------------------------------------------------------------------------------


def _fmt(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.0%}"


def markdown_report(
    *,
    info: Mapping[str, Any],
    config: Config,
    prepared: Sequence[PreparedData],
    stage: SerenadeStage | None,
    summaries: Sequence[SettingSummary],
    clired: Sequence[CliredResult],
    agreement: tuple[int, int],
    total_seconds: float,
) -> str:
    """The results as Markdown, ready to paste into a closing note."""
    lines = [
        f"### dpmine Serenade benchmark ({datetime.now(UTC):%Y-%m-%d}, "
        f"commit {info.get('git_commit')})",
        "",
        f"Machine: nproc={info['nproc']} ({info.get('cpu_model')}), {info.get('memory_gib')} "
        f"GiB; Python {info['python']}, numpy {info['numpy']}, uvicorn {info.get('uvicorn')} "
        "(1 process, SQLite ledger); client, server and ReReMi share the machine with other "
        f"work. Load average (1/5/15 min): {info.get('load_average_start')} at start, "
        f"{info.get('load_average_end')} at end"
        + (
            f"; 1-min load at the start of the Serenade runs "
            f"{info['serenade_load_min']:.2f}–{info['serenade_load_max']:.2f}"
            if "serenade_load_min" in info
            else ""
        )
        + ".",
        "",
        "Data and parameters:",
        "",
        "| dataset | rows | views | n_max | x0 | s (line search) | Δ |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for data in prepared:
        cal = stage.calibrations.get(data.key) if stage else None
        lines.append(
            f"| {data.key} | {data.n_rows:,} | {data.choice.note} | {data.metadata.n_max:,} | "
            f"{data.x0:g} | {'–' if cal is None else f'{cal.s:g}'} | "
            f"{'–' if cal is None else f'{cal.delta:.5f}'} |"
        )
    lines += [
        "",
        f"Serenade defaults (ALGORITHMS.md §2.6): I = {N_INITIAL}, τ = {TAU}, K = {ROUNDS}, "
        f"split d3 = {SPLIT}, J_min = {MIN_JACCARD}, ≤ {MAX_LITERALS} literals per query, ∧/∨ "
        "with single-side disjunction, no negations, fresh exponential mechanism every ES round "
        "(the engine has no memo), thresholds 'auto'. x0 = 10 % of n as a "
        "count: x0 is a public parameter the analyst chooses, and the harness uses the true n "
        "for it (no noisy count is bought). Public metadata = `propose_metadata` on the chosen "
        "columns, n_max = its bound.",
    ]
    if stage is not None:
        lines += _budget_table(stage.calibrations, config.epsilons)
        lines += _serenade_tables(config, summaries, stage, agreement)
    lines += _clired_table(clired)
    lines += _comparison(summaries, clired)
    lines += ["", f"Total run time of this invocation: {total_seconds / 60:.1f} min."]
    return "\n".join(lines)


def _budget_table(calibrations: Mapping[str, Calibration], epsilons: Sequence[float]) -> list[str]:
    """Per-call budgets: the exponential mechanism's scale c = ε_call/(2Δ) (a candidate's weight
    is exp(c·Q), Q in [0, 1]) and the Laplace scale b = 1/ε_call of each released quality cell."""
    e_init, e_ext, e_qual = SPLIT
    lines = [
        "",
        "Per-call budgets (§2.5): EM scale c = ε_call/(2Δ) of an initial-pair draw and of an "
        f"extension draw (ES: ε_ext/K; CS: ε_ext/(τI), equal here as K = τI = {ROUNDS}), and "
        "the Laplace scale b = 1/ε_call of each noisy cell (ES: ε_qual/I; CS: "
        "ε_qual/((τ+1)I)):",
        "",
        "| dataset | ε | c initial pairs | c extension | b quality ES | b quality CS |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for key, cal in calibrations.items():
        for epsilon in epsilons:
            c_init = epsilon * e_init / N_INITIAL / (2 * cal.delta)
            c_ext = epsilon * e_ext / ROUNDS / (2 * cal.delta)
            b_es = N_INITIAL / (epsilon * e_qual)
            b_cs = (TAU + 1) * N_INITIAL / (epsilon * e_qual)
            lines.append(
                f"| {key} | {epsilon:g} | {c_init:.2f} | {c_ext:.2f} | {b_es:.0f} | {b_cs:.0f} |"
            )
    return lines


def _serenade_tables(
    config: Config,
    summaries: Sequence[SettingSummary],
    stage: SerenadeStage,
    agreement: tuple[int, int],
) -> list[str]:
    lines = [
        "",
        f"**Wall time of a whole run over HTTP** ({config.runs} runs per setting; plan + every "
        "charged call; cold data load before the first run: "
        + ", ".join(f"{k} {v:.2f} s" for k, v in stage.cold_load_s.items())
        + f"; Serenade stage {stage.seconds / 60:.1f} min):",
        "",
        "| dataset | method | ε | wall s median (min–max) | charged calls (median) | "
        "ε spent (median) | reds per run (median) | thresholds |",
        "|---|---|---:|---|---:|---:|---:|---|",
    ]
    lines += [
        f"| {s.dataset} | {s.method} | {s.epsilon:g} | {s.wall_median_s:.1f} "
        f"({s.wall_min_s:.1f}–{s.wall_max_s:.1f}) | {s.calls_median:g} | "
        f"{s.epsilon_spent_median:.3g} | {s.reds_per_run_median:g} | "
        f"{', '.join(s.threshold_modes)} |"
        for s in summaries
    ]
    agree, total = agreement
    lines += [
        "",
        "**Utility** (true Jaccard computed by the harness on the data; all released "
        f"redescriptions of the {config.runs} runs pooled; 'shown' = the paper's display "
        "filter, noisy J ≥ 0.3):",
        "",
        "| dataset | method | ε | #reds | true J median [q1, q3] | true J ≥ 0.3 | noisy J "
        "median | mean abs(noisy − true) | Spearman ρ (p) | shown | shown with true J ≥ 0.3 |",
        "|---|---|---:|---:|---|---:|---:|---:|---|---:|---:|",
    ]
    for s in summaries:
        rho = "–" if s.spearman_rho is None else f"{s.spearman_rho:.2f} ({s.spearman_p:.1g})"
        lines.append(
            f"| {s.dataset} | {s.method} | {s.epsilon:g} | {s.reds_total} | "
            f"{_fmt(s.true_j_median)} [{_fmt(s.true_j_q1)}, {_fmt(s.true_j_q3)}] | "
            f"{_pct(s.true_j_share_good)} | {_fmt(s.noisy_j_median)} | "
            f"{_fmt(s.mean_abs_error)} | {rho} | {s.displayed} | "
            f"{_pct(s.displayed_share_good)} |"
        )
    lines += [
        "",
        f"Harness evaluator cross-check: |I| and |U| of {agree}/{total} redescriptions equal "
        "those of the server's evaluator run in-process on the same files.",
    ]
    return lines


def _clired_table(clired: Sequence[CliredResult]) -> list[str]:
    lines = [
        "",
        f"**Non-private baseline: ReReMi (python-clired {CLIRED_VERSION})**, one run per dataset "
        "on the same two views (min_itm_in = 0.1, max_var_s0 = max_var_s1 = 4, verbosity = 1, "
        "package defaults otherwise; Jaccard = the output's acc column):",
        "",
        "| dataset | status | wall s | CPU s | initial-pair search s | #reds | J median [q1, q3] "
        "| J ≥ 0.3 | support median | load at start | measured |",
        "|---|---|---:|---:|---:|---:|---|---:|---:|---|---|",
    ]
    for c in clired:
        status = c.status + (" (cached)" if c.cached else "") + (f"; {c.note}" if c.note else "")
        lines.append(
            f"| {c.dataset} | {status} | {_fmt(c.wall_s, 0)} | {_fmt(c.cpu_s, 0)} | "
            f"{_fmt(c.pairs_s, 0)} | {c.redescriptions} | {_fmt(c.jaccard_median)} "
            f"[{_fmt(c.jaccard_q1)}, {_fmt(c.jaccard_q3)}] | {_pct(c.jaccard_share_good)} | "
            f"{_fmt(c.support_median, 0)} | {c.load_average_start or '–'} | "
            f"{c.measured_at or '–'} |"
        )
    for c in clired:
        for row in c.top:
            lines.append(
                f"* {c.dataset} ReReMi, acc {row['acc']}: `{row['query_LHS']}` ⟺ "
                f"`{row['query_RHS']}` (|I| = {row['card_Exx']})"
            )
    return lines


def _comparison(summaries: Sequence[SettingSummary], clired: Sequence[CliredResult]) -> list[str]:
    low, high = LITERATURE_ES_SECONDS
    ours = [s for s in summaries if (s.dataset, s.method) == ("mammals", "ES")]
    if not ours:
        return []
    lines = [
        "",
        "**Speed against the authors' reference implementation** — a literature figure quoted "
        f'in the issue ("{LITERATURE_NOTE}"), NOT measured here; ours = median wall time of '
        "a whole SerenadeES run on mammals (2,221 rows) over HTTP:",
        "",
        "| ε | our ES median s | speed-up vs 3–4 min |",
        "|---:|---:|---|",
    ]
    lines += [
        f"| {s.epsilon:g} | {s.wall_median_s:.1f} | {low / s.wall_median_s:.0f}–"
        f"{high / s.wall_median_s:.0f}x |"
        for s in ours
    ]
    measured = {c.dataset: c for c in clired if c.status == "ok" and c.wall_s}
    if measured:
        lines += [
            "",
            "Against ReReMi measured here (non-private, one run): median Serenade wall time "
            "per dataset and method over all ε, and ReReMi's wall time divided by it:",
            "",
            "| dataset | method | Serenade median s | ReReMi s | ReReMi / Serenade |",
            "|---|---|---:|---:|---:|",
        ]
        for key, result in measured.items():
            for method in METHODS:
                walls = [
                    x.wall_median_s for x in summaries if (x.dataset, x.method) == (key, method)
                ]
                if walls and result.wall_s:
                    typical = median(walls)
                    lines.append(
                        f"| {key} | {method} | {typical:.1f} | {result.wall_s:.0f} | "
                        f"{result.wall_s / typical:.0f}x |"
                    )
    return lines


# -- main ----------------------------------------------------------------------------------------


# -- issue #12: utility of the auto defaults against the paper preset (--utility) ----------------


@dataclass(frozen=True)
class UtilityRed:
    """One released redescription scored on the data: noisy J with its 90 % interval, true J,
    the §1.3 p-value on the true counts, J − J_ind and the support as a share of n."""

    noisy_jaccard: float
    jaccard_low: float
    jaccard_high: float
    true_jaccard: float
    true_p_value: float
    j_minus_independent: float
    support_fraction: float
    uninformative: bool


@dataclass(frozen=True)
class UtilityRun:
    """One whole run of one (dataset, method, preset, ε)."""

    dataset: str
    method: str
    preset: str
    epsilon: float
    repetition: int
    wall_s: float
    epsilon_spent: float
    n_initial: int
    steps: int
    split: tuple[float, float, float]
    x0: float
    y0: float | None
    plan_warnings: list[str]
    redescriptions: list[UtilityRed]


def make_utility_miner(
    method: Method, preset: Preset, epsilon: float, x0: float
) -> SerenadeES | SerenadeCS:
    """``preset="paper"``: the paper's miner of :func:`make_miner` (x0 = 10 % of the true n);
    ``preset="auto"``: nothing but ε and the options (at most 4 literals per query) given."""
    if preset == "paper":
        return make_miner(method, epsilon, x0)
    options = SerenadeOptions(max_literals=MAX_LITERALS)
    if method == "ES":
        return SerenadeES(epsilon=epsilon, options=options)
    return SerenadeCS(epsilon=epsilon, options=options)


def independent_jaccard(n_rows: int, left: int, right: int) -> float:
    """J_ind = E[|I|]/E[|U|] for independent queries of the same supports: E[|I|] = s_L·s_R/n."""
    if n_rows == 0:
        return 0.0
    inter = left * right / n_rows
    union = left + right - inter
    return inter / union if union > 0 else 0.0


def score_red(found: MinedRedescription, truth: HarnessData) -> UtilityRed:
    """True statistics of one result (harness-side, direct data access)."""
    exact = true_counts(found.redescription, truth)
    interval = found.jaccard_interval
    return UtilityRed(
        noisy_jaccard=found.noisy_jaccard,
        jaccard_low=interval.low,
        jaccard_high=interval.high,
        true_jaccard=exact.jaccard,
        true_p_value=binomial_p_value(truth.n_rows, exact.left, exact.right, exact.support),
        j_minus_independent=exact.jaccard
        - independent_jaccard(truth.n_rows, exact.left, exact.right),
        support_fraction=exact.support / truth.n_rows if truth.n_rows else 0.0,
        uninformative=found.uninformative,
    )


def utility_once(
    handle: dpmine.DatasetHandle,
    data: PreparedData,
    truth: HarnessData,
    *,
    method: Method,
    preset: Preset,
    epsilon: float,
    repetition: int,
) -> UtilityRun:
    """Plan (for its warnings), mine, score every result."""
    miner = make_utility_miner(method, preset, epsilon, data.x0)
    warnings_ = miner.plan(handle).warnings
    start = time.perf_counter()
    mine_whole(miner, handle)
    wall = time.perf_counter() - start
    settings = miner.settings_
    return UtilityRun(
        dataset=data.key,
        method=method,
        preset=preset,
        epsilon=epsilon,
        repetition=repetition,
        wall_s=round(wall, 3),
        epsilon_spent=miner.budget_spent_,
        n_initial=settings.n_initial,
        steps=settings.steps,
        split=settings.split,
        x0=miner.x0_,
        y0=miner.y0_,
        plan_warnings=warnings_,
        redescriptions=[score_red(found, truth) for found in miner.redescriptions_],
    )


def run_utility_stage(
    prepared: Sequence[PreparedData],
    truths: Mapping[str, HarnessData],
    config: Config,
    servers: StageServers,
) -> list[UtilityRun]:
    """Every (dataset, ε, method, preset) ``runs`` times on one real server, repetition
    outermost."""
    runs: list[UtilityRun] = []
    total = config.runs * len(prepared) * len(config.epsilons) * len(METHODS) * len(PRESETS)
    prefix = "dpmine-bench-serenade-utility-"
    with servers.stage(prepared, config, prefix) as (_connection, handles):
        for repetition in range(config.runs):
            for data in prepared:
                for epsilon in config.epsilons:
                    for method in METHODS:
                        for preset in PRESETS:
                            run = utility_once(
                                handles[data.key],
                                data,
                                truths[data.key],
                                method=method,
                                preset=preset,
                                epsilon=epsilon,
                                repetition=repetition,
                            )
                            runs.append(run)
                            _print_utility_run(run, len(runs), total)
    return runs


def _print_utility_run(run: UtilityRun, index: int, total: int) -> None:
    true_j = [r.true_jaccard for r in run.redescriptions]
    print(
        f"  [{index:3}/{total}] {run.dataset:8} {run.method} {run.preset:5} ε={run.epsilon:<4g} "
        f"run {run.repetition + 1}: {run.wall_s:6.1f} s, I={run.n_initial} steps={run.steps}, "
        f"{len(true_j):2} reds, true J median "
        f"{(median(true_j) if true_j else float('nan')):.3f}",
        flush=True,
    )


@dataclass(frozen=True)
class UtilitySummary:
    """Pooled figures of one (dataset, method, preset, ε) over its runs (issue #12)."""

    dataset: str
    method: str
    preset: str
    epsilon: float
    runs: int
    results: int
    results_per_run: float
    true_j_median: float | None
    share_good: float | None
    share_significant: float | None
    j_minus_independent_median: float | None
    support_fraction_median: float | None
    spearman_rho: float | None
    interval_coverage: float | None
    share_uninformative: float | None
    settings: str


def summarise_utility(runs: Sequence[UtilityRun]) -> list[UtilitySummary]:
    """One summary per (dataset, method, preset, ε), in first-seen order."""
    keys = list(dict.fromkeys((r.dataset, r.method, r.preset, r.epsilon) for r in runs))
    return [
        _utility_summary([r for r in runs if (r.dataset, r.method, r.preset, r.epsilon) == k])
        for k in keys
    ]


def _mean_share(flags: Sequence[bool]) -> float | None:
    return sum(flags) / len(flags) if flags else None


def _utility_summary(runs: list[UtilityRun]) -> UtilitySummary:
    first = runs[0]
    reds = [red for run in runs for red in run.redescriptions]
    true_j = [red.true_jaccard for red in reds]
    rho, _p = spearman([red.noisy_jaccard for red in reds], true_j)
    settings = sorted({f"I={r.n_initial} steps={r.steps}" for r in runs})
    return UtilitySummary(
        dataset=first.dataset,
        method=first.method,
        preset=first.preset,
        epsilon=first.epsilon,
        runs=len(runs),
        results=len(reds),
        results_per_run=median([len(run.redescriptions) for run in runs]),
        true_j_median=median(true_j) if true_j else None,
        share_good=_share(true_j),
        share_significant=_mean_share([red.true_p_value < SIGNIFICANCE for red in reds]),
        j_minus_independent_median=(
            median([red.j_minus_independent for red in reds]) if reds else None
        ),
        support_fraction_median=median([red.support_fraction for red in reds]) if reds else None,
        spearman_rho=rho,
        interval_coverage=_mean_share(
            [
                red.jaccard_low - 1e-12 <= red.true_jaccard <= red.jaccard_high + 1e-12
                for red in reds
            ]
        ),
        share_uninformative=_mean_share([red.uninformative for red in reds]),
        settings=", ".join(settings),
    )


#: Issue #12's targets for the auto defaults on mammals and asia: ε → (median true J, share
#: significant, Spearman or None).
UTILITY_TARGETS: dict[float, tuple[float, float, float | None]] = {
    1.0: (0.6, 0.9, 0.8),
    0.5: (0.5, 0.8, None),
}


def target_misses(summary: UtilitySummary) -> list[str]:
    """What an auto setting on mammals/asia misses of the issue's targets (empty: met)."""
    target = UTILITY_TARGETS.get(summary.epsilon)
    if summary.preset != "auto" or summary.dataset not in ("mammals", "asia") or target is None:
        return []
    median_j, significant, rho = target
    misses = []
    if summary.true_j_median is None or summary.true_j_median < median_j:
        misses.append(f"median J {_fmt(summary.true_j_median, 2)} < {median_j}")
    if summary.share_significant is None or summary.share_significant < significant:
        misses.append(f"significant {_pct(summary.share_significant)} < {significant:.0%}")
    if rho is not None and (summary.spearman_rho is None or summary.spearman_rho < rho):
        misses.append(f"Spearman {_fmt(summary.spearman_rho, 2)} < {rho}")
    return misses


def utility_markdown(summaries: Sequence[UtilitySummary], config: Config) -> str:
    """The issue #12 table: per dataset and ε, auto and paper side by side."""
    lines = [
        f"## Serenade utility (issue #12): auto defaults vs the paper preset, {config.runs} "
        "run(s) per setting",
        "",
        "| dataset | method | preset | ε | settings | results (per run) | median true J | "
        "share J ≥ 0.3 | share significant (p < 0.01) | median J − J_ind | median support / n "
        "| Spearman ρ | 90 % interval coverage | uninformative | targets |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summaries:
        misses = target_misses(s)
        target = (
            "–"
            if s.preset != "auto"
            or s.dataset not in ("mammals", "asia")
            or s.epsilon not in UTILITY_TARGETS
            else ("met" if not misses else "MISS: " + "; ".join(misses))
        )
        lines.append(
            f"| {s.dataset} | {s.method} | {s.preset} | {s.epsilon:g} | {s.settings} | "
            f"{s.results} ({s.results_per_run:g}) | {_fmt(s.true_j_median, 2)} | "
            f"{_pct(s.share_good)} | {_pct(s.share_significant)} | "
            f"{_fmt(s.j_minus_independent_median, 2)} | {_fmt(s.support_fraction_median, 3)} | "
            f"{_fmt(s.spearman_rho, 2)} | {_pct(s.interval_coverage)} | "
            f"{_pct(s.share_uninformative)} | {target} |"
        )
    lines += [
        "",
        "ReReMi (non-private): median Jaccard "
        + ", ".join(f"{k} {v}" for k, v in REREMI_QUOTED.items())
        + " as quoted by issue #12 (not run by --utility; the default mode runs and caches it).",
    ]
    return "\n".join(lines)


def main_utility(config: Config, servers: StageServers | None = None) -> int:
    """``--utility``: the issue #12 table; writes ``<out>/serenade_utility.json``. On a fresh
    server unless ``servers`` has one (``--smoke``)."""
    started = time.perf_counter()
    info = machine_info()
    print(
        f"dpmine Serenade utility benchmark (issue #12): datasets={','.join(config.datasets)} "
        f"runs={config.runs} ε={list(config.epsilons)} presets={list(PRESETS)} "
        f"nproc={info['nproc']} load={info['load_average_start']}",
        flush=True,
    )
    config.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="dpmine-bench-serenade-data-") as scratch:
        print("[data] trimming the views and proposing metadata ...", flush=True)
        prepared = _prepare(config, Path(scratch))
        truths = {data.key: load_harness_data(data) for data in prepared}
        runs = run_utility_stage(prepared, truths, config, servers or StageServers())
    summaries = summarise_utility(runs)
    report = utility_markdown(summaries, config)
    payload = {
        "machine": info,
        "config": {
            "datasets": list(config.datasets),
            "epsilons": list(config.epsilons),
            "runs": config.runs,
            "presets": list(PRESETS),
            "significance": SIGNIFICANCE,
        },
        "summaries": [asdict(s) for s in summaries],
        "runs": [asdict(r) for r in runs],
        "total_seconds": round(time.perf_counter() - started, 1),
        "markdown": report,
    }
    out_file = config.out / "serenade_utility.json"
    out_file.write_text(json.dumps(payload, indent=2) + "\n")
    print()
    print(report)
    print(f"\nwrote {out_file}")
    return 0


# -- padding cost: per-call against batched (issue #23, item 2) ---------------------------------

#: The miners of the padding table: (label, method, preset), each at ε = 1.
BATCHING_MINERS: tuple[tuple[str, Method, Preset], ...] = (
    ("SerenadeES paper", "ES", "paper"),
    ("SerenadeES auto", "ES", "auto"),
    ("SerenadeCS auto", "CS", "auto"),
)
BATCHING_EPSILON = 1.0
#: Quality-check batches timed (padding off) to measure a part's cost: 1 part and the limit.
PART_PROBES = 5


@dataclass(frozen=True)
class BatchingRun:
    """One whole mine() of the padding table."""

    dataset: str
    miner: str
    padding: bool
    batched: bool
    repetition: int
    wall_s: float
    charged_calls: int
    requests: int
    epsilon_spent: float
    #: The run stopped at a call that overran its padded budget (OperationFailed; its charge
    #: stands): a loaded machine, the residual event bench_budgets.py measures.
    overran: bool = False


def _charged_requests(receipts: Sequence[Any]) -> int:
    """Charged HTTP requests of a run: the parts of one batch share their reservation's
    ``created_at`` (one transaction), separate calls do not."""
    return len({receipt.created_at for receipt in receipts})


def part_seconds(handle: dpmine.DatasetHandle, data: PreparedData) -> float:
    """Seconds a ``red.compute_quality`` part adds to a batch (padding off, over HTTP): the
    median of (t(MAX_BATCH_PARTS parts) − t(1 part)) / (MAX_BATCH_PARTS − 1), kernel included,
    so an upper bound on a part's own bookkeeping (timing.BATCH_PART_SECONDS)."""
    attribute = next(a for a in data.metadata.attributes if a.view == "left")
    other = next(a for a in data.metadata.attributes if a.view == "right")
    red = Redescription.model_validate(
        {"left": _any_literal(attribute), "right": _any_literal(other)}
    )
    request = ComputeQualityRequest(redescription=red, epsilon=WARMUP_EPSILON)
    slopes = []
    for _ in range(PART_PROBES):
        start = time.perf_counter()
        handle.run_batch([request])
        one = time.perf_counter() - start
        start = time.perf_counter()
        handle.run_batch([request] * MAX_BATCH_PARTS)
        full = time.perf_counter() - start
        slopes.append((full - one) / (MAX_BATCH_PARTS - 1))
    return median(slopes)


def _any_literal(attribute: Any) -> dict[str, Any]:
    """A literal of the attribute, as JSON (the first category, a numeric range's lower bound,
    or the Boolean)."""
    if isinstance(attribute, NumericAttribute):
        return {"kind": "num", "attribute": attribute.name, "lower": attribute.lo}
    if isinstance(attribute, BooleanAttribute):
        return {"kind": "bool", "attribute": attribute.name}
    return {"kind": "cat", "attribute": attribute.name, "category": attribute.categories[0]}


def run_batching_stage(
    prepared: Sequence[PreparedData], config: Config, servers: StageServers
) -> tuple[list[BatchingRun], dict[str, float]]:
    """Every (dataset, miner, per-call/batched) ``runs`` times on a server with padding off,
    then on one with the production padding defaults (``--smoke``: padding off only); and a
    part's cost per dataset."""
    runs: list[BatchingRun] = []
    parts: dict[str, float] = {}
    for padding in (False,) if config.smoke else (False, True):
        padded = replace(config, padding=padding)
        with servers.stage(prepared, padded, "dpmine-bench-batching-") as (_connection, handles):
            for data in prepared:
                handles[data.key].count(epsilon=WARMUP_EPSILON)  # load the files once
                if not padding:
                    parts[data.key] = round(part_seconds(handles[data.key], data), 5)
            for repetition in range(config.runs):
                for data in prepared:
                    for label, method, preset in BATCHING_MINERS:
                        for batched in (False, True):
                            miner = make_utility_miner(method, preset, BATCHING_EPSILON, data.x0)
                            miner.batched = batched
                            run = _timed_mine(miner, handles[data.key], data.key, label)
                            runs.append(replace(run, padding=padding, repetition=repetition))
                            print(
                                f"  {data.key} {label} padding={'on' if padding else 'off'} "
                                f"{'batched' if batched else 'per-call'}: {run.wall_s:.2f} s, "
                                f"{run.charged_calls} calls in {run.requests} requests"
                                + (" (stopped: a call overran its budget)" if run.overran else ""),
                                flush=True,
                            )
    return runs, parts


def _timed_mine(
    miner: SerenadeES | SerenadeCS, handle: dpmine.DatasetHandle, dataset: str, label: str
) -> BatchingRun:
    """One whole mine(), timed; a call that overran its padded budget ends the run (the miner
    keeps what it released, :class:`StoppedRun`; recorded as such, its wall time left out of
    the medians)."""
    start = time.perf_counter()
    overran = False
    try:
        mine_whole(miner, handle)
    except StoppedRun:
        overran = True
    mined = not overran
    return BatchingRun(
        dataset=dataset,
        miner=label,
        padding=False,
        batched=miner.batched,
        repetition=0,
        wall_s=round(time.perf_counter() - start, 3),
        charged_calls=len(miner.receipts_) if mined else 0,
        requests=_charged_requests(miner.receipts_) if mined else 0,
        epsilon_spent=miner.budget_spent_ if mined else math.nan,
        overran=overran,
    )


def batching_markdown(runs: Sequence[BatchingRun], parts: Mapping[str, float]) -> str:
    """The padding table: median wall seconds per (dataset, miner), padding off/on, per-call
    and batched, with the ratios the issue targets (padded / unpadded, per-call / batched)."""
    lines = [
        "| dataset | miner | calls | requests per-call → batched | off per-call | off batched "
        "| on per-call | on batched | on batched / off batched | on: per-call / batched |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    keys = sorted({(r.dataset, r.miner) for r in runs}, key=lambda k: (k[0], k[1]))

    def wall(dataset: str, miner: str, padding: bool, batched: bool) -> float:
        walls = [
            r.wall_s
            for r in runs
            if (r.dataset, r.miner, r.padding, r.batched) == (dataset, miner, padding, batched)
            and not r.overran
        ]
        return median(walls) if walls else math.nan  # --smoke: no padded runs

    def requests(dataset: str, miner: str, batched: bool) -> int:
        return max(
            r.requests for r in runs if (r.dataset, r.miner, r.batched) == (dataset, miner, batched)
        )

    for dataset, miner in keys:
        calls = max(r.charged_calls for r in runs if (r.dataset, r.miner) == (dataset, miner))
        off_call, off_batch = wall(dataset, miner, False, False), wall(dataset, miner, False, True)
        on_call, on_batch = wall(dataset, miner, True, False), wall(dataset, miner, True, True)
        lines.append(
            f"| {dataset} | {miner} | {calls} | {requests(dataset, miner, False)} → "
            f"{requests(dataset, miner, True)} | {off_call:.2f} | {off_batch:.2f} | "
            f"{on_call:.2f} | {on_batch:.2f} | {on_batch / off_batch:.1f}× | "
            f"{on_call / on_batch:.1f}× |"
        )
    overruns = [r for r in runs if r.overran]
    lines.append("")
    lines.append(
        f"{len(overruns)} run(s) stopped at a call that overran its padded budget (left out): "
        + (", ".join(sorted({f"{r.dataset} {r.miner}" for r in overruns})) or "none")
        + "."
    )
    lines.append(
        "A red.compute_quality part adds (padding off, over HTTP, kernel included): "
        + ", ".join(f"{key} {seconds * 1e3:.2f} ms" for key, seconds in parts.items())
        + f" (timing.BATCH_PART_SECONDS budgets {BATCH_PART_SECONDS * 1e3:g} ms)."
    )
    return "\n".join(lines)


def main_batching(config: Config, servers: StageServers | None = None) -> int:
    """``--batching``: the padding table; writes ``<out>/serenade_batching.json``. On fresh
    servers unless ``servers`` has one (``--smoke``)."""
    started = time.perf_counter()
    info = machine_info()
    print(
        f"dpmine padding cost, per-call against batched (issue #23): "
        f"datasets={','.join(config.datasets)} runs={config.runs} nproc={info['nproc']} "
        f"load={info['load_average_start']}",
        flush=True,
    )
    config.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="dpmine-bench-serenade-data-") as scratch:
        prepared = _prepare(config, Path(scratch))
        runs, parts = run_batching_stage(prepared, config, servers or StageServers())
    report = batching_markdown(runs, parts)
    info["load_average_end"] = load_average()
    payload = {
        "machine": info,
        "config": {"datasets": list(config.datasets), "runs": config.runs},
        "part_seconds": parts,
        "runs": [asdict(r) for r in runs],
        "total_seconds": round(time.perf_counter() - started, 1),
        "markdown": report,
    }
    out_file = config.out / "serenade_batching.json"
    out_file.write_text(json.dumps(payload, indent=2) + "\n")
    print()
    print(report)
    print(f"\nwrote {out_file}")
    return 0


def _names(
    text: str, allowed: Sequence[str], parser: argparse.ArgumentParser, flag: str
) -> tuple[str, ...]:
    chosen = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [name for name in chosen if name not in allowed and name != "none"]
    if unknown:
        parser.error(f"{flag}: unknown {unknown}; choose from {', '.join(allowed)} or none")
    return tuple(name for name in chosen if name != "none")


def parse_args(argv: list[str] | None = None) -> Config:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="1 run per setting; ReReMi not run (a cached result is still reported)",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="seconds-long check that the script runs (the test suite's): the bundled Mushroom "
        "table, ε = 1, 1 run, padding off, ReReMi not run; then the --utility and --batching "
        "stages on it, all on one server",
    )
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "out")
    parser.add_argument(
        "--datasets",
        default=None,
        help="mammals,asia (also: teeth, china); --utility: mammals,asia,china",
    )
    parser.add_argument("--runs", type=int, default=None, help=f"runs per setting ({RUNS})")
    parser.add_argument(
        "--clired",
        default=None,
        help="datasets to run ReReMi on (default: all chosen datasets; --quick: none); "
        "cached results are reported either way",
    )
    parser.add_argument(
        "--clired-timeout",
        type=float,
        default=CLIRED_TIMEOUT_MIN,
        metavar="MIN",
        help=f"wall-time cap of one ReReMi run in minutes (default {CLIRED_TIMEOUT_MIN:g})",
    )
    parser.add_argument(
        "--clired-rerun", action="store_true", help="ignore the ReReMi cache and run again"
    )
    parser.add_argument(
        "--no-install",
        action="store_true",
        help="do not pip-install python-clired / fetch its sdist when missing",
    )
    parser.add_argument(
        "--skip-serenade", action="store_true", help="only the ReReMi baseline (fills the cache)"
    )
    parser.add_argument("--data-root", type=Path, default=DATA_ROOT)
    parser.add_argument(
        "--no-padding",
        action="store_true",
        help="run the server without release padding (development mode), to time the engine "
        'itself rather than the padded schedule that analysts see (README "Timing")',
    )
    parser.add_argument(
        "--utility",
        action="store_true",
        help="issue #12: auto defaults vs the paper preset on mammals, asia and china (utility, "
        f"significance, interval coverage; {UTILITY_RUNS} runs per setting by default)",
    )
    parser.add_argument(
        "--batching",
        action="store_true",
        help="issue #23: wall time of SerenadeES paper/auto and SerenadeCS auto at ε = 1, padding "
        "off and on (production defaults), per-call and batched (default mammals,asia; 1 run)",
    )
    add_server_timing_arguments(parser)
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="first wait up to SECONDS for the 1-minute load average to drop below 0.5",
    )
    args = parser.parse_args(argv)
    if args.smoke:
        return Config(
            out=args.out,
            datasets=(SMOKE_KEY,),
            epsilons=SMOKE_EPSILONS,
            runs=1,
            clired=(),
            clired_timeout_s=args.clired_timeout * 60.0,
            clired_rerun=False,
            install_clired=False,
            skip_serenade=False,
            data_root=args.data_root,
            wait_quiet=0.0,
            padding=False,
            smoke=True,
        )
    default_datasets = UTILITY_DATASET_KEYS if args.utility else DATASET_KEYS
    datasets = _names(
        args.datasets or ",".join(default_datasets),
        DATASET_KEYS + EXTRA_DATASET_KEYS,
        parser,
        "--datasets",
    )
    default_clired = "none" if args.quick else ",".join(datasets)
    clired = _names(args.clired or default_clired, datasets, parser, "--clired")
    runs = args.runs or (
        1 if args.quick or args.batching else UTILITY_RUNS if args.utility else RUNS
    )
    if runs < 1 or args.clired_timeout <= 0:
        parser.error("--runs and --clired-timeout must be positive")
    return Config(
        out=args.out,
        datasets=datasets,
        epsilons=EPSILONS,
        runs=runs,
        clired=clired,
        clired_timeout_s=args.clired_timeout * 60.0,
        clired_rerun=args.clired_rerun,
        install_clired=not args.no_install,
        skip_serenade=args.skip_serenade,
        data_root=args.data_root,
        wait_quiet=args.wait_quiet,
        padding=not args.no_padding,
        utility=args.utility,
        batching=args.batching,
        server_env=server_timing_settings(args),
    )


def _prepare(config: Config, scratch: Path) -> list[PreparedData]:
    prepared: list[PreparedData] = []
    for key in config.datasets:
        data = prepare_dataset(view_choice(key, config.data_root, scratch), scratch / key)
        prepared.append(data)
        kinds = {a.view: a.type for a in data.metadata.attributes}
        print(
            f"  {key}: {data.n_rows} rows, {len(data.choice.left)} + {len(data.choice.right)} "
            f"columns ({kinds}), n_max {data.metadata.n_max}, x0 {data.x0:g}",
            flush=True,
        )
    return prepared


def main(argv: list[str] | None = None) -> int:
    """Run the stages, print the tables, write JSON and figures."""
    config = parse_args(argv)
    unwind_on_sigterm()
    wait_if_asked(config.wait_quiet)
    if config.utility:
        return main_utility(config)
    if config.batching:
        return main_batching(config)
    if not config.smoke:
        return main_serenade(config, StageServers())
    # --smoke: the --utility and --batching stages too, so that the smoke run covers them, all
    # on one server (the same datasets and settings: padding off)
    with contextlib.ExitStack() as keep:
        servers = StageServers(keep)
        failed = main_serenade(config, servers) != 0
        failed = main_utility(config, servers) != 0 or failed
        failed = main_batching(config, servers) != 0 or failed
    return 1 if failed else 0


def main_serenade(config: Config, servers: StageServers) -> int:
    """The Serenade stage and ReReMi (the default mode): tables, JSON and figures."""
    started = time.perf_counter()
    info = machine_info()
    print(
        f"dpmine Serenade benchmark: datasets={','.join(config.datasets)} runs={config.runs} "
        f"ε={list(config.epsilons)} ReReMi on {list(config.clired) or 'none'} "
        f"nproc={info['nproc']} load={info['load_average_start']}",
        flush=True,
    )
    config.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="dpmine-bench-serenade-data-") as scratch:
        print("[data] trimming the views and proposing metadata ...", flush=True)
        prepared = _prepare(config, Path(scratch))
        stage: SerenadeStage | None = None
        summaries: list[SettingSummary] = []
        agreement = (0, 0)
        figures: list[Path] = []
        if not config.skip_serenade:
            truths = {data.key: load_harness_data(data) for data in prepared}
            padding = "on" if config.padding else "off (--no-padding)"
            print(
                f"[serenade] real uvicorn server (SQLite), release padding {padding}, runs over "
                "HTTP ...",
                flush=True,
            )
            stage = run_serenade_stage(prepared, truths, config, servers)
            summaries = summarise(stage.runs)
            agreement = exact_agreement(prepared, stage.runs)
            loads = [run.load_average[0] for run in stage.runs]
            info["serenade_load_min"], info["serenade_load_max"] = min(loads), max(loads)
            figures = [
                plot_scatter(stage.runs, summaries, data, config.epsilons, config.out)
                for data in prepared
            ]
        print("[reremi] python-clired baseline ...", flush=True)
        clired = [run_clired(data, config, allowed=data.key in config.clired) for data in prepared]
    total = time.perf_counter() - started
    info["load_average_end"] = load_average()
    report = markdown_report(
        info=info,
        config=config,
        prepared=prepared,
        stage=stage,
        summaries=summaries,
        clired=clired,
        agreement=agreement,
        total_seconds=total,
    )
    payload = {
        "machine": info,
        "config": {
            "datasets": list(config.datasets),
            "epsilons": list(config.epsilons),
            "runs": config.runs,
            "defaults": {
                "n_initial": N_INITIAL,
                "tau": TAU,
                "rounds": ROUNDS,
                "split": list(SPLIT),
                "min_jaccard": MIN_JACCARD,
                "max_literals": MAX_LITERALS,
                "x0_fraction_of_true_n": X0_FRACTION,
            },
            "clired": list(config.clired),
            "clired_timeout_s": config.clired_timeout_s,
            "clired_parameters": CLIRED_PARAMETERS,
        },
        "datasets": [
            {
                "key": data.key,
                "rows": data.n_rows,
                "left": data.choice.left,
                "right": data.choice.right,
                "n_max": data.metadata.n_max,
                "x0": data.x0,
            }
            for data in prepared
        ],
        "calibrations": {k: asdict(v) for k, v in (stage.calibrations if stage else {}).items()},
        "summaries": [asdict(s) for s in summaries],
        "runs": [asdict(r) for r in stage.runs] if stage else [],
        "clired": [asdict(c) for c in clired],
        "harness_agreement": list(agreement),
        "figures": [str(path) for path in figures],
        "total_seconds": round(total, 1),
        "markdown": report,
    }
    out_file = config.out / ("serenade_clired.json" if config.skip_serenade else "serenade.json")
    out_file.write_text(json.dumps(payload, indent=2) + "\n")
    print()
    print(report)
    print(f"\nwrote {out_file}" + "".join(f"\nwrote {path}" for path in figures))
    failed = agreement[0] != agreement[1] or any(c.status == "failed" for c in clired)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
