"""A process's warm-up loads the compiled kernels before the padded dataset loads."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpmine_server.services import warmup
from dpmine_server.services.container import build_services
from dpmine_server.services.datasets import DatasetService
from support.inprocess import settings_for


def test_kernels_load_before_the_padded_dataset_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dataset parsed from its source sorts its numeric columns with a compiled kernel; its
    first load (numba's cache, seconds after an install) must not fall inside a padded load.
    The real dataset service's preload runs; both steps are recorded in the order they ran."""
    settings = settings_for(
        tmp_path,
        database_file="dpmine.sqlite3",
        owner_key="owner-key-0123456789-abcdefgh",
        secret_key="warmup-secret-0123456789-abcdefgh",
        test_seed=1,
        job_workers=1,
    )
    services = build_services(settings)
    calls: list[str] = []
    preload = DatasetService.preload

    def recorded_preload(datasets: DatasetService) -> int:
        calls.append("preload")
        return preload(datasets)

    monkeypatch.setattr(warmup, "warm_compiled_kernels", lambda: calls.append("kernels"))
    monkeypatch.setattr(DatasetService, "preload", recorded_preload)
    try:
        warmup.warm_process(services.datasets)
    finally:
        services.close()
    assert calls == ["kernels", "preload"]
