"""Frequent-itemset mining with a public bound on its work (ALGORITHMS.md §4.1, DESIGN.md
contract item 7: time is an output). PRIVATE: everything it returns is exact.

The miner is Eclat by *occurrence deliver* (Uno et al.'s LCM; Borgelt's Eclat variant "o"),
compiled with numba, depth first over the rows in CSR form (each row's items ascending):

* the root counts every item over every row, then (when longer itemsets are asked) delivers
  each row position ``(r, q)`` to the occurrence list of the frequent item ``items[q]``;
* a node P of length L < ℓmax with occurrence list {(r, p)} (rows holding P, and the position
  of P's last item in the row) scans, for each (r, p), the items of r after position p,
  counting them: the children P + {j} with count ≥ ``min_count`` are reported (when their
  length is asked); if they will be expanded in turn, a second scan delivers their occurrence
  lists.

**Work bound (proof).** Every scan step of a node P of length L visits one pair (r, Q) with
Q = P + {j} ⊆ r, |Q| = L + 1 and P the L-prefix of Q (items ascending); distinct nodes have
distinct prefixes, so over all nodes of length L the counting scans visit each pair (row,
(L+1)-subset of the row) at most once, and the delivering scans (lengths L + 1 < ℓmax only) as
well. With the root's scans (one count, one delivery when ℓmax ≥ 2) the number of scan steps is

    steps ≤ Σ_rows [Σ_{l=1..ℓmax} C(|r|, l) + Σ_{l=1..ℓmax−1} C(|r|, l)]
          ≤ n_max · (Σ_{l=1..ℓmax} C(w, l) + Σ_{l=1..ℓmax−1} C(w, l))

for rows of at most w items: a public bound, whatever ``min_count`` and the data. A node costs
O(1) besides its scans, and every expanded node other than the root is a distinct itemset of
length < ℓmax with count ≥ ``min_count`` = B; every report a distinct itemset of an asked length
with count ≥ B. As Σ_I c(I) over the itemsets of one length l is the number of (row, l-subset)
pairs, ≤ n_max·C(w, l), at most n_max·C(w, l)/B itemsets of length l reach B: so

    nodes ≤ 1 + Σ_{l<ℓmax} min(e_l, n_max·C(w, l)/B),   reports ≤ Σ_{l asked} min(e_l, …)

(e_l the size of the universe of length l), besides O(#items) at the root and the allocation of
occurrence areas of nnz ≤ n_max·w entries. :func:`work_bound` computes the three bounds;
:class:`MinerWork` is what a run did, so tests can check them. The traversal order is a
deterministic function of the rows, so two runs on the same rows report the same itemsets in
the same order (what :func:`mine_selected` relies on).

Three modes share the traversal: the count spectrum of the reported itemsets
(:func:`mine_spectrum`), the itemsets at given (count, position-among-that-count) places
(:func:`mine_selected`), and a dense array of counts indexed by the itemsets' colexicographic
ranks (:func:`mine_dense`, for small universes). The dense mode's last level writes its counts
straight into the array and clears them over the items of later groups: besides its scans, at
most one visit per itemset of the last length's universe (proof in :func:`_count_last_dense`),
which the plan prices per universe itemset.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from dpmine_server.compiled import (
    StopFlag,
    compiled_counted_free,
    inlined_counted_free,
    stop_flag,
)

__all__ = [
    "ENTRY_BYTES",
    "MinedSelection",
    "MinerWork",
    "RowItems",
    "memory_bound",
    "mine_dense",
    "mine_selected",
    "mine_spectrum",
    "rows_from_columns",
    "select_dense",
    "work_bound",
]

IntArray = npt.NDArray[np.int64]
Int32Array = npt.NDArray[np.int32]

_SPECTRUM = 0
_SELECT = 1
_DENSE = 2
#: Bytes of one occurrence entry (row int32, position int64).
ENTRY_BYTES = 12


class RowItems(NamedTuple):
    """Rows as item lists in CSR form: the items of row r are ``items[indptr[r]:indptr[r+1]]``,
    ascending (catalog positions). PRIVATE."""

    indptr: IntArray
    items: Int32Array
    n_items: int

    @property
    def n_rows(self) -> int:
        """Number of rows (private)."""
        return int(self.indptr.size - 1)

    def nbytes(self) -> int:
        """Memory of the arrays."""
        return int(self.indptr.nbytes + self.items.nbytes)


class MinerWork(NamedTuple):
    """What one run did (or may do at most): scan steps, expanded nodes, reported itemsets."""

    steps: int
    nodes: int
    reports: int


class MinedSelection(NamedTuple):
    """Itemsets found at the asked places: row t holds the t-th place's items (−1 padded)."""

    itemsets: Int32Array
    counts: IntArray
    work: MinerWork


