"""The timing calibration (issue #23 item 1): the public file, its validation, the calibrated
budgets, ``dpmine-server calibrate`` and the server that shows which calibration it uses."""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import dpmine_server
from dpmine_server.cli import app
from dpmine_server.data.columns import ColumnStore, NumericColumn
from dpmine_server.dp.rng import secure_generator
from dpmine_server.operations import CATALOG
from dpmine_server.operations.base import no_progress
from dpmine_server.operations.serenade_quality import sensitivities
from dpmine_server.public_cache import clear_public_caches
from dpmine_server.services.calibration import (
    ADVERSARIAL,
    Case,
    _exact_tree_cases,
    _timed,
    _variants,
    adversarial,
    calibrate,
    cases_for,
    distinct,
    wide,
)
from dpmine_server.services.calibration_file import (
    CALIBRATION_VERSION,
    CalibrationCase,
    CalibrationError,
    TimingCalibration,
    cached_calibration,
    read_calibration,
)
from dpmine_server.services.timing import (
    PRICED_OPERATIONS,
    TimingPolicy,
    operation_work,
    pricing_variant,
)
from dpmine_server.settings import Settings
from support.servers import LiveServer, ServerStartError, http_client


def _file(operations: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {
        "version": CALIBRATION_VERSION,
        "margin": 3.0,
        "created": "2026-11-26T19:00:00+00:00",
        "machine": {"cpu_model": "test CPU", "cores": 2},
        "operations": operations,
        **changes,
    }


def _write(folder: Path, content: dict[str, Any], name: str = "calibration.json") -> Path:
    path = folder / name
    path.write_text(json.dumps(content))
    return path


FACTORS = {
    "count.noisy": {"factor": 4.0, "floor_seconds": 0.02},
    "tree.expmech": {"factor": 0.25, "floor_seconds": 0.001},
    "serenade.extend_one": {"factor": 0.01, "floor_seconds": 0.0},
}


def test_file_round_trips(tmp_path: Path) -> None:
    written = TimingCalibration.model_validate(_file(FACTORS))
    path = tmp_path / "round.json"
    path.write_text(written.model_dump_json(indent=2))
    read = read_calibration(path, PRICED_OPERATIONS)
    assert read == written
    assert read.operations["tree.expmech"].factor == 0.25
    assert "round.json sha256:" in read.label(path)
    assert "test CPU" in read.label(path)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (_file({"fim.magic": {"factor": 1.0, "floor_seconds": 0.0}}), "unknown operation"),
        (_file({"count.noisy": {"factor": 0.0, "floor_seconds": 0.0}}), "positive finite"),
        (_file({"count.noisy": {"factor": -2.0, "floor_seconds": 0.0}}), "positive finite"),
        (_file(FACTORS, version=CALIBRATION_VERSION + 1), "is not supported"),
        (_file(FACTORS, margin=0.5), "margin must be"),
        (_file(FACTORS, surplus=1), "surplus"),
    ],
)
def test_bad_files_are_refused_with_what_to_fix(
    tmp_path: Path, content: dict[str, Any], expected: str
) -> None:
    path = _write(tmp_path, content)
    with pytest.raises(CalibrationError, match=expected) as refused:
        read_calibration(path, PRICED_OPERATIONS)
    assert f"DPMINE_TIMING_CALIBRATION={path}" in str(refused.value)
    assert "dpmine-server calibrate" in str(refused.value)


def test_missing_or_broken_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CalibrationError, match="cannot read the file"):
        read_calibration(tmp_path / "absent.json", PRICED_OPERATIONS)
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(CalibrationError, match="fix the file"):
        read_calibration(broken, PRICED_OPERATIONS)


