"""The per-dataset cache of derived values (:mod:`dpmine_server.data.derived`)."""

from __future__ import annotations

import pytest

from dpmine_server.data.derived import DerivedCache


class Grows:
    """A value whose memory grows after it is cached (like the miner's input)."""

    def __init__(self, nbytes: int) -> None:
        self.size = nbytes

    def nbytes(self) -> int:
        return self.size


def test_builds_once_and_returns_the_cached_value() -> None:
    cache = DerivedCache()
    calls: list[str] = []

    def build() -> Grows:
        calls.append("built")
        return Grows(10)

    first = cache.get_or_build(("kind", 1), build, nbytes=Grows.nbytes)
    assert cache.get_or_build(("kind", 1), build, nbytes=Grows.nbytes) is first
    assert calls == ["built"]
    assert cache.get_or_build(("other", 1), build, nbytes=Grows.nbytes) is not first
    assert (len(cache), cache.nbytes()) == (2, 20)


def test_drops_least_recently_used_entries_beyond_the_bounds() -> None:
    cache = DerivedCache(max_entries=2, max_bytes=100)
    values = [cache.get_or_build((k,), lambda: Grows(10), nbytes=Grows.nbytes) for k in range(2)]
    cache.get_or_build((0,), lambda: Grows(10), nbytes=Grows.nbytes)  # 0 is now the newest
    cache.get_or_build((2,), lambda: Grows(10), nbytes=Grows.nbytes)  # drops 1
    assert cache.get_or_build((0,), lambda: Grows(10), nbytes=Grows.nbytes) is values[0]
    assert cache.get_or_build((1,), lambda: Grows(10), nbytes=Grows.nbytes) is not values[1]
    big = cache.get_or_build(("big",), lambda: Grows(500), nbytes=Grows.nbytes)
    assert len(cache) == 1, "over max_bytes only the newest entry stays"
    assert cache.get_or_build(("big",), lambda: Grows(1), nbytes=Grows.nbytes) is big


def test_estimates_are_refreshed_for_values_that_grow() -> None:
    cache = DerivedCache(max_bytes=100)
    grows = cache.get_or_build(("grows",), lambda: Grows(0), nbytes=Grows.nbytes)
    cache.get_or_build(("other",), lambda: Grows(10), nbytes=Grows.nbytes)
    grows.size = 50
    assert cache.nbytes() == 60
    grows.size = 95
    cache.get_or_build(("grows",), lambda: Grows(0), nbytes=Grows.nbytes)  # a hit re-measures
    assert len(cache) == 1, "the growth pushed the older entry out"
    cache.clear()
    assert (len(cache), cache.nbytes()) == (0, 0)


def test_bounds_are_checked() -> None:
    with pytest.raises(ValueError, match="max_entries"):
        DerivedCache(max_entries=0)
