"""In-memory cache of loaded datasets, keyed by (dataset id, version) (DESIGN.md "Services").

Concurrent first requests for the same key load once: each key has its own lock, so loading one
dataset never blocks requests for another. Loading a newer version of a dataset drops the older
ones, and :meth:`DatasetCache.evict` drops a dataset (a load in flight is then not kept).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

from dpmine_server.data.columns import ColumnStore

__all__ = ["DatasetCache", "StoreLoader"]

#: Loads the store of (dataset_id, version); called at most once per key while it stays cached.
StoreLoader = Callable[[str, int], ColumnStore]


class DatasetCache:
    """Thread-safe LRU cache of :class:`ColumnStore` objects with a loader callback."""

    def __init__(self, loader: StoreLoader, *, max_entries: int = 16) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self._loader = loader
        self._max_entries = max_entries
        self._stores: OrderedDict[tuple[str, int], ColumnStore] = OrderedDict()
        self._key_locks: dict[tuple[str, int], threading.Lock] = {}
        self._generations: dict[str, int] = {}
        self._epoch = 0
        self._lock = threading.Lock()

    def get(self, dataset_id: str, version: int) -> ColumnStore:
        """The store of this dataset version, loading it on first use (once across threads)."""
        key = (dataset_id, version)
        with self._lock:
            store = self._hit(key)
            if store is not None:
                return store
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:
            with self._lock:
                store = self._hit(key)
                if store is not None:
                    return store
                generation = self._generation(dataset_id)
            try:
                store = self._loader(dataset_id, version)
            except BaseException:
                with self._lock:
                    self._key_locks.pop(key, None)
                raise
            with self._lock:
                self._key_locks.pop(key, None)
                if self._generation(dataset_id) == generation:
                    self._insert(key, store)
            return store

    def _generation(self, dataset_id: str) -> tuple[int, int]:
        return self._epoch, self._generations.get(dataset_id, 0)

    def _hit(self, key: tuple[str, int]) -> ColumnStore | None:
        store = self._stores.get(key)
        if store is not None:
            self._stores.move_to_end(key)
        return store

    def _insert(self, key: tuple[str, int], store: ColumnStore) -> None:
        dataset_id, version = key
        stale = [k for k in self._stores if k[0] == dataset_id and k[1] < version]
        if any(k[0] == dataset_id and k[1] > version for k in self._stores):
            return  # a newer version is already cached; serve this one without keeping it
        for old in stale:
            del self._stores[old]
        self._stores[key] = store
        while len(self._stores) > self._max_entries:
            self._stores.popitem(last=False)

    def peek(self, dataset_id: str, version: int) -> ColumnStore | None:
        """The cached store, without loading or touching the LRU order."""
        with self._lock:
            return self._stores.get((dataset_id, version))

    @property
    def max_entries(self) -> int:
        """How many stores the cache keeps."""
        return self._max_entries

    def holds(self, dataset_id: str, version: int) -> bool:
        """Whether this version is cached (a request for it loads nothing)."""
        with self._lock:
            return (dataset_id, version) in self._stores

    def put(self, dataset_id: str, version: int, store: ColumnStore) -> None:
        """Cache a store loaded elsewhere (at registration), as if ``get`` had loaded it."""
        with self._lock:
            self._insert((dataset_id, version), store)

    def evict(self, dataset_id: str) -> None:
        """Drop every cached version of a dataset; a load in flight will not be kept."""
        with self._lock:
            self._generations[dataset_id] = self._generations.get(dataset_id, 0) + 1
            for key in [k for k in self._stores if k[0] == dataset_id]:
                del self._stores[key]

    def clear(self) -> None:
        """Drop everything; loads in flight will not be kept."""
        with self._lock:
            self._epoch += 1
            self._stores.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._stores)

    def memory_bytes(self) -> int:
        """Approximate memory held by the cached stores."""
        with self._lock:
            stores = list(self._stores.values())
        return sum(store.memory_bytes() for store in stores)
