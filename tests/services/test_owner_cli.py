"""``dpmine-server`` on a private SQLite database: proposals need a review before ``add``, input
mistakes are one ``error:`` line, help texts are plain and ``--help`` imports no engine; on a
client-only install (no ``[server]`` extra) a command says in one line what to install."""

from __future__ import annotations

import importlib.util
import json
import os
import random
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any, get_args

import pytest
from typer.testing import CliRunner, Result

from dpmine.wire.common import AccountingUnit, GuaranteePolicy
from dpmine.wire.datasets import DatasetMetadata
from dpmine_server.cli import SERVER_EXTRA_MODULES, AccountingChoice, PolicyChoice, app
from dpmine_server.dp.zcdp import DEFAULT_DELTA, rho_cap_for

RUNNER = CliRunner()


def _env(folder: Path) -> dict[str, str]:
    return {
        "DPMINE_ENVIRONMENT": "test",
        "DPMINE_DATABASE_URL": f"sqlite:///{folder / 'engine.sqlite3'}",
        "DPMINE_DATA_DIR": str(folder / "data"),
        "DPMINE_SECRET_KEY": "owner-cli-test-secret-key-0123456789",
        "DPMINE_BOOTSTRAP_OWNER_KEY": "",
    }


def _run(folder: Path, *args: str, env: dict[str, str] | None = None) -> Result:
    return RUNNER.invoke(app, list(args), env=env or _env(folder))


def _ok(result: Result) -> Any:
    assert result.exit_code == 0, (result.output, repr(result.exception))
    return json.loads(result.stdout)


def _one_line_error(result: Result) -> str:
    """A clean exit 2 with one ``error:`` line on stderr and no traceback."""
    assert result.exit_code == 2, (result.exit_code, result.output, repr(result.exception))
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    return lines[0]


@pytest.fixture
def patients(tmp_path: Path) -> Path:
    """A messy CSV: patient ids, ages in [50, 101], a ward."""
    rng = random.Random(11)
    lines = ["patient_id,age,ward"]
    lines += [f"P{i:05d},{rng.randint(51, 100)},{rng.choice('abc')}" for i in range(300)]
    lines += ["P99998,50,a", "P99999,101,b"]
    path = tmp_path / "patients.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _propose(folder: Path, csv_path: Path) -> tuple[DatasetMetadata, Result]:
    result = _run(folder, "datasets", "propose-metadata", "--kind", "table", "--csv", str(csv_path))
    return DatasetMetadata.model_validate(_ok(result)), result


def test_propose_then_review_then_add(tmp_path: Path, patients: Path) -> None:
    proposal, result = _propose(tmp_path, patients)
    assert [a.name for a in proposal.attributes] == ["age", "ward"]  # the ids are left out
    assert "P000" not in result.stdout
    assert "REVIEW REQUIRED" in result.stderr
    assert "column 'patient_id' excluded: it looks like a row identifier" in result.stderr
    assert "--guarantee-policy pure_only refuses the MCMC samplers" in result.stderr
    path = tmp_path / "proposal.json"
    path.write_text(result.stdout, encoding="utf-8")
    source = ("--metadata", str(path), "--epsilon-cap", "1", "--csv", str(patients), "--json")
    add = ("datasets", "add", *source)
    refused = _one_line_error(_run(tmp_path, *add[:2], "p1", *add[2:]))
    assert "has not been reviewed" in refused
    assert "column 'patient_id' excluded" in refused  # the reasons come with the refusal
    forced = _run(tmp_path, *add[:2], "p1", *add[2:], "--force")
    assert "not reviewed (--force)" in forced.stderr
    assert _ok(forced)["dataset"]["metadata"]["review"] is None  # never kept nor shown
    assert proposal.review is not None
    reviewed = proposal.review.model_copy(update={"reviewed": True})
    path.write_text(proposal.model_copy(update={"review": reviewed}).model_dump_json())
    added = _ok(_run(tmp_path, *add[:2], "p2", *add[2:]))
    assert added["warnings"] == []
    # Hand-written metadata (no review) is taken as is; a range copied from the data is warned.
    hand = proposal.model_dump(mode="json", exclude={"review"})
    hand["attributes"][0].update(lo=50, hi=101)
    path.write_text(json.dumps(hand))
    copied = _run(tmp_path, *add[:2], "p3", *add[2:])
    assert "warning: attribute 'age': hi equals the data's maximum exactly" in copied.stderr
    assert len(_ok(copied)["warnings"]) == 1
    # Grants: set, then revoke (nothing spent, so the grant goes).
    _run(tmp_path, "principals", "add", "bob", "--role", "analyst")
    assert _ok(_run(tmp_path, "grants", "set", "p2", "bob", "0.5", "--json"))["epsilon"] == 0.5
    assert _ok(_run(tmp_path, "grants", "revoke", "p2", "bob", "--json"))["remaining"] == 0.0
    assert "holds no grant" in _one_line_error(_run(tmp_path, "grants", "revoke", "p2", "bob"))
    # Caps: listed with the spending, changed, never to a bad value; retired ones stay.
    listed = {row["id"]: row for row in _ok(_run(tmp_path, "datasets", "list", "--json"))}
    assert (listed["p2"]["epsilon_cap"], listed["p2"]["spent"]) == (1.0, 0.0)
    raised = _ok(_run(tmp_path, "datasets", "set-cap", "p2", "2.5", "--json"))
    assert (raised["epsilon_cap"], raised["remaining"]) == (2.5, 2.5)
    assert "ledger's unit" in _one_line_error(_run(tmp_path, "datasets", "set-cap", "p2", "1e-13"))
    _ok(_run(tmp_path, "datasets", "retire", "p2", "--json"))
    assert "retired" in _one_line_error(_run(tmp_path, "datasets", "set-cap", "p2", "3"))


