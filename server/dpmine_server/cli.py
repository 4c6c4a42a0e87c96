"""``dpmine-server``: run the server and manage it on the server machine (owner's tool).

The management commands work directly on the engine's database (the same one the server uses,
from ``DPMINE_DATABASE_URL``); they are for the data owner, who is trusted. Input mistakes are
reported as one ``error:`` line (exit 2), never a traceback; on a client-only install (no
``[server]`` extra) a command says in one line which package is missing (exit 1). Heavy
modules (the engine, pandas, SQLAlchemy, uvicorn) are imported inside the commands, so
``--help`` answers at once.

Output is for people by default: tables (fitted to the terminal, one line per row when piped;
:mod:`dpmine.tables`) and short ``key: value`` blocks. ``--json`` prints the JSON that scripts
read, in the same shape as before the tables existed.
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer
from typer.core import TyperGroup

if TYPE_CHECKING:
    from pydantic import ValidationError
    from sqlalchemy.orm import Session

    from dpmine.wire import (
        BooleanAttribute,
        CategoricalAttribute,
        DatasetCap,
        DatasetInfo,
        DatasetMetadata,
        DatasetSource,
        GrantInfo,
        NumericAttribute,
    )
    from dpmine_server.data.loaders import LoadReport
    from dpmine_server.services.calibration_file import OperationCalibration, TimingCalibration
    from dpmine_server.services.container import Services
    from dpmine_server.services.datasets import StoredFile
    from dpmine_server.settings import Settings


def _print_error(message: str) -> None:
    """One line ``error: …`` on stderr."""
    typer.echo(f"error: {' '.join(message.split())}", err=True)


def _fail(message: str) -> typer.Exit:
    _print_error(message)
    return typer.Exit(code=2)


def _validation_line(error: ValidationError, what: str) -> str:
    """The first problem of a pydantic error on one line: where, what, how many more."""
    problems = error.errors()
    first = problems[0]
    where = ".".join(str(part) for part in first["loc"])
    message = str(first["msg"]).removeprefix("Value error, ")
    more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
    return f"{what}: {where + ': ' if where else ''}{message}{more}"


def _input_mistake(error: Exception) -> str | None:
    """The one-line message for an error the owner can fix, or None for a bug (re-raised)."""
    from pydantic import ValidationError
    from sqlalchemy.exc import SQLAlchemyError

    from dpmine_server.services.principals import SecretKeyMismatch

    if isinstance(error, ValidationError):
        return _validation_line(error, f"invalid {error.title}")
    if isinstance(error, SQLAlchemyError):
        reason = str(getattr(error, "orig", None) or error).strip().splitlines()[0]
        return (
            f"cannot use the database named by DPMINE_DATABASE_URL ({reason}); check the URL "
            "and that the database is reachable"
        )
    if isinstance(error, SecretKeyMismatch | ValueError):
        return str(error)
    if isinstance(error, OSError):
        where = f" '{error.filename}'" if error.filename else ""
        return f"{error.strerror or error}{where}; check the paths in the command and settings"
    return None


#: The top-level modules of the ``[server]`` extra (pyproject.toml) and the distribution each
#: comes from (tests/services/test_owner_cli.py checks this against pyproject.toml).
SERVER_EXTRA_MODULES = {
    "fastapi": "fastapi",
    "starlette": "fastapi",
    "uvicorn": "uvicorn",
    "sqlalchemy": "sqlalchemy",
    "alembic": "alembic",
    "pydantic_settings": "pydantic-settings",
    "multipart": "python-multipart",
    "python_multipart": "python-multipart",
    "randomgen": "randomgen",
    "opendp": "opendp",
    "pandas": "pandas",
    "pyarrow": "pyarrow",
    "psycopg": "psycopg",
    "psycopg_pool": "psycopg",
    "procrastinate": "procrastinate",
    "numba": "numba",
    "jinja2": "jinja2",
    "fastapi_offline": "fastapi-offline",
}


def _missing_server_package(error: ImportError) -> str | None:
    """The one-line message for a server dependency that is not installed (the client-only
    ``pip install dpmine``), or None for any other import error (a bug: re-raised)."""
    module = (error.name or "").partition(".")[0]
    distribution = SERVER_EXTRA_MODULES.get(module)
    if distribution is None:
        return None
    return (
        f"the Python package '{distribution}' is not installed: dpmine-server needs the server "
        "extra; install it with: pip install 'dpmine[server]'"
    )


def _report_usage_error(error: typer.TyperException) -> int:
    """A click usage error as one line (or the help it carries, if no arguments were given)."""
    format_message = getattr(error, "format_message", None)
    message = format_message() if callable(format_message) else str(error)
    code = int(getattr(error, "exit_code", 2))
    if "\n" in message.strip():
        typer.echo(message)
        return code
    context = getattr(error, "ctx", None)
    hint = f"; see '{context.command_path} --help'" if context is not None else ""
    _print_error(f"{message.rstrip('.')}{hint}")
    return code


class _ServerGroup(TyperGroup):
    """``dpmine-server``: every mistake is reported as one ``error:`` line (exit 2), and a
    missing server package as one line saying what to install (exit 1).

    The client's ``dpmine.cli._DPMineGroup`` does the same for ``dpmine``; this one is kept
    apart on purpose: importing anything from the ``dpmine`` package loads the client (about
    1 s), and ``dpmine-server --help`` must answer at once."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        settings: dict[str, Any] = {
            "prog_name": prog_name,
            "complete_var": complete_var,
            "standalone_mode": False,
            "windows_expand_args": windows_expand_args,
            **extra,
        }
        if not standalone_mode:
            return super().main(args, **settings)
        try:
            outcome = super().main(args, **settings)
        except typer.TyperException as error:
            sys.exit(_report_usage_error(error))
        except typer.Abort:
            _print_error("aborted")
            sys.exit(1)
        except ImportError as error:
            missing = _missing_server_package(error)
            if missing is None:
                raise
            _print_error(missing)
            sys.exit(1)
        except Exception as error:
            message = _input_mistake(error)
            if message is None:
                raise
            _print_error(message)
            sys.exit(2)
        sys.exit(outcome if isinstance(outcome, int) else 0)


def _typer(help_text: str, **options: Any) -> typer.Typer:
    # Plain help: Rich markup would swallow "[lo, hi]"-like examples in help texts.
    return typer.Typer(help=help_text, rich_markup_mode=None, **options)


