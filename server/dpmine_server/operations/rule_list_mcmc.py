"""Kernels of DP Bayesian rule lists (ALGORITHMS.md §5.1, §5.3, §5.4): the BRL prior and
likelihood, the Metropolis–Hastings proposal with its Hastings ratio, the sampler of
``brl.sample_rule_list`` and the capture counts of ``brl.point_estimates``.

A rule list d = (a_1, …, a_m) is a list of distinct positions into the public antecedent list
A (|A| = M), followed by the implicit default rule. Row x is captured by the first a_j it
satisfies, else by the default (rule m + 1). Rows whose label is missing belong to no class
and are captured by nothing.

Data layout (§7): every antecedent's *complement* as packed 64-bit words (``outside``, M × W)
and the rows of each class stacked as a (2, W) word array (row 0 negative, row 1 positive).
The rows not captured by the first j rules are ``remaining[j] = remaining[j−1] & outside[a_j]``
(both classes at once, by broadcasting); N_{j,y} = |remaining[j−1]|_y − |remaining[j]|_y. A
proposal that first differs from the current list at position p leaves remaining[0..p]
unchanged, so only the positions from p on are recomputed.

The chain of ``brl.sample_rule_list`` starts from :data:`PUBLIC_START`, the empty list, and is
*lazy*: every step holds with probability :data:`HOLD_PROBABILITY` = ½ before it proposes (not
in the thesis; ALGORITHMS.md §6 #16). Holding leaves π invariant and makes the kernel (I + P)/2,
whose spectrum lies in [0, 1]. Without it the chain can be periodic: over one antecedent, with
λ tuned so that adding it is uphill by a hair on one dataset, the chain there alternates
[] ↔ [a] for any fixed number of steps while on the neighbour it mixes in a few, which leaks
δ ≈ 0.35 at ε = 1 however long the chain (tests/privacy/test_audit_rule_lists.py). Holding
also bounds short chains: a step's log acceptance ratio moves by at most ε between neighbours
(c·Δu, :func:`target_coefficient`) and its hold probability stays in [½, 1], so every kernel
entry changes by a factor at most max(e^ε, 2) and T steps are pure T·max(ε, ln 2)-DP (loose,
but no δ: the chain that never holds can stay put with probability 0 on one side only). The tree
samplers need no holding: a step there redraws one node's split independently of its current
split (a Metropolis-within-Gibbs independence sampler), whose spectrum is nonnegative.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt
from scipy.special import gammaln, logsumexp

from dpmine.wire import RuleListTarget
from dpmine_server.dp.mechanisms import OneSided, Sensitivity, em_coefficient
from dpmine_server.operations.base import Progress, progress_checkpoints

__all__ = [
    "HOLD_PROBABILITY",
    "PUBLIC_START",
    "Chain",
    "ClassWords",
    "MoveType",
    "PriorTables",
    "Proposal",
    "available_moves",
    "capture_counts",
    "extend_chain",
    "log_hastings_ratio",
    "log_likelihood",
    "log_prior",
    "propose",
    "rule_log_likelihoods",
    "sample_rule_list",
    "start_chain",
    "target_coefficient",
    "target_log_density",
    "target_sensitivity",
    "utility_sensitivity",
]

WordArray = npt.NDArray[np.uint64]
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

MoveType = Literal["move", "add", "cut"]

#: Uniform draws generated at once (five per iteration).
_BLOCK = 1024
#: The public start of every chain (§5.3, §6 #16): the empty list, the same state for every
#: antecedent list and every order of it, so the analyst does not choose where the chain starts.
PUBLIC_START: tuple[int, ...] = ()
#: Probability that a step holds (proposes nothing): the lazy chain (I + P)/2 (module docstring).
HOLD_PROBABILITY = 0.5


# --------------------------------------------------------------------------------------------
# Model (§5.1)


def utility_sensitivity(n_max: int, alpha: tuple[float, float]) -> float:
    """Δu = ln((N_max − 1 + α0 + α1)/min(α0, α1)) (§5.3, Lemma 2 generalised): one added or
    removed row moves one capture count, hence u by at most this; from public values only."""
    alpha_0, alpha_1 = alpha
    return math.log((n_max - 1 + alpha_0 + alpha_1) / min(alpha_0, alpha_1))


def rule_log_likelihoods(captures: IntArray, alpha: tuple[float, float]) -> FloatArray:
    """The Dirichlet–multinomial term of every rule (§5.1), constant terms included:
    lnΓ(α0+α1) − lnΓ(α0) − lnΓ(α1) + lnΓ(N0+α0) + lnΓ(N1+α1) − lnΓ(N0+N1+α0+α1).
    ``captures`` has one row (N_{j,0}, N_{j,1}) per rule."""
    alpha_0, alpha_1 = alpha
    counts = np.asarray(captures, dtype=np.float64).reshape(-1, 2)
    negatives, positives = counts[:, 0], counts[:, 1]
    constant = gammaln(alpha_0 + alpha_1) - gammaln(alpha_0) - gammaln(alpha_1)
    terms = (
        constant
        + gammaln(negatives + alpha_0)
        + gammaln(positives + alpha_1)
        - gammaln(negatives + positives + alpha_0 + alpha_1)
    )
    return np.asarray(terms, dtype=np.float64)


def log_likelihood(captures: IntArray, alpha: tuple[float, float]) -> float:
    """ln p(y | d, α): the sum of :func:`rule_log_likelihoods` over the m + 1 rules (§5.1)."""
    return float(np.sum(rule_log_likelihoods(captures, alpha)))


def _poisson_log_pmf(k: FloatArray, mean: float) -> FloatArray:
    return np.asarray(k * math.log(mean) - mean - gammaln(k + 1.0), dtype=np.float64)


@dataclass(frozen=True, slots=True)
class PriorTables:
    """Public constants of the BRL prior (§5.1) for one antecedent list.

    ``cardinalities[a]`` = |a_a|; ``available[c]`` = number of antecedents of cardinality c;
    ``log_length[m]`` = ln p(m | A, λ) = ln Poisson(m; λ) − ln Σ_{k=0}^{M} Poisson(k; λ);
    ``log_cardinality[c]`` = ln Poisson(c; η); ``log_normaliser[R]`` = ln Σ_{k ∈ R} Poisson(k; η)
    for every set R of cardinalities, as a bit mask (bit k set when k ∈ R).
    """

    cardinalities: tuple[int, ...]
    available: tuple[int, ...]
    log_length: tuple[float, ...]
    log_cardinality: tuple[float, ...]
    log_normaliser: tuple[float, ...]

    @classmethod
    def of(
        cls, cardinalities: Sequence[int], *, expected_length: float, expected_cardinality: float
    ) -> PriorTables:
        """Tables for antecedents of the given cardinalities, λ and η."""
        size = len(cardinalities)
        longest = max(cardinalities, default=0)
        available = [0] * (longest + 1)
        for cardinality in cardinalities:
            available[cardinality] += 1
        lengths = _poisson_log_pmf(np.arange(size + 1, dtype=np.float64), expected_length)
        log_length = lengths - float(logsumexp(lengths))
        log_cardinality = _poisson_log_pmf(
            np.arange(longest + 1, dtype=np.float64), expected_cardinality
        )
        # In log space: Poisson pmfs underflow to 0 for extreme η.
        log_normaliser = [
            float(logsumexp([log_cardinality[k] for k in range(longest + 1) if mask >> k & 1]))
            if mask
            else -math.inf
            for mask in range(2 ** (longest + 1))
        ]
        return cls(
            cardinalities=tuple(int(c) for c in cardinalities),
            available=tuple(available),
            log_length=tuple(float(x) for x in log_length),
            log_cardinality=tuple(float(x) for x in log_cardinality),
            log_normaliser=tuple(log_normaliser),
        )


def log_prior(rules: Sequence[int], tables: PriorTables) -> float:
    """ln p(d | A, λ, η) (§5.1): ln p(m) + Σ_j [ln p(c_j | c_<j) + ln p(a_j | a_<j, c_j)] with
    p(c_j | ·) = Poisson(c_j; η)/Σ_{k ∈ R_j} Poisson(k; η), R_j the cardinalities that still
    have an unused antecedent before position j (pmfs summed, not log-pmfs), and
    p(a_j | ·) = 1/#unused antecedents of cardinality c_j."""
    unused = list(tables.available)
    remaining = sum(1 << c for c, left in enumerate(unused) if left > 0)  # R_1 as a bit mask
    total = tables.log_length[len(rules)]
    for rule in rules:
        cardinality = tables.cardinalities[rule]
        total += tables.log_cardinality[cardinality] - tables.log_normaliser[remaining]
        total -= math.log(unused[cardinality])
        unused[cardinality] -= 1
        if unused[cardinality] == 0:
            remaining &= ~(1 << cardinality)
    return total


