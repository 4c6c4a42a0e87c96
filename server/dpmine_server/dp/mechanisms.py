"""The DP mechanisms. Every release of the engine goes through one of these functions.

* :func:`discrete_laplace`: integer counts + two-sided geometric noise from OpenDP's exact sampler
  (CKS20 over exact rationals, randomness from OpenSSL's ``RAND_priv_bytes``), ALGORITHMS.md §0.3.
* :func:`discrete_gaussian`: integer counts + discrete Gaussian noise from OpenDP's exact sampler
  (same source of randomness), ρ-zCDP with ρ = Δ₂²/(2σ²) (issue #24).
* :func:`noisy_counts`: the one entry point of count-like releases: discrete Laplace on a pure
  dataset, the discrete Gaussian of the same ρ on a zCDP one (:func:`count_noise`).
* :func:`exponential_mechanism`: one draw over discrete candidates with an optional
  data-independent base measure, by the Gumbel-max trick in log space (§0.3, §1.5).
* :mod:`dpmine_server.dp.lattice`: released thresholds as points of a public lattice (§1.4).
* :func:`noisy_top_k`: K-fold peeling exponential mechanism as one-shot Gumbel top-K (§4.2).
* :class:`RejectionSampler`: exact EM over explicit candidates plus continuous families (numeric
  thresholds) by rejection from the base measure (§7), prepared once for many independent draws,
  each within a caller's cap on proposals (:class:`~dpmine_server.dp.candidates.CandidateSampler`
  completes a capped draw exactly); :class:`LogWeightSampler` likewise for explicit candidates
  alone.
* :mod:`dpmine_server.dp.topk`: noisy top-K over a huge universe with a lazily revealed tail.

Selections draw from the injected ``numpy.random.Generator`` (randomgen AES counter mode, see
:mod:`dpmine_server.dp.rng`). Floating-point caveat: the Gumbel transforms are float inverse-CDF
transforms; they only choose among candidates (nothing numeric is released from them), which is
the setting DP-ENGINES.md §3 accepts. Released numbers are integers from the exact sampler.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal, TypeVar

import numpy as np
import numpy.typing as npt
import opendp.prelude as dp

from dpmine_server.compiled import compiled_counted_free, kernel_input
from dpmine_server.public_cache import public_cache

__all__ = [
    "FIRST_PICK_BATCH",
    "MAX_PICK_BATCH",
    "BatchWork",
    "CountNoiseKind",
    "CountRelease",
    "LogWeightSampler",
    "OneSided",
    "RejectionSampler",
    "Sensitivity",
    "batch_work",
    "count_noise",
    "count_noise_law",
    "discrete_gaussian",
    "discrete_laplace",
    "em_coefficient",
    "exponential_mechanism",
    "gaussian_sigma",
    "gumbel_scores",
    "laplace_scale",
    "noisy_counts",
    "noisy_top_k",
]

dp.enable_features("contrib")

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
T = TypeVar("T")

#: One exact draw over explicit candidates and families: ("explicit", index) or ("family", x).
Choice = tuple[Literal["explicit"], int] | tuple[Literal["family"], T]

#: Envelope picks (and proposals) of the first batch of a :meth:`RejectionSampler.draw`; each
#: further batch doubles, up to :data:`MAX_PICK_BATCH` (never past the draw's limit). A draw
#: accepted early pays one small batch; one that spends a large cap pays few batches.
FIRST_PICK_BATCH = 64
MAX_PICK_BATCH = 8192
#: ``propose(families, rng)`` of :meth:`RejectionSampler.draw`: one proposal from each listed
#: family, their log-weights and a builder of the k-th.
Proposer = Callable[[IntArray, np.random.Generator], tuple[FloatArray, Callable[[int], T]]]
#: Envelope picks drawn at once when proposals are made one at a time (fewer near the limit).
_SEQUENTIAL_PICKS = 256


@dataclass(frozen=True, slots=True)
class BatchWork:
    """Public bounds on the batched draws of :meth:`RejectionSampler.draw`: proposals weighed
    (accepted, rejected or discarded after an acceptance) and batches."""

    proposals: int
    batches: int


def batch_work(draws: int, cap: int) -> BatchWork:
    """Bounds on the work of ``draws`` batched draws that make at most ``cap`` proposals in all
    (first batch :data:`FIRST_PICK_BATCH`, doubling up to :data:`MAX_PICK_BATCH`).

    Proof. In one draw every batch but the last is rejected whole, so counted; a batch is at
    most :data:`FIRST_PICK_BATCH` plus the batches before it in the draw (64·2^j = 64 +
    64·(2^j − 1), and 8,192 ≤ 64 + 8,128 once capped). A draw that counts p proposals weighs at
    most 2(p − 1) + 64, so all weigh at most 2·cap + 64·draws. Its batches number b(p) ≤ 1 +
    log₂(1 + p/64) + p/8,192 (the sizes before the last sum to less than p), concave in p, so
    over draws whose counts sum to at most ``cap`` they number at most draws·b(cap/draws)."""
    if draws <= 0 or cap <= 0:
        return BatchWork(proposals=0, batches=0)
    share = cap / draws
    per_draw = 1.0 + math.log2(1.0 + share / FIRST_PICK_BATCH) + share / MAX_PICK_BATCH
    return BatchWork(
        proposals=2 * cap + FIRST_PICK_BATCH * draws, batches=math.ceil(draws * per_draw)
    )


def _check_epsilon(epsilon: float) -> None:
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be a positive finite number, got {epsilon!r}")


# Keyed by public values only (ε, sensitivity, scale): these caches hold no private data.
@public_cache(maxsize=1024)
def laplace_scale(*, epsilon: float, sensitivity: int) -> float:
    """The smallest float scale b ≥ sensitivity/epsilon whose OpenDP privacy map is ≤ epsilon."""
    _check_epsilon(epsilon)
    if sensitivity < 1:
        raise ValueError(f"sensitivity must be a positive integer, got {sensitivity}")
    scale = sensitivity / epsilon
    while _vector_laplace(scale).map(sensitivity) > epsilon:
        scale = math.nextafter(scale, math.inf)
    return scale


@public_cache(maxsize=256)
def _vector_laplace(scale: float) -> Any:
    return dp.m.make_laplace(
        dp.vector_domain(dp.atom_domain(T=dp.i64)),
        dp.l1_distance(T=dp.i64),
        scale=scale,
    )


def discrete_laplace(values: npt.ArrayLike, *, epsilon: float, sensitivity: int = 1) -> IntArray:
    """Release integer ``values`` + discrete Laplace noise; ε-DP for L1 sensitivity ``sensitivity``.

    ``sensitivity`` is the L1 sensitivity of the whole vector (1 for the cells of a partition of
    the rows, §0.3). The scale is ``sensitivity/epsilon`` rounded up until OpenDP's own privacy
    map confirms ``map(sensitivity) <= epsilon``. Randomness is OpenDP's (OpenSSL CSPRNG), so no
    generator argument: these draws can never be seeded by anyone.
    """
    counts = _integer_vector(values, "discrete_laplace")
    if isinstance(sensitivity, bool) or not isinstance(sensitivity, int | np.integer):
        raise ValueError(f"sensitivity must be an integer, got {sensitivity!r}")
    measurement = _vector_laplace(laplace_scale(epsilon=epsilon, sensitivity=sensitivity))
    return np.asarray(measurement(counts), dtype=np.int64)


# Keyed by public values only (ε, squared L2 sensitivity): no private data in the cache;
# typed, so that True is refused rather than served the cached σ of 1.
@public_cache(maxsize=1024, typed=True)
def gaussian_sigma(*, epsilon: float, l2_squared: int) -> float:
    """The smallest float σ ≥ Δ₂/ε (Δ₂ = √``l2_squared``) with Δ₂²/(2σ²) ≤ ε²/2 exactly.

    The check is over exact rationals (``Fraction`` of the float σ and ε), so the discrete
    Gaussian of this σ is at most ε²/2-zCDP for L2 sensitivity Δ₂ (CKS20 Theorem 14: ρ =
    Δ₂²/(2σ²); tests/dp/test_discrete_gaussian.py checks OpenDP's own map agrees).
    """
    _check_epsilon(epsilon)
    if isinstance(l2_squared, bool) or not isinstance(l2_squared, int) or l2_squared < 1:
        raise ValueError(f"l2_squared must be a positive integer, got {l2_squared!r}")
    target = Fraction(epsilon) ** 2 / 2
    sigma = math.sqrt(l2_squared) / epsilon
    while Fraction(l2_squared) / (2 * Fraction(sigma) ** 2) > target:
        sigma = math.nextafter(sigma, math.inf)
    return sigma


@public_cache(maxsize=256)
def _vector_gaussian(scale: float) -> Any:
    return dp.m.make_gaussian(
        dp.vector_domain(dp.atom_domain(T=dp.i64)),
        dp.l2_distance(T=dp.i64),
        scale=scale,
    )


def discrete_gaussian(values: npt.ArrayLike, *, epsilon: float, l2_squared: int = 1) -> IntArray:
    """Release integer ``values`` + i.i.d. discrete Gaussian noise N_Z(0, σ²), σ = Δ₂/ε; for L2
    sensitivity Δ₂ = √``l2_squared`` of the whole vector this is ε²/2-zCDP.

    Proof: the discrete Gaussian mechanism is Δ₂²/(2σ²)-zCDP (Canonne, Kamath & Steinke 2020,
    Theorem 14), and :func:`gaussian_sigma` makes Δ₂²/(2σ²) ≤ ε²/2 exactly: the same ρ that an
    ε-DP release is charged on a zCDP dataset. The sampler is OpenDP's exact one over rationals
    with OpenSSL's CSPRNG, like :func:`discrete_laplace`: no generator argument, so no draw can
    reuse randomness of another call or be seeded by anyone.
    """
    counts = _integer_vector(values, "discrete_gaussian")
    measurement = _vector_gaussian(gaussian_sigma(epsilon=epsilon, l2_squared=l2_squared))
    return np.asarray(measurement(counts), dtype=np.int64)


def _integer_vector(values: npt.ArrayLike, name: str) -> IntArray:
    raw = np.atleast_1d(np.asarray(values))
    if raw.ndim != 1 or not np.issubdtype(raw.dtype, np.integer):
        raise ValueError(f"{name} releases a vector of integer counts")
    return raw.astype(np.int64)


#: Which noise count-like releases draw: "laplace" (ε-DP; pure datasets) or
#: "discrete_gaussian" (ε²/2-zCDP; zCDP datasets).
CountNoiseKind = Literal["laplace", "discrete_gaussian"]

_COUNT_NOISE: ContextVar[CountNoiseKind] = ContextVar("count_noise", default="laplace")


@contextmanager
def count_noise(kind: CountNoiseKind) -> Iterator[None]:
    """Within this block, :func:`noisy_counts` draws ``kind`` noise.

    The executor enters it around every kernel with the dataset's unit ("discrete_gaussian" on
    zCDP datasets only). Why a kernel reached without it stays correct: the default is the
    ε-DP discrete Laplace, which on a zCDP dataset costs the same ε²/2 as the Gaussian (Bun &
    Steinke 2016, Prop. 1.4), and every release reports the noise it drew, so a client's
    intervals follow the actual law. Only the executor may choose the Gaussian, and only for
    a zCDP ledger: on a pure one it is not ε-DP.
    """
    token = _COUNT_NOISE.set(kind)
    try:
        yield
    finally:
        _COUNT_NOISE.reset(token)


@dataclass(frozen=True, slots=True)
class CountRelease:
    """Released integer counts and their public noise law: ``kind`` and ``scale`` (the discrete
    Laplace's b, or the discrete Gaussian's σ, of every cell)."""

    values: IntArray
    kind: CountNoiseKind
    scale: float

    def noise(self) -> dict[str, Any]:
        """The wire's ``noise`` field (:class:`dpmine.wire.CountNoise`)."""
        return {"kind": self.kind, "scale": self.scale}


