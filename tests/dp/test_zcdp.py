"""zCDP accounting (issue #24, server/dpmine_server/dp/zcdp.py): the ρ maps checked against a
numerically computed Rényi divergence, the cap of an (ε, δ), and OpenDP's conversion back.

ρ-zCDP means D_α(M(x) ‖ M(x')) ≤ ρα for every α > 1 and neighbours x, x' (Bun & Steinke 2016,
Def. 1.1). On small cases the divergence is a finite sum, so the maps can be checked exactly:
the discrete Laplace count (ε²/2) and an exponential mechanism over four outcomes (ε²/8).
"""

from __future__ import annotations

import itertools
import math
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest

from dpmine_server.api.examples import OPERATION_EXAMPLES
from dpmine_server.dp.budget import BudgetError, Epsilon, Rho
from dpmine_server.dp.zcdp import (
    DEFAULT_DELTA,
    ReleasePart,
    em_draws,
    epsilon_of_rho,
    generic_release,
    parse_delta,
    rho_cap_for,
    rho_of_parts,
    standard_epsilon,
)
from dpmine_server.operations import CATALOG
from dpmine_server.operations.itemsets import selection_releases

ALPHAS = np.concatenate([1 + np.logspace(-3, 0, 25), np.logspace(0.31, 2.5, 40)])
EPSILONS = (0.05, 0.3, 1.0, 2.0)


def log_normalize(logits: np.ndarray) -> np.ndarray:
    """Log-probabilities of the law ∝ exp(logits)."""
    top = float(logits.max())
    normalized: np.ndarray = logits - (top + float(np.log(np.exp(logits - top).sum())))
    return normalized


def renyi(log_p: np.ndarray, log_q: np.ndarray, alpha: float) -> float:
    """D_α(P ‖ Q) of two laws on the same finite support, from their log-probabilities."""
    terms = alpha * log_p + (1 - alpha) * log_q
    top = terms.max()
    return float((top + np.log(np.exp(terms - top).sum())) / (alpha - 1))


def worst_ratio(log_p: np.ndarray, log_q: np.ndarray) -> float:
    """max over the α grid and both orders of D_α / α: the smallest ρ these two admit."""
    return max(
        max(renyi(log_p, log_q, float(a)), renyi(log_q, log_p, float(a))) / float(a) for a in ALPHAS
    )


def discrete_laplace(center: int, epsilon: float, support: np.ndarray) -> np.ndarray:
    """The discrete Laplace law of scale 1/ε around ``center`` (the count mechanism, §0.6)."""
    return log_normalize(-epsilon * np.abs(support - center))


def exponential_mechanism(scores: np.ndarray, epsilon: float) -> np.ndarray:
    """P(i) ∝ exp(ε·u_i / (2Δ)), Δ = 1 (ALGORITHMS.md §0.2)."""
    return log_normalize(epsilon * scores / 2)


class TestRhoMaps:
    @pytest.mark.parametrize("epsilon", EPSILONS)
    def test_laplace_counts_are_eps_squared_over_two_zcdp(self, epsilon: float) -> None:
        reach = int(80 / epsilon)  # the mass beyond is below e^-80
        support = np.arange(-reach, reach + 1)
        p = discrete_laplace(0, epsilon, support)
        q = discrete_laplace(1, epsilon, support)
        rho = float(generic_release(Epsilon.charge(epsilon))[0].rho())
        ratio = worst_ratio(p, q)
        assert ratio <= rho * (1 + 1e-9)
        assert ratio > rho / 4  # the check has teeth: half or a quarter of the map would fail

    @pytest.mark.parametrize("epsilon", EPSILONS)
    def test_an_exponential_mechanism_is_eps_squared_over_eight_zcdp(self, epsilon: float) -> None:
        rng = np.random.default_rng(7)
        rho = float(em_draws(Epsilon.charge(epsilon))[0].rho())
        worst = 0.0
        for _ in range(5):
            scores = rng.integers(0, 4, size=4).astype(float)
            for shift in itertools.product((-1.0, 0.0, 1.0), repeat=4):  # sensitivity 1
                p = exponential_mechanism(scores, epsilon)
                q = exponential_mechanism(scores + np.array(shift), epsilon)
                worst = max(worst, worst_ratio(p, q))
        assert worst <= rho * (1 + 1e-9)
        assert worst > rho / 2  # ε²/16 would be wrong: the bounded-range map is nearly tight

    @pytest.mark.parametrize("epsilon", EPSILONS)
    def test_peeled_range_calibrated_top_k_is_k_bounded_range_rounds(self, epsilon: float) -> None:
        """fim.topk_em's selection (K = 2 of 4, monotone counts: a row only adds, Δ_up = 1,
        Δ_down = 0, so c = ε_s/K per round) against its declared parts."""
        [part] = selection_releases("em", k=2, epsilon_selection=epsilon)
        rho = float(part.rho())

        def peeled(scores: np.ndarray) -> np.ndarray:
            c = epsilon / 2  # per round, range-calibrated
            logs = []
            for first, second in itertools.permutations(range(4), 2):
                one = log_normalize(c * scores)[first]
                rest = [i for i in range(4) if i != first]
                two = log_normalize(c * scores[rest])[rest.index(second)]
                logs.append(one + two)
            return np.array(logs)

        rng = np.random.default_rng(11)
        worst = 0.0
        for _ in range(5):
            scores = rng.integers(0, 5, size=4).astype(float)
            for shift in itertools.product((0.0, 1.0), repeat=4):  # one added row
                worst = max(worst, worst_ratio(peeled(scores), peeled(scores + np.array(shift))))
        assert worst <= rho * (1 + 1e-9)
        assert worst > rho / 4

    def test_parts_add_and_round_up(self) -> None:
        epsilon = Epsilon.charge("0.3")
        draws = em_draws(epsilon, 3)
        assert draws == (ReleasePart("bounded_range", Fraction(1, 10), 3),)
        exact = 3 * Fraction(1, 10) ** 2 / 8 + Fraction(3, 10) ** 2 / 2
        charged = rho_of_parts(draws + generic_release(epsilon))
        assert charged.as_fraction() >= exact
        assert charged.as_fraction() - exact < Fraction(2, 10**12)
        with pytest.raises(BudgetError):
            em_draws(epsilon, 0)


