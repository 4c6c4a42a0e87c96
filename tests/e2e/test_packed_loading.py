"""Packed columns over a live server (issue #23 item 4, "lean loading"): registration writes them,
a restarted API process and its fresh job workers answer from them without the stored source,
and a damaged file stops the server with what to do, which works.

The stored source is deleted after registration: a process that parsed it again instead of
mapping the packed columns could not load the dataset, and its first call would fail.
"""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

import dpmine
from dpmine.queries import parse_query
from dpmine.wire import NoisyCountRequest, NoisyCountResponse
from support.datasets import count_rows, mushroom_rows, register_mushroom
from support.servers import Account, LiveServer, ServerStartError

WAIT_SECONDS = 300.0  # a fresh worker warms its compiled kernels first (slow on a busy machine)
BAND = 40  # P(|Laplace(1/0.5)| >= 40) < 1e-8


def _version_dir(server: LiveServer, dataset_id: str) -> Path:
    return server.data_dir / "datasets" / dataset_id / "v1"


def _edible() -> int:
    return count_rows(mushroom_rows(), lambda row: row["class"] == "e")


@pytest.fixture(scope="module")
def any_server(sqlite_server: LiveServer) -> LiveServer:
    """The data folder is on this machine whatever the database: SQLite is enough here."""
    return sqlite_server


@pytest.fixture
def server(sqlite_server: LiveServer) -> LiveServer:
    if not sqlite_server.is_running():
        sqlite_server.start()
    return sqlite_server


def test_a_restarted_server_and_its_job_workers_answer_from_the_packed_columns(
    server: LiveServer, owner: dpmine.Connection, analyst: Account
) -> None:
    info = register_mushroom(owner, epsilon_cap=10.0)
    owner.admin.grant(info.id, analyst.name, 3.0)
    folder = _version_dir(server, info.id)
    packed = folder / "packed"
    assert (packed / "manifest.json").is_file()
    assert stat.S_IMODE(packed.stat().st_mode) == 0o700
    sources = [path for path in folder.iterdir() if path.is_file()]
    assert sources, "the stored source is kept beside the packed columns"
    for path in sources:
        path.unlink()

    server.restart()
    with dpmine.connect(server.url, analyst.api_key, retries=0) as connection:
        dataset = connection.dataset(info.id)
        inline = dataset.count("[class = e]", epsilon=0.5)
        assert abs(inline.count - _edible()) <= BAND
        request = NoisyCountRequest(predicate=parse_query("[class = e]"), epsilon=0.5)
        submitted = dataset.submit("count.noisy", request)  # a fresh worker process
        done = connection.wait_for_job(submitted.id, timeout=WAIT_SECONDS)
    assert done.status == "done", done.message
    assert abs(NoisyCountResponse.model_validate(done.result).count - _edible()) <= BAND
    assert "could not be preloaded" not in server.log_text()


def test_a_damaged_packed_file_stops_the_server_until_it_is_rebuilt(
    server: LiveServer, owner: dpmine.Connection, analyst: Account
) -> None:
    info = register_mushroom(owner, epsilon_cap=10.0)
    owner.admin.grant(info.id, analyst.name, 1.0)
    packed = _version_dir(server, info.id) / "packed"
    damaged = next(path for path in sorted(packed.iterdir()) if path.suffix == ".npy")
    data = bytearray(damaged.read_bytes())
    data[-1] ^= 0x01
    damaged.write_bytes(bytes(data))

    server.stop()
    with pytest.raises(ServerStartError, match=f"corrupt {damaged.name}"):
        server.start(timeout=60.0)
    assert "delete it and restart the server to rebuild it" in server.log_text()

    for path in packed.iterdir():  # what the message says: delete the folder, restart
        path.unlink()
    packed.rmdir()
    server.start()
    assert (packed / "manifest.json").is_file()
    with dpmine.connect(server.url, analyst.api_key, retries=0) as connection:
        answer = connection.dataset(info.id).count("[class = e]", epsilon=0.5)
    assert abs(answer.count - _edible()) <= BAND