def test_review_shows_the_proposal_and_marks_it_only_when_the_owner_types_it(
    tmp_path: Path, patients: Path
) -> None:
    """``datasets review`` prints the attributes and the notes; only the typed word marks the
    file reviewed, anything else (or no input) leaves it unchanged, and ``add`` then takes it."""
    _proposal, result = _propose(tmp_path, patients)
    path = tmp_path / "proposal.json"
    path.write_text(result.stdout, encoding="utf-8")
    before = path.read_text(encoding="utf-8")
    for typed in ("", "yes\n", "reviewd\n"):
        declined = RUNNER.invoke(
            app, ["datasets", "review", str(path)], input=typed, env=_env(tmp_path)
        )
        assert declined.exit_code == 2, declined.output
        assert "was not changed" in declined.stderr
        assert path.read_text(encoding="utf-8") == before
    shown = RUNNER.invoke(
        app, ["datasets", "review", str(path)], input="reviewed\n", env=_env(tmp_path)
    )
    assert shown.exit_code == 0, shown.output
    assert re.search(r"^age\s+-\s+numeric\s+\[", shown.stdout, re.MULTILINE), shown.stdout
    assert "1. column 'patient_id' excluded: it looks like a row identifier" in shown.stdout
    assert "marked reviewed" in shown.stdout
    marked = DatasetMetadata.model_validate_json(path.read_text(encoding="utf-8"))
    assert marked.review is not None
    assert marked.review.reviewed
    again = RUNNER.invoke(app, ["datasets", "review", str(path)], input="", env=_env(tmp_path))
    assert again.exit_code == 0
    assert "already marked reviewed" in again.stdout
    add = ("datasets", "add", "p1", "--metadata", str(path), "--epsilon-cap", "1")
    assert _ok(_run(tmp_path, *add, "--csv", str(patients), "--json"))["warnings"] == []


