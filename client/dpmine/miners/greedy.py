"""Serenade greedy DP redescription miners: ``SerenadeES``, ``SerenadeCS`` and the ``NoSens``
ablation (ALGORITHMS.md §2.5). Orchestration only: every data access is a charged server call.

Budget split ε = ε_init + ε_ext + ε_qual by ``split``:

* ES: ``initial_pairs(I, ε_init)``; K rounds of ``extend_one(ES, ε_ext/K)``; one
  ``compute_quality(ε_qual/I)`` per redescription of the final collection. A redescription
  held by m positions (the same canonical form, :func:`dpmine.canonical.redescription_key`) is
  measured once with their m shares, m·ε_qual/I: I results or fewer, ε_qual spent in full.
* CS: ``initial_pairs(I, ε_init)``; per pair up to τ ``extend_one(CS, ε_ext/(τI))`` calls and up
  to τ+1 ``compute_quality(ε_qual/((τ+1)I))`` calls ([REC]: the paper's ε_qual/(τI) overspends);
  a chain stops when its noisy Jaccard falls below J_min, so a run may spend less than planned
  (``stop_reason_`` says which chains stopped and why; SerenadeES has no early stop);
  chains that end on the same canonical redescription give one result.

Presets (issue #12). ``preset="paper"`` is the paper's setting (§2.6): I = 20, K = 80, τ = 4,
split d3 = (0.6, 0.3, 0.1), c = ε/(2Δ), no coverage factor, x0 or x0_fraction required, and
the optional row count bought on top of ε. ``preset="auto"`` (the default) chooses what is not
given from public quantities only — ε, the schema (n_max, literals per view, the options) and
the server's free ``serenade.calibrate`` (c per unit ε) — never from data:

* every selection draw gets c·R ≥ f · ln M, with R = 1 the range of Q ∈ [0, 1] and M the
  base-measure mass of its candidates (§2.2, §7: one unit per discrete literal and per numeric
  attribute; a draw with c·R < ln M is "uniform-like": the best candidate gains less weight
  than the crowd of the others has). f = ``PAIR_SIGNAL`` = 2 for initial pairs and
  f = ``EXTEND_SIGNAL`` = 4 for extensions: "leave it unchanged" is one unit among M, so an
  extension draw must push a drop of Q by R/4 below the unchanged query (c·R/4 ≥ ln M) or
  it mostly replaces a good redescription by a random, worse one;
* every quality check gets a per-cell Laplace scale 1/ε_q ≤ x0 / ``NOISE_RATIO``, well under
  the supports it judges (x0 is the minimum-support centre);
* I is the most results that fit ε at those prices (I ≤ 20), with K = I extension rounds for
  ES, and for CS τ = 1 first, then τ grows (≤ 4) while the I chains fit; the shares are then
  scaled to spend ε (more signal per draw, never more draws);
* x0 = 10 % and y0 = 10 % (coverage factor σ(s₂(E00 − y0)), §2.1) of a noisy row count
  bought inside ε (2 % of ε, at most 0.05), range-calibrated draws c = ε/(Δ_up + Δ_down).
  ``plan()`` prices with the fractions of n_max (it buys nothing); ``mine()`` chooses I, K/τ and
  the split again at the fractions of its n̂ (post-processing; the total ε is the same, the
  calls may differ: the plan is marked ``provisional``). Every auto call's ε is rounded down
  to a whole nano-ε, so the run never spends more than ε.
Explicit parameters always win over the preset.

zCDP datasets (issue #24, docs/operators.md "Accounting unit"): a dataset whose ledger counts ρ
takes the run's budget as ``rho=`` (``epsilon=`` is then not used); a ρ budget on a pure
dataset, or no ρ on a zCDP one, is refused before any call. The same prices choose I, K/τ and
the split, each call costed by its release kind: an exponential-mechanism draw at ε costs ε²/8
(initial pairs, extensions), any other ε-DP release ε²/2 (quality checks, the row count). All
prices are then scaled by one factor so that the run's ρ is the budget (ρ is quadratic in ε,
so the factor is √(budget/ρ at the prices)); the row count under "auto" gets 2 % of ρ (ε ≤
0.05). ``plan()`` checks the server's exact total ρ against the budget before anything is
spent. ``plan()`` reports each draw's c·R against
ln M and flags uniform-like draws and noisy quality checks (:class:`SerenadePlan`). Results
carry 90 % intervals from the public noise law of their quality call (:mod:`dpmine.intervals`).

Noise-aware significance (issue #21, :mod:`dpmine.significance`). Each quality check also gets
a box of its four true cells at miss α/M, M the checks the run can make, known before the first
one (ES: its distinct final redescriptions; CS: (τ + 1)·I). Every check draws fresh noise on a
redescription chosen before it, so all boxes of the run hold together with probability
≥ 1 − α, also for the CS chain that kept a check because of its own noisy J. ``results_`` are
the results that pass the test with m the checks actually made; ``all_results_`` all of them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from decimal import Decimal
from functools import cached_property
from typing import Literal, TypedDict, Unpack

from dpmine.canonical import redescription_key
from dpmine.connection import DatasetHandle
from dpmine.errors import ParameterError
from dpmine.frames import PathLike, as_path, write_csv
from dpmine.intervals import (
    CellBox,
    Interval,
    StatisticIntervals,
    box_intervals,
    cell_box,
    excess_of,
    format_with_interval,
    intervals_for,
    intervals_from_paper,
    noise_law,
)
from dpmine.miners._base import (
    GENERAL_HINTS,
    NotMinedError,
    Plan,
    SignificantMiner,
    _Spent,
    _Stopped,
)
from dpmine.miners._rho import (
    EM_RHO,
    GENERIC_RHO,
    PURE,
    RHO_MARGIN,
    Composition,
    check_budget,
    composition_for,
    spent_of_planned,
)
from dpmine.queries import format_query
from dpmine.significance import ALPHA, Check, verdict_fields
from dpmine.wire import (
    COUNT_NOISY,
    MAX_BATCH_PARTS,
    RED_COMPUTE_QUALITY,
    SERENADE_EXTEND_ONE,
    SERENADE_INITIAL_PAIRS,
    BooleanAttribute,
    BoolLiteral,
    CalibrateRequest,
    CalibrateResponse,
    Calibration,
    CategoricalAttribute,
    CatLiteral,
    ComputeQualityRequest,
    CountNoise,
    DatasetMetadata,
    EstimateResponse,
    ExtendOneRequest,
    ExtendOneResponse,
    InitialPairsRequest,
    NoisyCells,
    NoisyCountRequest,
    NoisyStatistics,
    NumericAttribute,
    NumLiteral,
    PlannedCall,
    QualityMode,
    QualityParameters,
    Redescription,
    SerenadeOptions,
    usable_columns,
)

__all__ = [
    "ChainStop",
    "DrawSignal",
    "MinedRedescription",
    "NoSens",
    "Preset",
    "SerenadeCS",
    "SerenadeES",
    "SerenadeParameters",
    "SerenadePlan",
    "SerenadeSettings",
    "auto_cs",
    "auto_es",
    "log_extension_mass",
    "log_pair_mass",
    "serenade_columns",
]

Preset = Literal["auto", "paper"]

# The paper's setting (§2.6).
PAPER_N_INITIAL = 20
PAPER_ROUNDS = 80
PAPER_TAU = 4
PAPER_SPLIT = (0.6, 0.3, 0.1)
PAPER_COUNT_EPSILON = 0.05

#: Auto: an initial-pair draw's c·R is at least this many times ln M (M: candidates' mass).
PAIR_SIGNAL = 2.0
#: Auto: the same for extension draws (see the module docstring).
EXTEND_SIGNAL = 4.0
#: Range R of Serenade's quality Q = J·σ(…)(·σ(…)) ∈ [0, 1] (and of plain Jaccard).
QUALITY_RANGE = 1.0
#: Auto: a quality check's per-cell Laplace scale is at most x0 / NOISE_RATIO.
NOISE_RATIO = 20.0
#: A quality check is flagged when its noise scale exceeds x0 / NOISY_CHECK_RATIO.
NOISY_CHECK_RATIO = 10.0
AUTO_MAX_INITIAL = 20
AUTO_MAX_TAU = 4
AUTO_X0_FRACTION = 0.1
AUTO_Y0_FRACTION = 0.1
AUTO_COUNT_SHARE = 0.02
AUTO_COUNT_CAP = 0.05
#: Auto call budgets are whole multiples of 1/_NANO (exact decimals on the wire).
_NANO = 1_000_000_000
#: One-sided sensitivities of plain Jaccard (the NoSens ablation): up 1, down ½ (§0.8).
_JACCARD_UP_DOWN = (1.0, 0.5)
#: J threshold of the significance test when none is given: the paper's display filter (§2.6).
DEFAULT_MIN_JACCARD = 0.3


@dataclass(frozen=True)
class MinedRedescription:
    """A released redescription: the noisy cells of ``red.compute_quality``, the statistics
    derived from them, and (post-processing, :mod:`dpmine.intervals`) their 90 % intervals
    from the public noise law of the call that released them (ε, mode), and the joint
    intervals of the significance test (box miss ``joint_miss``, :mod:`dpmine.significance`)."""

    redescription: Redescription
    statistics: NoisyStatistics
    cells: NoisyCells
    epsilon: float
    mode: QualityMode = "cells"
    #: Probability that the box of the joint intervals misses: α/M in a run of M checks.
    joint_miss: float = ALPHA
    #: The noise law the release reports (None: discrete Laplace; Gaussian on zCDP datasets).
    noise: CountNoise | None = None

    @property
    def left(self) -> str:
        """The left query in text syntax."""
        return format_query(self.redescription.left)

    @property
    def right(self) -> str:
        """The right query in text syntax."""
        return format_query(self.redescription.right)

    @property
    def noisy_jaccard(self) -> float:
        """Noisy Jaccard J̃."""
        return self.statistics.jaccard

    @property
    def noise_scale(self) -> float:
        """Scale of each released cell: the discrete Laplace's b (1/ε "cells", 2/ε "paper",
        §1.6) or the discrete Gaussian's σ (1/ε, √2/ε) on a zCDP dataset."""
        return self.intervals.scale

    @cached_property
    def intervals(self) -> StatisticIntervals:
        """90 % intervals of |I|, |U|, J, the supports and the p-value (§1.6)."""
        return intervals_for(self.cells, epsilon=self.epsilon, mode=self.mode, noise=self.noise)

    @cached_property
    def joint_intervals(self) -> StatisticIntervals:
        """Intervals of |I|, |U|, J, the supports, the excess J − J_ind and the p-value that
        hold together with probability ≥ 1 − ``joint_miss`` (:func:`dpmine.intervals.cell_box`):
        those of the significance test. "paper" mode releases |I| and |U| only, so it has no
        p-value or excess interval (and its results cannot pass the test)."""
        kind, scale = noise_law(self.epsilon, self.mode, self.noise)
        level = 1.0 - self.joint_miss
        box = self.joint_box
        if box is not None:
            return box_intervals(box, level=level, scale=scale, kind=kind)
        cells = self.cells
        intersection, union = cells.intersection or 0, cells.union or 0
        return intervals_from_paper(intersection, union, scale=scale, level=level, kind=kind)

    @cached_property
    def joint_box(self) -> CellBox | None:
        """The box of the four true cells and of D = E10 + E01, E11 − D and E11 + E00 − D
        behind ``joint_intervals`` (seven ranges, each at the miss ``joint_miss``/7,
        :func:`dpmine.intervals.cell_box` with ``difference`` and ``association``); None in
        "paper" mode, which releases no cells."""
        if self.mode != "cells":
            return None
        kind, scale = noise_law(self.epsilon, self.mode, self.noise)
        cells = self.cells
        e11, e10, e01, e00 = (
            int(v) if v is not None else 0 for v in (cells.e11, cells.e10, cells.e01, cells.e00)
        )
        return cell_box(
            (e11, e10, e01, e00),
            scale=scale,
            miss=self.joint_miss,
            kind=kind,
            difference=True,
            association=True,
        )

    @property
    def noisy_excess(self) -> float | None:
        """J̃ − J_ind(ŝ_L/N̂, ŝ_R/N̂) from the noisy statistics (None in "paper" mode)."""
        stats = self.statistics
        if stats.support_left is None or stats.support_right is None or stats.n_rows is None:
            return None
        return excess_of(stats.jaccard, stats.support_left, stats.support_right, stats.n_rows)

    @property
    def jaccard_interval(self) -> Interval:
        """90 % interval of the true Jaccard."""
        return self.intervals.jaccard

    @property
    def support_interval(self) -> Interval:
        """90 % interval of the true |I|."""
        return self.intervals.support

    @property
    def p_value_interval(self) -> Interval | None:
        """90 % interval of the §1.3 p-value on the true counts (None in "paper" mode)."""
        return self.intervals.p_value

    @property
    def uninformative(self) -> bool:
        """The Jaccard interval spans most of [0, 1]: the noisy J says little."""
        return self.intervals.uninformative

    def describe_jaccard(self) -> str:
        """``0.70 [0.62, 0.77]``."""
        return format_with_interval(self.noisy_jaccard, self.jaccard_interval)

    def to_dict(self) -> dict[str, object]:
        """The record of the JSON export: queries, noisy cells and statistics, their 90 %
        intervals, the joint intervals of the significance test and the noise scale."""
        return _json_record(self)


