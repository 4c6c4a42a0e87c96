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

A move at v changes only v's split: the row sets of v's subtree are re-routed (bitset ANDs,
level by level) and only the leaves below v get new class counts by popcount. In the pair
sampler a move in the first tree also changes the second tree's classes (its leaves), so the
second tree's leaf × class table is recounted.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dpmine_server.data.columns import ColumnStore
from dpmine_server.dp.mechanisms import em_coefficient
from dpmine_server.operations.base import Progress
from dpmine_server.operations.tree_kernels import (
    GINI_SENSITIVITY,
    Labels,
    SplitKey,
    SplitMasks,
    SplitSpace,
    ancestors,
    leaf_class_counts,
    node_rows,
    normalised_purity,
    reroute_subtree,
    subtree_levels,
    tree_gini,
)

__all__ = [
    "PAIR_SENSITIVITY",
    "TreeState",
    "descendants",
    "excluded_splits",
    "pair_score",
    "random_tree",
    "sample_tree_mcmc",
    "sample_tree_pair",
]

WordArray = npt.NDArray[np.uint64]
IntArray = npt.NDArray[np.int64]

#: Sensitivity of the normalised pair score g(T_L)·(1 + g(T_R))/2 (§3.5, Lemma 1).
PAIR_SENSITIVITY = 1.0

#: Progress is reported after every 1 % of the (public) iterations.
PROGRESS_STEPS = 100


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
    """Splits a proposal at ``node`` may not use: those of its ancestors and descendants."""
    return {keys[other] for other in ancestors(node) + descendants(node, depth)}


@dataclass(frozen=True, slots=True)
class TreeState:
    """One tree of a chain: splits (heap order), their row masks and every node's row set."""

    depth: int
    keys: list[SplitKey]
    left: WordArray
    right: WordArray
    nodes: WordArray

    @property
    def leaves(self) -> WordArray:
        """Leaf row sets, left to right."""
        return self.nodes[len(self.keys) :]

    def leaf_range(self, node: int) -> tuple[int, int]:
        """The leaves [start, stop) below ``node`` (leaf numbering)."""
        start, stop = subtree_levels(node, self.depth)[-1]
        return start - len(self.keys), stop - len(self.keys)

    def with_split(self, node: int, key: SplitKey, masks: SplitMasks) -> TreeState:
        """The tree with ``node``'s split replaced (subtrees kept, their rows re-routed)."""
        keys = list(self.keys)
        keys[node] = key
        left, right = self.left.copy(), self.right.copy()
        left[node], right[node] = masks.masks(key)
        nodes = self.nodes.copy()
        reroute_subtree(nodes, left, right, node, self.depth)
        return TreeState(self.depth, keys, left, right, nodes)


def random_tree(
    space: SplitSpace, masks: SplitMasks, root: WordArray, depth: int, rng: np.random.Generator
) -> TreeState:
    """A tree drawn top-down from the base measure, each split avoiding its ancestors' (§3.4)."""
    keys: list[SplitKey] = []
    for node in range(2**depth - 1):
        keys.append(space.draw(rng, {keys[parent] for parent in ancestors(node)}))
    left, right = masks.stacked(keys)
    return TreeState(depth, keys, left, right, node_rows(root, left, right, depth))


def _accept(log_ratio: float, rng: np.random.Generator) -> bool:
    """Metropolis acceptance with probability min(1, exp(log_ratio)), in log space (§0.3)."""
    return log_ratio >= 0.0 or math.log(1.0 - rng.random()) < log_ratio