# --------------------------------------------------------------------------------------------
# Proposal (§5.3)


def available_moves(length: int, size: int) -> tuple[MoveType, ...]:
    """Move types available at list length R over M = ``size`` antecedents (§5.3): "move" if
    R ≥ 2, "add" if R < M, "cut" if R ≥ 1; one is chosen uniformly."""
    moves: list[MoveType] = []
    if length >= 2:
        moves.append("move")
    if length < size:
        moves.append("add")
    if length >= 1:
        moves.append("cut")
    return tuple(moves)


def _move_probability(move: MoveType, length: int, size: int) -> float:
    """p_x(R): the probability of choosing move type x at length R."""
    moves = available_moves(length, size)
    return 1.0 / len(moves) if move in moves else 0.0


def log_hastings_ratio(move: MoveType, length: int, size: int) -> float:
    """ln Q(d | d*)/Q(d* | d) for a move from length R = ``length`` (§5.3, general formula):
    move 0; add p_cut(R+1)·(M−R)/p_add(R); cut p_add(R−1)/(p_cut(R)·(M−R+1))."""
    if move == "move":
        return 0.0
    if move == "add":
        forward = _move_probability("add", length, size) / (size - length)
        backward = _move_probability("cut", length + 1, size)
        return math.log(backward) - math.log(forward)
    forward = _move_probability("cut", length, size)
    backward = _move_probability("add", length - 1, size) / (size - length + 1)
    return math.log(backward) - math.log(forward)


