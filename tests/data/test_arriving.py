"""Files read while an upload writes them (data/arriving.py), and the streaming CSV load on them.

A reader sees the bytes in order as they are flushed, never an end of file before the upload is
declared done, and an error (never a short file) if the upload fails. A CSV loaded while it
arrives in small irregular pieces gives exactly the columns and report of the whole file; one
whose upload fails is never loaded.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from dpmine.wire.datasets import (
    BooleanAttribute,
    CategoricalAttribute,
    CsvSource,
    DatasetMetadata,
    NumericAttribute,
)
from dpmine_server.data import csv_chunks, loaders
from dpmine_server.data.arriving import (
    ArrivingFile,
    UploadFailed,
    open_source,
    release,
    track,
    wait_arrived,
)
from dpmine_server.data.columns import BooleanColumn, CategoricalColumn, ColumnStore, NumericColumn
from dpmine_server.data.loaders import (
    DataValidationError,
    LoadReport,
    load_csv_streaming,
    load_store,
)

METADATA = DatasetMetadata(
    kind="table",
    n_max=10_000,
    attributes=[
        BooleanAttribute(name="flag"),
        CategoricalAttribute(name="colour", categories=["red", "green", "blue"]),
        NumericAttribute(name="size", lo=-10.0, hi=100.0),
    ],
)
#: Small enough that a 20 kB file spans many chunks (and many arrivals per chunk).
TINY_BLOCK = 64
#: How long a test lets a reader run to show that it is still waiting (a state, checked after).
SETTLE_S = 0.3


def _csv_text(n_rows: int, seed: int) -> bytes:
    """Every attribute type, missing values and quoted fields that span lines."""
    rng = np.random.default_rng(seed)
    lines = ["flag,colour,size,note"]
    for row in range(n_rows):
        flag = ["1", "0", "yes", "?"][rng.integers(4)]
        colour = ["red", "green", "blue", ""][rng.integers(4)]
        size = f"{rng.normal(20, 30):.{rng.integers(0, 6)}f}" if row % 9 else "?"
        note = f'"line {row},\nnext"' if row % 4 == 0 else f"n{row}"
        lines.append(f"{flag},{colour},{size},{note}")
    return ("\n".join(lines) + "\n").encode()


def _pieces(data: bytes, seed: int) -> Iterator[bytes]:
    """``data`` cut at random points (1–300 bytes a piece)."""
    rng = np.random.default_rng(seed)
    start = 0
    while start < len(data):
        end = min(len(data), start + int(rng.integers(1, 300)))
        yield data[start:end]
        start = end


class _Upload:
    """A file written piece by piece as the upload receiver writes it: flushed, then told."""

    def __init__(self, path: Path) -> None:
        self.handle = path.open("xb")
        self.state = track(self.handle)

    def write(self, piece: bytes) -> None:
        self.handle.write(piece)
        self.handle.flush()
        self.state.grew(self.handle.tell())

    def close(self) -> None:
        self.handle.close()
        release(self.state)


def _read_in_thread(path: Path, into: list[object]) -> threading.Thread:
    def read() -> None:
        try:
            with open_source(path) as handle:
                into.append(handle.read())
        except UploadFailed as error:
            into.append(error)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def test_a_reader_gets_every_byte_and_its_end_only_when_the_form_is_accepted(
    tmp_path: Path,
) -> None:
    path = tmp_path / "path"
    upload = _Upload(path)
    data = _csv_text(200, seed=1)
    got: list[object] = []
    reader = _read_in_thread(path, got)
    for piece in _pieces(data, seed=2):
        upload.write(piece)
    reader.join(SETTLE_S)
    assert reader.is_alive()
    assert not got
    upload.state.done()
    reader.join(30)
    assert got == [data]
    upload.close()


def test_a_failed_upload_fails_waiting_and_later_readers(tmp_path: Path) -> None:
    path = tmp_path / "path"
    upload = _Upload(path)
    upload.write(b"flag,colour,size\n1,red,3\n")
    got: list[object] = []
    reader = _read_in_thread(path, got)
    reader.join(SETTLE_S)
    assert reader.is_alive()
    upload.state.failed("the client went away")
    reader.join(30)
    assert len(got) == 1
    assert isinstance(got[0], UploadFailed)
    assert "the client went away" in str(got[0])
    with open_source(path) as handle, pytest.raises(UploadFailed):
        handle.read()
    with pytest.raises(UploadFailed):
        wait_arrived(path)
    upload.close()


def test_release_fails_an_unfinished_upload_and_forgets_the_file(tmp_path: Path) -> None:
    path = tmp_path / "path"
    upload = _Upload(path)
    upload.write(b"abc")
    state = upload.state
    upload.close()  # released before the form was accepted
    with pytest.raises(UploadFailed, match="before its form was accepted"):
        state.wait()
    with open_source(path) as handle:  # no longer arriving: a plain file
        assert handle.read() == b"abc"
    wait_arrived(path)  # returns at once


def test_the_file_is_found_after_a_rename(tmp_path: Path) -> None:
    upload = _Upload(tmp_path / "path")
    upload.write(b"x,y\n")
    moved = tmp_path / "path-t.csv"
    (tmp_path / "path").rename(moved)
    got: list[object] = []
    reader = _read_in_thread(moved, got)
    upload.write(b"1,2\n")
    upload.state.done()
    reader.join(30)
    assert got == [b"x,y\n1,2\n"]
    upload.close()


def test_a_done_state_stays_done_and_a_failed_one_failed() -> None:
    done, failed = ArrivingFile(), ArrivingFile()
    done.done()
    done.failed("too late")
    done.wait()
    failed.failed("first")
    failed.done()
    with pytest.raises(UploadFailed, match="first"):
        failed.wait()


def _load_while_arriving(path: Path, data: bytes, seed: int) -> tuple[ColumnStore, LoadReport]:
    """load_csv_streaming on ``path`` while another thread writes ``data`` into it."""
    upload = _Upload(path)

    def write() -> None:
        for piece in _pieces(data, seed):
            upload.write(piece)
        upload.state.done()

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        return load_csv_streaming(METADATA, path, "file 't.csv'", block_bytes=TINY_BLOCK)
    finally:
        writer.join(30)
        upload.close()


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_a_csv_loaded_as_it_arrives_equals_the_whole_file(tmp_path: Path, seed: int) -> None:
    data = _csv_text(400, seed)
    whole = tmp_path / "whole.csv"
    whole.write_bytes(data)
    expected_store, expected_report = load_csv_streaming(
        METADATA, whole, "file 't.csv'", block_bytes=TINY_BLOCK
    )
    store, report = _load_while_arriving(tmp_path / "path", data, seed)
    assert report == expected_report
    assert store.n_rows == expected_store.n_rows == 400
    assert _bytes(store) == _bytes(expected_store)


def _bytes(store: ColumnStore) -> list[bytes]:
    """Every array of the store's columns, as bytes."""
    flag, colour, size = (store.column(name) for name in ("flag", "colour", "size"))
    assert isinstance(flag, BooleanColumn)
    assert isinstance(colour, CategoricalColumn)
    assert isinstance(size, NumericColumn)
    arrays: list[npt.NDArray[np.generic]] = [flag.true.words, flag.present.words, colour.codes]
    arrays += [size.values, size.present.words, size.sorted_order]
    return [array.tobytes() for array in arrays]


