"""Registration writes a version's packed columns and keeps the mapped store resident; it
refuses, before parsing anything, a table whose load would not fit this machine, and a failed
registration leaves no folder and no dataset (issue #23 item 4)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from dpmine.wire import (
    BooleanAttribute,
    CreateDatasetRequest,
    CsvSource,
    DatasetMetadata,
    NumericAttribute,
)
from dpmine.wire.datasets import MAX_N_MAX
from dpmine.wire.queries import BoolLiteral
from dpmine_server.data.packed import PACKED_DIR, packed_bytes_bound
from dpmine_server.db.models import Dataset
from dpmine_server.errors import InvalidRequest
from dpmine_server.services.container import Services, build_services
from dpmine_server.services.datasets import StoredFile
from support.inprocess import settings_for

ATTRIBUTES = [BooleanAttribute(name=f"b{i}") for i in range(4)]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("packed-registration")


@pytest.fixture(scope="module")
def services(folder: Path) -> Iterator[Services]:
    built = build_services(
        settings_for(
            folder,
            database_file="dpmine.sqlite3",
            owner_key="owner-key-0123456789-abcdefgh",
            secret_key="packed-secret-0123456789-abcdefgh",
            test_seed=1,
            job_workers=1,
        )
    )
    try:
        yield built
    finally:
        built.close()


def _register(services: Services, folder: Path, dataset_id: str, metadata: DatasetMetadata) -> None:
    path = folder / f"{dataset_id}.csv"
    path.write_text("b0,b1,b2,b3\n" + "yes,no,yes,no\nno,no,yes,?\n" * 20, encoding="utf-8")
    request = CreateDatasetRequest(
        id=dataset_id,
        name=dataset_id,
        epsilon_cap=10.0,
        metadata=metadata,
        source=CsvSource(path=path.name),
    )
    with services.write_sessions() as session:
        services.datasets.register(session, request, files={"path": StoredFile(path, path.name)})
        session.commit()


def test_registration_keeps_the_mapped_columns_resident(services: Services, folder: Path) -> None:
    _register(
        services, folder, "small", DatasetMetadata(kind="table", n_max=1_000, attributes=ATTRIBUTES)
    )
    version_dir = services.settings.data_dir / "datasets" / "small" / "v1"
    assert (version_dir / PACKED_DIR / "manifest.json").is_file()
    store = services.datasets.columns("small", 1)  # resident: no load
    words = store.column("b0").bitsets()[0].words
    assert isinstance(words.base, np.memmap)
    assert store.literal_bitset(BoolLiteral(attribute="b0")).count() == 20


def test_a_table_that_would_not_fit_is_refused_before_it_is_parsed(
    services: Services, folder: Path
) -> None:
    n_max = MAX_N_MAX  # 50 numeric columns of 10^9 rows: 800 GB of values and orders
    numbers = [NumericAttribute(name=f"x{i}", lo=0.0, hi=1.0) for i in range(50)]
    metadata = DatasetMetadata(kind="table", n_max=n_max, attributes=numbers)
    assert packed_bytes_bound(metadata) == 50 * (16 * n_max + -(-n_max // 64) * 8)
    with pytest.raises(InvalidRequest, match="does not fit this server: loading it needs up to"):
        _register(services, folder, "huge", metadata)  # the CSV's cells are not even numbers
    assert not (services.settings.data_dir / "datasets" / "huge" / "v1").exists()
    with services.sessions() as session:
        assert session.get(Dataset, "huge") is None


def test_a_version_without_packed_columns_is_parsed_once_and_packed(
    services: Services, folder: Path
) -> None:
    """A version registered before the format: its first load parses the stored source, writes
    the packed columns and keeps the mapped store; the next process maps them."""
    _register(
        services, folder, "older", DatasetMetadata(kind="table", n_max=1_000, attributes=ATTRIBUTES)
    )
    packed = services.settings.data_dir / "datasets" / "older" / "v1" / PACKED_DIR
    shutil.rmtree(packed)
    services.datasets.unload("older")
    store = services.datasets.columns("older", 1)
    assert (packed / "manifest.json").is_file()
    assert isinstance(store.column("b1").bitsets()[1].words.base, np.memmap)
    assert store.literal_bitset(BoolLiteral(attribute="b3", negated=True)).count() == 20
