"""Fixtures of the in-process API tests: one app per test on a temp SQLite file.

* ``api_settings``: each test gets a copy of a template database that the real start-up built
  once (migrated, bootstrap owner); each app still runs the start-up (migrate, recover) on it.
* ``client``: a :class:`fastapi.testclient.TestClient` with the lifespan running (migrations,
  bootstrap owner); server exceptions come back as 500 responses, as a real client sees them.
* ``owner`` / ``analyst``: ``dpmine.connect(..., http=client)`` with the bootstrap owner's key and
  with analyst ``alice``'s key.
* ``mushroom``: the UCI mushroom data (8124 rows) uploaded as a two-view dataset.
* ``toy``: a generated two-view dataset with numeric, Boolean and categorical columns and missing
  values; ``toy_truth`` holds its exact counts so that tests can compare noisy releases with the
  truth (tolerances from the discrete Laplace tail, DP-ENGINES.md; ALGORITHMS.md §0.3).

The app, client and connections come from :mod:`support.inprocess` (which also imports
``TestClient`` with its import-time deprecation warning suppressed).
"""

from __future__ import annotations

import csv
import gzip
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from fastapi import FastAPI

import dpmine
from dpmine.wire import (
    BooleanAttribute,
    CategoricalAttribute,
    CreateDatasetRequest,
    CsvSource,
    DatasetMetadata,
    LabelSpec,
    NumericAttribute,
)
from dpmine_server.app import create_app
from dpmine_server.data.propose import propose_metadata
from dpmine_server.services.container import Services, build_services
from dpmine_server.settings import Settings
from support.inprocess import TestClient, bearer, connect, open_client, settings_for

OWNER_KEY = "owner-bootstrap-key-0123456789"
SECRET_KEY = "api-tests-secret-0123456789abcdef"
TEST_SEED = 20240611
MUSHROOM_CSV = Path(__file__).resolve().parents[2] / "data/uci_mushroom/agaricus-lepiota.csv.gz"
MUSHROOM_LEFT = (
    "class",
    "cap-shape",
    "cap-surface",
    "cap-color",
    "bruises",
    "odor",
    "gill-attachment",
    "gill-spacing",
    "gill-size",
    "gill-color",
    "stalk-shape",
    "stalk-root",
)
DATABASE_FILE = "dpmine.sqlite3"
TOY_ROWS = 240
TOY_CAP = 10.0
GRANT = 5.0

#: ``register(dataset_id, csv_path, metadata, cap=..., grants={name: epsilon})`` → dataset id.
Register = Callable[..., str]


# -- the app --------------------------------------------------------------------------------------


def _settings(folder: Path) -> Settings:
    """Test-mode settings on ``folder``'s SQLite file and data folder."""
    return settings_for(
        folder,
        database_file=DATABASE_FILE,
        owner_key=OWNER_KEY,
        secret_key=SECRET_KEY,
        test_seed=TEST_SEED,
        job_workers=2,
    )


@pytest.fixture(scope="session")
def template_database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated database holding the bootstrap owner, built once by the real start-up."""
    folder = tmp_path_factory.mktemp("template")
    build_services(_settings(folder)).close()
    return folder / DATABASE_FILE


@pytest.fixture
def api_settings(tmp_path: Path, template_database: Path) -> Settings:
    """Settings on a private copy of the template database (start-up still migrates it)."""
    for part in template_database.parent.glob(f"{DATABASE_FILE}*"):
        shutil.copyfile(part, tmp_path / part.name)
    return _settings(tmp_path)


@pytest.fixture
def app(api_settings: Settings) -> FastAPI:
    """The application (services are built by its lifespan)."""
    return create_app(api_settings)


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    """An in-process HTTP client with the lifespan running."""
    with open_client(app) as test_client:
        yield test_client


@pytest.fixture
def services(client: TestClient, app: FastAPI) -> Services:
    """The running app's services (ledger, datasets, executor, jobs)."""
    del client  # the lifespan (which builds the services) runs while the client is open
    built: Services = app.state.services
    return built