@dataclass(frozen=True, slots=True)
class Proposal:
    """A proposed list, the first position where it differs from the current one, the last
    position whose "remaining rows" can differ (None: up to the end) and ln of the Hastings
    ratio."""

    rules: list[int]
    start: int
    stop: int | None
    log_ratio: float


def _pick(uniform: float, count: int) -> int:
    """⌊u·count⌋ for u uniform on [0, 1), guarded against rounding up to ``count``."""
    return min(int(uniform * count), count - 1)


def propose(
    rules: list[int], unused: list[int], size: int, uniforms: tuple[float, float, float]
) -> Proposal:
    """One proposal from d = ``rules`` (§5.3), driven by three uniforms on [0, 1).

    A move type uniformly among the available ones; move: an ordered pair of distinct positions
    (i, k), the rule at i reinserted at k; add: an unused antecedent uniformly (``unused`` lists
    them) at one of R + 1 positions; cut: a position uniformly."""
    length = len(rules)
    moves = available_moves(length, size)
    move = moves[_pick(uniforms[0], len(moves))]
    ratio = log_hastings_ratio(move, length, size)
    if move == "move":
        source = _pick(uniforms[1], length)
        target = _pick(uniforms[2], length - 1)
        target += target >= source
        moved = rules[:source] + rules[source + 1 :]
        moved.insert(target, rules[source])
        return Proposal(moved, min(source, target), max(source, target) + 1, ratio)
    if move == "add":
        antecedent = unused[_pick(uniforms[1], len(unused))]
        position = _pick(uniforms[2], length + 1)
        return Proposal([*rules[:position], antecedent, *rules[position:]], position, None, ratio)
    position = _pick(uniforms[1], length)
    return Proposal(rules[:position] + rules[position + 1 :], position, None, ratio)