def test_an_upload_that_fails_midway_is_never_loaded(tmp_path: Path) -> None:
    path = tmp_path / "path"
    upload = _Upload(path)
    data = _csv_text(400, seed=6)

    def write_half_then_fail() -> None:
        for piece in _pieces(data[: len(data) // 2], seed=7):
            upload.write(piece)
        upload.state.failed("the client went away")

    writer = threading.Thread(target=write_half_then_fail, daemon=True)
    writer.start()
    with pytest.raises(UploadFailed):
        load_store(METADATA, CsvSource(path="path"), base_dir=tmp_path)
    writer.join(30)
    upload.close()


@pytest.mark.parametrize("bad_cell", [True, False], ids=["and a bad cell", "alone"])
def test_the_quote_check_beside_the_parse_has_the_last_word(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad_cell: bool
) -> None:
    """A file with a stray quote goes to the whole-frame path even when the check, run beside
    the parse, ends after it: the parse's error (a bad cell) or its columns are not the answer,
    as when the check ran before the parse."""
    real_check = loaders._check_quotes

    def late_check(path: Path, delimiter: str, block_bytes: int) -> None:
        time.sleep(1.0)  # the 300-row parse ends first
        real_check(path, delimiter, block_bytes)

    monkeypatch.setattr(loaders, "_check_quotes", late_check)
    rows = [f"{i % 2},red,{i},n{i}" for i in range(300)]
    rows[250] = f'{"maybe" if bad_cell else "1"},red,1,x"y'  # a stray quote in the ignored note
    path = tmp_path / "t.csv"
    path.write_text("flag,colour,size,note\n" + "\n".join(rows) + "\n", encoding="utf-8")
    with pytest.raises(csv_chunks.UseFramePath):
        load_csv_streaming(METADATA, path, "file 't.csv'", block_bytes=TINY_BLOCK)
    if bad_cell:
        with pytest.raises(DataValidationError, match="'maybe' is not a Boolean"):
            load_store(METADATA, CsvSource(path="t.csv"), base_dir=tmp_path)
    else:
        store, _report = load_store(METADATA, CsvSource(path="t.csv"), base_dir=tmp_path)
        assert store.n_rows == 300