@pytest.fixture
def owner_headers() -> dict[str, str]:
    """Authorization of the bootstrap owner ``admin``."""
    return bearer(OWNER_KEY)


@pytest.fixture
def owner(client: TestClient) -> dpmine.Connection:
    """The bootstrap owner's connection (no retries: tests want the first answer)."""
    return connect(OWNER_KEY, client)


@pytest.fixture
def analyst_key(owner: dpmine.Connection) -> str:
    """The API key of analyst ``alice``."""
    return owner.admin.add_principal("alice", "analyst").api_key


@pytest.fixture
def analyst_headers(analyst_key: str) -> dict[str, str]:
    """Authorization of analyst ``alice``."""
    return bearer(analyst_key)


@pytest.fixture
def analyst(client: TestClient, analyst_key: str) -> dpmine.Connection:
    """Analyst ``alice``'s connection."""
    return connect(analyst_key, client)


@pytest.fixture
def bob_key(owner: dpmine.Connection) -> str:
    """The API key of a second analyst, ``bob``."""
    return owner.admin.add_principal("bob", "analyst").api_key


@pytest.fixture
def register(owner: dpmine.Connection) -> Register:
    """Upload a CSV as a dataset through the upload endpoint and set grants (with ``zcdp``, a
    zCDP dataset: the cap and grants are then in rho)."""

    def upload(
        dataset_id: str,
        csv_path: Path,
        metadata: DatasetMetadata,
        *,
        cap: float = TOY_CAP,
        grants: dict[str, float] | None = None,
        zcdp: bool = False,
    ) -> str:
        request = CreateDatasetRequest(
            id=dataset_id,
            name=dataset_id.title(),
            epsilon_cap=None if zcdp else cap,
            accounting="zcdp" if zcdp else "pure",
            cap_rho=cap if zcdp else None,
            metadata=metadata,
            source=CsvSource(path=csv_path.name),
        )
        owner.admin.upload_dataset(request, {"path": csv_path})
        for analyst_name, amount in (grants or {}).items():
            if zcdp:
                owner.admin.grant(dataset_id, analyst_name, rho=amount)
            else:
                owner.admin.grant(dataset_id, analyst_name, amount)
        return dataset_id

    return upload


# -- datasets -------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def mushroom_metadata(tmp_path_factory: pytest.TempPathFactory) -> DatasetMetadata:
    """Owner-proposed metadata of the mushroom data (12 columns left, 11 right), reviewed."""
    views = {name: "left" if name in MUSHROOM_LEFT else "right" for name in _mushroom_columns()}
    proposal = propose_metadata(
        CsvSource(path=str(MUSHROOM_CSV)),
        kind="views",
        base_dir=tmp_path_factory.mktemp("propose"),
        views=views,
    )
    assert proposal.review is not None
    return proposal.model_copy(
        update={"review": proposal.review.model_copy(update={"reviewed": True})}
    )


def _mushroom_columns() -> list[str]:
    """Column names of the mushroom file."""
    with gzip.open(MUSHROOM_CSV, "rt", encoding="utf-8") as handle:
        return handle.readline().strip().split(",")


@pytest.fixture
def mushroom(register: Register, analyst_key: str, mushroom_metadata: DatasetMetadata) -> str:
    """The mushroom data uploaded as ``mushroom`` (cap 10, alice holds 5)."""
    del analyst_key  # alice must exist before the grant
    return register(
        "mushroom", MUSHROOM_CSV, mushroom_metadata, cap=TOY_CAP, grants={"alice": GRANT}
    )


