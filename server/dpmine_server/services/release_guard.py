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
is failed, the charge stands); its next public progress call stops it early
(:meth:`ReleaseGuard.progress`).

Proof sketch of what an analyst sees. Let T be the public deadline. If the kernel claims before
T, the release is shown at T, as without this module. Otherwise the answer at T is the overrun
failure, shown at T. Either way the answer comes at T; only *which* answer it is depends on the
data, and the overrun branch has probability at most the operation's measured overrun rate,
which is the δ the timing channel adds.
"""

from __future__ import annotations

import threading
from typing import Literal

from dpmine_server.errors import OperationFailed

__all__ = ["OVERRAN", "ReleaseGuard"]

#: What the analyst reads when a request overran its deadline (owner-facing details are in the
#: server log; nothing here depends on the data).
OVERRAN = (
    "the operation did not finish within its padded time budget, so nothing was released and "
    "the charge stands (releasing it late would reveal how long the data took). Ask the "
    "owner to raise DPMINE_TIMING_SCALE; a retry with a new Idempotency-Key is charged again"
)

_State = Literal["running", "claimed", "expired"]


class ReleaseGuard:
    """Decides, once, whether a charged request settles by its kernel or by its deadline."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state: _State = "running"
        self.entry_ids: list[int] = []

    def bind(self, entry_id: int) -> None:
        """Record the ledger entry of the charged request (set when it is charged)."""
        self.entry_ids = [entry_id]

    def bind_many(self, entry_ids: list[int]) -> None:
        """Record the ledger entries of a charged batch (one per part)."""
        self.entry_ids = list(entry_ids)

    def claim(self) -> bool:
        """The kernel's release is ready: True if it may be stored and shown (the deadline has
        not been taken), after which :meth:`expire` fails."""
        return self._take("claimed")

    def expire(self) -> bool:
        """The deadline passed: True if the kernel had not claimed, after which its release is
        withheld whatever it computes."""
        return self._take("expired")

    @property
    def expired(self) -> bool:
        """Whether the deadline settled the request."""
        return self._state == "expired"

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
            return True