app = _typer(
    "dpmine server: run it, and manage principals, datasets and grants.",
    cls=_ServerGroup,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
principals_app = _typer("Owners and analysts and their API keys.")
datasets_app = _typer("Register, inspect and retire datasets.")
grants_app = _typer("Analysts' budgets on datasets.")
ledger_app = _typer("The privacy-budget ledger.")
audit_app = _typer("The audit log.")
db_app = _typer("The engine's own database.")
for sub, name in (
    (principals_app, "principals"),
    (datasets_app, "datasets"),
    (grants_app, "grants"),
    (ledger_app, "ledger"),
    (audit_app, "audit"),
    (db_app, "db"),
):
    app.add_typer(sub, name=name)


def _settings() -> Settings:
    from pydantic import ValidationError

    from dpmine_server.settings import Settings, UnsafeSettingsError

    try:
        return Settings()
    except ValidationError as error:
        raise _fail(_validation_line(error, "bad settings (DPMINE_* variables)")) from error
    except UnsafeSettingsError as error:
        raise _fail(f"bad settings: {error}") from error


def _services(*, recover: bool, start_workers: bool = False) -> Services:
    """The engine on the configured database; a path or database problem is one line."""
    from sqlalchemy.exc import SQLAlchemyError

    from dpmine_server.services.container import build_services

    settings = _settings()
    try:
        return build_services(settings, recover=recover, start_workers=start_workers)
    except OSError as error:
        where = f" '{error.filename}'" if error.filename else ""
        raise _fail(
            f"cannot create or open{where}: {error.strerror or error}; check "
            "DPMINE_DATABASE_URL (an SQLite file needs a folder that can be created) and "
            "DPMINE_DATA_DIR"
        ) from error
    except SQLAlchemyError as error:
        message = _input_mistake(error)
        raise _fail(message or str(error)) from error


@contextmanager
def _owner_session() -> Iterator[tuple[Services, Session]]:
    from dpmine_server.data.loaders import DataValidationError
    from dpmine_server.errors import ServerError

    services = _services(recover=False)
    try:
        with services.sessions() as session:
            try:
                yield services, session
                session.commit()
            except ServerError as error:
                session.rollback()
                raise _fail(error.message) from error
            except DataValidationError as error:
                session.rollback()
                raise _fail(str(error)) from error
    finally:
        services.close()


JsonOption = Annotated[
    bool, typer.Option("--json", help="Print JSON for scripts instead of a table")
]


def _print_json(value: Any) -> None:
    from pydantic import BaseModel

    if isinstance(value, BaseModel):
        typer.echo(value.model_dump_json(indent=2))
    elif isinstance(value, list):
        typer.echo(json.dumps([_plain(v) for v in value], indent=2, default=str))
    else:
        typer.echo(json.dumps(value, indent=2, default=str))


def _plain(value: Any) -> Any:
    from pydantic import BaseModel

    return value.model_dump(mode="json") if isinstance(value, BaseModel) else value


def _eps(value: float | str) -> str:
    """A privacy amount as people read it (``0.7``, never ``0.7000000001``)."""
    from dpmine.amounts import epsilon_text

    return epsilon_text(value)


def _print_fields(pairs: list[tuple[str, object]]) -> None:
    from dpmine.tables import print_fields

    print_fields(pairs)


def _print_rows(title: str, header: list[str], rows: list[list[str]], caption: str = "") -> None:
    """A table of ``rows`` under ``header`` (:func:`dpmine.tables.print_table`)."""
    from rich.markup import escape
    from rich.table import Table

    from dpmine.tables import print_table

    table = Table(*header, title=title, caption=caption or None, caption_justify="left")
    for row in rows:
        table.add_row(*(escape(cell) for cell in row))
    print_table(table)


# -- init --------------------------------------------------------------------------------------

_INIT_TEMPLATE = """\
# dpmine server settings, written by `dpmine-server init` on {date}.
# Every dpmine-server command started in this folder reads this file (DPMINE_CONFIG_FILE names
# another one); DPMINE_* environment variables override it. Keys are the settings' names
# without the prefix (docs/operators.md lists them).
#
# secret_key protects the stored API keys: keep this file private (it is created readable by
# you only), back it up with the database, and never change the key of an existing database.
# In production, set environment = "production" and move secret_key to the environment or a
# secret store.
environment = "development"
secret_key = "{secret}"
database_url = {database_url}
data_dir = {data_dir}
"""


@app.command()
def init(
    path: Annotated[Path, typer.Option(help="Settings file to write.")] = Path("dpmine.toml"),
    database_url: Annotated[
        str, typer.Option(help="Database URL (SQLite file, or postgresql+psycopg://...).")
    ] = "sqlite:///var/dpmine.sqlite3",
    data_dir: Annotated[Path, typer.Option(help="Folder for registered data.")] = Path("var/data"),
    as_json: JsonOption = False,
) -> None:
    """Write a settings file with a new secret key, the database and the data folder, so that
    every command and every new shell in this folder uses the same ones."""
    import secrets
    from datetime import UTC, datetime

    if path.exists():
        raise _fail(
            f"{path} exists already; it holds the secret of an existing database, so it is "
            "never overwritten (remove it yourself only if you also start a new database)"
        )
    text = _INIT_TEMPLATE.format(
        date=datetime.now(UTC).date().isoformat(),
        secret=secrets.token_urlsafe(48),
        # A JSON string is a valid TOML basic string (same escapes).
        database_url=json.dumps(database_url),
        data_dir=json.dumps(str(data_dir)),
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("x", encoding="utf-8") as handle:
        path.chmod(0o600)
        handle.write(text)
    if as_json:
        _print_json({"path": str(path), "database_url": database_url, "data_dir": str(data_dir)})
        return
    typer.echo(
        f"wrote {path} (readable by you only): a new secret key, database {database_url}, "
        f"data folder {data_dir}. Commands started in this folder read it; next: "
        "dpmine-server principals add admin --role owner"
    )


# -- serve -------------------------------------------------------------------------------------


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Interface (default: settings)")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default: settings)")] = None,
    log_level: Annotated[str, typer.Option(help="uvicorn log level")] = "info",
) -> None:
    """Run the HTTP server (migrates the database first)."""
    import uvicorn

    settings = _settings()
    uvicorn.run(
        "dpmine_server.app:create_app",
        factory=True,
        host=host or settings.host,
        port=port or settings.port,
        log_level=log_level,
    )


@app.command()
def worker(
    concurrency: Annotated[
        int, typer.Option(min=1, max=16, help="Jobs this process runs at once (threads).")
    ] = 1,
) -> None:
    """Run jobs from the shared PostgreSQL database until stopped (SIGTERM/Ctrl-C: the
    current job finishes first). Run as many as you like, on any hosts that reach the
    database and the data folder. On SQLite, `serve` runs its own workers."""
    import logging

    from dpmine_server.services.queues import run_worker

    settings = _settings()
    if settings.database_url.startswith("sqlite"):
        raise _fail(
            "`dpmine-server worker` takes jobs from a shared PostgreSQL database; on SQLite, "
            "`dpmine-server serve` runs its own worker processes (DPMINE_JOB_WORKERS)"
        )
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    run_worker(settings, concurrency=concurrency)