# -- public candidate masses (§2.2, §2.3, §7) -----------------------------------------------------


def _view_attributes(
    schema: DatasetMetadata, side: Literal["left", "right"], columns: Sequence[str] | None = None
) -> list[str]:
    """The attributes of one side's view (every attribute of a table), of ``columns`` only when
    given (the attributes a run may use)."""
    return [
        a.name
        for a in schema.attributes
        if (schema.kind != "views" or a.view == side) and (columns is None or a.name in columns)
    ]


def serenade_columns(
    schema: DatasetMetadata,
    columns: str | Sequence[str] | None,
    exclude: str | Sequence[str] | None = (),
) -> list[str] | None:
    """The attributes a Serenade run may use (``columns`` minus ``exclude``, schema order), or
    None for all (:func:`~dpmine.wire.items.usable_columns`). ValueError, saying what to fix,
    when a name is unknown or when they leave a view without an attribute (on a table: fewer
    than two attributes, one per query), as the server checks ``options.columns``."""
    allowed = usable_columns(schema, columns, exclude)
    if allowed is None:
        return None
    if schema.kind == "views":
        for side in ("left", "right"):
            if not _view_attributes(schema, side, allowed):
                raise ValueError(
                    f"columns and exclude leave the {side} view no attribute; allow at least one "
                    f"of {_view_attributes(schema, side)}"
                )
    elif len(allowed) < 2:
        raise ValueError(
            f"a redescription needs two different attributes, one per query; columns and "
            f"exclude leave only {allowed}: allow at least one more"
        )
    return allowed


def _units(schema: DatasetMetadata, names: list[str], options: SerenadeOptions) -> int:
    """Base-measure units of one side (§7): one per Boolean or category literal, one per numeric
    attribute (its thresholds share a unit); doubled with negations."""
    wanted = set(names)
    units = 0
    for attribute in schema.attributes:
        if attribute.name not in wanted:
            continue
        if isinstance(attribute, CategoricalAttribute):
            units += len(attribute.categories)
        else:
            units += 1
    return units * (2 if options.negations else 1)


def log_pair_mass(schema: DatasetMetadata, options: SerenadeOptions) -> float:
    """ln M of an initial-pair draw (§2.3): units(left) × units(right), from the schema (the
    attributes of ``options.columns`` when given)."""
    left = _units(schema, _view_attributes(schema, "left", options.columns), options)
    right = _units(schema, _view_attributes(schema, "right", options.columns), options)
    return math.log(max(left * right, 1))


def log_extension_mass(
    schema: DatasetMetadata, options: SerenadeOptions, collection: int = 1
) -> float:
    """ln M of an extension draw (§2.2, §2.4) over ``collection`` redescriptions, each with one
    unit for "unchanged" and one per literal unit, side and operator (an upper bound: used
    attributes are not subtracted; only ``options.columns`` when given)."""
    sides = _units(schema, _view_attributes(schema, "left", options.columns), options) + _units(
        schema, _view_attributes(schema, "right", options.columns), options
    )
    per_red = 1 + len(options.operators) * sides
    return math.log(max(collection, 1) * per_red)


# -- the auto rules (public quantities only) ------------------------------------------------------


@dataclass(frozen=True)
class DrawPrices:
    """ε a draw or check needs under the auto rules: f·ln M/(c per ε·R) for a draw (f =
    ``PAIR_SIGNAL`` or ``EXTEND_SIGNAL``), ``NOISE_RATIO``/x0 for a quality check (per-cell
    scale 1/ε ≤ x0/``NOISE_RATIO``)."""

    c_per_epsilon: float
    log_pairs: float
    log_extend_one: float
    check: float

    def draw(self, log_mass: float, factor: float) -> float:
        """ε of one draw over candidates of mass e^log_mass with c·R = factor·ln M."""
        return factor * max(log_mass, 1.0) / (self.c_per_epsilon * QUALITY_RANGE)

    @property
    def pair(self) -> float:
        """ε of one initial-pair draw."""
        return self.draw(self.log_pairs, PAIR_SIGNAL)

    def extend(self, collection: int) -> float:
        """ε of one extension draw over ``collection`` redescriptions."""
        return self.draw(self.log_extend_one + math.log(max(collection, 1)), EXTEND_SIGNAL)


def zcdp_epsilon(
    rho: float, split: tuple[float, float, float], calls: tuple[int, int, int]
) -> float:
    """The ε the split divides so that the run costs ``rho`` (issue #24): share k is spread
    evenly over calls[k] releases (EM draws for the first two, checks for the third), so
    ρ = E²·(split₀²/(8n₀) + split₁²/(8n₁) + split₂²/(2n₂)) and E = √(ρ / that sum)."""
    per_e2 = sum(
        weight * share * share / count
        for weight, share, count in zip((EM_RHO, EM_RHO, GENERIC_RHO), split, calls, strict=True)
    )
    return math.sqrt(rho / per_e2)


def _normalised(weights: tuple[float, float, float]) -> tuple[float, float, float]:
    total = sum(weights)
    a, b, c = (w / total for w in weights)
    return a, b, c


