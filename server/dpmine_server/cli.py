"""``dpmine-server``: run the server and manage it on the server machine (owner's tool).

The management commands work directly on the engine's database (the same one the server uses,
from ``DPMINE_DATABASE_URL``); they are for the data owner, who is trusted.
"""

from __future__ import annotations

import csv
import json
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
import uvicorn
from pydantic import BaseModel, ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from dpmine.wire import (
    CreateDatasetRequest,
    CsvPairSource,
    CsvSource,
    DatasetMetadata,
    DatasetSource,
    FimiSource,
    SqlSource,
)
from dpmine_server.data.loaders import DataValidationError
from dpmine_server.data.propose import parse_label, propose_metadata
from dpmine_server.db.models import Principal
from dpmine_server.errors import ServerError
from dpmine_server.services import audit
from dpmine_server.services.container import Services, build_services
from dpmine_server.services.datasets import StoredFile, dataset_info
from dpmine_server.services.exports import ledger_entries
from dpmine_server.services.principals import (
    SecretKeyMismatch,
    create_principal,
    principal_info,
    rotate_key,
    set_disabled,
)
from dpmine_server.services.queues import run_worker
from dpmine_server.settings import Settings, UnsafeSettingsError

app = typer.Typer(help="dpmine server: run it, and manage principals, datasets and grants.")
principals_app = typer.Typer(help="Owners and analysts and their API keys.")
datasets_app = typer.Typer(help="Register, inspect and retire datasets.")
grants_app = typer.Typer(help="Analysts' budgets on datasets.")
ledger_app = typer.Typer(help="The privacy-budget ledger.")
audit_app = typer.Typer(help="The audit log.")
db_app = typer.Typer(help="The engine's own database.")
for sub, name in (
    (principals_app, "principals"),
    (datasets_app, "datasets"),
    (grants_app, "grants"),
    (ledger_app, "ledger"),
    (audit_app, "audit"),
    (db_app, "db"),
):
    app.add_typer(sub, name=name)


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code=2)


def _settings() -> Settings:
    try:
        return Settings()
    except ValidationError as error:
        raise _fail(f"bad settings: {error.errors()[0]['msg']}") from error
    except UnsafeSettingsError as error:
        raise _fail(f"bad settings: {error}") from error


@contextmanager
def _owner_session() -> Iterator[tuple[Services, Session]]:
    services = build_services(_settings(), recover=False, start_workers=False)
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


def _print_json(value: Any) -> None:
    if isinstance(value, BaseModel):
        typer.echo(value.model_dump_json(indent=2))
    elif isinstance(value, list):
        typer.echo(json.dumps([_plain(v) for v in value], indent=2, default=str))
    else:
        typer.echo(json.dumps(value, indent=2, default=str))


def _plain(value: Any) -> Any:
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else value


