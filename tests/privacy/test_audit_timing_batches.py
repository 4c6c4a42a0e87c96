"""Timing audit of batches (DESIGN.md contract item 7; issue #23, item 2): a batch is answered
at the deadline of its public batch budget, one base plus every part's priced work
(``TimingPolicy.batch_budget``), whatever its parts' kernels did.

The adversarial parts are ``test.spin_inline`` with ``spin_if_any`` (operations/testing.py): on
D' (one flagged row) each part spins its public ``seconds``, on D it does nothing. A batch of
two such parts takes two spins on D' and none on D; the observation is the answer's status and
latency bucket, audited with the split Clopper–Pearson audit of the channel audits.

* Honest: every part's spin is priced, so the budget covers both spins and both sides are
  answered at the same deadline: the audit passes.
* Broken (the audit's power): the same parts with only the first one's spin priced (the
  others spin ``UNPRICED_S`` unpriced). The server then pads the batch to one part's spin,
  which is what a server padding a batch to a single part's budget would do; D' overruns and
  fails closed at that deadline while D succeeds, and the audit must flag it.

The base margin is wider than the other channel audits' (``BASE_MS``) and the unpriced spin
long, so that on a loaded machine D's bookkeeping stays well inside the deadline and D'
overruns it by far: the broken variant is then told apart every time, not just usually (at
a 150 ms base and 0.25 s of overrun it was missed once under CI load).
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
    PREDICATE,
    ChannelServer,
    Observation,
    audit,
    bucket,
    start_channel_server,
)

TRIALS = 20
SLOW_TRIALS = 100
PARTS = 2
SPIN_S = 0.25
#: Spin of each unpriced part in the broken variant: D' overruns its deadline by about this.
UNPRICED_S = 1.0
#: The padding's base margin (ms): room for a loaded machine's bookkeeping on either side.
BASE_MS = 400
#: Pause after a D' trial of the broken batch: its abandoned kernel stops at its next step.
SETTLE_S = 0.1


def _part(*, priced: bool) -> dict[str, Any]:
    spin = {"seconds": SPIN_S} if priced else {"seconds": 0.0, "unpriced_seconds": UNPRICED_S}
    request = {"predicate": PREDICATE, "epsilon": EPSILON, "spin_if_any": True, **spin}
    return {"operation": "test.spin_inline", "request": request}


HONEST = {"parts": [_part(priced=True) for _ in range(PARTS)]}
ONE_PART_PRICED = {"parts": [_part(priced=True)] + [_part(priced=False)] * (PARTS - 1)}


@pytest.fixture(scope="module")
def channel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChannelServer]:
    env = {**PADDED_ENV, "DPMINE_TIMING_BASE_MS": str(BASE_MS)}
    server = start_channel_server(tmp_path_factory.mktemp("batches"), env, (40, 41))
    try:
        yield server
    finally:
        server.server.stop()


def _observer(channel: ChannelServer, body: dict[str, Any]) -> Callable[[int], Observation]:
    """A batch on D or D': its answer's status and latency bucket."""

    def observe(side: int) -> Observation:
        with channel.client() as client:
            sent = time.perf_counter()
            answer = client.post(f"/v1/datasets/{channel.neighbours[side]}/batch", json=body)
            latency = time.perf_counter() - sent
        time.sleep(SETTLE_S * side)
        return (answer.status_code, bucket(latency))

    return observe


def test_a_padded_batch_is_answered_at_its_deadline_on_both_neighbours(
    channel: ChannelServer,
) -> None:
    assert_audit_passes(audit(_observer(channel, HONEST), TRIALS), PARTS * EPSILON)


def test_the_audit_flags_a_batch_padded_to_one_part(channel: ChannelServer) -> None:
    assert_audit_flags(audit(_observer(channel, ONE_PART_PRICED), TRIALS), PARTS * EPSILON)


@pytest.mark.slow
def test_slow_batch_timing_audit(channel: ChannelServer) -> None:
    assert_audit_passes(audit(_observer(channel, HONEST), SLOW_TRIALS), PARTS * EPSILON)
