"""Overruns fail closed: a charged request's kernel either finishes before its padded deadline
or releases nothing (DESIGN.md contract item 7; issue #20, "queues on a public schedule").

The padding budget (services/timing.py) bounds every kernel's work by a public function of its
public parameters, priced at about three times the measured worst case, so a kernel finishes in
time except with a small probability (``bench/bench_budgets.py`` measures it per operation).
When one does not, showing its release late would put a data-dependent time on the wire. So
the request is settled *at its deadline* instead: as a failure whose charge stands, whatever
the kernel does afterwards.

Who settles first is decided once, under a lock: the kernel by :meth:`ReleaseGuard.claim` when
its release is computed (before it is stored), or the deadline by :meth:`ReleaseGuard.expire`.
Exactly one of the two succeeds. A kernel that loses has its release withheld (the ledger entry
is failed, the charge stands); it is stopped early: at once, if it is inside its kernel proper
(:meth:`ReleaseGuard.stoppable`), else at its next public progress call
(:meth:`ReleaseGuard.progress`).

Why stop it at once. An abandoned kernel keeps a core (and, between its compiled calls, the
interpreter lock of its process) until it stops, and what it does then depends on the data: the
request's own answer is already settled at T, but a job queued behind it on the same worker, or
another request on the same machine, would be slowed by a data-dependent amount
(tests/privacy/test_audit_overruns.py). :meth:`ReleaseGuard.expire` therefore raises an
exception in the kernel's thread (``PyThreadState_SetAsyncExc``), delivered at its next
interpreted instruction; a compiled call runs to its return first, and the one compiled kernel
whose single call can run long (the itemset miner) reads the guard's stop flag between its
steps (``dpmine_server.compiled.stop_flag``), which the expiry sets. The exception
is raised only inside :meth:`ReleaseGuard.stoppable`, which wraps the pure kernel call alone
(no database, no shared state to leave half-written), and any undelivered one is cleared when
the thread leaves it, so it never lands in the ledger's bookkeeping.

Proof sketch of what an analyst sees. Let T be the public deadline. If the kernel claims before
T, the release is shown at T, as without this module. Otherwise the answer at T is the overrun
failure, shown at T. Either way the answer comes at T; only *which* answer it is depends on the
data, and the overrun branch has probability at most the operation's measured overrun rate,
which is the δ the timing channel adds.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

import numpy as np

from dpmine_server.compiled import STOP_FLAG
from dpmine_server.errors import OperationFailed
from dpmine_server.services.kernel_lane import LanePlace

__all__ = ["OVERRAN", "ReleaseGuard"]

#: What the analyst reads when a request overran its deadline (owner-facing details are in the
#: server log; nothing here depends on the data).
OVERRAN = (
    "the operation did not finish within its padded time budget, so nothing was released and "
    "the charge stands (releasing it late would reveal how long the data took). Ask the "
    "owner to raise DPMINE_TIMING_SCALE; a retry with a new Idempotency-Key is charged again"
)

_State = Literal["running", "claimed", "expired"]


class _Abandoned(Exception):
    """Raised in an expired kernel's thread; :meth:`ReleaseGuard.stoppable` turns it into the
    overrun failure, and the executor treats one delivered on the way out of it as any error of
    an expired request: the overrun failure (services/executor.py, ``finish``). Not a
    ``ServerError``: it never reaches the wire. No kernel catches ``Exception`` broadly, so none
    swallows it."""


def _raise_in_thread(thread_id: int, exception: type[BaseException] | None) -> None:
    """Schedule ``exception`` in the thread ``thread_id`` (``None``: clear a scheduled one)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), None if exception is None else ctypes.py_object(exception)
    )


class ReleaseGuard:
    """Decides, once, whether a charged request settles by its kernel or by its deadline.

    With a reserved ``place`` in its process's kernel lane (services/kernel_lane.py), the
    kernel waits for its turn when it enters :meth:`stoppable` and gives it up when its release
    is claimed, or when an expired kernel has really stopped (not at the expiry itself: a
    kernel still inside a compiled call would otherwise share the lane with the next one)."""

    def __init__(self, place: LanePlace | None = None) -> None:
        self._lock = threading.Lock()
        self._state: _State = "running"
        self._kernel_thread: int | None = None
        self._stop = np.zeros(1, dtype=np.uint8)  # read by compiled loops (compiled.py)
        self.entry_ids: list[int] = []
        self.place = place

    def bind(self, entry_id: int) -> None:
        """Record the ledger entry of the charged request (set when it is charged)."""
        self.entry_ids = [entry_id]

    def bind_many(self, entry_ids: list[int]) -> None:
        """Record the ledger entries of a charged batch (one per part)."""
        self.entry_ids = list(entry_ids)

    def claim(self) -> bool:
        """The kernel's release is ready: True if it may be stored and shown (the deadline has
        not been taken), after which :meth:`expire` fails. The lane's turn passes on either way
        (an expired kernel that gets here has stopped)."""
        claimed = self._take("claimed")
        if self.place is not None:
            self.place.leave()
        return claimed

    def expire(self) -> bool:
        """The deadline passed: True if the kernel had not claimed, after which its release is
        withheld whatever it computes (a kernel still waiting for its lane turn gives up)."""
        expired = self._take("expired")
        if expired and self.place is not None:
            self.place.lane.wake()
        return expired

    @property
    def expired(self) -> bool:
        """Whether the deadline settled the request."""
        return self._state == "expired"

    @contextmanager
    def stoppable(self) -> Iterator[None]:
        """Run the kernel proper (a pure function of the columns and the request) so that an
        :meth:`expire` while it runs stops it at its next interpreted instruction, with the
        overrun failure (as :meth:`progress` would at its next step); a compiled loop that
        reads :func:`~dpmine_server.compiled.stop_flag` returns at its next step."""
        thread_id = threading.get_ident()
        token = STOP_FLAG.set(self._stop)
        try:
            with self._lock:
                if self._state == "expired":
                    raise OperationFailed(OVERRAN)
                self._kernel_thread = thread_id
            if self.place is not None:
                # An expiry while waiting raises _Abandoned here, as in the kernel.
                self.place.take_turn(lambda: self.expired)
                if self.expired:
                    raise OperationFailed(OVERRAN)
            yield
        except _Abandoned:
            raise OperationFailed(OVERRAN) from None
        finally:
            try:
                with self._lock:
                    self._kernel_thread = None
                    if self.expired:
                        _raise_in_thread(thread_id, None)  # not delivered yet: never after this
            finally:  # even if it was delivered just above: no later kernel sees this flag
                STOP_FLAG.reset(token)
                if self.expired and self.place is not None:
                    self.place.leave()  # the kernel has stopped: the next one may start

    def progress(self, fraction: float, message: str = "") -> None:
        """A kernel progress callback that stops an expired kernel at its next public step."""
        del fraction, message
        if self._state == "expired":
            raise OperationFailed(OVERRAN)

    def _take(self, state: _State) -> bool:
        with self._lock:
            if self._state != "running":
                return False
            self._state = state
            if state == "expired":
                self._stop[0] = 1
                if self._kernel_thread is not None:
                    _raise_in_thread(self._kernel_thread, _Abandoned)
            return True