def memory_bound(n_max: int, width: int, max_length: int) -> int:
    """Bytes of the occurrence areas of one run over at most ``n_max`` rows of at most
    ``width`` items (``max_length`` areas of max(nnz, n) entries, nnz ≤ n_max·w; one area of
    n entries for single items)."""
    entries = n_max * max(width, 1) if max_length >= 2 else n_max
    return max_length * max(entries, n_max, 1) * ENTRY_BYTES


def work_bound(
    n_max: int,
    width: int,
    lengths: tuple[int, int],
    *,
    min_count: int = 1,
    universe: Sequence[int] | None = None,
) -> MinerWork:
    """The public bounds of the module docstring on one run over at most ``n_max`` rows of at
    most ``width`` items; ``universe[l]`` (optional) the number of valid l-itemsets."""
    low, high = lengths
    pairs = [math.comb(width, length) for length in range(high + 1)]

    def frequent(length: int) -> int:
        most = n_max * pairs[length] // max(min_count, 1)
        return most if universe is None else min(most, universe[length])

    steps = n_max * (sum(pairs[1 : high + 1]) + sum(pairs[1:high]))
    nodes = 1 + sum(frequent(length) for length in range(1, high))
    reports = sum(frequent(length) for length in range(low, high + 1))
    return MinerWork(steps=steps, nodes=nodes, reports=reports)


# -- building the rows ---------------------------------------------------------------------------


@compiled_counted_free
def _transpose(indptr: IntArray, indices: Int32Array, row_ptr: IntArray, items: Int32Array) -> None:
    """Item-major lists (item i's rows: ``indices[indptr[i]:indptr[i+1]]``) to row-major ones
    in ``row_ptr`` (zeros on entry) and ``items``, items ascending within a row: a counting
    sort, O(nnz + n_rows + n_items)."""
    n_rows = row_ptr.size - 1
    for position in range(indices.size):
        row_ptr[indices[position] + 1] += 1
    for row in range(n_rows):
        row_ptr[row + 1] += row_ptr[row]
    for item in range(indptr.size - 1):
        for position in range(indptr[item], indptr[item + 1]):
            row = indices[position]
            items[row_ptr[row]] = item
            row_ptr[row] += 1
    for row in range(n_rows, 0, -1):  # each entry moved to the end of its row: shift back
        row_ptr[row] = row_ptr[row - 1]
    row_ptr[0] = 0


def rows_from_columns(
    item_rows: Sequence[npt.NDArray[np.int64] | Int32Array], n_rows: int
) -> RowItems:
    """The rows of a dataset given, for each item in catalog order, its sorted rows."""
    sizes = np.fromiter((len(rows) for rows in item_rows), dtype=np.int64, count=len(item_rows))
    indptr = np.zeros(len(item_rows) + 1, dtype=np.int64)
    np.cumsum(sizes, out=indptr[1:])
    indices = (
        np.concatenate([np.asarray(rows, dtype=np.int32) for rows in item_rows])
        if item_rows
        else np.zeros(0, dtype=np.int32)
    )
    row_ptr = np.zeros(n_rows + 1, dtype=np.int64)
    items = np.empty(indices.size, dtype=np.int32)
    _transpose(indptr, indices.astype(np.int32, copy=False), row_ptr, items)
    return RowItems(indptr=row_ptr, items=items, n_items=len(item_rows))


# -- the compiled traversal ----------------------------------------------------------------------


class _Sink(NamedTuple):
    """Where reported itemsets go (by ``mode``): a spectrum, the asked places, a dense array."""

    mode: int
    spectrum: IntArray  # _SPECTRUM: itemsets per count
    want_start: IntArray  # _SELECT: places of count c are want_pos[want_start[c]:want_start[c+1]]
    want_pos: IntArray
    next_want: IntArray  # the next unanswered place of each count
    seen: IntArray  # itemsets of each count reported so far
    out_items: Int32Array
    out_counts: IntArray
    rank_of: IntArray  # _DENSE: rank contribution of item i at position p (0-based)
    dense: Int32Array
    block_offset: IntArray  # first index of the itemsets of each length
    group_end: IntArray  # _DENSE: the first item after item i's group


