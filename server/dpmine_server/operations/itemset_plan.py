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
:func:`~dpmine_server.data.itemset_miner.work_bound` scan steps, expanded nodes and reported
itemsets (proofs in that module), from n_max, w, the lengths, the universe and the threshold.
(2) Explicit set: Σ_I c(I) over the itemsets of the asked lengths is the number of (row,
itemset ⊆ row) pairs, ≤ n_max·Σ_ℓ C(w, ℓ), so at most F̄ = min(M, ⌊n_max·Σ_ℓ C(w, ℓ)/B⌋)
itemsets have a count ≥ B. (3) Reveals: the tail bound minus the smallest tail score is at most
B − 1 (:func:`~dpmine_server.operations.itemsets.top_k_itemsets`), so by
:func:`~dpmine_server.dp.topk.reveal_bound` more than R reveals happen with probability at most
:data:`FAILURE` / 2. (4) Draws: while at most R are revealed, a uniform draw from the universe
lands on an explicit or revealed itemset with probability at most q = (F̄ + R)/M, so more than
X = :func:`~dpmine_server.dp.topk.draw_bound` (R, 1 − q) draws are needed with probability at
most :data:`FAILURE` / 2. (5) The rest is linear in public sizes: the input build (items × rows,
and rows × w entries), the rank table (groups × ℓ), a dense universe's M counts, the spectrum's
n_max + 1 counts, the K picks. The running time is then bounded by public values except with
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

from dpmine.wire import elementary_symmetric
from dpmine_server.data.itemset_miner import MinerWork, memory_bound, work_bound
from dpmine_server.dp.topk import draw_bound, reveal_bound
from dpmine_server.public_cache import public_cache

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
#: Steps of the search for B: each candidate is the previous one times this (at least + 1).
_THRESHOLD_STEP = 1.1


@dataclass(frozen=True, slots=True)
class CostModel:
    """Seconds per unit of public work, measured on adversarial data with
    ``bench/calibrate_itemsets.py`` (bench/README.md, "Itemset work bounds"), times a margin:
    the constants of :meth:`TopKPlan.seconds`."""

    #: One scan step of the miner (a row position read and counted or delivered).
    step: float = 4e-9
    #: One expanded node of the miner (its bookkeeping besides the scans).
    node: float = 4e-8
    #: One reported itemset: a spectrum or selection entry ...
    report: float = 1.5e-8
    #: ... or a dense count written at a random place of up to 16 MB.
    dense_report: float = 1.2e-7
    #: Building the miner's input: per item × row (attribute data: each item's bitset read) ...
    item_row: float = 2e-8
    #: ... and per (row, item) entry (the transposition of the row lists).
    entry: float = 3e-8
    #: One entry of the rank table (groups × lengths, exact integers).
    rank_entry: float = 2e-6
    #: One itemset of a dense universe (allocation, the last level's clearing loop, spectrum,
    #: selection).
    cell: float = 3e-8
    #: One possible count (0 … n_max): the blocks of the spectrum.
    block: float = 1.5e-7
    #: One item of a tail draw: unranked, its bitset looked up, intersected ...
    draw_item: float = 1.5e-4
    #: ... and per row when the item's bitset must be built from its row list.
    draw_row: float = 5e-9
    #: One released itemset (selection heap, names).
    pick: float = 5e-5
    #: Fixed part of one selection.
    fixed: float = 1e-2


COSTS = CostModel()


