"""One public lane for the inline kernels of an API process (DESIGN.md contract item 7, "time
is an output"; issue #23, "padding budgets measured, not guessed").

A padded request's budget prices its kernel as if it ran alone (services/timing.py; the
calibration times kernels one at a time). Kernels of one process that run at once share its
interpreter lock and its cores, so without this module *k* concurrent requests can each take
up to *k* times their priced work, overrun their deadlines and fail closed, and whether they
do depends on how long each one's data took: an analyst who sends requests together chooses
that contention. This module removes it: the inline kernels of a process run one after the
other, in the order the requests arrived, and each request's deadline adds a public wait for
the kernels queued before it.

The schedule. Every data-touching request registers a :class:`LanePlace` when it arrives
(``api/deps.py``, on the event loop, so places are numbered in arrival order). Once priced,
a request that runs an inline kernel *reserves*: with ``pre`` the public allowance for the
work before its kernel (half the base, plus the load budget when the dataset must be loaded)
and ``kernel`` its priced kernel seconds (its budget less the base),

    S = max(arrival + pre, F),  F ← S + kernel,  wait = S − (arrival + pre),

where ``F`` is the lane's public *free* time (the end bound of the last reservation). Its
padded deadline is ``arrival + grid · ⌈(budget + cold + wait) / grid⌉``. Its kernel waits for
the *turn* (every earlier reservation's kernel claimed, expired or given up) before it starts,
and holds it until its release is claimed. Every other place leaves at once (job-mode
operations, unpadded servers) or when its call ends.

Proof that a kernel finishes by ``E = S + kernel`` (so by its deadline, which leaves the other
half of the base for the work after it): by induction over reservations. The first ends by
its own ``S + kernel``. For a later one, its predecessor ends by ``F`` (induction), its own
pre-kernel work by ``arrival + pre`` (the base's allowance), so it starts by ``S`` and, alone
in the lane, runs at most ``kernel`` (the budget's assumption, the margin covering what the
calibration measured). Nothing here reads a kernel's real end: ``F`` moves by priced seconds
only.

Proof that the deadlines are public. A reservation's ``S`` is a function of its arrival, its
public ``pre`` and of the reservations made before it, each of which is a function of public
values by induction, provided the order of reservations is public. It is the order of arrival:
a reservation first waits until every place registered before it has reserved or left
(:meth:`KernelLane.reserve`), and places are numbered at arrival. Which places reserve is
public too: the inline operations of a padded server that were admitted (admission is public,
services/admission.py) and priced. A place that reserved and then never ran a kernel (refused
before its charge, replayed) leaves at its call's end and only makes later kernels start
earlier than their bounds. Residual channel, documented rather than closed: an overrun (its
probability kept small by the budgets, ``bench/bench_budgets.py``) holds the turn until its
kernel is stopped, which can make the next kernels of the same process overrun too; the
triggering event is the same one.

A place still unreserved after :data:`ORDER_WAIT_SECONDS` (an event loop stalled that long) is
passed over with a warning: the later reservation then does not wait for it, which keeps every
bound sound (``F`` covers whatever was reserved first) but makes that one order depend on
timing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["ORDER_WAIT_SECONDS", "KernelLane", "LanePlace"]

logger = logging.getLogger(__name__)

#: Seconds a reservation waits for places registered before it to reserve or leave.
ORDER_WAIT_SECONDS = 10.0
#: Seconds between checks of a waiting kernel's expiry, besides the wake-up its guard's expiry
#: sends (:meth:`KernelLane.wake`).
_TURN_POLL_SECONDS = 0.05


@dataclass(eq=False)
class LanePlace:
    """A request's place in its process's lane (registered at its arrival)."""

    lane: KernelLane
    number: int
    arrival: float
    #: Public seconds the request waits for earlier kernels (set when it reserves).
    wait: float = 0.0
    #: Whether the call's thread took the place over (it leaves it when its kernel has
    #: stopped, which for an overrun can be after the answer).
    handed_over: bool = field(default=False)

    def reserve(self, pre: float, kernel: float) -> float:
        """Reserve this place's kernel (:meth:`KernelLane.reserve`); returns the public wait."""
        return self.lane.reserve(self, pre, kernel)

    def take_turn(self, expired: Callable[[], bool]) -> None:
        """Wait for this place's turn (:meth:`KernelLane.take_turn`)."""
        self.lane.take_turn(self, expired)

    def leave(self) -> None:
        """Leave the lane (idempotent): the next place may reserve or take its turn."""
        self.lane.leave(self)

    def hand_over(self) -> None:
        """The call's thread has started: from now on it leaves the place (when its kernel
        has really stopped, which for an overrun can be after the answer)."""
        self.lane.hand_over(self)

    def leave_unless_handed_over(self) -> None:
        """Leave, unless a call's thread took the place over (:meth:`hand_over`)."""
        self.lane.leave_unless_handed_over(self)