class _Scratch(NamedTuple):
    """The traversal's state. Occurrence area L holds the occurrence lists of the nodes of
    length L (area 0: the root, every row); list L the children of the current node of length L
    (their items, counts and the start of their occurrence lists in area L + 1)."""

    counts: IntArray
    occ_row: Int32Array
    occ_pos: IntArray
    child_item: Int32Array
    child_count: IntArray
    child_start: IntArray
    n_children: IntArray
    current: IntArray
    path: Int32Array
    path_rank: IntArray
    touched: Int32Array
    fill: IntArray
    tally: IntArray  # expanded nodes, reported itemsets
    stop: StopFlag  # non-zero: return at the next node (an expired request; compiled.py)


@inlined_counted_free
def _report(sink: _Sink, scratch: _Scratch, length: int, kept: int) -> None:
    """Report the ``kept`` children (of length ``length + 1``) of the node of length
    ``length``: the itemsets ``path[:length]`` + child, with their exact counts."""
    children, counts = scratch.child_item, scratch.child_count
    scratch.tally[1] += kept
    if sink.mode == _SPECTRUM:
        spectrum = sink.spectrum
        for child in range(kept):
            spectrum[counts[length, child]] += 1
    elif sink.mode == _SELECT:
        want_start, want_pos, next_want, seen = (
            sink.want_start,
            sink.want_pos,
            sink.next_want,
            sink.seen,
        )
        for child in range(kept):
            count = counts[length, child]
            place = next_want[count]
            if place < want_start[count + 1] and want_pos[place] == seen[count]:
                out_items = sink.out_items
                for position in range(length):
                    out_items[place, position] = scratch.path[position]
                out_items[place, length] = children[length, child]
                sink.out_counts[place] = count
                next_want[count] = place + 1
            seen[count] += 1
    else:
        dense, rank_of = sink.dense, sink.rank_of
        base = sink.block_offset[length + 1] + (scratch.path_rank[length - 1] if length else 0)
        for child in range(kept):
            dense[base + rank_of[children[length, child], length]] = counts[length, child]


@inlined_counted_free
def _count_scan(
    rows: RowItems, scratch: _Scratch, length: int, low: int, high: int
) -> tuple[int, int]:
    """Count the items after the node's last item in each row of its occurrence list
    ``area[length][low:high]``; returns (number of distinct items seen, scan steps)."""
    indptr, items = rows.indptr, rows.items
    counts, touched = scratch.counts, scratch.touched
    occ_row, occ_pos = scratch.occ_row, scratch.occ_pos
    work, seen = 0, 0
    for entry in range(low, high):
        row = occ_row[length, entry]
        first, end = occ_pos[length, entry] + 1, indptr[row + 1]
        for position in range(first, end):
            item = np.uint64(items[position])  # unsigned: no wraparound test per step
            if counts[item] == 0:
                touched[seen] = item
                seen += 1
            counts[item] += 1
        work += end - first
    return seen, work


@inlined_counted_free
def _count_last_dense(
    rows: RowItems, sink: _Sink, scratch: _Scratch, node: tuple[int, int, int]
) -> int:
    """The dense sink's last level: count the items after the node's last item in each row of
    its occurrence list and write every child's count straight into the dense array, then
    clear the counters over the items of the groups after the last item's. The same scan steps
    and reports as :func:`_count_scan` then :func:`_report`, without tracking which items were
    seen: the branch per step was a third of the dense plan's time. Returns the scan steps.

    Work besides the scans (proof): a row holds at most one item per group, in ascending order,
    so the items after the last one in a row all lie in later groups, and the loop visits only
    those. Each item j it visits for the node P makes the valid itemset P + {j} of length
    ``length + 1``, distinct over (P, j) since P is its prefix: over the whole pass the loop
    visits at most the universe size of the last length, which the plan prices per itemset."""
    length, low, high = node
    indptr, items = rows.indptr, rows.items
    counts = scratch.counts
    occ_row, occ_pos = scratch.occ_row[length], scratch.occ_pos[length]
    work = 0
    for entry in range(low, high):
        row = occ_row[entry]
        first, end = occ_pos[entry] + 1, indptr[row + 1]
        for position in range(first, end):
            counts[np.uint64(items[position])] += 1
        work += end - first
    dense, rank_of = sink.dense, sink.rank_of
    base = sink.block_offset[length + 1] + (scratch.path_rank[length - 1] if length else 0)
    after = sink.group_end[scratch.path[length - 1]] if length else 0
    reported = 0
    for item in range(after, counts.size):
        count = counts[item]
        if count > 0:
            dense[base + rank_of[item, length]] = count
            counts[item] = 0
            reported += 1
    scratch.tally[1] += reported
    return work


