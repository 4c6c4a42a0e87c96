"""The packed columns of a dataset version on disk, written once at registration and memory-mapped
by every process (issue #23 item 4, "lean loading"; DESIGN.md "Data at rest and in memory").

A version folder ``data_dir/datasets/<id>/v<version>/`` holds the stored source and, beside it,
``packed/``: one ``.npy`` file per array of the :class:`~dpmine_server.data.columns.ColumnStore`
(bitset words, category codes, clipped values and sorted orders, item lists) and
``manifest.json`` (the format name and version, a digest of the public metadata the columns were
built for, the row count and each file's dtype, shape and CRC-32). A process maps the files
read-only (``np.load(mmap_mode="r")``): the pages are the operating system's file cache, shared
by the API processes and the job workers, and nothing is parsed again.

PRIVATE: the files are the data itself (and the manifest holds the exact row count). They stay
inside the data folder, owner-only (0700 folder, 0600 files), and no endpoint serves them.
A missing file, a checksum or format-version mismatch, or columns built for other metadata raise
:class:`PackedFormatError`, whose message (for the owner) says what to do.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from dpmine.wire.datasets import (
    AnyAttribute,
    BooleanAttribute,
    CategoricalAttribute,
    DatasetMetadata,
)
from dpmine_server.data.bitsets import Bitset
from dpmine_server.data.columns import (
    BooleanColumn,
    CategoricalColumn,
    Column,
    ColumnStore,
    ItemColumns,
    NumericColumn,
)

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "LOAD_BUFFER_BYTES",
    "MANIFEST_FILE",
    "PACKED_DIR",
    "PackedFormatError",
    "available_memory",
    "fit_problem",
    "map_packed",
    "metadata_digest",
    "packed_bytes_bound",
    "write_packed",
]

#: The folder of a version's packed columns, beside its stored source.
PACKED_DIR: Final = "packed"
MANIFEST_FILE: Final = "manifest.json"
FORMAT: Final = "dpmine-packed-columns"
#: Bumped whenever the files or their meaning change; older folders are refused.
FORMAT_VERSION: Final = 1
_CHUNK: Final = 1 << 23  # bytes checksummed per read
_WORD_BYTES: Final = 8

AnyArray = npt.NDArray[Any]


class PackedFormatError(Exception):
    """A version's packed columns cannot be used; the message (owner only) says what to do."""


def _fix(folder: Path, why: str) -> PackedFormatError:
    return PackedFormatError(
        f"the packed columns in {folder} {why}. They were written when the dataset was "
        "registered and are its data: restore the folder from a backup, or delete it and "
        "restart the server to rebuild it from the stored source beside it (or register the "
        "dataset again). The server does not serve a dataset whose packed columns are damaged."
    )


