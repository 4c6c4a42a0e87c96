"""DP Bayesian rule lists benchmark (ALGORITHMS.md §5) against a non-private BRL (imodels).

1. ``DPBayesianRuleList`` with its public defaults, fitted over HTTP against a real uvicorn
   server started here (SQLite by default) on Titanic (Kaggle train.csv, 6 attributes, 800 train
   rows / the rest as test, split seeded per run), UCI Mushroom (7,000 / 1,124, seeded per run)
   and UCI Adult (its train / test files, rows with '?' dropped, fnlwgt dropped), at
   ε ∈ {0.9, 0.5, 0.1, 0.01}, five runs each: held-out test AUC, in-sample AUC (the thesis'
   measure), rule-list length, average antecedent length and the wall time of one fit.
2. Beside it, the non-private BRL of imodels 3.0.4 (``BayesianRuleListClassifier``) with
   Letham-style per-class antecedents as in BASELINES.md §3, run in a separate interpreter
   (``--imodels-python``, a throwaway venv; skipped with a message when it is missing).
3. A table of targets: at or above the thesis' AUC at every ε it reports (0.9 and 0.1), and at
   ε = 0.9 within 0.05 of the non-private test AUC.

The owner-side metadata (public ranges of the numeric attributes, category lists, the label and
its positive value, the public row bound N_max) is declared here, as the data owner would; the
DP side never sees the data except through the server's charged calls. The harness itself reads
the files to split them and to score predictions (AUC), which the analyst could not do.

Usage::

    .venv/bin/python bench/bench_rule_lists.py [--quick] [--runs N] [--datasets titanic,...]
        [--epsilons 0.9,0.1] [--baseline-runs 5 | titanic=5,mushroom=3,adult=1]
        [--imodels-python /tmp/imodels-venv/bin/python] [--out bench/out]
        [--k-per-class K --max-length L --iterations T --numeric-bins B --expected-length λ]
        [--sampler auto|exact|mcmc --max-rules L]

Writes ``<out>/rule_lists.json``; prints Markdown tables.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import math
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

import dpmine
from _support import (
    BUNDLED_MUSHROOM,
    ServerHandle,
    add_analysts,
    load_average,
    machine_info,
    median,
    register_files,
    server_for_backend,
    unwind_on_sigterm,
)
from dpmine.rule_lists import (
    DEFAULT_ITERATIONS,
    DEFAULT_K_PER_CLASS,
    DEFAULT_MAX_LENGTH,
    DPBayesianRuleList,
)
from dpmine.wire import (
    DEFAULT_NUMERIC_BINS,
    AnyAttribute,
    CategoricalAttribute,
    CsvSource,
    DatasetMetadata,
    LabelSpec,
    NumericAttribute,
)

DATA_ROOT = Path("/work/shared/data")
DATASETS = ("titanic", "mushroom", "adult")
EPSILONS = (0.9, 0.5, 0.1, 0.01)
DEFAULT_IMODELS_PYTHON = Path("/tmp/imodels-venv/bin/python")
#: The thesis' in-sample AUC of DP-BRL (Belardo 2018): (dataset, ε) -> AUC.
THESIS_AUC: dict[tuple[str, float], float] = {
    ("mushroom", 0.9): 0.978,
    ("titanic", 0.9): 0.782,
    ("adult", 0.9): 0.663,
    ("mushroom", 0.1): 0.972,
    ("titanic", 0.1): 0.650,
    ("adult", 0.1): 0.642,
}
#: At ε = 0.9 the DP test AUC should be within this of the non-private one.
NON_PRIVATE_GAP = 0.05

Row = dict[str, str]


# --------------------------------------------------------------------------------------------
# Data: files, splits and the owner's public metadata


@dataclass(frozen=True)
class Spec:
    """One dataset: the owner's public metadata and how to read and split it."""

    name: str
    columns: tuple[str, ...]
    metadata: DatasetMetadata
    #: Baseline (BASELINES.md §3): numeric columns cut at training quartiles, columns split
    #: into =0 / >0, per-class min support, λ, MCMC steps per chain.
    quartile_columns: tuple[str, ...]
    zero_columns: tuple[str, ...]
    min_support: float
    baseline_lambda: float
    baseline_steps: int


