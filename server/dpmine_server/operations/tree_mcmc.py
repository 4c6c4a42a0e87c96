"""Metropolis–Hastings tree samplers of ``tree.mcmc`` (ALGORITHMS.md §3.4) and
``tree.pair_mcmc`` (§3.5), with incremental updates (§7 "Tree MCMC").

State space: complete binary trees of a fixed depth whose splits respect the no-reuse rule on
every root-to-leaf path (§3.1). Proposal: an inner node v uniformly, then a new split for v from
the base measure μ conditioned on not being used by v's ancestors or descendants. That excluded
set is the same before and after the move, so Q(T → T')·μ(s) = Q(T' → T)·μ(s') and the plain
Metropolis ratio min(1, exp(c·(score' − score))) leaves

    π(T) ∝ Π_v μ(s_v) · exp(c·score(T))

invariant: the exponential mechanism over valid trees with the product base measure, c = ε/(2Δ).
The chains run a fixed, public number of iterations and release the final state only; nothing
stops early on the data (§0.1, §0.4), so the guarantee is "approximate" (ε-DP at convergence).
``tree.mcmc`` has an exact sampler of the same law (:mod:`~dpmine_server.operations.tree_exact`,
sum-product, since its score adds up over one tree's leaves); ``tree.pair_mcmc`` has none: summing
out the second tree leaves a factor per first tree that reads all of its leaves at once, so the
first tree must be enumerated (≈ 4·10¹⁴ on mammals at depth 3), and samplers that stop exactly
(rejection, artificial atoms) run for about max/mean of the weights exp(c·score), which grows
with n (docs/operations.md, "Why no exact sampler").

The steps run compiled (:mod:`~dpmine_server.operations.tree_native`). This module draws the
initial tree and every random number of the chain from the call's generator up front: the node
of every step, one uniform per acceptance test, and pools of candidate splits from the base
measure (a step takes the next pooled candidate its node may use; an exhausted pool is topped
up with fresh draws). Progress is reported after every 1 % of the public iteration count.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from dpmine.wire import TreePairScore
from dpmine_server.data.columns import ColumnStore
from dpmine_server.dp.mechanisms import OneSided, Sensitivity, em_coefficient
from dpmine_server.operations.base import Progress, progress_checkpoints
from dpmine_server.operations.tree_kernels import (
    GINI_SENSITIVITY,
    Labels,
    SplitKey,
    SplitSpace,
    ancestors,
    leaf_class_counts,
    node_rows,
    split_codes,
    subtree_levels,
)
from dpmine_server.operations.tree_native import (
    Chain,
    Draws,
    PairTarget,
    Pool,
    Target,
    fill_masks,
    mcmc_steps,
    pair_steps,
)

__all__ = [
    "GAIN_SENSITIVITY",
    "PAIR_SENSITIVITY",
    "PairScore",
    "descendants",
    "excluded_splits",
    "sample_tree_mcmc",
    "sample_tree_pair",
]

IntArray = npt.NDArray[np.int64]

#: Sensitivity of the normalised pair score g(T_L)·(1 + g(T_R))/2 (§3.5, Lemma 1).
PAIR_SENSITIVITY = 1.0

#: The pair scores of ``tree.pair_mcmc``: the paper's (§3.5, eq. 6) or the Gini gain score.
PairScore = TreePairScore

#: One-sided sensitivity (§0.8) of the gain pair score (ALGORITHMS.md §6 item 19)
#:
#:     S(T_L, T_R) = −W(T_L; a) + [W(root; ℓ) − W(T_R; ℓ)]
#:
#: W(T; y) = Σ over T's cells (leaves and inner nodes' missing rows, :mod:`.tree_kernels`) of
#: |c|·Gini(c) for the label y; ℓ = the T_L leaf of a row (rows in no T_L leaf have no ℓ);
#: root = every row with an ℓ. Proof: an added row r moves each W by the growth of one cell's
#: |c|·Gini(c), which is in [0, 2) (:data:`~.tree_kernels.GINI_SENSITIVITY`). The first term
#: moves by −w₁ ∈ (−2, 0] (0 when r has no a-label); the bracket, when r has an ℓ, by
#: w_root − w₂ ∈ (−2, 2) (r enters the root and exactly one cell of T_R, which partition the
#: rows), else 0. So S moves up by < 2 and down by < 4: c = ε/(2 + 4) = ε/6. For a one-leaf T_L
#: every ℓ is equal, every W(·; ℓ) is 0 and the bracket (the gain of T_R) is 0: T_R cannot make a
#: degenerate T_L score; the paper's g(T_L)·(1 + g(T_R))/2 rewards it (§6 item 19).
GAIN_SENSITIVITY = OneSided(up=2.0, down=4.0)


#: Pooled candidate splits per step: a step rejects the splits its node's ancestors and
#: descendants use, so it may take more than one; an exhausted pool is topped up.
POOL_PER_STEP = 2


def descendants(node: int, depth: int) -> list[int]:
    """Heap indices of the inner nodes strictly below ``node``."""
    inner = 2**depth - 1
    return [
        child
        for start, stop in subtree_levels(node, depth)[1:]
        for child in range(start, stop)
        if child < inner
    ]


def excluded_splits(keys: list[SplitKey], node: int, depth: int) -> set[SplitKey]:
    """Splits a proposal at ``node`` may not use: those of its ancestors and descendants (the
    rule the compiled steps apply through :func:`_related`)."""
    return {keys[other] for other in _related_nodes(node, depth)}


def _related_nodes(node: int, depth: int) -> list[int]:
    return ancestors(node) + descendants(node, depth)


def _related(depth: int) -> IntArray:
    """``(m, 2^depth − 2)``: the ancestors and descendants of every inner node, −1 padded."""
    inner = 2**depth - 1
    table = np.full((inner, max(inner - 1, 0)), -1, dtype=np.int64)
    for node in range(inner):
        related = _related_nodes(node, depth)
        table[node, : len(related)] = related
    return table


class _Pool:
    """Candidate splits drawn i.i.d. from a view's base measure (§3.1): the attribute
    uniformly, then its value uniformly; consumed in order by the compiled steps."""

    def __init__(self, space: SplitSpace, rng: np.random.Generator, size: int) -> None:
        self._sizes = np.array([family.size for family in space.families], dtype=np.int64)
        self._rng = rng
        self._size = size
        self.arrays = self._draw()
        self.cursor = 0

    def _draw(self) -> tuple[IntArray, IntArray]:
        families = self._rng.integers(self._sizes.size, size=self._size)
        return families, self._rng.integers(0, self._sizes[families])

    @property
    def state(self) -> Pool:
        """The candidates and the first unused one, as the compiled steps take them."""
        return self.arrays[0], self.arrays[1], self.cursor

    @property
    def exhausted(self) -> bool:
        return self.cursor == self.arrays[0].size

    def refill(self) -> None:
        """Fresh candidates (the unused rest of the old pool was all rejected)."""
        self.arrays, self.cursor = self._draw(), 0


def _random_keys(space: SplitSpace, depth: int, rng: np.random.Generator) -> list[SplitKey]:
    """A tree drawn top-down from the base measure, each split avoiding its ancestors' (§3.4)."""
    keys: list[SplitKey] = []
    for node in range(2**depth - 1):
        keys.append(space.draw(rng, {keys[parent] for parent in ancestors(node)}))
    return keys