# -- serve -------------------------------------------------------------------------------------


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Interface (default: settings)")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default: settings)")] = None,
    log_level: Annotated[str, typer.Option(help="uvicorn log level")] = "info",
) -> None:
    """Run the HTTP server (migrates the database first)."""
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
    settings = _settings()
    if settings.database_url.startswith("sqlite"):
        raise _fail(
            "`dpmine-server worker` takes jobs from a shared PostgreSQL database; on SQLite, "
            "`dpmine-server serve` runs its own worker processes (DPMINE_JOB_WORKERS)"
        )
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    run_worker(settings, concurrency=concurrency)


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Create or migrate the database schema to the newest revision."""
    services = build_services(_settings(), recover=False, start_workers=False)
    services.close()
    typer.echo("database is at the newest revision")


# -- principals --------------------------------------------------------------------------------


@principals_app.command("add")
def principals_add(
    name: str,
    role: Annotated[str, typer.Option(help="owner or analyst")] = "analyst",
) -> None:
    """Create a principal and print its API key (shown only this once)."""
    if role not in {"owner", "analyst"}:
        raise _fail("--role must be 'owner' or 'analyst'")
    with _owner_session() as (services, session):
        created = create_principal(
            session,
            name=name,
            role="owner" if role == "owner" else "analyst",
            secret=services.settings.secret_key,
        )
        audit.record(session, action="principal_created", target=name, details={"via": "cli"})
    _print_json(created)


@principals_app.command("list")
def principals_list() -> None:
    """List principals (never their keys)."""
    with _owner_session() as (_services, session):
        rows = [
            principal_info(p) for p in session.scalars(select(Principal).order_by(Principal.id))
        ]
    _print_json(rows)


@principals_app.command("rotate-key")
def principals_rotate(name: str) -> None:
    """Issue a new key for NAME; the old key stops working."""
    with _owner_session() as (services, session):
        rotated = rotate_key(session, name, secret=services.settings.secret_key)
        audit.record(session, action="key_rotated", target=name, details={"via": "cli"})
    _print_json(rotated)


@principals_app.command("disable")
def principals_disable(name: str) -> None:
    """Disable NAME."""
    with _owner_session() as (_services, session):
        info = set_disabled(session, name, disabled=True)
        audit.record(session, action="principal_disabled", target=name, details={"via": "cli"})
    _print_json(info)


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
    given = [x is not None for x in (csv_path, left or right, fimi, sql_url)]
    if sum(given) != 1:
        raise _fail("give exactly one source: --csv, --left/--right, --fimi or --sql-url")
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


CsvOption = Annotated[Path | None, typer.Option("--csv", help="One CSV (or .csv.gz) file")]
LeftOption = Annotated[Path | None, typer.Option(help="Left-view CSV")]
RightOption = Annotated[Path | None, typer.Option(help="Right-view CSV")]
IdOption = Annotated[str | None, typer.Option(help="Row id column of a --left/--right pair")]
FimiOption = Annotated[Path | None, typer.Option(help="FIMI .dat transactions file")]
SqlUrlOption = Annotated[str | None, typer.Option(help="SQLAlchemy URL of a source database")]
TableOption = Annotated[str | None, typer.Option(help="Table of --sql-url")]
QueryOption = Annotated[str | None, typer.Option(help="SELECT query on --sql-url")]


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
        Path | None, typer.Option(help="JSON file mapping column → left/right (one-CSV views)")
    ] = None,
) -> None:
    """Suggest public metadata from the data; review it, edit it, then pass it to 'add'."""
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
    updates = {field: str(stored.path.resolve()) for field, stored in files.items()}
    view_map = json.loads(views.read_text()) if views else None
    try:
        metadata = propose_metadata(
            source.model_copy(update=updates),
            kind="views" if kind == "views" else "table" if kind == "table" else "transactions",
            base_dir=Path.cwd(),
            label=parse_label(label) if label else None,
            views=view_map,
        )
    except ValueError as error:
        raise _fail(str(error)) from error
    _print_json(metadata)


@datasets_app.command("add")
def datasets_add(
    dataset_id: Annotated[str, typer.Argument(metavar="ID")],
    metadata: Annotated[Path, typer.Option(help="Public metadata JSON (see propose-metadata)")],
    epsilon_cap: Annotated[float, typer.Option(help="Total epsilon ever spendable")],
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
) -> None:
    """Register a dataset (files are copied into the data folder)."""
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
    try:
        request = CreateDatasetRequest(
            id=dataset_id,
            name=name or dataset_id,
            description=description,
            attribution=attribution,
            epsilon_cap=epsilon_cap,
            metadata=DatasetMetadata.model_validate_json(metadata.read_text()),
            source=source,
        )
    except ValidationError as error:
        raise _fail(str(error)) from error
    with _owner_session() as (services, session):
        info, report = services.datasets.register(session, request, files=files)
        audit.record(
            session, action="dataset_registered", target=dataset_id, details={"via": "cli"}
        )
    _print_json({"dataset": info.model_dump(mode="json"), "report": report.__dict__})


@datasets_app.command("list")
def datasets_list() -> None:
    """All datasets with their status."""
    with _owner_session() as (services, session):
        rows = services.datasets.list_all(session)
    _print_json(
        [{"id": d.id, "name": d.name, "kind": d.metadata.kind, "status": d.status} for d in rows]
    )


@datasets_app.command("show")
def datasets_show(dataset_id: Annotated[str, typer.Argument(metavar="ID")]) -> None:
    """Public metadata of a dataset."""
    with _owner_session() as (services, session):
        info = dataset_info(services.datasets.get(session, dataset_id))
    _print_json(info)


@datasets_app.command("refresh")
def datasets_refresh(dataset_id: Annotated[str, typer.Argument(metavar="ID")]) -> None:
    """Re-read an SQL dataset's source, validate it and keep it as the next version (operations
    only read the snapshot; a source that no longer matches the metadata is refused)."""
    with _owner_session() as (services, session):
        info, report = services.datasets.refresh(session, dataset_id)
        audit.record(
            session,
            action="dataset_refreshed",
            target=dataset_id,
            details={"version": info.version, "via": "cli"},
        )
    _print_json({"dataset": info.model_dump(mode="json"), "report": report.__dict__})


@datasets_app.command("retire")
def datasets_retire(dataset_id: Annotated[str, typer.Argument(metavar="ID")]) -> None:
    """Stop all further queries on a dataset (its ledger is kept)."""
    with _owner_session() as (services, session):
        info = services.datasets.retire(session, dataset_id)
        audit.record(session, action="dataset_retired", target=dataset_id, details={"via": "cli"})
    _print_json(info)


# -- grants ------------------------------------------------------------------------------------


@grants_app.command("set")
def grants_set(dataset_id: str, analyst: str, epsilon: float) -> None:
    """Set ANALYST's allotment on DATASET_ID to EPSILON."""
    with _owner_session() as (services, session):
        grant = services.datasets.set_grant(session, dataset_id, analyst, epsilon)
        audit.record(
            session,
            action="grant_set",
            target=f"{dataset_id}/{analyst}",
            details={"epsilon": epsilon, "via": "cli"},
        )
    _print_json(grant)


