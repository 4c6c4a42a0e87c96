"""Audit of when an API process runs its full garbage collections (services/collector.py):
the collection times under a fixed schedule of requests are the same on two neighbouring
tables, and a collector that follows the kernels' ends instead is flagged.

A discrete-event replay on the real :class:`AdmissionGate` and :class:`IdleCollector` (a
simulated clock and event loop; the kernels stand in by their durations). The public schedule:
requests with public arrivals and padded deadlines (a public budget each). On D every kernel
takes 10 ms, on D' (its neighbour) the flagged row makes each take 90 % of its budget. The
honest gate gives places back at the padded deadlines, so the idle checks, and the collections
they start, fall at the same times on both tables (compared exactly). A gate given back when
the kernel ends (the broken variant) makes the process idle at data-dependent times, and the
collections differ.

The pause of a collection is not public (it grows with the heap), so the replay also sends
probes into the collections, padded requests and unpadded ones (health, a job's state), with a
pause of 10 ms on D and 90 % of the window on D': with the collector's public windows
(``IdleCollector.shown_at``, as api/collection_hold.py and api/deps.py apply it) every probe's
answer is shown at the same moment on both; shown when the pause ends (no window, the broken
variant) they differ.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from dpmine_server.services.admission import AdmissionGate
from dpmine_server.services.collector import (
    COLLECTION_WINDOW_SECONDS,
    FORCE_AFTER_SECONDS,
    IDLE_DELAY_SECONDS,
    MIN_INTERVAL_SECONDS,
    IdleCollector,
)

#: (arrival, public budget) of each request, seconds: bursts, gaps longer and shorter than the
#: idle delay and the collector's interval.
SCHEDULE = [
    (0.0, 0.3),
    (0.1, 0.3),
    (0.45, 0.2),
    (6.0, 0.15),
    (6.18, 0.15),  # arrives right after the first's kernel on D, before its deadline
    (12.0, 0.4),
    (12.5, 0.4),
    (19.0, 0.1),
    (19.16, 0.1),
]


@dataclass(order=True)
class _Event:
    at: float
    order: int
    action: Callable[[], object] = field(compare=False)


class _Loop:
    """A simulated clock and event loop: callbacks run in time order."""

    def __init__(self) -> None:
        self.now = 0.0
        self._events: list[_Event] = []
        self._count = itertools.count()

    def at(self, when: float, action: Callable[[], object]) -> None:
        heapq.heappush(self._events, _Event(when, next(self._count), action))

    def later(self, delay: float, action: Callable[[], object]) -> None:
        self.at(self.now + delay, action)

    def run(self) -> None:
        while self._events:
            event = heapq.heappop(self._events)
            self.now = max(self.now, event.at)  # a callback that blocked the loop delays the rest
            event.action()


def _wired(limit: int, pause: float = 0.0) -> tuple[_Loop, AdmissionGate, list[float]]:
    """A simulated loop, a gate of ``limit`` places and its idle collector, wired as an API
    process wires them (services/container.py), recording the collections' start times; each
    collection blocks the loop for ``pause`` seconds."""
    loop, gate, collections, _collector = _wired_collector(limit, pause)
    return loop, gate, collections


def _wired_collector(
    limit: int, pause: float
) -> tuple[_Loop, AdmissionGate, list[float], IdleCollector]:
    loop = _Loop()
    gate = AdmissionGate(limit)
    collections: list[float] = []

    def collect() -> None:
        collections.append(loop.now)
        loop.now += pause

    collector = IdleCollector(
        lambda: gate.in_flight, collect=collect, clock=lambda: loop.now, later=loop.later
    )
    gate.on_leave = collector.request_left
    return loop, gate, collections, collector


def replay(kernel_share: float, *, leave_at_kernel_end: bool) -> list[float]:
    """The collection start times of :data:`SCHEDULE` when each kernel takes
    ``kernel_share`` of its budget (at least 10 ms)."""
    loop, gate, collections = _wired(16)
    for arrival, budget in SCHEDULE:
        kernel = max(0.01, kernel_share * budget)
        leaves = arrival + (kernel if leave_at_kernel_end else budget)

        def enter() -> None:
            assert gate.try_enter()

        loop.at(arrival, enter)
        loop.at(leaves, gate.leave)
    loop.run()
    return collections


def test_collections_start_at_the_same_times_on_neighbours() -> None:
    on_d = replay(0.0, leave_at_kernel_end=False)
    on_d_prime = replay(0.9, leave_at_kernel_end=False)
    assert on_d == on_d_prime
    # The replay exercises the rules: collections happen, only in idle stretches, and the
    # interval skips an idle stretch that follows a collection too soon.
    assert len(on_d) >= 2
    for start in on_d:
        for arrival, budget in SCHEDULE:
            assert not arrival < start < arrival + budget
    assert all(b - a >= MIN_INTERVAL_SECONDS for a, b in itertools.pairwise(on_d))


def test_a_collector_that_follows_the_kernels_is_flagged() -> None:
    on_d = replay(0.0, leave_at_kernel_end=True)
    on_d_prime = replay(0.9, leave_at_kernel_end=True)
    assert on_d != on_d_prime


def test_a_process_that_is_never_idle_collects_when_a_request_leaves() -> None:
    loop, gate, collections = _wired(4)
    # Overlapping requests for longer than the forced interval: never idle.
    for k in range(int(FORCE_AFTER_SECONDS) + 20):
        loop.at(float(k), gate.try_enter)
        loop.at(k + 1.5, gate.leave)
    loop.run()
    assert collections, "no collection at all"
    assert collections[0] >= FORCE_AFTER_SECONDS
    assert collections[0] < FORCE_AFTER_SECONDS + 2.0


def test_an_idle_check_waits_for_the_answer_to_go_out() -> None:
    loop, gate, collections = _wired(4)
    loop.at(10.0, gate.try_enter)
    loop.at(10.2, gate.leave)
    loop.at(10.2 + IDLE_DELAY_SECONDS / 2, gate.try_enter)  # back before the check: no collection
    second_leaves = 10.2 + IDLE_DELAY_SECONDS + 0.3  # still in flight at the first check
    loop.at(second_leaves, gate.leave)
    loop.run()
    assert collections == [pytest.approx(second_leaves + IDLE_DELAY_SECONDS)]


#: Probes sent after a collection's start, seconds: (offset, public budget; 0 = unpadded).
PROBES = [(0.0, 0.0), (0.005, 0.0), (0.05, 0.15), (0.12, 0.0), (0.19, 0.2), (0.3, 0.0)]


def probe_answers(pause: float, *, windowed: bool) -> list[float]:
    """When each probe's answer is shown, for :data:`PROBES` sent into every collection of
    :data:`SCHEDULE` whose pause is ``pause``: a probe is read when the loop is free, its
    arrival is the collection window's end if it falls in one (``windowed``) and its answer
    shows at its padded deadline, held by the window the same way."""
    starts = replay(0.0, leave_at_kernel_end=False)
    loop, gate, _collections, collector = _wired_collector(16, pause)
    shown = collector.shown_at if windowed else (lambda now: now)
    answers: list[float] = []
    for arrival, budget in SCHEDULE:
        loop.at(arrival, gate.try_enter)
        loop.at(arrival + budget, gate.leave)
    for start in starts:
        for offset, budget in PROBES:

            def probe(budget: float = budget) -> None:
                arrived = shown(loop.now)  # api/deps.py: the arrival after the hold
                if budget > 0:  # a padded probe holds a place until its deadline
                    assert gate.try_enter()

                def answer() -> None:
                    answers.append(shown(loop.now))
                    if budget > 0:
                        gate.leave()

                loop.at(arrived + budget, answer)

            loop.at(start + offset, probe)
    loop.run()
    return answers


#: A collection's pause on D and on D' (any two pauses within the window).
PAUSES = (0.01, 0.9 * COLLECTION_WINDOW_SECONDS)


def test_probes_sent_into_collections_are_answered_alike_whatever_the_pause() -> None:
    on_d = probe_answers(PAUSES[0], windowed=True)
    on_d_prime = probe_answers(PAUSES[1], windowed=True)
    assert on_d == on_d_prime
    assert len(on_d) == len(PROBES) * len(replay(0.0, leave_at_kernel_end=False))
    # The probes did fall into the windows: those sent during one are answered at its end.
    starts = replay(0.0, leave_at_kernel_end=False)
    assert on_d[0] == pytest.approx(starts[0] + COLLECTION_WINDOW_SECONDS)


def test_probes_answered_when_the_pause_ends_are_flagged() -> None:
    on_d = probe_answers(PAUSES[0], windowed=False)
    on_d_prime = probe_answers(PAUSES[1], windowed=False)
    assert on_d != on_d_prime