def _read_csv(path: Path) -> list[Row]:
    opener: Callable[..., Any] = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", newline="") as handle:
        return [{k.strip(): v.strip() for k, v in row.items()} for row in csv.DictReader(handle)]


def _categories(rows: Sequence[Row], column: str, missing: str = "?") -> list[str]:
    """The category list of a column. Owner side: the documented value list of the public
    data set (here read off the files, which hold exactly the documented values)."""
    return sorted({row[column] for row in rows if row[column] not in ("", missing)})


def titanic_spec() -> Spec:
    """Titanic: Pclass, Sex, Age, SibSp, Parch, Fare; Survived = 1 positive; N_max = 2,500
    (2,224 people were aboard). The owner's public bins come from domain knowledge, not from
    the rows: age groups (child < 12, teenager, young adult, adult, older, 60+), relatives
    aboard as none / one / several, fares in 1912 pounds by ticket tier."""
    metadata = DatasetMetadata(
        kind="table",
        n_max=2_500,
        attributes=[
            CategoricalAttribute(name="Pclass", categories=["1", "2", "3"]),
            CategoricalAttribute(name="Sex", categories=["female", "male"]),
            NumericAttribute(name="Age", lo=0.0, hi=80.0, grid=[12.0, 18.0, 30.0, 45.0, 60.0]),
            NumericAttribute(name="SibSp", lo=0.0, hi=9.0, grid=[0.5, 1.5]),
            NumericAttribute(name="Parch", lo=0.0, hi=9.0, grid=[0.5, 1.5]),
            NumericAttribute(name="Fare", lo=0.0, hi=520.0, grid=[10.0, 25.0, 50.0, 100.0]),
            CategoricalAttribute(name="Survived", categories=["0", "1"]),
        ],
        label=LabelSpec(attribute="Survived", positive="1"),
    )
    return Spec(
        name="titanic",
        columns=("Pclass", "Sex", "Age", "SibSp", "Parch", "Fare", "Survived"),
        metadata=metadata,
        quartile_columns=("Age", "Fare"),
        zero_columns=(),
        min_support=0.289,
        baseline_lambda=3.0,
        baseline_steps=1000,
    )


def mushroom_spec(rows: Sequence[Row]) -> Spec:
    """Mushroom: 22 categorical attributes ('?' = missing stalk-root); class = p positive;
    N_max = 10,000."""
    columns = tuple(rows[0])
    attributes: list[AnyAttribute] = [
        CategoricalAttribute(name=name, categories=_categories(rows, name)) for name in columns
    ]
    metadata = DatasetMetadata(
        kind="table",
        n_max=10_000,
        attributes=attributes,
        label=LabelSpec(attribute="class", positive="p"),
    )
    return Spec(
        name="mushroom",
        columns=columns,
        metadata=metadata,
        quartile_columns=(),
        zero_columns=(),
        min_support=0.565,
        baseline_lambda=7.0,
        baseline_steps=1500,
    )


#: Adult's numeric attributes: public ranges (UCI documentation), and a public cut-point
#: grid [1] for the capital columns (zero / positive, as in the baseline).
ADULT_NUMERIC: dict[str, tuple[float, float, list[float] | None]] = {
    "age": (17.0, 90.0, None),
    "education-num": (1.0, 16.0, None),
    "capital-gain": (0.0, 99_999.0, [1.0]),
    "capital-loss": (0.0, 4_356.0, [1.0]),
    "hours-per-week": (1.0, 99.0, None),
}


