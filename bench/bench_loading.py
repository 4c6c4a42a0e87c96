"""Time and peak memory of loading a CSV source into a ColumnStore (issue #23 item 4, "lean
loading").

The script writes a CSV of R rows × 50 columns (20 Boolean, 15 categorical, 15 numeric; about
3 % missing cells as ``?`` or empty, a few ``NA``; each numeric column repeats 5,000 numbers
with 0–4 decimals, or with ``--continuous`` nearly every number is distinct) and loads it with
``dpmine_server.data.loaders``:

* ``frame-python``: the whole-frame path as it ran before the streaming path
  (:func:`load_csv_frame` with pandas storing the string cells as Python strings,
  ``mode.string_storage = "python"``, pandas' choice when pyarrow is not installed);
* ``frame-arrow``: the same path with pandas' Arrow-backed strings (what :func:`load_store`
  falls back to now for the files the streaming path hands over);
* ``streaming``: :func:`load_csv_streaming`, the path :func:`load_store` takes, then the
  packed columns written as registration writes them (``write_packed``, timed apart);
* ``mapped``: the packed columns mapped as every API process and job worker maps them at
  start-up (``map_packed``: checksums verified, arrays mapped), then a first count
  (list it after ``streaming``, which writes the files);
* ``propose``: the owner's first step, :func:`propose_metadata` on the CSV (the digest and
  packed size are not reported: it builds no columns; it must propose the 50 attributes);
* ``registration``: the whole registration as an owner runs it, over HTTP: a real uvicorn
  server on SQLite, the CSV uploaded with the client's ``upload_dataset`` (multipart), timed
  from the request to the answer (the upload, the load, the packed files written and mapped,
  the ledger row); the peak memory is the server process's (``VmHWM``). With
  ``--upload-mbps R`` the form is posted with httpx as the client posts it (``request`` first)
  and the file is read at R MB/s, the link of an owner who is not on the server's machine (the
  server parses the CSV as it arrives, so the load overlaps the upload).

Each load runs in a fresh Python process, which reports its wall time, its peak resident set
(``ru_maxrss``) before and after the load, the packed size of the columns
(:meth:`ColumnStore.memory_bytes`) and a digest of every column array; the digests of all paths
must agree (the exit status is 1 otherwise). A path that dies (out of memory) is reported as
failed.

Usage::

    PYTHONPATH=client:server .venv/bin/python bench/bench_loading.py [--rows 1000000,10000000]
        [--paths frame-python,frame-arrow,streaming] [--frame-max-rows 1000000]
        [--continuous] [--upload-mbps 100] [--work-dir /tmp] [--out bench/out]

``--smoke``: 500 rows, every path, the registration's server with release padding off
(seconds). ``--frame-max-rows`` (default 10^6) skips the whole-frame paths above that many
rows: at 10^7 rows they need more than 14 GiB. Writes ``<out>/loading.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pa_csv

from _support import (
    REPO_ROOT,
    ServerHandle,
    comma_names,
    load_average,
    machine_info,
    register_files,
    running_server,
)
from dpmine.wire import (
    AnyAttribute,
    BooleanAttribute,
    CategoricalAttribute,
    CreateDatasetRequest,
    CsvSource,
    DatasetMetadata,
    NumericAttribute,
)
from dpmine.wire.queries import BoolLiteral
from dpmine_server.data.columns import BooleanColumn, CategoricalColumn, ColumnStore
from dpmine_server.data.loaders import load_csv_frame, load_csv_streaming
from dpmine_server.data.packed import map_packed, write_packed
from dpmine_server.data.propose import propose_metadata

PATHS = ("frame-python", "frame-arrow", "streaming", "mapped", "propose", "registration")
ROWS = (1_000_000, 10_000_000)
SMOKE_ROWS = 500
FRAME_MAX_ROWS = 1_000_000
N_BOOLEAN, N_CATEGORICAL, N_NUMERIC = 20, 15, 15
#: Rows generated per write: bounds the generator's memory.
WRITE_ROWS = 200_000
MISSING_RATE = 0.03


def metadata(n_max: int) -> DatasetMetadata:
    """The 50 declared attributes (categorical ``k`` has 3 + k % 8 categories)."""
    attributes: list[AnyAttribute] = [BooleanAttribute(name=f"b{i}") for i in range(N_BOOLEAN)]
    attributes += [
        CategoricalAttribute(name=f"c{i}", categories=[f"cat{j}" for j in range(3 + i % 8)])
        for i in range(N_CATEGORICAL)
    ]
    attributes += [
        NumericAttribute(name=f"x{i}", lo=-100.0, hi=100.0 + 10 * i) for i in range(N_NUMERIC)
    ]
    return DatasetMetadata(kind="table", n_max=n_max, attributes=attributes)


def _column(vocabulary: list[str], n_rows: int, rng: np.random.Generator) -> pa.StringArray:
    """``n_rows`` cells drawn from ``vocabulary``, about MISSING_RATE of them ``?`` or empty."""
    cells = pa.array([*vocabulary, "?", "", "NA"], pa.string())
    index = rng.integers(0, len(vocabulary), n_rows)
    missing = rng.random(n_rows) < MISSING_RATE
    index[missing] = len(vocabulary) + rng.integers(0, 3, int(missing.sum()))
    return cells.take(index)


def _continuous_column(n_rows: int, rng: np.random.Generator) -> pa.StringArray:
    """``n_rows`` fresh numbers of 6 significant digits (almost all distinct), about
    MISSING_RATE of them ``?``."""
    cells = np.char.mod("%.6g", rng.normal(0, 60, n_rows)).astype(object)
    cells[rng.random(n_rows) < MISSING_RATE] = "?"
    return pa.array(cells.tolist(), pa.string())


def write_csv(
    path: Path, n_rows: int, seed: int, *, quoted: bool = False, continuous: bool = False
) -> None:
    """The benchmark table, written block by block with Arrow's CSV writer; ``quoted``: every
    cell in quotes (as the SQL snapshots are written); ``continuous``: the numeric cells are
    fresh numbers (the worst case of per-distinct-value conversion and of the rank sort),
    where by default each numeric column repeats 5,000 decimals (measurements at a fixed
    precision)."""
    rng = np.random.default_rng(seed)
    numbers = [
        [f"{rng.normal(0, 60):.{rng.integers(0, 5)}f}" for _ in range(5000)]
        for _ in range(N_NUMERIC)
    ]
    booleans = ["1", "0", "true", "false", "yes", "no"]
    names = [attribute.name for attribute in metadata(n_rows).attributes]
    with pa_csv.CSVWriter(
        str(path),
        pa.schema([(name, pa.string()) for name in names]),
        write_options=pa_csv.WriteOptions(quoting_style="all_valid" if quoted else "none"),
    ) as writer:
        for start in range(0, n_rows, WRITE_ROWS):
            size = min(WRITE_ROWS, n_rows - start)
            columns = [_column(booleans, size, rng) for _ in range(N_BOOLEAN)]
            columns += [
                _column([f"cat{j}" for j in range(3 + i % 8)], size, rng)
                for i in range(N_CATEGORICAL)
            ]
            columns += [
                _continuous_column(size, rng) if continuous else _column(numbers[i], size, rng)
                for i in range(N_NUMERIC)
            ]
            writer.write_table(pa.table(columns, names=names))


def _digest(store: ColumnStore) -> str:
    """SHA-256 over every column's arrays, in declared order."""
    digest = hashlib.sha256()
    for attribute in store.metadata.attributes:
        column = store.column(attribute.name)
        arrays: list[npt.NDArray[np.generic]]
        if isinstance(column, BooleanColumn):
            arrays = [column.true.words, column.present.words]
        elif isinstance(column, CategoricalColumn):
            arrays = [column.codes]
        else:
            arrays = [column.values, column.sorted_order]
        digest.update(b"".join(np.ascontiguousarray(array).tobytes() for array in arrays))
    return digest.hexdigest()


