"""Audits of the states an analyst can observe besides a release (DESIGN.md contract item 7;
issue #20): a retry's answer, a cancel's outcome, a job's place in the queue and a dataset's
first load, each over real HTTP against a real server with padding on.

Every audit uses an adversarial kernel: ``test.spin`` / ``test.spin_inline`` with
``spin_if_any`` (operations/testing.py) spins for its public ``seconds`` only if some row
satisfies the predicate. The neighbouring tables differ by that one row, so the kernel takes
``seconds`` on D' and nothing on D: any observable state that leaked the kernel's progress
would separate them completely. An observation is the answer's status and its latency
rounded to a bucket of the public grid; both sides' observations are compared exactly with
the Clopper–Pearson audit of ``privacy.audit``, and the ε lower bound must stay within the
ε charged for the call (the channel itself must carry nothing).

The default run takes ``TRIALS`` trials a side (enough to flag a total separation, which is
what each of these channels showed before the fix: see the module's tests of the broken
schedules); ``@pytest.mark.slow`` repeats each audit with ``SLOW_TRIALS``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

import dpmine
from dpmine.wire import BooleanAttribute, CreateDatasetRequest, CsvSource, DatasetMetadata
from privacy.audit import assert_audit_flags, assert_audit_passes
from privacy.channels import (
    EPSILON,
    PADDED_ENV,
    PREDICATE,
    SLOW_TRIALS,
    SPIN_S,
    TRIALS,
    ChannelServer,
    Observation,
    audit,
    bucket,
    register,
    settled,
    spin_body,
    split_audit,
    start_channel_server,
    write_table,
)
from support.datasets import unique_id
from support.servers import LiveServer, add_analyst, http_client


@pytest.fixture(scope="module")
def padded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChannelServer]:
    channel = start_channel_server(tmp_path_factory.mktemp("channels"), PADDED_ENV, (40, 41))
    try:
        yield channel
    finally:
        channel.server.stop()


# -- retries -------------------------------------------------------------------------------------


def _retry_observer(channel: ChannelServer, offset: float) -> Callable[[int], Observation]:
    """A request with an Idempotency-Key, and ``offset`` seconds later its retry: the retry's
    status and latency bucket (and that it replays the original's release)."""

    def observe(side: int) -> Observation:
        path = f"/v1/datasets/{channel.neighbours[side]}/test/spin-inline"
        headers = {"Idempotency-Key": str(uuid.uuid4())}
        with (
            channel.client() as first,
            channel.client() as second,
            ThreadPoolExecutor(max_workers=1) as pool,
        ):
            original = pool.submit(first.post, path, json=spin_body(), headers=headers)
            time.sleep(offset)
            sent = time.perf_counter()
            retry = second.post(path, json=spin_body(), headers=headers)
            latency = time.perf_counter() - sent
            answer = original.result()
        assert answer.status_code == 200, answer.text
        same = retry.status_code == 200 and retry.json()["count"] == answer.json()["count"]
        return (retry.status_code if not same else "replayed", bucket(latency))

    return observe


@pytest.mark.parametrize("offset", [0.1])
def test_a_retry_answers_as_the_original_does(padded: ChannelServer, offset: float) -> None:
    assert_audit_passes(audit(_retry_observer(padded, offset)), EPSILON)


# -- cancels -------------------------------------------------------------------------------------


#: The cancelled job spins longer, so that a cancel at CANCEL_OFFSET finds D' still spinning
#: and D long finished (what a cancel could tell apart before the fix).
CANCEL_SPIN_S = 0.4
CANCEL_OFFSET_S = 0.2


def _cancel_observer(channel: ChannelServer, offset: float) -> Callable[[int], Observation]:
    """Submit a job, cancel it ``offset`` seconds later: the state the cancel answers with,
    the final shown state and when it is shown."""

    def observe(side: int) -> Observation:
        with channel.client() as client:
            submitted = time.perf_counter()
            job = client.post(
                f"/v1/datasets/{channel.neighbours[side]}/jobs",
                json={"operation": "test.spin", "request": spin_body(CANCEL_SPIN_S)},
            ).json()
            time.sleep(offset)
            cancelled = client.post(f"/v1/jobs/{job['id']}/cancel").json()
            final = settled(client, job["id"])
            shown_after = time.perf_counter() - submitted
        return (cancelled["status"], final["status"], bucket(shown_after))

    return observe


@pytest.mark.parametrize("offset", [CANCEL_OFFSET_S])
def test_a_cancel_outcome_does_not_depend_on_the_kernel(
    padded: ChannelServer, offset: float
) -> None:
    assert_audit_passes(audit(_cancel_observer(padded, offset)), EPSILON)


# -- queues --------------------------------------------------------------------------------------


def _queue_observer(channel: ChannelServer) -> Callable[[int], Observation]:
    """Two spinning jobs on D or D' fill both workers; a count job on the unrelated dataset U
    queued behind them: when U's job is shown done."""

    def observe(side: int) -> Observation:
        with channel.client() as client:
            for _job in range(2):
                client.post(
                    f"/v1/datasets/{channel.neighbours[side]}/jobs",
                    json={"operation": "test.spin", "request": spin_body()},
                )
            submitted = time.perf_counter()
            job = client.post(
                f"/v1/datasets/{channel.unrelated}/jobs",
                json={"operation": "test.spin", "request": spin_body(seconds=0.0)},
            ).json()
            final = settled(client, job["id"])
            shown_after = time.perf_counter() - submitted
            time.sleep(SPIN_S)  # let the spinning jobs' slots end before the next trial
        return (final["status"], bucket(shown_after))

    return observe


def test_a_queued_job_is_shown_on_a_public_schedule(padded: ChannelServer) -> None:
    assert_audit_passes(audit(_queue_observer(padded)), EPSILON)


# -- first loads ---------------------------------------------------------------------------------

#: A table wide and long enough that parsing it takes a time well above a bucket.
WIDE_COLUMNS = 20
WIDE_METADATA = DatasetMetadata(
    kind="table",
    n_max=30_000,
    attributes=[BooleanAttribute(name=f"b{i}") for i in range(WIDE_COLUMNS)],
)
LOAD_TRIALS = 20


def _write_wide(folder: Path, name: str, rows: int) -> Path:
    path = folder / f"{name}.csv"
    header = ",".join(f"b{i}" for i in range(WIDE_COLUMNS))
    row = ",".join("yes" if i % 2 else "no" for i in range(WIDE_COLUMNS))
    path.write_text("\n".join([header, *([row] * rows)]) + "\n")
    return path


@dataclass
class LoadServer:
    """A padded server that keeps one dataset loaded at a time: a small table (200 rows) and a
    large one (30,000 rows) under the same public metadata, and a tiny third to evict them."""

    server: LiveServer
    tables: tuple[str, str]
    evictor: str
    api_key: str


@pytest.fixture(scope="module")
def one_cached(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoadServer]:
    workdir = tmp_path_factory.mktemp("loads")
    server = LiveServer(
        database_url=f"sqlite:///{workdir / 'loads.sqlite3'}",
        workdir=workdir,
        name="loads",
        extra_env={**PADDED_ENV, "DPMINE_MAX_CACHED_DATASETS": "1"},
    )
    server.start()
    try:
        with dpmine.connect(server.url, server.owner_key, retries=0) as owner:
            tables = []
            for rows in (200, 30_000):
                request = CreateDatasetRequest(
                    id=unique_id("load"),
                    name="load audit",
                    epsilon_cap=10_000.0,
                    metadata=WIDE_METADATA,
                    source=CsvSource(path=f"wide-{rows}.csv"),
                )
                path = _write_wide(workdir, f"wide-{rows}", rows)
                tables.append(owner.admin.upload_dataset(request, {"path": path})["dataset"]["id"])
            evictor = register(owner, write_table(workdir, "evictor", rows=5, flagged=0))
            account = add_analyst(server, owner)
            account.connection.close()
            for dataset_id in (*tables, evictor):
                owner.admin.grant(dataset_id, account.name, 5_000.0)
        yield LoadServer(server, (tables[0], tables[1]), evictor, account.api_key)
    finally:
        server.stop()


def _load_observer(channel: LoadServer) -> Callable[[int], Observation]:
    """Evict, then count on the small or the large table (a cold load): status and when the
    answer came."""
    body = {"predicate": {"kind": "bool", "attribute": "b1"}, "epsilon": EPSILON}

    def observe(side: int) -> Observation:
        with http_client(channel.server.url) as client:
            client.headers["X-API-Key"] = channel.api_key
            evicted = client.post(
                f"/v1/datasets/{channel.evictor}/counts",
                json={"predicate": PREDICATE, "epsilon": EPSILON},
            )
            assert evicted.status_code == 200, evicted.text
            sent = time.perf_counter()
            answer = client.post(f"/v1/datasets/{channel.tables[side]}/counts", json=body)
            latency = time.perf_counter() - sent
        return (answer.status_code, bucket(latency))

    return observe


def test_a_first_load_does_not_tell_the_row_count(one_cached: LoadServer) -> None:
    assert_audit_passes(audit(_load_observer(one_cached), LOAD_TRIALS), EPSILON)


# -- the audits' power ---------------------------------------------------------------------------


def test_the_channel_audit_flags_what_the_channels_showed_before_the_fix() -> None:
    """With the default number of trials the audit proves ε far above the charge for what
    the review measured before the fix: a 409 on D' where D got the replay, a cancel that
    took on D' only, a queued job shown four buckets later on D'; and stays silent on two
    samples of one law."""
    retry = split_audit([("replayed", 1)] * TRIALS, [(409, 0)] * TRIALS)
    assert_audit_flags(retry, EPSILON)
    cancel = split_audit([("running", "done", 2)] * TRIALS, [("running", "cancelled", 2)] * TRIALS)
    assert_audit_flags(cancel, EPSILON)
    queue = split_audit([("done", 1)] * TRIALS, [("done", 5)] * TRIALS)
    assert_audit_flags(queue, EPSILON)
    loads = split_audit([(200, 3)] * LOAD_TRIALS, [(200, 5)] * LOAD_TRIALS)
    assert_audit_flags(loads, EPSILON)
    mixed = [("done", 2), ("done", 3)] * (TRIALS // 2)
    assert split_audit(mixed, list(mixed)) <= EPSILON


def test_one_bucket_of_jitter_after_the_choice_does_not_hide_a_separation() -> None:
    """Two serial runs missed a total separation because one side's answers fell one bucket
    off after the event was chosen (a late release: D in buckets 2 and 3, D' always in 5; a
    batch padded to one part: D 200 in buckets 7 and 8, D' 500 in 7), and a third one D's
    answer two buckets late (D {2: 19, 4: 1}, D' {5: 20}). The audit chooses the middle of the
    tied latency thresholds, a status before an exact outcome, and holds out four fifths of
    the samples, so all three are flagged; two samples of one jittered law still pass."""
    late = [(2,)] * 7 + [(3,), (3,)] + [(2,)] * (TRIALS - 9)
    assert_audit_flags(split_audit(late, [(5,)] * TRIALS), EPSILON)
    early = [(5,)] * 7 + [(4,)] + [(5,)] * (TRIALS - 8)  # the other side's jitter, downwards
    assert_audit_flags(split_audit([(2,)] * TRIALS, early), EPSILON)
    far = [(2,)] * 7 + [(4,)] + [(2,)] * (TRIALS - 8)  # one answer two buckets late
    assert_audit_flags(split_audit(far, [(5,)] * TRIALS), EPSILON)
    batch = [(200, 7)] * 7 + [(200, 8)] + [(200, 7)] * (TRIALS - 8)
    assert_audit_flags(split_audit(batch, [(500, 7)] * TRIALS), EPSILON)
    jittered = [(2,), (2,), (3,)] * (TRIALS // 3) + [(2,)] * (TRIALS % 3)
    assert split_audit(jittered, list(reversed(jittered))) <= EPSILON


# -- long versions -------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("offset", [0.0, 0.05, 0.15, 0.25])
def test_slow_retry_audit(padded: ChannelServer, offset: float) -> None:
    assert_audit_passes(audit(_retry_observer(padded, offset), SLOW_TRIALS), EPSILON)


@pytest.mark.slow
@pytest.mark.parametrize("offset", [0.02, 0.1, 0.2, 0.35])
def test_slow_cancel_audit(padded: ChannelServer, offset: float) -> None:
    assert_audit_passes(audit(_cancel_observer(padded, offset), SLOW_TRIALS), EPSILON)


@pytest.mark.slow
def test_slow_load_audit(one_cached: LoadServer) -> None:
    assert_audit_passes(audit(_load_observer(one_cached), SLOW_TRIALS), EPSILON)


@pytest.mark.slow
def test_slow_queue_audit(padded: ChannelServer) -> None:
    assert_audit_passes(audit(_queue_observer(padded), SLOW_TRIALS), EPSILON)
