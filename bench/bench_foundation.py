"""Foundation benchmark of dpmine: the served request path and the counting hot path.

1. Throughput and latency (p50/p99) of ``red.compute_quality`` (ALGORITHMS.md §1.6) on the
   European mammals two-view data, with 1, 4 and 16 concurrent clients (threads, each its own
   connection and analyst key), against a real uvicorn server on SQLite and on PostgreSQL.
2. One ``count.noisy`` (§0.6) over 10^6 rows: the full engine call over HTTP, the server-side
   kernel alone, and a plain numpy popcount over the same packed bitsets.

Usage::

    .venv/bin/python bench/bench_foundation.py [--quick] [--backends sqlite,postgres]
                                                [--out bench/out]

Writes ``<out>/foundation.json`` and prints Markdown tables. See bench/README.md.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
import threading
import time
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
    register_files,
    server_for_backend,
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


@dataclass(frozen=True)
class QualityResult:
    """One (backend, concurrency) setting of benchmark 1."""

    backend: str
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
    server: ServerHandle,
    backend: str,
    clients: int,
    keys: list[str],
    queries: list[tuple[Expr, Expr]],
) -> QualityResult:
    """``len(queries)`` quality requests spread over ``clients`` threads, each its own client."""
    connections = [server.connect(keys[i]) for i in range(clients)]
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
        backend=backend,
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


# -- one backend ---------------------------------------------------------------------------------


def bench_backend(
    backend: Backend,
    config: Config,
    mammals: DatasetMetadata,
    queries: list[tuple[Expr, Expr]],
    bits_csv: Path,
) -> tuple[list[QualityResult], EngineCountResult]:
    """Start a server on ``backend``, register both datasets, run benchmarks 1 and 2a."""
    with (
        tempfile.TemporaryDirectory(prefix=f"dpmine-bench-{backend}-") as work,
        server_for_backend(backend, Path(work)) as server,
    ):
        try:
            with server.connect() as owner:
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
                register_files(
                    owner,
                    dataset_id=BITS_ID,
                    metadata=bits_metadata(len(BITS_DENSITIES)),
                    source=CsvSource(path=bits_csv.name),
                    files={"path": bits_csv},
                    epsilon_cap=DATASET_CAP,
                )
            names = [f"analyst-{i:02d}" for i in range(max(CONCURRENCY))]
            grants = {MAMMALS_ID: GRANT_EPSILON, BITS_ID: GRANT_EPSILON}
            keys = add_analysts(server, names, grants)
            key_list = [keys[name] for name in names]
            results: list[QualityResult] = []
            for clients in CONCURRENCY:
                result = run_quality(server, backend, clients, key_list, queries)
                print(
                    f"  {backend:8} clients={clients:2}  {result.requests_per_s:8.1f} req/s  "
                    f"p50 {result.p50_ms:8.2f} ms  p99 {result.p99_ms:8.2f} ms  "
                    f"errors {result.errors}",
                    flush=True,
                )
                results.append(result)
            engine = run_engine_count(server, backend, key_list[0], config.count_calls)
            print(
                f"  {backend:8} count.noisy over HTTP: median {engine.median_ms:.3f} ms", flush=True
            )
        except BaseException:
            print(f"server log tail ({backend}):\n{server.log_tail()}", file=sys.stderr)
            raise
    return results, engine


# -- reporting -----------------------------------------------------------------------------------


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
        "(1 process); clients and server share the machine. One run; load average "
        f"(1/5/15 min) {info.get('load_average_start')} at start, "
        f"{info.get('load_average_end')} at end.",
        "",
        f"**red.compute_quality** on European mammals (2,221 rows; 124 Boolean species | "
        f"69 numeric climate), {config.requests} requests per setting, ε={EPSILON} each, "
        "random species conjunction ⟺ climate range:",
        "",
        "| backend | clients | req/s | p50 ms | p99 ms | mean ms | errors |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r.backend} | {r.clients} | {r.requests_per_s:.1f} | {r.p50_ms:.2f} | "
        f"{r.p99_ms:.2f} | {r.mean_ms:.2f} | {r.errors} |"
        for r in quality
    ]
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
    quality: list[QualityResult] = []
    engines: list[EngineCountResult] = []
    with tempfile.TemporaryDirectory(prefix="dpmine-bench-data-") as scratch:
        bits_csv = Path(scratch) / "bits1m.csv.gz"
        write_bits_csv(columns, bits_csv)
        for backend in config.backends:
            print(f"[{backend}] starting the server, registering datasets ...", flush=True)
            results, engine = bench_backend(backend, config, mammals, queries, bits_csv)
            quality += results
            engines.append(engine)
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
