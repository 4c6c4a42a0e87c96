"""A process's warm-up loads the compiled kernels before the padded dataset loads, and
freezes the heap in between (services/warmup.py)."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dpmine_server.services import warmup
from dpmine_server.services.container import Services, build_services
from dpmine_server.services.datasets import DatasetService
from support.inprocess import settings_for


def _services(folder: Path) -> Services:
    """The real services of a test-mode server on ``folder``."""
    return build_services(
        settings_for(
            folder,
            database_file="dpmine.sqlite3",
            owner_key="owner-key-0123456789-abcdefgh",
            secret_key="warmup-secret-0123456789-abcdefgh",
            test_seed=1,
            job_workers=1,
        )
    )


def test_kernels_load_before_the_padded_dataset_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dataset parsed from its source sorts its numeric columns with a compiled kernel; its
    first load (numba's cache, seconds after an install) must not fall inside a padded load.
    The real dataset service's preload runs; both steps are recorded in the order they ran."""
    services = _services(tmp_path)
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
        gc.unfreeze()
    assert calls == ["kernels", "preload"]


def _cycle() -> dict[str, Any]:
    """A container the collector tracks (it refers to itself)."""
    node: dict[str, Any] = {}
    node["self"] = node
    return node


def _in_a_generation(*nodes: object) -> list[bool]:
    """Whether a collection of any generation would traverse each of ``nodes`` (frozen
    objects are in none of them): one pass over the collector's objects."""
    traversed = {id(candidate) for candidate in gc.get_objects()}
    return [id(node) in traversed for node in nodes]


def test_the_warmed_heap_is_frozen_and_the_datasets_are_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What lives before the datasets load (the process's code and framework state) is moved
    out of every generation, so that no later full collection walks it inside a padded kernel;
    what the preload makes stays collectable, so that a dataset replaced by a new version is
    freed even if it holds a reference cycle. Real services, the real preload."""
    services = _services(tmp_path)
    early = _cycle()
    made_by_preload: list[dict[str, Any]] = []
    preload = DatasetService.preload

    def preload_and_allocate(datasets: DatasetService) -> int:
        made_by_preload.append(_cycle())
        return preload(datasets)

    monkeypatch.setattr(warmup, "warm_compiled_kernels", lambda: None)
    monkeypatch.setattr(DatasetService, "preload", preload_and_allocate)
    assert gc.is_tracked(early)
    try:
        warmup.warm_process(services.datasets)
        assert gc.get_freeze_count() > 0
        assert _in_a_generation(early, made_by_preload[0]) == [False, True]
    finally:
        services.close()
        gc.unfreeze()


#: Imported on first use (data/loaders.py and services/queues.py, "Imports").
DEFERRED_MODULES = ("pandas", "procrastinate", "psycopg")

_PROBE = """
import json, sys
import dpmine_server.app, dpmine_server.cli
from dpmine_server.services import warmup
before = [name for name in {deferred!r} if name in sys.modules]
warmup.import_load_modules()
print(json.dumps({{"before": before, "after": sorted(sys.modules)}}))
"""


def test_the_server_defers_the_load_and_queue_modules_and_the_warm_up_imports_them() -> None:
    """A fresh interpreter that imports the server (API and CLI) has none of the deferred
    modules, and the warm-up's first step imports the ones a padded load needs."""
    probe = _PROBE.format(deferred=DEFERRED_MODULES)
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["before"] == []
    assert set(warmup.LOAD_MODULES) <= set(report["after"])


#: The compiled kernels that Python code calls (the others are compiled into these): each must
#: be loaded by the warm-up, never first by a padded call or load.
ENTRY_KERNELS = (
    "dpmine_server.data.cell_scan:_scan_numbers",
    "dpmine_server.data.decimal_scan:_scan",
    "dpmine_server.data.value_order:_sortable_keys",
    "dpmine_server.data.value_order:_radix_order",
    "dpmine_server.data.itemset_miner:_transpose",
    "dpmine_server.data.itemset_miner:_mine",
    "dpmine_server.data.itemset_miner:_select_dense",
    "dpmine_server.operations.tree_native:fill_masks",
    "dpmine_server.operations.tree_native:last_level_weights",
    "dpmine_server.operations.tree_native:mcmc_steps",
    "dpmine_server.operations.tree_native:pair_steps",
    "dpmine_server.operations.rule_list_exact:uncaptured_counts",
    "dpmine_server.operations.serenade_thresholds:_grid_cells",
    "dpmine_server.operations.serenade_thresholds:_uniform_grid_cells",
    "dpmine_server.operations.serenade_thresholds:_class_cell_counts",
    "dpmine_server.operations.serenade_quality:_counts_quality",
    "dpmine_server.operations.serenade_thresholds:_pair_interval_quality",
    "dpmine_server.dp.mechanisms:_normalised_cumulative",
)

_KERNEL_PROBE = """
import importlib, json
from dpmine_server.services import warmup
def loaded():
    found = {{}}
    for entry in {entries!r}:
        module, name = entry.split(":")
        found[entry] = len(getattr(importlib.import_module(module), name).signatures)
    return found
before = loaded()
warmup.warm_compiled_kernels()
print(json.dumps({{"before": before, "after": loaded()}}))
"""


def test_the_warm_up_loads_every_compiled_entry_kernel() -> None:
    """In a fresh interpreter no entry kernel is loaded; after the warm-up every one is (the
    numeric cell scan of a CSV's later chunks included, which the warm-up's one-chunk table
    alone would not reach)."""
    probe = _KERNEL_PROBE.format(entries=ENTRY_KERNELS)
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=600
    )
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert set(report["before"].values()) == {0}
    assert all(count >= 1 for count in report["after"].values()), report["after"]