@inlined_counted_free
def _deliver(rows: RowItems, scratch: _Scratch, node: tuple[int, int, int], kept: int) -> int:
    """Write the occurrence lists of the node's ``kept`` children into area ``length + 1``
    (the same rows and positions as :func:`_count_scan`); returns the scan steps."""
    length, low, high = node
    indptr, items, counts = rows.indptr, rows.items, scratch.counts
    occ_row, occ_pos = scratch.occ_row[length], scratch.occ_pos[length]
    to_row, to_pos = scratch.occ_row[length + 1], scratch.occ_pos[length + 1]
    children = scratch.child_item[length]
    fill = scratch.fill
    for child in range(kept):
        fill[child] = scratch.child_start[length, child]
    for child in range(kept):
        counts[children[child]] = -1 - child
    work = 0
    for entry in range(low, high):
        row = occ_row[entry]
        first, end = occ_pos[entry] + 1, indptr[row + 1]
        for position in range(first, end):
            slot = counts[np.uint64(items[position])]
            if slot < 0:
                to_row[fill[-1 - slot]] = row
                to_pos[fill[-1 - slot]] = position
                fill[-1 - slot] += 1
        work += end - first
    for child in range(kept):
        counts[children[child]] = 0
    return work


@inlined_counted_free
def _expand(
    rows: RowItems,
    sink: _Sink,
    scratch: _Scratch,
    node: tuple[int, int, int],
    limits: tuple[int, int, int],
) -> int:
    """Expand the node of length ``node[0]`` with occurrences ``area[length][node[1]:node[2]]``:
    report its frequent children (``limits`` = (min count, min length, max length)), deliver
    their occurrences if they are expanded in turn (then ``n_children[length]`` lists them, else
    it is 0). Returns the scan steps."""
    length, low, high = node
    min_count, min_length, max_length = limits
    scratch.tally[0] += 1
    if sink.mode == _DENSE and length + 1 == max_length:
        scratch.n_children[length] = 0
        return _count_last_dense(rows, sink, scratch, node)
    seen, work = _count_scan(rows, scratch, length, low, high)
    touched, counts = scratch.touched, scratch.counts
    child_item, child_count, child_start = (
        scratch.child_item,
        scratch.child_count,
        scratch.child_start,
    )
    kept, start = 0, 0
    for index in range(seen):
        item = touched[index]
        count = counts[item]
        if count >= min_count:
            child_item[length, kept] = item
            child_count[length, kept] = count
            child_start[length, kept] = start
            start += count
            kept += 1
        counts[item] = 0
    child_start[length, kept] = start
    if length + 1 >= min_length:
        _report(sink, scratch, length, kept)
    if length + 1 >= max_length or kept == 0:
        scratch.n_children[length] = 0
        return work
    scratch.n_children[length] = kept
    return work + _deliver(rows, scratch, node, kept)


def _scratch(rows: RowItems, max_length: int) -> _Scratch:
    """The traversal's buffers (allocated here: the compiled code runs without numba's
    reference counting, so it allocates nothing)."""
    # Area 0 lists every row once; deeper areas at most every (row, item) entry.
    width = max(rows.items.size if max_length >= 2 else 0, rows.n_rows, 1)
    n_items = max(rows.n_items, 1)
    return _Scratch(
        counts=np.zeros(n_items, np.int64),
        occ_row=np.empty((max_length, width), np.int32),
        occ_pos=np.empty((max_length, width), np.int64),
        child_item=np.empty((max_length, n_items), np.int32),
        child_count=np.empty((max_length, n_items), np.int64),
        child_start=np.empty((max_length, n_items + 1), np.int64),
        n_children=np.zeros(max_length, np.int64),
        current=np.zeros(max_length, np.int64),
        path=np.zeros(max_length, np.int32),
        path_rank=np.zeros(max_length, np.int64),
        touched=np.empty(n_items, np.int32),
        fill=np.empty(n_items, np.int64),
        tally=np.zeros(2, np.int64),
        stop=stop_flag(),
    )


