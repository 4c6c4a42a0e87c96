"""Build the sdist and the wheel and check them as users install them (``make test`` runs this
through tests/test_packaging.py; by hand: ``.venv/bin/python scripts/check_wheel.py``).

1. ``python -m build``: the sdist, then the wheel built from the sdist; the wheel carries the
   licence and ``dpmine/py.typed``, the sdist the licence and docs/;
2. a fresh virtual environment with the wheel alone (an analyst's ``pip install dpmine``):
   ``dpmine`` imports from site-packages, ``dpmine --help`` runs, FastAPI, SQLAlchemy and
   the rest of the server stack are absent, and ``dpmine-server`` says in one line to install
   the server extra; then the sdist installed over it also works;
3. a fresh virtual environment with ``wheel[server]`` (a data owner's install):
   ``dpmine-server db upgrade`` migrates a new SQLite database to the newest revision from the
   migrations inside the installed package, ``/docs`` and ``/redoc`` serve their assets from the
   installed packages, and ``scripts/demo.py`` runs against that server.

Both fresh environments install with ``--only-binary=:all:``: every dependency must come as a
wheel, so the install needs no C compiler (as in the Dockerfile's slim image).

Everything runs outside the source tree (a temporary directory as working directory, no
``PYTHONPATH``, ``python -P``), so only the installed packages can be imported. The last line
printed is ``wheel check passed`` on success; any failure exits non-zero.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SERVER_STACK = ("fastapi", "sqlalchemy", "alembic", "uvicorn", "opendp", "randomgen")
#: What scripts/demo.py reads relative to the repository root.
DEMO_FILES = ("scripts/demo.py", "config/demo", "data/uci_mushroom")
#: Files the wheel must hold (besides the code) and files the sdist must hold.
WHEEL_FILES = ("dpmine/py.typed", "dpmine-{version}.dist-info/licenses/LICENSE")
SDIST_FILES = ("LICENSE", "docs/privacy.md", "docs/operations.md", "docs/operators.md")
#: What ``dpmine-server`` says on a client-only install.
INSTALL_HINT = "install it with: pip install 'dpmine[server]'"
#: Fetches the documentation pages and their first local asset from the installed app.
DOCS_PROBE = """
import re, warnings
warnings.simplefilter("ignore")
from fastapi.testclient import TestClient
from dpmine_server.app import create_app
from dpmine_server.settings import Settings
client = TestClient(create_app(Settings(environment="test", database_url="sqlite:///unused.db")))
sizes = []
for page in ("/docs", "/redoc"):
    html = client.get(page).text
    for url in re.findall(r'<script src="([^"]+)"', html):
        answer = client.get(url)
        assert answer.status_code == 200 and url.startswith("/docs-assets/"), url
        sizes.append(len(answer.content))
print(min(sizes))
"""
PASSED = "wheel check passed"
STARTED = time.monotonic()


class CheckFailed(Exception):
    """A packaging check did not hold."""


def step(message: str) -> None:
    """Progress on stdout (the test shows it when the check fails)."""
    sys.stdout.write(f"[check_wheel {time.monotonic() - STARTED:3.0f} s] {message}\n")
    sys.stdout.flush()


def clean_env(venv: Path | None = None) -> dict[str, str]:
    """The caller's environment without anything that could import the source tree or change
    the server's settings; ``venv``'s scripts first on PATH."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSAFEPATH"}
        and not key.startswith("DPMINE_")
    }
    if venv is not None:
        env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["VIRTUAL_ENV"] = str(venv)
    return env