def noisy_counts(
    values: npt.ArrayLike, *, epsilon: float, l1: int, l2_squared: int
) -> CountRelease:
    """Counts released with the noise of the current :func:`count_noise` (Laplace by default).

    ``l1`` and ``l2_squared`` are the vector's L1 sensitivity and squared L2 sensitivity under
    adding or removing one row (the caller proves both; one row moving one cell by one gives
    1 and 1). Laplace: scale l1/ε, ε-DP, hence ε²/2-zCDP. Gaussian: σ = √l2_squared/ε,
    ε²/2-zCDP. Either way the ρ is ε²/2, the charge of a ``"pure"`` release part.
    """
    kind, scale = count_noise_law(epsilon=epsilon, l1=l1, l2_squared=l2_squared)
    if kind == "discrete_gaussian":
        released = discrete_gaussian(values, epsilon=epsilon, l2_squared=l2_squared)
    else:
        released = discrete_laplace(values, epsilon=epsilon, sensitivity=l1)
    return CountRelease(released, kind, scale)


def count_noise_law(*, epsilon: float, l1: int, l2_squared: int) -> tuple[CountNoiseKind, float]:
    """(kind, scale) of the noise :func:`noisy_counts` draws here with these public values: a
    public function of the dataset's unit, ε and the sensitivities."""
    if _COUNT_NOISE.get() == "discrete_gaussian":
        return "discrete_gaussian", gaussian_sigma(epsilon=epsilon, l2_squared=l2_squared)
    return "laplace", laplace_scale(epsilon=epsilon, sensitivity=l1)


