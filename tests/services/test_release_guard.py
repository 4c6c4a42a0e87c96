"""The release guard settles a charged request exactly once: by its kernel or by its deadline
(services/release_guard.py)."""

from __future__ import annotations

import threading

import pytest

from dpmine_server.errors import OperationFailed
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
