"""The job slots' public schedule (services/workers.py, ``PublicSchedule``): a padded job's slot
starts at the later of its submission and the public time its slot came free, never at the
measured handover, unless the worker is later than the allowance."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest

from dpmine_server.services.workers import PublicSchedule

T0 = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
ALLOWANCE = 0.05


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_a_job_on_an_idle_worker_starts_at_its_submission() -> None:
    schedule = PublicSchedule()
    with schedule.slot(at(0.0), at(0.012), padded=True, allowance=ALLOWANCE) as held:
        assert held.start == at(0.0)


def test_a_queued_job_starts_when_the_slot_ahead_came_free_not_at_its_claim() -> None:
    schedule = PublicSchedule()
    with schedule.slot(at(0.0), at(0.01), padded=True, allowance=ALLOWANCE) as first:
        first.free_at = at(0.3)  # its public settle time
    # Submitted while the first job ran, claimed 30 ms after the slot came free (a slow
    # handover): the slot still starts at 0.3.
    with schedule.slot(at(0.1), at(0.33), padded=True, allowance=ALLOWANCE) as second:
        assert second.start == at(0.3)
        second.free_at = at(0.5)
    # Submitted after the slot came free: from its submission.
    with schedule.slot(at(0.7), at(0.71), padded=True, allowance=ALLOWANCE) as third:
        assert third.start == at(0.7)


def test_a_worker_later_than_the_allowance_starts_the_slot_at_its_claim(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """And the owner's log says so, with what to do (the analyst sees nothing of it)."""
    schedule = PublicSchedule()
    with caplog.at_level(logging.WARNING, logger="dpmine_server.services.workers"):
        with schedule.slot(at(0.0), at(0.02), padded=True, allowance=ALLOWANCE) as in_time:
            assert in_time.start == at(0.0)
            in_time.free_at = at(0.5)
        assert not caplog.records
        with schedule.slot(at(1.0), at(1.2), padded=True, allowance=ALLOWANCE) as held:
            assert held.start == at(1.2)
    assert "claimed 200 ms after its public start" in caplog.text
    assert "raise DPMINE_TIMING_BASE_MS" in caplog.text


def test_an_unpadded_job_starts_at_its_claim_and_takes_no_slot() -> None:
    schedule = PublicSchedule()
    with schedule.slot(at(0.0), at(0.01), padded=True, allowance=ALLOWANCE) as first:
        first.free_at = at(0.3)
    for _job in range(3):
        with schedule.slot(at(0.1), at(0.31), padded=False, allowance=ALLOWANCE) as held:
            assert held.start == at(0.31)
    # The padded job's slot is still the one that came free at 0.3, and nothing else was added.
    with schedule.slot(at(0.1), at(0.33), padded=True, allowance=ALLOWANCE) as second:
        assert second.start == at(0.3)
    assert schedule.used_slots() == 1


def test_a_job_takes_the_slot_that_came_free_first() -> None:
    schedule = PublicSchedule(slots=2)
    with schedule.slot(at(0.0), at(0.0), padded=True, allowance=ALLOWANCE) as first:
        first.free_at = at(0.4)
    with schedule.slot(at(0.0), at(0.0), padded=True, allowance=ALLOWANCE) as second:
        second.free_at = at(0.2)
    with schedule.slot(at(0.1), at(0.21), padded=True, allowance=ALLOWANCE) as third:
        assert third.start == at(0.2)
    with schedule.slot(at(0.1), at(0.41), padded=True, allowance=ALLOWANCE) as fourth:
        assert fourth.start == at(0.4)


def test_a_job_that_raises_gives_its_slot_back() -> None:
    schedule = PublicSchedule()
    with (
        pytest.raises(RuntimeError),
        schedule.slot(at(0.0), at(0.0), padded=True, allowance=ALLOWANCE),
    ):
        raise RuntimeError("the kernel's bookkeeping failed")
    # The slot came free at the real time of the failure (now): a job submitted later than
    # that starts at its submission.
    later = datetime.now(UTC) + timedelta(seconds=1)
    with schedule.slot(later, later, padded=True, allowance=ALLOWANCE) as held:
        assert held.start == later


def test_a_worker_needs_a_slot() -> None:
    with pytest.raises(ValueError, match="at least one job slot"):
        PublicSchedule().configure(0)