def _calibrated_base_ms(result: TimingCalibration, limit: int) -> float:
    """The base (ms) a server admitting ``limit`` requests at once takes from ``result``."""
    from dpmine_server.settings import MIN_FAIL_CLOSED_BASE_MS

    assert result.request_path is not None
    floor = MIN_FAIL_CLOSED_BASE_MS / 1000.0
    return 1000.0 * result.request_path.base_seconds(limit=limit, margin=result.margin, floor=floor)


def _factor_rows(name: str, op: OperationCalibration) -> list[list[str]]:
    """The calibrate table's rows of one operation: its factor, floor and cases, then one
    indented row per kernel variant measured (``OperationCalibration.variants``)."""
    rows = [[name, f"{op.factor:.3g}", f"{op.floor_seconds:.3g}", str(len(op.cases))]]
    for variant, own in op.variants.items():
        cases = sum(case.variant == variant for case in op.cases)
        rows.append(
            [f"  {name} ({variant})", f"{own.factor:.3g}", f"{own.floor_seconds:.3g}", str(cases)]
        )
    return rows


def _calibrated_job_base_ms(result: TimingCalibration, limit: int) -> float:
    """The jobs' base (ms) at that limit (``RequestPathCalibration.job_base_seconds``)."""
    assert result.request_path is not None
    base = _calibrated_base_ms(result, limit) / 1000.0
    return 1000.0 * result.request_path.job_base_seconds(base=base, margin=result.margin)