# --------------------------------------------------------------------------------------------
# Captures (§5.1, §5.4)


@dataclass(frozen=True, slots=True)
class ClassWords:
    """Packed rows: ``outside[a]`` = rows *not* satisfying antecedent a (M × W words) and
    ``classes`` = (negative rows, positive rows) as a (2, W) word array. PRIVATE."""

    outside: WordArray
    classes: WordArray


def _class_counts(rows: WordArray) -> IntArray:
    """(negatives, positives) among a (2, W) word array."""
    return np.asarray(np.bitwise_count(rows).sum(axis=1, dtype=np.int64), dtype=np.int64)


def capture_counts(words: ClassWords, rules: Sequence[int]) -> IntArray:
    """N_{j,y} for j = 1..m and the default rule last: an (m + 1) × 2 array (§5.1, §5.4)."""
    remaining = words.classes
    left = _class_counts(remaining)
    captures = []
    for rule in rules:
        remaining = remaining & words.outside[rule]
        after = _class_counts(remaining)
        captures.append(left - after)
        left = after
    captures.append(left)
    return np.asarray(captures, dtype=np.int64).reshape(-1, 2)


# --------------------------------------------------------------------------------------------
# Sampler (§5.3)


@dataclass(slots=True)
class Chain:
    """The sampler's state: the list, every prefix's remaining rows and their class counts, and
    the likelihood term of every rule (default last)."""

    rules: list[int]
    remaining: list[WordArray]
    left: list[IntArray]
    terms: list[float]
    prior: float

    @property
    def log_likelihood(self) -> float:
        """ℓ(d), the log-likelihood (§5.1)."""
        return math.fsum(self.terms)

    @property
    def utility(self) -> float:
        """u(d) = log-likelihood + log-prior."""
        return self.log_likelihood + self.prior


def target_log_density(chain: Chain, target: RuleListTarget, coefficient: float) -> float:
    """ln π(d) up to a constant: ``likelihood`` ln p(d) + c·ℓ(d); ``posterior`` c·u(d)."""
    if target == "likelihood":
        return chain.prior + coefficient * chain.log_likelihood
    return coefficient * chain.utility


def target_sensitivity(
    target: RuleListTarget, n_max: int, alpha: tuple[float, float]
) -> Sensitivity:
    """Sensitivity of the target's quality (§5.3, §0.8). ``likelihood`` (quality ℓ, prior as
    base measure): one-sided (Δ_up = 0, Δ_down = Δu), since an added row only lowers ℓ (its
    capture term gains ln((N_{j,y}+α_y)/(N_j+α0+α1)) < 0), by at most Δu, while the prior does
    not depend on the data. ``posterior`` (quality u): the thesis' symmetric Δu."""
    sensitivity = utility_sensitivity(n_max, alpha)
    if target == "likelihood":
        return OneSided(up=0.0, down=sensitivity)
    return sensitivity


def target_coefficient(
    target: RuleListTarget, epsilon: float, n_max: int, alpha: tuple[float, float]
) -> float:
    """c of the target (§5.3, §0.8): ``likelihood`` ε/Δu, ``posterior`` ε/(2Δu)
    (:func:`target_sensitivity`)."""
    return em_coefficient(epsilon, target_sensitivity(target, n_max, alpha))