def _mapped(declared: DatasetMetadata, folder: Path) -> ColumnStore:
    store = map_packed(declared, folder)
    if store is None:
        raise SystemExit(f"no packed columns in {folder}: run the streaming path first")
    return store


def _proposed(csv_path: Path, before: int, start: float) -> dict[str, Any]:
    """The ``propose`` path: the metadata proposal's time and peak; exit 1 unless it proposes
    every attribute of the table with the declared types."""
    proposed = propose_metadata(
        CsvSource(path=csv_path.name), kind="table", base_dir=csv_path.parent
    )
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    types = [(attribute.name, attribute.type) for attribute in proposed.attributes]
    declared = [(attribute.name, attribute.type) for attribute in metadata(1).attributes]
    if types != declared:
        raise SystemExit(f"the proposal's attributes {types} are not the table's {declared}")
    return {
        "path": "propose",
        "proposed_n_max": proposed.n_max,
        "seconds": round(seconds, 3),
        "peak_rss_mib": round(peak / 1024, 1),
        "rss_before_load_mib": round(before / 1024, 1),
        "packed_mib": None,
    }


def child(path_name: str, csv_path: Path, n_max: int) -> dict[str, Any]:
    """One load in this (fresh) process: what the parent reports. ``streaming`` also writes
    the packed columns beside the CSV (as registration does, timed apart); ``mapped`` maps
    them (as every API process and job worker does at start-up) and answers a first count."""
    declared = metadata(n_max)
    folder = csv_path.with_suffix(".d")
    if path_name == "frame-python":
        pd.set_option("mode.string_storage", "python")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    n_rows: int
    if path_name == "propose":
        return _proposed(csv_path, before, start)
    if path_name == "mapped":
        store = _mapped(declared, folder)
        n_rows = store.n_rows
    elif path_name == "streaming":
        store, report = load_csv_streaming(declared, csv_path, "benchmark table")
        n_rows = report.n_rows
    else:
        store, report = load_csv_frame(declared, csv_path, "benchmark table")
        n_rows = report.n_rows
    seconds = time.perf_counter() - start
    extra: dict[str, Any] = {}
    if path_name == "streaming":
        folder.mkdir(exist_ok=True)
        written = time.perf_counter()
        write_packed(store, folder)
        extra["write_packed_s"] = round(time.perf_counter() - written, 3)
    if path_name == "mapped":
        counted = time.perf_counter()
        store.literal_bitset(BoolLiteral(attribute="b0")).count()
        extra["first_count_s"] = round(time.perf_counter() - counted, 4)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "path": path_name,
        "n_rows": n_rows,
        "seconds": round(seconds, 3),
        "peak_rss_mib": round(peak / 1024, 1),
        "rss_before_load_mib": round(before / 1024, 1),
        "packed_mib": round(store.memory_bytes() / 2**20, 2),
        "digest": _digest(store),
        **extra,
    }


