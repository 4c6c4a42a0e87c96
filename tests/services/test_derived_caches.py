"""Derived per-dataset caches live on the loaded dataset (issue #8).

Values derived from a loaded dataset (Serenade's literal banks, extension candidates, numeric
grids and continuous cells, the top-K transaction index) are private data. They are cached on
the store that they come from, so they die with it when the dataset is retired or evicted, and
the cache's memory accounting counts them.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from dpmine.wire import (
    BooleanAttribute,
    CategoricalAttribute,
    CreateDatasetRequest,
    CsvSource,
    DatasetMetadata,
    NumericAttribute,
    Redescription,
)
from dpmine_server.data.cache import DatasetCache
from dpmine_server.data.columns import ColumnStore
from dpmine_server.data.itemsets import item_catalog, transaction_index
from dpmine_server.data.loaders import load_store
from dpmine_server.dp.rng import seeded_generator
from dpmine_server.operations.itemsets import top_k_itemsets
from dpmine_server.operations.serenade import (
    ExtensionRules,
    QualityParams,
    ThresholdMode,
    extend_one,
    initial_pairs,
)
from dpmine_server.services.container import Services, build_services
from dpmine_server.services.datasets import StoredFile
from support.inprocess import settings_for

ROWS = 300
PARAMS = QualityParams(s=0.8, x0=5.0, delta=0.2)
RULES = ExtensionRules()
#: c = ε/(2Δ) far above 8: continuous families are enumerated, which builds their cells.
LARGE_EPSILON = 50.0

METADATA = DatasetMetadata(
    kind="views",
    n_max=1_000,
    attributes=[
        NumericAttribute(name="x", view="left", lo=0.0, hi=10.0),
        BooleanAttribute(name="b", view="left"),
        CategoricalAttribute(name="c", view="left", categories=["p", "q", "r"]),
        NumericAttribute(name="y", view="right", lo=-5.0, hi=5.0, grid=[-1.0, 0.0, 1.0]),
        BooleanAttribute(name="e", view="right"),
        CategoricalAttribute(name="d", view="right", categories=["u", "v"]),
    ],
)


def _csv(path: Path) -> Path:
    lines = ["x,b,c,y,e,d"]
    for row in range(ROWS):
        x = "?" if row % 23 == 0 else f"{(row * 37) % 100 / 10:.1f}"
        y = f"{(row * 13) % 100 / 10 - 5:.1f}"
        lines.append(
            f"{x},{row % 2},{'pqr'[row % 3]},{y},{int(row % 5 < 2)},{'uv'[(row // 7) % 2]}"
        )
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def services(tmp_path: Path) -> Iterator[Services]:
    """Test-mode services with one registered views dataset, ``mixed``."""
    settings = settings_for(
        tmp_path,
        database_file="dpmine.sqlite3",
        owner_key="owner-key-0123456789-abcdefgh",
        secret_key="derived-caches-secret-0123456789-abcdef",
        test_seed=3,
        job_workers=1,
    )
    built = build_services(settings)
    try:
        path = _csv(tmp_path / "mixed.csv")
        request = CreateDatasetRequest(
            id="mixed",
            name="mixed",
            epsilon_cap=100.0,
            metadata=METADATA,
            source=CsvSource(path=path.name),
        )
        with built.write_sessions() as session, session.begin():
            built.datasets.register(session, request, files={"path": StoredFile(path, path.name)})
        yield built
    finally:
        built.close()


def _populate(store: ColumnStore) -> None:
    """Run the kernels that fill every derived cache: initial pairs (grid and enumerated
    continuous), a Serenade extension in continuous and in grid mode, and a top-K call."""
    rng = seeded_generator(11)
    modes: tuple[ThresholdMode, ...] = ("grid", "continuous")
    for mode in modes:
        pairs = initial_pairs(
            store,
            count=1,
            epsilon=LARGE_EPSILON,
            params=PARAMS,
            rules=RULES,
            mode=mode,
            rng=rng,
        )
        assert len(pairs) == 1
    numeric_pair = Redescription.model_validate(
        {
            "left": {"kind": "num", "attribute": "x", "lower": 2.0, "upper": 6.0},
            "right": {"kind": "num", "attribute": "y", "lower": None, "upper": 0.0},
        }
    )
    for mode in reversed(modes):
        for epsilon in (1.0, LARGE_EPSILON):
            extend_one(
                store,
                [numeric_pair, *pairs],
                epsilon=epsilon,
                params=PARAMS,
                rules=RULES,
                mode=mode,
                rng=rng,
            )
    for _ in range(2):
        top_k_itemsets(
            transaction_index(store),
            method="em",
            k=3,
            lengths=[1, 2],
            epsilon_selection=1.0,
            epsilon_counts=1.0,
            rho=0.1,
            rng=rng,
        )


def _watch(services: Services) -> list[weakref.ref[object]]:
    """Load ``mixed`` through the service, fill its derived caches, and return weak references
    to the store, its columns and a derived value (no strong reference survives the call)."""
    store = services.datasets.columns("mixed", 1)
    _populate(store)
    watched: list[object] = [store, transaction_index(store)]
    watched += [store.column(attribute.name) for attribute in METADATA.attributes]
    return [weakref.ref(value) for value in watched]


def test_retiring_a_dataset_frees_its_store_and_derived_values(services: Services) -> None:
    refs = _watch(services)
    gc.collect()
    assert all(ref() is not None for ref in refs), "the service's cache keeps the store"
    with services.write_sessions() as session, session.begin():
        services.datasets.retire(session, "mixed")
    gc.collect()
    alive = [type(value).__name__ for ref in refs if (value := ref()) is not None]
    assert alive == [], f"still referenced after retirement: {alive}"


def _loader(folder: Path) -> DatasetCache:
    path = _csv(folder / "mixed.csv")

    def load(_dataset_id: str, _version: int) -> ColumnStore:
        store, _report = load_store(METADATA, CsvSource(path=path.name), base_dir=folder)
        return store

    return DatasetCache(load)


def test_evicting_a_dataset_frees_its_store_and_derived_values(tmp_path: Path) -> None:
    cache = _loader(tmp_path)
    store = cache.get("mixed", 1)
    _populate(store)
    store_ref, index_ref = weakref.ref(store), weakref.ref(transaction_index(store))
    del store
    cache.evict("mixed")
    gc.collect()
    assert (store_ref(), index_ref()) == (None, None)


def test_memory_accounting_counts_derived_values(tmp_path: Path) -> None:
    cache = _loader(tmp_path)
    store = cache.get("mixed", 1)
    # Every literal bitset the kernels use is cached first, so what grows below is derived.
    for literal in item_catalog(METADATA).literals:
        store.literal_bitset(literal)
    loaded = cache.memory_bytes()
    assert loaded == store.memory_bytes()

    top_k_itemsets(
        transaction_index(store),
        method="laplace",
        k=2,
        lengths=[1],
        epsilon_selection=1.0,
        epsilon_counts=None,
        rho=0.1,
        rng=seeded_generator(5),
    )
    with_index = cache.memory_bytes()
    # The miner's input: a row pointer (int64) per row and an item (int32) per occurrence.
    assert with_index - loaded == transaction_index(store).rows().nbytes() >= 8 * (ROWS + 1)

    _populate(store)
    populated = cache.memory_bytes()
    assert populated > with_index
    assert populated == store.memory_bytes()

    cache.evict("mixed")
    assert cache.memory_bytes() == 0


def test_derived_values_are_cached_per_store(tmp_path: Path) -> None:
    cache = _loader(tmp_path)
    store = cache.get("mixed", 1)
    first = transaction_index(store)
    assert transaction_index(store) is first
    cache.clear()
    other = cache.get("mixed", 1)
    assert other is not store
    assert transaction_index(other) is not first
    assert np.array_equal(
        np.asarray(transaction_index(other).count((0, 3))), np.asarray(first.count((0, 3)))
    )