def auto_es(
    budget: float,
    prices: DrawPrices,
    *,
    max_rounds: int,
    n_initial: int | None = None,
    rounds: int | None = None,
    composition: Composition = PURE,
) -> tuple[int, int, tuple[float, float, float]]:
    """(I, K, split) for SerenadeES with ``budget`` (issue #12): I the most results (≤ 20) whose
    pair draw, one extension round each and quality check fit at the auto prices; K = I (≤
    ``max_rounds``): one round per result, since a weak extension draw mostly spoils a good
    redescription, so ε beyond the prices goes to signal, not to more rounds; the split ∝ the
    prices, so every price is scaled by the same factor ≥ 1. Given I or K are kept. The budget
    and the costs are in ``composition``'s unit (ε, or ρ on a zCDP dataset)."""

    def cost(i: int) -> float:
        return (
            composition.em(prices.pair, i)
            + composition.em(prices.extend(i), i)
            + composition.generic(prices.check, i)
        )

    if n_initial is None:
        fits = [i for i in range(1, AUTO_MAX_INITIAL + 1) if cost(i) <= budget]
        n_initial = max(fits, default=1)
    if rounds is None:
        rounds = max(1, min(n_initial, max_rounds))
    split = _normalised(
        (
            n_initial * prices.pair,
            rounds * prices.extend(n_initial),
            n_initial * prices.check,
        )
    )
    return n_initial, rounds, split


def auto_cs(
    budget: float,
    prices: DrawPrices,
    *,
    max_tau: int,
    n_initial: int | None = None,
    tau: int | None = None,
    composition: Composition = PURE,
) -> tuple[int, int, tuple[float, float, float]]:
    """(I, τ, split) for SerenadeCS with ``budget`` (issue #12): a chain costs one pair draw, τ
    extension draws and τ + 1 quality checks at the auto prices; τ = 1 and the most chains (≤ 20)
    first, then τ grows (≤ ``max_tau``) while those chains still fit; split ∝ the prices. Given
    I or τ are kept. The budget and the costs are in ``composition``'s unit (ε, or ρ)."""
    ext = prices.extend(1)

    def chain(t: int) -> float:
        return (
            composition.em(prices.pair)
            + composition.em(ext, t)
            + composition.generic(prices.check, t + 1)
        )

    if n_initial is None:
        start = 1 if tau is None else tau
        n_initial = max(1, min(AUTO_MAX_INITIAL, int(budget / chain(start))))
    if tau is None:
        fits = [t for t in range(1, max(max_tau, 1) + 1) if n_initial * chain(t) <= budget]
        tau = max(fits, default=1)
    split = _normalised(
        (n_initial * prices.pair, n_initial * tau * ext, n_initial * (tau + 1) * prices.check)
    )
    return n_initial, tau, split


# -- resolved settings and the plan report --------------------------------------------------------


@dataclass(frozen=True)
class SerenadeSettings:
    """What a run uses once the preset has filled in what was not given."""

    preset: Preset
    epsilon: float  # what the split divides (ε, minus the count under auto)
    n_initial: int
    steps: int  # K rounds (ES) or τ (CS)
    split: tuple[float, float, float]
    x0: float | None
    x0_fraction: float | None
    y0_fraction: float | None
    count_epsilon: float | None  # None: no row count bought
    calibration: Calibration
    #: Auto with a row count: chosen at x0 = fraction of n_max; the run chooses again at the
    #: fraction of its noisy n̂ (the total ε is the same, the calls may differ).
    provisional: bool = False
    #: The dataset's unit; on "zcdp" ``epsilon`` is chosen so that the run costs ``rho``.
    accounting: Literal["pure", "zcdp"] = "pure"
    rho: float | None = None

    def centres(self, n_max: int, n_hat: float | None) -> tuple[float, float | None]:
        """(x0, y0) at the noisy row count ``n_hat`` (None: priced at n_max)."""
        return _centres(n_max, n_hat, self.x0, self.x0_fraction, self.y0_fraction)

    @property
    def shares(self) -> tuple[float, float, float]:
        """(ε_init, ε_ext, ε_qual)."""
        e_init, e_ext, e_qual = (self.epsilon * share for share in self.split)
        return e_init, e_ext, e_qual

    def call_epsilon(self, value: float) -> float:
        """The ε of one call: under "auto" rounded down to a whole nano-ε, so that the server's
        rounding up to whole pico-ε never lifts the run above ε; "paper" keeps the paper's
        arithmetic unchanged."""
        if self.preset == "paper":
            return value
        return math.floor(value * _NANO) / _NANO

    def merged(self, share: float, copies: int) -> float:
        """The ε of one check that stands for ``copies`` checks at ``share`` each: their
        total ε under pure accounting, √copies·share under zCDP (the same ρ, copies·share²/2)."""
        factor = copies if self.accounting == "pure" else math.sqrt(copies)
        return self.call_epsilon(share * factor)


def _centres(
    n_max: int,
    n_hat: float | None,
    x0: float | None,
    x0_fraction: float | None,
    y0_fraction: float | None,
) -> tuple[float, float | None]:
    """x0 (given, or a fraction of n̂ clamped to [1, fraction·n_max]) and y0 (a fraction of n̂,
    at most that fraction of n_max); without n̂ the fractions of the public n_max (pricing)."""
    rows = n_max if n_hat is None else n_hat
    if x0 is None:
        assert x0_fraction is not None
        x0 = min(max(x0_fraction * rows, 1.0), max(x0_fraction * n_max, 1.0))
    y0 = None if y0_fraction is None else min(y0_fraction * rows, y0_fraction * n_max)
    return x0, y0


@dataclass(frozen=True)
class DrawSignal:
    """Signal of one kind of selection draw (issue #12): c = ε_draw·(c per ε), c·R against
    ln M; ``uniform_like`` when c·R < ln M."""

    operation: str
    draws: int
    epsilon: float
    c: float
    quality_range: float
    log_candidates: float

    @property
    def signal(self) -> float:
        """c·R: the largest log-weight gap between two candidates."""
        return self.c * self.quality_range

    @property
    def uniform_like(self) -> bool:
        """The draw is close to uniform over its candidates."""
        return self.signal < self.log_candidates


@dataclass(frozen=True)
class CheckNoise:
    """Noise of the quality checks: per-cell Laplace scale against the support centre x0."""

    checks: int
    epsilon: float
    scale: float
    x0: float

    @property
    def noisy(self) -> bool:
        """The scale is more than x0 / ``NOISY_CHECK_RATIO``."""
        return self.scale > self.x0 / NOISY_CHECK_RATIO


def signal_warnings(signals: list[DrawSignal], noise: CheckNoise | None) -> list[str]:
    """One line per uniform-like draw kind and for noisy quality checks (issue #12): where a
    run's signal is weak, and what to change."""
    lines = [
        f"{s.operation}: c·R = {s.signal:.2f} < ln(candidates) = {s.log_candidates:.2f}: "
        "these draws are close to uniform (raise ε or lower I/K/τ)"
        for s in signals
        if s.uniform_like
    ]
    if noise is not None and noise.noisy:
        lines.append(
            f"red.compute_quality: noise scale {noise.scale:.3g} per cell is above "
            f"x0/{NOISY_CHECK_RATIO:g} = {noise.x0 / NOISY_CHECK_RATIO:.3g}: the quality "
            "checks cannot judge supports near x0"
        )
    return lines


@dataclass(frozen=True)
class SerenadePlan(Plan):
    """A Serenade plan: the priced calls, the settings used and the signal report."""

    settings: SerenadeSettings | None = None
    signals: list[DrawSignal] = field(default_factory=list)
    check_noise: CheckNoise | None = None

    @property
    def warnings(self) -> list[str]:
        """One line per uniform-like draw kind and for noisy quality checks."""
        return signal_warnings(self.signals, self.check_noise)

    def report(self) -> str:
        """The signal report as text (one line per draw kind, then the warnings)."""
        lines = []
        if self.settings is not None:
            st = self.settings
            lines.append(
                f"preset {st.preset}: I = {st.n_initial}, steps = {st.steps}, split = "
                f"({', '.join(f'{x:.3f}' for x in st.split)}), calibration {st.calibration}"
            )
            if st.provisional:
                lines.append(
                    "provisional: priced at x0 = a fraction of n_max; the run chooses I, steps "
                    "and the split again at the same fraction of its noisy row count (same "
                    f"{'ε' if st.accounting == 'pure' else 'ρ'})"
                )
        for s in self.signals:
            flag = "  UNIFORM-LIKE" if s.uniform_like else ""
            lines.append(
                f"{s.operation}: {s.draws} draw(s) at ε = {s.epsilon:.4g}: c = {s.c:.3g}, "
                f"c·R = {s.signal:.2f} vs ln(candidates) = {s.log_candidates:.2f}{flag}"
            )
        if self.check_noise is not None:
            n = self.check_noise
            lines.append(
                f"red.compute_quality: {n.checks} check(s) at ε = {n.epsilon:.4g}: noise scale "
                f"{n.scale:.3g} per cell vs x0 = {n.x0:.4g}"
            )
        lines += self.rho_lines()
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)


class SerenadeParameters(TypedDict, total=False):
    """Keyword parameters shared by every Serenade miner (see ``_SerenadeBase``)."""

    epsilon: float
    rho: float | None
    preset: Preset
    split: tuple[float, float, float] | None
    n_initial: int | None
    x0: float | None
    x0_fraction: float | None
    y0_fraction: float | None
    count_epsilon: float | None
    steepness: float | None
    calibration: Calibration | None
    options: SerenadeOptions | None
    columns: Sequence[str] | None
    exclude: Sequence[str]
    quality_mode: QualityMode
    quality_function: Literal["serenade", "jaccard"]
    progress: bool
    batched: bool


