"""Audit of the per-analyst limit of open jobs (``DPMINE_MAX_OPEN_JOBS``; services/jobs.py,
``JobRunner._check_open_jobs``; DESIGN.md contract item 7): whether a new job is accepted or
refused 429 ``TooManyJobs`` is a state the analyst observes, so it must not depend on the data.

A padded live server with a limit of one open job holds the neighbours D (no flagged row) and
D' (one) of the channel audits and an unrelated dataset U. A trial submits a job A on D or D'
whose kernel spins only on D' (``spin_if_any``), then, ``offset`` seconds after A's
submission, a job B on U. The observation is B's answer alone (accepted, or refused because A
is still open), compared on both sides with the split Clopper–Pearson audit of
privacy/channels.py. When and how A is shown settled are left out, so that this audit sees
the limit only: A's time is the queue's channel (test_audit_channels.py) and its final state
the overrun bit (test_audit_overruns.py; a priced spin still overruns now and then on a
loaded machine).

* With overruns failing closed and A priced for its spin, the limit counts A by its shown
  state, which changes on the public schedule: at an offset inside D''s spin, where D's
  kernel has long finished, both sides refuse B. The audit passes at the ε charged.
* The broken variant: a server that releases an overrunning kernel late
  (``DPMINE_TIMING_OVERRUN=release``, refused in production) shows A on D' settled when its
  unpriced spin ends, past the public schedule; the limit inherits that schedule, so B is
  accepted on D and refused on D'. The audit must flag it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from privacy.audit import assert_audit_flags, assert_audit_passes
from privacy.channels import (
    EPSILON,
    PADDED_ENV,
    SPIN_S,
    ChannelServer,
    Observation,
    audit,
    overrun_body,
    settled,
    spin_body,
    start_channel_server,
)

LIMIT_ENV = {**PADDED_ENV, "DPMINE_MAX_OPEN_JOBS": "1"}
RELEASE_LATE_ENV = {**LIMIT_ENV, "DPMINE_TIMING_OVERRUN": "release"}
#: Inside D''s priced spin (SPIN_S): D's kernel is done, D''s is not, neither is shown settled.
INSIDE_SPIN_S = SPIN_S / 2
#: The broken variant's A: priced for PRICED_S, spinning UNPRICED_S more on D' (an overrun).
PRICED_S = 0.05
UNPRICED_S = 0.4
#: After D's A is shown settled on the public schedule, before D''s late release.
AFTER_SCHEDULE_S = 0.45


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChannelServer]:
    channel = start_channel_server(tmp_path_factory.mktemp("limit"), LIMIT_ENV, (40, 41))
    try:
        yield channel
    finally:
        channel.server.stop()


@pytest.fixture(scope="module")
def limited_release_late(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChannelServer]:
    workdir = tmp_path_factory.mktemp("limit-late")
    channel = start_channel_server(workdir, RELEASE_LATE_ENV, (40, 41))
    try:
        yield channel
    finally:
        channel.server.stop()


def _limit_observer(
    channel: ChannelServer, body: dict[str, Any], offset: float
) -> Callable[[int], Observation]:
    """Submit A on D or D', and B on U ``offset`` seconds later: B's answer (with a constant
    latency bucket: time is not observed here). Both jobs are waited
    for, so the next trial starts with none open."""

    def observe(side: int) -> Observation:
        with channel.client() as client:
            submitted = time.perf_counter()
            first = client.post(
                f"/v1/datasets/{channel.neighbours[side]}/jobs",
                json={"operation": "test.spin", "request": body},
            )
            assert first.status_code == 202, first.text
            time.sleep(max(offset - (time.perf_counter() - submitted), 0.0))
            second = client.post(
                f"/v1/datasets/{channel.unrelated}/jobs",
                json={"operation": "test.spin", "request": spin_body(seconds=0.0)},
            )
            settled(client, first.json()["id"])
            if second.status_code == 202:
                settled(client, second.json()["id"])
                answer = "accepted"
            else:
                assert second.status_code == 429, second.text
                answer = second.json()["error"]
        return (answer, 0)

    return observe


def test_the_open_job_limit_does_not_depend_on_the_kernel(limited: ChannelServer) -> None:
    observe = _limit_observer(limited, spin_body(), INSIDE_SPIN_S)
    assert observe(0)[0] == "TooManyJobs"  # the limit is in force while A is open
    assert_audit_passes(audit(observe), EPSILON)


def test_the_audit_flags_a_limit_on_a_schedule_that_releases_overruns_late(
    limited_release_late: ChannelServer,
) -> None:
    observe = _limit_observer(
        limited_release_late, overrun_body(PRICED_S, UNPRICED_S), AFTER_SCHEDULE_S
    )
    assert_audit_flags(audit(observe), EPSILON)
