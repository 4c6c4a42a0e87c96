"""When the garbage collector may pause an API process (DESIGN.md contract item 7, "time is an
output"; issue #23).

CPython's automatic *full* collections traverse every object the process tracks, so their
pause grows with what it holds: in an API process that had run the Serenade benchmarks a few
times (37,000–99,000 tracked objects, most of them the extension cache model's pinned
candidate sets), full collections paused it 8–45 ms each, and one that fell inside a padded
kernel's window made a mammals SerenadeES round of 10–20 ms of work overrun its 0.068 s budget
in two runs of eight (bench/README.md, "Full collections outside the requests"). Young
collections traverse only the objects allocated since the last ones (at most about
``threshold0 · threshold1`` of them) and stay cheap.

The policy. After its warm-up (services/warmup.py ``freeze_heap``), an API process keeps the
automatic young collections and never starts a full one by itself
(:func:`defer_full_collections`). :class:`IdleCollector` runs the full collections instead, on
the event loop, when the process holds no admitted request: :data:`IDLE_DELAY_SECONDS` after
its in-flight count (services/admission.py) fell to zero, if it is still zero then and the last
full collection is at least :data:`MIN_INTERVAL_SECONDS` old. A process that is never idle
collects anyway once :data:`FORCE_AFTER_SECONDS` have passed since the last one,
:data:`IDLE_DELAY_SECONDS` after a request leaves (so that cyclic garbage cannot grow without
bound): the residual pause, logged.

Why this adds no channel. Whether and when a collection starts is a function of the in-flight
count and the clock: the count changes at arrivals (public) and at answers, which are shown at
padded deadlines computed from public values (services/admission.py's proof), so the
collection times are functions of public events, never of when a kernel finished
(tests/privacy/test_audit_collector.py replays one schedule on neighbouring tables and flags a
collector that starts at a kernel's end). A collection runs on the event loop between its
callbacks, so no request being handled there is cut in two.

The pause itself is not public: it grows with the objects the process holds. So every
collection occupies a public *window* of :data:`COLLECTION_WINDOW_SECONDS` from the moment it
was due (:attr:`IdleCollector.window_end`), and nothing the process shows may fall inside it:
a request read during the window is taken as arriving at its end (api/deps.py's arrival, and
every route by the :class:`~dpmine_server.api.collection_hold.CollectionHold` middleware), and an
answer sent during it goes out at its end. Proof: a request that reaches the loop while the
collection runs is read when it ends, before the window's end unless the pause overran it;
its arrival is then the window's end, a function of public times, and so are its deadline
and its answer; the same holds for any message the process sends. A pause longer than the
window is logged as an overrun of it (the residual, like a kernel's overrun); the audit
compares the answers of requests sent into collections of different pauses exactly and flags
a process without the window. Residual, documented: the forced collection of a process that
is never idle can fall inside a padded window and make its kernel overrun.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import logging
import time
from collections.abc import Callable

__all__ = [
    "COLLECTION_WINDOW_SECONDS",
    "FORCE_AFTER_SECONDS",
    "FULL_COLLECTION_OFF",
    "IDLE_DELAY_SECONDS",
    "MIN_INTERVAL_SECONDS",
    "IdleCollector",
    "defer_full_collections",
]

logger = logging.getLogger(__name__)

#: A generation-2 threshold that the process never reaches (it counts young collections).
FULL_COLLECTION_OFF = 10**9
#: Seconds after the in-flight count fell to zero before a full collection may start: the
#: answer that emptied the process is sent first, and the next call of a client's sequence (a
#: miner's loop, a test's trials) usually comes within it, so collections and their windows
#: fall between sequences rather than delay a call inside one. At 50 ms, trials of the channel
#: audits sent 0.1 s apart met windows now and then and moved a latency bucket.
IDLE_DELAY_SECONDS = 1.0
#: Least seconds between two idle full collections.
MIN_INTERVAL_SECONDS = 5.0
#: Seconds without a full collection after which one runs when a request leaves, idle or not.
FORCE_AFTER_SECONDS = 900.0
#: Seconds from a collection's due moment during which the process shows nothing (the module
#: docstring): three times the longest pause measured (45 ms, 99,000 tracked objects).
COLLECTION_WINDOW_SECONDS = 0.15


def defer_full_collections() -> None:
    """Keep the automatic young collections and stop the automatic full ones (this process's
    :class:`IdleCollector` runs them)."""
    young, middle, _full = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_COLLECTION_OFF)


class IdleCollector:
    """Full collections of one API process at public moments (the module docstring).

    ``in_flight`` reads the process's admitted requests (``AdmissionGate.in_flight``);
    ``collect`` is the collection (``gc.collect``; tests pass a recorder); ``clock`` is
    monotonic seconds; ``later(delay, callback)`` schedules the idle check (default: the
    running event loop's ``call_later``)."""

    def __init__(
        self,
        in_flight: Callable[[], int],
        *,
        collect: Callable[[], object] = gc.collect,
        clock: Callable[[], float] = time.monotonic,
        later: Callable[[float, Callable[[], object]], object] | None = None,
    ) -> None:
        self._in_flight = in_flight
        self._collect = collect
        self._clock = clock
        self._later = later
        self._last = clock()
        #: The end of the last collection's public window (monotonic seconds).
        self.window_end = float("-inf")

    def request_left(self, in_flight: int) -> None:
        """A request was answered and ``in_flight`` remain (called on the event loop): with
        none left, or past :data:`FORCE_AFTER_SECONDS` without a collection, check again
        :data:`IDLE_DELAY_SECONDS` later (after the answer has gone out)."""
        now = self._clock()
        if in_flight != 0 and now - self._last < FORCE_AFTER_SECONDS:
            return
        check = functools.partial(self.idle_check, now + IDLE_DELAY_SECONDS)
        if self._later is not None:
            self._later(IDLE_DELAY_SECONDS, check)
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not on an event loop (a synchronous caller): no idle check
            return
        loop.call_later(IDLE_DELAY_SECONDS, check)

    def idle_check(self, due: float | None = None) -> bool:
        """Collect if the process is still idle and the last collection is old enough, or
        if none ran for :data:`FORCE_AFTER_SECONDS` (logged); whether it collected. ``due``
        is when the check was scheduled for (a public moment; default now): the collection's
        window counts from it."""
        since = self._clock() - self._last
        in_flight = self._in_flight()
        if since >= FORCE_AFTER_SECONDS and in_flight != 0:
            logger.warning(
                "a full garbage collection runs with %d requests in flight: the process has "
                "not been idle for %.0f s",
                in_flight,
                since,
            )
        elif in_flight != 0 or since < MIN_INTERVAL_SECONDS:
            return False
        self._run(self._clock() if due is None else due)
        return True

    def shown_at(self, now: float) -> float:
        """When something the process would show at ``now`` may be shown: the end of a
        collection's window that holds ``now``, else ``now``."""
        return max(now, self.window_end)

    async def hold(self) -> None:
        """Wait out the window of a collection that holds the current moment (on the event
        loop: requests and answers, api/collection_hold.py and api/deps.py)."""
        now = self._clock()
        while (wait := self.shown_at(now) - now) > 0:  # a timer may fire a little early
            await asyncio.sleep(wait)
            now = self._clock()

    def _run(self, due: float) -> None:
        # The interval and the window count from the collection's due moment, public, not
        # from its end, which its pause (the heap's size) would move.
        self._last = due
        self.window_end = due + COLLECTION_WINDOW_SECONDS
        self._collect()
        overran = self._clock() - self.window_end
        if overran > 0:
            logger.warning(
                "a full garbage collection ran %.3f s past its public window of %.2f s: a "
                "request read or an answer sent in that time was shown late",
                overran,
                COLLECTION_WINDOW_SECONDS,
            )