class _SerenadeBase(SignificantMiner[MinedRedescription]):
    """Parameters and shared plumbing of the Serenade miners. ``None`` = chosen by ``preset``
    (see the module docstring); ``y0_fraction=0`` turns the coverage factor off.

    ``columns``: the attributes whose literals queries may use (default: all), and
    ``exclude``: attributes they may not use, e.g. a proxy of what the other view describes.
    Sent as the public ``options.columns`` of every draw: the server builds the candidates
    from them only, and the auto preset and ``plan()`` count the candidates over them.

    ``batched`` (default True): calls that do not depend on each other's releases (ES's final
    quality checks, the steps of CS's independent chains) go to the server together in batches
    (``DatasetHandle.run_batch``), charged and released exactly as one by one but padded once
    per batch; ``batched=False`` sends them one by one (for comparison).

    ``rho``: the run's budget on a zCDP dataset (issue #24), in place of ``epsilon``, which is
    then not used; see the module docstring for how the presets spend it."""

    min_jaccard: float = DEFAULT_MIN_JACCARD

    def __init__(
        self,
        *,
        epsilon: float = 1.0,
        rho: float | None = None,
        preset: Preset = "auto",
        split: tuple[float, float, float] | None = None,
        n_initial: int | None = None,
        x0: float | None = None,
        x0_fraction: float | None = None,
        y0_fraction: float | None = None,
        count_epsilon: float | None = None,
        steepness: float | None = None,
        calibration: Calibration | None = None,
        options: SerenadeOptions | None = None,
        columns: Sequence[str] | None = None,
        exclude: Sequence[str] = (),
        quality_mode: QualityMode = "cells",
        quality_function: Literal["serenade", "jaccard"] = "serenade",
        progress: bool = False,
        batched: bool = True,
    ) -> None:
        self.epsilon = epsilon
        self.rho = rho
        self.preset = preset
        self.split = split
        self.n_initial = n_initial
        self.x0 = x0
        self.x0_fraction = x0_fraction
        self.y0_fraction = y0_fraction
        self.count_epsilon = count_epsilon
        self.steepness = steepness
        self.calibration = calibration
        self.options = options
        self.columns = columns
        self.exclude = exclude
        self.quality_mode = quality_mode
        self.quality_function = quality_function
        self.progress = progress
        self.batched = batched

    _steps_name = "rounds"

    def _given_steps(self) -> int | None:
        value: int | None = getattr(self, self._steps_name)
        return value

    # -- parameters ----------------------------------------------------------------------------

    def _check_params(self) -> None:
        if self.preset not in ("auto", "paper"):
            raise ParameterError(f"preset must be 'auto' or 'paper', got {self.preset!r}")
        if not (isinstance(self.epsilon, int | float) and math.isfinite(self.epsilon)) or (
            self.epsilon <= 0
        ):
            raise ParameterError(f"epsilon must be a positive number, got {self.epsilon!r}")
        self._check_rho()
        if self.split is not None and (abs(sum(self.split) - 1.0) > 1e-9 or min(self.split) <= 0):
            raise ParameterError(
                f"split must be three positive shares summing to 1, got {self.split}"
            )
        if self.x0 is not None and self.x0_fraction is not None:
            raise ParameterError("give exactly one of x0 (a count) or x0_fraction (of a noisy n)")
        if self.preset == "paper" and self.x0 is None and self.x0_fraction is None:
            raise ParameterError(
                "give exactly one of x0 (a count) or x0_fraction (of a noisy n); "
                "preset='auto' chooses x0_fraction = 0.1 for you"
            )
        for name in ("x0_fraction", "y0_fraction"):
            value = getattr(self, name)
            low_ok = value is None or (0 < value < 1 if name == "x0_fraction" else 0 <= value < 1)
            if not low_ok:
                bounds = "(0, 1)" if name == "x0_fraction" else "[0, 1) (0 = no coverage factor)"
                raise ParameterError(f"{name} must be in {bounds}, got {value!r}")
        if self.count_epsilon is not None and not self.count_epsilon > 0:
            raise ParameterError(f"count_epsilon must be positive, got {self.count_epsilon!r}")
        if self.n_initial is not None and self.n_initial < 1:
            raise ParameterError("n_initial must be at least 1")
        for name in ("rounds", "tau"):
            value = getattr(self, name, 1)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ParameterError(f"{name} must be a whole number of at least 1, got {value!r}")
        if not 0 <= getattr(self, "min_jaccard", 0.0) <= 1:
            raise ParameterError("min_jaccard must be in [0, 1]")

    def _check_rho(self) -> None:
        """A ρ budget is a positive number and comes instead of ``epsilon``."""
        check_budget(self.rho, self.epsilon, 1.0)

    # -- settings (public quantities only) -----------------------------------------------------

    def _coverage(self) -> float | None:
        """The y0 fraction in effect (None: no coverage factor)."""
        if self.quality_function == "jaccard":
            return None
        fraction = self.y0_fraction
        if fraction is None:
            fraction = AUTO_Y0_FRACTION if self.preset == "auto" else None
        return fraction or None

    def _settings(
        self, dataset: DatasetHandle, n_hat: float | None = None
    ) -> tuple[SerenadeSettings, DrawPrices | None]:
        """Fill in what the preset chooses: from ε, the schema, ``serenade.calibrate`` and, once
        the run has bought it, the noisy row count n̂ (all public)."""
        self._check_params()
        calibration: Calibration = self.calibration or (
            "range" if self.preset == "auto" else "symmetric"
        )
        x0_fraction = self.x0_fraction
        if self.x0 is None and x0_fraction is None:
            x0_fraction = AUTO_X0_FRACTION  # preset auto (paper refused above)
        y0_fraction = self._coverage()
        buys_count = x0_fraction is not None or y0_fraction is not None
        composition = self._composition(dataset)
        count: float | None = None
        budget = self.epsilon if self.rho is None else self.rho
        total = budget  # what the whole run may cost, in the dataset's unit
        if buys_count:
            if self.preset == "paper":
                count = self.count_epsilon or PAPER_COUNT_EPSILON
                total += composition.generic(count)  # the paper buys it on top
            else:
                share = AUTO_COUNT_SHARE * budget
                auto_count = share if composition is PURE else math.sqrt(share / GENERIC_RHO)
                count = self.count_epsilon or (
                    math.floor(min(AUTO_COUNT_CAP, auto_count) * _NANO) / _NANO
                )
                if composition.generic(count) >= budget:
                    unit = "epsilon" if composition is PURE else "rho"
                    raise ParameterError(
                        f"count_epsilon = {count} leaves nothing of {unit} = {budget} "
                        f"(under preset 'auto' the row count is part of {unit})"
                    )
                budget -= composition.generic(count)
        steps = self._given_steps()
        if self.preset == "paper":
            n_initial = self.n_initial or PAPER_N_INITIAL
            steps = steps or self._paper_steps
            split = self.split or PAPER_SPLIT
            settings = SerenadeSettings(
                preset="paper",
                epsilon=self._divided(budget, composition, split, n_initial, steps),
                n_initial=n_initial,
                steps=steps,
                split=split,
                x0=self.x0,
                x0_fraction=x0_fraction,
                y0_fraction=y0_fraction,
                count_epsilon=count,
                calibration=calibration,
                accounting=composition.unit,
                rho=None if composition is PURE else total,
            )
            return settings, None
        schema = dataset.schema
        x0, y0 = _centres(schema.n_max, n_hat, self.x0, x0_fraction, y0_fraction)
        prices = DrawPrices(
            c_per_epsilon=self._c_per_epsilon(dataset, x0, y0, calibration),
            log_pairs=log_pair_mass(schema, self._options(schema)),
            log_extend_one=log_extension_mass(schema, self._options(schema)),
            check=NOISE_RATIO / x0 * (2.0 if self.quality_mode == "paper" else 1.0),
        )
        n_initial, steps, split = self._auto(budget, prices, steps, composition)
        split = self.split or split
        settings = SerenadeSettings(
            preset="auto",
            epsilon=self._divided(budget, composition, split, n_initial, steps),
            n_initial=n_initial,
            steps=steps,
            split=split,
            x0=self.x0,
            x0_fraction=x0_fraction,
            y0_fraction=y0_fraction,
            count_epsilon=count,
            calibration=calibration,
            provisional=n_hat is None and count is not None,
            accounting=composition.unit,
            rho=None if composition is PURE else total,
        )
        return settings, prices

    def _composition(self, dataset: DatasetHandle) -> Composition:
        """The dataset's unit, or a ParameterError (before any call) when the budget was given
        in the other one (:func:`~dpmine.miners._rho.composition_for`)."""
        return composition_for(dataset, self.rho, type(self).__name__)

    def _release_calls(self, n_initial: int, steps: int) -> tuple[int, int, int]:
        """How many releases share ε_init, ε_ext and ε_qual (ES: I draws, K rounds, I checks)."""
        return n_initial, steps, n_initial

    def _divided(
        self,
        budget: float,
        composition: Composition,
        split: tuple[float, float, float],
        n_initial: int,
        steps: int,
    ) -> float:
        """The ε the split divides: the budget itself under pure accounting; under zCDP the ε
        whose releases cost the budget less a 10⁻⁶ margin (:func:`zcdp_epsilon`)."""
        if composition is PURE:
            return budget
        calls = self._release_calls(n_initial, steps)
        return zcdp_epsilon(budget * (1 - RHO_MARGIN), split, calls)

    _paper_steps = PAPER_ROUNDS

    def _auto(
        self, budget: float, prices: DrawPrices, steps: int | None, composition: Composition
    ) -> tuple[int, int, tuple[float, float, float]]:
        options = self._base_options()
        return auto_es(
            budget,
            prices,
            max_rounds=max(
                1, (self.n_initial or AUTO_MAX_INITIAL) * 2 * (options.max_literals - 1)
            ),
            n_initial=self.n_initial,
            rounds=steps,
            composition=composition,
        )

    def _quality_request(
        self, x0: float, y0: float | None, calibration: Calibration
    ) -> QualityParameters:
        return QualityParameters(
            x0=x0,
            s=self.steepness,
            function=self.quality_function,
            y0=y0,
            calibration=calibration,
        )

    def _c_per_epsilon(
        self, dataset: DatasetHandle, x0: float, y0: float | None, calibration: Calibration
    ) -> float:
        """c per unit ε of the draws: the server's free ``serenade.calibrate`` (public)."""
        if self.quality_function == "jaccard":
            up, down = _JACCARD_UP_DOWN
            return 1.0 / (up + down if calibration == "range" else 2.0 * max(up, down))
        response = self._calibrated(dataset, x0, y0, calibration)
        if response.c_per_epsilon is not None:
            return response.c_per_epsilon
        return 1.0 / (2.0 * response.delta)

    def _calibrated(
        self, dataset: DatasetHandle, x0: float, y0: float | None, calibration: Calibration
    ) -> CalibrateResponse:
        """The server's free ``serenade.calibrate`` at this x0 and y0 (public arithmetic):
        the steepness (the miner's, or the line search's) and its sensitivities."""
        return dataset.connection.call(
            f"/v1/datasets/{dataset.id}/redescriptions/serenade/calibrate",
            CalibrateRequest(x0=x0, s=self.steepness, y0=y0, calibration=calibration),
            CalibrateResponse,
        )

    def _base_options(self) -> SerenadeOptions:
        return self.options or SerenadeOptions()

    def columns_for(self, schema: DatasetMetadata) -> list[str] | None:
        """The attributes queries may use (``columns`` minus ``exclude``, schema order), or
        None for all (:func:`serenade_columns`); a :class:`~dpmine.errors.ParameterError`
        names an unknown column or a view left without an attribute."""
        try:
            return serenade_columns(schema, self.columns, self.exclude)
        except ValueError as error:
            raise ParameterError(str(error)) from None

    def _options(self, schema: DatasetMetadata) -> SerenadeOptions:
        """The options of every draw: ``options`` with the allowed columns."""
        options = self._base_options()
        allowed = self.columns_for(schema)
        if allowed is None:
            return options
        if options.columns is not None:
            raise ParameterError(
                "give the allowed columns once: columns=/exclude= or options.columns, not both"
            )
        return options.model_copy(update={"columns": allowed})

    # -- plan ----------------------------------------------------------------------------------

    def plan(self, dataset: DatasetHandle) -> SerenadePlan:
        """Price the run (free) and report each draw's signal c·R against ln(candidates)."""
        settings, prices = self._settings(dataset)
        calls = self._planned(dataset, settings)
        schema = dataset.schema
        x0, y0 = settings.centres(schema.n_max, None)
        c_unit = (
            prices.c_per_epsilon
            if prices is not None
            else self._c_per_epsilon(dataset, x0, y0, settings.calibration)
        )
        signals, noise = self._signals(schema, settings, c_unit, x0)
        estimate = self._estimate(dataset, calls, settings)
        budget = dataset.budget() if settings.accounting == "zcdp" else None
        return SerenadePlan(
            calls=calls,
            estimate=estimate,
            settings=settings,
            signals=signals,
            check_noise=noise,
            budget_rho=settings.rho,
            delta=budget.zcdp.delta if budget is not None and budget.zcdp is not None else None,
        )

    @staticmethod
    def _estimate(
        dataset: DatasetHandle, calls: list[PlannedCall], settings: SerenadeSettings
    ) -> EstimateResponse:
        """The server's exact price of ``calls`` (free); under zCDP a ParameterError, before
        anything is spent, if their total ρ is above the run's budget."""
        estimate = dataset.estimate(calls)
        total = estimate.total_rho_exact
        if (
            settings.rho is not None
            and total is not None
            and Decimal(total) > Decimal(repr(settings.rho))
        ):
            raise ParameterError(
                f"the planned calls cost rho = {estimate.total_rho_exact}, above the run's "
                f"budget rho = {settings.rho}; nothing was spent (please report this)"
            )
        return estimate

    def _calls(self, dataset: DatasetHandle) -> list[PlannedCall]:
        settings, _prices = self._settings(dataset)
        return self._planned(dataset, settings)

    def _planned(self, dataset: DatasetHandle, settings: SerenadeSettings) -> list[PlannedCall]:
        raise NotImplementedError

    def _signals(
        self, schema: DatasetMetadata, st: SerenadeSettings, c_unit: float, x0: float
    ) -> tuple[list[DrawSignal], CheckNoise]:
        raise NotImplementedError

    def _check_noise(self, checks: int, epsilon: float, x0: float) -> CheckNoise:
        scale = (2.0 if self.quality_mode == "paper" else 1.0) / epsilon
        return CheckNoise(checks=checks, epsilon=epsilon, scale=scale, x0=x0)

    # -- calls ---------------------------------------------------------------------------------

    def _prefix_calls(self, settings: SerenadeSettings) -> list[PlannedCall]:
        """The optional row count."""
        if settings.count_epsilon is None:
            return []
        return [COUNT_NOISY.plan(NoisyCountRequest(epsilon=settings.count_epsilon))]

    def _pricing_quality(self, schema: DatasetMetadata, st: SerenadeSettings) -> QualityParameters:
        x0, y0 = st.centres(schema.n_max, None)
        return self._quality_request(x0, y0, st.calibration)

    def _start(self, dataset: DatasetHandle) -> tuple[SerenadeSettings, QualityParameters, _Spent]:
        """Check the budget, buy the row count if any, and settle the run's settings and x0/y0:
        fractions of n̂ clamped to the same fractions of the public n_max (post-processing);
        under "auto" I, K/τ and the split are chosen again at that x0 (same total ε)."""
        plan = self._check_budget(dataset)
        self._planned_total = (
            (plan.estimate.total_rho_exact or plan.estimate.total_epsilon_exact)
            if isinstance(plan, Plan)
            else None
        )
        settings, _prices = self._settings(dataset)
        spent = _Spent()
        n_hat: float | None = None
        if settings.count_epsilon is not None:
            counted = dataset.count(epsilon=settings.count_epsilon)
            spent.receipts.append(counted.receipt)
            n_hat = float(max(counted.count, 1))
            if settings.preset == "auto":
                settings, _prices = self._settings(dataset, n_hat)
                if settings.accounting == "zcdp":  # the re-chosen calls, priced exactly
                    self._estimate(dataset, self._planned(dataset, settings), settings)
        x0, y0 = settings.centres(dataset.schema.n_max, n_hat)
        self.x0_ = x0
        self.y0_ = y0
        self.settings_ = settings
        self.columns_ = self.columns_for(dataset.schema)
        # Where the run's signal is weak: at the final settings under "auto", else the plan's.
        if _prices is not None:
            signals = self._signals(dataset.schema, settings, _prices.c_per_epsilon, x0)
            self.weak_draws_ = signal_warnings(*signals)
        else:
            self.weak_draws_ = plan.warnings if isinstance(plan, SerenadePlan) else []
        self._checks = 0
        quality = self._quality_request(x0, y0, settings.calibration)
        return settings, self._with_steepness(dataset, quality), spent

    def _with_steepness(
        self, dataset: DatasetHandle, quality: QualityParameters
    ) -> QualityParameters:
        """``quality`` with the line search's steepness filled in, from the free
        ``serenade.calibrate`` (public arithmetic): the same parameters as leaving ``s`` to the
        server, which otherwise searches again in every process that first sees them, inside
        the call's padded time (about 10–30 ms, priced in every such call's budget)."""
        if quality.s is not None or quality.function == "jaccard":
            return quality
        response = self._calibrated(dataset, quality.x0, quality.y0, quality.calibration)
        return quality.model_copy(update={"s": response.s})

    def _initial_pairs(
        self,
        dataset: DatasetHandle,
        st: SerenadeSettings,
        quality: QualityParameters,
        spent: _Spent,
    ) -> list[Redescription]:
        request = InitialPairsRequest(
            count=st.n_initial,
            epsilon=st.call_epsilon(st.shares[0]),
            quality=quality,
            options=self._options(dataset.schema),
        )
        self.threshold_modes_ = []
        call = "serenade.initial_pairs (the run's first draw)"
        with self._stopping(spent, dataset, call, [request]):
            response = dataset.run(request)
        spent.receipts.append(response.receipt)
        self.threshold_modes_.append(response.threshold_mode)
        return list(response.pairs)

    def _extend(
        self,
        dataset: DatasetHandle,
        collection: list[Redescription],
        *,
        mode: Literal["cs", "es"],
        epsilon: float,
        quality: QualityParameters,
        spent: _Spent,
        step: str,
    ) -> ExtendOneResponse:
        request = ExtendOneRequest(
            mode=mode,
            collection=collection,
            epsilon=epsilon,
            quality=quality,
            options=self._options(dataset.schema),
        )
        call = f"serenade.extend_one ({step})"
        with self._stopping(spent, dataset, call, [request]):
            response = dataset.run(request)
        spent.receipts.append(response.receipt)
        self.threshold_modes_.append(response.threshold_mode)
        return response

    def _measure(
        self,
        dataset: DatasetHandle,
        red: Redescription,
        epsilon: float,
        spent: _Spent,
        joint_miss: float,
    ) -> MinedRedescription:
        """One quality check; its joint box misses with probability ``joint_miss`` (α/M)."""
        request = ComputeQualityRequest(redescription=red, epsilon=epsilon, mode=self.quality_mode)
        call = f"red.compute_quality (quality check {self._checks + 1})"
        with self._stopping(spent, dataset, call, [request]):
            response = dataset.run(request)
        spent.receipts.append(response.receipt)
        self._checks += 1
        return MinedRedescription(
            red,
            response.statistics,
            response.cells,
            epsilon=epsilon,
            mode=response.mode,
            joint_miss=joint_miss,
            noise=response.noise,
        )

    def _measure_many(
        self,
        dataset: DatasetHandle,
        checks: Sequence[tuple[Redescription, float]],
        spent: _Spent,
        joint_miss: float,
        results: list[MinedRedescription] | None = None,
    ) -> list[MinedRedescription]:
        """Independent quality checks of (redescription, ε), in order: in batches of at most
        ``MAX_BATCH_PARTS`` when ``batched`` (one request each, padded once), else one by one.
        Each check is its own call either way (own mechanism, noise, receipt). Appended to
        ``results`` (a new list if None) as they arrive, so a run that stops at a failed call
        keeps the checks before it."""
        results = [] if results is None else results
        if not self.batched or len(checks) <= 1:
            for red, eps in checks:
                results.append(self._measure(dataset, red, eps, spent, joint_miss))
            return results
        for start in range(0, len(checks), MAX_BATCH_PARTS):
            chunk = checks[start : start + MAX_BATCH_PARTS]
            requests = [
                ComputeQualityRequest(redescription=red, epsilon=eps, mode=self.quality_mode)
                for red, eps in chunk
            ]
            call = (
                f"a batch of {len(requests)} red.compute_quality calls (quality checks "
                f"{self._checks + 1}–{self._checks + len(requests)})"
            )
            with self._stopping(spent, dataset, call, requests):
                answers = dataset.run_batch(requests)
            for (red, eps), response in zip(chunk, answers, strict=True):
                spent.receipts.append(response.receipt)
                self._checks += 1
                results.append(
                    MinedRedescription(
                        red,
                        response.statistics,
                        response.cells,
                        epsilon=eps,
                        mode=response.mode,
                        joint_miss=joint_miss,
                        noise=response.noise,
                    )
                )
        return results

    def _extend_many(
        self,
        dataset: DatasetHandle,
        starts: Sequence[Redescription],
        *,
        epsilon: float,
        quality: QualityParameters,
        spent: _Spent,
        step: str,
    ) -> list[ExtendOneResponse]:
        """One CS extension draw per redescription (independent chains), in order: batched as
        :meth:`_measure_many`."""
        if not self.batched or len(starts) <= 1:
            return [
                self._extend(
                    dataset,
                    [red],
                    mode="cs",
                    epsilon=epsilon,
                    quality=quality,
                    spent=spent,
                    step=step,
                )
                for red in starts
            ]
        options = self._options(dataset.schema)
        responses: list[ExtendOneResponse] = []
        for first in range(0, len(starts), MAX_BATCH_PARTS):
            requests = [
                ExtendOneRequest(
                    mode="cs", collection=[red], epsilon=epsilon, quality=quality, options=options
                )
                for red in starts[first : first + MAX_BATCH_PARTS]
            ]
            call = f"a batch of {len(requests)} serenade.extend_one calls ({step})"
            with self._stopping(spent, dataset, call, requests):
                answers = dataset.run_batch(requests)
            for response in answers:
                spent.receipts.append(response.receipt)
                self.threshold_modes_.append(response.threshold_mode)
                responses.append(response)
        return responses

    # -- results -------------------------------------------------------------------------------

    def _mined(self) -> list[MinedRedescription]:
        found: list[MinedRedescription] | None = getattr(self, "redescriptions_", None)
        if found is None:
            raise NotMinedError(f"{type(self).__name__} has not mined yet; call mine() first")
        return found

    def _examined(self) -> tuple[list[MinedRedescription], int]:
        """The results and m, the quality checks the run made (each measured one candidate)."""
        found = self._mined()
        return found, self._checks

    def _hints(self) -> list[str]:
        """The plan's weak draws and noisy checks, then the general remedies."""
        weak = list(getattr(self, "weak_draws_", []))
        if self.quality_mode == "paper":
            weak.insert(0, "quality_mode='cells' (the 'paper' mode releases no p-value)")
        return weak + list(GENERAL_HINTS)

    def _ending(self) -> str | None:
        """How the run ended (``stop_reason_``: the chains that stopped early and why, and
        where a failed call stopped the run)."""
        reason: str | None = getattr(self, "stop_reason_", None)
        return None if reason is None else f"How the run ended: {reason}"

    def displayed(
        self, min_jaccard: float = 0.3, *, by: Literal["noisy", "lower"] = "noisy"
    ) -> list[MinedRedescription]:
        """The paper's display filter, noisy J ≥ ``min_jaccard``, or with ``by="lower"`` the
        lower end of J's 90 % interval ≥ ``min_jaccard`` (post-processing). Neither is what a
        run shows by default: that is ``results_``, the noise-aware test
        (:mod:`dpmine.significance`)."""
        if by not in ("noisy", "lower"):
            raise ParameterError(f"by must be 'noisy' or 'lower', got {by!r}")
        if by == "lower":
            return [r for r in self._mined() if r.jaccard_interval.low >= min_jaccard]
        return [r for r in self._mined() if r.noisy_jaccard >= min_jaccard]

    def to_json(self, path: PathLike, min_jaccard: float | None = None) -> None:
        """Write every redescription by J's lower end (queries, noisy statistics, their 90 %
        and joint intervals, the noise scale, whether it passes the significance test with
        ``min_jaccard``, default the run's), the test's summary and the receipts."""
        verdict = self.significance(min_jaccard)
        payload = {
            "redescriptions": [
                {**r.to_dict(), **verdict_fields(verdict.failed_checks(r))} for r in verdict.ranked
            ],
            "significance": verdict.summary.as_dict(),
            "stop_reason": getattr(self, "stop_reason_", None),
            "receipts": [receipt.model_dump(mode="json") for receipt in self.receipts_],
        }
        as_path(path).write_text(json.dumps(payload, indent=2) + "\n")

    def to_csv(self, path: PathLike, min_jaccard: float | None = None) -> None:
        """Write one row per redescription, by J's lower end, with its noisy statistics, 90 %
        and joint intervals and whether it passes the significance test (with
        ``min_jaccard``, default the run's)."""
        write_csv(path, *self._table(min_jaccard))

    def _table(self, min_jaccard: float | None = None) -> tuple[list[str], list[list[object]]]:
        verdict = self.significance(min_jaccard)
        rows: list[list[object]] = [
            list(_csv_row(r, failed=verdict.failed_checks(r))) for r in verdict.ranked
        ]
        return list(CSV_COLUMNS), rows


