"""Exact sampler of ``brl.sample_rule_list_exact`` (ALGORITHMS.md §5.1, §5.3; §6 #16).

The target is the one of ``brl.sample_rule_list`` (:func:`~dpmine_server.operations.
rule_list_mcmc.target_log_density`) restricted to the public finite set D_L of rule lists of at
most L = ``max_rules`` distinct antecedents of the public list A (|A| = M), the empty list
included: |D_L| = Σ_{m=0}^{L} M!/(M − m)!. Every list is enumerated and scored, and one list is
drawn by the exponential mechanism (Gumbel-max, :func:`~dpmine_server.dp.mechanisms.
exponential_mechanism`), so the draw is exact: no chain, no convergence.

Privacy (pure ε-DP): D_L depends on public values only (A, L); the prior restricted to D_L is
data-independent; the quality (ℓ for the ``likelihood`` target, with the prior as base measure;
u = ℓ + ln p for ``posterior``) moves by at most Δu = ln((N_max − 1 + α0 + α1)/min(α0, α1)) when
one row is added or removed (§5.3: the row changes one capture count of every list), one-sided
for ℓ (§0.8). An exponential mechanism over a public finite set with a data-independent base
measure and such a quality is ε-DP (§0.3, §0.8); the same sensitivity as the MCMC target
(:func:`~dpmine_server.operations.rule_list_mcmc.target_sensitivity`).

Enumeration (work a public function of M, L and N_max): depth first over the prefixes of fewer
than L rules. At a prefix p the rows it leaves uncaptured, ``remaining`` (both classes, (2, W)
words), are intersected with the complement of every unused antecedent by one compiled pass
(:func:`uncaptured_counts`: popcounts, no temporary arrays), which gives every extension's
capture counts, hence ℓ of every list p + (a,) by the same
:func:`~dpmine_server.operations.rule_list_mcmc.rule_log_likelihoods` as the chain; a prefix
that is extended further builds its own remaining words once. The prior is
:func:`~dpmine_server.operations.rule_list_mcmc.log_prior`, which depends on a list only
through the sequence of its antecedents' cardinalities (it reads nothing else of them): one call
per sequence, kept for the run.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dpmine.wire import RuleListTarget
from dpmine_server.compiled import compiled, popcount
from dpmine_server.dp.mechanisms import exponential_mechanism
from dpmine_server.operations.base import Progress
from dpmine_server.operations.rule_list_mcmc import (
    ClassWords,
    PriorTables,
    log_prior,
    rule_log_likelihoods,
    target_sensitivity,
)

__all__ = [
    "ListBlock",
    "ScoredLists",
    "draw_rule_list",
    "sample_rule_list_exact",
    "score_rule_lists",
    "uncaptured_counts",
]

WordArray = npt.NDArray[np.uint64]
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class ListBlock:
    """The lists ``prefix + (a,)`` for every ``a`` in ``extensions`` (increasing), in that
    order; the block of the empty list has no prefix and the extension −1 (no rule)."""

    prefix: tuple[int, ...]
    extensions: IntArray

    def lists(self) -> Iterator[tuple[int, ...]]:
        """The block's lists, in order."""
        for antecedent in self.extensions.tolist():
            yield self.prefix if antecedent < 0 else (*self.prefix, antecedent)


@dataclass(frozen=True, slots=True)
class ScoredLists:
    """Every list of D_L, block by block, with its log-likelihood ℓ and log-prior ln p (§5.1),
    both in the blocks' order. PRIVATE (ℓ)."""

    blocks: list[ListBlock]
    log_likelihood: FloatArray
    log_prior: FloatArray

    def rules_at(self, index: int) -> list[int]:
        """The list at position ``index`` of the enumeration."""
        for block in self.blocks:
            if index < len(block.extensions):
                return list(list(block.lists())[index])
            index -= len(block.extensions)
        raise IndexError(index)


def _class_counts(rows: WordArray) -> IntArray:
    """(negatives, positives) of (…, 2, W) words, summed over the last axis."""
    return np.asarray(np.bitwise_count(rows).sum(axis=-1, dtype=np.int64), dtype=np.int64)


@compiled
def uncaptured_counts(remaining: WordArray, outside: WordArray, extensions: IntArray) -> IntArray:
    """(negatives, positives) that a prefix's ``remaining`` rows ((2, W) words) keep after each
    antecedent a of ``extensions``, whose complement is ``outside[a]``: an (E, 2) array of the
    popcounts of ``remaining[c] & outside[a]``, the same counts as the vectorised
    ``bitwise_count(remaining & outside[extensions]).sum(-1)`` without its (E, 2, W) array."""
    counts = np.zeros((extensions.shape[0], 2), dtype=np.int64)
    words = remaining.shape[1]
    for position in range(extensions.shape[0]):
        complement = outside[extensions[position]]
        for label in range(2):
            total = np.int64(0)
            for word in range(words):
                total += popcount(remaining[label, word] & complement[word])
            counts[position, label] = total
    return counts