def gumbel_scores(log_weights: npt.ArrayLike, *, rng: np.random.Generator) -> FloatArray:
    """``log_weights + Gumbel(0, 1)``; the argmax is an exact draw ∝ exp(log_weights) (§1.5)."""
    weights = np.asarray(log_weights, dtype=np.float64)
    return weights + rng.gumbel(0.0, 1.0, size=weights.shape)


@dataclass(frozen=True, slots=True)
class OneSided:
    """One-sided sensitivities of a quality (ALGORITHMS.md §0.8): adding one row moves every
    candidate's quality up by at most ``up`` and down by at most ``down`` (removing a row moves it
    by the mirror amounts). ``OneSided(1, 0)`` for counts and truncated counts, which only grow."""

    up: float
    down: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.up) and math.isfinite(self.down)):
            raise ValueError("one-sided sensitivities must be finite")
        if self.up < 0 or self.down < 0 or self.up + self.down <= 0:
            raise ValueError(f"one-sided sensitivities must be ≥ 0 with a positive sum, got {self}")


Sensitivity = float | OneSided


def em_coefficient(epsilon: float, sensitivity: Sensitivity) -> float:
    """c in the weight exp(c·q) of an ε-DP exponential mechanism (§0.3, §0.8).

    Symmetric Δ: c = ε/(2Δ). One-sided (Δ_up, Δ_down): c = ε/(Δ_up + Δ_down), since
    P(x | D+r)/P(x | D) = exp(c·(q(x, D+r) − q(x, D)))·Z(D)/Z(D+r)
    ≤ exp(c·Δ_up)·exp(c·Δ_down), and the same in the other direction."""
    _check_epsilon(epsilon)
    if isinstance(sensitivity, OneSided):
        return epsilon / (sensitivity.up + sensitivity.down)
    if not (math.isfinite(sensitivity) and sensitivity > 0):
        raise ValueError(f"sensitivity must be a positive finite number, got {sensitivity!r}")
    return epsilon / (2.0 * sensitivity)