def _toy_rows(seed: int) -> list[dict[str, str]]:
    """Deterministic rows; ages above 90 are clipped to the public range [18, 90]."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(TOY_ROWS):
        age = "NA" if rng.random() < 0.1 else str(int(rng.integers(18, 100)))
        smoker = "" if rng.random() < 0.2 else ("yes" if rng.random() < 0.3 else "no")
        color = "?" if rng.random() < 0.08 else str(rng.choice(["red", "green", "blue"]))
        member = "true" if rng.random() < 0.45 else "false"
        rows.append({"age": age, "smoker": smoker, "color": color, "member": member})
    return rows


@pytest.fixture(scope="session")
def toy_rows() -> list[dict[str, str]]:
    """The generated rows as written to the CSV."""
    return _toy_rows(TEST_SEED)


@pytest.fixture(scope="session")
def toy_csv(tmp_path_factory: pytest.TempPathFactory, toy_rows: list[dict[str, str]]) -> Path:
    """The generated rows as a CSV file."""
    path = tmp_path_factory.mktemp("toy") / "toy.csv"
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=["age", "smoker", "color", "member"])
        writer.writeheader()
        writer.writerows(toy_rows)
    return path


@pytest.fixture(scope="session")
def toy_metadata() -> DatasetMetadata:
    """Declared metadata of the toy data: age, smoker left; color, member right."""
    return DatasetMetadata(
        kind="views",
        n_max=1000,
        attributes=[
            NumericAttribute(name="age", view="left", lo=18, hi=90),
            BooleanAttribute(name="smoker", view="left"),
            CategoricalAttribute(name="color", view="right", categories=["red", "green", "blue"]),
            BooleanAttribute(name="member", view="right"),
        ],
    )


@pytest.fixture
def labelled(
    register: Register, analyst_key: str, toy_csv: Path, toy_metadata: DatasetMetadata
) -> str:
    """The toy data with the owner's label declaration (``member``, Boolean, positive "true"),
    so that the rule-list operations and every sampler apply to it; alice holds GRANT."""
    del analyst_key  # alice must exist before the grant
    metadata = toy_metadata.model_copy(
        update={"label": LabelSpec(attribute="member", positive="true")}
    )
    metadata = DatasetMetadata.model_validate(metadata.model_dump())
    return register("labelled", toy_csv, metadata, grants={"alice": GRANT})


@pytest.fixture(scope="session")
def toy_truth(toy_rows: list[dict[str, str]]) -> dict[str, int]:
    """Exact counts of text queries on the toy data (missing values per ALGORITHMS.md §1.1)."""

    def age(row: dict[str, str]) -> float | None:
        return None if row["age"] == "NA" else min(max(float(row["age"]), 18.0), 90.0)

    def count(predicate: Callable[[dict[str, str]], bool]) -> int:
        return sum(1 for row in toy_rows if predicate(row))

    smoker = count(lambda r: r["smoker"] == "yes")
    member = count(lambda r: r["member"] == "true")
    both = count(lambda r: r["smoker"] == "yes" and r["member"] == "true")
    return {
        "all": len(toy_rows),
        "[smoker]": smoker,
        "![smoker]": count(lambda r: r["smoker"] == "no"),
        "!([smoker])": len(toy_rows) - smoker,
        "[color = red]": count(lambda r: r["color"] == "red"),
        "[age <= 40]": count(lambda r: (a := age(r)) is not None and a <= 40),
        "[90 <= age]": count(lambda r: (a := age(r)) is not None and a >= 90),
        "[smoker] & [color = red]": count(lambda r: r["smoker"] == "yes" and r["color"] == "red"),
        "[member]": member,
        "e11": both,
        "e10": smoker - both,
        "e01": member - both,
        "e00": len(toy_rows) - smoker - member + both,
    }


@pytest.fixture
def toy(register: Register, analyst_key: str, toy_csv: Path, toy_metadata: DatasetMetadata) -> str:
    """The toy data uploaded as ``toy`` (cap 10, alice holds 5)."""
    del analyst_key  # alice must exist before the grant
    return register("toy", toy_csv, toy_metadata, cap=TOY_CAP, grants={"alice": GRANT})
