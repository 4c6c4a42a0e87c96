"""A server killed (SIGKILL) in the middle of uploads leaves their folders and partial files in
the data folder's ``uploads/``; the next server started on that data folder removes them at
start-up and touches nothing else (api/upload_folders.py).

Two uploads, one to register a dataset and one to propose metadata, are sent by raw sockets:
the form's head and more than one write block of the file, then nothing more (a client still
sending). Once both partial files are on disk, the server is killed; its folders are still
there (no clean-up code ran). A folder without a lock file written less than a day ago (an
older version's upload that may still be under way) must outlive the restart, and so must every
file of the dataset registered before.
"""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

import dpmine
from dpmine.wire import CreateDatasetRequest, CsvSource
from dpmine_server.api.uploads import WRITE_BLOCK_BYTES
from support.datasets import register_table, table_metadata, unique_id
from support.servers import LiveServer, sqlite_server, wait_for

BOUNDARY = "dpmine-never-ends"
#: Body sent before the client stalls: more than one write block, so file bytes reach the disk.
SENT_FILE_BYTES = WRITE_BLOCK_BYTES + 64 * 1024
#: The announced body: far more than is ever sent.
ANNOUNCED_BYTES = 4 * SENT_FILE_BYTES

Snapshot = dict[str, tuple[int, int]]


def form_head(fields: dict[str, str]) -> bytes:
    """The text parts, then the head of the file part ``path``."""
    parts = [
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'
        for name, value in fields.items()
    ]
    parts.append(
        f"--{BOUNDARY}\r\n"
        'Content-Disposition: form-data; name="path"; filename="patients.csv"\r\n'
        "Content-Type: text/csv\r\n\r\n"
    )
    return "".join(parts).encode()


def stalled_upload(server: LiveServer, route: str, fields: dict[str, str]) -> socket.socket:
    """Send the head of an upload and part of its file, and leave the body unfinished."""
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    sock.sendall(
        (
            f"POST {route} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {server.owner_key}\r\n"
            f"Content-Type: multipart/form-data; boundary={BOUNDARY}\r\n"
            f"Content-Length: {ANNOUNCED_BYTES}\r\n\r\n"
        ).encode()
        + form_head(fields)
    )
    row = b"7,1,0,green,42.5\n"
    sock.sendall(row * (SENT_FILE_BYTES // len(row) + 1))
    return sock


def partial_files(uploads: Path) -> dict[Path, int]:
    """The file parts being received: path → bytes on disk. A registration that parses its
    CSV as it arrives has renamed the part to its stored name (``path-<file name>``) inside the
    upload folder, where it stays until it has loaded."""
    return {
        path: path.stat().st_size
        for pattern in ("upload-*/path", "upload-*/path-*")
        for path in uploads.glob(pattern)
    }


def blocks_written(uploads: Path) -> int:
    """How many file parts have at least one write block on disk."""
    return sum(size >= WRITE_BLOCK_BYTES for size in partial_files(uploads).values())


def snapshot(data_dir: Path, *, leaving_out: set[Path]) -> Snapshot:
    """Every file under ``data_dir`` but those under ``leaving_out``: its size and modification
    time."""
    seen: Snapshot = {}
    for path in sorted(data_dir.rglob("*")):
        if any(path == left or left in path.parents for left in leaving_out):
            continue
        if path.is_dir():
            continue  # uploads/ itself loses entries; its files say what else changed
        info = path.stat()
        seen[path.relative_to(data_dir).as_posix()] = (info.st_size, info.st_mtime_ns)
    return seen


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LiveServer]:
    """A server of its own on SQLite (this test kills it)."""
    with sqlite_server(tmp_path, "uploads") as live:
        yield live


def test_a_restart_sweeps_the_uploads_of_a_killed_server(
    server: LiveServer, tmp_path: Path
) -> None:
    with dpmine.connect(server.url, server.owner_key, retries=0) as owner:
        kept = register_table(owner, tmp_path)
    uploads = server.data_dir / "uploads"
    legacy = uploads / "tmp-older-version"  # no lock file, written just now: may be live
    legacy.mkdir()
    (legacy / "patients.csv").write_bytes(b"patient,diagnosis\n")

    request = CreateDatasetRequest(
        id=unique_id("cut"),
        name="never finished",
        epsilon_cap=1.0,
        metadata=table_metadata(),
        source=CsvSource(path="patients.csv"),
    )
    source = json.dumps({"type": "csv", "path": "patients.csv"})
    with contextlib.ExitStack() as sockets:
        for route, fields in (
            ("/v1/admin/datasets/upload", {"request": request.model_dump_json()}),
            ("/v1/admin/datasets/propose-metadata", {"source": source, "kind": "table"}),
        ):
            sockets.enter_context(stalled_upload(server, route, fields))
        wait_for("both partial files to reach the disk", lambda: blocks_written(uploads) == 2)
        crashed = {path.parent for path in partial_files(uploads)}
        before = snapshot(server.data_dir, leaving_out=crashed)
        server.kill()

    # The defect: a crash runs no clean-up, so the partial files stay behind.
    assert {path.parent for path in partial_files(uploads)} == crashed
    server.start()
    assert not any(folder.exists() for folder in crashed)
    assert sorted(path.name for path in uploads.iterdir()) == [legacy.name]
    assert snapshot(server.data_dir, leaving_out=crashed) == before
    # The registration that was parsing its upload as it arrived left no folder of its own.
    assert not (server.data_dir / "datasets" / request.id).exists()
    assert "removed 2 upload folder(s)" in server.log_text()
    with dpmine.connect(server.url, server.owner_key, retries=0) as owner:
        assert kept.id in [info.id for info in owner.datasets()]