_CHILD = (sys.executable, __file__, "--child")


def run_child(path_name: str, csv_path: Path, n_max: int) -> dict[str, Any]:
    """:func:`child` in a fresh interpreter (its peak RSS is its own); failed if it dies."""
    started = time.perf_counter()
    finished = subprocess.run(
        [*_CHILD, path_name, "--csv", str(csv_path), "--n-max", str(n_max)],
        capture_output=True,
        text=True,
        check=False,
    )
    if finished.returncode != 0:
        return {
            "path": path_name,
            "failed": f"exit status {finished.returncode}: {finished.stderr[-2000:]}",
            "seconds_until_failure": round(time.perf_counter() - started, 1),
        }
    result: dict[str, Any] = json.loads(finished.stdout.strip().splitlines()[-1])
    return result


def _peak_rss_mib(pid: int) -> float:
    """A live process's peak resident set (``VmHWM`` in /proc), MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    raise RuntimeError(f"no VmHWM for process {pid}")


class PacedFile(io.RawIOBase):
    """A file read at most ``rate`` bytes a second from its first read: the upload of an owner
    whose link to the server carries that much (the server's side is unchanged)."""

    def __init__(self, path: Path, rate: float) -> None:
        super().__init__()
        self._handle = path.open("rb")
        self._rate = rate
        self._start: float | None = None
        self.sent = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any, /) -> int:
        if self._start is None:
            self._start = time.perf_counter()
        count = self._handle.readinto(buffer)
        self.sent += count
        ahead = self.sent / self._rate - (time.perf_counter() - self._start)
        if ahead > 0:
            time.sleep(ahead)
        return count

    def close(self) -> None:
        self._handle.close()
        super().close()


