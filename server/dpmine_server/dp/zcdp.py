"""Zero-concentrated DP accounting (issue #24): the ρ each release costs, and ρ ↔ (ε, δ).

A dataset registered with accounting "zcdp" keeps its ledger in ρ (exact pico-rho,
:class:`~dpmine_server.dp.budget.Rho`). zCDP composes by adding ρ (Bun & Steinke 2016, Lemma
2.3), and every release here is an ε-DP mechanism, so its ρ follows from its ε and its kind:

* ``"bounded_range"`` — an exponential-mechanism draw (Gumbel-max, range-calibrated or not, and
  one-shot Gumbel top-K, which is K peeled EM draws): an ε-DP EM is ε-bounded-range, hence
  ε²/8-zCDP (Cesar & Rogers 2021, "Bounding, concentrating, and truncating", Lemma 3.2; Dong,
  Durfee & Rogers, ICML 2020). The MCMC samplers are charged as their target EM (and stay
  labelled approximate).
* ``"pure"`` — any other ε-DP release (Laplace counts): ε-DP implies ε²/2-zCDP (Bun & Steinke
  2016, Proposition 1.4).

Both maps are checked against a numerically computed Rényi divergence in
tests/dp/test_zcdp.py. The (ε, δ) a ρ implies is OpenDP's conversion (``make_zCDP_to_approxDP``,
the Canonne–Kamath–Steinke 2020 bound, tighter than ρ + 2√(ρ ln 1/δ)); a cap given as (ε, δ) is
stored as the largest ρ whose *standard* conversion ρ + 2√(ρ ln 1/δ) stays ≤ ε (Bun & Steinke
2016, Proposition 1.3), so the cap never overstates the guarantee under either conversion.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation, localcontext
from fractions import Fraction
from typing import Any, Literal

import opendp.prelude as dp

from dpmine_server.dp.budget import EPSILON_UNITS_PER_ONE, BudgetError, Epsilon, Rho
from dpmine_server.public_cache import public_cache

__all__ = [
    "DEFAULT_DELTA",
    "ReleaseKind",
    "ReleasePart",
    "em_draws",
    "epsilon_of_rho",
    "generic_release",
    "parse_delta",
    "rho_cap_for",
    "rho_of_parts",
    "standard_epsilon",
]

dp.enable_features("contrib")

#: The δ at which a ρ is shown as (ε, δ) when its owner gave the cap as ρ (a public default).
DEFAULT_DELTA = Decimal("1e-6")

ReleaseKind = Literal["bounded_range", "pure"]

#: ρ per ε² of each kind of ε-DP release (the lemmas in the module docstring).
_RHO_PER_EPSILON_SQUARED: dict[ReleaseKind, Fraction] = {
    "bounded_range": Fraction(1, 8),
    "pure": Fraction(1, 2),
}

_PRECISION = 60  # decimal digits for the cap's square roots and logarithm
_MARGIN = Decimal("1e-40")  # the cap's check must hold with this much room


@dataclass(frozen=True, slots=True)
class ReleasePart:
    """``count`` releases of one ``kind``, each ε-DP with ``epsilon`` (the exact share of the
    request's charged ε that the kernel hands to each, never more)."""

    kind: ReleaseKind
    epsilon: Fraction
    count: int = 1

    def rho(self) -> Fraction:
        """The exact ρ of these releases: count × c × ε² (c = 1/8 bounded range, 1/2 pure)."""
        return self.count * _RHO_PER_EPSILON_SQUARED[self.kind] * self.epsilon**2


#: Kernels split the charged ε in floats (e.g. ``epsilon / count``), which can exceed the exact
#: share by half an ulp; each part's ε is inflated by this factor (far more than any such
#: rounding) before it is squared, so the ρ charged always covers the float the kernel used.
_FLOAT_SLACK = 1 + Fraction(1, 2**40)


def rho_of_parts(parts: Iterable[ReleasePart]) -> Rho:
    """The ρ charged for a request made of these releases: the sum of their ρ (zCDP
    composition, Bun & Steinke 2016 Lemma 2.3), each part's ε inflated by a 2^-40 slack for
    the kernels' float splits, rounded up to whole pico-rho units."""
    total = sum((part.rho() * _FLOAT_SLACK**2 for part in parts), Fraction(0))
    return Rho.of_fraction(total)


def generic_release(epsilon: Epsilon) -> tuple[ReleasePart, ...]:
    """One ε-DP release of any kind (Laplace counts, or a composition not analysed further):
    ε²/2-zCDP."""
    return (ReleasePart("pure", epsilon.as_fraction()),)


def em_draws(epsilon: Epsilon, count: int = 1) -> tuple[ReleasePart, ...]:
    """``count`` exponential-mechanism draws sharing the charged ε equally (ε/count each, as the
    kernels split it): each is ε/count-bounded-range, so the request is count·(ε/count)²/8-zCDP.
    """
    if count < 1:
        raise BudgetError(f"an operation makes at least one draw, not {count}")
    return (ReleasePart("bounded_range", epsilon.as_fraction() / count, count),)


def parse_delta(value: float | str | Decimal) -> Decimal:
    """The owner's δ as an exact decimal, or BudgetError unless 0 < δ < 1."""
    try:
        delta = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
    except (InvalidOperation, ValueError, TypeError) as error:
        raise BudgetError(f"delta must be a number, got {value!r}") from error
    if not delta.is_finite() or not Decimal(0) < delta < Decimal(1):
        raise BudgetError(f"delta must be strictly between 0 and 1 (e.g. 1e-6), got {value!r}")
    return delta


def standard_epsilon(rho: Rho, delta: Decimal) -> Decimal:
    """ρ + 2√(ρ ln(1/δ)) at 60 digits (Bun & Steinke 2016, Proposition 1.3)."""
    with localcontext() as context:
        context.prec = _PRECISION
        value = Decimal(rho.units).scaleb(-12)
        return value + 2 * (value * (1 / delta).ln()).sqrt()


def rho_cap_for(epsilon: float | str | Decimal, delta: Decimal) -> Rho:
    """The largest whole-unit ρ whose standard conversion stays ≤ ε at δ.

    Solving ρ + 2√(ρL) = ε (L = ln 1/δ) for √ρ gives ρ* = (√(L + ε) − √L)²; it is floored to
    pico-rho and then lowered until ``standard_epsilon(ρ) + 1e-40 ≤ ε`` holds at 60 digits, so
    rounding can only understate the cap, never the guarantee. BudgetError if ε is not positive
    or too small for any whole unit of ρ at this δ.
    """
    eps = Epsilon.cap(epsilon).as_decimal()  # validated, rounded down to the ledger's unit
    with localcontext() as context:
        context.prec = _PRECISION
        log_term = (1 / delta).ln()
        root = (log_term + eps).sqrt() - log_term.sqrt()
        units = math.floor(root * root * EPSILON_UNITS_PER_ONE)
    while units > 0 and standard_epsilon(Rho(units), delta) + _MARGIN > eps:
        units -= 1
    if units <= 0:
        raise BudgetError(
            f"epsilon {epsilon} at delta {delta} allows less than one unit (1e-12) of rho; "
            "give a larger epsilon or delta"
        )
    return Rho(units)


@public_cache(maxsize=4096)
def epsilon_of_rho(rho: Rho, delta: Decimal) -> float:
    """The ε at δ that ρ-zCDP implies, by OpenDP's zCDP → (ε, δ) conversion (for display: the
    owner's and the analyst's view of what was spent).

    OpenDP converts a measurement, not a number, so ρ is carried by its Gaussian mechanism of
    scale 1 at input distance d = √(2ρ) (its map is d²/2, rounded up by OpenDP); d is rounded
    up too, so the ε shown is never below the exact one. Where OpenDP's search overflows (ρ in
    the thousands), the standard bound ρ + 2√(ρ ln 1/δ), rounded up, is shown instead: a view
    never fails for a public amount.
    """
    if rho.units == 0:
        return 0.0
    distance = math.sqrt(2 * rho.display())
    while Fraction(distance) ** 2 < 2 * rho.as_fraction():
        distance = math.nextafter(distance, math.inf)
    try:
        curve = _unit_gaussian_as_approx_dp().map(distance)
        return float(curve.epsilon(float(delta)))
    except dp.OpenDPException:
        bound = standard_epsilon(rho, delta)
        value = float(bound)
        return value if Decimal(value) >= bound else math.nextafter(value, math.inf)


@public_cache(maxsize=1)
def _unit_gaussian_as_approx_dp() -> Any:
    """OpenDP's Gaussian mechanism of scale 1 (never run: only its privacy map is used), cast
    from zCDP to (ε, δ) by ``make_zCDP_to_approxDP``."""
    gaussian = dp.m.make_gaussian(
        dp.atom_domain(T=float, nan=False), dp.absolute_distance(T=float), scale=1.0
    )
    return dp.c.make_zCDP_to_approxDP(gaussian)