class TestCapAndConversion:
    @pytest.mark.parametrize(("epsilon", "delta"), [(1, "1e-6"), ("0.5", "1e-6"), (8, "1e-9")])
    def test_the_cap_is_the_largest_rho_within_epsilon(
        self, epsilon: float | str, delta: str
    ) -> None:
        at = parse_delta(delta)
        cap = rho_cap_for(epsilon, at)
        assert standard_epsilon(cap, at) <= Decimal(epsilon)
        assert standard_epsilon(Rho(cap.units + 1), at) > Decimal(epsilon) - Decimal("1e-30")

    def test_one_epsilon_at_one_in_a_million(self) -> None:
        # (√(L + 1) − √L)² with L = ln 10⁶: the figure quoted in issue #24.
        assert rho_cap_for(1, DEFAULT_DELTA).display() == pytest.approx(0.0174689, rel=1e-5)

    @pytest.mark.parametrize("delta", [0, 1, -0.5, 1.5, "nan", "x"])
    def test_delta_must_lie_strictly_between_zero_and_one(self, delta: object) -> None:
        with pytest.raises(BudgetError, match="delta"):
            parse_delta(delta)  # type: ignore[arg-type]

    def test_a_tiny_epsilon_leaves_no_whole_unit(self) -> None:
        with pytest.raises(BudgetError, match="less than one unit"):
            rho_cap_for("1e-9", DEFAULT_DELTA)

    @pytest.mark.parametrize("rho", ["0.0001", "0.0174689", "0.5", "3"])
    def test_opendp_conversion_is_within_the_standard_bound(self, rho: str) -> None:
        amount = Rho.charge(rho)
        shown = epsilon_of_rho(amount, DEFAULT_DELTA)
        assert 0 < shown <= float(standard_epsilon(amount, DEFAULT_DELTA))
        # Every Rényi-based conversion is inf over α > 1 of αρ plus a term in ln(1/δ) that is
        # positive at δ = 10⁻⁶, so the ε shown can never fall below ρ itself.
        assert shown >= float(amount.as_fraction())
        assert epsilon_of_rho(Rho(0), DEFAULT_DELTA) == 0.0

    def test_a_huge_rho_is_shown_by_the_standard_bound_where_opendp_overflows(self) -> None:
        amount = Rho.charge(1_000_000)
        tiny = parse_delta("1e-300")
        assert epsilon_of_rho(amount, tiny) >= float(standard_epsilon(amount, tiny))


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_every_operation_declares_its_releases(name: str) -> None:
    """Each operation says what kind each of its releases is, and their ε add up to at most the
    charged ε (so its ρ is at most that of one generic ε-DP release)."""
    spec = CATALOG[name]
    request = spec.request_model.model_validate(OPERATION_EXAMPLES[name])
    epsilon = spec.cost(request)
    parts = spec.releases(request, epsilon)
    assert parts, f"{name} declares no release"
    assert {part.kind for part in parts} <= {"bounded_range", "pure"}
    assert sum(part.epsilon * part.count for part in parts) <= epsilon.as_fraction()
    _, charge = spec.charge(request, "zcdp")
    assert isinstance(charge, Rho)
    assert charge <= rho_of_parts(generic_release(epsilon))
    assert spec.charge(request, "pure") == (epsilon, epsilon)


def test_bounded_range_is_cheaper_than_generic() -> None:
    assert math.isclose(
        rho_of_parts(em_draws(Epsilon.charge(1))).display() * 4,
        rho_of_parts(generic_release(Epsilon.charge(1))).display(),
        rel_tol=1e-9,
    )