def test_calibrated_budget_is_base_plus_margin_factor_work(tmp_path: Path) -> None:
    path = _write(tmp_path, _file(FACTORS))
    settings = Settings(environment="development", timing_calibration=path)
    calibrated = TimingPolicy.from_settings(settings)
    plain = TimingPolicy.from_settings(Settings(environment="development"))
    assert calibrated.calibration_label is not None
    assert plain.calibration_label is None
    metadata = distinct(500).store.metadata
    requests = {
        "count.noisy": {"epsilon": 0.1},
        "tree.expmech": {
            "view": "right",
            "target": {"kind": "attribute", "attribute": "b0"},
            "epsilon": 1.0,
        },
        "tree.mcmc": {
            "view": "right",
            "target": {"kind": "attribute", "attribute": "b0"},
            "epsilon": 1.0,
        },
    }
    for operation, body in requests.items():
        request = CATALOG[operation].request_model.model_validate(body)
        work = operation_work(operation, request, metadata)
        budget = calibrated.budget(operation, request, metadata)
        if operation in FACTORS:
            measured = FACTORS[operation]
            expected = 0.1 + max(3.0 * measured["factor"] * work, 3.0 * measured["floor_seconds"])
        else:  # not in the file: today's estimate (factor 1, no margin)
            expected = 0.1 + work
            assert budget == plain.budget(operation, request, metadata)
        assert budget == pytest.approx(expected, rel=1e-12)
    # A tail-capped operation is never granted less than its hand-set estimate (a calibration
    # times typical runs, not runs at the cap), whatever its measured factor.
    body = {
        "mode": "cs",
        "collection": [
            {
                "left": {"kind": "bool", "attribute": "b0"},
                "right": {"kind": "bool", "attribute": "r"},
            }
        ],
        "epsilon": 1.0,
        "quality": {"x0": 50.0},
    }
    request = CATALOG["serenade.extend_one"].request_model.model_validate(body)
    work = operation_work("serenade.extend_one", request, metadata)
    assert 3.0 * 0.01 * work < work
    assert calibrated.budget("serenade.extend_one", request, metadata) == pytest.approx(0.1 + work)
    # The floor: a request smaller than every measured case keeps margin x the fixed cost.
    tiny = distinct(100).store.metadata
    request = CATALOG["count.noisy"].request_model.model_validate({"epsilon": 0.1})
    assert 3.0 * 4.0 * operation_work("count.noisy", request, tiny) < 3.0 * 0.02
    assert calibrated.budget("count.noisy", request, tiny) == pytest.approx(0.1 + 0.06)


def test_each_tree_sampler_is_priced_by_its_own_measured_factor(tmp_path: Path) -> None:
    """``tree.mcmc`` runs a chain or an exact sampler, chosen from public values; a file that
    measured both prices each by its own factor, and one that did not by the operation's."""
    variants = {
        "exact": {"factor": 0.1, "floor_seconds": 0.001},
        "mcmc": {"factor": 0.4, "floor_seconds": 0.002},
    }
    measured = {"tree.mcmc": {"factor": 0.4, "floor_seconds": 0.001, "variants": variants}}
    policy = TimingPolicy.from_settings(
        Settings(environment="development", timing_calibration=_write(tmp_path, _file(measured)))
    )
    single = _write(
        tmp_path, _file({"tree.mcmc": {"factor": 0.4, "floor_seconds": 0.001}}), "one.json"
    )
    pooled = TimingPolicy.from_settings(
        Settings(environment="development", timing_calibration=single)
    )
    metadata = distinct(500).store.metadata
    exact_body = _exact_tree_cases(metadata, "distinct")[0].request
    for sampler, factor in (("exact", 0.1), ("mcmc", 0.4)):
        request = CATALOG["tree.mcmc"].request_model.model_validate(
            exact_body | {"sampler": sampler}
        )
        assert pricing_variant("tree.mcmc", request, metadata) == sampler
        work = operation_work("tree.mcmc", request, metadata)
        expected = 0.1 + 3.0 * max(factor * work, variants[sampler]["floor_seconds"])
        assert policy.budget("tree.mcmc", request, metadata) == pytest.approx(expected)
        unsplit = 0.1 + 3.0 * max(0.4 * work, 0.001)
        assert pooled.budget("tree.mcmc", request, metadata) == pytest.approx(unsplit)
    assert pricing_variant("tree.expmech", {"epsilon": 1.0}, metadata) is None
    cached_calibration.cache_clear()