def _paced_upload(server: ServerHandle, csv_path: Path, n_max: int, rate: float) -> dict[str, Any]:
    """The client's upload form (``request`` first, then the file), the file sent at ``rate``
    bytes a second."""
    request = CreateDatasetRequest(
        id="loading-bench",
        name="loading-bench",
        epsilon_cap=1_000_000.0,
        metadata=metadata(n_max),
        source=CsvSource(path=csv_path.name),
    )
    with io.BufferedReader(PacedFile(csv_path, rate), buffer_size=1 << 16) as paced:
        response = httpx.post(
            f"{server.url}/v1/admin/datasets/upload",
            headers={"Authorization": f"Bearer {server.owner_key}"},
            data={"request": request.model_dump_json()},
            files={"path": (csv_path.name, paced)},
            timeout=3600.0,
        )
    response.raise_for_status()
    answer: dict[str, Any] = response.json()
    return answer


def run_registration(
    csv_path: Path,
    n_max: int,
    work: Path,
    *,
    upload_mbps: float | None = None,
    padding: bool = True,
) -> dict[str, Any]:
    """The whole registration of ``csv_path`` over HTTP on a fresh server (SQLite); with
    ``upload_mbps``, the client sends the file at that many MB/s (a remote owner's link).
    ``padding=False`` (``--smoke``, as every smoke server): release padding off, so the server
    starts without warming its job pool."""
    # A folder of its own per run: a second registration in one invocation must not start on
    # the first one's database (made with another secret key, which the server refuses).
    server_dir = Path(tempfile.mkdtemp(prefix=f"server-{n_max}-", dir=work))
    # The 10^7-row CSV (2.3 GB) is above the default upload limit (2 GiB): the owner raises it.
    settings = {"DPMINE_MAX_UPLOAD_BYTES": str(max(2 * csv_path.stat().st_size, 2**31))}
    if not padding:
        settings["DPMINE_TIMING_PADDING"] = "false"
    database = f"sqlite:///{server_dir / 'dpmine.sqlite3'}"
    with running_server(database, server_dir, extra_env=settings) as server:
        before = _peak_rss_mib(server.process.pid)
        start = time.perf_counter()
        if upload_mbps is not None:
            answer = _paced_upload(server, csv_path, n_max, upload_mbps * 1e6)
        else:
            with server.connect(timeout=3600.0) as owner:
                answer = register_files(
                    owner,
                    dataset_id="loading-bench",
                    metadata=metadata(n_max),
                    source=CsvSource(path=csv_path.name),
                    files={"path": csv_path},
                )
        seconds = time.perf_counter() - start
        peak = _peak_rss_mib(server.process.pid)
    return {
        "path": "registration",
        "n_rows": int(answer["report"]["n_rows"]),
        "seconds": round(seconds, 3),
        "upload_mbps": upload_mbps,
        "peak_rss_mib": peak,
        "rss_before_load_mib": before,
        "packed_mib": None,
    }


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| rows | path | load s | peak RSS MiB | RSS before load MiB | packed MiB | "
        "write packed s | first count s |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for result in results:
        if "failed" in result:
            lines.append(f"| {result['rows']:,} | {result['path']} | failed | | | | | |")
            continue
        path = result["path"]
        if result.get("upload_mbps") is not None:
            path += f" (upload at {result['upload_mbps']:g} MB/s)"
        lines.append(
            f"| {result['rows']:,} | {path} | {result['seconds']:.2f} | "
            f"{result['peak_rss_mib']:,.0f} | {result['rss_before_load_mib']:,.0f} | "
            f"{_packed(result)} | {result.get('write_packed_s', '')} | "
            f"{result.get('first_count_s', '')} |"
        )
    return "\n".join(lines)