class KernelLane:
    """The public FIFO schedule of one process's inline kernels (module docstring)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._changed = threading.Condition(threading.RLock())
        self._next = 0
        self._unreserved: dict[int, LanePlace] = {}  # registered, not yet reserved or left
        self._queued: dict[int, LanePlace] = {}  # reserved and not left, in reservation order
        self._free_at = -float("inf")

    def register(self, arrival: float) -> LanePlace:
        """A place for a request that arrived at ``arrival`` (monotonic; called in arrival
        order, on the event loop)."""
        with self._changed:
            place = LanePlace(self, self._next, arrival)
            self._next += 1
            self._unreserved[place.number] = place
            return place

    def reserve(self, place: LanePlace, pre: float, kernel: float) -> float:
        """Reserve ``kernel`` seconds for ``place`` after every earlier reservation, once every
        earlier place has reserved or left; returns the public wait ``S − (arrival + pre)``."""
        if pre < 0 or kernel < 0:
            raise ValueError(f"pre and kernel seconds must be non-negative, got {pre}, {kernel}")
        with self._changed:
            if place.number not in self._unreserved:
                raise RuntimeError("a lane place reserves once, before it leaves")
            give_up = self._clock() + ORDER_WAIT_SECONDS
            while any(number < place.number for number in self._unreserved):
                left = give_up - self._clock()
                if left <= 0:
                    logger.warning(
                        "an earlier request had not reserved its kernel after %.0f s: passed "
                        "over (the event loop stalled?)",
                        ORDER_WAIT_SECONDS,
                    )
                    break
                self._changed.wait(left)
            start = max(place.arrival + pre, self._free_at)
            self._free_at = start + kernel
            del self._unreserved[place.number]
            self._queued[place.number] = place
            place.wait = start - (place.arrival + pre)
            self._changed.notify_all()
            return place.wait

    def take_turn(self, place: LanePlace, expired: Callable[[], bool]) -> None:
        """Return when every reservation before ``place`` has left (at once for a place that
        did not reserve, or already holds the turn). ``expired()`` is checked every few
        milliseconds: a kernel whose deadline passed while it waited is stopped there by its
        guard (services/release_guard.py), which raises in this thread."""
        with self._changed:
            while place.number in self._queued and next(iter(self._queued)) != place.number:
                if expired():
                    return
                self._changed.wait(_TURN_POLL_SECONDS)

    def wake(self) -> None:
        """Wake the kernels waiting for their turn (a deadline expired one of them)."""
        with self._changed:
            self._changed.notify_all()

    def leave(self, place: LanePlace) -> None:
        """``place`` is done with the lane (idempotent)."""
        with self._changed:
            removed = self._unreserved.pop(place.number, None) or self._queued.pop(
                place.number, None
            )
            if removed is not None:
                self._changed.notify_all()

    def hand_over(self, place: LanePlace) -> None:
        """Mark ``place`` as taken over by its call's thread (:meth:`LanePlace.hand_over`)."""
        with self._changed:
            place.handed_over = True

    def leave_unless_handed_over(self, place: LanePlace) -> None:
        """Leave ``place`` unless its call's thread took it over (atomically with
        :meth:`hand_over`)."""
        with self._changed:
            if not place.handed_over:
                self.leave(place)

    def free_at(self) -> float:
        """The public time (monotonic) by which every reserved kernel has ended."""
        with self._changed:
            return self._free_at

    def waiting(self) -> int:
        """Places registered or reserved and not yet left."""
        with self._changed:
            return len(self._unreserved) + len(self._queued)