def adult_spec(rows: Sequence[Row]) -> Spec:
    """Adult (fnlwgt dropped): 5 numeric, 8 categorical attributes; income = >50K positive;
    N_max = 50,000."""
    columns = tuple(name for name in rows[0] if name != "fnlwgt")
    attributes: list[AnyAttribute] = []
    for name in columns:
        if name in ADULT_NUMERIC:
            lo, hi, grid = ADULT_NUMERIC[name]
            attributes.append(NumericAttribute(name=name, lo=lo, hi=hi, grid=grid))
        else:
            attributes.append(CategoricalAttribute(name=name, categories=_categories(rows, name)))
    metadata = DatasetMetadata(
        kind="table",
        n_max=50_000,
        attributes=attributes,
        label=LabelSpec(attribute="income", positive=">50K"),
    )
    return Spec(
        name="adult",
        columns=columns,
        metadata=metadata,
        quartile_columns=("age", "education-num", "hours-per-week"),
        zero_columns=("capital-gain", "capital-loss"),
        min_support=0.282,
        baseline_lambda=13.0,
        baseline_steps=3000,
    )


@dataclass(frozen=True)
class Split:
    """Train and test rows of one run."""

    train: list[Row]
    test: list[Row]


@dataclass(frozen=True)
class Dataset:
    """A dataset ready to split: its spec and rows (Adult: fixed train/test files)."""

    spec: Spec
    rows: list[Row]
    fixed_test: list[Row] | None
    n_train: int

    def split(self, seed: int) -> Split:
        """The run's split: seeded permutation (Titanic, Mushroom) or the given files."""
        if self.fixed_test is not None:
            return Split(train=self.rows, test=self.fixed_test)
        order = np.random.default_rng(seed).permutation(len(self.rows))
        train = [self.rows[i] for i in order[: self.n_train]]
        test = [self.rows[i] for i in order[self.n_train :]]
        return Split(train=train, test=test)

    @property
    def varies_by_seed(self) -> bool:
        """Whether each run has its own split (and so its own registered dataset)."""
        return self.fixed_test is None


def _without_question_marks(rows: list[Row]) -> list[Row]:
    return [row for row in rows if "?" not in row.values()]


def load_dataset(name: str) -> Dataset:
    """Read and prepare one dataset from /work/shared/data."""
    if name == "titanic":
        spec = titanic_spec()
        rows = _read_csv(DATA_ROOT / "kaggle_titanic" / "train.csv")
        return Dataset(spec, [{c: r[c] for c in spec.columns} for r in rows], None, 800)
    if name == "mushroom":
        rows = _read_csv(DATA_ROOT / "uci_mushroom" / "agaricus-lepiota.csv")
        return Dataset(mushroom_spec(rows), rows, None, 7_000)
    if name == "adult":
        train = _without_question_marks(_read_csv(DATA_ROOT / "uci_adult" / "adult_train.csv.gz"))
        test = _without_question_marks(_read_csv(DATA_ROOT / "uci_adult" / "adult_test.csv.gz"))
        spec = adult_spec(train + test)
        keep = spec.columns
        return Dataset(
            spec,
            [{c: r[c] for c in keep} for r in train],
            [{c: r[c] for c in keep} for r in test],
            len(train),
        )
    raise ValueError(f"unknown dataset {name!r}; choose from {DATASETS}")


#: ``--smoke``: one row in 16 of the bundled Mushroom table (508 rows, 400 to train).
SMOKE_EVERY = 16
SMOKE_TRAIN = 400


def smoke_dataset() -> Dataset:
    """The smoke mode's dataset: Mushroom from the repository's bundled copy (no shared data),
    one row in :data:`SMOKE_EVERY`, with the full benchmark's owner-side metadata."""
    rows = _read_csv(BUNDLED_MUSHROOM)[::SMOKE_EVERY]
    return Dataset(mushroom_spec(rows), rows, None, SMOKE_TRAIN)


