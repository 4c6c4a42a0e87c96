"""The release guard settles a charged request exactly once: by its kernel or by its deadline
(services/release_guard.py)."""

from __future__ import annotations

import threading
import time

import pytest

from dpmine_server.compiled import STOP_FLAG, stop_flag
from dpmine_server.errors import OperationFailed
from dpmine_server.services.kernel_lane import KernelLane
from dpmine_server.services.release_guard import OVERRAN, ReleaseGuard


def test_a_kernel_that_claims_first_keeps_its_release() -> None:
    guard = ReleaseGuard()
    assert guard.claim()
    assert not guard.expire()
    assert not guard.expired
    guard.progress(1.0)  # a claimed kernel is never stopped


def test_a_deadline_that_expires_first_withholds_the_release() -> None:
    guard = ReleaseGuard()
    assert guard.expire()
    assert not guard.claim()
    assert guard.expired
    with pytest.raises(OperationFailed, match="padded time budget") as stopped:
        guard.progress(0.5)
    assert stopped.value.message == OVERRAN


def test_exactly_one_side_wins_a_race() -> None:
    """Many racing claims and expiries: one winner per guard, whatever the interleaving."""
    for _round in range(200):
        guard = ReleaseGuard()
        wins: list[bool] = []
        start = threading.Barrier(4)

        def race(
            take: str,
            guard: ReleaseGuard = guard,
            wins: list[bool] = wins,
            start: threading.Barrier = start,
        ) -> None:
            start.wait()
            wins.append(guard.claim() if take == "claim" else guard.expire())

        threads = [
            threading.Thread(target=race, args=(take,))
            for take in ("claim", "expire", "claim", "expire")
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(wins) == [False, False, False, True]


def _spin_inside(guard: ReleaseGuard, entered: threading.Event, outcome: list[str]) -> None:
    """A kernel proper that would run for a minute: an interpreted busy loop, no progress calls."""
    try:
        with guard.stoppable():
            entered.set()
            end = time.monotonic() + 60.0
            while time.monotonic() < end:
                pass
        outcome.append("ran to its end")
    except OperationFailed as stopped:
        outcome.append(stopped.message)


def test_an_expired_kernel_is_stopped_inside_its_kernel_not_at_its_next_progress_call() -> None:
    """The deadline raises the overrun failure in the kernel's thread at once: its minute of
    spinning (a kernel that never reaches a progress call) ends when the guard expires."""
    guard = ReleaseGuard()
    entered, outcome = threading.Event(), list[str]()
    kernel = threading.Thread(target=_spin_inside, args=(guard, entered, outcome), daemon=True)
    kernel.start()
    assert entered.wait(10.0)
    assert guard.expire()
    kernel.join(10.0)  # far below the kernel's 60 s: joined only if it was stopped
    assert not kernel.is_alive()
    assert outcome == [OVERRAN]


def test_a_kernel_that_claimed_is_never_interrupted_and_nothing_lands_after_the_kernel() -> None:
    """Claimed first: the deadline's expire fails and nothing is raised in the thread. Expired
    after the kernel left ``stoppable``: nothing is raised in the code that follows it."""
    guard = ReleaseGuard()
    with guard.stoppable():
        total = sum(range(1000))
    assert guard.claim()
    assert not guard.expire()
    after = ReleaseGuard()
    with after.stoppable():
        total += 1
    assert after.expire()
    for _step in range(100_000):  # interpreted steps where a stray exception would land
        total += 1
    assert total == sum(range(1000)) + 100_001


def test_a_kernel_that_starts_after_its_deadline_does_not_run() -> None:
    guard = ReleaseGuard()
    assert guard.expire()
    ran: list[bool] = []
    with pytest.raises(OperationFailed, match="padded time budget"), guard.stoppable():
        ran.append(True)
    assert ran == []


def test_the_stop_flag_is_the_guards_inside_the_kernel_only() -> None:
    """Inside ``stoppable`` compiled loops read the guard's flag, set by its expiry; after it,
    whatever happened, a later kernel in the same thread reads an unset flag of its own."""
    guard = ReleaseGuard()
    with guard.stoppable():
        inside = stop_flag()
        assert inside[0] == 0
    assert guard.expire()
    assert inside[0] == 1
    assert STOP_FLAG.get() is None
    assert stop_flag()[0] == 0
    with pytest.raises(OperationFailed), guard.stoppable():
        pass
    assert STOP_FLAG.get() is None


def test_a_kernel_waits_for_its_lane_turn_and_gives_it_up_when_it_claims() -> None:
    lane = KernelLane()
    first, second = lane.register(1.0), lane.register(1.0)
    first.reserve(pre=0.0, kernel=0.1)
    second.reserve(pre=0.0, kernel=0.1)
    started = threading.Event()

    def second_kernel() -> None:
        with ReleaseGuard(second).stoppable():
            started.set()

    thread = threading.Thread(target=second_kernel)
    thread.start()
    assert not started.wait(0.1), "the second kernel ran before the first had claimed"
    guard = ReleaseGuard(first)
    with guard.stoppable():
        pass
    assert guard.claim()
    assert started.wait(2)
    thread.join(timeout=2)


def test_a_kernel_whose_deadline_passes_in_the_lane_never_runs() -> None:
    lane = KernelLane()
    first, second = lane.register(1.0), lane.register(1.0)
    first.reserve(pre=0.0, kernel=0.1)
    second.reserve(pre=0.0, kernel=0.1)
    guard = ReleaseGuard(second)
    outcome: list[str] = []

    def second_kernel() -> None:
        try:
            with guard.stoppable():
                outcome.append("ran")
        except OperationFailed as error:
            outcome.append(error.message)

    thread = threading.Thread(target=second_kernel)
    thread.start()
    time.sleep(0.05)
    assert guard.expire()
    thread.join(timeout=2)
    assert outcome == [OVERRAN]
    assert lane.waiting() == 1, "the expired kernel's place is left once it has stopped"