def _chain(columns: ColumnStore, space: SplitSpace, depth: int, rng: np.random.Generator) -> Chain:
    """The arrays of a chain started from a random tree of ``space``."""
    codes, ordered = split_codes(columns, space)
    keys = np.array(_random_keys(space, depth, rng), dtype=np.int64)
    root = columns.all_rows().words
    left = np.zeros((keys.shape[0], root.size), dtype=np.uint64)
    right = np.zeros_like(left)
    for node, (family, value) in enumerate(keys):
        fill_masks(codes[family], bool(ordered[family]), int(value), left[node], right[node])
    nodes = node_rows(root, left, right, depth)
    return Chain(
        codes=codes,
        ordered=ordered,
        related=_related(depth),
        keys=keys,
        left=left,
        right=right,
        nodes=nodes,
        scratch=np.zeros_like(nodes),
        new_left=np.zeros_like(root),
        new_right=np.zeros_like(root),
    )


def _final_keys(chain: Chain) -> list[SplitKey]:
    return [(int(family), int(value)) for family, value in chain.keys]


def _leaves(chain: Chain) -> npt.NDArray[np.uint64]:
    return chain.nodes[chain.keys.shape[0] :]


def _draws(rng: np.random.Generator, nodes: int, iterations: int, coefficient: float) -> Draws:
    """The node of every step (uniform among ``nodes``) and its acceptance uniform."""
    return Draws(rng.integers(nodes, size=iterations), rng.random(iterations), coefficient)


