"""Datasets are loaded before the first request (issue #20, item 6): registration leaves a
committed dataset resident (a rolled-back one leaves nothing), a starting server preloads the
active datasets, and a request on a dataset that is not resident adds the public load budget
to its deadline (api/common.py ``cold_load_budget``).

A server keeps a single dataset cached (``max_cached_datasets=1``), so that each
registration evicts the one before it. Each test registers its datasets on a server and folder
of its own: the tests may run in any order, on any worker.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dpmine.wire import BooleanAttribute, CreateDatasetRequest, CsvSource, DatasetMetadata
from dpmine_server.api.common import cold_load_budget
from dpmine_server.services.container import Services, build_services
from dpmine_server.services.datasets import StoredFile
from dpmine_server.services.timing import TimingPolicy, load_work
from support.inprocess import settings_for

METADATA = DatasetMetadata(
    kind="table", n_max=5_000, attributes=[BooleanAttribute(name=f"b{i}") for i in range(4)]
)
PADDED = TimingPolicy(enabled=True, grid=0.05, base=0.1, scale=2.0)


def _services(folder: Path) -> Services:
    settings = settings_for(
        folder,
        database_file="dpmine.sqlite3",
        owner_key="owner-key-0123456789-abcdefgh",
        secret_key="residency-secret-0123456789-abcdefgh",
        test_seed=1,
        job_workers=1,
    )
    return build_services(settings.model_copy(update={"max_cached_datasets": 1}))


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
def services(folder: Path) -> Iterator[Services]:
    built = _services(folder)
    try:
        yield built
    finally:
        built.close()


def _register(services: Services, folder: Path, dataset_id: str, *, commit: bool = True) -> None:
    path = folder / f"{dataset_id}.csv"
    path.write_text("b0,b1,b2,b3\n" + "yes,no,yes,no\n" * 40, encoding="utf-8")
    request = CreateDatasetRequest(
        id=dataset_id,
        name=dataset_id,
        epsilon_cap=10.0,
        metadata=METADATA,
        source=CsvSource(path=path.name),
    )
    with services.write_sessions() as session:
        services.datasets.register(session, request, files={"path": StoredFile(path, path.name)})
        assert not services.datasets.is_resident(dataset_id, 1), "resident only once committed"
        if commit:
            session.commit()
        else:
            session.rollback()


def test_a_committed_registration_leaves_the_dataset_resident(
    services: Services, folder: Path
) -> None:
    _register(services, folder, "first")
    assert services.datasets.is_resident("first", 1)
    assert cold_load_budget(services, PADDED, dataset_id="first") == 0.0


def test_a_rolled_back_registration_leaves_nothing_cached(services: Services, folder: Path) -> None:
    _register(services, folder, "first")
    _register(services, folder, "dropped", commit=False)
    assert not services.datasets.is_resident("dropped", 1)
    assert services.datasets.is_resident("first", 1), "nothing was evicted for it"


def test_a_request_on_a_dataset_not_resident_adds_the_public_load_budget(
    services: Services, folder: Path
) -> None:
    _register(services, folder, "first")
    _register(services, folder, "second")  # evicts "first" (one dataset cached)
    assert not services.datasets.is_resident("first", 1)
    budget = cold_load_budget(services, PADDED, dataset_id="first")
    assert budget == pytest.approx(PADDED.scale * load_work(METADATA))
    assert budget == PADDED.load_budget(METADATA) > 0
    assert cold_load_budget(services, PADDED, dataset_id="second") == 0.0
    off = TimingPolicy(enabled=False, grid=0.0, base=0.0, scale=0.0)
    assert cold_load_budget(services, off, dataset_id="first") == 0.0
    assert cold_load_budget(services, PADDED, dataset_id="no-such-dataset") == 0.0


def test_a_starting_server_preloads_the_most_recent_active_datasets(
    services: Services, folder: Path
) -> None:
    _register(services, folder, "first")
    _register(services, folder, "second")
    restarted = _services(folder)  # same database and data folder, one dataset cached
    try:
        assert restarted.datasets.is_resident("second", 1)
        assert not restarted.datasets.is_resident("first", 1), "beyond the cache's size"
    finally:
        restarted.close()