def _extension_priors(
    prefix: tuple[int, ...],
    extensions: IntArray,
    tables: PriorTables,
    cardinality_of: IntArray,
    known: dict[tuple[int, ...], float],
) -> FloatArray:
    """ln p(prefix + (a,)) for every a. :func:`log_prior` depends on a list only through its
    sequence of cardinalities (``cardinality_of``), so it is called once per new sequence and
    kept in ``known``."""
    cardinalities = cardinality_of[extensions]
    shape = tuple(int(cardinality_of[rule]) for rule in prefix)
    by_cardinality = np.zeros(len(tables.available), dtype=np.float64)
    present = np.bincount(cardinalities, minlength=len(tables.available))
    for cardinality in np.flatnonzero(present).tolist():
        key = (*shape, cardinality)
        if key not in known:
            first = int(np.argmax(cardinalities == cardinality))
            known[key] = log_prior((*prefix, int(extensions[first])), tables)
        by_cardinality[cardinality] = known[key]
    return by_cardinality[cardinalities]


def score_rule_lists(
    words: ClassWords,
    tables: PriorTables,
    *,
    alpha: tuple[float, float],
    max_rules: int,
    progress: Progress,
) -> ScoredLists:
    """ℓ and ln p of every list of at most ``max_rules`` distinct antecedents (module
    docstring): depth first, one compiled pass over the unused antecedents per prefix."""
    size = len(tables.cardinalities)
    depth = min(max_rules, size)
    blocks = [ListBlock((), np.asarray([-1], dtype=np.int64))]
    left = _class_counts(words.classes)
    likelihoods = [rule_log_likelihoods(left, alpha)]
    priors = [np.asarray([log_prior((), tables)], dtype=np.float64)]
    cardinality_of = np.asarray(tables.cardinalities, dtype=np.int64)
    outside = np.ascontiguousarray(words.outside, dtype=np.uint64)
    known: dict[tuple[int, ...], float] = {}

    def visit(
        prefix: tuple[int, ...],
        extensions: IntArray,
        remaining: WordArray,
        left: IntArray,
        rules: float,
    ) -> None:
        after = uncaptured_counts(remaining, outside, extensions)
        # ℓ of the captured rows and of the rows left to the default rule, in one call.
        terms = rule_log_likelihoods(np.concatenate([left[np.newaxis, :] - after, after]), alpha)
        captured, default = terms[: len(extensions)], terms[len(extensions) :]
        likelihoods.append(rules + captured + default)
        priors.append(_extension_priors(prefix, extensions, tables, cardinality_of, known))
        blocks.append(ListBlock(prefix, extensions))
        if len(prefix) + 1 < depth:
            for position, antecedent in enumerate(extensions.tolist()):
                visit(
                    (*prefix, antecedent),
                    np.concatenate((extensions[:position], extensions[position + 1 :])),
                    remaining & outside[antecedent],
                    after[position],
                    rules + float(captured[position]),
                )
        if len(prefix) == 1:  # public: the first rule's position in A
            progress((prefix[0] + 1) / size)

    if depth > 0:
        every = np.arange(size, dtype=np.int64)
        visit((), every, np.ascontiguousarray(words.classes, dtype=np.uint64), left, 0.0)
    return ScoredLists(blocks, np.concatenate(likelihoods), np.concatenate(priors))


def draw_rule_list(
    scored: ScoredLists,
    *,
    alpha: tuple[float, float],
    epsilon: float,
    n_max: int,
    rng: np.random.Generator,
    target: RuleListTarget = "likelihood",
) -> list[int]:
    """One exact draw from π over the scored lists: ``likelihood`` π(d) ∝ p(d)·exp(c·ℓ(d)),
    ``posterior`` π(d) ∝ exp(c·u(d)), c from :func:`target_sensitivity` (Δu from the public
    N_max), by the exponential mechanism's Gumbel-max. Pure ε-DP (module docstring)."""
    sensitivity = target_sensitivity(target, n_max, alpha)
    if target == "likelihood":
        index = exponential_mechanism(
            scored.log_likelihood,
            epsilon=epsilon,
            sensitivity=sensitivity,
            rng=rng,
            log_base_measure=scored.log_prior,
        )
    else:
        index = exponential_mechanism(
            scored.log_likelihood + scored.log_prior,
            epsilon=epsilon,
            sensitivity=sensitivity,
            rng=rng,
        )
    return scored.rules_at(index)


def sample_rule_list_exact(
    words: ClassWords,
    tables: PriorTables,
    *,
    alpha: tuple[float, float],
    epsilon: float,
    n_max: int,
    max_rules: int,
    rng: np.random.Generator,
    progress: Progress,
    target: RuleListTarget = "likelihood",
) -> list[int]:
    """:func:`score_rule_lists` then :func:`draw_rule_list`: one exact draw over D_L, pure
    ε-DP. Nothing but the drawn list leaves this function."""
    scored = score_rule_lists(words, tables, alpha=alpha, max_rules=max_rules, progress=progress)
    return draw_rule_list(scored, alpha=alpha, epsilon=epsilon, n_max=n_max, rng=rng, target=target)
