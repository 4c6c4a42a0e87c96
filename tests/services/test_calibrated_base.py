"""The calibrated base (server/dpmine_server/request_path.py, services/timing.py): measured on a
real in-process server, stored in the calibration file, and turned into the base of a server
admitting DPMINE_MAX_IN_FLIGHT requests at once, never below the public floor."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dpmine.wire import BooleanAttribute, CreateDatasetRequest, CsvSource, DatasetMetadata
from dpmine_server.db.models import Job
from dpmine_server.request_path import measure_request_path
from dpmine_server.services.calibration_file import (
    CALIBRATION_VERSION,
    RequestPathCalibration,
    cached_calibration,
)
from dpmine_server.services.container import build_services
from dpmine_server.services.datasets import StoredFile
from dpmine_server.services.jobs import JobRunner
from dpmine_server.services.queues import LocalPoolQueue
from dpmine_server.services.timing import TimingPolicy
from dpmine_server.services.workers import build_runtime, slot_seconds
from dpmine_server.settings import MIN_FAIL_CLOSED_BASE_MS, Settings
from support.inprocess import settings_for

COUNT = {"predicate": {"kind": "bool", "attribute": "flag"}, "epsilon": 0.1}


def _calibration(
    folder: Path, seconds_per_request: float, job_seconds: float | None = None
) -> Path:
    path = folder / f"calibration-{seconds_per_request}-{job_seconds}.json"
    measured = RequestPathCalibration(
        limit=4,
        bursts=2,
        burst_seconds=4 * seconds_per_request,
        seconds_per_request=seconds_per_request,
        jobs=None if job_seconds is None else 8,
        job_seconds=job_seconds,
    )
    content = {
        "version": CALIBRATION_VERSION,
        "margin": 3.0,
        "created": "2026-11-27T01:00:00+00:00",
        "operations": {},
        "request_path": measured.model_dump(mode="json"),
    }
    path.write_text(json.dumps(content))
    return path


def _policy(path: Path, limit: int) -> TimingPolicy:
    settings = Settings(environment="development", timing_calibration=path, max_in_flight=limit)
    return TimingPolicy.from_settings(settings)


def test_the_base_is_margin_times_limit_times_the_request_cost(tmp_path: Path) -> None:
    path = _calibration(tmp_path, 0.005)
    # 3 × 8 × 5 ms, whatever DPMINE_TIMING_BASE_MS says (100 ms by default).
    assert _policy(path, 8).base == pytest.approx(0.12)
    assert _policy(path, 2).base == pytest.approx(0.03)
    # The public floor: 3 × 1 × 5 ms = 15 ms is raised to 20 ms.
    assert _policy(path, 1).base == pytest.approx(MIN_FAIL_CLOSED_BASE_MS / 1000.0)
    cached_calibration.cache_clear()


def test_jobs_take_twice_the_margin_times_the_measured_job_path(tmp_path: Path) -> None:
    path = _calibration(tmp_path, 0.005, job_seconds=0.05)
    policy = _policy(path, 8)
    # 2 × 3 × 50 ms: each half (the hand-over, the final write) covers the whole path 3 times.
    assert policy.base == pytest.approx(0.12)
    assert policy.for_jobs().base == pytest.approx(0.3)
    # Everything but the base is the synchronous policy's.
    jobs = policy.for_jobs()
    assert (jobs.grid, jobs.scale, jobs.enabled, jobs.calibration) == (
        policy.grid,
        policy.scale,
        policy.enabled,
        policy.calibration,
    )
    # A job path shorter than the base leaves jobs at the base.
    short = _policy(_calibration(tmp_path, 0.005, job_seconds=0.001), 8)
    assert short.for_jobs().base == pytest.approx(0.12)
    cached_calibration.cache_clear()


def test_a_file_without_the_job_path_pads_jobs_with_the_base(tmp_path: Path) -> None:
    policy = _policy(_calibration(tmp_path, 0.005), 8)
    assert policy.for_jobs().base == policy.base == pytest.approx(0.12)
    uncalibrated = TimingPolicy.from_settings(Settings(environment="development"))
    assert uncalibrated.for_jobs() == uncalibrated
    cached_calibration.cache_clear()


def test_a_file_without_the_request_path_keeps_the_configured_base(tmp_path: Path) -> None:
    path = tmp_path / "kernels-only.json"
    content = {"version": CALIBRATION_VERSION, "margin": 3.0, "created": "x", "operations": {}}
    path.write_text(json.dumps(content))
    assert _policy(path, 8).base == pytest.approx(0.1)
    cached_calibration.cache_clear()


def test_the_request_path_is_measured_on_a_real_server() -> None:
    measured = measure_request_path(limit=2, bursts=1, jobs=2)
    assert (measured.limit, measured.bursts, measured.jobs) == (2, 1, 2)
    assert measured.seconds_per_request == pytest.approx(measured.burst_seconds / 2)
    assert measured.burst_seconds > 0
    # The job path is read from the server's own records: a submission, a hand-over to a
    # worker process and two writes take more than a millisecond, and less than a minute.
    assert measured.job_seconds is not None
    assert 0.001 < measured.job_seconds < 60.0


def test_the_worker_and_the_job_runner_pad_jobs_with_the_jobs_base(tmp_path: Path) -> None:
    """A job's slot (the worker's, services/workers.py ``slot_seconds``) and its shown
    settle time (the API's, services/jobs.py) both count the jobs' base, not the base of a
    synchronous request: on a real runtime over a registered dataset."""
    settings = settings_for(
        tmp_path,
        database_file="dpmine.sqlite3",
        owner_key="owner-key-0123456789-abcdefgh",
        secret_key="calibrated-secret-0123456789-abcdefgh",
        test_seed=1,
        job_workers=1,
    )
    services = build_services(settings)  # test mode: no padding, the pool stays lazy
    try:
        table = tmp_path / "flags.csv"
        table.write_text("flag\n" + "yes\nno\n" * 50, encoding="utf-8")
        metadata = DatasetMetadata(
            kind="table", n_max=100, attributes=[BooleanAttribute(name="flag")]
        )
        request = CreateDatasetRequest(
            id="flags",
            name="flags",
            epsilon_cap=1.0,
            metadata=metadata,
            source=CsvSource(path=table.name),
        )
        with services.write_sessions() as session:
            services.datasets.register(
                session, request, files={"path": StoredFile(table, table.name)}
            )
            session.commit()
    finally:
        services.close()
    padded = settings.model_copy(
        update={
            "timing_padding": True,
            "timing_base_ms": 100.0,
            "timing_calibration": _calibration(tmp_path, 0.005, job_seconds=0.2),
            "max_in_flight": 8,
        }
    )
    policy = TimingPolicy.from_settings(padded)
    assert policy.base == pytest.approx(0.12)
    assert policy.for_jobs().base == pytest.approx(1.2)  # 2 × 3 × 200 ms
    runtime = build_runtime(padded)
    try:
        job = Job(dataset_id="flags", operation="count.noisy", request=COUNT)
        runtime.datasets.preload()  # resident: no load budget in the slot
        jobs = policy.for_jobs()
        expected = jobs.deadline_offset(jobs.budget("count.noisy", COUNT, metadata))
        assert slot_seconds(runtime, job) == pytest.approx(expected)
        assert expected >= 1.2
        runner = JobRunner(runtime=runtime, queue=LocalPoolQueue(runtime, workers=1), timing=policy)
        assert runner.timing.base == pytest.approx(1.2)
        # The runner's budget of a job (kept per job while its metadata is in force) is the
        # jobs' policy's, the one the worker's slot counts.
        job.id = "a-job"
        with runtime.sessions() as session:
            first = runner._budget(session, job)
            assert first == pytest.approx(jobs.budget("count.noisy", COUNT, metadata))
            assert runner._budget(session, job) == first
    finally:
        runtime.close()
    cached_calibration.cache_clear()
