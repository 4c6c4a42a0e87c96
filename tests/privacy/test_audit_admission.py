"""Audit of admission control over real HTTP (services/admission.py; issue #23): the sequence of
admitted and refused requests under a fixed concurrent schedule is the same on two neighbouring
tables, and a refusal is a 429 that charges nothing and that the client library retries.

A padded live server (the channel audits' set-up, tests/privacy/channels.py) allows
``LIMIT`` = 2 requests in flight. The adversarial kernel (``test.spin_inline`` with
``spin_if_any``) spins for its public ``seconds`` on D' (one flagged row) and not at all on D.
The schedule: two requests at once, a third while both are held (after D's kernels ended,
before D''s), a fourth after their padded deadlines. Places are given back at the padded
deadline, so both tables give (admitted, admitted, refused, admitted), compared exactly; a gate
given back when the kernel ends would admit the third on D only (the same schedule on the gate
itself flags that variant: tests/services/test_admission.py).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import httpx
import pytest

import dpmine
from privacy.channels import PADDED_ENV, ChannelServer, spin_body, start_channel_server

pytestmark = pytest.mark.serial

LIMIT = 2
SPIN_S = 0.4
#: The base covers the two admitted spins sharing one GIL (they end after about 2 × 0.4 s).
BASE_MS = 600
#: When each request of the schedule is sent (seconds after the first two): the third while
#: both are held (D's kernels long done, D''s still spinning until ≈ 0.8 s), the fourth after
#: the padded deadline (0.6 s base + 0.4 s spin → 1.05 s).
THIRD_AT_S, FOURTH_AT_S = 0.3, 1.5


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChannelServer]:
    env = PADDED_ENV | {"DPMINE_MAX_IN_FLIGHT": str(LIMIT), "DPMINE_TIMING_BASE_MS": str(BASE_MS)}
    channel = start_channel_server(tmp_path_factory.mktemp("admission"), env, (40, 41))
    try:
        yield channel
    finally:
        channel.server.stop()


def _post(channel: ChannelServer, dataset_id: str, key: str) -> httpx.Response:
    path = f"/v1/datasets/{dataset_id}/test/spin-inline"
    with channel.client() as client:
        return client.post(path, json=spin_body(SPIN_S), headers={"Idempotency-Key": key})


def _schedule(channel: ChannelServer, dataset_id: str) -> list[httpx.Response]:
    """The four requests of the schedule, answers in sending order."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        start = time.monotonic()
        sent: list[Future[httpx.Response]] = [
            pool.submit(_post, channel, dataset_id, str(uuid.uuid4())) for _ in range(2)
        ]
        for at in (THIRD_AT_S, FOURTH_AT_S):
            time.sleep(max(start + at - time.monotonic(), 0.0))
            sent.append(pool.submit(_post, channel, dataset_id, str(uuid.uuid4())))
        return [future.result() for future in sent]


def _spent(channel: ChannelServer, dataset_id: str) -> float:
    with dpmine.connect(channel.server.url, channel.api_key, retries=0) as analyst:
        return analyst.dataset(dataset_id).budget().grant_spent


def test_the_refusals_do_not_depend_on_the_table(limited: ChannelServer) -> None:
    with httpx.Client(base_url=limited.server.url) as client:
        health = client.get("/v1/health").json()
        assert health["max_in_flight"] == LIMIT
        # A padded process runs its full garbage collections only while idle
        # (services/collector.py, wired at its warm-up in services/container.py).
        assert health["full_collections"] == "when idle"
    patterns = {}
    for side, dataset_id in enumerate(limited.neighbours):
        before = _spent(limited, dataset_id)
        answers = _schedule(limited, dataset_id)
        # Admitted or refused: an admitted request's own outcome (a release, or on a loaded
        # machine an overrun settled at its deadline) is the timing audits' subject, not this one.
        patterns[side] = tuple(
            answer.status_code != httpx.codes.TOO_MANY_REQUESTS for answer in answers
        )
        refused = answers[2]
        assert refused.json()["error"] == "Overloaded", refused.text
        assert refused.headers["Retry-After"] == "1"
        assert "nothing was charged" in refused.json()["detail"]
        # Three admitted requests charged, the refused one not.
        charged = _spent(limited, dataset_id) - before
        assert charged == pytest.approx(3 * spin_body()["epsilon"])
    assert patterns[0] == patterns[1] == (True, True, False, True)


def test_the_client_retries_a_refusal_with_its_key(limited: ChannelServer) -> None:
    dataset_id = limited.neighbours[1]
    before = _spent(limited, dataset_id)
    with ThreadPoolExecutor(max_workers=2) as pool:
        holders = [pool.submit(_post, limited, dataset_id, str(uuid.uuid4())) for _ in range(LIMIT)]
        time.sleep(THIRD_AT_S)
        with dpmine.connect(limited.server.url, limited.api_key, retries=3) as analyst:
            answer = analyst.request(
                "POST",
                f"/v1/datasets/{dataset_id}/test/spin-inline",
                json=spin_body(SPIN_S),
                idempotency_key=str(uuid.uuid4()),
            )
        # Both holders were admitted: each released or, on a loaded machine, overran and failed
        # closed at its deadline (the overrun audits' subject), keeping its charge either way.
        for holder in holders:
            answer_of_holder = holder.result()
            assert answer_of_holder.status_code == 200 or (
                answer_of_holder.status_code == 500
                and "padded time budget" in answer_of_holder.json()["detail"]
            ), answer_of_holder.text
    assert isinstance(answer.json()["count"], int)
    assert _spent(limited, dataset_id) - before == pytest.approx(3 * spin_body()["epsilon"])