def run(
    command: list[str | Path],
    *,
    cwd: Path,
    env: dict[str, str],
    timeout: float = 900,
    expect_failure: bool = False,
) -> str:
    """Run ``command``; its output, or :class:`CheckFailed` with the output when it fails (or,
    with ``expect_failure``, when it succeeds)."""
    args = [str(part) for part in command]
    result = subprocess.run(
        args,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    output = result.stdout + result.stderr
    if (result.returncode == 0) == expect_failure:
        expected = "fail" if expect_failure else "succeed"
        raise CheckFailed(
            f"expected to {expected}, exit code {result.returncode}: {' '.join(args)}\n{output}"
        )
    return output


def python_output(venv: Path, program: str, *, cwd: Path, env: dict[str, str]) -> str:
    """The last line ``program`` prints, run by the venv's interpreter with a safe sys.path."""
    output = run([venv / "bin" / "python", "-P", "-c", program], cwd=cwd, env=env)
    return output.strip().splitlines()[-1]


def build(outdir: Path, work: Path) -> tuple[Path, Path]:
    """``python -m build`` (the wheel is built from the sdist); the sdist and the wheel."""
    step("building the sdist and the wheel (python -m build)")
    run([sys.executable, "-m", "build", "--outdir", outdir, ROOT], cwd=work, env=clean_env())
    sdists = sorted(outdir.glob("dpmine-*.tar.gz"))
    wheels = sorted(outdir.glob("dpmine-*-py3-none-any.whl"))
    if len(sdists) != 1 or len(wheels) != 1:
        raise CheckFailed(f"expected one sdist and one wheel in {outdir}: {sdists + wheels}")
    return sdists[0], wheels[0]


def new_venv(path: Path, work: Path, requirement: str, *, compile_bytecode: bool) -> dict[str, str]:
    """A fresh virtual environment at ``path`` with ``requirement`` installed; its env.

    ``compile_bytecode=False`` (pip's ``--no-compile``) saves ~20 s of byte-compiling numpy,
    scipy and pandas where little runs. The server's venv is compiled, as pip does for users:
    where ``PYTHONDONTWRITEBYTECODE`` is set (multiprocessing then starts the job workers with
    ``-B``), nothing would write the bytecode, so every start would compile every module from
    source again, and the start-up warms them (74 s instead of 18 s on this project's machines).
    """
    step(f"fresh venv {path.name}: pip install --only-binary=:all: {requirement}")
    run([sys.executable, "-m", "venv", path], cwd=work, env=clean_env())
    env = clean_env(path)
    # Wheels only: pip fails rather than build a package from source, so the install is the
    # one a machine without a C compiler gets (the Dockerfile's slim image, issue #22).
    pip: list[str | Path] = [path / "bin" / "python", "-m", "pip", "install", "--only-binary=:all:"]
    if not compile_bytecode:
        pip.append("--no-compile")
    run([*pip, "--quiet", requirement], cwd=work, env=env)
    return env


def assert_installed(venv: Path, module: str, *, cwd: Path, env: dict[str, str]) -> Path:
    """``module`` imports from the venv's site-packages (not from the source tree)."""
    location = Path(
        python_output(venv, f"import {module}; print({module}.__file__)", cwd=cwd, env=env)
    )
    if "site-packages" not in location.parts or not location.is_relative_to(venv):
        raise CheckFailed(f"{module} was imported from {location}, not from {venv}")
    step(f"  {module} imported from {location}")
    return location


def check_contents(sdist: Path, wheel: Path) -> None:
    """The licence and the typing marker in the wheel, the licence and the docs in the sdist."""
    version = wheel.name.split("-")[1]
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = archive.read(f"dpmine-{version}.dist-info/METADATA").decode()
    missing = [name.format(version=version) for name in WHEEL_FILES]
    missing = [name for name in missing if name not in names]
    if missing or "License-Expression: Apache-2.0" not in metadata:
        raise CheckFailed(f"the wheel lacks {missing} or its Apache-2.0 licence expression")
    with tarfile.open(sdist) as archive:
        inside = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    if absent := [name for name in SDIST_FILES if name not in inside]:
        raise CheckFailed(f"the sdist lacks {absent}")
    step(f"  the wheel has py.typed and the licence; the sdist has {', '.join(SDIST_FILES)}")


def check_client(sdist: Path, wheel: Path, work: Path) -> None:
    """The wheel without extras: the analyst client alone."""
    venv = work / "venv-client"
    env = new_venv(venv, work, str(wheel), compile_bytecode=False)
    assert_installed(venv, "dpmine", cwd=work, env=env)
    run([venv / "bin" / "dpmine", "--help"], cwd=work, env=env)
    step("  dpmine --help runs")
    present = python_output(
        venv,
        "import importlib.util as u; "
        f"print([m for m in {list(SERVER_STACK)!r} if u.find_spec(m) is not None])",
        cwd=work,
        env=env,
    )
    if present != "[]":
        raise CheckFailed(f"the client-only install has server packages: {present}")
    for module in ("fastapi", "sqlalchemy"):
        python = venv / "bin" / "python"
        run([python, "-P", "-c", f"import {module}"], cwd=work, env=env, expect_failure=True)
    step(f"  absent: {', '.join(SERVER_STACK)}")
    said = run(
        [venv / "bin" / "dpmine-server", "principals", "list"],
        cwd=work,
        env=env,
        expect_failure=True,
    ).strip()
    if len(said.splitlines()) != 1 or INSTALL_HINT not in said or "Traceback" in said:
        raise CheckFailed(f"dpmine-server without the server extra said:\n{said}")
    step(f"  dpmine-server says: {said}")
    step(f"installing the sdist over it: {sdist.name}")
    pip: list[str | Path] = [venv / "bin" / "python", "-m", "pip", "install", "--quiet"]
    run([*pip, "--no-deps", "--force-reinstall", sdist], cwd=work, env=env)
    assert_installed(venv, "dpmine", cwd=work, env=env)
    run([venv / "bin" / "dpmine", "--help"], cwd=work, env=env)
    step("  the sdist builds and installs; dpmine --help runs")


def check_server(wheel: Path, work: Path) -> None:
    """The wheel with ``[server]``: migrations from the installed package, then the demo."""
    venv = work / "venv-server"
    env = new_venv(venv, work, f"{wheel}[server]", compile_bytecode=True)
    assert_installed(venv, "dpmine", cwd=work, env=env)
    package = assert_installed(venv, "dpmine_server", cwd=work, env=env).parent
    migrations = package / "db" / "migrations"
    for name in ("env.py", "script.py.mako"):
        if not (migrations / name).is_file():
            raise CheckFailed(f"the installed package lacks {migrations / name}")
    if not sorted((migrations / "versions").glob("*.py")):
        raise CheckFailed(f"the installed package has no migration scripts in {migrations}")
    head = python_output(
        venv,
        "from alembic.script import ScriptDirectory; "
        "from dpmine_server.db.migrate import alembic_config; "
        "print(ScriptDirectory.from_config(alembic_config()).get_current_head())",
        cwd=work,
        env=env,
    )
    database = work / "owner" / "dpmine.sqlite3"
    database.parent.mkdir()
    owner_env = {
        **env,
        "DPMINE_DATABASE_URL": f"sqlite:///{database}",
        "DPMINE_DATA_DIR": str(database.parent / "data"),
    }
    run([venv / "bin" / "dpmine-server", "db", "upgrade"], cwd=database.parent, env=owner_env)
    with sqlite3.connect(database) as connection:
        revision = connection.execute("SELECT version_num FROM alembic_version").fetchall()
    if revision != [(head,)]:
        raise CheckFailed(f"dpmine-server db upgrade left revision {revision}, head is {head}")
    step(f"  dpmine-server db upgrade: a new SQLite database is at the head revision {head}")
    smallest = python_output(venv, DOCS_PROBE, cwd=database.parent, env=env)
    if int(smallest) < 1000:
        raise CheckFailed(f"a documentation script of the installed server has {smallest} bytes")
    step(f"  /docs and /redoc load their scripts from the installed packages ({smallest}+ bytes)")

    # The demo, copied out of the source tree with what it reads, run by the venv's python; it
    # starts the server as `sys.executable -m dpmine_server.cli serve`, so from the venv too.
    demo_root = work / "demo"
    for relative in DEMO_FILES:
        source, target = ROOT / relative, demo_root / relative
        if source.is_dir():
            shutil.copytree(source, target)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    step("running scripts/demo.py against the installed server")
    started = time.monotonic()
    output = run(
        [venv / "bin" / "python", "-P", demo_root / "scripts" / "demo.py"],
        cwd=demo_root,
        # The default budgets, as a user's first run gets them (no DPMINE_TIMING_SCALE):
        # this fresh install compiles its kernels at the server's first start, beside the test
        # suite's other worker.
        env={**env, "COLUMNS": "120"},
    )
    if "consistent: True" not in output or "server stopped" not in output:
        raise CheckFailed(f"the demo did not finish with a consistent ledger:\n{output}")
    step(f"  the demo ran in {time.monotonic() - started:.0f} s; the ledger is consistent")


def main() -> None:
    """Run every check in a temporary directory (kept with ``--keep``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="dpmine-wheel-check-")).resolve()
    try:
        sdist, wheel = build(work / "dist", work)
        check_contents(sdist, wheel)
        check_client(sdist, wheel, work)
        check_server(wheel, work)
    except CheckFailed as error:
        step(f"FAILED: {error}")
        raise SystemExit(1) from None
    finally:
        if args.keep:
            step(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    sys.stdout.write(f"{PASSED}\n")


if __name__ == "__main__":
    main()