@compiled_counted_free
def _mine(rows: RowItems, sink: _Sink, scratch: _Scratch, limits: tuple[int, int, int]) -> int:
    """The traversal of the module docstring; returns the number of scan steps. Stops after
    the node it is at when ``scratch.stop`` is set (the request's deadline expired: whatever
    it returns then is discarded, services/release_guard.py)."""
    n_rows = rows.indptr.size - 1
    occ_row, occ_pos, indptr = scratch.occ_row, scratch.occ_pos, rows.indptr
    for row in range(n_rows):  # the root's occurrences: every row, before its first item
        occ_row[0, row] = row
        occ_pos[0, row] = indptr[row] - 1
    work = _expand(rows, sink, scratch, (0, 0, n_rows), limits)
    current, n_children, child_item, child_start = (
        scratch.current,
        scratch.n_children,
        scratch.child_item,
        scratch.child_start,
    )
    path, path_rank, rank_of, dense = scratch.path, scratch.path_rank, sink.rank_of, sink.mode
    stop = scratch.stop
    length = 1  # the node visited: child current[length − 1] of list length − 1
    while length >= 1 and stop[0] == 0:
        level = length - 1
        child = current[level]
        if child >= n_children[level]:
            length -= 1
            if length >= 1:
                current[length - 1] += 1
            continue
        item = child_item[level, child]
        path[level] = item
        if dense == _DENSE:
            path_rank[level] = rank_of[item, level] + (path_rank[level - 1] if level > 0 else 0)
        low, high = child_start[level, child], child_start[level, child + 1]
        work += _expand(rows, sink, scratch, (length, low, high), limits)
        if n_children[length] > 0:
            current[length] = 0
            length += 1
        else:
            current[level] += 1
    return work


_NO_INT = np.zeros(0, dtype=np.int64)
_NO_INT32 = np.zeros(0, dtype=np.int32)
_NO_ITEMS = np.zeros((0, 1), dtype=np.int32)
_NO_RANKS = np.zeros((0, 1), dtype=np.int64)


def _run(rows: RowItems, *, min_count: int, lengths: tuple[int, int], sink: _Sink) -> MinerWork:
    low, high = lengths
    if not 1 <= low <= high:
        raise ValueError(f"lengths must satisfy 1 <= min <= max, got {lengths}")
    scratch = _scratch(rows, high)
    steps = int(_mine(rows, sink, scratch, (max(int(min_count), 1), low, high)))
    return MinerWork(steps=steps, nodes=int(scratch.tally[0]), reports=int(scratch.tally[1]))


def _sink(
    mode: int,
    *,
    spectrum: IntArray = _NO_INT,
    want: tuple[IntArray, IntArray] = (_NO_INT, _NO_INT),
    out: tuple[Int32Array, IntArray] = (_NO_ITEMS, _NO_INT),
    dense: tuple[IntArray, Int32Array, IntArray, IntArray] = (
        _NO_RANKS,
        _NO_INT32,
        _NO_INT,
        _NO_INT,
    ),
) -> _Sink:
    want_start, want_pos = want
    return _Sink(
        mode=mode,
        spectrum=spectrum,
        want_start=want_start,
        want_pos=want_pos,
        next_want=want_start[:-1].copy() if want_start.size else _NO_INT,
        seen=np.zeros(max(want_start.size - 1, 0), dtype=np.int64),
        out_items=out[0],
        out_counts=out[1],
        rank_of=dense[0],
        dense=dense[1],
        block_offset=dense[2],
        group_end=dense[3],
    )


def mine_spectrum(
    rows: RowItems, *, min_count: int, lengths: tuple[int, int]
) -> tuple[IntArray, MinerWork]:
    """(spectrum, work): ``spectrum[c]`` itemsets with a length in ``lengths`` (min, max) have
    count exactly c, for every c ≥ ``min_count`` (0 below)."""
    spectrum = np.zeros(rows.n_rows + 1, dtype=np.int64)
    sink = _sink(_SPECTRUM, spectrum=spectrum)
    work = _run(rows, min_count=min_count, lengths=lengths, sink=sink)
    return spectrum, work


