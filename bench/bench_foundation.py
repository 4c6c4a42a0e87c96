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

Usage::

    .venv/bin/python bench/bench_foundation.py [--quick] [--backends sqlite,postgres]
                                                [--out bench/out] [--baseline 445732b|none]
                                                [--processes 1,2,4]

Writes ``<out>/foundation.json`` and prints Markdown tables. See bench/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import itertools
import json
import os
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

import dpmine
from _support import (
    REPO_ROOT,
    Backend,
    ServerHandle,
    add_analysts,
    load_average,
    machine_info,
    median,
    percentile,
    postgres_cluster,
    register_files,
    running_server,
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
    NumericAttribute,
    NumLiteral,
)
from dpmine_server.data.loaders import load_store
from dpmine_server.data.propose import propose_metadata
from dpmine_server.dp.mechanisms import discrete_laplace
from dpmine_server.operations.counts import noisy_count

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
    return propose_metadata(source, kind="views", base_dir=mammals_dir)


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
) -> tuple[list[QualityResult], EngineCountResult | None]:
    """Start ``code``'s server on ``database_url``, register the datasets, run benchmark 1 (and
    on PostgreSQL with more API processes), and 2a when ``bits_csv`` is given."""
    secret = secrets.token_urlsafe(32)
    results: list[QualityResult] = []
    engine: EngineCountResult | None = None
    with contextlib.ExitStack() as stack:
        first = stack.enter_context(api_processes(database_url, work, code, secret, 0))
        servers = [first]
        try:
            with first.connect() as owner:
                register_files(
                    owner,
                    dataset_id=MAMMALS_ID,
                    name="European mammals (species vs climate)",
                    metadata=mammals,
                    source=CsvPairSource(left="left.csv", right="right.csv", id_column="id"),
                    files={
                        "left": config.mammals_dir / "left.csv",
                        "right": config.mammals_dir / "right.csv",
                    },
                    epsilon_cap=DATASET_CAP,
                )
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

            for clients in CONCURRENCY:
                measure(clients)
            if bits_csv is not None:
                engine = run_engine_count(first, backend, key_list[0], config.count_calls)
                print(
                    f"  {backend:8} count.noisy over HTTP: median {engine.median_ms:.3f} ms",
                    flush=True,
                )
            if backend == "postgres":
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
    bits_csv: Path,
) -> tuple[list[QualityResult], list[EngineCountResult]]:
    """Every backend, every code version (the baseline first), each on a fresh database."""
    quality: list[QualityResult] = []
    engines: list[EngineCountResult] = []
    with contextlib.ExitStack() as stack:
        cluster = stack.enter_context(postgres_cluster()) if "postgres" in config.backends else None
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


def markdown_report(
    *,
    info: dict[str, Any],
    config: Config,
    quality: list[QualityResult],
    engines: list[EngineCountResult],
    kernel: KernelCountResult,
    total_seconds: float,
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
        "(release padding off); clients and servers share the machine. One run; load average "
        f"(1/5/15 min) {info.get('load_average_start')} at start, "
        f"{info.get('load_average_end')} at end.",
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
    lines += comparison(quality)
    numpy_us = kernel.numpy_median_us
    lines += [
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
    lines += ["", f"Total run time: {total_seconds:.0f} s."]
    return "\n".join(lines)


# -- main ----------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> Config:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer requests and repeats")
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
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="first wait up to SECONDS for the 1-minute load average to drop below 0.5",
    )
    args = parser.parse_args(argv)
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
    )


def main(argv: list[str] | None = None) -> int:
    """Run every benchmark, print the tables, write the JSON; non-zero exit on request errors."""
    config = parse_args(argv)
    unwind_on_sigterm()
    wait_if_asked(config.wait_quiet)
    started = time.perf_counter()
    info = machine_info()
    print(
        f"dpmine foundation benchmark: backends={','.join(config.backends)} "
        f"requests={config.requests} nproc={info['nproc']}",
        flush=True,
    )
    mammals = mammals_metadata(config.mammals_dir)
    rng = np.random.default_rng(config.seed)
    queries = [random_redescription(mammals, rng) for _ in range(config.requests)]
    columns = bits_columns(BITS_ROWS, config.seed)
    with tempfile.TemporaryDirectory(prefix="dpmine-bench-data-") as scratch:
        bits_csv = Path(scratch) / "bits1m.csv.gz"
        write_bits_csv(columns, bits_csv)
        codes = [Code(label="after", root=REPO_ROOT, pythonpath=None)]
        if config.baseline is not None:
            codes.insert(0, baseline_code(config.baseline, config.baseline_dir))
        quality, engines = bench_all(config, codes, mammals, queries, bits_csv)
        print("[in-process] kernel and numpy timings ...", flush=True)
        kernel = run_kernel_count(bits_csv, columns, config.kernel_repeats, config.numpy_repeats)
    total = time.perf_counter() - started
    info["load_average_end"] = load_average()
    report = markdown_report(
        info=info,
        config=config,
        quality=quality,
        engines=engines,
        kernel=kernel,
        total_seconds=total,
    )
    config.out.mkdir(parents=True, exist_ok=True)
    out_file = config.out / "foundation.json"
    payload = {
        "machine": info,
        "config": {
            "backends": list(config.backends),
            "requests_per_setting": config.requests,
            "concurrency": list(CONCURRENCY),
            "baseline": config.baseline,
            "api_processes_postgres": list(config.processes),
            "server_env": SERVER_ENV,
            "epsilon_per_call": EPSILON,
            "count_calls": config.count_calls,
            "seed": config.seed,
        },
        "quality": [asdict(r) for r in quality],
        "count_engine": [asdict(e) for e in engines],
        "count_kernel": asdict(kernel),
        "total_seconds": round(total, 1),
        "markdown": report,
    }
    out_file.write_text(json.dumps(payload, indent=2) + "\n")
    print()
    print(report)
    print(f"\nwrote {out_file}")
    failed = sum(r.errors for r in quality)
    return 1 if failed or not kernel.exact_count_matches else 0


if __name__ == "__main__":
    sys.exit(main())
