"""Compiled Metropolis–Hastings steps of ``tree.mcmc`` (ALGORITHMS.md §3.4) and
``tree.pair_mcmc`` (§3.5), with numba (§7 "Tree MCMC": incremental updates).

The chain lives in arrays (:class:`Chain`, mutated in place) and the steps run in one compiled
loop; :mod:`dpmine_server.operations.tree_mcmc` builds the arrays and draws every random number
from the call's generator beforehand (the node of each step, a uniform for each acceptance test,
and a pool of candidate splits from the base measure). A step at node v takes the first pooled
candidate that no ancestor or descendant of v uses (rejection: exactly the base measure
conditioned on the allowed splits), builds the split's row masks from per-row codes, re-routes
v's subtree into a scratch copy and recounts only the leaves below v. A step's work depends on
the row count, the depth, the number of classes and v's level, not on the rows' values (the
loops are branch-free on them); only the number of rejected candidates depends on the current
splits, as in any rejection sampler.

Scores count a tree's **cells** (ALGORITHMS.md §6 item 18; :mod:`.tree_kernels`): its leaves
and, at every inner node u, the rows of u that reach neither child (a missing value of u's
split). The tables hold the counts of every node (heap order), a cell of u is u's row minus its
children's rows, and a proposal at v recounts every node below v (34/7 nodes on average at
depth 3 against 24/7 leaves: the work grows by a public factor).

Row masks: a split (family f, value v) sends left the rows whose code c in family f satisfies
0 ≤ c ≤ v (``ordered``: numeric ranks, the number of lattice points below the value) or c = v
(categorical codes; Boolean: 0 = true, 1 = false); rows with c ≥ 0 that fail the test go right,
rows with c = −1 (missing) go nowhere (§3.1). Bitsets are little-endian ``uint64`` words as in
:mod:`dpmine_server.data.bitsets`.

Compiled code is cached on disk (numba ``cache=True``: beside this file when it is writable,
else in the user's cache directory, or in ``NUMBA_CACHE_DIR`` when set), so only the first
process after an install pays the compilation.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from dpmine_server.compiled import compiled, popcount

__all__ = [
    "Chain",
    "Draws",
    "PairTarget",
    "Pool",
    "Target",
    "fill_masks",
    "last_level_weights",
    "mcmc_steps",
    "pair_steps",
]

WordArray = npt.NDArray[np.uint64]
IntArray = npt.NDArray[np.int64]
CodeArray = npt.NDArray[np.int32]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


class Chain(NamedTuple):
    """One tree of a chain: splits, masks and row sets (heap order: m inner nodes, then the
    2^depth leaves), the split codes of its view, and scratch space for a proposal."""

    #: (families, rows) per-row split codes of the view; −1 = missing.
    codes: CodeArray
    #: (families,) True: a threshold family (c ≤ v goes left); False: c = v goes left.
    ordered: BoolArray
    #: (m, 2^depth − 2) the ancestors and descendants of every inner node, −1 padded.
    related: IntArray
    #: (m, 2) the (family, value) key of every inner node.
    keys: IntArray
    #: (m, W) rows going left / right at every inner node.
    left: WordArray
    right: WordArray
    #: (2m + 1, W) the rows of every node.
    nodes: WordArray
    #: Scratch: the proposal's node rows and the proposed split's masks.
    scratch: WordArray
    new_left: WordArray
    new_right: WordArray


class Target(NamedTuple):
    """What a ``tree.mcmc`` chain is scored against: the class rows, the current node × class
    table (every node, heap order) and a scratch table for the proposal."""

    classes: WordArray
    table: IntArray
    proposal: IntArray


class PairTarget(NamedTuple):
    """What a ``tree.pair_mcmc`` chain is scored against: the first tree's class rows, its
    node × class table, the second tree's node × first-tree-leaf table (every node, heap
    order), scratch tables for the proposal, τ (all rows, §3.5) and the score: False for the
    paper's g(T_1)·(1 + g(T_2))/2, True for the Gini gain score (:func:`_gain_score`)."""

    classes: WordArray
    first: IntArray
    second: IntArray
    first_proposal: IntArray
    second_proposal: IntArray
    total_rows: int
    gain: bool


class Draws(NamedTuple):
    """The chain's randomness, drawn beforehand from the call's generator: the node of every
    step, the uniform of every acceptance test; and the EM coefficient c = ε/(2Δ)."""

    picks: IntArray
    uniforms: FloatArray
    coefficient: float