def write_rows(path: Path, columns: Sequence[str], rows: Sequence[Row]) -> Path:
    """Rows as a CSV file with a header."""
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(columns))
        writer.writeheader()
        writer.writerows(rows)
    return path


def as_columns(rows: Sequence[Row], columns: Sequence[str]) -> dict[str, list[str]]:
    """Rows as columns of cell texts (what ``RuleList.predict_proba`` takes)."""
    return {name: [row[name] for row in rows] for name in columns}


def labels_of(rows: Sequence[Row], spec: Spec) -> npt.NDArray[np.bool_]:
    """True where the row's label is the positive value."""
    label = spec.metadata.label
    assert label is not None
    return np.array([row[label.attribute] == label.positive for row in rows], dtype=bool)


def auc(scores: npt.NDArray[np.float64], positive: npt.NDArray[np.bool_]) -> float:
    """Area under the ROC curve: the Mann–Whitney statistic with ties counted half."""
    order = np.argsort(scores, kind="mergesort")
    ordered = scores[order]
    ranks = np.empty(len(scores), dtype=np.float64)
    boundaries = np.flatnonzero(np.diff(ordered)) + 1
    starts = np.concatenate([[0], boundaries])
    ends = np.concatenate([boundaries, [len(scores)]])
    for start, end in zip(starts, ends, strict=True):
        ranks[order[start:end]] = (start + end - 1) / 2 + 1
    n_pos, n_neg = int(positive.sum()), int((~positive).sum())
    if n_pos == 0 or n_neg == 0:
        return math.nan
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


# --------------------------------------------------------------------------------------------
# DP runs


@dataclass(frozen=True)
class DPRun:
    """One DP fit and its scores."""

    dataset: str
    epsilon: float
    run: int
    test_auc: float
    train_auc: float
    length: int
    antecedents: int
    average_antecedent_length: float
    fit_seconds: float
    text: str
    load_average: tuple[float, float, float]
    sampler: str = ""


@dataclass
class Registry:
    """Datasets registered on the server (one per split) and the analyst's key."""

    server: ServerHandle
    work: Path
    analyst_key: str
    registered: dict[tuple[str, int], str]

    def dataset_id(self, data: Dataset, seed: int) -> str:
        """The id of the run's training split, registered on first use."""
        key = (data.spec.name, seed if data.varies_by_seed else 0)
        if key not in self.registered:
            dataset_id = f"{data.spec.name}-{key[1]}"
            path = write_rows(
                self.work / f"{dataset_id}.csv", data.spec.columns, data.split(seed).train
            )
            with self.server.connect() as owner:
                register_files(
                    owner,
                    dataset_id=dataset_id,
                    metadata=data.spec.metadata,
                    source=CsvSource(path=path.name),
                    files={"path": path},
                )
                owner.admin.grant(dataset_id, "bench-analyst", 1_000.0)
            self.registered[key] = dataset_id
        return self.registered[key]


def model_for(epsilon: float, overrides: Mapping[str, Any]) -> DPBayesianRuleList:
    """The estimator with its public defaults, or the overrides of a tuning run."""
    return DPBayesianRuleList(epsilon=epsilon, **overrides)


def dp_run(
    registry: Registry,
    data: Dataset,
    epsilon: float,
    run: int,
    overrides: Mapping[str, Any],
) -> DPRun:
    """Fit once over HTTP (timed) and score the list on the test and training rows."""
    dataset_id = registry.dataset_id(data, run)
    split = data.split(run)
    model = model_for(epsilon, overrides)
    with dpmine.connect(registry.server.url, registry.analyst_key, timeout=600.0) as connection:
        handle = connection.dataset(dataset_id)
        started = time.perf_counter()
        model.fit(handle)
        seconds = time.perf_counter() - started
    fitted = model.rule_list_
    test_scores = model.predict_proba(as_columns(split.test, data.spec.columns))[:, 1]
    train_scores = model.predict_proba(as_columns(split.train, data.spec.columns))[:, 1]
    return DPRun(
        dataset=data.spec.name,
        epsilon=epsilon,
        run=run,
        test_auc=auc(test_scores, labels_of(split.test, data.spec)),
        train_auc=auc(train_scores, labels_of(split.train, data.spec)),
        length=len(fitted),
        antecedents=len(model.antecedents_),
        average_antecedent_length=fitted.average_antecedent_length,
        fit_seconds=seconds,
        text=fitted.to_text(),
        load_average=load_average(),
        sampler=model.sampler_,
    )


