"""SQL sources are snapshotted at registration and on an explicit owner refresh (issue #7).

Operations must never read a live source: a source that changed after registration (more rows
than ``n_max``, values outside the declared categories, a dropped table) would otherwise fail
after the charge, one data-dependent bit per call (DESIGN.md contract item 5). A refresh
re-reads and validates the source and creates a new dataset version; an invalid source is a
clear error to the owner and the current version stays.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sqlalchemy
from sqlalchemy import select
from typer.testing import CliRunner

import dpmine
from dpmine.queries import parse_query
from dpmine.wire import (
    BooleanAttribute,
    CategoricalAttribute,
    CreateDatasetRequest,
    CsvSource,
    DatasetMetadata,
    NumericAttribute,
    SqlSource,
)
from dpmine_server.cli import app as owner_app
from dpmine_server.data.columns import NumericColumn
from dpmine_server.data.loaders import SNAPSHOT_FILE, load_store, snapshot_sql
from dpmine_server.db.models import AuditEvent, LedgerEntry
from dpmine_server.services.container import Services
from dpmine_server.settings import Settings
from support.inprocess import TestClient, expect_error

DATASET = "hospital"
N_MAX = 10
#: Epsilon of each count: noise of scale 1/500, so the released count is the exact count.
SHARP = 500.0

Row = tuple[int | None, str, float | None]
ROWS: list[Row] = [(1, "a", 30.0), (0, "b", 45.5), (1, "b", None), (None, "a", 80.0), (1, "a", 2)]


def _execute(url: str, *statements: str, rows: list[Row] | None = None) -> None:
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.begin() as connection:
            for statement in statements:
                connection.exec_driver_sql(statement)
            if rows:
                connection.exec_driver_sql("INSERT INTO patients VALUES (?, ?, ?)", rows)
    finally:
        engine.dispose()


@pytest.fixture
def source_url(tmp_path: Path) -> str:
    """A SQLite source database holding table ``patients`` with the five ROWS."""
    url = f"sqlite:///{tmp_path / 'source.sqlite3'}"
    _execute(url, "CREATE TABLE patients (sick INTEGER, ward TEXT, age REAL)", rows=ROWS)
    return url


def _metadata() -> DatasetMetadata:
    return DatasetMetadata(
        kind="table",
        n_max=N_MAX,
        attributes=[
            BooleanAttribute(name="sick"),
            CategoricalAttribute(name="ward", categories=["a", "b"]),
            NumericAttribute(name="age", lo=0, hi=100),
        ],
    )


@pytest.fixture
def hospital(owner: dpmine.Connection, analyst_key: str, source_url: str) -> str:
    """The SQL table registered as ``hospital`` (cap 10⁴; alice holds 10⁴)."""
    del analyst_key  # alice must exist before the grant
    request = CreateDatasetRequest(
        id=DATASET,
        name="Hospital",
        epsilon_cap=10_000.0,
        metadata=_metadata(),
        source=SqlSource(url=source_url, table="patients"),
    )
    registered = owner.admin.register_dataset(request)
    assert registered["report"]["n_rows"] == len(ROWS)
    owner.admin.grant(DATASET, "alice", 10_000.0)
    return DATASET


def _count(client: TestClient, headers: dict[str, str], predicate: str | None = None) -> int:
    body: dict[str, Any] = {"epsilon": SHARP}
    if predicate is not None:
        body["predicate"] = parse_query(predicate).model_dump(mode="json")
    response = client.post(f"/v1/datasets/{DATASET}/counts", json=body, headers=headers)
    assert response.status_code == 200, response.text
    value = response.json()["count"]
    assert isinstance(value, int)
    return value


def _version(client: TestClient, headers: dict[str, str]) -> int:
    response = client.get(f"/v1/datasets/{DATASET}", headers=headers)
    assert response.status_code == 200, response.text
    version = response.json()["version"]
    assert isinstance(version, int)
    return version


def _grow_beyond_n_max(url: str) -> None:
    _execute(url, rows=[(1, "b", 50.0)] * (N_MAX + 5))


class TestSnapshot:
    def test_a_source_grown_beyond_n_max_still_answers_from_the_snapshot(
        self,
        client: TestClient,
        hospital: str,
        source_url: str,
        analyst_headers: dict[str, str],
    ) -> None:
        del hospital
        _grow_beyond_n_max(source_url)  # before the first query: nothing is cached yet
        assert _count(client, analyst_headers) == len(ROWS)
        assert _count(client, analyst_headers, "[sick]") == 3

    def test_changed_or_dropped_source_is_never_read(
        self,
        client: TestClient,
        hospital: str,
        source_url: str,
        analyst_headers: dict[str, str],
        services: Services,
    ) -> None:
        del hospital
        _execute(
            source_url, "UPDATE patients SET ward = 'c'", "DELETE FROM patients WHERE sick = 1"
        )
        assert _count(client, analyst_headers, "[ward = a]") == 3
        _execute(source_url, "DROP TABLE patients")
        assert _count(client, analyst_headers) == len(ROWS)
        with services.sessions() as session:
            statuses = set(session.scalars(select(LedgerEntry.status)))
        assert statuses == {"released"}

    def test_a_missing_snapshot_is_refused_before_the_charge(
        self,
        client: TestClient,
        hospital: str,
        analyst_headers: dict[str, str],
        api_settings: Settings,
        services: Services,
    ) -> None:
        """A dataset registered before snapshots existed: 4xx naming the refresh, no charge."""
        (api_settings.data_dir / "datasets" / hospital / "v1" / "snapshot.csv").unlink()
        response = client.post(
            f"/v1/datasets/{hospital}/counts", json={"epsilon": SHARP}, headers=analyst_headers
        )
        assert response.status_code == 422, response.text
        assert "datasets refresh" in response.json()["detail"]
        with services.sessions() as session:
            assert list(session.scalars(select(LedgerEntry.status))) == []

    def test_the_snapshot_is_kept_in_the_engine_data_folder(
        self, hospital: str, api_settings: Settings
    ) -> None:
        folder = api_settings.data_dir / "datasets" / hospital / "v1"
        assert sorted(p.name for p in folder.iterdir()) == ["packed", "snapshot.csv"]


class TestRefresh:
    def test_an_invalid_source_is_refused_and_the_version_stays(
        self,
        *,
        client: TestClient,
        hospital: str,
        source_url: str,
        owner_headers: dict[str, str],
        analyst_headers: dict[str, str],
        api_settings: Settings,
    ) -> None:
        _grow_beyond_n_max(source_url)
        response = client.post(f"/v1/admin/datasets/{hospital}/refresh", headers=owner_headers)
        detail = expect_error(response, 422, "InvalidRequest")
        assert "n_max" in detail
        assert _version(client, analyst_headers) == 1
        assert _count(client, analyst_headers) == len(ROWS)
        assert not (api_settings.data_dir / "datasets" / hospital / "v2").exists()

    def test_a_valid_refresh_creates_version_2_with_the_new_data(
        self,
        *,
        client: TestClient,
        owner: dpmine.Connection,
        hospital: str,
        source_url: str,
        analyst_headers: dict[str, str],
        services: Services,
    ) -> None:
        assert _count(client, analyst_headers) == len(ROWS)  # version 1, now cached
        _execute(source_url, rows=[(1, "b", 50.0)] * 3)
        refreshed = owner.admin.refresh_dataset(hospital)
        assert refreshed["dataset"]["version"] == 2
        assert refreshed["report"]["n_rows"] == len(ROWS) + 3
        assert _version(client, analyst_headers) == 2
        assert _count(client, analyst_headers) == len(ROWS) + 3
        assert _count(client, analyst_headers, "[ward = b]") == 5
        info = owner.dataset(hospital).schema
        assert info == _metadata()  # the same public metadata
        with services.sessions() as session:
            versions = list(session.scalars(select(LedgerEntry.dataset_version)))
            events = list(
                session.scalars(select(AuditEvent).where(AuditEvent.action == "dataset_refreshed"))
            )
        assert versions == [1, 2, 2]
        assert [(e.target, e.details["version"]) for e in events] == [(hospital, 2)]

    def test_the_cap_and_spent_budget_stay(
        self,
        client: TestClient,
        owner: dpmine.Connection,
        hospital: str,
        analyst: dpmine.Connection,
        analyst_headers: dict[str, str],
    ) -> None:
        _count(client, analyst_headers)
        before = analyst.dataset(hospital).budget()
        owner.admin.refresh_dataset(hospital)
        after = analyst.dataset(hospital).budget()
        assert after == before

    def test_file_sources_cannot_be_refreshed(
        self, client: TestClient, toy: str, owner_headers: dict[str, str]
    ) -> None:
        response = client.post(f"/v1/admin/datasets/{toy}/refresh", headers=owner_headers)
        assert "SQL" in expect_error(response, 422, "InvalidRequest")

    def test_unknown_dataset_is_404(
        self, client: TestClient, owner_headers: dict[str, str]
    ) -> None:
        response = client.post("/v1/admin/datasets/nothing/refresh", headers=owner_headers)
        expect_error(response, 404, "NotFound")

    def test_analysts_cannot_refresh(
        self, client: TestClient, hospital: str, analyst_headers: dict[str, str]
    ) -> None:
        response = client.post(f"/v1/admin/datasets/{hospital}/refresh", headers=analyst_headers)
        expect_error(response, 403, "Forbidden")


class TestRefreshCommand:
    def _run(self, settings: Settings, command: str) -> Any:
        env = {
            "DPMINE_ENVIRONMENT": "test",
            "DPMINE_DATABASE_URL": settings.database_url,
            "DPMINE_DATA_DIR": str(settings.data_dir),
            "DPMINE_SECRET_KEY": settings.secret_key,
            "DPMINE_BOOTSTRAP_OWNER_KEY": "",
        }
        return CliRunner().invoke(owner_app, shlex.split(command), env=env)

    def test_refresh_from_the_command_line(
        self,
        client: TestClient,
        hospital: str,
        source_url: str,
        api_settings: Settings,
        analyst_headers: dict[str, str],
    ) -> None:
        _grow_beyond_n_max(source_url)
        refused = self._run(api_settings, f"datasets refresh {hospital}")
        assert refused.exit_code == 2, refused.output
        assert "n_max" in refused.stderr
        assert _version(client, analyst_headers) == 1
        _execute(source_url, "DELETE FROM patients WHERE ward = 'b' AND age = 50.0")
        _execute(source_url, "DELETE FROM patients WHERE sick IS NULL")
        done = self._run(api_settings, f"datasets refresh {hospital}")
        assert done.exit_code == 0, (done.output, repr(done.exception))
        assert re.search(r"^version:\s+2$", done.stdout, re.MULTILINE), done.stdout
        assert _version(client, analyst_headers) == 2
        assert _count(client, analyst_headers) == len(ROWS) - 1
        again = self._run(api_settings, f"datasets refresh {hospital} --json")
        assert json.loads(again.stdout)["dataset"]["version"] == 3  # --json: for scripts


def test_the_snapshot_keeps_every_cell_exactly(tmp_path: Path) -> None:
    """Commas, quotes, line breaks, empty cells and floats survive the CSV snapshot."""
    url = f"sqlite:///{tmp_path / 'tricky.sqlite3'}"
    _execute(url, "CREATE TABLE patients (sick INTEGER, ward TEXT, age REAL)")
    wards = ['a, "b"', "line\nbreak", "plain"]
    tricky: list[Row] = [(1, wards[0], 0.1), (None, wards[1], 1e-7), (0, wards[2], None)]
    _execute(url, rows=tricky)
    metadata = DatasetMetadata(
        kind="table",
        n_max=N_MAX,
        attributes=[
            BooleanAttribute(name="sick"),
            CategoricalAttribute(name="ward", categories=wards),
            NumericAttribute(name="age", lo=0, hi=100),
        ],
    )
    source = SqlSource(url=url, table="patients")
    _store, report = snapshot_sql(metadata, source, tmp_path / "v1")
    assert report.n_rows == len(tricky)
    live, _ = load_store(metadata, source, base_dir=tmp_path)
    kept, _ = load_store(metadata, CsvSource(path=SNAPSHOT_FILE), base_dir=tmp_path / "v1")
    assert kept.n_rows == live.n_rows
    for name in ("sick", "ward", "age"):
        for ours, theirs in zip(
            kept.column(name).bitsets(), live.column(name).bitsets(), strict=True
        ):
            assert ours.to_bool_array().tolist() == theirs.to_bool_array().tolist(), name
    age_kept, age_live = kept.column("age"), live.column("age")
    assert isinstance(age_kept, NumericColumn)
    assert isinstance(age_live, NumericColumn)
    assert np.array_equal(age_kept.values, age_live.values, equal_nan=True)
