"""The public plan of a private top-K itemset selection (ALGORITHMS.md §4.1; DESIGN.md contract
item 7: time is an output).

Everything here is a function of public values only — K, the lengths, the noise scale and the
margin Γ (from ε, ρ and the universe size M), ``n_max`` and the row width w (transaction data:
``metadata.max_row_width``, longer rows being cut at load; attribute data: the number of item
groups, a row holding at most one item per group) — so it can be checked before the charge and
priced by the padding (services/timing.py). :func:`plan_top_k` picks one of two exact ways:

* **dense** (M ≤ :data:`DENSE_UNIVERSE`): one pass of the miner at count ≥ 1 writes the exact
  count of every itemset of the universe into an array of M counts; no tail, nothing revealed.
* **sparse**: the itemsets with count ≥ B are the explicit blocks (one block per count, from the
  miner's spectrum; a second pass fetches the picked members), the rest is the tail of
  :func:`~dpmine_server.dp.topk.noisy_top_k_blocks`, its members drawn uniformly (by rank) and
  redrawn while explicit or already revealed.

**Bounds (proofs).** (1) Mining: each pass costs at most
:func:`~dpmine_server.data.itemset_miner.work_bound` (n_max, w, ℓmax) scan steps (proof in that
module). (2) Explicit set: Σ_I c(I) over the itemsets of the asked lengths is the number of
(row, itemset ⊆ row) pairs, ≤ n_max·Σ_ℓ C(w, ℓ), so at most F̄ = min(M, ⌊n_max·Σ_ℓ C(w, ℓ)/B⌋)
itemsets have a count ≥ B. (3) Reveals: the tail bound minus the smallest tail score is at most
B − 1 (:func:`~dpmine_server.operations.itemsets.top_k_itemsets`), so by
:func:`~dpmine_server.dp.topk.reveal_bound` more than R reveals happen with probability at most
:data:`FAILURE` / 2. (4) Draws: while at most R are revealed, a uniform draw from the universe
lands on an explicit or revealed itemset with probability at most q = (F̄ + R)/M, so more than
X = :func:`~dpmine_server.dp.topk.draw_bound` (R, 1 − q) draws are needed with probability at
most :data:`FAILURE` / 2. The running time is then bounded by public values except with
probability :data:`FAILURE` (the residual overrun: its law is still dominated by a public one).

B changes the running time only, never the output law; it must stay ≤ ⌊Γ⌋ + 1 so that every
itemset that can set the truncation level τ is explicit (c_K comes from the same pass). The plan
takes the B in [min(1 + ⌈scale⌉, ⌊Γ⌋ + 1), ⌊Γ⌋ + 1] with the fewest draws (a larger B shrinks
F̄ but grows R like K·e^{(B−1)/scale}), and the regime with the smaller priced time
(:meth:`TopKPlan.seconds`). A request no regime can serve within the caps is refused before the
charge, with what to change.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from dpmine.wire import elementary_symmetric
from dpmine_server.data.itemset_miner import work_bound
from dpmine_server.dp.topk import draw_bound, reveal_bound

__all__ = [
    "DENSE_UNIVERSE",
    "FAILURE",
    "MAX_MINER_BYTES",
    "MAX_MINING_WORK",
    "MAX_TAIL_DRAWS",
    "CostModel",
    "TopKPlan",
    "plan_top_k",
]

#: Universes up to this size may be counted densely (an int32 per itemset).
DENSE_UNIVERSE = 2**22
#: Probability that a run's work exceeds the plan's bounds (reveals or draws beyond them).
FAILURE = 1e-9
#: Largest per-pass bound on the miner's scan steps accepted.
MAX_MINING_WORK = 5 * 10**10
#: Largest bound on tail draws accepted.
MAX_TAIL_DRAWS = 10**6
#: Largest bound on the miner's buffers (occurrence areas of n_max·w entries per length).
MAX_MINER_BYTES = 4 * 2**30
#: Bytes per occurrence entry (row int32 + position int64).
_ENTRY_BYTES = 12
#: Steps of the search for B: each candidate is the previous one times this (at least + 1).
_THRESHOLD_STEP = 1.1


@dataclass(frozen=True, slots=True)
class CostModel:
    """Seconds per unit of public work, measured on adversarial data (bench/README.md,
    "Itemset work bounds"): the constants of :meth:`TopKPlan.seconds`."""

    #: One scan step of the miner (worst case over dense and scattered shapes).
    scan: float = 2.0e-8
    #: Building the miner's input: per item × row (attribute data: each item's bitset read).
    item_row: float = 2.0e-9
    #: ... per (row, item) entry (transaction data: the stored lists, transposed).
    entry: float = 2.0e-8
    #: One itemset of a dense universe (allocation, spectrum, selection).
    cell: float = 2.0e-8
    #: One possible count (0 … n_max): the blocks of the spectrum.
    block: float = 1.0e-7
    #: One tail draw: its fixed part (unrank, bookkeeping) ...
    draw: float = 5.0e-5
    #: ... and per item × row of its count (an item's bitset may have to be built).
    draw_row: float = 1.0e-9
    #: One released itemset (selection heap, names).
    pick: float = 2.0e-5
    #: Fixed part of one selection.
    fixed: float = 5.0e-3


COSTS = CostModel()


@dataclass(frozen=True, slots=True)
class TopKPlan:
    """The public plan of one selection (module docstring)."""

    universe: int
    lengths: tuple[int, int]
    width: int
    n_max: int
    n_items: int
    k: int
    dense: bool
    threshold: int  # B (1 when dense)
    explicit_bound: int  # F̄ (M when dense)
    reveals: int  # R (0 when dense)
    draws: int  # X (0 when dense)
    mining_work: int  # scan steps per pass
    passes: int  # 1 dense; 2 sparse (spectrum, then the picked members)

    def seconds(self, costs: CostModel = COSTS, *, rows: int | None = None) -> float:
        """Priced time of one run over at most ``rows`` rows (default ``n_max``); the input
        build is priced for both data kinds (it happens once per loaded dataset)."""
        n_max = self.n_max if rows is None else rows
        work = self.mining_work if rows is None else work_bound(rows, self.width, self.lengths[1])
        build = costs.item_row * self.n_items * n_max + costs.entry * n_max * self.width
        draw = costs.draw + costs.draw_row * self.lengths[1] * (n_max + n_max // 64 + 1)
        return (
            costs.fixed
            + build
            + costs.scan * self.passes * work
            + costs.cell * (self.universe if self.dense else 0)
            + costs.block * (n_max + 1)
            + self.draws * draw
            + costs.pick * self.k
        )


def _subsets_per_row(width: int, lengths: tuple[int, int]) -> int:
    """Itemsets of the asked lengths inside one row of ``width`` items."""
    return sum(math.comb(width, length) for length in range(lengths[0], lengths[1] + 1))


def _sparse(
    *,
    universe: int,
    lengths: tuple[int, int],
    width: int,
    n_max: int,
    k: int,
    scale: float,
    gamma: float,
) -> tuple[int, int, int, int] | None:
    """(B, F̄, R, X) with the fewest draws among the allowed thresholds, or None if every one
    leaves the tail without room (q ≥ 1)."""
    pairs = n_max * _subsets_per_row(width, lengths)
    top = math.floor(gamma) + 1
    threshold = max(1, min(1 + math.ceil(scale), top))
    best: tuple[int, int, int, int] | None = None
    while True:
        explicit = min(universe, pairs // threshold)
        tail = universe - explicit
        if tail >= 1:
            reveals = reveal_bound(
                k=k, gap=threshold - 1, scale=scale, tail_size=tail, failure=FAILURE / 2
            )
            miss = (explicit + reveals) / universe
            if miss < 1:
                draws = draw_bound(
                    successes=reveals, success_probability=1 - miss, failure=FAILURE / 2
                )
                if best is None or draws < best[3]:
                    best = (threshold, explicit, reveals, draws)
        if threshold >= top:
            return best
        threshold = min(top, max(threshold + 1, math.ceil(threshold * _THRESHOLD_STEP)))


@lru_cache(maxsize=256)
def plan_top_k(
    *,
    group_sizes: tuple[int, ...],
    lengths: tuple[int, int],
    width: int,
    n_max: int,
    k: int,
    scale: float,
    gamma: float,
) -> TopKPlan:
    """The plan of a selection of K itemsets of ``lengths`` (min, max) over a catalog with
    these item groups (module docstring); ValueError, before any data is read, if no regime
    fits the caps."""
    low, high = lengths
    degrees = elementary_symmetric(list(group_sizes), high)
    universe = sum(degrees[low : high + 1])
    n_items = sum(group_sizes)
    mining = work_bound(n_max, width, high)
    if mining > MAX_MINING_WORK or high * n_max * width * _ENTRY_BYTES > MAX_MINER_BYTES:
        raise ValueError(
            f"itemsets of up to {high} items over rows of up to {width} items on up to "
            f"{n_max} rows are more than this server mines in one call: ask for shorter "
            "itemsets, or (transaction data) have the owner declare a smaller max_row_width"
        )
    options: list[TopKPlan] = []
    if universe <= DENSE_UNIVERSE and max(degrees) < 2**62:
        options.append(
            TopKPlan(
                universe=universe,
                lengths=lengths,
                width=width,
                n_max=n_max,
                n_items=n_items,
                k=k,
                dense=True,
                threshold=1,
                explicit_bound=universe,
                reveals=0,
                draws=0,
                mining_work=mining,
                passes=1,
            )
        )
    sparse = _sparse(
        universe=universe,
        lengths=lengths,
        width=width,
        n_max=n_max,
        k=k,
        scale=scale,
        gamma=gamma,
    )
    if sparse is not None and sparse[3] <= MAX_TAIL_DRAWS:
        threshold, explicit, reveals, draws = sparse
        options.append(
            TopKPlan(
                universe=universe,
                lengths=lengths,
                width=width,
                n_max=n_max,
                n_items=n_items,
                k=k,
                dense=False,
                threshold=threshold,
                explicit_bound=explicit,
                reveals=reveals,
                draws=draws,
                mining_work=mining,
                passes=2,
            )
        )
    if not options:
        raise ValueError(
            f"the {universe} itemsets of {low}..{high} items are too many to count one by one "
            "and too dense at this noise scale to sample the rest: ask for shorter itemsets, "
            "a larger epsilon or a smaller k, or (transaction data) have the owner declare a "
            "smaller max_row_width"
        )
    return min(options, key=lambda plan: plan.seconds())