@app.command()
def calibrate(
    out: Annotated[Path, typer.Option(help="Calibration file to write.")] = Path(
        "dpmine-timing.json"
    ),
    quick: Annotated[
        bool, typer.Option("--quick", help="5,000-row data, 2 calls per case (seconds)")
    ] = False,
    rows: Annotated[
        str | None,
        typer.Option(help="Rows of the synthetic data, a comma list (default: 20000,100000)"),
    ] = None,
    repeats: Annotated[int | None, typer.Option(min=1, help="Timed calls per case")] = None,
    operations: Annotated[
        str | None,
        typer.Option(help="Only these operations, a comma list (the others keep factor 1)"),
    ] = None,
    in_flight: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Requests sent at once to measure the request path (default: "
            "DPMINE_MAX_IN_FLIGHT); the base then follows the configured limit",
        ),
    ] = None,
    skip_request_path: Annotated[
        bool,
        typer.Option(
            "--skip-request-path", help="Do not measure the base (DPMINE_TIMING_BASE_MS stays)"
        ),
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Time every priced operation's kernel on synthetic adversarial data on this machine, the
    request path at the in-flight limit (the base) and the job path (the jobs' base), and
    write the public calibration file that DPMINE_TIMING_CALIBRATION names (docs/operators.md,
    "Calibrating the time budgets"). Run it on the deployment's machine, with the load it
    usually has; no registered data is read."""
    from dpmine_server.services import calibration
    from dpmine_server.services.calibration_file import write_calibration
    from dpmine_server.services.warmup import freeze_heap, warm_compiled_kernels

    try:
        sizes = tuple(int(part) for part in rows.split(",")) if rows else None
    except ValueError as error:
        raise _fail(f"--rows takes whole numbers separated by commas, got {rows!r}") from error
    if sizes is not None and any(size < 100 for size in sizes):
        raise _fail("--rows: every size must be at least 100 rows")
    from dpmine_server.services.timing import PRICED_OPERATIONS

    chosen = tuple(operations.split(",")) if operations else PRICED_OPERATIONS
    unknown = sorted(set(chosen) - set(PRICED_OPERATIONS))
    if unknown:
        raise _fail(
            f"--operations: unknown {', '.join(unknown)}; choose among "
            f"{', '.join(PRICED_OPERATIONS)}"
        )
    default_sizes = calibration.QUICK_SIZES if quick else calibration.SIZES
    default_repeats = calibration.QUICK_REPEATS if quick else calibration.REPEATS
    warm_compiled_kernels()
    freeze_heap()  # as a serving process does after its warm-up, so the kernels time alike
    result = calibration.calibrate(
        sizes or default_sizes,
        repeats or default_repeats,
        quick=quick,
        operations=chosen,
        report=None if as_json else typer.echo,
    )
    if not skip_request_path:
        from dpmine_server.request_path import measure_request_path

        limit = in_flight or _settings().max_in_flight
        if not as_json:
            typer.echo(
                f"request path: {limit} count.noisy calls at once to a server process, then "
                "count.noisy jobs one at a time (the job path)"
            )
        measured = measure_request_path(limit, repeats or default_repeats)
        result = result.model_copy(update={"request_path": measured})
    out.parent.mkdir(parents=True, exist_ok=True)
    write_calibration(result, out)
    if as_json:
        _print_json(
            {
                "path": str(out),
                "margin": result.margin,
                "factors": {name: op.factor for name, op in result.operations.items()},
                "request_path": None
                if result.request_path is None
                else result.request_path.model_dump(mode="json"),
                "base_ms": None
                if result.request_path is None
                else _calibrated_base_ms(result, result.request_path.limit),
                "job_base_ms": None
                if result.request_path is None
                else _calibrated_job_base_ms(result, result.request_path.limit),
            }
        )
        return
    typer.echo("")
    _print_rows(
        f"measured factors (margin {result.margin:g})",
        ["operation", "factor", "floor s", "cases"],
        [row for name, op in result.operations.items() for row in _factor_rows(name, op)],
    )
    if result.request_path is not None:
        from dpmine_server.settings import MIN_FAIL_CLOSED_BASE_MS

        path = result.request_path
        typer.echo(
            f"request path: {path.limit} at once took {path.burst_seconds * 1e3:.1f} ms (worst "
            f"of {path.bursts}), {path.seconds_per_request * 1e3:.2f} ms a request; base = "
            f"max({MIN_FAIL_CLOSED_BASE_MS:g} ms, {result.margin:g} × DPMINE_MAX_IN_FLIGHT × "
            f"that) = {_calibrated_base_ms(result, path.limit):.0f} ms at {path.limit}"
        )
        if path.job_seconds is not None:
            typer.echo(
                f"job path: the worst of {path.jobs} jobs took {path.job_seconds * 1e3:.1f} ms "
                f"from submission to its settled state stored; jobs' base = max(base, 2 × "
                f"{result.margin:g} × that) = {_calibrated_job_base_ms(result, path.limit):.0f} ms"
            )
    typer.echo(f"wrote {out}; set DPMINE_TIMING_CALIBRATION={out} and restart the server to use it")


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Create or migrate the database schema to the newest revision."""
    _services(recover=False).close()
    typer.echo("database is at the newest revision")


# -- principals --------------------------------------------------------------------------------


@principals_app.command("add")
def principals_add(
    name: str,
    role: Annotated[str, typer.Option(help="owner or analyst")] = "analyst",
    as_json: JsonOption = False,
) -> None:
    """Create a principal and print its API key (shown only this once)."""
    if role not in {"owner", "analyst"}:
        raise _fail("--role must be 'owner' or 'analyst'")
    from dpmine_server.services import audit
    from dpmine_server.services.principals import create_principal

    with _owner_session() as (services, session):
        created = create_principal(
            session,
            name=name,
            role="owner" if role == "owner" else "analyst",
            secret=services.settings.secret_key,
        )
        audit.record(session, action="principal_created", target=name, details={"via": "cli"})
    if as_json:
        _print_json(created)
        return
    _print_new_key(created.principal.name, created.principal.role, created.api_key)


def _print_new_key(name: str, role: str, api_key: str) -> None:
    _print_fields(
        [
            ("principal", f"{name} ({role})"),
            ("api_key", api_key),
            ("note", f"the key is shown only this once: give it to {name} now"),
        ]
    )


@principals_app.command("list")
def principals_list(as_json: JsonOption = False) -> None:
    """List principals (never their keys)."""
    from sqlalchemy import select

    from dpmine_server.db.models import Principal
    from dpmine_server.services.principals import principal_info

    with _owner_session() as (_services, session):
        rows = [
            principal_info(p) for p in session.scalars(select(Principal).order_by(Principal.id))
        ]
    if as_json:
        _print_json(rows)
        return
    _print_rows(
        "principals",
        ["id", "name", "role", "status", "key starts", "created"],
        [
            [
                str(p.id),
                p.name,
                p.role,
                "disabled" if p.disabled else "active",
                p.key_prefix,
                f"{p.created_at:%Y-%m-%d %H:%M}",
            ]
            for p in rows
        ],
    )


@principals_app.command("rotate-key")
def principals_rotate(name: str, as_json: JsonOption = False) -> None:
    """Issue a new key for NAME; the old key stops working."""
    from dpmine_server.services import audit
    from dpmine_server.services.principals import rotate_key

    with _owner_session() as (services, session):
        rotated = rotate_key(session, name, secret=services.settings.secret_key)
        audit.record(session, action="key_rotated", target=name, details={"via": "cli"})
    if as_json:
        _print_json(rotated)
        return
    _print_new_key(rotated.principal.name, rotated.principal.role, rotated.api_key)


@principals_app.command("disable")
def principals_disable(name: str, as_json: JsonOption = False) -> None:
    """Disable NAME."""
    from dpmine_server.services import audit
    from dpmine_server.services.principals import set_disabled

    with _owner_session() as (_services, session):
        info = set_disabled(session, name, disabled=True)
        audit.record(session, action="principal_disabled", target=name, details={"via": "cli"})
    if as_json:
        _print_json(info)
        return
    _print_fields([("principal", f"{info.name} ({info.role})"), ("status", "disabled")])


# -- datasets ----------------------------------------------------------------------------------


def _source_and_files(
    *,
    csv_path: Path | None,
    left: Path | None,
    right: Path | None,
    id_column: str | None,
    fimi: Path | None,
    sql_url: str | None,
    table: str | None,
    query: str | None,
) -> tuple[DatasetSource, dict[str, StoredFile]]:
    from dpmine.wire import CsvPairSource, CsvSource, FimiSource, SqlSource
    from dpmine_server.services.datasets import StoredFile

    given = [x is not None for x in (csv_path, left or right, fimi, sql_url)]
    if sum(given) != 1:
        raise _fail("give exactly one source: --csv, --left/--right, --fimi or --sql-url")
    if id_column is not None and (left is None or right is None):
        raise _fail("--id-column names the row id of a --left/--right pair; drop it here")
    if csv_path is not None:
        return CsvSource(path=csv_path.name), {"path": StoredFile(csv_path, csv_path.name)}
    if fimi is not None:
        return FimiSource(path=fimi.name), {"path": StoredFile(fimi, fimi.name)}
    if sql_url is not None:
        return SqlSource(url=sql_url, table=table, query=query), {}
    if left is None or right is None:
        raise _fail("a two-file source needs both --left and --right")
    return (
        CsvPairSource(left=left.name, right=right.name, id_column=id_column),
        {"left": StoredFile(left, left.name), "right": StoredFile(right, right.name)},
    )


def _local_source(source: DatasetSource, files: dict[str, StoredFile]) -> DatasetSource:
    """``source`` naming the owner's local files by absolute path (to read them in place)."""
    updates = {field: str(stored.path.resolve()) for field, stored in files.items()}
    return source.model_copy(update=updates)


def _read_text(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise _fail(f"{what} '{path}' does not exist") from None
    except UnicodeDecodeError:
        raise _fail(f"{what} '{path}' is not UTF-8 text") from None
    except OSError as error:
        raise _fail(f"cannot read {what} '{path}': {error.strerror}") from None


def _read_views(path: Path) -> dict[str, str]:
    """The --views file: a JSON object mapping column names to 'left' or 'right'."""
    text = _read_text(path, "views file")
    try:
        views = json.loads(text)
    except json.JSONDecodeError as error:
        raise _fail(
            f"views file '{path}' is not JSON: line {error.lineno} column {error.colno}: "
            f"{error.msg}"
        ) from None
    if not isinstance(views, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in views.items()
    ):
        raise _fail(
            f'views file \'{path}\' must be a JSON object like {{"age": "left", "class": "right"}}'
        )
    return views


def _read_metadata(path: Path) -> DatasetMetadata:
    from pydantic import ValidationError

    from dpmine.wire import DatasetMetadata

    text = _read_text(path, "metadata file")
    try:
        return DatasetMetadata.model_validate_json(text)
    except ValidationError as error:
        raise _fail(_validation_line(error, f"metadata file '{path}'")) from None


CsvOption = Annotated[Path | None, typer.Option("--csv", help="One CSV (or .csv.gz) file")]
LeftOption = Annotated[Path | None, typer.Option(help="Left-view CSV")]
RightOption = Annotated[Path | None, typer.Option(help="Right-view CSV")]
IdOption = Annotated[
    str | None,
    typer.Option(
        help="Row id column of a --left/--right pair: rows are joined on it (each id once in "
        "each file, the same ids in both), then it is dropped"
    ),
]
FimiOption = Annotated[Path | None, typer.Option(help="FIMI .dat transactions file")]
SqlUrlOption = Annotated[str | None, typer.Option(help="SQLAlchemy URL of a source database")]
TableOption = Annotated[str | None, typer.Option(help="Table of --sql-url")]
QueryOption = Annotated[str | None, typer.Option(help="SELECT query on --sql-url")]
#: dpmine.wire.GuaranteePolicy, spelt out: the wire package is imported only when a command runs.
PolicyChoice = Literal["allow_approximate", "pure_only"]
AccountingChoice = Literal["pure", "zcdp"]
_ACCOUNTING_HELP = (
    "pure: the ledger adds epsilon; zcdp: it adds rho (zero-concentrated DP, far tighter for "
    "many small releases), with the cap as --epsilon-cap and --cap-delta (stored as the largest "
    "rho within them) or as --cap-rho"
)
_POLICY_HELP = (
    "pure_only: refuse the operations whose guarantee is approximate (tree.mcmc when its "
    "chain runs, tree.pair_mcmc, brl.sample_rule_list) before any charge; allow_approximate: "
    "serve them"
)


@datasets_app.command("propose-metadata")
def datasets_propose(
    kind: Annotated[str, typer.Option(help="views, table or transactions")],
    csv_path: CsvOption = None,
    left: LeftOption = None,
    right: RightOption = None,
    id_column: IdOption = None,
    fimi: FimiOption = None,
    sql_url: SqlUrlOption = None,
    table: TableOption = None,
    query: QueryOption = None,
    label: Annotated[
        str | None, typer.Option(help="Label column and positive value, e.g. class=p")
    ] = None,
    views: Annotated[
        Path | None,
        typer.Option(help='JSON file mapping column to view, e.g. {"age": "left"} (one CSV)'),
    ] = None,
) -> None:
    """Suggest public metadata from the data (JSON on stdout). It is derived from the private
    data: review it (the reasons are in review.notes, also printed on stderr), edit it, set
    review.reviewed to true, then pass it to 'add'. Identifier-like and high-cardinality
    columns are left out; ranges [lo, hi] are rounded outward to round numbers."""
    from dpmine_server.data.propose import REVIEW_REMINDER, parse_label, propose_metadata

    if kind not in {"views", "table", "transactions"}:
        raise _fail("--kind must be views, table or transactions")
    source, files = _source_and_files(
        csv_path=csv_path,
        left=left,
        right=right,
        id_column=id_column,
        fimi=fimi,
        sql_url=sql_url,
        table=table,
        query=query,
    )
    view_map = _read_views(views) if views else None
    try:
        metadata = propose_metadata(
            _local_source(source, files),
            kind="views" if kind == "views" else "table" if kind == "table" else "transactions",
            base_dir=Path.cwd(),
            label=parse_label(label) if label else None,
            views=view_map,
        )
    except ValueError as error:
        raise _fail(str(error)) from error
    _print_json(metadata)
    typer.echo(f"\n*** {REVIEW_REMINDER}", err=True)
    for note in metadata.review.notes if metadata.review else []:
        typer.echo(f"  - {note}", err=True)
    typer.echo(
        "*** At 'datasets add', choose the guarantee policy: --guarantee-policy pure_only refuses "
        "the MCMC samplers (epsilon-DP only at convergence); the default allow_approximate "
        "serves them.",
        err=True,
    )


#: What the owner types at ``datasets review`` to mark a proposal reviewed.
REVIEW_WORD = "reviewed"


@datasets_app.command("review")
def datasets_review(
    metadata_path: Annotated[Path, typer.Argument(metavar="FILE", help="A proposal's JSON")],
) -> None:
    """Show a metadata proposal for review (its attributes and the proposal's notes), then mark
    it reviewed in FILE once you type 'reviewed'. Anything else leaves FILE unchanged."""
    metadata = _read_metadata(metadata_path)
    if metadata.review is None:
        typer.echo(f"{metadata_path}: hand-written metadata (no review section): nothing to review")
        return
    _print_rows(
        f"proposal {metadata_path} ({metadata.kind}; n_max {metadata.n_max})",
        ["attribute", "view", "type", "public domain"],
        [[a.name, a.view or "-", a.type, _domain(a)] for a in metadata.attributes],
    )
    typer.echo("")
    typer.echo("Everything above becomes public to every granted analyst once registered.")
    typer.echo("Notes of the proposal (what to check or change in the file first):")
    for number, note in enumerate(metadata.review.notes, start=1):
        typer.echo(f"  {number}. {note}")
    if not metadata.review.notes:
        typer.echo("  (none)")
    if metadata.review.reviewed:
        typer.echo(f"{metadata_path} is already marked reviewed.")
        return
    try:
        answer = typer.prompt(
            f"Type '{REVIEW_WORD}' once you have checked every attribute and note "
            "(anything else leaves the file unchanged)",
            default="",
            show_default=False,
        )
    except typer.Abort:  # end of input
        answer = ""
    if answer.strip() != REVIEW_WORD:
        raise _fail(f"{metadata_path} was not changed: edit it, then run 'datasets review' again")
    raw = json.loads(metadata_path.read_text(encoding="utf-8"))
    raw["review"]["reviewed"] = True
    metadata_path.write_text(json.dumps(raw, indent=2) + "\n", encoding="utf-8")
    typer.echo(f"{metadata_path}: marked reviewed; 'datasets add' will accept it.")


@datasets_app.command("add")
def datasets_add(
    dataset_id: Annotated[str, typer.Argument(metavar="ID")],
    metadata: Annotated[Path, typer.Option(help="Public metadata JSON (see propose-metadata)")],
    epsilon_cap: Annotated[
        float | None, typer.Option(help="Total epsilon ever spendable (with --cap-delta: zcdp)")
    ] = None,
    guarantee_policy: Annotated[PolicyChoice, typer.Option(help=_POLICY_HELP)] = (
        "allow_approximate"
    ),
    accounting: Annotated[AccountingChoice, typer.Option(help=_ACCOUNTING_HELP)] = "pure",
    cap_delta: Annotated[
        float | None, typer.Option(help="zcdp: the delta of the (epsilon, delta) cap, e.g. 1e-6")
    ] = None,
    cap_rho: Annotated[float | None, typer.Option(help="zcdp: the cap given as rho")] = None,
    name: Annotated[str | None, typer.Option(help="Display name")] = None,
    description: str = "",
    attribution: str = "",
    csv_path: CsvOption = None,
    left: LeftOption = None,
    right: RightOption = None,
    id_column: IdOption = None,
    fimi: FimiOption = None,
    sql_url: SqlUrlOption = None,
    table: TableOption = None,
    query: QueryOption = None,
    force: Annotated[
        bool,
        typer.Option(help="Register a proposal whose review.reviewed is still false"),
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Register a dataset (files are copied into the data folder). A proposal from
    propose-metadata is refused until its review.reviewed is true (or --force); metadata written
    by hand (no review field) is taken as is. Warns about ranges or category lists that look
    copied from the data."""
    from dpmine.wire import CreateDatasetRequest
    from dpmine_server.data.propose import accept_reviewed, loaded_value_warnings
    from dpmine_server.services import audit

    source, files = _source_and_files(
        csv_path=csv_path,
        left=left,
        right=right,
        id_column=id_column,
        fimi=fimi,
        sql_url=sql_url,
        table=table,
        query=query,
    )
    proposal = _read_metadata(metadata)
    try:
        accepted = accept_reviewed(proposal, force=force)
    except ValueError as error:
        raise _fail(str(error)) from error
    if proposal.review is not None and not proposal.review.reviewed:
        typer.echo("warning: registering a proposal that was not reviewed (--force)", err=True)
    request = CreateDatasetRequest(
        id=dataset_id,
        name=name or dataset_id,
        description=description,
        attribution=attribution,
        epsilon_cap=epsilon_cap,
        guarantee_policy=guarantee_policy,
        accounting=accounting,
        cap_delta=cap_delta,
        cap_rho=cap_rho,
        metadata=accepted,
        source=source,
    )
    with _owner_session() as (services, session):
        info, report = services.datasets.register(session, request, files=files)
        audit.record(
            session,
            action="dataset_registered",
            target=dataset_id,
            details={
                "guarantee_policy": guarantee_policy,
                **({"accounting": accounting} if accounting != "pure" else {}),
                "via": "cli",
            },
        )
        cap = services.datasets.cap(session, dataset_id)
    warnings = loaded_value_warnings(accepted, report.values)
    for warning in warnings:
        typer.echo(f"warning: {warning}", err=True)
    if as_json:
        _print_json(
            {
                "dataset": info.model_dump(mode="json"),
                "report": report.fields(),
                "warnings": warnings,
            }
        )
        return
    _print_fields([("registered", info.id), *_dataset_fields(info, cap), *_load_fields(report)])


def _attribute_counts(metadata: DatasetMetadata) -> str:
    """How many attributes each view has (public), e.g. ``left 12, right 11``."""
    if metadata.kind == "transactions":
        return f"{len(metadata.items)} items, at most {metadata.row_width} per row"
    views = ("left", "right") if metadata.kind == "views" else (None,)
    counts = [sum(a.view == view for a in metadata.attributes) for view in views]
    if metadata.kind != "views":
        return f"{counts[0]} attributes"
    return ", ".join(f"{view} {count}" for view, count in zip(views, counts, strict=True))


def _dataset_fields(info: DatasetInfo, cap: DatasetCap) -> list[tuple[str, object]]:
    """The public summary of a dataset and its budget (never its rows nor their number)."""
    metadata = info.metadata
    label = metadata.label
    total, spent, remaining = _budget_cells(cap)
    return [
        ("name", info.name),
        ("kind", metadata.kind),
        ("version", info.version),
        ("status", info.status),
        ("attributes", _attribute_counts(metadata)),
        ("label", None if label is None else f"{label.attribute} = {label.positive}"),
        ("row bound", f"n_max = {metadata.n_max}"),
        ("guarantees", info.guarantee_policy),
        *_accounting_fields(cap),
        ("ε cap", total),
        ("ε spent", f"{spent} (left {remaining})"),
    ]


def _budget_cells(cap: DatasetCap) -> tuple[str, str, str]:
    """(cap, spent, left) as epsilon text: exact on a pure dataset; on a zCDP one the epsilon
    its rho implies (cap, spent) and the largest epsilon of one generic call (left)."""
    if cap.zcdp is None:
        left = str(Decimal(cap.epsilon_cap_exact) - Decimal(cap.spent_exact))
        return _eps(cap.epsilon_cap_exact), _eps(cap.spent_exact), _eps(left)
    return f"≈{cap.epsilon_cap:.4g}", f"≈{cap.spent:.4g}", f"≈{cap.remaining:.4g}"


def _accounting_fields(cap: DatasetCap) -> list[tuple[str, object]]:
    """A zCDP dataset's exact rho and the delta its epsilon figures are at (none if pure)."""
    if cap.zcdp is None:
        return [("accounting", "pure (the ledger adds ε)")]
    default = ", the public default: the cap was given as ρ" if cap.zcdp.delta_is_default else ""
    return [
        ("accounting", f"zcdp (the ledger adds ρ; ε shown at δ = {cap.zcdp.delta:g}{default})"),
        ("ρ cap", f"{cap.zcdp.rho_exact} (implies ε = {cap.zcdp.epsilon:.6g} at that δ)"),
        ("ρ spent", f"{cap.zcdp.rho_spent:.6g} (left {cap.zcdp.rho_remaining:.6g})"),
    ]


def _load_fields(report: LoadReport) -> list[tuple[str, object]]:
    """What the load changed, by column name only (--json has the owner-only counts)."""
    touched = [
        ("clipped to their range", report.clipped),
        ("read as missing", report.missing),
    ]
    fields: list[tuple[str, object]] = [
        (what, ", ".join(sorted(c for c, count in columns.items() if count)))
        for what, columns in touched
        if any(columns.values())
    ]
    if report.ignored_columns:
        fields.append(("columns ignored", ", ".join(report.ignored_columns)))
    if report.truncated_rows:
        fields.append(("rows cut to max_row_width", "some (counts: --json)"))
    return fields


@datasets_app.command("list")
def datasets_list(as_json: JsonOption = False) -> None:
    """All datasets with their status, cap and spending."""
    with _owner_session() as (services, session):
        rows = [
            (info, services.datasets.cap(session, info.id))
            for info in services.datasets.list_all(session)
        ]
    if not as_json:
        _print_rows(
            "datasets",
            [
                "id",
                "name",
                "kind",
                "status",
                "version",
                "guarantees",
                "accounting",
                "ε cap",
                "ε spent",
                "ε left",
            ],
            [
                [
                    d.id,
                    d.name,
                    d.metadata.kind,
                    d.status,
                    str(d.version),
                    d.guarantee_policy,
                    "pure" if cap.zcdp is None else f"zcdp ρ {cap.zcdp.rho_exact}",
                    *_budget_cells(cap),
                ]
                for d, cap in rows
            ],
        )
        return
    _print_json(
        [
            {
                "id": d.id,
                "name": d.name,
                "kind": d.metadata.kind,
                "status": d.status,
                "guarantee_policy": d.guarantee_policy,
                "accounting": cap.accounting,
                "zcdp": None if cap.zcdp is None else cap.zcdp.model_dump(mode="json"),
                "epsilon_cap": cap.epsilon_cap,
                "spent": cap.spent,
                "remaining": cap.remaining,
            }
            for d, cap in rows
        ]
    )


@datasets_app.command("show")
def datasets_show(
    dataset_id: Annotated[str, typer.Argument(metavar="ID")], as_json: JsonOption = False
) -> None:
    """Public metadata of a dataset, its cap and spending."""
    from dpmine_server.services.datasets import dataset_info

    with _owner_session() as (services, session):
        info = dataset_info(services.datasets.get(session, dataset_id))
        cap = services.datasets.cap(session, dataset_id)
    if as_json:
        _print_json(info)
        return
    _print_fields([("dataset", info.id), *_dataset_fields(info, cap)])
    typer.echo("")
    _print_rows(
        f"{info.metadata.kind} schema",
        ["attribute", "view", "type", "public domain"],
        [[a.name, a.view or "-", a.type, _domain(a)] for a in info.metadata.attributes],
    )


def _domain(attribute: BooleanAttribute | CategoricalAttribute | NumericAttribute) -> str:
    """An attribute's public domain in a few words."""
    if attribute.type == "categorical":
        return ", ".join(attribute.categories)
    if attribute.type == "numeric":
        return f"[{attribute.lo:g}, {attribute.hi:g}]"
    return "true, false"


@datasets_app.command("refresh")
def datasets_refresh(
    dataset_id: Annotated[str, typer.Argument(metavar="ID")], as_json: JsonOption = False
) -> None:
    """Re-read an SQL dataset's source, validate it and keep it as the next version (operations
    only read the snapshot; a source that no longer matches the metadata is refused)."""
    from dpmine_server.services import audit

    with _owner_session() as (services, session):
        info, report = services.datasets.refresh(session, dataset_id)
        audit.record(
            session,
            action="dataset_refreshed",
            target=dataset_id,
            details={"version": info.version, "via": "cli"},
        )
        cap = services.datasets.cap(session, dataset_id)
    if as_json:
        _print_json({"dataset": info.model_dump(mode="json"), "report": report.fields()})
        return
    _print_fields([("refreshed", info.id), *_dataset_fields(info, cap), *_load_fields(report)])


@datasets_app.command("set-cap")
def datasets_set_cap(
    dataset_id: Annotated[str, typer.Argument(metavar="ID")],
    epsilon_cap: Annotated[float, typer.Argument(metavar="EPSILON")],
    as_json: JsonOption = False,
) -> None:
    """Change a dataset's cap: never below what was spent; raising it lets more be learned
    about every row (the audit log records it)."""
    from dpmine_server.services import audit

    with _owner_session() as (services, session):
        before = services.datasets.cap(session, dataset_id)
        changed = services.datasets.set_cap(session, dataset_id, epsilon_cap)
        audit.record(
            session,
            action="dataset_cap_set",
            target=dataset_id,
            details={
                "from": before.epsilon_cap_exact,
                "to": changed.epsilon_cap_exact,
                "via": "cli",
            },
        )
    if as_json:
        _print_json(changed)
        return
    _print_fields(
        [
            ("dataset", changed.dataset_id),
            ("ε cap", f"{_eps(before.epsilon_cap_exact)} → {_eps(changed.epsilon_cap_exact)}"),
            ("ε spent", _eps(changed.spent_exact)),
            ("ε left", _eps(changed.remaining)),
        ]
    )


@datasets_app.command("set-guarantee-policy")
def datasets_set_guarantee_policy(
    dataset_id: Annotated[str, typer.Argument(metavar="ID")],
    policy: Annotated[PolicyChoice, typer.Argument(metavar="POLICY", help=_POLICY_HELP)],
    as_json: JsonOption = False,
) -> None:
    """Change which guarantees a dataset serves, from the next call on (the audit log records
    it): pure_only refuses the MCMC samplers, whose guarantee is approximate."""
    from dpmine_server.services import audit

    with _owner_session() as (services, session):
        before = services.datasets.get(session, dataset_id).guarantee_policy
        changed = services.datasets.set_guarantee_policy(session, dataset_id, policy)
        audit.record(
            session,
            action="dataset_guarantee_policy_set",
            target=dataset_id,
            details={"from": before, "to": changed.guarantee_policy, "via": "cli"},
        )
    if as_json:
        _print_json(changed)
        return
    _print_fields(
        [("dataset", changed.id), ("guarantees", f"{before} → {changed.guarantee_policy}")]
    )


@datasets_app.command("retire")
def datasets_retire(
    dataset_id: Annotated[str, typer.Argument(metavar="ID")], as_json: JsonOption = False
) -> None:
    """Stop all further queries on a dataset (its ledger is kept)."""
    from dpmine_server.services import audit

    with _owner_session() as (services, session):
        info = services.datasets.retire(session, dataset_id)
        audit.record(session, action="dataset_retired", target=dataset_id, details={"via": "cli"})
    if as_json:
        _print_json(info)
        return
    _print_fields(
        [("dataset", info.id), ("status", "retired: no more queries; its ledger is kept")]
    )


# -- grants ------------------------------------------------------------------------------------


@grants_app.command("revoke")
def grants_revoke(dataset_id: str, analyst: str, as_json: JsonOption = False) -> None:
    """Stop ANALYST's spending on DATASET_ID (what was spent stays spent)."""
    from dpmine_server.services import audit

    with _owner_session() as (services, session):
        grant = services.datasets.revoke_grant(session, dataset_id, analyst)
        audit.record(
            session,
            action="grant_revoked",
            target=f"{dataset_id}/{analyst}",
            details={"epsilon": grant.epsilon, "via": "cli"},
        )
    _show_grant(grant, as_json)


def _show_grant(grant: GrantInfo, as_json: bool) -> None:
    if as_json:
        _print_json(grant)
        return
    if grant.zcdp is not None:
        amounts = grant.zcdp
        _print_fields(
            [
                ("dataset", grant.dataset_id),
                ("analyst", grant.analyst),
                (
                    "ρ granted",
                    f"{amounts.rho_exact} (implies ε = {amounts.epsilon:.6g} at δ = "
                    f"{amounts.delta:g})",
                ),
                ("ρ spent", f"{amounts.rho_spent:.6g}"),
                ("ρ left", f"{amounts.rho_remaining:.6g}"),
            ]
        )
        return
    _print_fields(
        [
            ("dataset", grant.dataset_id),
            ("analyst", grant.analyst),
            ("ε granted", _eps(grant.epsilon)),
            ("ε spent", _eps(grant.spent)),
            ("ε left", _eps(grant.remaining)),
        ]
    )


@grants_app.command("set")
def grants_set(
    dataset_id: str,
    analyst: str,
    epsilon: Annotated[float | None, typer.Argument(help="On a pure dataset")] = None,
    rho: Annotated[float | None, typer.Option(help="On a zcdp dataset: the grant in rho")] = None,
    as_json: JsonOption = False,
) -> None:
    """Set ANALYST's allotment on DATASET_ID: EPSILON on a pure dataset, --rho on a zcdp one."""
    from dpmine_server.services import audit

    with _owner_session() as (services, session):
        grant = services.datasets.set_grant(session, dataset_id, analyst, epsilon, rho)
        audit.record(
            session,
            action="grant_set",
            target=f"{dataset_id}/{analyst}",
            details={"epsilon": epsilon, "via": "cli"}
            if rho is None
            else {"rho": rho, "via": "cli"},
        )
    _show_grant(grant, as_json)


@grants_app.command("list")
def grants_list(dataset_id: str, as_json: JsonOption = False) -> None:
    """Grants on a dataset."""
    with _owner_session() as (services, session):
        services.datasets.get(session, dataset_id)
        rows = services.datasets.list_grants(session, dataset_id)
    if as_json:
        _print_json(rows)
        return
    _print_rows(
        f"grants on {dataset_id}",
        ["analyst", "ε granted", "ε spent", "ε left"],
        [
            [g.analyst, _eps(g.epsilon), _eps(g.spent), _eps(g.remaining)]
            if g.zcdp is None
            else [
                g.analyst,
                f"ρ {g.zcdp.rho_exact}",
                f"ρ {g.zcdp.rho_spent}",
                f"ρ {g.zcdp.rho_remaining}",
            ]
            for g in rows
        ],
    )


# -- ledger and audit --------------------------------------------------------------------------

FormatOption = Annotated[
    str | None,
    typer.Option(
        "--format",
        help="table, json or csv (default: a table on the screen, json into --output)",
        show_default=False,
    ),
]


def _export_format(export_format: str | None, as_json: bool, output: Path | None) -> str:
    """The format asked for: ``--json`` is ``--format json``; without either, a table on the
    screen and JSON into a file."""
    if as_json and export_format not in {None, "json"}:
        raise _fail(f"--json and --format {export_format} disagree; give one of them")
    chosen = "json" if as_json else export_format or ("json" if output else "table")
    if chosen not in {"table", "json", "csv"}:
        raise _fail("--format must be table, json or csv")
    if chosen == "table" and output is not None:
        raise _fail("--output takes --format json or csv; a table is for the screen")
    return chosen


def _write_rows(
    rows: list[dict[str, Any]], columns: list[str], export_format: str, output: Path | None
) -> None:
    """``rows`` as JSON or CSV (a header even when there are no rows) into ``output``."""
    handle = output.open("w", newline="") if output else sys.stdout
    try:
        if export_format == "json":
            json.dump(rows, handle, indent=2, default=str)
            handle.write("\n")
        else:
            writer = csv.DictWriter(handle, fieldnames=columns)
            writer.writeheader()
            for row in rows:
                writer.writerow(
                    {k: json.dumps(v) if isinstance(v, dict | list) else v for k, v in row.items()}
                )
    finally:
        if output:
            handle.close()


@ledger_app.command("export")
def ledger_export(
    dataset: Annotated[str | None, typer.Option(help="Only this dataset")] = None,
    export_format: FormatOption = None,
    output: Annotated[Path | None, typer.Option(help="File (default: stdout)")] = None,
    as_json: JsonOption = False,
) -> None:
    """Every ledger entry (JSON and CSV: with parameters and releases)."""
    from dpmine.wire import LedgerEntryInfo
    from dpmine_server.services.exports import ledger_entries

    chosen = _export_format(export_format, as_json, output)
    with _owner_session() as (_services, session):
        entries = ledger_entries(session, dataset_id=dataset)
    if chosen != "table":
        rows = [e.model_dump(mode="json") for e in entries]
        _write_rows(rows, list(LedgerEntryInfo.model_fields), chosen, output)
        return
    _print_rows(
        "ledger" + (f" of {dataset}" if dataset else ""),
        ["id", "created", "dataset", "analyst", "operation", "ε", "guarantee", "status"],
        [
            [
                str(e.id),
                f"{e.created_at:%Y-%m-%d %H:%M:%S}",
                e.dataset_id,
                e.principal,
                e.operation,
                _eps(e.epsilon_exact),
                e.guarantee,
                e.status,
            ]
            for e in entries
        ],
        caption="--format csv or --json adds each entry's parameters and release",
    )


@ledger_app.command("verify")
def ledger_verify(as_json: JsonOption = False) -> None:
    """Check that every spent total equals the sum of its entries (exit 1 if not)."""
    with _owner_session() as (services, _session):
        problems = services.ledger.verify()
    if as_json:
        _print_json({"consistent": not problems, "problems": problems})
        if problems:
            raise typer.Exit(code=1)
        return
    for problem in problems:
        typer.echo(problem)
    if problems:
        raise typer.Exit(code=1)
    typer.echo("ledger is consistent")


@ledger_app.command("recover")
def ledger_recover() -> None:
    """Mark entries and jobs left running by dead server processes as interrupted (charges
    kept). Safe while servers run: live processes hold their liveness locks (each server also
    does this at start-up)."""
    _services(recover=True).close()
    typer.echo("recovered")


@audit_app.command("export")
def audit_export(
    export_format: FormatOption = None,
    output: Annotated[Path | None, typer.Option(help="File (default: stdout)")] = None,
    as_json: JsonOption = False,
) -> None:
    """The audit log, newest first."""
    from dpmine.wire import AuditEventInfo
    from dpmine_server.services import audit

    chosen = _export_format(export_format, as_json, output)
    with _owner_session() as (_services, session):
        events = audit.list_events(session)
    if chosen != "table":
        rows = [e.model_dump(mode="json") for e in events]
        _write_rows(rows, list(AuditEventInfo.model_fields), chosen, output)
        return
    _print_rows(
        "audit log, newest first",
        ["id", "at", "by", "action", "target", "details"],
        [
            [
                str(e.id),
                f"{e.at:%Y-%m-%d %H:%M:%S}",
                e.principal or "-",
                e.action,
                e.target,
                json.dumps(e.details, sort_keys=True, default=str),
            ]
            for e in events
        ],
    )


def main() -> None:
    """Entry point of ``dpmine-server``."""
    app()


if __name__ == "__main__":
    main()