def test_each_timed_case_records_the_sampler_it_ran() -> None:
    dataset = distinct(300)
    exact = _exact_tree_cases(dataset.store.metadata, "distinct")[0]
    chain = Case("tree.mcmc", "distinct", exact.request | {"sampler": "mcmc", "iterations": 1000})
    assert [_timed(case, dataset.store, 1)[2] for case in (exact, chain)] == ["exact", "mcmc"]
    measured = [
        CalibrationCase(dataset="distinct", n_max=300, work=work, max_seconds=seconds, variant=v)
        for work, seconds, v in ((1.0, 0.2, "mcmc"), (2.0, 0.2, "mcmc"), (1.0, 0.05, "exact"))
    ]
    variants = _variants(measured)
    assert variants["mcmc"].factor == pytest.approx(0.2)
    assert variants["mcmc"].floor_seconds == pytest.approx(0.2)
    assert variants["exact"].factor == pytest.approx(0.05)


def test_every_timed_call_finds_the_table_as_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    """The untimed first call may fill the store's caches; each timed call then runs on a fresh
    copy with nothing cached, since a budget is priced without knowing what earlier requests
    left (timed on the filled store, ``extend_one`` was measured drawing from cached candidate
    sets and its first calls overran)."""
    dataset = wide(200)
    case = next(c for c in cases_for(dataset) if c.operation == "serenade.extend_one")
    spec = CATALOG[case.operation]
    run = spec.run
    seen: list[tuple[bool, int, int]] = []

    def recorded(store: ColumnStore, *args: Any) -> Any:
        numeric = [a.name for a in store.metadata.attributes if a.type == "numeric"]
        grids = sum(
            len(c.derived) for c in map(store.column, numeric) if isinstance(c, NumericColumn)
        )
        seen.append((store is dataset.store, len(store.derived), grids))
        return run(store, *args)

    monkeypatch.setitem(CATALOG, case.operation, replace(spec, run=recorded))
    _timed(case, dataset.store, 3)
    assert seen[0][0]  # the untimed call: on the table itself, whatever it holds
    assert seen[1:] == [(False, 0, 0)] * 3
    assert len(dataset.store.derived) > 0  # which the first call did fill


def test_every_timed_call_finds_the_public_caches_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    """A request whose public parameters this process has not seen computes them inside its
    padded window (the steepness line search, the lattices), so each timed call starts with
    the caches of public values empty; the untimed first call fills them."""
    dataset = wide(200)
    case = next(c for c in cases_for(dataset) if c.operation == "serenade.extend_one")
    spec = CATALOG[case.operation]
    run = spec.run
    held: list[int] = []

    def recorded(store: ColumnStore, *args: Any) -> Any:
        held.append(sensitivities.cache_info().currsize)
        return run(store, *args)

    monkeypatch.setitem(CATALOG, case.operation, replace(spec, run=recorded))
    _timed(case, dataset.store, 3)
    assert held[1:] == [0, 0, 0]
    assert sensitivities.cache_info().currsize > 0  # each call computed its parameters again


#: How a module would declare a cache that :func:`clear_public_caches` does not know.
PLAIN_CACHE = re.compile(r"lru_cache\(|@(functools\.)?cache$", re.MULTILINE)


def test_every_module_level_cache_of_the_server_is_a_public_one() -> None:
    """``public_cache`` registers a cache for the calibration to empty; a plain
    ``functools.lru_cache`` in a kernel or mechanism module would stay filled and be timed warm."""
    package = Path(dpmine_server.__file__).parent
    plain = [
        str(path.relative_to(package))
        for folder in ("operations", "dp", "data", "services")
        for path in sorted((package / folder).rglob("*.py"))
        if PLAIN_CACHE.search(path.read_text(encoding="utf-8"))
    ]
    # The calibration file's own reader is not a kernel: it is read when a policy is built.
    assert plain == ["services/calibration_file.py"]
    assert clear_public_caches() >= 10


@pytest.mark.slow
def test_a_calibration_measures_each_tree_sampler_apart() -> None:
    measured = calibrate((300,), 1, operations=("tree.mcmc",)).operations["tree.mcmc"]
    assert set(measured.variants) == {"exact", "mcmc"}
    assert {case.variant for case in measured.cases} == {"exact", "mcmc"}
    for name, variant in measured.variants.items():
        own = [case for case in measured.cases if case.variant == name]
        assert variant.factor == pytest.approx(max(c.max_seconds / c.work for c in own))
        assert variant.floor_seconds == min(c.max_seconds for c in own)
    # The operation's own factor stays the largest, for requests of an unmeasured variant.
    assert measured.factor == max(variant.factor for variant in measured.variants.values())