def test_input_mistakes_are_one_line(tmp_path: Path, patients: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"kind": "table", "n_max": 0}')
    add = ("datasets", "add", "x", "--epsilon-cap", "1", "--csv", str(patients), "--metadata")
    assert "metadata file" in _one_line_error(_run(tmp_path, *add, str(bad)))
    assert "n_max: Input should be greater than or equal to 1" in _one_line_error(
        _run(tmp_path, *add, str(bad))
    )
    missing = _one_line_error(_run(tmp_path, *add, str(tmp_path / "nope.json")))
    assert "nope.json' does not exist" in missing
    bad.write_text("{")
    assert "Invalid JSON" in _one_line_error(_run(tmp_path, *add, str(bad)))
    views = tmp_path / "views.json"
    views.write_text("[1, 2")
    propose = ("datasets", "propose-metadata", "--kind", "views", "--csv", str(patients))
    assert "views file" in _one_line_error(_run(tmp_path, *propose, "--views", str(views)))
    usage = _one_line_error(_run(tmp_path, "datasets", "add", "x", "--epsilon-cap", "lots"))
    assert "'--epsilon-cap'" in usage
    sql = _one_line_error(
        _run(tmp_path, "datasets", "propose-metadata", "--kind", "table", "--sql-url", "sqlite://")
    )
    assert "exactly one of 'table' or 'query'" in sql
    header = tmp_path / "header.csv"
    header.write_text("a,b\n")
    empty = _one_line_error(
        _run(tmp_path, "datasets", "propose-metadata", "--kind", "table", "--csv", str(header))
    )
    assert "has a header but no rows" in empty
    latin = tmp_path / "latin.csv"
    latin.write_bytes("a,b\n1,x\n2,\xe9t\xe9\n".encode("latin-1"))
    encoding = _one_line_error(
        _run(tmp_path, "datasets", "propose-metadata", "--kind", "table", "--csv", str(latin))
    )
    assert "line 3" in encoding


def test_an_impossible_database_path_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    env = _env(tmp_path) | {"DPMINE_DATABASE_URL": f"sqlite:///{blocker / 'db.sqlite3'}"}
    message = _one_line_error(_run(tmp_path, "principals", "list", env=env))
    assert "DPMINE_DATABASE_URL" in message


def test_help_keeps_brackets_and_imports_no_engine() -> None:
    help_text = RUNNER.invoke(app, ["datasets", "propose-metadata", "--help"]).stdout
    assert "ranges [lo, hi]" in " ".join(help_text.split())
    probe = (
        "import sys, dpmine_server.cli; "
        "print(sorted(m for m in ('pandas', 'sqlalchemy', 'uvicorn', 'numpy', 'fastapi') "
        "if m in sys.modules))"
    )
    imported = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert imported == "[]"


PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"

#: Run the ``dpmine-server`` console entry point (as pyproject.toml declares it) in an interpreter
#: where the modules named in argv[1] (comma-separated) cannot be found, exactly as when their
#: package is not installed; argv[2:] are the command's arguments.
_WITHOUT_MODULES = """
import importlib, sys
blocked = set(sys.argv[1].split(","))

class NotInstalled:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.partition(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NotInstalled)
module, _, function = sys.argv[2].partition(":")
sys.argv = ["dpmine-server", *sys.argv[3:]]
getattr(importlib.import_module(module), function)()
"""


def _entry_point() -> str:
    scripts: dict[str, str] = tomllib.loads(PYPROJECT.read_text())["project"]["scripts"]
    return scripts["dpmine-server"]


@pytest.mark.parametrize(
    ("missing", "command", "package"),
    [
        # pandas is imported when a table is read (data/loaders.py, "Imports"), not at start.
        ("pandas", ["datasets", "propose-metadata", "--kind", "table", "--csv", "t.csv"], "pandas"),
        ("sqlalchemy", ["db", "upgrade"], "sqlalchemy"),
        # A client-only install: none of the extra's packages (the first one imported is named).
        (",".join(SERVER_EXTRA_MODULES), ["principals", "list"], "sqlalchemy"),
        ("pydantic_settings", ["serve"], "pydantic-settings"),
        ("uvicorn", ["serve"], "uvicorn"),
    ],
)
def test_a_client_only_install_says_what_to_install(
    tmp_path: Path, missing: str, command: list[str], package: str
) -> None:
    """``pip install dpmine`` has ``dpmine-server`` but not its dependencies: any command then
    fails with one line naming the package and the install command, exit code 1, whether the
    package is imported at the command's start or when the command first needs it."""
    (tmp_path / "t.csv").write_text("a,b\n1,x\n2,y\n", encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-c", _WITHOUT_MODULES, missing, _entry_point(), *command],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)} | _env(tmp_path),
    )
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert result.stderr.strip().splitlines() == [
        f"error: the Python package '{package}' is not installed: dpmine-server needs the "
        "server extra; install it with: pip install 'dpmine[server]'"
    ], result.stderr
    assert result.stdout == ""