#: Columns of :meth:`_SerenadeBase.to_csv`: noisy values, 90 % intervals (``*_low``/``*_high``),
#: the joint intervals of the significance test (``joint_*``) and its verdict.
CSV_COLUMNS = (
    "left",
    "right",
    "noisy_support",
    "noisy_union",
    "noisy_jaccard",
    "noisy_excess",
    "p_value",
    "support_low",
    "support_high",
    "jaccard_low",
    "jaccard_high",
    "excess_low",
    "excess_high",
    "p_value_low",
    "p_value_high",
    "noise_scale",
    "uninformative",
    "joint_level",
    "joint_support_low",
    "joint_support_high",
    "joint_jaccard_low",
    "joint_jaccard_high",
    "joint_excess_low",
    "joint_excess_high",
    "joint_p_value_low",
    "joint_p_value_high",
    "significant",
    "failed_checks",
)


def _g(value: float | None) -> str:
    return "" if value is None else f"{value:.6g}"


def _ends(interval: Interval | None) -> list[str]:
    return ["", ""] if interval is None else [_g(interval.low), _g(interval.high)]


def _csv_row(r: MinedRedescription, *, failed: tuple[Check, ...]) -> list[str | int]:
    stats, iv, joint = r.statistics, r.intervals, r.joint_intervals
    return [
        r.left,
        r.right,
        stats.support,
        stats.union,
        _g(stats.jaccard),
        _g(r.noisy_excess),
        _g(stats.p_value),
        *_ends(iv.support),
        *_ends(iv.jaccard),
        *_ends(iv.excess),
        *_ends(iv.p_value),
        _g(iv.scale),
        "true" if iv.uninformative else "false",
        _g(joint.level),
        *_ends(joint.support),
        *_ends(joint.jaccard),
        *_ends(joint.excess),
        *_ends(joint.p_value),
        "false" if failed else "true",
        ";".join(failed),
    ]