def _log_weights(
    quality: npt.ArrayLike,
    *,
    epsilon: float,
    sensitivity: Sensitivity,
    log_base_measure: npt.ArrayLike | None,
) -> FloatArray:
    coefficient = em_coefficient(epsilon, sensitivity)
    scores = np.asarray(quality, dtype=np.float64)
    if scores.ndim != 1 or scores.size == 0:
        raise ValueError("the exponential mechanism needs a non-empty vector of qualities")
    if not np.all(np.isfinite(scores)):
        raise ValueError("qualities must be finite")
    log_weights = coefficient * scores
    if not np.all(np.isfinite(log_weights)):
        raise ValueError("epsilon·quality/sensitivity overflows; check the inputs")
    if log_base_measure is not None:
        base = np.asarray(log_base_measure, dtype=np.float64)
        if base.shape != scores.shape:
            raise ValueError("log_base_measure must have one entry per candidate")
        if np.any(np.isnan(base)) or np.any(base == np.inf):
            raise ValueError("log_base_measure must be finite or -inf (mass 0)")
        if not np.any(np.isfinite(base)):
            raise ValueError("the base measure gives no candidate positive mass")
        log_weights = log_weights + base
    return log_weights


def exponential_mechanism(
    quality: npt.ArrayLike,
    *,
    epsilon: float,
    sensitivity: Sensitivity,
    rng: np.random.Generator,
    log_base_measure: npt.ArrayLike | None = None,
) -> int:
    """One exponential-mechanism draw; ε-DP when ``quality`` has sensitivity ``sensitivity``.

    P(c) ∝ μ(c)·exp(ε·q(c)/(2Δq)) (§0.3), or exp(ε·q(c)/(Δ_up + Δ_down)) for a
    :class:`OneSided` sensitivity (§0.8), computed as the argmax of log-weights plus Gumbel noise,
    so no weight is ever exponentiated. ``log_base_measure`` is log μ(c) of a data-independent
    base measure (−inf for mass 0); for continuous threshold cells pass the log of the cell's
    number of lattice points and release a lattice point of the chosen cell
    (:mod:`dpmine_server.dp.lattice`, §1.4). Returns the chosen index.
    """
    log_weights = _log_weights(
        quality, epsilon=epsilon, sensitivity=sensitivity, log_base_measure=log_base_measure
    )
    return int(np.argmax(gumbel_scores(log_weights, rng=rng)))


