"""Every shell and Python example of README.md runs, against live servers (issue #13, part 3).

Each fenced ``sh`` or ``python`` block of the README is preceded by a marker comment that says
how it is checked, and a block without a marker fails the test, so a new example cannot go
untested by accident:

* ``<!-- readme-test: owner -->``: the shell block of the data owner (there is one). It runs
  with bash in a fresh folder (the repository's ``data`` and ``config`` folders linked in) on
  a fresh SQLite file. The line starting ``dpmine-server serve`` starts the server in the
  background (the README's port is replaced by a free one), the rest of the block runs once it
  answers, and the server stays up for the analyst examples.
* ``<!-- readme-test: analyst -->``: an analyst's block (Python or shell), run in README order
  against the owner block's server, dataset and grant, with the key the block printed for
  ``alice``: what the README's owner gives is what its analyst examples get. Python blocks
  share one namespace, like a notebook. The README's placeholders are replaced:
  ``http://127.0.0.1:8000`` by the server's URL and ``dpm_...`` by the analyst's key.
* ``<!-- readme-test: skip REASON -->``: not run here; the reason names where it is covered.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import dpmine
from dpmine_server.cli import REVIEW_WORD
from support.servers import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
README = REPO_ROOT / "README.md"
PLACEHOLDER_URL = "http://127.0.0.1:8000"
PLACEHOLDER_KEY = "dpm_..."
_BLOCK = re.compile(
    r"<!-- readme-test: (?P<mode>owner|analyst|skip)(?P<reason>[^>]*)-->\s*\n"
    r"```(?P<language>sh|python)\n(?P<body>.*?)```",
    re.DOTALL,
)
_FENCE = re.compile(r"^```(sh|python)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Example:
    """One fenced example of the README."""

    mode: str
    language: str
    body: str
    line: int
    reason: str

    def __str__(self) -> str:
        return f"README.md line {self.line} ({self.language}, {self.mode})"


def readme_examples(text: str) -> list[Example]:
    """The marked examples in README order."""
    return [
        Example(
            mode=match["mode"],
            language=match["language"],
            body=match["body"],
            line=text.count("\n", 0, match.start("body")) + 1,
            reason=match["reason"].strip(),
        )
        for match in _BLOCK.finditer(text)
    ]


EXAMPLES = readme_examples(README.read_text(encoding="utf-8"))


def test_every_example_is_marked() -> None:
    """Every ``sh``/``python`` fence carries a marker; skipped ones say why."""
    fences = len(_FENCE.findall(README.read_text(encoding="utf-8")))
    assert fences == len(EXAMPLES), (
        f"{fences} sh/python blocks but {len(EXAMPLES)} marked: put "
        "'<!-- readme-test: owner|analyst|skip REASON -->' right before each block"
    )
    assert all(e.reason for e in EXAMPLES if e.mode == "skip"), "a skipped block needs a reason"
    assert sum(e.mode == "analyst" for e in EXAMPLES) >= 5
    assert any(e.mode == "owner" for e in EXAMPLES)


def _environment(**extra: str) -> dict[str, str]:
    """The test's environment without DPMINE_* settings, the venv's commands first on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPMINE_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["DPMINE_ENVIRONMENT"] = "test"
    env.update(extra)
    return env


