# Thin wrappers; every target creates .venv on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test audit lint format bench packaging clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

## The main job: server on SQLite + bundled dataset + a private analysis over HTTP.
demo: $(STAMP)
	$(PY) scripts/demo.py

## Lint, type-check, then the whole test suite (PostgreSQL lane included when available). Every
## statistical audit runs at a short size that still flags its broken variant; the long
## repetitions (marker `slow`) are left out, see `make audit`. Two phases: the tests not marked
## `serial` on $(TEST_WORKERS) pytest-xdist workers, then the `serial` ones (wall-time audits,
## kills mid-job, the browser; tests/conftest.py: SERIAL_MODULES) apart from the CPU-bound
## tests, a module at a time on each of $(SERIAL_WORKERS) workers: they mostly wait on padded
## deadlines (load about 1 on 2 cores), and each module keeps its own server. Modules are handed
## out in collection order, longest first (tests/conftest.py: LONG_FIRST_MODULES), not by their
## number of tests (pytest-xdist's default), so that the phase does not end on one long module.
##
## The suite starts hundreds of Python processes (live servers, their job workers, pytest
## workers, the benchmarks' smoke runs). Where PYTHONDONTWRITEBYTECODE is set, as on some CI
## images, each of them would compile the project and pytest's rewritten test modules from
## source again; the test targets run without it, after compiling the project once.
TEST_WORKERS ?= 2
SERIAL_WORKERS ?= 2
WITH_BYTECODE := env -u PYTHONDONTWRITEBYTECODE
test: $(STAMP) lint
	$(WITH_BYTECODE) $(PY) -m compileall -q client server
	$(WITH_BYTECODE) $(PY) -m pytest -n $(TEST_WORKERS) --dist worksteal -m 'not slow and not serial'
	$(WITH_BYTECODE) $(PY) -m pytest -n $(SERIAL_WORKERS) --dist loadfile --no-loadscope-reorder -m 'serial and not slow'

## The long runs (marker `slow`): the privacy, timing and channel audits at their full sample
## sizes and the heavy property tests; tens of minutes. `make test` plus `make audit` is the
## whole suite.
audit: $(STAMP)
	$(WITH_BYTECODE) $(PY) -m pytest -m slow

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

## The benchmarks also need the non-private baselines (pyfim builds from source: a C compiler).
bench: $(STAMP)
	$(PY) -m pip install --quiet -e '.[bench]'
	$(PY) bench/bench_foundation.py

## Build the sdist and the wheel and install them into fresh venvs (part of `make test` too).
packaging: $(STAMP)
	$(PY) scripts/check_wheel.py

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
