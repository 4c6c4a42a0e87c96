"""Values derived from one loaded dataset, cached on the object they are derived from.

Everything derived from the rows (literal banks, candidate sets, grids, the miner's input) is
private data. A :class:`DerivedCache` belongs to one :class:`~dpmine_server.data.columns.
ColumnStore` (or one of its columns): its values die with the store when the dataset is evicted
or retired, and :meth:`ColumnStore.memory_bytes` counts them. Never cache private data in a
module-level cache (``functools.lru_cache`` and friends), which would outlive the dataset.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

__all__ = ["DerivedCache"]

V = TypeVar("V")

#: Default bounds of a store's cache: entries, and bytes by the values' own estimates.
DEFAULT_MAX_ENTRIES = 1024
DEFAULT_MAX_BYTES = 512 * 2**20


@dataclass(slots=True)
class _Entry:
    value: Any
    size: Callable[[Any], int]
    nbytes: int


class DerivedCache:
    """A thread-safe, bounded LRU map from keys (public values) to derived values.

    Every value comes with a byte-size estimate, ``nbytes(value)``; it is read when the value is
    stored, again on each hit (values such as the miner's input grow after they are stored, so
    the estimate must be cheap) and by :meth:`nbytes`. The least recently used entries are
    dropped while there are more than ``max_entries`` of them or their estimates add up to more
    than ``max_bytes``; the newest entry is always kept. Values are built outside the lock, so
    two threads may build the same value; the first one stored wins and both get it.
    """

    def __init__(
        self, *, max_entries: int = DEFAULT_MAX_ENTRIES, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> None:
        if max_entries < 1 or max_bytes < 0:
            raise ValueError("a derived cache needs max_entries ≥ 1 and max_bytes ≥ 0")
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._entries: OrderedDict[tuple[Hashable, ...], _Entry] = OrderedDict()
        self._total = 0
        self._lock = threading.Lock()

    def get_or_build(
        self, key: tuple[Hashable, ...], build: Callable[[], V], *, nbytes: Callable[[V], int]
    ) -> V:
        """The value cached under ``key``, built by ``build()`` on a miss.

        ``key`` must identify the value within this cache, e.g. ``("serenade.bank", names,
        negations)``: its first element names the kind of value, so kinds never collide.
        """
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                if self._measure(entry):
                    self._shrink()
                return cast("V", entry.value)
        value = build()
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:  # another thread stored it first
                self._entries.move_to_end(key)
                return cast("V", entry.value)
            size = cast("Callable[[Any], int]", nbytes)
            entry = _Entry(value, size, max(0, int(size(value))))
            self._entries[key] = entry
            self._total += entry.nbytes
            self._shrink()
        return value

    def _measure(self, entry: _Entry) -> bool:
        """Refresh the entry's estimate; whether it grew."""
        nbytes = max(0, int(entry.size(entry.value)))
        grew = nbytes > entry.nbytes
        self._total += nbytes - entry.nbytes
        entry.nbytes = nbytes
        return grew

    def _shrink(self) -> None:
        while len(self._entries) > 1 and (
            len(self._entries) > self._max_entries or self._total > self._max_bytes
        ):
            _key, dropped = self._entries.popitem(last=False)
            self._total -= dropped.nbytes

    def nbytes(self) -> int:
        """Estimated memory of the cached values (estimates refreshed)."""
        with self._lock:
            for entry in self._entries.values():
                self._measure(entry)
            self._shrink()
            return self._total

    def clear(self) -> None:
        """Drop every value."""
        with self._lock:
            self._entries.clear()
            self._total = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
