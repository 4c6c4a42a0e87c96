"""Foundation benchmark of dpmine: the served request path and the counting hot path.

1. Throughput and latency (p50/p99) of ``red.compute_quality`` (ALGORITHMS.md §1.6) on the
   European mammals two-view data, with 1, 4 and 16 concurrent clients (threads, each its own
   connection and analyst key), against a real uvicorn server on SQLite and on PostgreSQL, and
   on PostgreSQL with 16 clients spread over 1, 2 and 4 API processes sharing the database.
   Measured in the same run for this tree ("after") and for a baseline commit ("before",
   default 445732b, checked out with ``git worktree`` and imported through ``PYTHONPATH`` by
   its server processes), with ratios. Every server runs with ``DPMINE_TIMING_PADDING=false``
   in development mode (release padding off: the request path itself is measured).
2. One ``count.noisy`` (§0.6) over 10^6 rows: the full engine call over HTTP, the server-side
   kernel alone, and a plain numpy popcount over the same packed bitsets.
3. ``red.compute_quality`` latency (p50/p99 of sequential calls) idle and while a long
   GIL-holding ``test.spin`` job runs in a worker process (test-mode server, this tree only):
   SQLite's embedded pool, PostgreSQL's local worker processes; the ratio loaded / idle.
4. Jobs per second with 1 and 2 workers (SQLite: the embedded pool; PostgreSQL: an API
   process with ``DPMINE_JOB_WORKERS=0`` and separate ``python -m dpmine_server worker``
   processes): ``test.spin`` jobs of 0.2 s and of 0 s (queue overhead), from 4 client threads.
5. Top-K frequent itemsets at the one-sided EM scale, K = 100, ℓ = 3, on mushroom and chess:
   FNR and server-kernel time against pyfim, through bench_itemsets.py's harness.

Usage::

    .venv/bin/python bench/bench_foundation.py [--quick] [--backends sqlite,postgres]
                                                [--out bench/out] [--baseline 445732b|none]
                                                [--processes 1,2,4]
                                                [--sections quality,count,long-job,jobs,topk]

Writes ``<out>/foundation.json`` and prints Markdown tables. See bench/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import gzip
import itertools
import json
import math
import os
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

import bench_itemsets
import dpmine
from _support import (
    REPO_ROOT,
    Backend,
    KeptOpen,
    PostgresCluster,
    ServerHandle,
    WorkerHandle,
    add_analysts,
    load_average,
    machine_info,
    median,
    owner_confirmed,
    percentile,
    postgres_cluster,
    register_files,
    running_server,
    running_worker,
    time_calls,
    unwind_on_sigterm,
    wait_if_asked,
)
from dpmine.wire import (
    And,
    BooleanAttribute,
    BoolLiteral,
    CsvPairSource,
    CsvSource,
    DatasetMetadata,
    Expr,
    NoisyCountResponse,
    NumericAttribute,
    NumLiteral,
)
from dpmine_server.data.loaders import load_store
from dpmine_server.data.propose import propose_metadata
from dpmine_server.dp.mechanisms import discrete_laplace
from dpmine_server.operations.counts import noisy_count
from dpmine_server.operations.itemsets import selection_scale
from dpmine_server.operations.testing import SpinCountRequest

MAMMALS_DIR = Path("/work/shared/data/rm_european_mammals")
MAMMALS_ID = "mammals"
BITS_ID = "bits1m"
BITS_ROWS = 1_000_000
#: Probability that each Boolean column of the synthetic 10^6-row table is 1.
BITS_DENSITIES = (0.5, 0.3, 0.7, 0.1)
COUNT_PREDICATE = "[b1] & [b2]"
CONCURRENCY = (1, 4, 16)
EPSILON = 0.1
GRANT_EPSILON = 1e5
DATASET_CAP = 1e6
SEED = 20261121
BASELINE_COMMIT = "445732b"
BASELINE_DIR = Path("/tmp/bench-baseline")
PROCESSES = (1, 2, 4)
#: Every benchmark server: development mode with release padding off (services/timing.py).
SERVER_ENV = {"DPMINE_ENVIRONMENT": "development", "DPMINE_TIMING_PADDING": "false"}
#: The servers of benchmarks 3 and 4: test mode, where the test-only ``test.spin`` job exists
#: (operations/testing.py), with release padding off as above.
JOB_SERVER_ENV = {"DPMINE_ENVIRONMENT": "test", "DPMINE_TIMING_PADDING": "false"}
#: What one run can measure (``--sections``): benchmarks 1 to 5 below.
SECTIONS = ("quality", "count", "long-job", "jobs", "topk")
SPIN_OPERATION = "test.spin"
#: The synchronous route of ``test.spin`` (submits the job, answers with its release).
SPIN_PATH = "test/spin"
#: Benchmark 3: compute_quality latency target while a long job runs (issue: ≤ 2x idle).
LONG_JOB_TARGET = 2.0
#: Local worker processes (PostgreSQL) or pool size (SQLite) of benchmark 3: the default.
LONG_JOB_WORKERS = 2
#: Benchmark 4: public seconds of each measured job, worker counts, client threads.
JOB_SPIN_SECONDS = (0.2, 0.0)
JOB_WORKER_COUNTS = (1, 2)
JOB_CLIENTS = 4
#: Seconds of the warm-up jobs (one per worker, submitted together so that each takes one).
WARM_SPIN_SECONDS = 0.5
#: Benchmark 5: top-K itemsets at the one-sided EM scale (bench_itemsets' kernel and pyfim).
TOPK_DATASETS = ("mushroom", "chess")
TOPK_K = 100
TOPK_EPS_HALF = 0.7

BoolArray = npt.NDArray[np.bool_]
WordArray = npt.NDArray[np.uint64]


@dataclass(frozen=True)
class Config:
    """What one run measures."""

    backends: tuple[Backend, ...]
    requests: int
    count_calls: int
    kernel_repeats: int
    numpy_repeats: int
    out: Path
    mammals_dir: Path
    seed: int
    wait_quiet: float
    baseline: str | None
    baseline_dir: Path
    processes: tuple[int, ...]
    sections: tuple[str, ...]
    long_job_calls: int
    long_job_seconds: float
    jobs_per_setting: dict[float, int]
    topk_runs: int
    topk_rounds: int
    #: Rows of benchmark 2's synthetic table.
    bits_rows: int = BITS_ROWS
    #: Benchmark 5's FIMI files (None: mushroom and chess of the shared data).
    topk_specs: tuple[bench_itemsets.FimiDataset, ...] | None = None
    #: ``--smoke``: tiny synthetic and bundled data, SQLite only, no baseline (the test suite's).
    smoke: bool = False
    #: Benchmark 4's worker counts (``--smoke``: 2 only, one server fewer; the same code path).
    job_worker_counts: tuple[int, ...] = JOB_WORKER_COUNTS
    #: Seconds of each warm-up job (``--smoke``: shorter; the pool still starts every worker).
    warm_spin_seconds: float = WARM_SPIN_SECONDS
    #: ``--smoke``: benchmark 4 runs on benchmark 3's server where their settings agree (the
    #: pool of 2; one server start fewer) instead of a fresh one (:class:`JobServers`).
    share_job_servers: bool = False


@dataclass(frozen=True)
class Code:
    """The code a server runs: this tree, or a baseline worktree put first on PYTHONPATH."""

    label: str
    root: Path
    pythonpath: str | None

    def env(self) -> dict[str, str]:
        """Environment of its server processes."""
        extra = dict(SERVER_ENV)
        if self.pythonpath is not None:
            extra["PYTHONPATH"] = self.pythonpath
        return extra


@dataclass(frozen=True)
class QualityResult:
    """One (code, backend, processes, concurrency) setting of benchmark 1."""

    code: str
    backend: str
    processes: int
    clients: int
    requests: int
    errors: int
    seconds: float
    requests_per_s: float
    p50_ms: float
    p99_ms: float
    mean_ms: float
    first_error: str | None


@dataclass(frozen=True)
class EngineCountResult:
    """``count.noisy`` over HTTP on one backend (benchmark 2a)."""

    backend: str
    calls: int
    median_ms: float
    min_ms: float
    p90_ms: float


@dataclass(frozen=True)
class KernelCountResult:
    """The in-process timings of benchmark 2 (b: kernel, c: numpy, plus exact evaluation)."""

    rows: int
    predicate: str
    exact_count_matches: bool
    kernel_median_us: float
    evaluate_median_us: float
    noise_median_us: float
    numpy_median_us: float


# -- data ----------------------------------------------------------------------------------------


def mammals_metadata(mammals_dir: Path) -> DatasetMetadata:
    """Proposed (owner-side) metadata of the mammals pair: 124 Boolean left, numeric right."""
    source = CsvPairSource(left="left.csv", right="right.csv", id_column="id")
    return owner_confirmed(propose_metadata(source, kind="views", base_dir=mammals_dir))


def random_redescription(metadata: DatasetMetadata, rng: np.random.Generator) -> tuple[Expr, Expr]:
    """A species conjunction (1-3 literals) and a climate range (1-2 literals), drawn from the
    public metadata only (names and public ranges), as an analyst would."""
    species = [a.name for a in metadata.attributes if a.view == "left" and a.type == "boolean"]
    climate = [
        a for a in metadata.attributes if a.view == "right" and isinstance(a, NumericAttribute)
    ]
    chosen = rng.choice(len(species), size=int(rng.integers(1, 4)), replace=False)
    left_terms: list[Expr] = [BoolLiteral(attribute=species[int(i)]) for i in chosen]
    right_terms: list[Expr] = []
    for index in rng.choice(len(climate), size=int(rng.integers(1, 3)), replace=False):
        attribute = climate[int(index)]
        a, b = sorted(rng.uniform(attribute.lo, attribute.hi, size=2).round(1).tolist())
        right_terms.append(NumLiteral(attribute=attribute.name, lower=a, upper=b))
    left = left_terms[0] if len(left_terms) == 1 else And(terms=left_terms)
    right = right_terms[0] if len(right_terms) == 1 else And(terms=right_terms)
    return left, right


def register_mammals(
    owner: dpmine.Connection, metadata: DatasetMetadata, mammals_dir: Path
) -> None:
    """Upload the mammals pair as ``MAMMALS_ID`` (a CSV pair joined on ``id``)."""
    register_files(
        owner,
        dataset_id=MAMMALS_ID,
        name="European mammals (species vs climate)",
        metadata=metadata,
        source=CsvPairSource(left="left.csv", right="right.csv", id_column="id"),
        files={"left": mammals_dir / "left.csv", "right": mammals_dir / "right.csv"},
        epsilon_cap=DATASET_CAP,
    )


def bits_columns(rows: int, seed: int) -> list[BoolArray]:
    """The Boolean columns b1..b4 of the synthetic table (fixed seed)."""
    rng = np.random.default_rng(seed)
    return [rng.random(rows) < density for density in BITS_DENSITIES]


def write_bits_csv(columns: list[BoolArray], path: Path) -> None:
    """Write the columns as a gzip CSV with header b1,...: one digit per cell, built in numpy."""
    n_columns = len(columns)
    line = np.empty((columns[0].shape[0], 2 * n_columns), dtype=np.uint8)
    for position, column in enumerate(columns):
        line[:, 2 * position] = column.astype(np.uint8) + ord("0")
        line[:, 2 * position + 1] = ord(",")
    line[:, -1] = ord("\n")
    header = ",".join(f"b{i + 1}" for i in range(n_columns)) + "\n"
    with gzip.open(path, "wb", compresslevel=6) as handle:
        handle.write(header.encode())
        handle.write(line.tobytes())


def bits_metadata(n_columns: int) -> DatasetMetadata:
    """Public metadata of the synthetic table (n_max is a public bound, not the row count)."""
    return DatasetMetadata(
        kind="table",
        n_max=2 * BITS_ROWS,
        attributes=[BooleanAttribute(name=f"b{i + 1}") for i in range(n_columns)],
    )


def packed_words(mask: BoolArray) -> WordArray:
    """Row r as bit r % 64 of word r // 64 (little-endian), zero-padded to whole words."""
    packed = np.packbits(mask, bitorder="little")
    padded = np.zeros(-(-mask.shape[0] // 64) * 8, dtype=np.uint8)
    padded[: packed.shape[0]] = packed
    return padded.view("<u8").astype(np.uint64)


# -- benchmark 1: red.compute_quality under concurrency ------------------------------------------


@dataclass
class _ClientRun:
    latencies: list[float]
    errors: list[str]
    started: float = 0.0
    finished: float = 0.0


def _client_worker(
    handle: dpmine.DatasetHandle,
    queries: list[tuple[Expr, Expr]],
    barrier: threading.Barrier,
    run: _ClientRun,
) -> None:
    barrier.wait()
    run.started = time.perf_counter()
    for left, right in queries:
        start = time.perf_counter()
        try:
            handle.quality(left, right, epsilon=EPSILON)
        except Exception as error:  # recorded and reported; a benchmark must finish its table
            run.errors.append(f"{type(error).__name__}: {error}")
        run.latencies.append(time.perf_counter() - start)
    run.finished = time.perf_counter()


def run_quality(
    servers: list[ServerHandle],
    code: str,
    backend: str,
    clients: int,
    keys: list[str],
    *,
    queries: list[tuple[Expr, Expr]],
) -> QualityResult:
    """``len(queries)`` quality requests spread over ``clients`` threads, each its own client;
    client i talks to server i mod len(servers)."""
    connections = [servers[i % len(servers)].connect(keys[i]) for i in range(clients)]
    try:
        handles = [connection.dataset(MAMMALS_ID) for connection in connections]
        for handle in handles:  # warm-up: open the keep-alive connection, not measured
            handle.quality(*queries[0], epsilon=EPSILON)
        runs = [_ClientRun(latencies=[], errors=[]) for _ in range(clients)]
        barrier = threading.Barrier(clients)
        threads = [
            threading.Thread(
                target=_client_worker,
                args=(handles[i], queries[i::clients], barrier, runs[i]),
                name=f"client-{i}",
                daemon=True,
            )
            for i in range(clients)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        for connection in connections:
            connection.close()
    latencies = [value for run in runs for value in run.latencies]
    errors = [message for run in runs for message in run.errors]
    seconds = max(run.finished for run in runs) - min(run.started for run in runs)
    return QualityResult(
        code=code,
        backend=backend,
        processes=len(servers),
        clients=clients,
        requests=len(latencies),
        errors=len(errors),
        seconds=round(seconds, 3),
        requests_per_s=round(len(latencies) / seconds, 1),
        p50_ms=round(percentile(latencies, 50) * 1e3, 2),
        p99_ms=round(percentile(latencies, 99) * 1e3, 2),
        mean_ms=round(float(np.mean(latencies)) * 1e3, 2),
        first_error=errors[0] if errors else None,
    )


# -- benchmark 2: count.noisy over 10^6 rows -----------------------------------------------------


def run_engine_count(server: ServerHandle, backend: str, key: str, calls: int) -> EngineCountResult:
    """Median of ``calls`` HTTP ``count.noisy`` calls after warm-up (the first loads the data)."""
    with server.connect(key) as connection:
        handle = connection.dataset(BITS_ID)
        samples = time_calls(
            lambda: handle.count(COUNT_PREDICATE, epsilon=EPSILON), repeats=calls, warmup=3
        )
    return EngineCountResult(
        backend=backend,
        calls=calls,
        median_ms=round(median(samples) * 1e3, 3),
        min_ms=round(min(samples) * 1e3, 3),
        p90_ms=round(percentile(samples, 90) * 1e3, 3),
    )


def run_kernel_count(
    csv_path: Path, columns: list[BoolArray], kernel_repeats: int, numpy_repeats: int
) -> KernelCountResult:
    """The server kernel ``noisy_count`` on a loaded ColumnStore vs numpy on packed words."""
    metadata = bits_metadata(len(columns))
    store, _report = load_store(metadata, CsvSource(path=csv_path.name), base_dir=csv_path.parent)
    predicate = dpmine.parse_query(COUNT_PREDICATE)
    words1, words2 = packed_words(columns[0]), packed_words(columns[1])

    def numpy_count() -> int:
        return int(np.bitwise_count(np.bitwise_and(words1, words2)).sum())

    exact = int(np.count_nonzero(columns[0] & columns[1]))
    matches = numpy_count() == exact == store.evaluate(predicate).count()
    kernel = time_calls(
        lambda: noisy_count(store, predicate=predicate, epsilon=EPSILON),
        repeats=kernel_repeats,
        inner=20,
        warmup=20,
    )
    evaluate = time_calls(
        lambda: store.evaluate(predicate).count(), repeats=kernel_repeats, inner=20, warmup=20
    )
    noise = time_calls(
        lambda: discrete_laplace([exact], epsilon=EPSILON, sensitivity=1),
        repeats=kernel_repeats,
        inner=20,
        warmup=20,
    )
    plain = time_calls(numpy_count, repeats=numpy_repeats, inner=50, warmup=50)
    return KernelCountResult(
        rows=len(columns[0]),
        predicate=COUNT_PREDICATE,
        exact_count_matches=matches,
        kernel_median_us=round(median(kernel) * 1e6, 2),
        evaluate_median_us=round(median(evaluate) * 1e6, 2),
        noise_median_us=round(median(noise) * 1e6, 2),
        numpy_median_us=round(median(plain) * 1e6, 2),
    )


# -- benchmarks 3 and 4: jobs in worker processes ------------------------------------------------


@dataclass(frozen=True)
class LongJobResult:
    """Benchmark 3 on one backend: sequential quality calls idle, then while a job runs."""

    backend: str
    workers: str
    spin_seconds: float
    calls: int
    idle_p50_ms: float
    idle_p99_ms: float
    loaded_p50_ms: float
    loaded_p99_ms: float
    p50_ratio: float
    p99_ratio: float
    window_s: float
    job_status_before: str
    job_status_after: str
    job_running_throughout: bool
    job_final_status: str
    errors: int
    first_error: str | None


@dataclass(frozen=True)
class JobsResult:
    """Benchmark 4: ``jobs`` jobs of ``spin_seconds`` each on ``workers`` workers."""

    backend: str
    deployment: str
    workers: int
    spin_seconds: float
    jobs: int
    clients: int
    done: int
    seconds: float
    jobs_per_s: float
    ideal_jobs_per_s: float | None
    p50_ms: float
    p99_ms: float
    first_error: str | None


def spin_request(seconds: float) -> SpinCountRequest:
    """A ``test.spin`` request: ``seconds`` of GIL-holding Python, then a noisy row count."""
    return SpinCountRequest(epsilon=EPSILON, seconds=seconds)


@contextlib.contextmanager
def job_server(
    backend: Backend,
    cluster: PostgresCluster | None,
    mammals: DatasetMetadata,
    config: Config,
    *,
    name: str,
    extra_env: dict[str, str],
) -> Iterator[tuple[ServerHandle, str, Path]]:
    """A test-mode server on a fresh database with the mammals data and one analyst: yields the
    server, the analyst's key and the work folder."""
    with tempfile.TemporaryDirectory(prefix=f"dpmine-bench-{name}-") as scratch:
        work = Path(scratch)
        if backend == "sqlite":
            url = f"sqlite:///{work / 'dpmine.sqlite3'}"
        else:
            if cluster is None:
                raise RuntimeError("the postgres backend needs a cluster")
            url = cluster.create_database(name.replace("-", "_"))
        with running_server(url, work, extra_env=JOB_SERVER_ENV | extra_env) as server:
            try:
                with server.connect() as owner:
                    register_mammals(owner, mammals, config.mammals_dir)
                keys = add_analysts(server, ["jobs-analyst"], {MAMMALS_ID: GRANT_EPSILON})
                yield server, keys["jobs-analyst"], work
            except BaseException:
                print(f"server log tail ({name}):\n{server.log_tail()}", file=sys.stderr)
                raise


class JobServers(KeptOpen[tuple[Backend, int], tuple[ServerHandle, str, Path]]):
    """The job servers of benchmarks 3 and 4 (:func:`job_server`): a fresh one per use, or, with
    ``keep`` (``--smoke``), each left running in ``keep`` after its first use and used again by
    any later one with the same backend and ``DPMINE_JOB_WORKERS``."""

    def server(
        self,
        backend: Backend,
        cluster: PostgresCluster | None,
        mammals: DatasetMetadata,
        config: Config,
        *,
        name: str,
        workers: int,
    ) -> contextlib.AbstractContextManager[tuple[ServerHandle, str, Path]]:
        """A job server with ``workers`` job workers: the server, the analyst's key and the
        work folder."""
        start = functools.partial(
            job_server,
            backend,
            cluster,
            mammals,
            config,
            name=name,
            extra_env={"DPMINE_JOB_WORKERS": str(workers)},
        )
        return self.open((backend, workers), start)


def warm_workers(connection: dpmine.Connection, workers: int, seconds: float) -> None:
    """One short job per worker, submitted together: each worker (process spawned, dataset
    loaded) has run a job before anything is measured."""
    handle = connection.dataset(MAMMALS_ID)
    submitted = [handle.submit(SPIN_OPERATION, spin_request(seconds)) for _ in range(workers)]
    for info in submitted:
        final = connection.wait_for_job(info.id, poll_seconds=0.05, timeout=300.0)
        if final.status != "done":
            raise RuntimeError(f"warm-up job {final.id} ended {final.status}: {final.message}")


def quality_latencies(
    handle: dpmine.DatasetHandle, queries: list[tuple[Expr, Expr]], errors: list[str]
) -> list[float]:
    """Wall seconds of sequential quality calls, one per query (failures go to ``errors``)."""
    latencies: list[float] = []
    for left, right in queries:
        start = time.perf_counter()
        try:
            handle.quality(left, right, epsilon=EPSILON)
        except Exception as error:  # recorded and reported; a benchmark must finish its table
            errors.append(f"{type(error).__name__}: {error}")
        latencies.append(time.perf_counter() - start)
    return latencies


def wait_until_claimed(connection: dpmine.Connection, job_id: str, timeout: float) -> str:
    """Poll until the job has left ``queued``; its status then."""
    deadline = time.monotonic() + timeout
    while True:
        status = connection.job(job_id).status
        if status != "queued" or time.monotonic() > deadline:
            return status
        time.sleep(0.02)


def run_long_job(
    server: ServerHandle,
    key: str,
    *,
    backend: str,
    workers: str,
    queries: list[tuple[Expr, Expr]],
    config: Config,
) -> LongJobResult:
    """``long_job_calls`` sequential quality calls idle, then the same calls while one
    ``test.spin`` job of ``long_job_seconds`` runs in a worker; the job's status is read just
    before the first and just after the last loaded call (a job never returns to running)."""
    chosen = queries[: config.long_job_calls]
    errors: list[str] = []
    with server.connect(key) as connection:
        handle = connection.dataset(MAMMALS_ID)
        for left, right in chosen[:5]:  # warm-up: dataset loaded, keep-alive connection open
            handle.quality(left, right, epsilon=EPSILON)
        warm_workers(connection, LONG_JOB_WORKERS, config.warm_spin_seconds)
        idle = quality_latencies(handle, chosen, errors)
        job = handle.submit(SPIN_OPERATION, spin_request(config.long_job_seconds))
        before = wait_until_claimed(connection, job.id, timeout=120.0)
        start = time.perf_counter()
        loaded = quality_latencies(handle, chosen, errors)
        window = time.perf_counter() - start
        after = connection.job(job.id).status
        final = connection.wait_for_job(
            job.id, poll_seconds=0.1, timeout=config.long_job_seconds + 300.0
        )
    idle_p50, idle_p99 = percentile(idle, 50), percentile(idle, 99)
    loaded_p50, loaded_p99 = percentile(loaded, 50), percentile(loaded, 99)
    return LongJobResult(
        backend=backend,
        workers=workers,
        spin_seconds=config.long_job_seconds,
        calls=len(chosen),
        idle_p50_ms=round(idle_p50 * 1e3, 2),
        idle_p99_ms=round(idle_p99 * 1e3, 2),
        loaded_p50_ms=round(loaded_p50 * 1e3, 2),
        loaded_p99_ms=round(loaded_p99 * 1e3, 2),
        p50_ratio=round(loaded_p50 / idle_p50, 2),
        p99_ratio=round(loaded_p99 / idle_p99, 2),
        window_s=round(window, 3),
        job_status_before=before,
        job_status_after=after,
        job_running_throughout=before == "running" and after == "running",
        job_final_status=final.status,
        errors=len(errors),
        first_error=errors[0] if errors else None,
    )


def bench_long_jobs(
    config: Config,
    cluster: PostgresCluster | None,
    mammals: DatasetMetadata,
    queries: list[tuple[Expr, Expr]],
    servers: JobServers,
) -> list[LongJobResult]:
    """Benchmark 3 on every backend: the embedded pool on SQLite, local workers on PostgreSQL
    (both the default ``DPMINE_JOB_WORKERS`` = 2)."""
    results: list[LongJobResult] = []
    for backend in config.backends:
        workers = (
            f"embedded pool of {LONG_JOB_WORKERS}"
            if backend == "sqlite"
            else f"{LONG_JOB_WORKERS} local worker processes"
        )
        print(f"[long job] {backend}: {workers} ...", flush=True)
        with servers.server(
            backend, cluster, mammals, config, name=f"longjob-{backend}", workers=LONG_JOB_WORKERS
        ) as (server, key, _work):
            result = run_long_job(
                server, key, backend=backend, workers=workers, queries=queries, config=config
            )
        running = "running throughout" if result.job_running_throughout else "NOT running"
        print(
            f"  {backend:8} idle p50 {result.idle_p50_ms:7.2f} p99 {result.idle_p99_ms:7.2f} ms; "
            f"with a {result.spin_seconds:g} s job p50 {result.loaded_p50_ms:7.2f} "
            f"p99 {result.loaded_p99_ms:7.2f} ms ({result.p50_ratio:.2f}x / "
            f"{result.p99_ratio:.2f}x); job {running} ({result.job_status_before} → "
            f"{result.job_status_after}, window {result.window_s:.2f} s)",
            flush=True,
        )
        results.append(result)
    return results


@dataclass
class _JobClientRun:
    latencies: list[float]
    errors: list[str]
    started: float = 0.0
    finished: float = 0.0


def _job_client(
    connection: dpmine.Connection,
    count: int,
    spin_seconds: float,
    barrier: threading.Barrier,
    run: _JobClientRun,
) -> None:
    path = f"/v1/datasets/{MAMMALS_ID}/{SPIN_PATH}"
    barrier.wait()
    run.started = time.perf_counter()
    for _ in range(count):
        start = time.perf_counter()
        try:
            connection.call(path, spin_request(spin_seconds), NoisyCountResponse)
        except Exception as error:  # recorded and reported; a benchmark must finish its table
            run.errors.append(f"{type(error).__name__}: {error}")
        else:
            run.latencies.append(time.perf_counter() - start)
    run.finished = time.perf_counter()


def run_jobs(
    server: ServerHandle,
    key: str,
    *,
    backend: str,
    deployment: str,
    workers: int,
    spin_seconds: float,
    jobs: int,
) -> JobsResult:
    """``jobs`` jobs from ``JOB_CLIENTS`` threads (each its own connection), each thread one
    synchronous job call after another: the API process submits the job to the queue and
    answers when the queue reports it settled (no client polling), so ``JOB_CLIENTS`` jobs are
    in flight at any time. Timed on the client: the server's job timestamps are truncated to
    the second (a timing side channel), too coarse here."""
    connections = [server.connect(key) for _ in range(JOB_CLIENTS)]
    runs = [_JobClientRun(latencies=[], errors=[]) for _ in range(JOB_CLIENTS)]
    try:
        barrier = threading.Barrier(JOB_CLIENTS)
        threads = [
            threading.Thread(
                target=_job_client,
                args=(
                    connections[i],
                    jobs // JOB_CLIENTS + (1 if i < jobs % JOB_CLIENTS else 0),
                    spin_seconds,
                    barrier,
                    runs[i],
                ),
                name=f"jobs-client-{i}",
                daemon=True,
            )
            for i in range(JOB_CLIENTS)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        for connection in connections:
            connection.close()
    latencies = [value for run in runs for value in run.latencies] or [math.nan]
    errors = [message for run in runs for message in run.errors]
    done = sum(len(run.latencies) for run in runs)
    seconds = max(run.finished for run in runs) - min(run.started for run in runs)
    return JobsResult(
        backend=backend,
        deployment=deployment,
        workers=workers,
        spin_seconds=spin_seconds,
        jobs=jobs,
        clients=JOB_CLIENTS,
        done=done,
        seconds=round(seconds, 3),
        jobs_per_s=round(done / seconds, 2),
        ideal_jobs_per_s=round(workers / spin_seconds, 2) if spin_seconds > 0 else None,
        p50_ms=round(percentile(latencies, 50) * 1e3, 1),
        p99_ms=round(percentile(latencies, 99) * 1e3, 1),
        first_error=errors[0] if errors else None,
    )


def _measure_jobs(
    server: ServerHandle,
    key: str,
    config: Config,
    *,
    backend: str,
    deployment: str,
    workers: int,
) -> list[JobsResult]:
    """Warm the workers, then every job length of ``JOB_SPIN_SECONDS``."""
    with server.connect(key) as connection:
        warm_workers(connection, workers, config.warm_spin_seconds)
    results: list[JobsResult] = []
    for spin_seconds in JOB_SPIN_SECONDS:
        result = run_jobs(
            server,
            key,
            backend=backend,
            deployment=deployment,
            workers=workers,
            spin_seconds=spin_seconds,
            jobs=config.jobs_per_setting[spin_seconds],
        )
        print(
            f"  {backend:8} workers={workers} spin={spin_seconds:g} s: {result.done}/"
            f"{result.jobs} done in {result.seconds:.2f} s = {result.jobs_per_s:7.2f} jobs/s; "
            f"latency p50 {result.p50_ms:8.1f} ms p99 {result.p99_ms:8.1f} ms",
            flush=True,
        )
        results.append(result)
    return results


def bench_jobs(
    config: Config, cluster: PostgresCluster | None, mammals: DatasetMetadata, servers: JobServers
) -> list[JobsResult]:
    """Benchmark 4: SQLite's embedded pool of 1 and 2 processes (a fresh server each, from
    ``servers``: under ``--smoke``, benchmark 3's for the pool of 2); PostgreSQL: one API
    process without workers (``DPMINE_JOB_WORKERS=0``) and 1, then 2 separate ``python -m
    dpmine_server worker`` processes."""
    results: list[JobsResult] = []
    for backend in config.backends:
        if backend == "sqlite":
            for workers in config.job_worker_counts:
                print(f"[jobs] sqlite: embedded pool of {workers} ...", flush=True)
                with servers.server(
                    backend,
                    cluster,
                    mammals,
                    config,
                    name=f"jobs-sqlite-{workers}",
                    workers=workers,
                ) as (server, key, _work):
                    results += _measure_jobs(
                        server,
                        key,
                        config,
                        backend=backend,
                        deployment="embedded pool",
                        workers=workers,
                    )
            continue
        print("[jobs] postgres: API process with DPMINE_JOB_WORKERS=0 ...", flush=True)
        with (
            job_server(
                backend,
                cluster,
                mammals,
                config,
                name="jobs-postgres",
                extra_env={"DPMINE_JOB_WORKERS": "0"},
            ) as (server, key, work),
            contextlib.ExitStack() as stack,
        ):
            started: list[WorkerHandle] = []
            for workers in config.job_worker_counts:
                try:
                    while len(started) < workers:
                        started.append(
                            stack.enter_context(
                                running_worker(server, work, name=f"worker-{len(started)}")
                            )
                        )
                    results += _measure_jobs(
                        server,
                        key,
                        config,
                        backend=backend,
                        deployment="worker processes",
                        workers=workers,
                    )
                except BaseException:
                    for worker in started:
                        print(f"worker log tail:\n{worker.log_tail()}", file=sys.stderr)
                    raise
    return results


# -- benchmark 5: top-K itemsets at the one-sided scale -----------------------------------------


@dataclass(frozen=True)
class TopKResult:
    """One (dataset, method) at K = ``TOPK_K``, ℓ = ``bench_itemsets.SPEED_LENGTH``."""

    dataset: str
    method: str
    k: int
    length: int
    eps_half: float
    selection_scale: float
    runs: int
    fnr_mean: float
    fnr_sd: float
    fnr_runs: list[float]
    rounds: int
    kernel_median_ms: float
    pyfim_median_ms: dict[str, float]
    best_pyfim: str
    ratio: float
    pyfim_exact: bool


def bench_topk(config: Config) -> tuple[list[TopKResult], list[str]]:
    """FNR (seeded runs of the server kernel, ``bench_itemsets.utility_cell``) and speed (the
    kernel with a fresh secure generator, as the server runs it, interleaved with pyfim's
    exact top K, ``bench_itemsets.pyfim_top_k``) on mushroom and chess; returns the results
    and the datasets skipped."""
    results: list[TopKResult] = []
    skipped: list[str] = []
    setting = bench_itemsets.Setting(TOPK_EPS_HALF, TOPK_K, bench_itemsets.SPEED_LENGTH)
    specs = config.topk_specs or [
        spec for spec in bench_itemsets.DATASETS if spec.name in TOPK_DATASETS
    ]
    for number, spec in enumerate(specs):
        if not spec.path.is_file():
            message = f"{spec.name}: {spec.path} not found, skipped"
            print(f"[top-K] {message}", flush=True)
            skipped.append(message)
            continue
        print(f"[top-K] {spec.name}: K={setting.k} ℓ={setting.length} ε/2={setting.eps_half}")
        data = bench_itemsets.load_true_data(spec)
        side = bench_itemsets.load_server_side(spec)
        truth = bench_itemsets.exact_top_k(data.transactions, k=setting.k, length=setting.length)
        gc.collect()
        gc.freeze()  # as bench_itemsets does: the harness's copy stays out of the kernel's GCs
        try:
            cells = {
                method: bench_itemsets.utility_cell(
                    data,
                    side,
                    truth,
                    method,
                    setting,
                    runs=config.topk_runs,
                    seed=config.seed + 1000 * (2 * number + index),
                )
                for index, method in enumerate(bench_itemsets.METHODS)
            }
            seconds: dict[str, list[float]] = {}
            exact = True
            for _ in range(config.topk_rounds):
                for method in bench_itemsets.METHODS:
                    elapsed, _released = bench_itemsets.timed(
                        functools.partial(bench_itemsets.run_kernel_secure, side, method, setting)
                    )
                    seconds.setdefault(method, []).append(elapsed)
                for miner in bench_itemsets.PYFIM_MINERS if bench_itemsets.fim else ():
                    elapsed, found = bench_itemsets.timed(
                        functools.partial(
                            bench_itemsets.pyfim_top_k,
                            data.transactions,
                            k=setting.k,
                            length=setting.length,
                            miner=miner,
                        )
                    )
                    seconds.setdefault(f"pyfim.{miner}", []).append(elapsed)
                    exact = exact and bench_itemsets.same_top_k(found, truth)
        finally:
            gc.unfreeze()
        pyfim = {
            f"pyfim.{miner}": median(seconds[f"pyfim.{miner}"])
            for miner in bench_itemsets.PYFIM_MINERS
            if f"pyfim.{miner}" in seconds
        }
        if not pyfim:
            print(f"  non-private baseline skipped: {bench_itemsets.PYFIM_MISSING}", flush=True)
        best = min(pyfim, key=lambda name: pyfim[name], default="none")
        for method, cell in cells.items():
            kernel = median(seconds[method])
            result = TopKResult(
                dataset=spec.name,
                method=method,
                k=setting.k,
                length=setting.length,
                eps_half=setting.eps_half,
                selection_scale=round(
                    selection_scale(method, k=setting.k, epsilon_selection=setting.eps_half), 2
                ),
                runs=cell.runs,
                fnr_mean=round(cell.fnr_mean, 4),
                fnr_sd=round(cell.fnr_sd, 4),
                fnr_runs=cell.fnr_runs,
                rounds=config.topk_rounds,
                kernel_median_ms=round(kernel * 1e3, 2),
                pyfim_median_ms={name: round(value * 1e3, 2) for name, value in pyfim.items()},
                best_pyfim=best,
                ratio=round(kernel / pyfim[best], 2) if pyfim else math.nan,
                pyfim_exact=exact,
            )
            print(
                f"  {spec.name:9} {method:7} FNR {result.fnr_mean:.3f} ± {result.fnr_sd:.3f} "
                f"({result.runs} runs); kernel {result.kernel_median_ms:7.1f} ms, "
                f"{best} {result.pyfim_median_ms.get(best, math.nan):7.1f} ms = "
                f"{result.ratio:.2f}x",
                flush=True,
            )
            results.append(result)
    return results, skipped


# -- one backend, one code version ---------------------------------------------------------------


def baseline_code(commit: str, folder: Path) -> Code:
    """A detached worktree of ``commit`` at ``folder`` (made if missing; the working tree of
    this checkout is not touched)."""
    if not (folder / "server" / "dpmine_server").is_dir():
        subprocess.run(
            ["git", "-C", str(REPO_ROOT), "worktree", "add", "--detach", str(folder), commit],
            check=True,
            capture_output=True,
        )
    head = subprocess.run(
        ["git", "-C", str(folder), "rev-parse", "--short", "HEAD"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    wanted = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "rev-parse", "--short", commit],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    if head != wanted:
        raise RuntimeError(f"{folder} is at {head}, not {wanted}; remove it or pass --baseline-dir")
    pythonpath = f"{folder / 'server'}:{folder / 'client'}"
    return Code(label=f"before ({head})", root=folder, pythonpath=pythonpath)


def verify_server_code(server: ServerHandle, code: Code) -> str:
    """Where the server process imports ``dpmine_server`` from: its own environment (read from
    /proc) and working directory, asked to the same interpreter. Raises if it is not
    ``code``'s tree."""
    raw = Path(f"/proc/{server.process.pid}/environ").read_bytes()
    env = dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)
    cwd = os.readlink(f"/proc/{server.process.pid}/cwd")
    where = subprocess.run(
        [sys.executable, "-c", "import dpmine_server, dpmine; print(dpmine_server.__file__)"],
        env=env,
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    if not Path(where).resolve().is_relative_to(code.root.resolve()):
        raise RuntimeError(f"the {code.label} server imports {where}, not {code.root}")
    if env.get("DPMINE_TIMING_PADDING") != "false":
        raise RuntimeError("the benchmark server runs with release padding on")
    return where


@contextlib.contextmanager
def api_processes(
    database_url: str, work_dir: Path, code: Code, secret: str, index: int
) -> Iterator[ServerHandle]:
    """API process number ``index`` on the shared database and data folder."""
    extra = code.env() | {
        "DPMINE_SECRET_KEY": secret,
        "DPMINE_DATA_DIR": str(work_dir / "shared-data"),
    }
    process_dir = work_dir / f"process-{index}"
    process_dir.mkdir(parents=True, exist_ok=True)
    with running_server(database_url, process_dir, extra_env=extra) as server:
        server_file = verify_server_code(server, code)
        if index == 0:
            print(f"  {code.label}: server imports {server_file}", flush=True)
        yield server


def bench_backend(
    backend: Backend,
    code: Code,
    *,
    database_url: str,
    work: Path,
    config: Config,
    mammals: DatasetMetadata,
    queries: list[tuple[Expr, Expr]],
    bits_csv: Path | None,
    quality: bool = True,
) -> tuple[list[QualityResult], EngineCountResult | None]:
    """Start ``code``'s server on ``database_url``, register the datasets, run benchmark 1 (and
    on PostgreSQL with more API processes) when ``quality``, and 2a when ``bits_csv`` is
    given."""
    secret = secrets.token_urlsafe(32)
    results: list[QualityResult] = []
    engine: EngineCountResult | None = None
    with contextlib.ExitStack() as stack:
        first = stack.enter_context(api_processes(database_url, work, code, secret, 0))
        servers = [first]
        try:
            with first.connect() as owner:
                register_mammals(owner, mammals, config.mammals_dir)
                if bits_csv is not None:
                    register_files(
                        owner,
                        dataset_id=BITS_ID,
                        metadata=bits_metadata(len(BITS_DENSITIES)),
                        source=CsvSource(path=bits_csv.name),
                        files={"path": bits_csv},
                        epsilon_cap=DATASET_CAP,
                    )
            names = [f"analyst-{i:02d}" for i in range(max(CONCURRENCY))]
            grants = {MAMMALS_ID: GRANT_EPSILON}
            if bits_csv is not None:
                grants[BITS_ID] = GRANT_EPSILON
            keys = add_analysts(first, names, grants)
            key_list = [keys[name] for name in names]

            def measure(clients: int) -> None:
                result = run_quality(
                    servers, code.label, backend, clients, key_list, queries=queries
                )
                print(
                    f"  {code.label:16} {backend:8} processes={len(servers)} "
                    f"clients={clients:2}  {result.requests_per_s:8.1f} req/s  "
                    f"p50 {result.p50_ms:8.2f} ms  p99 {result.p99_ms:8.2f} ms  "
                    f"errors {result.errors}",
                    flush=True,
                )
                results.append(result)

            if quality:
                for clients in CONCURRENCY:
                    measure(clients)
            if bits_csv is not None:
                engine = run_engine_count(first, backend, key_list[0], config.count_calls)
                print(
                    f"  {backend:8} count.noisy over HTTP: median {engine.median_ms:.3f} ms",
                    flush=True,
                )
            if quality and backend == "postgres":
                for processes in config.processes:
                    if processes <= 1:
                        continue
                    while len(servers) < processes:
                        servers.append(
                            stack.enter_context(
                                api_processes(database_url, work, code, secret, len(servers))
                            )
                        )
                    measure(max(CONCURRENCY))
        except BaseException:
            for server in servers:
                print(
                    f"server log tail ({backend}, {code.label}):\n{server.log_tail()}",
                    file=sys.stderr,
                )
            raise
    return results, engine


def bench_all(
    config: Config,
    codes: list[Code],
    mammals: DatasetMetadata,
    queries: list[tuple[Expr, Expr]],
    bits_csv: Path | None,
    *,
    cluster: PostgresCluster | None,
) -> tuple[list[QualityResult], list[EngineCountResult]]:
    """Every backend, every code version (the baseline first), each on a fresh database:
    benchmark 1 if selected, 2a if ``bits_csv`` is given."""
    quality: list[QualityResult] = []
    engines: list[EngineCountResult] = []
    with contextlib.ExitStack() as stack:
        for backend in config.backends:
            for number, code in enumerate(codes):
                print(f"[{backend}] {code.label}: starting, registering datasets ...", flush=True)
                work = Path(
                    stack.enter_context(
                        tempfile.TemporaryDirectory(prefix=f"dpmine-bench-{backend}-")
                    )
                )
                if backend == "sqlite":
                    url = f"sqlite:///{work / 'dpmine.sqlite3'}"
                else:
                    assert cluster is not None
                    url = cluster.create_database(f"dpmine{number}")
                is_current = code.pythonpath is None
                results, engine = bench_backend(
                    backend,
                    code,
                    database_url=url,
                    work=work,
                    config=config,
                    mammals=mammals,
                    queries=queries,
                    bits_csv=bits_csv if is_current else None,
                    quality="quality" in config.sections,
                )
                quality += results
                if engine is not None:
                    engines.append(engine)
    return quality, engines


# -- reporting -----------------------------------------------------------------------------------


def comparison(quality: list[QualityResult]) -> list[str]:
    """Before/after table with ratios and the targets of issue #9, if a baseline ran."""
    before = {(r.backend, r.processes, r.clients): r for r in quality if r.code != "after"}
    after = {(r.backend, r.processes, r.clients): r for r in quality if r.code == "after"}
    pairs = [(key, before[key], after[key]) for key in after if key in before]
    if not pairs:
        return []
    lines = [
        "",
        "Before → after (same run; ratio = after / before for req/s, before / after for p99):",
        "",
        "| backend | API processes | clients | req/s before | req/s after | ratio | "
        "p50 ms before | p50 ms after | p99 ms before | p99 ms after | p99 ratio |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for (backend, processes, clients), old, new in pairs:
        lines.append(
            f"| {backend} | {processes} | {clients} | {old.requests_per_s:.1f} | "
            f"{new.requests_per_s:.1f} | {new.requests_per_s / old.requests_per_s:.2f}x | "
            f"{old.p50_ms:.1f} | {new.p50_ms:.1f} | {old.p99_ms:.1f} | {new.p99_ms:.1f} | "
            f"{old.p99_ms / new.p99_ms:.2f}x |"
        )
    lines += ["", "Targets (issue #9):", ""]
    for (backend, processes, clients), old, new in pairs:
        if processes == 1 and clients in (1, max(CONCURRENCY)):
            ratio = new.requests_per_s / old.requests_per_s
            verdict = "met" if ratio >= 2 else "NOT met"
            lines.append(
                f"* ≥ 2x throughput, {backend}, {clients} client(s): {ratio:.2f}x — {verdict}"
            )
    sqlite16 = after.get(("sqlite", 1, max(CONCURRENCY)))
    if sqlite16 is not None:
        verdict = "met" if sqlite16.p99_ms <= 250 else "NOT met"
        lines.append(
            f"* p99 ≤ 0.25 s, SQLite, 16 clients: {sqlite16.p99_ms / 1e3:.3f} s — {verdict}"
        )
    scaling = sorted(
        (r.processes, r.requests_per_s)
        for r in quality
        if r.code == "after" and r.backend == "postgres" and r.clients == max(CONCURRENCY)
    )
    if len(scaling) > 1:
        grows = all(b[1] > a[1] for a, b in itertools.pairwise(scaling))
        cores = os.cpu_count() or 1
        within = [item for item in scaling if item[0] <= cores]
        grows_within = len(within) > 1 and all(b[1] > a[1] for a, b in itertools.pairwise(within))
        shown = ", ".join(f"{p} → {rps:.1f} req/s" for p, rps in scaling)
        lines.append(
            f"* PostgreSQL throughput grows with API processes (16 clients): {shown} — "
            f"{'met' if grows else 'NOT met'} at every step; up to the {cores} CPU cores "
            f"(clients, servers and PostgreSQL share them): "
            f"{'met' if grows_within else 'NOT met'}"
        )
    return lines


def long_job_lines(results: list[LongJobResult], config: Config) -> list[str]:
    """Benchmark 3's table and verdicts."""
    if not results:
        return []
    lines = [
        "",
        f"**red.compute_quality while a long job runs** (test mode, padding off): "
        f"{config.long_job_calls} sequential calls by one analyst (the first queries of "
        f"benchmark 1), idle, then while one `{SPIN_OPERATION}` job of "
        f"{config.long_job_seconds:g} s (GIL-holding Python) runs in a worker process; the job's "
        "status is read before the first and after the last loaded call:",
        "",
        "| backend | job workers | idle p50 ms | idle p99 ms | loaded p50 ms | loaded p99 ms | "
        "p50 ratio | p99 ratio | window s | job during window | errors |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in results:
        during = (
            "running throughout"
            if r.job_running_throughout
            else f"**NOT running throughout** ({r.job_status_before} → {r.job_status_after})"
        )
        lines.append(
            f"| {r.backend} | {r.workers} | {r.idle_p50_ms:.2f} | {r.idle_p99_ms:.2f} | "
            f"{r.loaded_p50_ms:.2f} | {r.loaded_p99_ms:.2f} | {r.p50_ratio:.2f}x | "
            f"{r.p99_ratio:.2f}x | {r.window_s:.2f} | {during} | {r.errors} |"
        )
    lines += ["", f"Target (issue): loaded / idle ≤ {LONG_JOB_TARGET:g}x:", ""]
    for r in results:
        verdict = "met" if max(r.p50_ratio, r.p99_ratio) <= LONG_JOB_TARGET else "NOT met"
        if not r.job_running_throughout:
            verdict += " (but the job was not running for the whole window: not a valid test)"
        lines.append(
            f"* {r.backend}: p50 {r.p50_ratio:.2f}x, p99 {r.p99_ratio:.2f}x — {verdict}; "
            f"job ended {r.job_final_status}"
        )
    return lines


def jobs_lines(results: list[JobsResult]) -> list[str]:
    """Benchmark 4's table and the 2-worker / 1-worker ratios."""
    if not results:
        return []
    lines = [
        "",
        f"**Jobs per second** (test mode): `{SPIN_OPERATION}` jobs from {JOB_CLIENTS} client "
        f"threads, each making synchronous calls (`POST .../{SPIN_PATH}`: the API process "
        "submits the job to the queue and answers with its release once the queue reports it "
        f"settled), one after another, so {JOB_CLIENTS} jobs are in flight. jobs/s = jobs / "
        "wall time; latency = one call (submission, queueing behind the other in-flight jobs, "
        "run, release), client side. The spin is a fixed wall time, so ideal = workers / spin "
        "seconds:",
        "",
        "| backend | deployment | workers | spin s | jobs | done | seconds | jobs/s | "
        "% of ideal | latency p50 ms | latency p99 ms |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        ideal = "–" if r.ideal_jobs_per_s is None else f"{r.jobs_per_s / r.ideal_jobs_per_s:.0%}"
        lines.append(
            f"| {r.backend} | {r.deployment} | {r.workers} | {r.spin_seconds:g} | {r.jobs} | "
            f"{r.done} | {r.seconds:.2f} | {r.jobs_per_s:.2f} | {ideal} | {r.p50_ms:.1f} | "
            f"{r.p99_ms:.1f} |"
        )
    by_key = {(r.backend, r.spin_seconds, r.workers): r for r in results}
    ratios: list[str] = []
    for (backend, spin_seconds, workers), two in by_key.items():
        one = by_key.get((backend, spin_seconds, 1))
        if workers == 2 and one is not None and one.jobs_per_s > 0:
            ratios.append(
                f"* {backend}, spin {spin_seconds:g} s: 2 workers / 1 worker = "
                f"{two.jobs_per_s / one.jobs_per_s:.2f}x ({one.jobs_per_s:.2f} → "
                f"{two.jobs_per_s:.2f} jobs/s)"
            )
    if ratios:
        lines += ["", "Scaling:", "", *ratios]
    failed = [r for r in results if r.first_error is not None]
    for r in failed:
        lines.append(f"\n**{r.backend} workers={r.workers}: {r.first_error}**")
    return lines


def topk_lines(results: list[TopKResult], skipped: list[str]) -> list[str]:
    """Benchmark 5's table."""
    if not results and not skipped:
        return []
    lines = [
        "",
        f"**Top-K itemsets at the one-sided scale**, K = {TOPK_K}, ℓ = "
        f"{bench_itemsets.SPEED_LENGTH}, ε/2 = {TOPK_EPS_HALF} (ε = {2 * TOPK_EPS_HALF:g}, "
        f"ρ = {bench_itemsets.RHO}): the server kernel `top_k_itemsets` in-process "
        "(bench_itemsets.py's harness). EM selects at scale K/ε_s (one-sided), Laplace keeps "
        "2K/ε_s. FNR over seeded runs (mean ± sd); time = median of interleaved rounds of the "
        "kernel (fresh secure generator) and pyfim's exact top K; ratio = kernel / fastest "
        "pyfim. Earlier figures quoted by the issue (symmetric scale): 2.7–4.7x pyfim, FNR 0.34 "
        "at ε/2 = 0.7 on chess.",
        "",
        "| dataset | method | selection scale | FNR | runs | kernel ms | pyfim eclat ms | "
        "pyfim fpgrowth ms | ratio |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        eclat = r.pyfim_median_ms.get("pyfim.eclat", math.nan)
        fpgrowth = r.pyfim_median_ms.get("pyfim.fpgrowth", math.nan)
        lines.append(
            f"| {r.dataset} | {r.method} | {r.selection_scale:.1f} | {r.fnr_mean:.3f} ± "
            f"{r.fnr_sd:.3f} | {r.runs} | {r.kernel_median_ms:.1f} | {eclat:.1f} | "
            f"{fpgrowth:.1f} | {r.ratio:.2f}x |"
        )
    if any(not r.pyfim_exact for r in results):
        lines.append("\n**WARNING: a pyfim top K differed from the reference ranking.**")
    lines += [f"\n{message}" for message in skipped]
    return lines


@dataclass
class Results:
    """Everything one run measured (the sections not selected stay empty)."""

    quality: list[QualityResult] = field(default_factory=list)
    engines: list[EngineCountResult] = field(default_factory=list)
    kernel: KernelCountResult | None = None
    long_jobs: list[LongJobResult] = field(default_factory=list)
    jobs: list[JobsResult] = field(default_factory=list)
    topk: list[TopKResult] = field(default_factory=list)
    topk_skipped: list[str] = field(default_factory=list)

    def failures(self) -> int:
        """Failed requests and jobs, and a count mismatch (the exit status)."""
        failed = sum(r.errors for r in self.quality) + sum(r.errors for r in self.long_jobs)
        failed += sum(r.jobs - r.done for r in self.jobs)
        failed += sum(r.job_final_status != "done" for r in self.long_jobs)
        if self.kernel is not None and not self.kernel.exact_count_matches:
            failed += 1
        return failed


def quality_lines(quality: list[QualityResult], config: Config) -> list[str]:
    """Benchmark 1's table and the before/after comparison."""
    if not quality:
        return []
    lines = [
        "",
        f"**red.compute_quality** on European mammals (2,221 rows; 124 Boolean species | "
        f"69 numeric climate), {config.requests} requests per setting, ε={EPSILON} each, "
        "random species conjunction ⟺ climate range:",
        "",
        "| code | backend | API processes | clients | req/s | p50 ms | p99 ms | mean ms | errors |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r.code} | {r.backend} | {r.processes} | {r.clients} | {r.requests_per_s:.1f} | "
        f"{r.p50_ms:.2f} | {r.p99_ms:.2f} | {r.mean_ms:.2f} | {r.errors} |"
        for r in quality
    ]
    return lines + comparison(quality)


def count_lines(engines: list[EngineCountResult], kernel: KernelCountResult | None) -> list[str]:
    """Benchmark 2's table."""
    if kernel is None:
        return []
    numpy_us = kernel.numpy_median_us
    lines = [
        "",
        f"**count.noisy** `{kernel.predicate}` over {kernel.rows:,} rows (medians):",
        "",
        "| what | time | ratio to numpy |",
        "|---|---:|---:|",
    ]
    lines += [
        f"| engine over HTTP ({e.backend}, {e.calls} calls) | {e.median_ms:.3f} ms | "
        f"{e.median_ms * 1e3 / numpy_us:,.0f}x |"
        for e in engines
    ]
    lines += [
        f"| server kernel `noisy_count` (evaluate + popcount + discrete Laplace) | "
        f"{kernel.kernel_median_us:.1f} µs | {kernel.kernel_median_us / numpy_us:.1f}x |",
        f"| exact `store.evaluate(...).count()` (no noise) | "
        f"{kernel.evaluate_median_us:.1f} µs | {kernel.evaluate_median_us / numpy_us:.1f}x |",
        f"| `discrete_laplace([count], ε={EPSILON})` alone (OpenDP) | "
        f"{kernel.noise_median_us:.1f} µs | {kernel.noise_median_us / numpy_us:.1f}x |",
        f"| numpy `bitwise_count(bitwise_and(w1, w2)).sum()` | {numpy_us:.1f} µs | 1x |",
    ]
    if not kernel.exact_count_matches:
        lines.append("\n**WARNING: the exact counts of engine and numpy differ.**")
    return lines


def markdown_report(
    *, info: dict[str, Any], config: Config, results: Results, total_seconds: float
) -> str:
    """The results as Markdown, ready to paste into a closing note."""
    lines = [
        f"### dpmine foundation benchmark ({datetime.now(UTC):%Y-%m-%d}, "
        f"commit {info.get('git_commit')})",
        "",
        f"Machine: nproc={info['nproc']} ({info.get('cpu_model')}), "
        f"{info.get('memory_gib')} GiB; Python {info['python']}, numpy {info['numpy']}, "
        f"SQLite {info['sqlite']}, {info.get('postgres')}, uvicorn {info.get('uvicorn')} "
        "(1 process unless stated); servers in development mode with DPMINE_TIMING_PADDING=false "
        "(release padding off), those of the job sections in test mode (for `test.spin`), "
        "padding off too; clients and servers share the machine. One run; load average "
        f"(1/5/15 min) {info.get('load_average_start')} at start, "
        f"{info.get('load_average_end')} at end. Sections: {', '.join(config.sections)}.",
    ]
    lines += quality_lines(results.quality, config)
    lines += count_lines(results.engines, results.kernel)
    lines += long_job_lines(results.long_jobs, config)
    lines += jobs_lines(results.jobs)
    lines += topk_lines(results.topk, results.topk_skipped)
    lines += ["", f"Total run time: {total_seconds:.0f} s."]
    return "\n".join(lines)


# -- main ----------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> Config:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer requests and repeats")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="seconds-long check that the script runs (the test suite's): every benchmark on "
        "SQLite with tiny data (a synthetic two-view table, 10,000 rows, the bundled Mushroom "
        "table as FIMI), benchmarks 3 and 4 on one server, no baseline commit",
    )
    parser.add_argument(
        "--backends",
        default="sqlite,postgres",
        help="comma-separated: sqlite, postgres (default: both)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=REPO_ROOT / "bench" / "out",
        help="folder for foundation.json (default: bench/out)",
    )
    parser.add_argument(
        "--requests",
        type=int,
        default=None,
        help="quality requests per setting (default 400, --quick 100)",
    )
    parser.add_argument("--mammals-dir", type=Path, default=MAMMALS_DIR)
    parser.add_argument(
        "--baseline",
        default=BASELINE_COMMIT,
        help=f"commit measured as 'before' in the same run (default {BASELINE_COMMIT}; "
        "'none' skips it)",
    )
    parser.add_argument(
        "--baseline-dir",
        type=Path,
        default=BASELINE_DIR,
        help=f"git worktree of the baseline (made if missing; default {BASELINE_DIR})",
    )
    parser.add_argument(
        "--processes",
        default=",".join(str(p) for p in PROCESSES),
        help="API processes on PostgreSQL, 16 clients spread over them (default 1,2,4)",
    )
    parser.add_argument(
        "--sections",
        default=",".join(SECTIONS),
        help="comma-separated benchmarks to run: quality (1), count (2), long-job (3), jobs (4), "
        "topk (5); default all",
    )
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="first wait up to SECONDS for the 1-minute load average to drop below 0.5",
    )
    args = parser.parse_args(argv)
    if args.smoke:
        return smoke_config(args)
    backends: list[Backend] = []
    for name in (part.strip() for part in args.backends.split(",") if part.strip()):
        if name == "sqlite":
            backends.append("sqlite")
        elif name == "postgres":
            backends.append("postgres")
        else:
            parser.error(f"unknown backend {name!r}; use sqlite and/or postgres")
    requests = args.requests or (100 if args.quick else 400)
    if requests < max(CONCURRENCY):
        parser.error(f"--requests must be at least {max(CONCURRENCY)}")
    sections = [part.strip() for part in args.sections.split(",") if part.strip()]
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown or not sections:
        parser.error(f"unknown section(s) {unknown}; choose from {', '.join(SECTIONS)}")
    return Config(
        backends=tuple(backends),
        requests=requests,
        count_calls=10 if args.quick else 30,
        kernel_repeats=20 if args.quick else 100,
        numpy_repeats=20 if args.quick else 100,
        out=args.out,
        mammals_dir=args.mammals_dir,
        seed=args.seed,
        wait_quiet=args.wait_quiet,
        baseline=None if args.baseline.lower() == "none" else args.baseline,
        baseline_dir=args.baseline_dir,
        processes=tuple(int(part) for part in args.processes.split(",") if part.strip()),
        sections=tuple(name for name in SECTIONS if name in sections),
        long_job_calls=50 if args.quick else 200,
        long_job_seconds=5.0 if args.quick else 10.0,
        jobs_per_setting={0.2: 16, 0.0: 40} if args.quick else {0.2: 40, 0.0: 200},
        topk_runs=3 if args.quick else 10,
        topk_rounds=3 if args.quick else 5,
    )


#: ``--smoke``: rows and columns of the synthetic two-view table that stands in for mammals.
SMOKE_VIEW_ROWS = 300
SMOKE_SPECIES = 8
SMOKE_CLIMATE = 4


def write_smoke_views(directory: Path, seed: int) -> Path:
    """A small two-view table shaped like mammals (Boolean "species" left, numeric "climate"
    right, joined by ``id``), seeded: the smoke mode's stand-in for the shared data."""
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True, exist_ok=True)
    ids = np.arange(SMOKE_VIEW_ROWS)
    species = rng.random((SMOKE_VIEW_ROWS, SMOKE_SPECIES)) < 0.4
    climate = rng.normal(10.0, 5.0, size=(SMOKE_VIEW_ROWS, SMOKE_CLIMATE)).round(1)
    left = ["id," + ",".join(f"s{j + 1}" for j in range(SMOKE_SPECIES))]
    left += [
        f"{i}," + ",".join(str(int(v)) for v in row) for i, row in zip(ids, species, strict=True)
    ]
    right = ["id," + ",".join(f"c{j + 1}" for j in range(SMOKE_CLIMATE))]
    right += [
        f"{i}," + ",".join(f"{v:g}" for v in row) for i, row in zip(ids, climate, strict=True)
    ]
    (directory / "left.csv").write_text("\n".join(left) + "\n", encoding="utf-8")
    (directory / "right.csv").write_text("\n".join(right) + "\n", encoding="utf-8")
    return directory


def smoke_config(args: argparse.Namespace) -> Config:
    """``--smoke``: every benchmark end to end in seconds on SQLite (tiny data under ``--out``)."""
    data = args.out / "smoke-data"
    return Config(
        backends=("sqlite",),
        requests=max(CONCURRENCY),
        count_calls=2,
        kernel_repeats=2,
        numpy_repeats=2,
        out=args.out,
        mammals_dir=write_smoke_views(data / "views", args.seed),
        seed=args.seed,
        wait_quiet=0.0,
        baseline=None,
        baseline_dir=args.baseline_dir,
        processes=(1,),
        sections=SECTIONS,
        long_job_calls=5,
        long_job_seconds=0.5,
        jobs_per_setting={0.2: 4, 0.0: 8},
        topk_runs=1,
        topk_rounds=1,
        bits_rows=10_000,
        topk_specs=(bench_itemsets.smoke_dataset(data),),
        smoke=True,
        job_worker_counts=(LONG_JOB_WORKERS,),
        warm_spin_seconds=0.1,
        share_job_servers=True,
    )


def main(argv: list[str] | None = None) -> int:
    """Run the selected benchmarks, print the tables, write the JSON; non-zero exit on failed
    requests or jobs and on a count mismatch."""
    config = parse_args(argv)
    unwind_on_sigterm()
    wait_if_asked(config.wait_quiet)
    started = time.perf_counter()
    info = machine_info()
    sections = set(config.sections)
    print(
        f"dpmine foundation benchmark: backends={','.join(config.backends)} "
        f"sections={','.join(config.sections)} requests={config.requests} nproc={info['nproc']}",
        flush=True,
    )
    mammals = mammals_metadata(config.mammals_dir)
    rng = np.random.default_rng(config.seed)
    # Benchmark 1 sends all of its queries; benchmark 3 the first ``long_job_calls``.
    count = max(config.requests, config.long_job_calls)
    queries = [random_redescription(mammals, rng) for _ in range(count)]
    results = Results()
    served = sections & {"quality", "count", "long-job", "jobs"}
    with contextlib.ExitStack() as stack:
        cluster = (
            stack.enter_context(postgres_cluster())
            if "postgres" in config.backends and served
            else None
        )
        if sections & {"quality", "count"}:
            scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="dpmine-bench-")))
            bits_csv: Path | None = None
            columns: list[BoolArray] = []
            if "count" in sections:
                columns = bits_columns(config.bits_rows, config.seed)
                bits_csv = scratch / "bits1m.csv.gz"
                write_bits_csv(columns, bits_csv)
            codes = [Code(label="after", root=REPO_ROOT, pythonpath=None)]
            if config.baseline is not None and "quality" in sections:
                codes.insert(0, baseline_code(config.baseline, config.baseline_dir))
            results.quality, results.engines = bench_all(
                config, codes, mammals, queries[: config.requests], bits_csv, cluster=cluster
            )
            if bits_csv is not None:
                print("[in-process] kernel and numpy timings ...", flush=True)
                results.kernel = run_kernel_count(
                    bits_csv, columns, config.kernel_repeats, config.numpy_repeats
                )
        servers = JobServers(stack if config.share_job_servers else None)
        if "long-job" in sections:
            results.long_jobs = bench_long_jobs(config, cluster, mammals, queries, servers)
        if "jobs" in sections:
            results.jobs = bench_jobs(config, cluster, mammals, servers)
    if "topk" in sections:
        results.topk, results.topk_skipped = bench_topk(config)
    total = time.perf_counter() - started
    info["load_average_end"] = load_average()
    report = markdown_report(info=info, config=config, results=results, total_seconds=total)
    config.out.mkdir(parents=True, exist_ok=True)
    out_file = config.out / "foundation.json"
    payload = {
        "machine": info,
        "config": {
            "backends": list(config.backends),
            "sections": list(config.sections),
            "requests_per_setting": config.requests,
            "concurrency": list(CONCURRENCY),
            "baseline": config.baseline,
            "api_processes_postgres": list(config.processes),
            "server_env": SERVER_ENV,
            "job_server_env": JOB_SERVER_ENV,
            "epsilon_per_call": EPSILON,
            "count_calls": config.count_calls,
            "long_job_calls": config.long_job_calls,
            "long_job_seconds": config.long_job_seconds,
            "jobs_per_setting": {str(k): v for k, v in config.jobs_per_setting.items()},
            "job_clients": JOB_CLIENTS,
            "topk": {
                "k": TOPK_K,
                "length": bench_itemsets.SPEED_LENGTH,
                "eps_half": TOPK_EPS_HALF,
                "runs": config.topk_runs,
                "rounds": config.topk_rounds,
            },
            "seed": config.seed,
        },
        "quality": [asdict(r) for r in results.quality],
        "count_engine": [asdict(e) for e in results.engines],
        "count_kernel": None if results.kernel is None else asdict(results.kernel),
        "long_job": [asdict(r) for r in results.long_jobs],
        "jobs": [asdict(r) for r in results.jobs],
        "topk": [asdict(r) for r in results.topk],
        "topk_skipped": results.topk_skipped,
        "total_seconds": round(total, 1),
        "markdown": report,
    }
    out_file.write_text(json.dumps(payload, indent=2) + "\n")
    print()
    print(report)
    print(f"\nwrote {out_file}")
    return 1 if results.failures() else 0


if __name__ == "__main__":
    sys.exit(main())