def _packed(result: dict[str, Any]) -> str:
    packed = result.get("packed_mib")
    return "" if packed is None else f"{packed:,.1f}"


def parse_arguments(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--smoke", action="store_true", help=f"{SMOKE_ROWS:,} rows, every path, padding off"
    )
    parser.add_argument("--rows", default=",".join(str(rows) for rows in ROWS))
    parser.add_argument("--paths", default=",".join(PATHS))
    parser.add_argument(
        "--frame-max-rows",
        type=int,
        default=FRAME_MAX_ROWS,
        help="skip the whole-frame paths above this many rows",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--quoted", action="store_true", help="every cell in quotes (as SQL snapshots are)"
    )
    parser.add_argument(
        "--continuous",
        action="store_true",
        help="numeric cells almost all distinct (default: 5,000 values a column)",
    )
    parser.add_argument("--work-dir", type=Path, default=None, help="where the CSV is written")
    parser.add_argument(
        "--upload-mbps",
        type=float,
        default=None,
        help="registration: send the file at this many MB/s (a remote owner's link)",
    )
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "out")
    parser.add_argument("--child", choices=PATHS[:-1], help=argparse.SUPPRESS)
    parser.add_argument("--csv", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--n-max", type=int, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    arguments = parse_arguments(argv)
    if arguments.child:
        print(json.dumps(child(arguments.child, arguments.csv, arguments.n_max)))
        return 0
    row_counts = [SMOKE_ROWS] if arguments.smoke else [int(r) for r in arguments.rows.split(",")]
    paths = comma_names(arguments.paths, PATHS, "paths")
    info = machine_info()
    info["pyarrow"] = pa.__version__
    info["pandas"] = pd.__version__
    print(f"# Loading a {N_BOOLEAN + N_CATEGORICAL + N_NUMERIC}-column CSV into a ColumnStore\n")
    results: list[dict[str, Any]] = []
    agree = True
    with tempfile.TemporaryDirectory(
        prefix="dpmine-bench-loading-", dir=arguments.work_dir
    ) as work:
        for n_rows in row_counts:
            csv_path = Path(work) / f"table-{n_rows}.csv"
            started = time.perf_counter()
            write_csv(
                csv_path,
                n_rows,
                arguments.seed,
                quoted=arguments.quoted,
                continuous=arguments.continuous,
            )
            size = csv_path.stat().st_size
            print(
                f"{n_rows:,} rows: {size / 2**20:,.0f} MiB of CSV written in "
                f"{time.perf_counter() - started:.0f} s",
                flush=True,
            )
            digests = set()
            for path_name in paths:
                frame = path_name.startswith("frame")
                if frame and n_rows > arguments.frame_max_rows:
                    print(f"  {path_name}: skipped above {arguments.frame_max_rows:,} rows")
                    continue
                if path_name == "registration":
                    result = run_registration(
                        csv_path,
                        n_rows,
                        Path(work),
                        upload_mbps=arguments.upload_mbps,
                        padding=not arguments.smoke,
                    )
                else:
                    result = run_child(path_name, csv_path, n_max=n_rows)
                result |= {"rows": n_rows, "csv_mib": round(size / 2**20, 1)}
                results.append(result)
                if "digest" in result:
                    digests.add(result["digest"])
                print(f"  {path_name}: {result}", flush=True)
            agree = agree and len(digests) <= 1
    print(
        f"\n{table(results)}\n\ncolumns equal on every path: {agree}; "
        f"load average at the end: {load_average()}"
    )
    arguments.out.mkdir(parents=True, exist_ok=True)
    output = {
        "machine": info,
        "quoted": arguments.quoted,
        "continuous": arguments.continuous,
        "results": results,
        "columns_agree": agree,
    }
    (arguments.out / "loading.json").write_text(json.dumps(output, indent=2) + "\n")
    failed = [result for result in results if "failed" in result]
    return 1 if failed or not agree else 0


if __name__ == "__main__":
    sys.exit(main())
