"""A newcomer's first hour, timed step by step (issue #22): a fresh clone, `make demo`, the
README's owner block and its analyst examples, run literally, on a PATH without a C compiler.

    .venv/bin/python bench/bench_first_hour.py [--source DIR] [--work DIR] [--out DIR]

The clone is made from ``--source`` (default: this repository; commit first, a clone sees only
commits). The PATH holds symbolic links to every command of /usr/local/bin, /usr/bin and /bin
except compilers, assemblers and linkers, plus pyenv's shims: the installs of `make demo`
must come from wheels. The README's blocks are the ones tests/e2e/test_readme.py runs:
the owner block command by command (``dpmine-server serve`` in the background, timed until
``/v1/health`` answers; ``datasets review`` answered by typing ``reviewed``), then the analyst's
Python blocks in one session and its shell blocks, with the key the owner block printed for
``alice``. It serves on the README's port 8000, which must be free. Prints a Markdown table and
writes ``first_hour.json``; exits 1 at the first failing step.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO_ROOT = Path(__file__).resolve().parent.parent
HEALTH = "http://127.0.0.1:8000/v1/health"
PLACEHOLDER_KEY = "dpm_..."
#: Commands left off the PATH: anything that compiles, assembles or links.
COMPILER = re.compile(
    r"^(cc|c\+\+|cpp|gcc|g\+\+|clang.*|c89.*|c99.*|ld(\..*)?|as|.*-(gcc|g\+\+|cc|ld|as)(-.*)?)$"
)
_BLOCK = re.compile(
    r"<!-- readme-test: (?P<mode>owner|analyst|skip)[^>]*-->\s*\n"
    r"```(?P<lang>sh|python)\n(?P<body>.*?)```",
    re.DOTALL,
)


class StepFailed(Exception):
    """A step of the walkthrough failed."""


class Walkthrough:
    """The steps run so far, with their wall times."""

    def __init__(self, work: Path, path: str) -> None:
        self.work = work
        self.path = path
        self.rows: list[tuple[str, float]] = []

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """The reader's shell: no DPMINE_* or Python settings, the venv first once it exists."""
        prefixes = ("DPMINE_", "PYTHON", "VIRTUAL_ENV")
        env = {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}
        venv = self.work / ".venv" / "bin"
        env["PATH"] = f"{venv}{os.pathsep}{self.path}" if venv.exists() else self.path
        env.update(extra or {})
        return env

    def record(self, name: str, seconds: float) -> None:
        self.rows.append((name, seconds))
        print(f"[{seconds:7.1f} s] {name}", flush=True)

    def run(
        self, name: str, command: str, *, typed: str = "", extra: dict[str, str] | None = None
    ) -> str:
        """Run ``command`` with bash in the clone; its stdout."""
        started = time.monotonic()
        done = subprocess.run(
            ["bash", "-eu", "-c", command],
            cwd=self.work,
            env=self.env(extra),
            input=typed,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise StepFailed(
                f"{name} (exit {done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
            )
        self.record(name, time.monotonic() - started)
        return done.stdout


def compiler_free_path(folder: Path) -> str:
    """A PATH of links to every command but the compilers (and pyenv's shims, if any)."""
    folder.mkdir(parents=True, exist_ok=True)
    for directory in ("/usr/local/bin", "/usr/bin", "/bin"):
        for command in sorted(Path(directory).glob("*")):
            link = folder / command.name
            if not COMPILER.match(command.name) and not link.exists() and not link.is_symlink():
                link.symlink_to(command)
    shims = [str(Path.home() / ".pyenv" / part) for part in ("shims", "bin")]
    path = os.pathsep.join([str(folder), *(s for s in shims if Path(s).is_dir())])
    for compiler in ("cc", "gcc", "clang"):
        if shutil.which(compiler, path=path) is not None:
            raise StepFailed(f"{compiler} is still on the compiler-free PATH")
    return path


def readme_blocks(readme: Path) -> list[tuple[str, str, str]]:
    """(mode, language, body) of every marked README block, in order."""
    text = readme.read_text(encoding="utf-8")
    return [(m["mode"], m["lang"], m["body"]) for m in _BLOCK.finditer(text)]


def wait_for_health(timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(HEALTH, timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise StepFailed(f"dpmine-server serve did not answer {HEALTH} within {timeout:.0f} s")


def owner_block(walk: Walkthrough, body: str) -> tuple[str, subprocess.Popen[bytes] | None]:
    """The owner block, command by command; alice's key and the background server."""
    commands = [c.strip() for c in re.sub(r"\\\n\s*", " ", body).splitlines() if c.strip()]
    key = ""
    server: subprocess.Popen[bytes] | None = None
    for command in commands:
        shown = command.split("#", 1)[0].strip()
        if command.startswith("dpmine-server serve"):
            started = time.monotonic()
            server = subprocess.Popen(
                ["bash", "-c", shown],
                cwd=walk.work,
                env=walk.env(),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            wait_for_health()
            walk.record(f"{shown} (until /v1/health answers)", time.monotonic() - started)
            continue
        typed = "reviewed\n" if " datasets review " in command else ""
        output = walk.run(shown, command, typed=typed)
        if "principals add alice" in command:
            found = re.search(r"^api_key:\s+(\S+)", output, re.MULTILINE)
            if found is None:
                raise StepFailed(f"no api_key line in:\n{output}")
            key = found[1]
    return key, server


def analyst_blocks(walk: Walkthrough, blocks: list[tuple[str, str]], key: str) -> None:
    """The Python blocks in one session (one script, timed per block), then the shell blocks."""
    parts = ["import time as _t"]
    for number, (language, body) in enumerate(blocks, start=1):
        if language == "python":
            first = body.strip().splitlines()[0][:50].replace('"', "'")
            parts += [
                "_s = _t.monotonic()",
                body.replace(PLACEHOLDER_KEY, key),
                f'print("BLOCK|{number}|{first}|", _t.monotonic() - _s, flush=True)',
            ]
    script = walk.work / "analyst_session.py"
    script.write_text("\n".join(parts) + "\n", encoding="utf-8")
    output = walk.run("the analyst's Python blocks (one session)", f"python {script.name}")
    for line in output.splitlines():
        if line.startswith("BLOCK|"):
            _tag, block, first, seconds = line.split("|")
            walk.rows.append((f"  Python block {block}: {first}", float(seconds)))
    shell = {"DPMINE_URL": "http://127.0.0.1:8000", "DPMINE_API_KEY": key}
    for number, (language, body) in enumerate(blocks, start=1):
        if language == "sh":
            last = body.strip().splitlines()[-1][:50]
            walk.run(
                f"shell block {number} (… {last})", body.replace(PLACEHOLDER_KEY, key), extra=shell
            )


def report(walk: Walkthrough) -> str:
    lines = ["| step | seconds |", "|---|---|"]
    lines += [f"| `{name}` | {seconds:.1f} |" for name, seconds in walk.rows]
    total = sum(seconds for name, seconds in walk.rows if not name.startswith(" "))
    lines.append(f"| total | {total:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, default=REPO_ROOT)
    parser.add_argument("--work", type=Path, default=None, help="the clone (default: a temp dir)")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "out")
    args = parser.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="dpmine-first-hour-"))
    work = args.work or scratch / "dpmine"
    walk = Walkthrough(work, compiler_free_path(scratch / "bin"))
    server: subprocess.Popen[bytes] | None = None
    status = 0
    try:
        started = time.monotonic()
        subprocess.run(["git", "clone", "-q", str(args.source), str(work)], check=True)
        walk.record(f"git clone {args.source}", time.monotonic() - started)
        walk.run("make demo", "make demo")
        blocks = readme_blocks(work / "README.md")
        (owner,) = [body for mode, _lang, body in blocks if mode == "owner"]
        key, server = owner_block(walk, owner)
        analyst = [(lang, body) for mode, lang, body in blocks if mode == "analyst"]
        analyst_blocks(walk, analyst, key)
    except StepFailed as error:
        print(f"FAILED: {error}")
        status = 1
    finally:
        if server is not None:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=60)
    table = report(walk)
    print(table)
    args.out.mkdir(parents=True, exist_ok=True)
    payload = {"rows": walk.rows, "failed": bool(status), "source": str(args.source)}
    (args.out / "first_hour.json").write_text(json.dumps(payload, indent=2), encoding="utf-8")
    shutil.rmtree(scratch, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
