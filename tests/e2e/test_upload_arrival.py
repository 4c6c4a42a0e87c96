"""A registration parses its CSV upload as the bytes arrive (api/routes/admin.py,
data/arriving.py), over real HTTP on a real server.

The body is sent by hand in two parts with a pause between them. While the second part is held
back, the registration has already started: the upload, renamed to its stored name inside its
upload folder, is what the loader reads. Its outcome is the one of the same form registered
after the upload (the file part sent before ``request``, which waits for the whole form): the
same report, the same stored file, the same error. A client that goes away, or a form that
turns out malformed after its file, registers nothing and leaves no dataset folder.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import dpmine
from dpmine.wire import CreateDatasetRequest, CsvSource
from support.datasets import table_metadata, unique_id, write_table_csv
from support.servers import LiveServer, sqlite_server, wait_for

BOUNDARY = "dpmine-arrival"
ROUTE = "/v1/admin/datasets/upload"


def text_part(name: str, value: str) -> bytes:
    return (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'
    ).encode()


def file_head(name: str = "path", filename: str = "patients.csv") -> bytes:
    return (
        f"--{BOUNDARY}\r\n"
        f'Content-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'
        "Content-Type: text/csv\r\n\r\n"
    ).encode()


END = f"--{BOUNDARY}--\r\n".encode()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LiveServer]:
    with sqlite_server(tmp_path, "arrival") as live:
        yield live


def request_json(dataset_id: str) -> str:
    return CreateDatasetRequest(
        id=dataset_id,
        name="arriving table",
        epsilon_cap=1.0,
        metadata=table_metadata(),
        source=CsvSource(path="patients.csv"),
    ).model_dump_json()


def send_in_two(
    server: LiveServer, first: bytes, rest: bytes, *, between: Callable[[], None]
) -> tuple[int, dict[str, object]]:
    """POST ``first + rest`` as one multipart body, calling ``between()`` after ``first``."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        connection.putrequest("POST", ROUTE)
        connection.putheader("Authorization", f"Bearer {server.owner_key}")
        connection.putheader("Content-Type", f"multipart/form-data; boundary={BOUNDARY}")
        connection.putheader("Content-Length", str(len(first) + len(rest)))
        connection.endheaders()
        connection.send(first)
        between()
        connection.send(rest)
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def stored_names(uploads: Path) -> list[str]:
    """The files of the upload folders that carry their stored name (``path-<file name>``)."""
    return sorted(path.name for path in uploads.glob("upload-*/path-*"))


def registration_started(uploads: Path) -> None:
    """Wait until the registration has renamed the upload to its stored name: it has started
    and reads the file where it is written."""
    wait_for("the registration to start", lambda: stored_names(uploads) == ["path-patients.csv"])


def nothing() -> None:
    """Send the rest at once."""


@pytest.mark.parametrize("bad_cell", [False, True], ids=["good file", "a bad cell"])
def test_a_registration_parsing_as_it_arrives_ends_as_one_after_the_upload(
    server: LiveServer, tmp_path: Path, bad_cell: bool
) -> None:
    source = write_table_csv(tmp_path)
    data = source.read_bytes()
    if bad_cell:
        data = data.replace(b"\n", b"\n200,maybe,north,1\n", 1)  # line 2: not a Boolean
    half = len(data) // 2
    uploads = server.data_dir / "uploads"
    early_id, late_id = unique_id("early"), unique_id("late")

    def started_before_the_rest() -> None:
        wait_for(
            "the registration to start", lambda: stored_names(uploads) == ["path-patients.csv"]
        )

    early = send_in_two(
        server,
        text_part("request", request_json(early_id)) + file_head() + data[:half],
        data[half:] + b"\r\n" + END,
        between=lambda: registration_started(uploads),
    )
    # The file part first: the registration waits for the whole form (the reference).
    late = send_in_two(
        server,
        file_head() + data[:half],
        data[half:] + b"\r\n" + text_part("request", request_json(late_id)) + END,
        between=nothing,
    )
    assert early[0] == late[0] == (422 if bad_cell else 201)
    if bad_cell:
        assert early[1] == late[1]
        assert "line 2: value 'maybe' is not a Boolean" in json.dumps(early[1])
        assert not (server.data_dir / "datasets" / early_id).exists()
        return
    assert early[1]["report"] == late[1]["report"]
    assert early[1]["warnings"] == late[1]["warnings"]
    for dataset_id in (early_id, late_id):
        stored = server.data_dir / "datasets" / dataset_id / "v1" / "path-patients.csv"
        assert stored.read_bytes() == data
    wait_for("the upload folders to go", lambda: not list(uploads.glob("upload-*")))


def test_a_client_gone_mid_file_registers_nothing(server: LiveServer, tmp_path: Path) -> None:
    data = write_table_csv(tmp_path).read_bytes()
    uploads = server.data_dir / "uploads"
    dataset_id = unique_id("gone")
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    connection.putrequest("POST", ROUTE)
    connection.putheader("Authorization", f"Bearer {server.owner_key}")
    connection.putheader("Content-Type", f"multipart/form-data; boundary={BOUNDARY}")
    connection.putheader("Content-Length", str(10 * len(data)))
    connection.endheaders()
    connection.send(text_part("request", request_json(dataset_id)) + file_head() + data)
    registration_started(uploads)
    connection.close()  # gone, with most of the announced body unsent
    wait_for("the upload folder to go", lambda: not list(uploads.glob("upload-*")))
    assert not (server.data_dir / "datasets" / dataset_id).exists()
    with dpmine.connect(server.url, server.owner_key, retries=0) as owner:
        assert dataset_id not in [info.id for info in owner.datasets()]


def test_a_form_malformed_after_its_whole_file_registers_nothing(
    server: LiveServer, tmp_path: Path
) -> None:
    """The loader has every byte of the file, but the form is refused after it: the arrival is
    never declared done, so the registration cannot complete."""
    data = write_table_csv(tmp_path).read_bytes()
    uploads = server.data_dir / "uploads"
    dataset_id = unique_id("malformed")

    def started() -> None:
        wait_for(
            "the registration to start", lambda: stored_names(uploads) == ["path-patients.csv"]
        )

    status, body = send_in_two(
        server,
        text_part("request", request_json(dataset_id)) + file_head() + data,
        b"\r\n" + text_part("colour", "blue") + END,
        between=lambda: registration_started(uploads),
    )
    assert status == 422
    assert "unknown form field 'colour'" in json.dumps(body)
    assert not (server.data_dir / "datasets" / dataset_id).exists()
    with dpmine.connect(server.url, server.owner_key, retries=0) as owner:
        assert dataset_id not in [info.id for info in owner.datasets()]