def extend_chain(
    words: ClassWords,
    alpha: tuple[float, float],
    tables: PriorTables,
    base: Chain,
    proposal: Proposal,
) -> Chain:
    """The chain state of ``proposal``: positions before ``start`` are reused from ``base``,
    the positions up to ``stop`` (or the end) recomputed, the rest reused."""
    rules, start = proposal.rules, proposal.start
    stop = len(rules) if proposal.stop is None else proposal.stop
    remaining = base.remaining[: start + 1]
    left = base.left[: start + 1]
    for position in range(start, stop):
        rows = remaining[position] & words.outside[rules[position]]
        remaining.append(rows)
        left.append(_class_counts(rows))
    # A list of m rules has m + 1 prefixes: 0..m.
    remaining.extend(base.remaining[stop + 1 : len(rules) + 1])
    left.extend(base.left[stop + 1 : len(rules) + 1])
    changed = np.asarray(left[start : stop + 1], dtype=np.int64)
    captures = changed[:-1] - changed[1:]
    if stop == len(rules):  # the default rule's captures changed too
        captures = np.vstack([captures, changed[-1:]])
    fresh = rule_log_likelihoods(captures, alpha).tolist()
    kept = [] if proposal.stop is None else base.terms[start + len(fresh) :]
    terms = base.terms[:start] + fresh + kept
    return Chain(rules, remaining, left, terms, log_prior(rules, tables))


def start_chain(
    words: ClassWords, alpha: tuple[float, float], tables: PriorTables, initial: Sequence[int]
) -> Chain:
    """The chain state of the list ``initial``, computed from scratch."""
    empty = Chain([], [words.classes], [_class_counts(words.classes)], [], 0.0)
    return extend_chain(words, alpha, tables, empty, Proposal(list(initial), 0, None, 0.0))


def _uniform_blocks(rng: np.random.Generator, iterations: int) -> Iterator[list[float]]:
    """Five uniforms on [0, 1) per iteration, generated in blocks."""
    done = 0
    while done < iterations:
        block = min(_BLOCK, iterations - done)
        yield from rng.random((block, 5)).tolist()
        done += block


def sample_rule_list(
    words: ClassWords,
    tables: PriorTables,
    *,
    alpha: tuple[float, float],
    epsilon: float,
    n_max: int,
    iterations: int,
    rng: np.random.Generator,
    progress: Progress,
    target: RuleListTarget = "likelihood",
    initial: Sequence[int] = PUBLIC_START,
) -> list[int]:
    """The final state of ``iterations`` lazy Metropolis–Hastings steps targeting π (§5.3,
    :func:`target_log_density`): a step holds with probability :data:`HOLD_PROBABILITY`, else
    it proposes and accepts with min(1, π(d*)/π(d)·ratio), Δu from the public N_max
    (:func:`utility_sensitivity`). ε-DP at convergence (approximate). The operation always
    starts from :data:`PUBLIC_START`; ``initial`` is for tests that start from draws of π.
    Nothing but the final list leaves this function."""
    size = len(tables.cardinalities)
    coefficient = target_coefficient(target, epsilon, n_max, alpha)
    chain = start_chain(words, alpha, tables, initial)
    utility = target_log_density(chain, target, coefficient)
    used = set(chain.rules)
    unused = [a for a in range(size) if a not in used]
    checkpoints = set(progress_checkpoints(iterations))
    uniforms = _uniform_blocks(rng, iterations)
    for done, (hold, pick, first, second, accept) in enumerate(uniforms, 1):
        if hold >= HOLD_PROBABILITY:
            proposal = propose(chain.rules, unused, size, (pick, first, second))
            candidate = extend_chain(words, alpha, tables, chain, proposal)
            candidate_utility = target_log_density(candidate, target, coefficient)
            log_alpha = candidate_utility - utility + proposal.log_ratio
            if log_alpha >= 0.0 or math.log(1.0 - accept) < log_alpha:
                if len(candidate.rules) != len(chain.rules):
                    unused = _unused_after(unused, chain.rules, candidate.rules)
                chain, utility = candidate, candidate_utility
        if done in checkpoints:
            progress(done / iterations)
    return chain.rules


def _unused_after(unused: list[int], before: list[int], after: list[int]) -> list[int]:
    """``unused`` after an accepted add (one antecedent fewer) or cut (one more)."""
    if len(after) > len(before):
        added = set(after).difference(before).pop()
        return [a for a in unused if a != added]
    return [*unused, *set(before).difference(after)]