def noisy_top_k(
    quality: npt.ArrayLike,
    *,
    k: int,
    epsilon: float,
    sensitivity: Sensitivity,
    rng: np.random.Generator,
    log_base_measure: npt.ArrayLike | None = None,
) -> IntArray:
    """K candidates without replacement, in selection order; ε-DP in total.

    Equivalent to K rounds of the exponential mechanism with ε/K each, peeling the winner
    (§4.2: "K-fold peeling EM = Gumbel top-K"): one Gumbel perturbation of the log-weights at
    ε/K, then the K largest in decreasing order.
    """
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    log_weights = _log_weights(
        quality, epsilon=epsilon / k, sensitivity=sensitivity, log_base_measure=log_base_measure
    )
    positive = int(np.count_nonzero(np.isfinite(log_weights)))
    if k > positive:
        raise ValueError(f"k = {k} exceeds the {positive} candidates with positive base mass")
    keys = gumbel_scores(log_weights, rng=rng)
    top = np.argpartition(-keys, k - 1)[:k]
    return np.asarray(top[np.argsort(-keys[top], kind="stable")], dtype=np.int64)


_NOT_FINITE_OR_MINUS_INF, _NO_CANDIDATE = 1, 2


@compiled_counted_free
def _normalised_cumulative(weights: FloatArray, out: FloatArray) -> int:
    """``out`` = cumsum(exp(w − max w)) / its last term, by three passes over the weights
    (the vectorised form took eight, with as many temporary arrays; ``out`` may be
    ``weights`` itself: term k is read before it is written); 0, or
    :data:`_NOT_FINITE_OR_MINUS_INF` when a weight is NaN or +∞, :data:`_NO_CANDIDATE` when
    every weight is −∞ (``out`` then unspecified)."""
    top = -np.inf
    for weight in weights:
        if np.isnan(weight) or weight == np.inf:
            return _NOT_FINITE_OR_MINUS_INF
        top = max(top, weight)
    if top == -np.inf:
        return _NO_CANDIDATE
    total = 0.0
    for k in range(weights.size):
        total += np.exp(weights[k] - top)
        out[k] = total
    for k in range(weights.size):
        out[k] /= total
    return 0