def _json_record(r: MinedRedescription) -> dict[str, object]:
    iv = r.intervals
    return {
        "left": r.left,
        "right": r.right,
        "query": r.redescription.model_dump(mode="json"),
        "noisy_cells": r.cells.model_dump(mode="json", exclude_none=True),
        "noisy_statistics": r.statistics.model_dump(mode="json"),
        "noisy_excess": r.noisy_excess,
        "epsilon": r.epsilon,
        "mode": r.mode,
        "noise": iv.noise,
        "noise_scale": iv.scale,
        "intervals": iv.as_dict(),
        "joint_intervals": r.joint_intervals.as_dict(),
        "uninformative": iv.uninformative,
    }


@dataclass(frozen=True)
class ChainStop:
    """How one SerenadeCS chain ended (post-processing of its noisy checks): ``steps`` of its
    ``tau`` extension steps taken, the noisy J of its last check and whether that J fell below
    ``min_jaccard`` (the chain's only early stop: it then makes no further draw or check)."""

    chain: int
    steps: int
    tau: int
    noisy_jaccard: float
    below: bool

    @property
    def early(self) -> bool:
        """Whether the chain stopped before its τ steps."""
        return self.below and self.steps < self.tau

    def describe(self, min_jaccard: float) -> str:
        """``chain 3: initial pair at noisy J 0.12 < 0.3`` and the like."""
        if not self.below:
            taken = "all" if self.steps == self.tau else f"{self.steps} of"
            return f"chain {self.chain}: {taken} {self.tau} steps"
        where = "initial pair" if self.steps == 0 else f"step {self.steps} of {self.tau}"
        return f"chain {self.chain}: {where} at noisy J {self.noisy_jaccard:.3g} < {min_jaccard:g}"