# --------------------------------------------------------------------------------------------
# The non-private baseline (imodels, in its own interpreter)

#: Run by the imodels interpreter: reads a JSON job on stdin, prints a JSON result.
BASELINE_SCRIPT = r"""
import json, sys, time
import numpy as np
import pandas as pd
import fim
from sklearn.metrics import roc_auc_score
from imodels import BayesianRuleListClassifier
from imodels.rule_list.bayesian_rule_list import bayesian_rule_list as brl_module

job = json.load(sys.stdin)
train = pd.read_csv(job["train"], dtype=str, keep_default_na=False)
test = pd.read_csv(job["test"], dtype=str, keep_default_na=False)
label, positive = job["label"], job["positive"]
features = [c for c in train.columns if c != label]


def quartile_cuts(frame):
    cuts = {}
    for column in job["quartile_columns"]:
        values = pd.to_numeric(frame[column].replace("", np.nan), errors="coerce").dropna()
        cuts[column] = np.unique(np.quantile(values, [0.25, 0.5, 0.75]))
    return cuts


def items(frame, cuts):
    # attribute=value items; quartile columns by training cut points, zero columns =0 / >0
    out = {}
    for column in features:
        cells = frame[column]
        if column in cuts:
            values = pd.to_numeric(cells.replace("", np.nan), errors="coerce").to_numpy()
            codes = np.searchsorted(cuts[column], values, side="left")
            text = np.array([f"q{c + 1}" for c in codes], dtype=object)
            text[np.isnan(values)] = "missing"
            out[column] = text
        elif column in job["zero_columns"]:
            values = pd.to_numeric(cells, errors="coerce").to_numpy()
            out[column] = np.where(values > 0, ">0", "=0").astype(object)
        else:
            out[column] = cells.to_numpy(dtype=object)
    return pd.DataFrame(out)


cuts = quartile_cuts(train)
raw_train, raw_test = items(train, cuts), items(test, cuts)
one_hot = pd.get_dummies(pd.concat([raw_train, raw_test]), prefix_sep="=").astype(int)
x_train, x_test = one_hot.iloc[: len(train)], one_hot.iloc[len(train):]
y_train = (train[label] == positive).to_numpy().astype(int)
y_test = (test[label] == positive).to_numpy().astype(int)


def letham_itemsets(X, minsupport=0.1, maxcardinality=2, verbose=False):
    # Letham's BRL code: FP-growth on each class's rows, the union of the two lists
    found = set()
    columns = np.array(X.columns)
    for cls in (1, 0):
        rows = X.to_numpy()[y_train == cls]
        transactions = [list(columns[row == 1]) for row in rows]
        for entry in fim.fpgrowth(transactions, supp=100 * minsupport, zmin=1,
                                  zmax=maxcardinality, report=""):
            nested = isinstance(entry, tuple) and isinstance(entry[0], tuple)
            itemset = entry[0] if nested else entry
            found.add(tuple(sorted(itemset)))
    return sorted(found)


brl_module.extract_fpgrowth = letham_itemsets
started = time.perf_counter()
clf = BayesianRuleListClassifier(
    listlengthprior=job["lambda"],
    listwidthprior=1,
    maxcardinality=3,
    minsupport=job["min_support"],
    max_iter=job["steps"],
    n_chains=3,
    random_state=job["seed"],
)
clf.fit(x_train, y_train, feature_names=list(x_train.columns))
seconds = time.perf_counter() - started
test_scores = clf.predict_proba(x_test)[:, 1]
train_scores = clf.predict_proba(x_train)[:, 1]
rules = [j for j in (clf.d_star or []) if j != 0]
lengths = [len(clf.itemsets[j]) for j in rules]
print(json.dumps({
    "test_auc": float(roc_auc_score(y_test, test_scores)),
    "train_auc": float(roc_auc_score(y_train, train_scores)),
    "length": len(rules),
    "antecedents": len(clf.itemsets) - 1,
    "average_antecedent_length": float(np.mean(lengths)) if lengths else 0.0,
    "fit_seconds": seconds,
}))
"""


