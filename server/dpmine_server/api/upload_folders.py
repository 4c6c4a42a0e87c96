"""Upload folders that a process owns through an OS advisory lock, and the sweep that removes
the folders of processes that died mid-upload (SIGKILL, out of memory, power loss).

Each upload is received into a fresh folder of the data folder's ``uploads/``
(:func:`make_upload_folder`), which holds :data:`LOCK_NAME` locked with ``flock(LOCK_EX)`` for
as long as the folder exists. The kernel drops that lock when the descriptor's process ends,
however it ends, so a lock that can be taken means that no process owns the folder any more:
:func:`sweep_uploads` removes such folders, and leaves every folder whose lock is held. Several
processes may share one data folder (``uvicorn --workers``, replicas on a shared filesystem) and
start at different times; the lock, not a start time or a process id, says which folders are
live, so a process's sweep never removes a folder that another live process is writing.

A folder without a lock file (made by a version without these locks, or by a process that died
in the instant between making the folder and locking it) is removed only when nothing in it has
changed for :data:`UNLOCKED_MAX_AGE_S` (one day). POSIX only (``fcntl``), as the server is.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import stat
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = [
    "LOCK_NAME",
    "UNLOCKED_MAX_AGE_S",
    "HeldUploadFolder",
    "make_upload_folder",
    "sweep_uploads",
    "uploads_dir",
]

logger = logging.getLogger(__name__)

#: The lock file inside each upload folder (no form field has this name).
LOCK_NAME: Final = ".owner.lock"
#: Age (seconds since anything in it last changed) after which an entry of ``uploads/`` without
#: a lock file is removed: one day.
UNLOCKED_MAX_AGE_S: Final = 24 * 3600.0

_OPEN_FLAGS: Final = os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW

#: This process's live upload folders, as (device, inode, name): the sweep skips them without
#: opening their lock file. flock locks belong to one open file, so another descriptor of this
#: process could not take them on a local filesystem anyway; where flock is emulated with
#: per-process POSIX locks (NFS), it could, and closing that descriptor would drop the owner's.
_held: set[tuple[int, int, str]] = set()
_held_guard = threading.Lock()


def _try_lock(descriptor: int) -> bool:
    """Take the exclusive lock without waiting; False if another open file holds it (or the
    filesystem cannot say: a folder is never removed on a doubt)."""
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


@dataclass(frozen=True)
class HeldUploadFolder:
    """A fresh upload folder and the open, locked descriptor of its lock file (-1 where the
    filesystem has no locks: the folder then counts as one without a lock file)."""

    path: Path
    descriptor: int
    key: tuple[int, int, str]

    def remove(self) -> None:
        """Remove the folder, then let go of the lock: the lock is held until the folder is
        gone, so no sweep can take the folder for abandoned while it is being removed."""
        try:
            shutil.rmtree(self.path, ignore_errors=True)
        finally:
            with _held_guard:
                _held.discard(self.key)
            if self.descriptor >= 0:
                os.close(self.descriptor)


def _lock_new_folder(folder: Path) -> int:
    """Lock the new folder's lock file before it appears under :data:`LOCK_NAME`: it is made and
    locked under another name and renamed into place, so a sweep that opens ``LOCK_NAME`` finds
    it already locked. -1 (and no lock file) if the filesystem refuses locks."""
    staging = folder / (LOCK_NAME + ".new")
    descriptor = os.open(staging, _OPEN_FLAGS | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        if _try_lock(descriptor):
            staging.rename(folder / LOCK_NAME)
            return descriptor
        staging.unlink()
    except BaseException:
        os.close(descriptor)
        raise
    os.close(descriptor)
    logger.warning(
        "the filesystem of %s refuses file locks: an upload left by a crash is swept only "
        "after %.0f s",
        folder.parent,
        UNLOCKED_MAX_AGE_S,
    )
    return -1


def make_upload_folder(uploads: Path, *, sweep: bool = True) -> HeldUploadFolder:
    """A fresh, owner-only folder of ``uploads`` that this process owns until
    :meth:`HeldUploadFolder.remove`; with ``sweep``, the folders of dead processes go first
    (a sweep that fails is logged: the upload goes on)."""
    if sweep:
        try:
            sweep_uploads(uploads)
        except OSError as error:
            logger.warning("could not sweep %s: %s", uploads, error)
    folder = Path(tempfile.mkdtemp(prefix="upload-", dir=uploads))
    key = (-1, -1, folder.name)
    try:
        info = folder.lstat()
        key = (info.st_dev, info.st_ino, folder.name)
        with _held_guard:
            _held.add(key)
        descriptor = _lock_new_folder(folder)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        with _held_guard:
            _held.discard(key)
        raise
    return HeldUploadFolder(path=folder, descriptor=descriptor, key=key)


def uploads_dir(data_dir: Path, *, create: bool = True) -> Path:
    """Where uploads wait: the data folder's owner-only ``uploads/`` (inside the data folder, so
    that a dataset's folder takes the files by a rename); made if ``create``."""
    folder = data_dir / "uploads"
    if create:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return folder