#: Chains listed by name in SerenadeCS's ``stop_reason_`` (the rest are counted).
_LISTED_STOPS = 5


def chain_stop_reason(stops: Sequence[ChainStop], min_jaccard: float, unchanged: int) -> str:
    """SerenadeCS's ``stop_reason_``: which chains stopped before their τ steps and why (their
    noisy Jaccard fell below ``min_jaccard``), and how many draws left a chain unchanged (no
    quality check was then needed), so a run that spent less than its plan says why."""
    early = [stop for stop in stops if stop.early]
    if not stops:
        return "No chain ran."
    tau = stops[0].tau
    if early:
        named = "; ".join(stop.describe(min_jaccard) for stop in early[:_LISTED_STOPS])
        more = f"; {len(early) - _LISTED_STOPS} more" if len(early) > _LISTED_STOPS else ""
        text = (
            f"{len(early)} of {len(stops)} chains stopped before their τ = {tau} steps because "
            f"their noisy Jaccard fell below min_jaccard = {min_jaccard:g} ({named}{more}), so "
            "their remaining draws and checks were never made."
        )
    # A chain above J_min that took fewer than τ steps was cut short by a failed call.
    cut = [stop for stop in stops if not stop.below and stop.steps < stop.tau]
    if not early:
        text = "" if cut else f"Every chain ran all τ = {tau} steps."
    if cut:
        steps = ", ".join(str(stop.steps) for stop in cut)
        text += (
            f" {len(cut)} chain(s) ended when the run stopped, after {steps} of their "
            f"τ = {tau} steps."
        )
    last = [stop for stop in stops if not stop.early and stop.below]
    if last:
        text += (
            f" {len(last)} chain(s) fell below min_jaccard at their last step and keep the "
            "redescription before it."
        )
    if unchanged:
        text += (
            f" {unchanged} extension draw(s) kept their redescription unchanged (no new quality "
            "check)."
        )
    return text.strip()


def _placeholder(schema: DatasetMetadata, columns: Sequence[str] | None = None) -> Redescription:
    """A valid redescription used only to price extend/quality calls (costs ignore queries),
    on the allowed ``columns`` (None: any attribute)."""
    usable = [a for a in schema.attributes if columns is None or a.name in columns]

    def literal(view: str) -> BoolLiteral | CatLiteral | NumLiteral:
        for attribute in usable:
            if schema.kind == "views" and attribute.view != view:
                continue
            if isinstance(attribute, BooleanAttribute):
                return BoolLiteral(attribute=attribute.name)
            if isinstance(attribute, CategoricalAttribute):
                return CatLiteral(attribute=attribute.name, category=attribute.categories[0])
            if isinstance(attribute, NumericAttribute):
                return NumLiteral(attribute=attribute.name, lower=attribute.lo)
        raise ValueError(f"the {view} view has no attribute a Serenade query can start with")

    left = literal("left")
    right = literal("right")
    if schema.kind != "views" and right.attribute == left.attribute:
        others = [a for a in usable if a.name != left.attribute]
        if not others:
            raise ValueError("a single-table dataset needs two attributes")
        first = others[0]
        right = (
            NumLiteral(attribute=first.name, lower=first.lo)
            if isinstance(first, NumericAttribute)
            else BoolLiteral(attribute=first.name)
            if isinstance(first, BooleanAttribute)
            else CatLiteral(attribute=first.name, category=first.categories[0])
        )
    return Redescription(left=left, right=right)


class SerenadeES(_SerenadeBase):
    """SerenadeES (Algorithm 2): one collection of I redescriptions, K extension rounds.
    ``min_jaccard`` is only the J threshold of the significance test (default 0.3, the
    paper's display filter, §2.6)."""

    def __init__(
        self,
        *,
        rounds: int | None = None,
        min_jaccard: float = DEFAULT_MIN_JACCARD,
        **parameters: Unpack[SerenadeParameters],
    ) -> None:
        super().__init__(**parameters)
        self.rounds = rounds
        self.min_jaccard = min_jaccard

    def _planned(self, dataset: DatasetHandle, settings: SerenadeSettings) -> list[PlannedCall]:
        schema = dataset.schema
        calls = self._prefix_calls(settings)
        e_init, e_ext, e_qual = settings.shares
        quality = self._pricing_quality(schema, settings)
        count, rounds = settings.n_initial, settings.steps
        pairs = InitialPairsRequest(
            count=count,
            epsilon=settings.call_epsilon(e_init),
            quality=quality,
            options=self._options(schema),
        )
        calls.append(SERENADE_INITIAL_PAIRS.plan(pairs))
        collection = [_placeholder(schema, self.columns_for(schema))] * count
        extend = ExtendOneRequest(
            mode="es",
            collection=collection,
            epsilon=settings.call_epsilon(e_ext / rounds),
            quality=quality,
            options=self._options(schema),
        )
        calls += [SERENADE_EXTEND_ONE.plan(extend)] * rounds
        measure = ComputeQualityRequest(
            redescription=collection[0],
            epsilon=settings.call_epsilon(e_qual / count),
            mode=self.quality_mode,
        )
        calls += [RED_COMPUTE_QUALITY.plan(measure)] * count
        return calls

    def _signals(
        self, schema: DatasetMetadata, st: SerenadeSettings, c_unit: float, x0: float
    ) -> tuple[list[DrawSignal], CheckNoise]:
        e_init, e_ext, e_qual = st.shares
        options = self._options(schema)
        pair_eps = st.call_epsilon(e_init) / st.n_initial
        ext_eps = st.call_epsilon(e_ext / st.steps)
        signals = [
            DrawSignal(
                SERENADE_INITIAL_PAIRS.name,
                st.n_initial,
                pair_eps,
                pair_eps * c_unit,
                QUALITY_RANGE,
                log_pair_mass(schema, options),
            ),
            DrawSignal(
                SERENADE_EXTEND_ONE.name,
                st.steps,
                ext_eps,
                ext_eps * c_unit,
                QUALITY_RANGE,
                log_extension_mass(schema, options, st.n_initial),
            ),
        ]
        check = st.call_epsilon(e_qual / st.n_initial)
        return signals, self._check_noise(st.n_initial, check, x0)

    def mine(self, dataset: DatasetHandle) -> SerenadeES:
        """Run the plan (refused up front when the budget cannot cover it)."""
        settings, quality, spent = self._start(dataset)
        self._spent = spent
        e_ext = settings.shares[1]
        rounds = settings.steps
        collection: list[Redescription] = []
        results: list[MinedRedescription] = []
        done = unchanged = 0
        with self._progress(rounds + settings.n_initial, "Serenade ES") as advance:
            try:  # a failed call ends the rounds; the collection drawn so far is measured
                collection = self._initial_pairs(dataset, settings, quality, spent)
                for done in range(rounds):
                    step = self._extend(
                        dataset,
                        collection,
                        mode="es",
                        epsilon=settings.call_epsilon(e_ext / rounds),
                        quality=quality,
                        spent=spent,
                        step=f"extension round {done + 1} of {rounds}",
                    )
                    collection[step.position] = step.redescription
                    unchanged += not step.changed
                    advance()
                done = rounds
            except _Stopped:
                pass
            if not spent.failures or collection:
                with suppress(_Stopped):  # a failed check keeps the checks before it
                    self._measure_all(
                        dataset, collection, settings, spent, advance, results=results
                    )
        self.redescriptions_ = results
        stopped = self.stopped_
        if stopped is None:
            # SerenadeES has no early stop: say so, so that an empty result is not read as one.
            self.stop_reason_ = (
                f"SerenadeES ran its whole plan: {len(collection)} initial pairs, all K = "
                f"{rounds} extension rounds ({unchanged} left the collection unchanged) and "
                f"{len(results)} quality checks."
            )
        else:
            self.stop_reason_ = (
                f"{stopped.describe()} SerenadeES made {done} of its K = {rounds} extension "
                f"rounds and {len(results)} quality checks of the {len(collection)} "
                "redescriptions it held."
            )
        return self

    def _measure_all(
        self,
        dataset: DatasetHandle,
        collection: list[Redescription],
        settings: SerenadeSettings,
        spent: _Spent,
        advance: Callable[[], None],
        *,
        results: list[MinedRedescription],
    ) -> None:
        """Into ``results``, one quality check per distinct redescription, in the order of first
        positions, at m·ε_qual/I for m positions holding it (√m·ε_qual/I under zCDP: the same
        ρ): a repeat is measured once and printed once, and its share of ε_qual buys a more
        precise check instead (post-processing of the released collection decides the split;
        the total stays ε_qual, or its ρ). Each box misses with probability α/M, M the distinct
        redescriptions (:mod:`dpmine.significance`); a run that stopped early measures the
        collection it holds, and M is its distinct redescriptions, fixed before any check."""
        e_qual = settings.shares[2]
        copies: dict[tuple[str, str], list[Redescription]] = {}
        for red in collection:
            copies.setdefault(redescription_key(red), []).append(red)
        joint_miss = ALPHA / max(len(copies), 1)  # M = the distinct checks, known before any
        checks = [
            (same[0], settings.merged(e_qual / len(collection), len(same)))
            for same in copies.values()
        ]
        self._measure_many(dataset, checks, spent, joint_miss, results)
        for _ in collection:
            advance()