def metadata_digest(metadata: DatasetMetadata) -> str:
    """SHA-256 of the public metadata as stored (sorted JSON), so that columns built for other
    metadata are never mapped under this one."""
    text = json.dumps(metadata.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def packed_bytes_bound(metadata: DatasetMetadata, *, occurrences: int | None = None) -> int:
    """Upper bound on the bytes of the packed columns of a table of ``n_max`` rows (public):
    two bitsets per Boolean column, int32 codes per categorical column, float64 values, a
    presence bitset and int64 sorted order per numeric column. For transactions, int32 row
    indices per (row, item) occurrence: at most ``n_max`` × the row-width bound, or the given
    ``occurrences`` bound if smaller (the owner's file size, at registration), plus the item
    pointers."""
    n_max = metadata.n_max
    bitset = -(-n_max // 64) * _WORD_BYTES
    if metadata.kind == "transactions":
        width = metadata.max_row_width or max(len(metadata.items), 1)
        pairs = n_max * width if occurrences is None else min(n_max * width, occurrences)
        return 4 * pairs + _WORD_BYTES * (len(metadata.items) + 1)
    total = 0
    for attribute in metadata.attributes:
        if isinstance(attribute, BooleanAttribute):
            total += 2 * bitset
        elif isinstance(attribute, CategoricalAttribute):
            total += 4 * n_max + bitset  # codes, and the presence bitset built on first use
        else:
            total += 16 * n_max + bitset
    return total


def _column_arrays(column: Column) -> dict[str, AnyArray]:
    if isinstance(column, BooleanColumn):
        return {"true": column.true.words, "present": column.present.words}
    if isinstance(column, CategoricalColumn):
        return {"codes": column.codes}
    return {"values": column.values, "present": column.present.words, "order": column.sorted_order}


def _store_arrays(store: ColumnStore) -> dict[str, AnyArray]:
    """Every array of the store, by file stem (attributes by position: names may be any text)."""
    if store.metadata.kind == "transactions":
        return {"indptr": store.items.indptr, "indices": store.items.indices}
    arrays: dict[str, AnyArray] = {}
    for position, attribute in enumerate(store.metadata.attributes):
        for part, array in _column_arrays(store.column(attribute.name)).items():
            arrays[f"a{position}.{part}"] = array
    return arrays


def _crc32(path: Path) -> int:
    value = 0
    with path.open("rb") as handle:
        while block := handle.read(_CHUNK):
            value = zlib.crc32(block, value)
    return value


def _write_private(path: Path, array: AnyArray) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        np.save(handle, np.ascontiguousarray(array), allow_pickle=False)
        handle.flush()
        os.fsync(handle.fileno())


#: Arrays written or verified at once: each file's write, fsync and CRC pass release the GIL,
#: so the disk and the CRC of several files overlap (10^7 rows × 50 columns: 10.6 s on one thread).
IO_THREADS: Final = 4


def _write_array(staging: Path, stem: str, array: AnyArray) -> dict[str, Any]:
    """Write one array as ``staging/<stem>.npy``; its manifest entry (CRC-32 of the file read
    back from disk)."""
    path = staging / f"{stem}.npy"
    _write_private(path, array)
    return {
        "file": path.name,
        "dtype": np.dtype(array.dtype).str,
        "shape": list(array.shape),
        "crc32": _crc32(path),
    }


def write_packed(store: ColumnStore, version_dir: Path) -> bool:
    """Write the store's arrays to ``version_dir/packed`` (owner-only), all or nothing: into a
    hidden folder renamed at the end. False if the folder exists already (another process wrote
    it first: the same columns, from the same stored source); it is left as it is."""
    target = version_dir / PACKED_DIR
    if target.exists():
        return False
    staging = version_dir / f".packed-{uuid.uuid4().hex}"
    staging.mkdir(mode=0o700)
    try:
        arrays = _store_arrays(store)
        with ThreadPoolExecutor(IO_THREADS, thread_name_prefix="dpmine-pack") as pool:
            files = list(
                pool.map(lambda stem: _write_array(staging, stem, arrays[stem]), list(arrays))
            )
        manifest = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "metadata": metadata_digest(store.metadata),
            "n_rows": store.n_rows,
            "arrays": files,
        }
        descriptor = os.open(staging / MANIFEST_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            json.dump(manifest, handle, indent=1)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            staging.rename(target)
        except OSError:
            if target.is_dir():
                return False  # written meanwhile by another process
            raise
        return True
    finally:
        shutil.rmtree(staging, ignore_errors=True)


@dataclass(frozen=True)
class _Manifest:
    n_rows: int
    arrays: dict[str, dict[str, Any]]


def _read_manifest(folder: Path, metadata: DatasetMetadata) -> _Manifest:
    try:
        manifest = json.loads((folder / MANIFEST_FILE).read_text())
    except FileNotFoundError:
        raise _fix(folder, f"have no {MANIFEST_FILE}") from None
    except (OSError, ValueError) as error:
        raise _fix(folder, f"have an unreadable {MANIFEST_FILE} ({error})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise _fix(folder, f"have a {MANIFEST_FILE} that is not a {FORMAT} manifest")
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        raise _fix(
            folder, f"are in format version {version!r}; this server reads version {FORMAT_VERSION}"
        )
    if manifest.get("metadata") != metadata_digest(metadata):
        raise _fix(folder, "were built for other metadata than the dataset's")
    try:
        n_rows = int(manifest["n_rows"])
        arrays = {str(entry["file"]): dict(entry) for entry in manifest["arrays"]}
    except (KeyError, TypeError, ValueError):
        raise _fix(folder, f"have a {MANIFEST_FILE} without its row count or file list") from None
    return _Manifest(n_rows, arrays)


def _verify_checksums(folder: Path, manifest: _Manifest) -> None:
    """Every array the manifest lists against its CRC-32, on :data:`IO_THREADS` threads (the
    CRC passes release the GIL: 10^7 rows × 50 columns took 2.3 s on one thread)."""

    def verify(name: str) -> None:
        if Path(name).name != name or not name.endswith(".npy"):
            raise _fix(folder, f"list {name!r} in {MANIFEST_FILE}, not an array file of the folder")
        try:
            crc = _crc32(folder / name)
        except FileNotFoundError:
            raise _fix(folder, f"have no {name}") from None
        except OSError as error:
            raise _fix(folder, f"hold an unreadable {name} ({error})") from None
        if crc != manifest.arrays[name].get("crc32"):
            raise _fix(folder, f"hold a corrupt {name} (its CRC-32 differs from the manifest's)")

    with ThreadPoolExecutor(IO_THREADS, thread_name_prefix="dpmine-crc") as pool:
        list(pool.map(verify, sorted(manifest.arrays)))


def _map(folder: Path, manifest: _Manifest, stem: str) -> AnyArray:
    """One array (its CRC-32 verified by :func:`_verify_checksums`), checked against the
    manifest (dtype, shape) and mapped read-only."""
    name = f"{stem}.npy"
    entry = manifest.arrays.get(name)
    path = folder / name
    if entry is None:
        raise _fix(folder, f"do not list {name} in {MANIFEST_FILE}")
    try:
        mapped = np.load(path, mmap_mode="r", allow_pickle=False)
    except FileNotFoundError:
        raise _fix(folder, f"have no {name}") from None
    except (OSError, ValueError) as error:
        raise _fix(folder, f"hold an unreadable {name} ({error})") from None
    if mapped.dtype.str != entry.get("dtype") or list(mapped.shape) != entry.get("shape"):
        raise _fix(folder, f"hold a {name} of another dtype or shape than the manifest's")
    return np.asarray(mapped)  # a plain read-only view of the mapping (results are not memmaps)


def _mapped_column(
    attribute: AnyAttribute, folder: Path, manifest: _Manifest, position: int
) -> Column:
    """Attribute ``position``'s column from its mapped arrays (laid out by _column_arrays)."""
    n_rows = manifest.n_rows
    stem = f"a{position}"
    if isinstance(attribute, BooleanAttribute):
        true = Bitset(_map(folder, manifest, f"{stem}.true"), n_rows)
        return BooleanColumn(
            attribute.name, true, Bitset(_map(folder, manifest, f"{stem}.present"), n_rows)
        )
    if isinstance(attribute, CategoricalAttribute):
        codes = _map(folder, manifest, f"{stem}.codes")
        return CategoricalColumn(attribute.name, tuple(attribute.categories), codes)
    return NumericColumn(
        attribute.name,
        attribute.lo,
        attribute.hi,
        _map(folder, manifest, f"{stem}.values"),
        Bitset(_map(folder, manifest, f"{stem}.present"), n_rows),
        _map(folder, manifest, f"{stem}.order"),
    )


def map_packed(
    metadata: DatasetMetadata, version_dir: Path, *, check_crc: bool = True
) -> ColumnStore | None:
    """The store of ``version_dir/packed``, its arrays mapped read-only after their checksums
    are verified; None if the version has no packed folder (registered before the format).

    ``check_crc=False`` skips the checksum pass, for the folder that :func:`write_packed` has
    just written in this process (it read every file back from disk for its CRC-32, so a second
    pass reads the same bytes again: 10^7 rows × 50 columns, 2–3 s of a registration). Every
    other mapping (start-up, a worker's first call) verifies.

    Raises :class:`PackedFormatError` for a damaged, foreign or older-format folder.
    """
    folder = version_dir / PACKED_DIR
    if not folder.is_dir():
        return None
    manifest = _read_manifest(folder, metadata)
    if check_crc:
        _verify_checksums(folder, manifest)
    try:
        if metadata.kind == "transactions":
            items = ItemColumns(
                metadata.items,
                _map(folder, manifest, "indptr"),
                _map(folder, manifest, "indices"),
                manifest.n_rows,
            )
            return ColumnStore(metadata, n_rows=manifest.n_rows, items=items)
        columns = {
            attribute.name: _mapped_column(attribute, folder, manifest, position)
            for position, attribute in enumerate(metadata.attributes)
        }
        return ColumnStore(metadata, n_rows=manifest.n_rows, columns=columns)
    except ValueError as error:  # the constructors' consistency checks
        raise _fix(folder, f"do not form valid columns ({error})") from None


#: Memory a streaming load uses besides the columns (Arrow's read-ahead of 4 MiB blocks, one
#: chunk's converted arrays; measured by bench/bench_loading.py), with a margin.
LOAD_BUFFER_BYTES: Final = 512 << 20
_MEMINFO: Final = Path("/proc/meminfo")


def available_memory() -> int | None:
    """Bytes the kernel reports as available (``MemAvailable``); None where it does not."""
    try:
        for line in _MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def fit_problem(packed_bytes: int, *, memory: int | None, disk: int) -> str | None:
    """Why a load whose packed columns take up to ``packed_bytes`` would not fit, or None.

    A streaming load holds the columns being built and the finished ones (at most twice the
    packed size) plus :data:`LOAD_BUFFER_BYTES`; the packed files need ``packed_bytes`` of disk.
    """
    gib = 2**30
    need = 2 * packed_bytes + LOAD_BUFFER_BYTES
    if memory is not None and need > memory:
        return (
            f"loading it needs up to {need / gib:.2f} GiB of memory (its packed columns take up "
            f"to {packed_bytes / gib:.2f} GiB at the declared n_max) and {memory / gib:.2f} GiB "
            "are available; lower n_max to a tighter public bound, declare fewer columns, or "
            "free memory"
        )
    if packed_bytes > disk:
        return (
            f"its packed columns take up to {packed_bytes / gib:.2f} GiB at the declared n_max "
            f"and the data folder's disk has {disk / gib:.2f} GiB free; free disk space or lower "
            "n_max"
        )
    return None
