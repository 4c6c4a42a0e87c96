"""The suite's own layout: every module that conftest.py runs alone exists (a renamed module
would otherwise silently join the parallel phase of ``make test``)."""

from __future__ import annotations

from pathlib import Path

from conftest import LONG_FIRST_MODULES, SERIAL_MODULES

TESTS_DIR = Path(__file__).resolve().parent


def test_every_serial_module_exists() -> None:
    missing = sorted(name for name in SERIAL_MODULES if not (TESTS_DIR / name).is_file())
    assert not missing, f"SERIAL_MODULES names modules that do not exist: {missing}"


def test_every_long_first_module_exists_once() -> None:
    """A renamed long module would otherwise lose its place at the front of its phase."""
    names = {path.name for path in TESTS_DIR.rglob("test_*.py")}
    missing = sorted(set(LONG_FIRST_MODULES) - names)
    assert not missing, f"LONG_FIRST_MODULES names modules that do not exist: {missing}"
    assert len(set(LONG_FIRST_MODULES)) == len(LONG_FIRST_MODULES)


def test_every_timing_audit_runs_alone() -> None:
    """A padded-time audit measures wall time: beside the parallel phase's other workers it
    would flake, so every ``privacy/test_audit_timing*.py`` module is in SERIAL_MODULES."""
    timing = {
        path.relative_to(TESTS_DIR).as_posix()
        for path in (TESTS_DIR / "privacy").glob("test_audit_timing*.py")
    }
    assert timing, "no timing audit found: the glob is stale"
    assert sorted(timing - SERIAL_MODULES) == []