def test_test_mode_budgets_stay_zero(tmp_path: Path) -> None:
    path = _write(tmp_path, _file(FACTORS))
    policy = TimingPolicy.from_settings(Settings(environment="test", timing_calibration=path))
    metadata = distinct(500).store.metadata
    request = CATALOG["count.noisy"].request_model.model_validate({"epsilon": 0.1})
    assert policy.budget("count.noisy", request, metadata) == 0.0


def test_cli_writes_a_calibration_on_a_tiny_run(tmp_path: Path) -> None:
    out = tmp_path / "measured.json"
    operations = "count.noisy,red.compute_quality,tree.expmech"
    arguments = ["calibrate", "--rows", "300", "--repeats", "1", "--operations", operations]
    result = CliRunner().invoke(app, [*arguments, "--out", str(out), "--json"])
    assert result.exit_code == 0, (result.output, repr(result.exception))
    summary = json.loads(result.stdout)
    calibration = read_calibration(out, PRICED_OPERATIONS)
    assert set(calibration.operations) == set(operations.split(","))
    assert summary["factors"] == {n: op.factor for n, op in calibration.operations.items()}
    assert calibration.margin == 3.0
    assert calibration.machine["python"]
    for name, measured in calibration.operations.items():
        # The factor is the largest measured seconds per work unit over the cases.
        assert measured.cases, name
        worst = max(case.max_seconds / case.work for case in measured.cases)
        assert measured.factor == pytest.approx(max(worst, 1e-9))
        assert {case.dataset for case in measured.cases} <= set(ADVERSARIAL)


def test_cli_refuses_an_unknown_operation(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["calibrate", "--operations", "count.noisy,fim.magic", "--out", str(tmp_path / "x")]
    )
    assert result.exit_code == 2
    assert "unknown fim.magic" in result.stderr
    assert "choose among" in result.stderr
    assert not (tmp_path / "x").exists()


@pytest.mark.skipif(os.name != "posix", reason="spawns a server process")
def test_server_shows_its_calibration_and_refuses_a_bad_one(tmp_path: Path) -> None:
    good = _write(tmp_path, _file(FACTORS), "good.json")
    server = LiveServer(
        database_url=f"sqlite:///{tmp_path / 'good.sqlite3'}",
        workdir=tmp_path / "good",
        extra_env={"DPMINE_TIMING_CALIBRATION": str(good)},
    )
    with server, http_client(server.url) as client:
        health = client.get("/v1/health").json()
    expected = TimingCalibration.model_validate(_file(FACTORS)).label(good)
    assert health["timing_calibration"] == expected
    bad = _write(tmp_path, _file({"count.noisy": {"factor": 0, "floor_seconds": 0}}), "bad.json")
    refused = LiveServer(
        database_url=f"sqlite:///{tmp_path / 'bad.sqlite3'}",
        workdir=tmp_path / "bad",
        extra_env={"DPMINE_TIMING_CALIBRATION": str(bad)},
    )
    with pytest.raises(ServerStartError):
        refused.start(timeout=60)
    assert f"DPMINE_TIMING_CALIBRATION={bad}" in refused.log_text()
    assert "factor must be a positive finite number" in refused.log_text()


@pytest.mark.slow
def test_no_adversarial_kernel_exceeds_its_calibrated_budget() -> None:
    """Issue #23's check: calibrate on small adversarial data, then re-run every case and find
    no kernel time above its calibrated budget (development base, margin 3)."""
    rows = 2_000
    measured = calibrate((rows,), 2)
    policy = TimingPolicy(
        enabled=True, grid=0.05, base=0.1, scale=1.0, fail_closed=True, calibration=measured
    )
    over: list[str] = []
    for key in ADVERSARIAL:
        dataset = adversarial(key, rows)
        for case in cases_for(dataset):
            spec = CATALOG[case.operation]
            request = spec.request_model.model_validate(case.request)
            spec.validate(request, dataset.store.metadata)
            budget = policy.budget(case.operation, request, dataset.store.metadata)
            for _ in range(2):
                start = time.perf_counter()
                spec.run(
                    dataset.store, request, spec.cost(request), secure_generator(), no_progress
                )
                elapsed = time.perf_counter() - start
                if elapsed > budget:
                    over.append(
                        f"{case.operation} on {key} {case.note}: {elapsed:.3f} s > {budget:.3f} s"
                    )
    assert not over, over