class SerenadeCS(_SerenadeBase):
    """SerenadeCS (Algorithm 1): each initial pair extended alone for up to τ rounds. A chain
    stops when its noisy Jaccard falls below ``min_jaccard``; ``chain_stops_`` records how each
    chain ended and ``stop_reason_`` says it in one paragraph (also in ``nothing_passed()``)."""

    _steps_name = "tau"
    _paper_steps = PAPER_TAU

    def __init__(
        self,
        *,
        tau: int | None = None,
        min_jaccard: float = 0.3,
        **parameters: Unpack[SerenadeParameters],
    ) -> None:
        super().__init__(**parameters)
        self.tau = tau
        self.min_jaccard = min_jaccard

    def _auto(
        self, budget: float, prices: DrawPrices, steps: int | None, composition: Composition
    ) -> tuple[int, int, tuple[float, float, float]]:
        max_tau = min(AUTO_MAX_TAU, 2 * (self._base_options().max_literals - 1))
        return auto_cs(
            budget,
            prices,
            max_tau=max_tau,
            n_initial=self.n_initial,
            tau=steps,
            composition=composition,
        )

    def _release_calls(self, n_initial: int, steps: int) -> tuple[int, int, int]:
        """I draws, τ·I extension draws and (τ + 1)·I checks at most."""
        return n_initial, steps * n_initial, (steps + 1) * n_initial

    @staticmethod
    def _budgets(st: SerenadeSettings) -> tuple[float, float]:
        _e_init, e_ext, e_qual = st.shares
        tau, count = st.steps, st.n_initial
        return st.call_epsilon(e_ext / (tau * count)), st.call_epsilon(e_qual / ((tau + 1) * count))

    def _planned(self, dataset: DatasetHandle, settings: SerenadeSettings) -> list[PlannedCall]:
        schema = dataset.schema
        calls = self._prefix_calls(settings)
        e_x, e_q = self._budgets(settings)
        quality = self._pricing_quality(schema, settings)
        pairs = InitialPairsRequest(
            count=settings.n_initial,
            epsilon=settings.call_epsilon(settings.shares[0]),
            quality=quality,
            options=self._options(schema),
        )
        calls.append(SERENADE_INITIAL_PAIRS.plan(pairs))
        red = _placeholder(schema, self.columns_for(schema))
        extend = ExtendOneRequest(
            mode="cs", collection=[red], epsilon=e_x, quality=quality, options=self._options(schema)
        )
        measure = ComputeQualityRequest(redescription=red, epsilon=e_q, mode=self.quality_mode)
        for _ in range(settings.n_initial):
            calls.append(RED_COMPUTE_QUALITY.plan(measure))
            for _ in range(settings.steps):
                calls.append(SERENADE_EXTEND_ONE.plan(extend))
                calls.append(RED_COMPUTE_QUALITY.plan(measure))
        return calls

    def _signals(
        self, schema: DatasetMetadata, st: SerenadeSettings, c_unit: float, x0: float
    ) -> tuple[list[DrawSignal], CheckNoise]:
        e_x, e_q = self._budgets(st)
        options = self._options(schema)
        pair_eps = st.call_epsilon(st.shares[0]) / st.n_initial
        signals = [
            DrawSignal(
                SERENADE_INITIAL_PAIRS.name,
                st.n_initial,
                pair_eps,
                pair_eps * c_unit,
                QUALITY_RANGE,
                log_pair_mass(schema, options),
            ),
            DrawSignal(
                SERENADE_EXTEND_ONE.name,
                st.n_initial * st.steps,
                e_x,
                e_x * c_unit,
                QUALITY_RANGE,
                log_extension_mass(schema, options, 1),
            ),
        ]
        return signals, self._check_noise(st.n_initial * (st.steps + 1), e_q, x0)

    def mine(self, dataset: DatasetHandle) -> SerenadeCS:
        """Run the chains; the plan is an upper bound (chains stop below J_min)."""
        settings, quality, spent = self._start(dataset)
        e_x, e_q = self._budgets(settings)
        # M = every check the chains can make, (τ + 1)·I, fixed before the first one.
        joint_miss = ALPHA / (settings.n_initial * (settings.steps + 1))
        self._spent = spent
        self.chain_stops_: list[ChainStop] = []
        self._unchanged = 0
        ends: list[MinedRedescription | None] = []
        with self._progress(settings.n_initial, "Serenade CS") as advance:
            try:  # a failed call ends every chain at its last release
                pairs = self._initial_pairs(dataset, settings, quality, spent)
            except _Stopped:
                pairs = []
            if pairs:
                ends = self._chains(
                    dataset,
                    pairs,
                    steps=settings.steps,
                    quality=quality,
                    e_x=e_x,
                    e_q=e_q,
                    spent=spent,
                    joint_miss=joint_miss,
                )
            for _ in range(settings.n_initial):
                advance()
        # Chains that end on the same canonical redescription give one result: the first
        # chain's (keeping the copy with the best noisy figures would favour the one whose noise
        # flattered it).
        results: list[MinedRedescription] = []
        seen: set[tuple[str, str]] = set()
        for found in ends:
            if found is not None and redescription_key(found.redescription) not in seen:
                seen.add(redescription_key(found.redescription))
                results.append(found)
        self.stop_reason_ = chain_stop_reason(self.chain_stops_, self.min_jaccard, self._unchanged)
        if self._planned_total is not None and any(stop.early for stop in self.chain_stops_):
            self.stop_reason_ += " " + spent_of_planned(spent.receipts, self._planned_total)
        stopped = self.stopped_
        if stopped is not None:
            self.stop_reason_ = f"{stopped.describe()} {self.stop_reason_}"
        self.redescriptions_ = results
        return self

    def _chains(
        self,
        dataset: DatasetHandle,
        starts: Sequence[Redescription],
        *,
        steps: int,
        quality: QualityParameters,
        e_x: float,
        e_q: float,
        spent: _Spent,
        joint_miss: float,
    ) -> list[MinedRedescription | None]:
        """Every chain of Algorithm 1, advanced in lockstep; the last noisy J ≥ J_min of each
        (None if none). A chain's next call depends only on its own releases, so step t of every
        chain still running is sent together (:meth:`_extend_many`, then
        :meth:`_measure_many` for the chains that changed). Each chain makes exactly the calls,
        with the same inputs and charges, that it makes when run alone, so the releases and
        the total ε are those of the chain-by-chain run; only the order of the calls differs.
        A failed call (:meth:`_stopping`) ends every chain at its last measured release: the
        chains whose first check was released keep it, and a step's checks released before
        the failure count."""
        measured: list[MinedRedescription] = []
        with suppress(_Stopped):
            self._measure_many(dataset, [(red, e_q) for red in starts], spent, joint_miss, measured)
        last_good = [m if m.noisy_jaccard >= self.min_jaccard else None for m in measured]
        taken = [0] * len(measured)
        for t in range(steps if len(measured) == len(starts) else 0):
            running = [i for i, m in enumerate(measured) if m.noisy_jaccard >= self.min_jaccard]
            if not running:
                break
            try:
                drawn = self._extend_many(
                    dataset,
                    [measured[i].redescription for i in running],
                    epsilon=e_x,
                    quality=quality,
                    spent=spent,
                    step=f"step {t + 1} of τ = {steps}",
                )
            except _Stopped:
                break
            changed: list[tuple[int, Redescription]] = []
            for chain, step in zip(running, drawn, strict=True):
                taken[chain] += 1
                if step.changed:  # an unchanged chain keeps its noisy J (no new quality call)
                    changed.append((chain, step.redescription))
                else:
                    self._unchanged += 1
            checks = [(red, e_q) for _chain, red in changed]
            rechecked: list[MinedRedescription] = []
            with suppress(_Stopped):
                self._measure_many(dataset, checks, spent, joint_miss, rechecked)
            # After a failed check, only the checks released before it (a prefix) are read.
            for (chain, _red), check in zip(changed, rechecked, strict=False):
                measured[chain] = check
            for chain in running:
                if measured[chain].noisy_jaccard >= self.min_jaccard:
                    last_good[chain] = measured[chain]
            if spent.failures:
                break
        self.chain_stops_.extend(
            ChainStop(
                chain=chain + 1,
                steps=taken[chain],
                tau=steps,
                noisy_jaccard=check.noisy_jaccard,
                below=check.noisy_jaccard < self.min_jaccard,
            )
            for chain, check in enumerate(measured)
        )
        return last_good


class NoSens(SerenadeES):
    """The paper's ablation: SerenadeES with plain Jaccard quality (sensitivity 1)."""

    def __init__(
        self,
        *,
        rounds: int | None = None,
        min_jaccard: float = DEFAULT_MIN_JACCARD,
        **parameters: Unpack[SerenadeParameters],
    ) -> None:
        parameters.setdefault("quality_function", "jaccard")
        super().__init__(rounds=rounds, min_jaccard=min_jaccard, **parameters)