def test_an_import_error_of_another_module_is_not_disguised(tmp_path: Path) -> None:
    """Only the server extra's packages get the install hint; any other missing module is a
    bug and keeps its traceback."""
    result = subprocess.run(
        [sys.executable, "-c", _WITHOUT_MODULES, "dpmine_server", _entry_point(), "db", "upgrade"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)} | _env(tmp_path),
    )
    assert result.returncode == 1
    assert "Traceback" in result.stderr
    assert "pip install" not in result.stderr


def test_the_install_hint_knows_every_package_of_the_server_extra() -> None:
    """SERVER_EXTRA_MODULES names each distribution of pyproject's ``[server]`` extra, by
    modules that exist."""
    extra: list[str] = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"][
        "server"
    ]
    distributions = {re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0] for requirement in extra}
    assert set(SERVER_EXTRA_MODULES.values()) == distributions
    assert [m for m in SERVER_EXTRA_MODULES if importlib.util.find_spec(m) is None] == []


def test_init_writes_the_settings_every_later_command_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``init`` writes ./dpmine.toml (a new secret, readable by its owner only); a command
    started later in that folder, as from a new shell, reads it; it is never overwritten."""
    monkeypatch.chdir(tmp_path)
    for name in [name for name in os.environ if name.startswith("DPMINE_")]:
        monkeypatch.delenv(name)
    environment: dict[str, str | None] = {}
    written = RUNNER.invoke(app, ["init"], env=environment)
    assert written.exit_code == 0, written.output
    settings_file = tmp_path / "dpmine.toml"
    assert settings_file.stat().st_mode & 0o777 == 0o600
    secret = tomllib.loads(settings_file.read_text())["secret_key"]
    assert len(secret) >= 32
    added = RUNNER.invoke(app, ["principals", "add", "admin", "--role", "owner"], env=environment)
    assert added.exit_code == 0, added.output
    assert (tmp_path / "var" / "dpmine.sqlite3").is_file()
    # A new shell: the same folder, nothing exported; the stored key still checks out.
    listed = subprocess.run(
        [sys.executable, "-m", "dpmine_server", "principals", "list", "--json"],
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if not k.startswith("DPMINE_")},
        capture_output=True,
        text=True,
        check=False,
    )
    assert listed.returncode == 0, listed.stderr
    assert '"admin"' in listed.stdout
    again = RUNNER.invoke(app, ["init"], env=environment)
    assert "never overwritten" in _one_line_error(again)
    assert tomllib.loads(settings_file.read_text())["secret_key"] == secret


def _reviewed_proposal(folder: Path, csv_path: Path) -> Path:
    proposal, _result = _propose(folder, csv_path)
    assert proposal.review is not None
    reviewed = proposal.review.model_copy(update={"reviewed": True})
    path = folder / "reviewed.json"
    path.write_text(proposal.model_copy(update={"review": reviewed}).model_dump_json())
    return path


def test_the_guarantee_policy_is_set_at_add_and_changed_audited(
    tmp_path: Path, patients: Path
) -> None:
    """Issue #25: ``datasets add --guarantee-policy`` and ``datasets set-guarantee-policy``
    (listed, shown, audited with the old and new value); a bad value or a retired dataset is
    a one-line error that changes nothing."""
    metadata = _reviewed_proposal(tmp_path, patients)
    source = ("--metadata", str(metadata), "--epsilon-cap", "1", "--csv", str(patients))
    added = _ok(
        _run(tmp_path, "datasets", "add", "w", *source, "--guarantee-policy", "pure_only", "--json")
    )
    assert added["dataset"]["guarantee_policy"] == "pure_only"
    listed = _ok(_run(tmp_path, "datasets", "list", "--json"))
    assert [row["guarantee_policy"] for row in listed] == ["pure_only"]
    changed = _run(tmp_path, "datasets", "set-guarantee-policy", "w", "allow_approximate")
    assert changed.exit_code == 0, changed.output
    assert re.search(r"^guarantees:\s+pure_only → allow_approximate$", changed.stdout, re.M)
    shown = _ok(_run(tmp_path, "datasets", "show", "w", "--json"))
    assert shown["guarantee_policy"] == "allow_approximate"
    bad = _run(tmp_path, "datasets", "set-guarantee-policy", "w", "mostly")
    assert bad.exit_code == 2
    assert "'mostly' is not one of 'allow_approximate', 'pure_only'" in bad.output
    _ok(_run(tmp_path, "datasets", "retire", "w", "--json"))
    retired = _run(tmp_path, "datasets", "set-guarantee-policy", "w", "pure_only")
    assert "retired" in _one_line_error(retired)
    events = _ok(_run(tmp_path, "audit", "export", "--json"))
    assert [(e["action"], e["details"]) for e in events if e["target"] == "w"] == [
        ("dataset_retired", {"via": "cli"}),
        (
            "dataset_guarantee_policy_set",
            {"from": "pure_only", "to": "allow_approximate", "via": "cli"},
        ),
        ("dataset_registered", {"guarantee_policy": "pure_only", "via": "cli"}),
    ]


def test_a_zcdp_dataset_is_added_with_its_cap_converted_and_granted_in_rho(
    tmp_path: Path, patients: Path
) -> None:
    """Issue #24: ``datasets add --accounting zcdp --epsilon-cap 1 --cap-delta 1e-6`` stores the
    largest rho within (1, 1e-6) and shows the conversion; grants are then in rho (--rho), and
    a grant in epsilon or a bad delta is a one-line error that writes nothing."""
    metadata = _reviewed_proposal(tmp_path, patients)
    source = ("--metadata", str(metadata), "--csv", str(patients))
    bad = _run(
        tmp_path,
        "datasets",
        "add",
        "z",
        *source,
        "--accounting",
        "zcdp",
        "--epsilon-cap",
        "1",
        "--cap-delta",
        "2",
    )
    assert "cap_delta" in _one_line_error(bad)
    assert _ok(_run(tmp_path, "datasets", "list", "--json")) == []
    added = _run(
        tmp_path,
        "datasets",
        "add",
        "z",
        *source,
        "--accounting",
        "zcdp",
        "--epsilon-cap",
        "1",
        "--cap-delta",
        "1e-6",
    )
    assert added.exit_code == 0, added.output
    rho = rho_cap_for(1, DEFAULT_DELTA).exact_str()
    assert re.search(rf"^ρ cap:\s+{re.escape(rho)} \(implies ε = 0\.8", added.stdout, re.M)
    assert "ε shown at δ = 1e-06" in added.stdout
    _run(tmp_path, "principals", "add", "bob", "--role", "analyst")
    in_epsilon = _run(tmp_path, "grants", "set", "z", "bob", "0.5")
    assert "give the grant as rho" in _one_line_error(in_epsilon)
    granted = _ok(_run(tmp_path, "grants", "set", "z", "bob", "--rho", "0.01", "--json"))
    assert (granted["accounting"], granted["zcdp"]["rho_exact"]) == ("zcdp", "0.01")
    [listed] = _ok(_run(tmp_path, "datasets", "list", "--json"))
    assert (listed["accounting"], listed["zcdp"]["rho_exact"]) == ("zcdp", rho)


def test_the_cli_policy_choice_is_the_wire_type() -> None:
    """The CLI spells dpmine.wire.GuaranteePolicy out (it imports the wire package lazily)."""
    assert get_args(PolicyChoice) == get_args(GuaranteePolicy)
    assert get_args(AccountingChoice) == get_args(AccountingUnit)


def _table_row(output: str, *cells: str) -> bool:
    """Whether a piped table has the row ``cells`` (columns two or more spaces apart)."""
    pattern = r"\s{2,}".join(re.escape(cell) for cell in cells)
    return re.search(rf"^{pattern}$", output, re.MULTILINE) is not None


def test_tables_and_summaries_by_default_json_for_scripts(tmp_path: Path, patients: Path) -> None:
    """Issue #22: what an owner reads is short (a summary, a table, one line per row when
    piped, never the row count), and ``--json`` keeps the shape scripts parse."""
    created = _run(tmp_path, "principals", "add", "bob", "--role", "analyst")
    assert created.exit_code == 0, created.output
    key = re.search(r"^api_key:\s+(dpm_\S+)$", created.stdout, re.MULTILINE)
    assert key is not None, created.stdout
    assert "shown only this once" in created.stdout
    metadata = _reviewed_proposal(tmp_path, patients)
    source = ("--metadata", str(metadata), "--epsilon-cap", "2.5", "--csv", str(patients))
    added = _run(tmp_path, "datasets", "add", "ward", *source)
    assert added.exit_code == 0, added.output
    summary = {
        key.strip(): value.strip()
        for key, value in (line.split(":", 1) for line in added.stdout.splitlines())
    }
    assert summary["registered"] == "ward"
    assert summary["attributes"] == "2 attributes"
    assert summary["ε cap"] == "2.5"
    assert summary["guarantees"] == "allow_approximate"
    assert "302" not in added.stdout  # n is private: the summary never shows it
    assert len(added.stdout.splitlines()) < 15
    granted = _run(tmp_path, "grants", "set", "ward", "bob", "0.7")
    assert re.search(r"^ε granted:\s+0\.7$", granted.stdout, re.MULTILINE), granted.stdout

    listed = _run(tmp_path, "datasets", "list").stdout
    assert listed.splitlines()[0] == "datasets"
    row = ("ward", "ward", "table", "active", "1", "allow_approximate", "pure", "2.5", "0", "2.5")
    assert _table_row(listed, *row), listed
    grants = _run(tmp_path, "grants", "list", "ward").stdout
    assert _table_row(grants, "bob", "0.7", "0", "0.7"), grants
    principals = _run(tmp_path, "principals", "list").stdout
    assert re.search(r"^1\s{2,}bob\s{2,}analyst\s{2,}active\s{2,}dpm_", principals, re.M)
    assert key.group(1) not in principals
    shown = _run(tmp_path, "datasets", "show", "ward").stdout
    assert _table_row(shown, "ward", "-", "categorical", "a, b, c"), shown
    assert "ledger: none" in _run(tmp_path, "ledger", "export").stdout
    audit_rows = _run(tmp_path, "audit", "export").stdout.splitlines()
    assert [line.split()[4] for line in audit_rows[2:]] == [
        "grant_set",
        "dataset_registered",
        "principal_created",
    ]

    # An empty CSV export still has its header; --json is --format json; they cannot disagree.
    header = _run(tmp_path, "ledger", "export", "--format", "csv").stdout
    assert header.splitlines() == [
        "id,dataset_id,principal,operation,epsilon,epsilon_exact,guarantee,status,parameters,"
        "release,idempotency_key,created_at,completed_at,accounting,rho_exact,delta"
    ]
    assert _ok(_run(tmp_path, "ledger", "export", "--json")) == []
    assert "disagree" in _one_line_error(
        _run(tmp_path, "ledger", "export", "--json", "--format", "csv")
    )
    exported = tmp_path / "audit.json"
    assert _run(tmp_path, "audit", "export", "--output", str(exported)).exit_code == 0
    assert next(event["action"] for event in json.loads(exported.read_text())) == "grant_set"

    # --json: the shapes scripts read.
    assert _ok(_run(tmp_path, "grants", "list", "ward", "--json")) == [
        {
            "analyst": "bob",
            "dataset_id": "ward",
            "epsilon": 0.7,
            "spent": 0.0,
            "remaining": 0.7,
            "accounting": "pure",
            "zcdp": None,
        }
    ]
    assert _ok(_run(tmp_path, "datasets", "show", "ward", "--json"))["id"] == "ward"
    assert _ok(_run(tmp_path, "principals", "list", "--json"))[0]["name"] == "bob"
    rotated = _ok(_run(tmp_path, "principals", "rotate-key", "bob", "--json"))
    assert rotated["api_key"].startswith("dpm_")
    assert _ok(_run(tmp_path, "ledger", "verify", "--json")) == {
        "consistent": True,
        "problems": [],
    }
    disabled = _run(tmp_path, "principals", "disable", "bob").stdout
    assert re.search(r"^status:\s+disabled$", disabled, re.MULTILINE), disabled
