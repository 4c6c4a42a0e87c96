"""Process-wide caches of computations on public values only (quality parameters, public
lattices, prior tables, itemset plans, OpenDP noise builders).

What they hold is a function of public values, and so is whether a request finds its value
there (the requests a process served before). A time budget is priced without knowing which
values earlier requests left, so it must cover a call that finds these caches empty, as it
covers a call on a freshly loaded table: the timing calibration (services/calibration.py)
clears them before every timed call (:func:`clear_public_caches`). Every such cache is
declared with :func:`public_cache`, so none is left out of that.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["clear_public_caches", "public_cache"]

T = TypeVar("T")

_CACHES: list[functools._lru_cache_wrapper[Any]] = []


def public_cache(
    maxsize: int, *, typed: bool = False
) -> Callable[[Callable[..., T]], functools._lru_cache_wrapper[T]]:
    """``functools.lru_cache(maxsize, typed)`` for a function of public values, registered
    for :func:`clear_public_caches`."""

    def decorate(function: Callable[..., T]) -> functools._lru_cache_wrapper[T]:
        cached = functools.lru_cache(maxsize=maxsize, typed=typed)(function)
        _CACHES.append(cached)
        return cached

    return decorate


def clear_public_caches() -> int:
    """Empty every cache declared with :func:`public_cache`; returns how many there are."""
    for cache in _CACHES:
        cache.cache_clear()
    return len(_CACHES)
