"""Time budgets measured at the first start (issue #23 item 1; services/first_start.py): the
first serving process on a data folder runs the real calibration and writes the public file,
later starts and other processes read it, and processes starting together measure once.

The calibration here is the real one on fewer operations and smaller tables than a server's
(``operations`` and ``sizes``), so that it takes a second; the whole quick calibration at a
real server's first start is the slow test at the end."""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from dpmine_server.services import first_start
from dpmine_server.services.calibration import calibrate
from dpmine_server.services.calibration_file import (
    CALIBRATION_VERSION,
    TimingCalibration,
    read_calibration,
)
from dpmine_server.services.container import build_services
from dpmine_server.services.timing import PRICED_OPERATIONS, TimingPolicy
from dpmine_server.settings import AUTO_CALIBRATION_FILE, Settings
from support.servers import LiveServer, http_client

OPERATIONS = ("count.noisy", "red.compute_quality")
SIZES = (300,)


def _settings(folder: Path, **changes: Any) -> Settings:
    values: dict[str, Any] = {
        "environment": "test",
        "database_url": f"sqlite:///{folder / 'dpmine.sqlite3'}",
        "data_dir": folder / "data",
        "secret_key": "first-start-secret-0123456789-abcdefgh",
        "timing_calibration": "auto",
        "job_workers": 1,
    }
    return Settings(**(values | changes))


def _small(settings: Settings) -> Path | None:
    return first_start.ensure_first_start_calibration(
        settings, sizes=SIZES, repeats=1, operations=OPERATIONS
    )


class _Counted:
    """The real calibration, counted; the first start's arguments made small."""

    def __init__(self) -> None:
        self.calls = 0
        self.asked: tuple[str, ...] = ()
        self.lock = threading.Lock()

    def __call__(
        self, _sizes: Sequence[int], _repeats: int, *, quick: bool, operations: Sequence[str]
    ) -> TimingCalibration:
        with self.lock:
            self.calls += 1
            self.asked = tuple(operations)
        return calibrate(SIZES, 1, quick=quick, operations=OPERATIONS)


def test_production_measures_at_its_first_start_by_default() -> None:
    production = Settings(environment="production", secret_key="p" * 40)
    assert production.timing_calibration == "auto"
    assert production.calibration_file == production.data_dir / AUTO_CALIBRATION_FILE
    assert Settings(environment="development").timing_calibration is None
    assert Settings(environment="development").calibration_file is None


def test_the_first_start_writes_the_public_file_and_the_policy_uses_it(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    path = settings.calibration_file
    assert path is not None
    before = TimingPolicy.from_settings(settings)
    assert before.calibration is None
    assert before.calibration_label is not None
    assert "not measured yet" in before.calibration_label
    assert _small(settings) == path
    written = read_calibration(path, PRICED_OPERATIONS)
    assert sorted(written.operations) == sorted(OPERATIONS)
    assert written.quick
    assert written.request_path is None  # the base stays DPMINE_TIMING_BASE_MS
    policy = TimingPolicy.from_settings(settings)
    assert policy.calibration == written
    assert policy.calibration_label == written.label(path)
    assert not list(path.parent.glob("*.partial"))


def test_a_later_start_reads_the_file_and_measures_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = _settings(tmp_path)
    path = _small(settings)
    assert path is not None
    content = path.read_bytes()
    counted = _Counted()
    monkeypatch.setattr(first_start, "calibrate", counted)
    assert _small(settings) == path
    assert counted.calls == 0
    assert path.read_bytes() == content


def test_a_file_of_an_older_method_is_measured_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A version-1 file timed calls on filled caches (under-priced first calls): the next
    start measures again and writes this version; a file it cannot parse is left as it is,
    for the start to report."""
    settings = _settings(tmp_path)
    path = _small(settings)
    assert path is not None
    current = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps(current | {"version": CALIBRATION_VERSION - 1}), encoding="utf-8")
    counted = _Counted()
    monkeypatch.setattr(first_start, "calibrate", counted)
    with caplog.at_level(logging.WARNING, logger=first_start.__name__):
        assert _small(settings) == path
    assert counted.calls == 1
    assert read_calibration(path, PRICED_OPERATIONS).version == CALIBRATION_VERSION
    assert "was measured by an older calibration method: measuring it again" in caplog.text
    path.write_text("{not json", encoding="utf-8")
    assert _small(settings) == path
    assert counted.calls == 1
    assert path.read_text(encoding="utf-8") == "{not json"


def test_processes_starting_together_measure_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four starts at once on one data folder (each its own open file, as processes have):
    the lock lets one measure; the others wait and get the same file."""
    counted = _Counted()
    monkeypatch.setattr(first_start, "calibrate", counted)
    settings = _settings(tmp_path)
    found: list[Path | None] = []
    starts = [threading.Thread(target=lambda: found.append(_small(settings))) for _ in range(4)]
    for start in starts:
        start.start()
    for start in starts:
        start.join()
    assert counted.calls == 1
    assert found == [settings.calibration_file] * 4


@pytest.mark.parametrize(
    "changes",
    [{"timing_calibration": None}, {"timing_padding": False}],
    ids=["unset", "no-padding"],
)
def test_nothing_is_measured_without_auto_or_without_padding(
    tmp_path: Path, changes: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    counted = _Counted()
    monkeypatch.setattr(first_start, "calibrate", counted)
    assert _small(_settings(tmp_path, **changes)) is None
    assert counted.calls == 0
    assert not (tmp_path / "data" / AUTO_CALIBRATION_FILE).exists()


def test_a_serving_start_measures_before_it_builds_its_policy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real container: a serving start (``start_workers``) measures first, so its padding
    policy is the measured one; an administration command (no workers) measures nothing."""
    counted = _Counted()
    monkeypatch.setattr(first_start, "calibrate", counted)
    settings = _settings(tmp_path)
    admin = build_services(settings, start_workers=False)
    admin.close()
    assert counted.calls == 0
    services = build_services(settings)
    try:
        assert counted.calls == 1
        assert counted.asked == PRICED_OPERATIONS  # a server measures every priced operation
        path = settings.calibration_file
        assert path is not None
        assert services.timing.calibration == read_calibration(path, PRICED_OPERATIONS)
    finally:
        services.close()


@pytest.mark.slow
@pytest.mark.skipif(os.name != "posix", reason="spawns a server process")
def test_a_real_server_measures_at_its_first_start_and_reads_the_file_after(
    tmp_path: Path,
) -> None:
    server = LiveServer(
        database_url=f"sqlite:///{tmp_path / 'auto.sqlite3'}",
        workdir=tmp_path,
        extra_env={
            "DPMINE_TIMING_CALIBRATION": "auto",
            "DPMINE_TIMING_BASE_MS": "100",
            "DPMINE_TIMING_SCALE": "1",
            "DPMINE_TIMING_GRID_MS": "50",
        },
    )
    path = server.data_dir / AUTO_CALIBRATION_FILE
    server.start(timeout=600)
    try:
        written = path.read_bytes()
        with http_client(server.url) as client:
            shown = client.get("/v1/health").json()["timing_calibration"]
        calibration = read_calibration(path, PRICED_OPERATIONS)
        assert shown == calibration.label(path)
        assert sorted(calibration.operations) == sorted(PRICED_OPERATIONS)
        server.restart(timeout=120)
        assert path.read_bytes() == written
        assert "measuring this machine's time budgets" in server.log_text()
    finally:
        server.stop()