class LogWeightSampler:
    """Independent draws ∝ exp(log_weights) by inversion of the normalised cumulative weights.

    Prepared once (O(N)), then O(log N) per draw: for operations that take many independent
    exponential-mechanism draws over the same candidates (§2.3's I initial pairs). Like the
    Gumbel transforms it only chooses among candidates; nothing numeric is released from it."""

    def __init__(self, log_weights: npt.ArrayLike, *, consume: bool = False) -> None:
        """``consume``: the caller hands ``log_weights`` over (a writeable float64 array it
        never reads again), and its memory holds the cumulative weights: one array of the
        candidates' size fewer to allocate (on a first call, fresh memory costs more than the
        arithmetic)."""
        weights = kernel_input(log_weights, np.float64)
        if weights.ndim != 1 or weights.size == 0:
            raise ValueError("the exponential mechanism needs at least one candidate")
        in_place = consume and weights is log_weights
        cumulative = weights if in_place else np.empty(weights.size, dtype=np.float64)
        status = _normalised_cumulative(weights, cumulative)
        if status == _NOT_FINITE_OR_MINUS_INF:
            raise ValueError("log-weights must be finite or -inf")
        if status == _NO_CANDIDATE:
            raise ValueError("the exponential mechanism needs at least one candidate")
        self._cumulative = cumulative

    @property
    def size(self) -> int:
        """Number of candidates."""
        return int(self._cumulative.size)

    def draws(self, count: int, rng: np.random.Generator) -> IntArray:
        """``count`` independent candidate indices."""
        picks = np.searchsorted(self._cumulative, rng.random(count), side="right")
        return np.asarray(np.minimum(picks, self._cumulative.size - 1), dtype=np.int64)

    def draw(self, rng: np.random.Generator) -> int:
        """One candidate index."""
        return int(self.draws(1, rng)[0])