@dataclass(frozen=True)
class BaselineRun:
    """One non-private BRL fit (imodels, Letham per-class antecedents)."""

    dataset: str
    run: int
    test_auc: float
    train_auc: float
    length: int
    antecedents: int
    average_antecedent_length: float
    fit_seconds: float


def baseline_run(python: Path, work: Path, data: Dataset, run: int) -> BaselineRun:
    """Fit imodels' BRL in its own interpreter on the run's split (BASELINES.md §3)."""
    split = data.split(run)
    spec = data.spec
    assert spec.metadata.label is not None
    train = write_rows(work / f"baseline-{spec.name}-{run}-train.csv", spec.columns, split.train)
    test = write_rows(work / f"baseline-{spec.name}-{run}-test.csv", spec.columns, split.test)
    job = {
        "train": str(train),
        "test": str(test),
        "label": spec.metadata.label.attribute,
        "positive": spec.metadata.label.positive,
        "quartile_columns": list(spec.quartile_columns),
        "zero_columns": list(spec.zero_columns),
        "min_support": spec.min_support,
        "lambda": spec.baseline_lambda,
        "steps": spec.baseline_steps,
        "seed": run,
    }
    script = work / "imodels_brl.py"
    script.write_text(BASELINE_SCRIPT)
    finished = subprocess.run(
        [str(python), str(script)],
        input=json.dumps(job),
        capture_output=True,
        text=True,
        check=False,
        timeout=3_600,
    )
    if finished.returncode != 0:
        raise RuntimeError(f"the imodels baseline failed:\n{finished.stderr[-3000:]}")
    result = json.loads(finished.stdout.strip().splitlines()[-1])
    return BaselineRun(dataset=spec.name, run=run, **result)


# --------------------------------------------------------------------------------------------
# Report


def _mean_sd(values: Sequence[float]) -> str:
    clean = [v for v in values if not math.isnan(v)]
    if not clean:
        return "-"
    sd = float(np.std(clean, ddof=1)) if len(clean) > 1 else 0.0
    return f"{np.mean(clean):.3f} ± {sd:.3f}"


