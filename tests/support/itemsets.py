"""Every mined itemset of an index, for comparisons with brute force (tests only)."""

from __future__ import annotations

from collections.abc import Sequence

from dpmine_server.data.itemsets import Itemset, TransactionIndex

__all__ = ["mine_all"]


def mine_all(index: TransactionIndex, min_count: int, lengths: Sequence[int]) -> dict[Itemset, int]:
    """Every itemset with a length in ``lengths`` (a range) and count ≥ ``min_count``: the
    index's spectrum, then every place of it selected."""
    span = (min(lengths), max(lengths))
    spectrum, _work = index.spectrum(min_count, span)
    places = {count: list(range(int(number))) for count, number in enumerate(spectrum) if number}
    if not places:
        return {}
    found = index.select(min_count, span, places)
    return {
        tuple(int(item) for item in row if item >= 0): int(count)
        for row, count in zip(found.itemsets, found.counts, strict=True)
    }
