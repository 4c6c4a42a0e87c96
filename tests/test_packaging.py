"""Packaging (issue #8): the sdist and the wheel build, and install as users install them.

One test runs ``scripts/check_wheel.py``: ``python -m build``, then the wheel in a fresh venv
without extras (the analyst client alone) and another with ``[server]`` (migrations from the
installed package, then the demo against it). It needs the package index and a few minutes.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "check_wheel.py"


@pytest.mark.packaging
@pytest.mark.timeout(1800)
def test_sdist_and_wheel_build_and_install_into_fresh_venvs() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT)],
        capture_output=True,
        text=True,
        timeout=1700,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert output.strip().splitlines()[-1] == "wheel check passed", output