def _run_shell(script: str, *, cwd: Path, env: dict[str, str], example: Example) -> str:
    completed = subprocess.run(
        ["bash", "-eu", "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert completed.returncode == 0, (
        f"{example} failed (exit {completed.returncode}):\n{script}\n"
        f"--- stdout\n{completed.stdout[-3000:]}\n--- stderr\n{completed.stderr[-3000:]}"
    )
    return completed.stdout


def _workspace(tmp_path: Path) -> Path:
    """A fresh folder where the README's relative paths (data/, config/) resolve."""
    for name in ("data", "config"):
        (tmp_path / name).symlink_to(REPO_ROOT / name)
    return tmp_path


_WAIT_FOR_HEALTH = """python - "$DPMINE_PORT" <<'WAIT'
import sys, time, httpx
url = f"http://127.0.0.1:{sys.argv[1]}/v1/health"
for _ in range(450):
    try:
        if httpx.get(url, timeout=1).status_code == 200:
            sys.exit(0)
    except httpx.TransportError:
        pass
    time.sleep(0.2)
sys.exit("dpmine-server serve did not answer within 90 s")
WAIT"""


#: What the owner's script prints once its block has run and its server is still up.
_READY = "README-OWNER-BLOCK-DONE"


def owner_script(body: str, port: int) -> str:
    """The owner's block as one bash script: ``dpmine-server serve`` runs in the background,
    the rest waits until it answers; then the datasets are listed (so the test can see what the
    block registered), a marker line is printed and the script waits on the server, which the
    analyst examples use next."""
    lines = []
    for line in body.replace(PLACEHOLDER_URL, f"http://127.0.0.1:{port}").splitlines():
        if line.startswith("dpmine-server serve"):
            command = line.split("#", 1)[0].rstrip()
            lines += [
                f"{command} > serve.log 2>&1 &",
                "serve_pid=$!",
                "trap 'kill $serve_pid; wait $serve_pid || true' EXIT",
                _WAIT_FOR_HEALTH,
            ]
        else:
            lines.append(line)
    lines += ["dpmine-server datasets list", f"echo {_READY}", "wait $serve_pid"]
    return "\n".join(lines)


def printed_keys(output: str) -> dict[str, str]:
    """The API keys ``dpmine-server principals add`` printed, by name: its ``principal: NAME
    (ROLE)`` line, then its ``api_key: KEY`` line."""
    pattern = r"^principal:\s+(\S+) \((?:owner|analyst)\)\napi_key:\s+(\S+)$"
    return dict(re.findall(pattern, output, re.MULTILINE))


@dataclass
class OwnerBlock:
    """The README's owner block, run as written, with its server still running."""

    example: Example
    output: str
    url: str
    workspace: Path


@pytest.fixture(scope="module")
def owner_block(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OwnerBlock]:
    """Run the README's owner block (its principals, registration, grant and ``serve``) in a
    fresh folder, and keep its server up for the analyst examples."""
    (example,) = [e for e in EXAMPLES if e.mode == "owner"]
    workspace = _workspace(tmp_path_factory.mktemp("readme-owner"))
    port = free_port()
    env = _environment(DPMINE_PORT=str(port), DPMINE_JOB_WORKERS="1")
    process = subprocess.Popen(
        ["bash", "-eu", "-c", owner_script(example.body, port)],
        cwd=workspace,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    # What the owner types: the block's one prompt is `datasets review`, answered "reviewed"
    # (the background `serve` reads nothing: bash gives it /dev/null).
    assert process.stdin is not None
    process.stdin.write(f"{REVIEW_WORD}\n")
    process.stdin.close()
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    output: list[str] = []
    give_up = time.monotonic() + 300
    try:
        while True:
            line = lines.get(timeout=max(give_up - time.monotonic(), 0.1))
            assert line is not None, f"{example} ended (exit {process.wait()}):\n{''.join(output)}"
            if line.strip() == _READY:
                break
            output.append(line)
        yield OwnerBlock(example, "".join(output), f"http://127.0.0.1:{port}", workspace)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=60)
        if process.stdout is not None:
            process.stdout.close()


def test_owner_example_runs(owner_block: OwnerBlock) -> None:
    """The owner's shell block runs as written: it registers ``mushroom``, prints the keys it
    creates, and ``serve`` answers HTTP."""
    registered = re.search(r"^registered:\s+mushroom$", owner_block.output, re.MULTILINE)
    assert registered is not None, f"{owner_block.example}: no 'mushroom'"
    # The closing `dpmine-server datasets list` shows its cap and the README's grant unspent.
    listed = (
        r"^mushroom\s{2,}mushroom\s{2,}views\s{2,}active\s{2,}1\s{2,}allow_approximate\s{2,}pure"
        r"\s{2,}10\s{2,}0\s{2,}10$"
    )
    assert re.search(listed, owner_block.output, re.MULTILINE), owner_block.output
    assert set(printed_keys(owner_block.output)) == {"admin", "alice"}
    # `datasets review` showed the proposal's notes before the owner marked it reviewed.
    assert "Notes of the proposal" in owner_block.output
    assert "mushroom.json: marked reviewed" in owner_block.output


@dataclass
class AnalystSetting:
    """What the analyst examples run against."""

    url: str
    api_key: str
    workspace: Path


@pytest.fixture(scope="module")
def analyst_setting(
    owner_block: OwnerBlock, tmp_path_factory: pytest.TempPathFactory
) -> AnalystSetting:
    """The owner block's server, dataset and grant, with the key it printed for ``alice``: the
    analyst examples run with exactly what the README's owner gave them."""
    workspace = _workspace(tmp_path_factory.mktemp("readme-analyst"))
    key = printed_keys(owner_block.output)["alice"]
    return AnalystSetting(url=owner_block.url, api_key=key, workspace=workspace)


def _substitute(body: str, setting: AnalystSetting) -> str:
    return body.replace(PLACEHOLDER_URL, setting.url).replace(PLACEHOLDER_KEY, setting.api_key)


def test_analyst_examples_run(
    analyst_setting: AnalystSetting, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The analyst's examples run in README order against one live server."""
    examples = [e for e in EXAMPLES if e.mode == "analyst"]
    monkeypatch.chdir(analyst_setting.workspace)
    namespace: dict[str, object] = {"__name__": "readme"}
    # The shell examples run where the reader exported the URL and key (the README's first one).
    env = _environment(DPMINE_URL=analyst_setting.url, DPMINE_API_KEY=analyst_setting.api_key)
    for example in examples:
        body = _substitute(example.body, analyst_setting)
        if example.language == "python":
            code = compile(body, f"<{example}>", "exec")
            exec(code, namespace)  # the README's own examples, run as documented
        else:
            _run_shell(body, cwd=analyst_setting.workspace, env=env, example=example)
    for value in namespace.values():  # the README leaves its connection open, as a session would
        if isinstance(value, dpmine.Connection):
            value.close()
    with dpmine.connect(analyst_setting.url, analyst_setting.api_key) as alice:
        budget = alice.dataset("mushroom").budget()
    assert budget.grant_spent > 0, "the analyst examples spent nothing"
