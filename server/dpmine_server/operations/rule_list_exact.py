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
words), are combined with the complements of every unused antecedent at once, ((M − |p|), 2, W)
words; popcounts give every extension's capture counts, hence ℓ of every list p + (a,) by the
same :func:`~dpmine_server.operations.rule_list_mcmc.rule_log_likelihoods` as the chain. The
prior is :func:`~dpmine_server.operations.rule_list_mcmc.log_prior`, which depends on the last
antecedent only through its cardinality: one call per cardinality and prefix.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dpmine.wire import RuleListTarget
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
]

WordArray = npt.NDArray[np.uint64]
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class ListBlock:
    """The lists ``prefix + (a,)`` for every ``a`` in ``extensions`` (increasing), in that
    order; the block of the empty list has no prefix and the extension −1 (no rule)."""

    prefix: tuple[int, ...]
    extensions: tuple[int, ...]

    def lists(self) -> Iterator[tuple[int, ...]]:
        """The block's lists, in order."""
        for antecedent in self.extensions:
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


def _extension_priors(
    prefix: tuple[int, ...], extensions: IntArray, tables: PriorTables
) -> FloatArray:
    """ln p(prefix + (a,)) for every a: :func:`log_prior` depends on a only through |a|."""
    cardinalities = np.asarray([tables.cardinalities[a] for a in extensions], dtype=np.int64)
    priors = np.empty(len(extensions), dtype=np.float64)
    for cardinality in np.unique(cardinalities):
        chosen = cardinalities == cardinality
        representative = int(extensions[np.argmax(chosen)])
        priors[chosen] = log_prior((*prefix, representative), tables)
    return priors


def score_rule_lists(
    words: ClassWords,
    tables: PriorTables,
    *,
    alpha: tuple[float, float],
    max_rules: int,
    progress: Progress,
) -> ScoredLists:
    """ℓ and ln p of every list of at most ``max_rules`` distinct antecedents (module
    docstring): depth first, one vectorised pass over the unused antecedents per prefix."""
    size = len(tables.cardinalities)
    depth = min(max_rules, size)
    blocks = [ListBlock((), (-1,))]
    left = _class_counts(words.classes)
    likelihoods = [rule_log_likelihoods(left, alpha)]
    priors = [np.asarray([log_prior((), tables)], dtype=np.float64)]

    def visit(prefix: tuple[int, ...], remaining: WordArray, left: IntArray, rules: float) -> None:
        used = set(prefix)
        extensions = np.asarray([a for a in range(size) if a not in used], dtype=np.int64)
        rows = remaining[np.newaxis, :, :] & words.outside[extensions][:, np.newaxis, :]
        after = _class_counts(rows)
        captured = rule_log_likelihoods(left[np.newaxis, :] - after, alpha)
        likelihoods.append(rules + captured + rule_log_likelihoods(after, alpha))
        priors.append(_extension_priors(prefix, extensions, tables))
        blocks.append(ListBlock(prefix, tuple(int(a) for a in extensions)))
        if len(prefix) + 1 < depth:
            for position, antecedent in enumerate(extensions):
                visit(
                    (*prefix, int(antecedent)),
                    rows[position],
                    after[position],
                    rules + float(captured[position]),
                )
        if len(prefix) == 1:  # public: the first rule's position in A
            progress((prefix[0] + 1) / size)

    if depth > 0:
        visit((), words.classes, left, 0.0)
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
