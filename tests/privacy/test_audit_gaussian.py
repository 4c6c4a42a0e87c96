"""(ε, δ) audit of the discrete Gaussian count of zCDP datasets (issue #24; dp/mechanisms.py).

A ρ-zCDP release is (ε, δ)-DP for the ε that OpenDP's conversion gives at δ
(``epsilon_of_rho``). So for every event E and neighbouring counts 0 and 1,
P₁(E) ≤ e^ε·P₀(E) + δ and the same with the sides exchanged. The audit samples the release on
both sides, bounds P₀(E) and P₁(E) by one-sided Clopper–Pearson intervals (Bonferroni over
every event, side and direction, all fixed before sampling) and reports the largest ε' that
some event proves: log((lower P₁(E) − δ)/upper P₀(E)). For a correct release it exceeds the
implied ε with probability at most ``ALPHA``; the broken variant (σ/3, i.e. 9ρ) is flagged.
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dpmine_server.dp.budget import Rho
from dpmine_server.dp.mechanisms import count_noise, discrete_gaussian, noisy_counts
from dpmine_server.dp.zcdp import epsilon_of_rho
from privacy.audit import clopper_pearson

IntArray = npt.NDArray[np.int64]

EPSILON = 1.0  # the request's ε: σ = 1/ε, ρ = ε²/2
DELTA = Decimal("1e-3")
SAMPLES = 20_000
#: False-alarm rate of the audit (OpenDP's sampler cannot be seeded).
ALPHA = 1e-5
THRESHOLDS = range(-12, 14)


def implied_epsilon() -> float:
    """The ε at ``DELTA`` of ρ = ε²/2 (OpenDP's zCDP → (ε, δ) conversion)."""
    return epsilon_of_rho(Rho.of_fraction(Fraction(EPSILON) ** 2 / 2), DELTA)


def witnessed_epsilon(side_0: IntArray, side_1: IntArray, delta: float) -> float:
    """The largest ε' that some tail event {y ≥ t} or {y ≤ t} proves with probability ≥ 1 − ALPHA:
    max log((lower P_a(E) − δ)/upper P_b(E)) over events and both orders (0 when none)."""
    events = [(np.greater_equal, t) for t in THRESHOLDS] + [(np.less_equal, t) for t in THRESHOLDS]
    tail = ALPHA / (4 * len(events))  # two bounds per side and order, every event
    best = 0.0
    for compare, t in events:
        counts = [int(np.count_nonzero(compare(side, t))) for side in (side_0, side_1)]
        lower, upper = clopper_pearson(np.array(counts), SAMPLES, tail)
        for a, b in ((0, 1), (1, 0)):
            room = float(lower[a]) - delta
            if room > 0 and upper[b] > 0:
                best = max(best, math.log(room / float(upper[b])))
    return best


def release(count: int) -> IntArray:
    """``SAMPLES`` independent releases of one count, as a zCDP dataset's kernels draw them."""
    with count_noise("discrete_gaussian"):
        drawn = noisy_counts(
            np.full(SAMPLES, count, dtype=np.int64), epsilon=EPSILON, l1=1, l2_squared=1
        )
    assert drawn.kind == "discrete_gaussian"
    return drawn.values


def test_the_gaussian_count_passes_the_audit_at_its_implied_epsilon_delta() -> None:
    target = implied_epsilon()
    assert 2.0 < target < 4.0  # ρ = 0.5 at δ = 10⁻³
    found = witnessed_epsilon(release(0), release(1), float(DELTA))
    assert found <= target, f"witnessed ε' = {found:.3f} > implied ε = {target:.3f}"
    # Not vacuous: the tail events see a good part of the loss.
    assert found > 0.3 * target, found


def test_the_audit_flags_a_gaussian_with_a_third_of_the_sigma() -> None:
    """BROKEN on purpose: σ = 1/(3ε), i.e. ρ = 9ε²/2 charged as ε²/2."""
    broken = [
        discrete_gaussian(np.full(SAMPLES, c, dtype=np.int64), epsilon=3 * EPSILON) for c in (0, 1)
    ]
    found = witnessed_epsilon(broken[0], broken[1], float(DELTA))
    assert found > implied_epsilon(), found