def _reporter(iterations: int, progress: Progress) -> Callable[[int], None]:
    """Reports ``progress`` after every 1 % of the public iteration count."""
    every = max(1, iterations // PROGRESS_STEPS)

    def report(done: int) -> None:
        if done % every == 0 or done == iterations:
            progress(done / iterations)

    return report


def _update_counts(counts: IntArray, tree: TreeState, node: int, classes: WordArray) -> IntArray:
    """The leaf × class table after a move at ``node``: only the leaves below it change."""
    start, stop = tree.leaf_range(node)
    updated = counts.copy()
    updated[start:stop] = leaf_class_counts(tree.leaves[start:stop], classes)
    return updated


def _update_classes(
    counts: IntArray, tree: TreeState, new_classes: TreeState, node: int
) -> IntArray:
    """The second tree's leaf × class table after a first-tree move at ``node``: its classes are
    the first tree's leaves, and only the leaves below ``node`` (columns) change."""
    start, stop = new_classes.leaf_range(node)
    updated = counts.copy()
    updated[:, start:stop] = leaf_class_counts(tree.leaves, new_classes.leaves[start:stop])
    return updated


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
    """AltMCMC's tree (§3.4): Metropolis–Hastings on g₁ = −Σ_leaves τ_n·Gini(n) (Δ = 2),
    c = ε/(2·2), ``iterations`` steps, final state. ε-DP at convergence (approximate)."""
    coefficient = em_coefficient(epsilon, GINI_SENSITIVITY)
    masks = SplitMasks(columns, space)
    classes = labels.class_words()
    tree = random_tree(space, masks, columns.all_rows().words, depth, rng)
    counts = leaf_class_counts(tree.leaves, classes)
    score = tree_gini(counts)
    report = _reporter(iterations, progress)
    for done in range(1, iterations + 1):
        node = int(rng.integers(len(tree.keys)))
        key = space.draw(rng, excluded_splits(tree.keys, node, depth))
        proposal = tree.with_split(node, key, masks)
        proposal_counts = _update_counts(counts, proposal, node, classes)
        proposal_score = tree_gini(proposal_counts)
        if _accept(coefficient * (proposal_score - score), rng):
            tree, counts, score = proposal, proposal_counts, proposal_score
        report(done)
    return tree.keys


def pair_score(first: IntArray, second: IntArray, total_rows: int) -> float:
    """score(T_1, T_2) = g(T_1)·(1 + g(T_2))/2 (§3.5, eq. 6): T_1 against makeTarget(a), T_2
    against T_1's leaves; ∈ [0, 1], sensitivity 1."""
    return (
        normalised_purity(first, total_rows) * (1.0 + normalised_purity(second, total_rows)) / 2.0
    )


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
) -> tuple[list[SplitKey], list[SplitKey]]:
    """MCMCTreePair's sampler (§3.5): the first tree (view of ``spaces[0]``) predicts
    ``labels`` (makeTarget(a)), the second predicts the first's leaves. A step picks an inner
    node of either tree uniformly. c = ε/(2·1); ``iterations`` steps, final state. ε-DP at
    convergence (approximate)."""
    coefficient = em_coefficient(epsilon, PAIR_SENSITIVITY)
    first_masks, second_masks = SplitMasks(columns, spaces[0]), SplitMasks(columns, spaces[1])
    root, total_rows = columns.all_rows().words, columns.n_rows
    classes = labels.class_words()
    first = random_tree(spaces[0], first_masks, root, depth, rng)
    second = random_tree(spaces[1], second_masks, root, depth, rng)
    first_counts = leaf_class_counts(first.leaves, classes)
    second_counts = leaf_class_counts(second.leaves, first.leaves)
    score = pair_score(first_counts, second_counts, total_rows)
    inner = len(first.keys)
    report = _reporter(iterations, progress)
    for done in range(1, iterations + 1):
        node = int(rng.integers(2 * inner))
        if node < inner:
            key = spaces[0].draw(rng, excluded_splits(first.keys, node, depth))
            new_first = first.with_split(node, key, first_masks)
            new_first_counts = _update_counts(first_counts, new_first, node, classes)
            new_second = second
            new_second_counts = _update_classes(second_counts, second, new_first, node)
        else:
            node -= inner
            key = spaces[1].draw(rng, excluded_splits(second.keys, node, depth))
            new_first, new_first_counts = first, first_counts
            new_second = second.with_split(node, key, second_masks)
            new_second_counts = _update_counts(second_counts, new_second, node, first.leaves)
        new_score = pair_score(new_first_counts, new_second_counts, total_rows)
        if _accept(coefficient * (new_score - score), rng):
            first, first_counts = new_first, new_first_counts
            second, second_counts = new_second, new_second_counts
            score = new_score
        report(done)
    return first.keys, second.keys