#: Candidate splits (families, values) from the base measure and the first unused one.
Pool = tuple[IntArray, IntArray, int]


@compiled
def fill_masks(
    codes: CodeArray, ordered: bool, value: int, left: WordArray, right: WordArray
) -> None:
    """The left and right row masks of split ``value`` of one family (module docstring).
    Branch-free on the codes: presence and test bits are packed, then combined per word."""
    rows = codes.size
    for word in range(left.size):
        start = word * 64
        present = np.uint64(0)
        hit = np.uint64(0)
        for offset in range(min(64, rows - start)):
            code = codes[start + offset]
            shift = np.uint64(offset)
            present |= np.uint64(code >= 0) << shift
            hit |= np.uint64(code <= value if ordered else code == value) << shift
        left[word] = present & hit
        right[word] = present & ~hit


@compiled
def _level(node: int) -> int:
    """Depth of a heap index (root 0)."""
    level = 0
    while node > 0:
        node = (node - 1) // 2
        level += 1
    return level


@compiled
def _next_allowed(
    chain: Chain, node: int, families: IntArray, values: IntArray, cursor: int
) -> int:
    """Index of the first pooled candidate from ``cursor`` on that no ancestor or descendant
    of ``node`` uses; ``families.size`` when the pool is exhausted."""
    while cursor < families.size:
        allowed = True
        for other in chain.related[node]:
            if other >= 0 and (
                chain.keys[other, 0] == families[cursor] and chain.keys[other, 1] == values[cursor]
            ):
                allowed = False
        if allowed:
            return cursor
        cursor += 1
    return cursor


@compiled
def _depth(chain: Chain) -> int:
    """Split levels of the chain's trees (the first leaf's level)."""
    return _level(chain.keys.shape[0])


@compiled
def _propose(chain: Chain, node: int, family: int, value: int) -> None:
    """Scratch rows of ``node``'s subtree with its split replaced (subtrees kept)."""
    fill_masks(chain.codes[family], chain.ordered[family], value, chain.new_left, chain.new_right)
    chain.scratch[node] = chain.nodes[node]
    first, width = node, 1
    for _ in range(_depth(chain) - _level(node)):
        for parent in range(first, first + width):
            go_left = chain.new_left if parent == node else chain.left[parent]
            go_right = chain.new_right if parent == node else chain.right[parent]
            for word in range(go_left.size):
                rows = chain.scratch[parent, word]
                chain.scratch[2 * parent + 1, word] = rows & go_left[word]
                chain.scratch[2 * parent + 2, word] = rows & go_right[word]
        first, width = 2 * first + 1, 2 * width


@compiled
def _commit(chain: Chain, node: int, family: int, value: int) -> None:
    """Make the proposal at ``node`` the current state."""
    chain.keys[node, 0] = family
    chain.keys[node, 1] = value
    chain.left[node] = chain.new_left
    chain.right[node] = chain.new_right
    first, width = node, 1
    for _ in range(_depth(chain) - _level(node) + 1):
        chain.nodes[first : first + width] = chain.scratch[first : first + width]
        first, width = 2 * first + 1, 2 * width


@compiled
def _proposed_leaves(chain: Chain, node: int) -> tuple[WordArray, int, int]:
    """(the proposal's rows of the leaves below ``node``, first leaf, number of leaves)."""
    depth = _depth(chain)
    width = 1 << (depth - _level(node))
    first = (node + 1) * width - 1
    return chain.scratch[first : first + width], first - chain.keys.shape[0], width


@compiled
def _count(rows: WordArray, classes: WordArray, out: IntArray) -> None:
    """``out[i, k]`` = |rows[i] ∩ classes[k]| by popcount."""
    for i in range(rows.shape[0]):
        for k in range(classes.shape[0]):
            total = np.int64(0)
            for word in range(classes.shape[1]):
                total += popcount(rows[i, word] & classes[k, word])
            out[i, k] = total


@compiled
def _weighted_gini(counts: IntArray) -> float:
    """|c|·Gini(c) = |c| − Σ_k c_k²/|c| of one leaf; 0 when empty (§3.3)."""
    size = 0.0
    squares = 0.0
    for count in counts:
        size += count
        squares += float(count) * float(count)
    return size - squares / size if size > 0 else 0.0