def sample_tree_mcmc(
    columns: ColumnStore,
    space: SplitSpace,
    labels: Labels,
    *,
    depth: int,
    iterations: int,
    epsilon: float,
    rng: np.random.Generator,
    progress: Progress,
) -> list[SplitKey]:
    """AltMCMC's tree (§3.4): Metropolis–Hastings on g₁ = −Σ_cells τ_c·Gini(c) over the leaves
    and every inner node's rows with a missing split value (:mod:`.tree_kernels`; Δ = 2),
    c = ε/(2·2), ``iterations`` steps, final state. ε-DP at convergence (approximate)."""
    chain = _chain(columns, space, depth, rng)
    classes = labels.class_words()
    table = leaf_class_counts(chain.nodes, classes)
    target = Target(classes, table, table.copy())
    coefficient = em_coefficient(epsilon, GINI_SENSITIVITY)
    draws = _draws(rng, chain.keys.shape[0], iterations, coefficient)
    pool = _Pool(space, rng, POOL_PER_STEP * iterations)
    step = 0
    for stop in progress_checkpoints(iterations):
        while step < stop:
            if pool.exhausted:
                pool.refill()
            step, pool.cursor = mcmc_steps(chain, target, draws, (step, stop), pool.state)
        progress(stop / iterations)
    return _final_keys(chain)


def sample_tree_pair(
    columns: ColumnStore,
    spaces: tuple[SplitSpace, SplitSpace],
    labels: Labels,
    *,
    depth: int,
    iterations: int,
    epsilon: float,
    rng: np.random.Generator,
    progress: Progress,
    score: PairScore = "gain",
) -> tuple[list[SplitKey], list[SplitKey]]:
    """MCMCTreePair's sampler (§3.5): the first tree (view of ``spaces[0]``) predicts
    ``labels`` (makeTarget(a)), the second predicts the first's leaves. ``score`` "paper":
    g(T_1)·(1 + g(T_2))/2 (eqs. 5–6), c = ε/(2·1); "gain": the Gini gain score of
    :data:`GAIN_SENSITIVITY`, c = ε/6. A step picks an inner node of either tree uniformly;
    ``iterations`` steps, final state. ε-DP at convergence (approximate)."""
    chains = (_chain(columns, spaces[0], depth, rng), _chain(columns, spaces[1], depth, rng))
    classes = labels.class_words()
    first = leaf_class_counts(chains[0].nodes, classes)
    second = leaf_class_counts(chains[1].nodes, _leaves(chains[0]))
    target = PairTarget(
        classes, first, second, first.copy(), second.copy(), columns.n_rows, score == "gain"
    )
    sensitivity: Sensitivity = GAIN_SENSITIVITY if score == "gain" else PAIR_SENSITIVITY
    coefficient = em_coefficient(epsilon, sensitivity)
    draws = _draws(rng, 2 * chains[0].keys.shape[0], iterations, coefficient)
    pools = (
        _Pool(spaces[0], rng, POOL_PER_STEP * iterations),
        _Pool(spaces[1], rng, POOL_PER_STEP * iterations),
    )
    step = 0
    for stop in progress_checkpoints(iterations):
        while step < stop:
            for pool in pools:
                if pool.exhausted:
                    pool.refill()
            step, pools[0].cursor, pools[1].cursor = pair_steps(
                chains, target, draws, (step, stop), (pools[0].state, pools[1].state)
            )
        progress(stop / iterations)
    return _final_keys(chains[0]), _final_keys(chains[1])
