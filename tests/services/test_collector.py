"""The garbage collection policy of API processes (services/collector.py)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from dpmine_server.services.collector import FULL_COLLECTION_OFF, defer_full_collections


@pytest.fixture
def thresholds() -> Iterator[tuple[int, int, int]]:
    before = gc.get_threshold()
    try:
        yield before
    finally:
        gc.set_threshold(*before)


def test_deferring_keeps_the_young_collections_and_stops_the_full_ones(
    thresholds: tuple[int, int, int],
) -> None:
    defer_full_collections()
    young, middle, full = gc.get_threshold()
    assert (young, middle) == thresholds[:2]
    assert full == FULL_COLLECTION_OFF
    # The young generations are still collected automatically: a young cycle goes away.
    collected_before = gc.get_stats()[0]["collections"]
    for _ in range(young * 3):
        cycle: list[object] = []
        cycle.append(cycle)
    assert gc.get_stats()[0]["collections"] > collected_before