class RejectionSampler:
    """Exact exponential-mechanism draws over explicit candidates plus continuous families.

    Explicit candidates carry their exact log-weights log μ + ε·q/(2Δ). A family f (e.g. all
    threshold pairs of one numeric attribute, §1.4) has base mass exp(family_log_masses[f]);
    a proposal draws x from its normalised base measure with log-weight ε·q(x)/(2Δ), which must
    be ≤ ``log_weight_bound`` (:meth:`draw` asks for them a batch at a time). Envelope: explicit
    weights and mass_f·exp(log_weight_bound) per family; a family proposal is accepted with
    probability exp(ε·q(x)/(2Δ) − log_weight_bound). The envelope is prepared once for any number
    of independent draws (ALGORITHMS.md §7 "exact EM by rejection").

    Every proposal (an envelope pick, then the family's proposal if it picked a family) is
    accepted independently with one probability α ≥ exp(−(log_weight_bound − least c·q)), and
    a draw accepted at its t-th proposal is candidate x with probability (1 − α)^(t−1)·w(x)/M
    (w the EM weight, M the envelope's total): the accepted candidate has exactly the EM law and
    is independent of the number of proposals it took. That number is geometric, so
    :meth:`draw` stops after a caller's cap (a public bound, see
    :func:`~dpmine_server.dp.candidates.rejection_proposal_cap`) and says so.
    """

    def __init__(
        self,
        explicit_log_weights: npt.ArrayLike,
        family_log_masses: npt.ArrayLike,
        *,
        log_weight_bound: float,
        batches: bool = True,
    ) -> None:
        self._explicit_size = int(np.asarray(explicit_log_weights).size)
        self._bound = log_weight_bound
        self._batches = batches
        families = np.asarray(family_log_masses, dtype=np.float64) + log_weight_bound
        self._envelope = LogWeightSampler(
            np.concatenate([np.asarray(explicit_log_weights, dtype=np.float64), families])
        )

    def draw(
        self,
        propose: Proposer[T],
        rng: np.random.Generator,
        *,
        limit: int,
    ) -> tuple[Choice[T] | None, int]:
        """One draw within at most ``limit`` proposals: (the choice, proposals made), or
        (None, ``limit``) when all ``limit`` were rejected. Given that it returns a choice, the
        choice has exactly the EM law (class docstring).

        With ``batches``, proposals are made in batches (:data:`FIRST_PICK_BATCH`, doubling up
        to :data:`MAX_PICK_BATCH`, never past ``limit``): ``propose(families, rng)`` draws one
        x from each listed family's base measure, independently, and returns their log-weights
        and a builder of the k-th x. The batch's envelope picks, proposals and acceptance
        uniforms are independent across positions, so its first accepted position is the
        sequential sampler's first acceptance, in law and in proposal count; the rest of the
        batch is discarded unread. Without, ``propose`` is asked for one family at a time and
        nothing is proposed past the acceptance (for proposals costly to weigh)."""
        if self._batches:
            return self._draw_batched(propose, rng, limit)
        return self._draw_sequential(propose, rng, limit)

    def _draw_batched(
        self,
        propose: Proposer[T],
        rng: np.random.Generator,
        limit: int,
    ) -> tuple[Choice[T] | None, int]:
        made, batch = 0, FIRST_PICK_BATCH
        while made < limit:
            picks = self._envelope.draws(min(batch, limit - made), rng)
            batch = min(2 * batch, MAX_PICK_BATCH)
            family_at = np.flatnonzero(picks >= self._explicit_size)
            log_weights = np.full(picks.size, self._bound, dtype=np.float64)
            build: Callable[[int], T] | None = None
            if family_at.size:
                proposed, build = propose(picks[family_at] - self._explicit_size, rng)
                self._check(proposed)
                log_weights[family_at] = proposed
            # An explicit pick is accepted (log(1 − u) ≤ 0); a proposal w.p. exp(ℓ − bound).
            uniforms = rng.random(picks.size)
            accepted = np.flatnonzero(np.log1p(-uniforms) <= log_weights - self._bound)
            if accepted.size == 0:
                made += int(picks.size)
                continue
            first = int(accepted[0])
            made += first + 1
            index = int(picks[first])
            if index < self._explicit_size:
                return ("explicit", index), made
            assert build is not None
            return ("family", build(int(np.searchsorted(family_at, first)))), made
        return None, made

    def _draw_sequential(
        self,
        propose: Proposer[T],
        rng: np.random.Generator,
        limit: int,
    ) -> tuple[Choice[T] | None, int]:
        made = 0
        while made < limit:
            for pick in self._envelope.draws(min(_SEQUENTIAL_PICKS, limit - made), rng):
                made += 1
                index = int(pick)
                if index < self._explicit_size:
                    return ("explicit", index), made
                proposed, build = propose(np.asarray([index - self._explicit_size]), rng)
                self._check(proposed)
                if math.log(1.0 - rng.random()) <= float(proposed[0]) - self._bound:
                    return ("family", build(0)), made
        return None, made

    def _check(self, proposed: FloatArray) -> None:
        if np.any(proposed > self._bound + 1e-9):
            raise ValueError("a proposal's log-weight exceeds log_weight_bound")
