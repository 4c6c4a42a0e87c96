"""Upload folders left by a process that died mid-upload are swept; a live process's never are
(api/upload_folders.py).

The owner of a folder is a real child process that made it with ``make_upload_folder`` and
wrote part of a file, as the upload routes do, and then waits: its lock is held by another
process, as it is when several server processes share one data folder. After the child is
SIGKILLed (no clean-up code runs), the kernel has dropped its lock and the sweep removes the
folder. A sweep that ignores the lock is shown to remove the live folder, so the survival check
can fail.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fastapi import FastAPI

from dpmine_server import app as app_module
from dpmine_server.api import upload_folders
from dpmine_server.api.upload_folders import (
    LOCK_NAME,
    UNLOCKED_MAX_AGE_S,
    make_upload_folder,
    sweep_uploads,
    uploads_dir,
)
from dpmine_server.settings import Settings
from support.inprocess import open_client

#: A process that makes an upload folder, writes part of a file into it, says where, and waits
#: (holding the folder's lock) until its stdin closes or it is killed.
_OWNER = """
import sys
from pathlib import Path

from dpmine_server.api.upload_folders import make_upload_folder

held = make_upload_folder(Path(sys.argv[1]))
(held.path / "path").write_bytes(b"patient,diagnosis\\n1,")
print(held.path, flush=True)
sys.stdin.read()
held.remove()
"""

PARTIAL = b"patient,diagnosis\n1,"


@contextmanager
def owner_process(uploads: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    """A live child process holding a fresh upload folder of ``uploads``, and that folder."""
    child = subprocess.Popen(
        [sys.executable, "-c", _OWNER, str(uploads)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        folder = Path(child.stdout.readline().strip())
        assert folder.parent == uploads, f"the owner process failed (exit {child.poll()})"
        yield child, folder
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=30)
        for stream in (child.stdin, child.stdout):
            if stream is not None:
                stream.close()


def kill(child: subprocess.Popen[str]) -> None:
    """SIGKILL: the process ends without running any of its clean-up."""
    child.kill()
    assert child.wait(timeout=30) == -9


def age(path: Path, seconds: float) -> None:
    """Set ``path``'s modification time ``seconds`` into the past."""
    then = time.time() - seconds
    os.utime(path, (then, then), follow_symlinks=False)


def live_folder_survives(uploads: Path) -> bool:
    """Whether a sweep leaves a folder whose owner is alive (and its partial file)."""
    with owner_process(uploads) as (_child, folder):
        sweep_uploads(uploads)
        return (folder / "path").read_bytes() == PARTIAL if folder.exists() else False


@pytest.fixture
def uploads(tmp_path: Path) -> Path:
    """An empty ``uploads/`` of a data folder."""
    return uploads_dir(tmp_path / "data")


class TestSweep:
    def test_a_live_owners_folder_stays_and_goes_once_the_owner_is_killed(
        self, *, uploads: Path
    ) -> None:
        with owner_process(uploads) as (child, folder):
            assert (folder / LOCK_NAME).is_file()
            assert sweep_uploads(uploads) == []
            assert (folder / "path").read_bytes() == PARTIAL
            kill(child)
            assert folder.exists()  # nothing of the killed process removed it
            assert sweep_uploads(uploads) == [folder]
        assert list(uploads.iterdir()) == []

    def test_a_sweep_that_ignores_the_lock_is_flagged(
        self, *, uploads: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The survival check of the test above can fail: with a lock test that always
        succeeds (as if no process held any folder), the live owner's folder is removed."""
        assert live_folder_survives(uploads)
        monkeypatch.setattr(upload_folders, "_try_lock", lambda _descriptor: True)
        assert not live_folder_survives(uploads)

    def test_lockless_entries_go_only_when_old(self, *, uploads: Path) -> None:
        """Entries without a lock file (an older version's folders, or a folder caught before
        its lock is in place) are removed once nothing in them changed for a day."""
        old, fresh, touched = uploads / "tmpold", uploads / "tmpfresh", uploads / "tmptouched"
        for folder in (old, fresh, touched):
            folder.mkdir()
            (folder / "path").write_bytes(PARTIAL)
        stray = uploads / "stray.csv"
        stray.write_bytes(PARTIAL)
        (fresh / (LOCK_NAME + ".new")).touch()  # made, not yet renamed into place
        for path in (old / "path", old, touched, stray):
            age(path, UNLOCKED_MAX_AGE_S + 60)
        age(touched / "path", UNLOCKED_MAX_AGE_S - 60)  # written to less than a day ago

        assert sorted(sweep_uploads(uploads)) == [stray, old]
        assert sorted(path.name for path in uploads.iterdir()) == ["tmpfresh", "tmptouched"]

    def test_this_process_keeps_its_own_folders(
        self, *, uploads: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A sweep before another upload of the same process leaves its live uploads, even where
        a lock would be granted to another descriptor of its owner's process (flock emulated by
        per-process POSIX locks, as on NFS: simulated by a lock test that always succeeds)."""
        first = make_upload_folder(uploads)
        monkeypatch.setattr(upload_folders, "_try_lock", lambda _descriptor: True)
        second = make_upload_folder(uploads)  # sweeps first
        assert sweep_uploads(uploads) == []
        assert sorted(path.name for path in uploads.iterdir()) == sorted(
            [first.path.name, second.path.name]
        )
        first.remove()
        second.remove()
        assert list(uploads.iterdir()) == []

    def test_a_new_upload_sweeps_a_dead_processes_folder(self, *, uploads: Path) -> None:
        with owner_process(uploads) as (child, folder):
            kill(child)
        held = make_upload_folder(uploads)
        try:
            assert not folder.exists()
            assert [path.name for path in uploads.iterdir()] == [held.path.name]
            assert (held.path / LOCK_NAME).is_file()
            assert held.path.stat().st_mode & 0o777 == 0o700
        finally:
            held.remove()

    def test_a_filesystem_without_locks_still_takes_uploads(
        self, *, uploads: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Where locks are refused, the folder is made without a lock file (swept by age, as
        an older version's) and a warning says so; the upload is not refused."""
        monkeypatch.setattr(upload_folders, "_try_lock", lambda _descriptor: False)
        held = make_upload_folder(uploads)
        assert (held.descriptor, list(held.path.iterdir())) == (-1, [])
        assert "refuses file locks" in caplog.text
        assert sweep_uploads(uploads) == []
        held.remove()
        assert list(uploads.iterdir()) == []

    def test_a_missing_uploads_folder_is_nothing_to_sweep(self, *, tmp_path: Path) -> None:
        assert sweep_uploads(tmp_path / "none") == []


class TestStartUp:
    def test_start_up_sweeps_a_dead_processes_folder(
        self, *, api_settings: Settings, app: FastAPI
    ) -> None:
        uploads = uploads_dir(api_settings.data_dir)
        with owner_process(uploads) as (_child, live):
            with owner_process(uploads) as (child, dead):
                kill(child)
            with open_client(app) as client:
                assert client.get("/v1/health").status_code == 200
                assert not dead.exists()
                assert (live / "path").read_bytes() == PARTIAL

    def test_a_failed_sweep_does_not_stop_start_up(
        self, *, app: FastAPI, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
    ) -> None:
        def refused(uploads: Path) -> list[Path]:
            raise PermissionError(13, "Permission denied", str(uploads))

        monkeypatch.setattr(app_module, "sweep_uploads", refused)
        with open_client(app) as client:
            assert client.get("/v1/health").status_code == 200
        assert "could not sweep the upload folders" in caplog.text