@compiled
def last_level_weights(
    rows: WordArray,
    masks: tuple[WordArray, WordArray],
    classes: WordArray,
    coefficient: float,
    weights: FloatArray,
) -> None:
    """The exact sampler's last level (:mod:`.tree_exact`): for every node b of ``rows``
    (B, W) and split s of ``masks`` = (left, right), each (S, W), add −c·(WG(left) + WG(right) +
    WG(missing)) to ``weights[b, s]``, the children being the node's rows ∩ each mask and the
    missing cell the node's rows in neither (class counts: node − left − right). Work:
    B·K·W + 2·B·S·K·W popcounts, no temporaries but three count vectors."""
    left, right = masks
    n_classes = classes.shape[0]
    node = np.zeros(n_classes, dtype=np.int64)
    going_left = np.zeros(n_classes, dtype=np.int64)
    going_right = np.zeros(n_classes, dtype=np.int64)
    for b in range(rows.shape[0]):
        for k in range(n_classes):
            total = np.int64(0)
            for word in range(classes.shape[1]):
                total += popcount(rows[b, word] & classes[k, word])
            node[k] = total
        for s in range(left.shape[0]):
            for k in range(n_classes):
                to_left = np.int64(0)
                to_right = np.int64(0)
                for word in range(classes.shape[1]):
                    labelled = rows[b, word] & classes[k, word]
                    to_left += popcount(labelled & left[s, word])
                    to_right += popcount(labelled & right[s, word])
                going_left[k] = to_left
                going_right[k] = to_right
            cells = _weighted_gini(going_left) + _weighted_gini(going_right)
            cells += _weighted_gini(node - going_left - going_right)
            weights[b, s] -= coefficient * cells


@compiled
def _cell_gini(table: IntArray, node: int, inner: int) -> float:
    """|c|·Gini(c) of ``node``'s cell: a leaf's rows, or an inner node's rows that reach
    neither child (its row minus its children's rows)."""
    if node >= inner:
        return _weighted_gini(table[node])
    size = 0.0
    squares = 0.0
    for k in range(table.shape[1]):
        count = float(table[node, k] - table[2 * node + 1, k] - table[2 * node + 2, k])
        size += count
        squares += count * count
    return size - squares / size if size > 0 else 0.0


@compiled
def _subtree_gini(table: IntArray, node: int, inner: int) -> float:
    """Σ |c|·Gini(c) over the cells of ``node``'s subtree (``node`` and every node below)."""
    depth = _level(inner)
    total = 0.0
    first, width = node, 1
    for _ in range(depth - _level(node) + 1):
        for cell in range(first, first + width):
            total += _cell_gini(table, cell, inner)
        first, width = 2 * first + 1, 2 * width
    return total


@compiled
def _recount_below(
    rows: WordArray, node: int, inner: int, classes: WordArray, out: IntArray
) -> None:
    """``out[u, k]`` = |rows[u] ∩ classes[k]| for every node u strictly below ``node``."""
    depth = _level(inner)
    first, width = 2 * node + 1, 2
    for _ in range(depth - _level(node)):
        _count(rows[first : first + width], classes, out[first : first + width])
        first, width = 2 * first + 1, 2 * width


@compiled
def _adopt_below(table: IntArray, proposal: IntArray, node: int, inner: int) -> None:
    """Copy the proposal's rows of the nodes strictly below ``node`` into ``table``."""
    depth = _level(inner)
    first, width = 2 * node + 1, 2
    for _ in range(depth - _level(node)):
        table[first : first + width] = proposal[first : first + width]
        first, width = 2 * first + 1, 2 * width


@compiled
def _purity(table: IntArray, total_rows: int) -> float:
    """g(T) = Σ_leaves (τ_n/τ)·Σ_c (τ_{n,c}/τ_n)² (§3.5, eq. 5), τ = ``total_rows``."""
    total = 0.0
    for leaf in range(table.shape[0]):
        size = 0.0
        squares = 0.0
        for count in table[leaf]:
            size += count
            squares += float(count) * float(count)
        total += squares / max(size, 1.0)
    return total / max(total_rows, 1)


@compiled
def _accepted(log_ratio: float, uniform: float) -> bool:
    """Metropolis acceptance with probability min(1, exp(log_ratio)), in log space (§0.3)."""
    return log_ratio >= 0.0 or np.log(1.0 - uniform) < log_ratio