@grants_app.command("list")
def grants_list(dataset_id: str) -> None:
    """Grants on a dataset."""
    with _owner_session() as (services, session):
        services.datasets.get(session, dataset_id)
        rows = services.datasets.list_grants(session, dataset_id)
    _print_json(rows)


# -- ledger and audit --------------------------------------------------------------------------

FormatOption = Annotated[str, typer.Option("--format", help="json or csv")]


def _write_rows(rows: list[dict[str, Any]], export_format: str, output: Path | None) -> None:
    if export_format not in {"json", "csv"}:
        raise _fail("--format must be json or csv")
    handle = output.open("w", newline="") if output else sys.stdout
    try:
        if export_format == "json":
            json.dump(rows, handle, indent=2, default=str)
            handle.write("\n")
        elif rows:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
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
    export_format: FormatOption = "json",
    output: Annotated[Path | None, typer.Option(help="File (default: stdout)")] = None,
) -> None:
    """Every ledger entry, with parameters and releases."""
    with _owner_session() as (_services, session):
        rows = [e.model_dump(mode="json") for e in ledger_entries(session, dataset_id=dataset)]
    _write_rows(rows, export_format, output)


@ledger_app.command("verify")
def ledger_verify() -> None:
    """Check that every spent total equals the sum of its entries (exit 1 if not)."""
    with _owner_session() as (services, _session):
        problems = services.ledger.verify()
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
    services = build_services(_settings(), recover=True)
    services.close()
    typer.echo("recovered")


@audit_app.command("export")
def audit_export(
    export_format: FormatOption = "json",
    output: Annotated[Path | None, typer.Option(help="File (default: stdout)")] = None,
) -> None:
    """The audit log, newest first."""
    with _owner_session() as (_services, session):
        rows = [e.model_dump(mode="json") for e in audit.list_events(session)]
    _write_rows(rows, export_format, output)


def main() -> None:
    """Entry point of ``dpmine-server``."""
    try:
        app()
    except SecretKeyMismatch as error:
        typer.echo(f"error: {error}", err=True)
        raise SystemExit(2) from error


if __name__ == "__main__":
    main()
