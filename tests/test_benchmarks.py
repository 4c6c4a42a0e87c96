"""Every benchmark of ``bench/`` runs as committed (issue #23, item 5).

Each script has a ``--smoke`` mode: every stage of the script end to end, with the real servers it
normally starts, on tiny data that ships with the repository (the bundled Mushroom table, or
small tables the script generates), in seconds. This test runs it as a subprocess, as a user
would, and checks the exit status and the shape of the JSON it writes: a change that breaks a
benchmark fails here. Nothing about time is asserted (the benchmarks measure time; the suite
does not). pyfim, the non-private baseline of the itemset benchmarks, is in the ``bench`` extra
that ``make test`` does not install: the smoke modes skip it and say so.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
#: A smoke run takes seconds; this only stops a hung one.
TIMEOUT_S = 600.0

#: script -> {JSON file it writes: keys that must hold a non-empty list or mapping}.
EXPECTED: dict[str, dict[str, tuple[str, ...]]] = {
    "bench_budgets.py": {
        "budgets.json": ("machine", "results"),
    },
    "bench_serenade.py": {
        "serenade.json": ("machine", "datasets", "calibrations", "summaries", "runs", "clired"),
        "serenade_utility.json": ("summaries", "runs"),
        "serenade_batching.json": ("part_seconds", "runs"),
    },
    "calibrate_itemsets.py": {
        "calibrate_itemsets.json": ("machine", "measured", "model", "fimi"),
    },
    "bench_foundation.py": {
        "foundation.json": (
            "machine",
            "quality",
            "count_engine",
            "count_kernel",
            "long_job",
            "jobs",
            "topk",
        ),
    },
    "bench_loading.py": {
        "loading.json": ("machine", "results"),
    },
    "bench_itemsets.py": {
        "itemsets.json": ("machine", "true_counts", "utility", "speed", "ratios", "profiles"),
    },
    "bench_rule_lists.py": {
        "rule_lists.json": ("machine", "parameters", "dp_runs"),
    },
    "bench_throughput.py": {
        "throughput.json": ("machine", "config", "deadlines_ms", "results"),
    },
    "bench_trees.py": {
        "trees.json": ("machine", "n_rows", "summaries", "runs", "figures"),
    },
    "bench_tree_exact.py": {
        "tree_exact.json": ("machine", "rows"),
    },
    "bench_trust.py": {
        "trust.json": ("machine", "n_rows", "views", "summaries", "runs"),
    },
}


def run_smoke(
    script: str, out: Path, *, first_on_path: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``python bench/<script> --smoke --out <out>`` from the repository's root (``tests`` on
    the path for the scripts that reuse the test suite's tables; ``first_on_path`` before
    everything else)."""
    folders = [str(first_on_path) if first_on_path else None, str(REPO / "tests")]
    path = os.pathsep.join(filter(None, [*folders, os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, str(REPO / "bench" / script), "--smoke", "--out", str(out)],
        cwd=REPO,
        env=os.environ | {"PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


def is_filled(value: Any) -> bool:
    """A non-empty list or mapping."""
    return isinstance(value, list | dict) and len(value) > 0


#: Whether pyfim (the ``bench`` extra) is importable here; ``make test`` does not install it.
HAS_PYFIM = importlib.util.find_spec("fim") is not None


@pytest.mark.parametrize("script", sorted(EXPECTED))
def test_smoke_mode_runs_and_writes_its_results(script: str, tmp_path: Path) -> None:
    finished = run_smoke(script, tmp_path)
    assert finished.returncode == 0, (
        f"{script} --smoke exited with {finished.returncode}:\n"
        f"{finished.stdout[-4000:]}\n{finished.stderr[-4000:]}"
    )
    for file_name, keys in EXPECTED[script].items():
        payload = json.loads((tmp_path / file_name).read_text(encoding="utf-8"))
        empty = [key for key in keys if not is_filled(payload.get(key))]
        assert not empty, f"{script}: {file_name} has no {empty}"
    if script == "bench_itemsets.py" and not HAS_PYFIM:
        assert_ran_without_pyfim(finished, tmp_path)


def assert_ran_without_pyfim(finished: subprocess.CompletedProcess[str], out: Path) -> None:
    """The itemset benchmark without the bench extra: the true top K is counted by the harness
    and the pyfim baseline is reported as skipped."""
    assert "pyfim not installed" in finished.stdout
    payload = json.loads((out / "itemsets.json").read_text(encoding="utf-8"))
    assert payload["machine"]["pyfim"] is None
    assert is_filled(payload["utility"])
    assert is_filled(payload["speed"])


@pytest.mark.skipif(
    not HAS_PYFIM, reason="pyfim is absent: the itemset smoke run above is the pyfim-less run"
)
def test_itemset_smoke_runs_without_pyfim(tmp_path: Path) -> None:
    """With the bench extra installed, hide pyfim: the itemset benchmark still runs."""
    hidden = tmp_path / "hide-pyfim"
    hidden.mkdir()
    (hidden / "fim.py").write_text('raise ImportError("pyfim hidden by the test")\n')
    finished = run_smoke("bench_itemsets.py", tmp_path / "out", first_on_path=hidden)
    assert finished.returncode == 0, f"{finished.stdout[-4000:]}\n{finished.stderr[-4000:]}"
    assert_ran_without_pyfim(finished, tmp_path / "out")