@compiled
def mcmc_steps(
    chain: Chain, target: Target, draws: Draws, span: tuple[int, int], pool: Pool
) -> tuple[int, int]:
    """Steps ``span`` = [start, stop) of the ``tree.mcmc`` chain on g₁ = −Σ_cells τ_c·Gini(c)
    (§3.4, cells: leaves and inner nodes' missing rows), proposals from ``pool``. A move at v
    changes the cells of v's subtree only. Returns (next step, next pool cursor): the next step
    is before ``stop`` when the pool ran out."""
    families, values, cursor = pool
    inner = chain.keys.shape[0]
    start, stop = span
    for step in range(start, stop):
        node = draws.picks[step]
        cursor = _next_allowed(chain, node, families, values, cursor)
        if cursor == families.size:
            return step, cursor
        family, value = families[cursor], values[cursor]
        cursor += 1
        _propose(chain, node, family, value)
        _recount_below(chain.scratch, node, inner, target.classes, target.proposal)
        target.proposal[node] = target.table[node]
        gain = _subtree_gini(target.table, node, inner) - _subtree_gini(
            target.proposal, node, inner
        )
        if _accepted(draws.coefficient * gain, draws.uniforms[step]):
            _commit(chain, node, family, value)
            _adopt_below(target.table, target.proposal, node, inner)
    return stop, cursor


@compiled
def _gain_score(first: IntArray, second: IntArray) -> float:
    """The Gini gain pair score (ALGORITHMS.md §6 item 19): −WGini(T_1; a) + [WGini(T_1's
    leaves over the rows in a leaf of T_1) − WGini(T_2; T_1's leaves)], every WGini summed over
    the tree's cells; the bracket is the gain of T_2 predicting T_1's leaf, 0 when T_1 has one
    non-empty leaf. The second table's root row counts every T_1 leaf (sensitivity: see
    :data:`~dpmine_server.operations.tree_mcmc.GAIN_SENSITIVITY`)."""
    inner = (first.shape[0] - 1) // 2
    return (
        -_subtree_gini(first, 0, inner)
        + _weighted_gini(second[0])
        - _subtree_gini(second, 0, inner)
    )


@compiled
def _pair_score(target: PairTarget, first: IntArray, second: IntArray) -> float:
    """The pair score from the two node tables: the gain score (``target.gain``) or the
    paper's g(T_1)·(1 + g(T_2))/2 (§3.5, eq. 6) of the leaf rows."""
    if target.gain:
        return _gain_score(first, second)
    rows = target.total_rows
    inner = (first.shape[0] - 1) // 2
    return _purity(first[inner:], rows) * (1.0 + _purity(second[inner:], rows)) / 2.0


@compiled
def pair_steps(
    chains: tuple[Chain, Chain],
    target: PairTarget,
    draws: Draws,
    span: tuple[int, int],
    pools: tuple[Pool, Pool],
) -> tuple[int, int, int]:
    """Steps ``span`` = [start, stop) of the ``tree.pair_mcmc`` chain (§3.5): ``picks[s]`` < m
    moves the first tree's node, else the second's node ``picks[s] − m``, with a proposal from
    that tree's pool. Returns (next step, both pool cursors): the next step is before ``stop``
    when a pool ran out."""
    first, second = chains
    cursors = [pools[0][2], pools[1][2]]
    inner = first.keys.shape[0]
    score = _pair_score(target, target.first, target.second)
    start, stop = span
    for step in range(start, stop):
        which = 0 if draws.picks[step] < inner else 1
        node = draws.picks[step] - which * inner
        chain = first if which == 0 else second
        families, values, _ = pools[which]
        at = _next_allowed(chain, node, families, values, cursors[which])
        cursors[which] = at
        if at == families.size:
            return step, cursors[0], cursors[1]
        cursors[which] = at + 1
        _propose(chain, node, families[at], values[at])
        rows, leaf, width = _proposed_leaves(chain, node)
        target.first_proposal[:] = target.first
        target.second_proposal[:] = target.second
        if which == 0:
            _recount_below(chain.scratch, node, inner, target.classes, target.first_proposal)
            _count(second.nodes, rows, target.second_proposal[:, leaf : leaf + width])
        else:
            _recount_below(chain.scratch, node, inner, first.nodes[inner:], target.second_proposal)
        proposed = _pair_score(target, target.first_proposal, target.second_proposal)
        if _accepted(draws.coefficient * (proposed - score), draws.uniforms[step]):
            _commit(chain, node, families[at], values[at])
            target.first[:] = target.first_proposal
            target.second[:] = target.second_proposal
            score = proposed
    return stop, cursors[0], cursors[1]