@dataclass(frozen=True, slots=True)
class TopKPlan:
    """The public plan of one selection (module docstring)."""

    universe: int
    lengths: tuple[int, int]
    width: int
    n_max: int
    n_items: int
    n_groups: int
    k: int
    dense: bool
    threshold: int  # B (1 when dense)
    explicit_bound: int  # F̄ (M when dense)
    reveals: int  # R (0 when dense)
    draws: int  # X (0 when dense)
    mining: MinerWork  # per pass, over n_max rows
    passes: int  # 1 dense; 2 sparse (spectrum, then the picked members)
    bitsets: bool  # the input is read from one bitset per item (attribute data, row subsets)

    def seconds(self, costs: CostModel = COSTS, *, classes: int = 1) -> float:
        """Priced time of the selection run on ``classes`` disjoint row subsets of one dataset
        (n_max rows in all; ``brl.antecedents`` runs one per label class). Scan steps and the
        uncapped node and report bounds are linear in the rows, so their sum over the subsets
        is the bound for n_max rows; the rest is paid per subset (the input build reads every
        row of every item for each subset)."""
        mining = self.mining
        report = costs.dense_report if self.dense else costs.report
        per_pass = costs.step * mining.steps + classes * (
            costs.node * mining.nodes + report * mining.reports
        )
        reads = classes * self.n_items * self.n_max if self.bitsets else 0
        build = costs.item_row * reads + costs.entry * (
            self.n_max * self.width + classes * (self.n_max + self.n_items)
        )
        high = self.lengths[1]
        draw = high * (costs.draw_item + costs.draw_row * (self.n_max + self.n_max // 64 + 1))
        per_class = (
            costs.fixed
            + costs.rank_entry * (self.n_groups + 1) * (high + 1)
            + costs.cell * (self.universe if self.dense else 0)
            + costs.block * (self.n_max + 1)
            + self.draws * draw
            + costs.pick * self.k
        )
        return build + self.passes * per_pass + classes * per_class


def _subsets_per_row(width: int, lengths: tuple[int, int]) -> int:
    """Itemsets of the asked lengths inside one row of ``width`` items."""
    return sum(math.comb(width, length) for length in range(lengths[0], lengths[1] + 1))


@dataclass(frozen=True, slots=True)
class _Public:
    """The public inputs of a plan."""

    degrees: tuple[int, ...]  # e_l, l = 0 … ℓmax
    lengths: tuple[int, int]
    width: int
    n_max: int
    n_items: int
    n_groups: int
    k: int
    bitsets: bool

    @property
    def universe(self) -> int:
        low, high = self.lengths
        return sum(self.degrees[low : high + 1])

    def plan(
        self, *, dense: bool, threshold: int, explicit: int, reveals: int, draws: int
    ) -> TopKPlan:
        return TopKPlan(
            universe=self.universe,
            lengths=self.lengths,
            width=self.width,
            n_max=self.n_max,
            n_items=self.n_items,
            n_groups=self.n_groups,
            k=self.k,
            dense=dense,
            threshold=threshold,
            explicit_bound=explicit,
            reveals=reveals,
            draws=draws,
            mining=work_bound(
                self.n_max, self.width, self.lengths, min_count=threshold, universe=self.degrees
            ),
            passes=1 if dense else 2,
            bitsets=self.bitsets,
        )


def _sparse(public: _Public, *, scale: float, gamma: float) -> TopKPlan | None:
    """The sparse plan of least priced time over the allowed thresholds (module docstring), or
    None if every one leaves the tail without room or needs too many draws."""
    universe = public.universe
    pairs = public.n_max * _subsets_per_row(public.width, public.lengths)
    top = math.floor(gamma) + 1
    threshold = max(1, min(1 + math.ceil(scale), top))
    best: TopKPlan | None = None
    while True:
        explicit = min(universe, pairs // threshold)
        tail = universe - explicit
        if tail >= 1:
            reveals = reveal_bound(
                k=public.k, gap=threshold - 1, scale=scale, tail_size=tail, failure=FAILURE / 2
            )
            miss = (explicit + reveals) / universe
            if miss < 1:
                draws = draw_bound(
                    successes=reveals,
                    success_probability=1 - miss,
                    failure=FAILURE / 2,
                    limit=MAX_TAIL_DRAWS + 1,
                )
                plan = public.plan(
                    dense=False,
                    threshold=threshold,
                    explicit=explicit,
                    reveals=reveals,
                    draws=draws,
                )
                if draws <= MAX_TAIL_DRAWS and (best is None or plan.seconds() < best.seconds()):
                    best = plan
        if threshold >= top:
            return best
        threshold = min(top, max(threshold + 1, math.ceil(threshold * _THRESHOLD_STEP)))


@public_cache(maxsize=256)
def plan_top_k(
    *,
    group_sizes: tuple[int, ...],
    lengths: tuple[int, int],
    width: int,
    n_max: int,
    k: int,
    scale: float,
    gamma: float,
    bitsets: bool,
) -> TopKPlan:
    """The plan of a selection of K itemsets of ``lengths`` (min, max) over a catalog with
    these item groups (module docstring), whose rows are read from one bitset per item
    (``bitsets``: attribute data or a row subset) or from stored row lists (transaction data);
    ValueError, before any data is read, if no regime fits the caps."""
    low, high = lengths
    degrees = elementary_symmetric(list(group_sizes), high)
    universe = sum(degrees[low : high + 1])
    n_items = sum(group_sizes)
    steps = work_bound(n_max, width, lengths).steps
    if steps > MAX_MINING_WORK or memory_bound(n_max, width, high) > MAX_MINER_BYTES:
        raise ValueError(
            f"itemsets of up to {high} items over rows of up to {width} items on up to "
            f"{n_max} rows are more than this server mines in one call: ask for shorter "
            "itemsets, or (transaction data) have the owner declare a smaller max_row_width"
        )
    public = _Public(
        degrees=tuple(degrees),
        lengths=lengths,
        width=width,
        n_max=n_max,
        n_items=n_items,
        n_groups=len(group_sizes),
        k=k,
        bitsets=bitsets,
    )
    options: list[TopKPlan] = []
    if universe <= DENSE_UNIVERSE and max(degrees) < 2**62:
        options.append(public.plan(dense=True, threshold=1, explicit=universe, reveals=0, draws=0))
    sparse = _sparse(public, scale=scale, gamma=gamma)
    if sparse is not None:
        options.append(sparse)
    if not options:
        raise ValueError(
            f"the {universe} itemsets of {low}..{high} items are too many to count one by one "
            "and too dense at this noise scale to sample the rest: ask for shorter itemsets, "
            "a larger epsilon or a smaller k, or (transaction data) have the owner declare a "
            "smaller max_row_width"
        )
    return min(options, key=lambda plan: plan.seconds())