def mine_selected(
    rows: RowItems,
    *,
    min_count: int,
    lengths: tuple[int, int],
    places: Mapping[int, Sequence[int]],
) -> MinedSelection:
    """The itemsets at ``places``: for each count c, the itemsets reported at the given
    positions among those of count c (0-based, in the traversal's order, the order of
    :func:`mine_spectrum`'s counting). Row t of the result answers the t-th place in the order
    (count ascending, position ascending); every place must exist (positions < spectrum[c])."""
    want_start = np.zeros(rows.n_rows + 2, dtype=np.int64)
    ordered: list[int] = []
    for count in sorted(places):
        positions = sorted(places[count])
        if not 0 <= count <= rows.n_rows or len(set(positions)) != len(positions):
            raise ValueError("places must name distinct positions of counts 0 … n_rows")
        want_start[count + 1] = len(positions)
        ordered += positions
    np.cumsum(want_start, out=want_start)
    itemsets = np.full((len(ordered), lengths[1]), -1, dtype=np.int32)
    counts = np.full(len(ordered), -1, dtype=np.int64)
    sink = _sink(
        _SELECT, want=(want_start, np.asarray(ordered, dtype=np.int64)), out=(itemsets, counts)
    )
    work = _run(rows, min_count=min_count, lengths=lengths, sink=sink)
    if np.any(counts < 0):
        raise ValueError("a place asked for does not exist")
    return MinedSelection(itemsets=itemsets, counts=counts, work=work)


def mine_dense(
    rows: RowItems,
    *,
    lengths: tuple[int, int],
    rank_of: IntArray,
    block_offset: IntArray,
    group_end: IntArray,
) -> tuple[Int32Array, MinerWork]:
    """(counts, work): the exact count of every itemset of the asked lengths that some row
    holds, at index ``block_offset[len] + Σ_i rank_of[item_i, i]`` (items ascending); 0 for the
    others. The caller's ranks must be a bijection onto 0 … ``block_offset[-1]`` − 1;
    ``group_end[i]`` is the first item after item i's group (groups are ranges of items, a row
    holds at most one item of each)."""
    dense = np.zeros(int(block_offset[-1]), dtype=np.int32)
    sink = _sink(_DENSE, dense=(rank_of, dense, block_offset, group_end))
    work = _run(rows, min_count=1, lengths=lengths, sink=sink)
    return dense, work


@compiled_counted_free
def _select_dense(
    counts: Int32Array, want: tuple[IntArray, IntArray, IntArray], found: IntArray
) -> None:
    """``found[t]`` = the index of the t-th asked place (count c, position among the indices
    holding c); ``want`` = (start of each count's places, positions, places answered so far
    of each count: ``want_start[:-1]`` on entry)."""
    want_start, want_pos, next_want = want
    seen = found[want_pos.size :]  # the indices of each count passed so far (zeros on entry)
    for index in range(counts.size):
        count = counts[index]
        if count >= next_want.size:
            continue
        place = next_want[count]
        if place < want_start[count + 1] and want_pos[place] == seen[count]:
            found[place] = index
            next_want[count] = place + 1
        seen[count] += 1


def select_dense(counts: Int32Array, places: Mapping[int, Sequence[int]]) -> IntArray:
    """Indices into ``counts`` of the asked places (as :func:`mine_selected`, over the dense
    array in index order): one pass, O(len(counts))."""
    top = max(places, default=0)
    want_start = np.zeros(top + 2, dtype=np.int64)
    ordered: list[int] = []
    for count in sorted(places):
        positions = sorted(places[count])
        want_start[count + 1] = len(positions)
        ordered += positions
    np.cumsum(want_start, out=want_start)
    # found[:places] answers the places; found[places:] counts each count's indices seen.
    found = np.zeros(len(ordered) + top + 1, dtype=np.int64)
    found[: len(ordered)] = -1
    want = (want_start, np.asarray(ordered, dtype=np.int64), want_start[:-1].copy())
    _select_dense(counts, want, found)
    if np.any(found[: len(ordered)] < 0):
        raise ValueError("a place asked for does not exist")
    return found[: len(ordered)]