def _newest_change(entry: Path, info: os.stat_result) -> float:
    """The latest modification time of ``entry`` and, for a folder, of what it holds (the
    folders uploads use are flat)."""
    newest = info.st_mtime
    if stat.S_ISDIR(info.st_mode):
        with os.scandir(entry) as children:
            for child in children:
                with contextlib.suppress(FileNotFoundError):
                    newest = max(newest, child.stat(follow_symlinks=False).st_mtime)
    return newest


def _remove(entry: Path, info: os.stat_result) -> None:
    if stat.S_ISDIR(info.st_mode):
        shutil.rmtree(entry)
    else:
        entry.unlink()


def _sweep_locked(entry: Path) -> bool | None:
    """Remove the folder ``entry`` if its lock file can be locked; True if removed, False if
    left (a live process holds the lock), None if it has no lock file."""
    lock = entry / LOCK_NAME
    try:
        descriptor = os.open(lock, _OPEN_FLAGS)
    except FileNotFoundError:
        return None
    try:
        if not _try_lock(descriptor):
            return False  # a live process holds the folder
        # The lock file is still this folder's: another sweep may have removed the folder
        # between our open and our lock (lstat raises FileNotFoundError then).
        opened, current = os.fstat(descriptor), lock.lstat()
        if (opened.st_dev, opened.st_ino) != (current.st_dev, current.st_ino):
            return False
        shutil.rmtree(entry)  # under the lock: no other sweep takes the folder meanwhile
        return True
    finally:
        os.close(descriptor)


def _sweep_entry(entry: Path, max_age_s: float) -> bool:
    """Remove one entry of ``uploads/`` if its owner is gone; True if it was removed."""
    info = entry.lstat()
    if stat.S_ISDIR(info.st_mode):
        with _held_guard:
            if (info.st_dev, info.st_ino, entry.name) in _held:
                return False  # this process's own upload
        locked = _sweep_locked(entry)
        if locked is not None:
            return locked
    if time.time() - _newest_change(entry, info) <= max_age_s:
        return False
    _remove(entry, info)
    return True


def sweep_uploads(uploads: Path, *, max_age_s: float = UNLOCKED_MAX_AGE_S) -> list[Path]:
    """Remove the entries of ``uploads`` that no live process owns, and return them.

    A folder whose lock file can be locked (without waiting) is removed under that lock: its
    owner is gone, since the kernel holds an owner's lock until the owner ends. A folder whose
    lock is held is left. An entry without a lock file is removed once nothing in it has changed
    for ``max_age_s`` (:data:`UNLOCKED_MAX_AGE_S`, one day). An entry that cannot be checked or
    removed is logged and left; a missing ``uploads`` is nothing to sweep. Other errors reading
    ``uploads`` itself raise :class:`OSError`.
    """
    try:
        with os.scandir(uploads) as entries:
            names = [entry.name for entry in entries]
    except FileNotFoundError:
        return []
    removed: list[Path] = []
    for name in names:
        entry = uploads / name
        try:
            if _sweep_entry(entry, max_age_s):
                removed.append(entry)
        except FileNotFoundError:
            continue  # removed meanwhile (by its owner or another sweep)
        except OSError as error:
            logger.warning("could not sweep the upload folder %s: %s", entry, error)
    if removed:  # a warning: it means that a process died mid-upload
        logger.warning(
            "removed %d upload folder(s) left by processes that ended mid-upload: %s",
            len(removed),
            ", ".join(path.name for path in removed),
        )
    return removed
