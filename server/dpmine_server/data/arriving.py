"""Files still arriving: an upload's file part can be read while it is being written (issue #23
item 4, lean loading: a registration parses the CSV as its bytes arrive instead of after them).

The upload receiver (``api/uploads.py``) writes each file part in order and, after every write,
says how many bytes are on disk (:meth:`ArrivingFile.grew`); it says :meth:`~ArrivingFile.done`
only once the **whole form** has been received and checked, and :meth:`~ArrivingFile.failed`
otherwise. A reader opened with :func:`open_source` on such a file reads the bytes written so
far and waits for more, so:

* it never sees an end of file before the whole form has been accepted: a parse that
  finishes has read exactly the bytes of a complete, valid upload;
* if the upload fails (client gone, size limit, malformed form), every read raises
  :class:`UploadFailed`, so a registration built on a partial file cannot complete.

Files are found by their identity on disk (device and inode), which survives the rename that
moves an upload into its dataset's folder. :func:`wait_arrived` blocks until a file is whole,
for readers that open files by name (pandas, ``Path.read_bytes``). A file that is not arriving
opens and reads as any file.
"""

from __future__ import annotations

import io
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Final

if TYPE_CHECKING:  # collections.abc.Buffer from Python 3.12
    from typing_extensions import Buffer

__all__ = [
    "ArrivingFile",
    "UploadFailed",
    "open_source",
    "release",
    "track",
    "wait_arrived",
]


class UploadFailed(Exception):
    """The upload that was writing this file failed; the file is incomplete."""


class ArrivingFile:
    """How much of a file is on disk, and whether its upload is done or failed."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._size = 0
        self._done = False
        self._error: str | None = None
        #: The file's (device, inode), set by :func:`track`.
        self.identity: tuple[int, int] = (-1, -1)

    def grew(self, size: int) -> None:
        """``size`` bytes are now on disk (written and flushed), in order from the start."""
        with self._changed:
            self._size = max(self._size, size)
            self._changed.notify_all()

    def done(self) -> None:
        """The whole form was received and checked: the file ends at its current size."""
        with self._changed:
            if self._error is None:
                self._done = True
            self._changed.notify_all()

    def failed(self, why: str) -> None:
        """The upload failed: readers waiting or to come raise :class:`UploadFailed`."""
        with self._changed:
            if not self._done:
                self._error = why
            self._changed.notify_all()

    def available(self, position: int) -> int:
        """Bytes readable from ``position`` without waiting past the upload: waits until some
        are on disk; 0 once the file is done and ``position`` is its end. Raises
        :class:`UploadFailed` if the upload failed."""
        with self._changed:
            while True:
                if self._error is not None:
                    raise UploadFailed(self._error)
                if self._size > position:
                    return self._size - position
                if self._done:
                    return 0
                self._changed.wait()

    def wait(self) -> None:
        """Block until the file is whole; :class:`UploadFailed` if its upload failed."""
        with self._changed:
            while not self._done:
                if self._error is not None:
                    raise UploadFailed(self._error)
                self._changed.wait()


_Identity = tuple[int, int]
_REGISTRY: Final[dict[_Identity, ArrivingFile]] = {}
_REGISTRY_LOCK: Final = threading.Lock()


def _identity(stat: os.stat_result) -> _Identity:
    return (stat.st_dev, stat.st_ino)


def _lookup(identity: _Identity) -> ArrivingFile | None:
    with _REGISTRY_LOCK:
        return _REGISTRY.get(identity)


def track(handle: BinaryIO) -> ArrivingFile:
    """Mark the file open as ``handle`` (empty, just created) as arriving, until
    :func:`release`."""
    state = ArrivingFile()
    state.identity = _identity(os.fstat(handle.fileno()))
    with _REGISTRY_LOCK:
        _REGISTRY[state.identity] = state
    return state


def release(state: ArrivingFile) -> None:
    """Stop tracking a file: called once nothing reads it as arriving any more. A state that is
    neither done nor failed is failed first, so that no reader waits for bytes that will never
    come."""
    state.failed("the upload ended before its form was accepted")
    with _REGISTRY_LOCK:
        if _REGISTRY.get(state.identity) is state:
            del _REGISTRY[state.identity]


class _ArrivingReader(io.RawIOBase):
    """A raw reader of an arriving file: each read returns bytes already on disk, waiting for
    them if needed; the end of the file is the end of a done upload."""

    def __init__(self, descriptor: int, state: ArrivingFile) -> None:
        super().__init__()
        self._descriptor = descriptor
        self._state = state
        self._position = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Buffer, /) -> int:
        view = memoryview(buffer).cast("B")
        if not len(view):
            return 0
        wanted = min(len(view), self._state.available(self._position))
        if wanted == 0:
            return 0
        count = os.preadv(self._descriptor, [view[:wanted]], self._position)
        self._position += count
        return count

    def close(self) -> None:
        if not self.closed:
            os.close(self._descriptor)
        super().close()


def open_source(path: Path) -> BinaryIO:
    """``path`` opened for reading bytes (buffered). If it is an arriving upload, reads wait
    for its bytes and end where the accepted upload ends (module docstring)."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        state = _lookup(_identity(os.fstat(descriptor)))
    except BaseException:
        os.close(descriptor)
        raise
    if state is None:
        return os.fdopen(descriptor, "rb")
    return io.BufferedReader(_ArrivingReader(descriptor, state))


def wait_arrived(path: Path) -> None:
    """Block until ``path`` is whole if it is an arriving upload (for readers that open it by
    name); :class:`UploadFailed` if its upload failed. A missing file returns at once (the
    reader reports it)."""
    try:
        identity = _identity(path.stat())
    except OSError:
        return
    state = _lookup(identity)
    if state is not None:
        state.wait()