def report(
    dp_runs: Sequence[DPRun],
    baseline: Sequence[BaselineRun],
    datasets: Sequence[str],
    epsilons: Sequence[float],
) -> str:
    """The Markdown tables: per setting, the baseline, and the targets."""
    lines = [
        "### DP-BRL (over HTTP, SQLite) and the non-private BRL",
        "",
        "| dataset | ε | runs | test AUC | in-sample AUC | thesis AUC (in-sample) | list length "
        "mean (min–max) | avg antecedent length | #antecedents | fit wall s median (min–max) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in datasets:
        for epsilon in epsilons:
            runs = [r for r in dp_runs if r.dataset == name and r.epsilon == epsilon]
            if not runs:
                continue
            walls = [r.fit_seconds for r in runs]
            lengths = [r.length for r in runs]
            thesis = THESIS_AUC.get((name, epsilon))
            lines.append(
                f"| {name} | {epsilon:g} | {len(runs)} | {_mean_sd([r.test_auc for r in runs])} "
                f"| {_mean_sd([r.train_auc for r in runs])} "
                f"| {'-' if thesis is None else f'{thesis:.3f}'} "
                f"| {np.mean(lengths):.1f} ({min(lengths)}–{max(lengths)}) "
                f"| {np.mean([r.average_antecedent_length for r in runs]):.2f} "
                f"| {np.mean([r.antecedents for r in runs]):.0f} "
                f"| {median(walls):.1f} ({min(walls):.1f}–{max(walls):.1f}) |"
            )
        base = [b for b in baseline if b.dataset == name]
        if base:
            walls = [b.fit_seconds for b in base]
            lengths = [b.length for b in base]
            lines.append(
                f"| {name} | non-private (imodels, Letham) | {len(base)} "
                f"| {_mean_sd([b.test_auc for b in base])} "
                f"| {_mean_sd([b.train_auc for b in base])} | - "
                f"| {np.mean(lengths):.1f} ({min(lengths)}–{max(lengths)}) "
                f"| {np.mean([b.average_antecedent_length for b in base]):.2f} "
                f"| {np.mean([b.antecedents for b in base]):.0f} "
                f"| {median(walls):.1f} ({min(walls):.1f}–{max(walls):.1f}) |"
            )
    lines += [
        "",
        "### Targets",
        "",
        "| dataset | ε | target | measured | met |",
        "|---|---|---|---|---|",
    ]
    for name in datasets:
        for epsilon in epsilons:
            runs = [r for r in dp_runs if r.dataset == name and r.epsilon == epsilon]
            thesis = THESIS_AUC.get((name, epsilon))
            if not runs:
                continue
            in_sample = float(np.nanmean([r.train_auc for r in runs]))
            test = float(np.nanmean([r.test_auc for r in runs]))
            if thesis is not None:
                lines.append(
                    f"| {name} | {epsilon:g} | in-sample AUC ≥ thesis {thesis:.3f} "
                    f"| {in_sample:.3f} | {'met' if in_sample >= thesis else 'missed'} |"
                )
                lines.append(
                    f"| {name} | {epsilon:g} | test AUC ≥ thesis {thesis:.3f} "
                    f"| {test:.3f} | {'met' if test >= thesis else 'missed'} |"
                )
            base = [b for b in baseline if b.dataset == name]
            if epsilon == 0.9 and base:
                reference = float(np.mean([b.test_auc for b in base]))
                lines.append(
                    f"| {name} | 0.9 | test AUC ≥ non-private {reference:.3f} − "
                    f"{NON_PRIVATE_GAP} | {test:.3f} | "
                    f"{'met' if test >= reference - NON_PRIVATE_GAP else 'missed'} |"
                )
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Main


def _baseline_runs(text: str, datasets: Sequence[str]) -> dict[str, int]:
    """``5`` (every dataset) or ``titanic=5,mushroom=3,adult=1``."""
    if "=" not in text:
        return dict.fromkeys(datasets, int(text))
    chosen: dict[str, int] = dict.fromkeys(datasets, 0)
    for part in text.split(","):
        name, _, count = part.partition("=")
        chosen[name.strip()] = int(count)
    return chosen


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    names = (
        "k_per_class",
        "max_length",
        "iterations",
        "numeric_bins",
        "expected_length",
        "sampler",
        "max_rules",
    )
    return {name: getattr(args, name) for name in names if getattr(args, name) is not None}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; print the tables; write ``rule_lists.json``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="1 run, ε = 0.9 and 0.1")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="seconds-long check that the script runs (the test suite's): 1 fit at ε = 0.9 on "
        "the bundled Mushroom table (1 row in 16), padding off, no imodels baseline",
    )
    parser.add_argument("--runs", type=int, default=None, help="DP runs per setting (default 5)")
    parser.add_argument("--datasets", default=",".join(DATASETS))
    parser.add_argument("--epsilons", default=None, help="comma list (default 0.9,0.5,0.1,0.01)")
    parser.add_argument("--baseline-runs", default=None, help="N or name=N,... ('0' to skip)")
    parser.add_argument("--imodels-python", type=Path, default=DEFAULT_IMODELS_PYTHON)
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out")
    for name, kind in (
        ("k-per-class", int),
        ("max-length", int),
        ("iterations", int),
        ("numeric-bins", int),
        ("expected-length", float),
        ("sampler", str),
        ("max-rules", int),
    ):
        parser.add_argument(f"--{name}", type=kind, default=None, help="override the default")
    args = parser.parse_args(argv)
    unwind_on_sigterm()

    datasets = (
        ["mushroom"] if args.smoke else [d.strip() for d in args.datasets.split(",") if d.strip()]
    )
    runs = 1 if args.smoke else args.runs or (1 if args.quick else 5)
    epsilons = (
        [0.9]
        if args.smoke
        else [float(e) for e in args.epsilons.split(",")]
        if args.epsilons
        else ([0.9, 0.1] if args.quick else list(EPSILONS))
    )
    baseline_text = "0" if args.smoke else args.baseline_runs or ("1" if args.quick else "5")
    baseline_plan = _baseline_runs(baseline_text, datasets)
    overrides = _overrides(args)
    defaults = DPBayesianRuleList().get_params()
    print(f"DPBayesianRuleList parameters: {defaults | overrides}")
    print(
        f"(library defaults: K={DEFAULT_K_PER_CLASS}, L={DEFAULT_MAX_LENGTH}, "
        f"T={DEFAULT_ITERATIONS}, bins={DEFAULT_NUMERIC_BINS})"
    )
    loaded = (
        {"mushroom": smoke_dataset()}
        if args.smoke
        else {name: load_dataset(name) for name in datasets}
    )
    dp_runs: list[DPRun] = []
    baseline: list[BaselineRun] = []
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-rule-lists-") as folder:
        work = Path(folder)
        # The smoke run turns release padding off: an overrun fails closed, and the test suite's
        # machine is loaded.
        padding = {"DPMINE_TIMING_PADDING": "false"} if args.smoke else None
        with server_for_backend(args.backend, work / "server", extra_env=padding) as server:
            keys = add_analysts(server, ["bench-analyst"], {})
            registry = Registry(server, work, keys["bench-analyst"], {})
            for name in datasets:
                for epsilon in epsilons:
                    for run in range(runs):
                        result = dp_run(registry, loaded[name], epsilon, run, overrides)
                        dp_runs.append(result)
                        print(
                            f"{name} ε={epsilon:g} run {run}: test AUC {result.test_auc:.3f}, "
                            f"in-sample {result.train_auc:.3f}, {result.length} rules "
                            f"of {result.antecedents}, {result.fit_seconds:.1f} s "
                            f"({result.sampler})",
                            flush=True,
                        )
        if args.smoke:
            print("\nnon-private baseline not run (--smoke)")
        elif not args.imodels_python.exists():
            print(
                f"\nnon-private baseline skipped: {args.imodels_python} is missing; make it with\n"
                "  python3 -m venv /tmp/imodels-venv && /tmp/imodels-venv/bin/pip install "
                "imodels==3.0.4 six pyfim pandas"
            )
        else:
            for name in datasets:
                for run in range(baseline_plan.get(name, 0)):
                    done = baseline_run(args.imodels_python, work, loaded[name], run)
                    baseline.append(done)
                    print(
                        f"{name} non-private run {run}: test AUC {done.test_auc:.3f}, "
                        f"{done.length} rules, {done.fit_seconds:.1f} s",
                        flush=True,
                    )
    text = report(dp_runs, baseline, datasets, epsilons)
    print()
    print(text)
    payload = {
        "created_at": datetime.now(UTC).isoformat(),
        "machine": machine_info(),
        "parameters": defaults | overrides,
        "dp_runs": [asdict(r) for r in dp_runs],
        "baseline_runs": [asdict(b) for b in baseline],
        "report": text,
    }
    (args.out / "rule_lists.json").write_text(json.dumps(payload, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
