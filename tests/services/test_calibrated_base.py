"""The calibrated base (server/dpmine_server/request_path.py, services/timing.py): measured on a
real in-process server, stored in the calibration file, and turned into the base of a server
admitting DPMINE_MAX_IN_FLIGHT requests at once, never below the public floor."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dpmine_server.request_path import measure_request_path
from dpmine_server.services.calibration_file import (
    CALIBRATION_VERSION,
    RequestPathCalibration,
    cached_calibration,
)
from dpmine_server.services.timing import TimingPolicy
from dpmine_server.settings import MIN_FAIL_CLOSED_BASE_MS, Settings


def _calibration(folder: Path, seconds_per_request: float) -> Path:
    path = folder / f"calibration-{seconds_per_request}.json"
    measured = RequestPathCalibration(
        limit=4,
        bursts=2,
        burst_seconds=4 * seconds_per_request,
        seconds_per_request=seconds_per_request,
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


def test_a_file_without_the_request_path_keeps_the_configured_base(tmp_path: Path) -> None:
    path = tmp_path / "kernels-only.json"
    content = {"version": CALIBRATION_VERSION, "margin": 3.0, "created": "x", "operations": {}}
    path.write_text(json.dumps(content))
    assert _policy(path, 8).base == pytest.approx(0.1)
    cached_calibration.cache_clear()


def test_the_request_path_is_measured_on_a_real_server() -> None:
    measured = measure_request_path(limit=2, bursts=1)
    assert (measured.limit, measured.bursts) == (2, 1)
    assert measured.seconds_per_request == pytest.approx(measured.burst_seconds / 2)
    assert measured.burst_seconds > 0
