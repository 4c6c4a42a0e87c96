"""``TopKItemsets``: private top-K frequent itemsets (ALGORITHMS.md §4), and association rules
derived from the released itemsets by post-processing.

An itemset's noisy count counts the rows holding every item; :func:`itemset_query` writes it as
the query with exactly those rows (``[A]`` for a Boolean attribute or an item, ``[A = c]`` for
the item ``A=c``, a public bin ``A=[25.0, 50.0)`` of a numeric attribute as
``[25.0 <= A] & ![50.0 <= A]``: false on a row where A is missing, as the count has it).

Displays (issue #21) say what they show: the rank is the order of the private selection, not of
the noisy counts (:func:`order_note`), and each released count comes with an interval that
holds the true count, all K together, with a stated probability (:func:`count_intervals`).

A claim shown holds after the noise (issue #21). When K is large for ε, the selection's
noise lets itemsets from the universe's tail win picks (at K = 100 on T10I4D100K, ε = 1.4,
nearly every pick has a true count of 0). So the default output, ``itemsets_``, holds only the
picks *confirmed* by their count: the floor y − t of :func:`confirmation_margin` reaches
``min_count``, which all shown picks' true counts do together with probability ≥ 1 − α.
``all_itemsets_`` (CLI ``--all``) keeps every pick; files hold every pick with its verdict.

``length="auto"`` (the default, issue #21): the longest length of :data:`AUTO_LENGTHS` whose
plan the server accepts for this K, ε and catalog. Whether the server can serve a length is
decided from public values only (the item groups, ``n_max``, the row width, K and the noise
scale; ``dpmine_server.operations.itemset_plan``), and the free estimate endpoint answers it, so
trying 3, then 2, then 1 reads no data and costs nothing.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from itertools import combinations
from typing import TYPE_CHECKING, Any, Literal

from dpmine.connection import DatasetHandle
from dpmine.errors import InvalidRequestError, ParameterError
from dpmine.frames import PathLike, as_path, data_frame, write_csv
from dpmine.intervals import LEVEL, cell_interval, half_width
from dpmine.items import items_display
from dpmine.miners._base import BaseMiner, NotMinedError, Plan, _Spent
from dpmine.miners._rho import (
    EM_RHO,
    GENERIC_RHO,
    PURE,
    RENAMED_QUANTILE,
    RHO_MARGIN,
    Composition,
    check_budget,
    composition_for,
    spent_text,
)
from dpmine.significance import ALPHA, counted, percent_at_least
from dpmine.wire import (
    COUNT_NOISY,
    DEFAULT_NUMERIC_BINS,
    FIM_TOPK_EM,
    FIM_TOPK_LAPLACE,
    AnyLiteral,
    CountNoiseKind,
    DatasetMetadata,
    NoisyCountRequest,
    NoisyCountResponse,
    NumericAttribute,
    Operation,
    PlannedCall,
    TopKItemsetsRequest,
    TopKItemsetsResponse,
    itemset_items,
    usable_columns,
)
from dpmine.wire.queries import And, Expr

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "AUTO_LENGTHS",
    "AssociationRule",
    "Confirmation",
    "ItemsetPlan",
    "MinedItemset",
    "TopKItemsets",
    "association_rules",
    "auto_length_note",
    "confirmation_margin",
    "confirmation_note",
    "count_intervals",
    "intervals_note",
    "item_literals",
    "itemset_display",
    "itemset_query",
    "order_note",
]

_METHODS = {"em": FIM_TOPK_EM, "laplace": FIM_TOPK_LAPLACE}
#: The lengths ``length="auto"`` tries, longest first.
AUTO_LENGTHS = (3, 2, 1)
_CSV_HEADER = (
    "rank",
    "items",
    "noisy_count",
    "noisy_frequency",
    "query",
    "count_low",
    "count_high",
    "count_floor",
    "confirmed",
)


@dataclass(frozen=True)
class MinedItemset:
    """A released itemset: its rank in the private selection, items, noisy count (if asked),
    the interval [count_low, count_high] that holds the true count (all K together with the
    miner's ``interval_level``; :func:`count_intervals`), noisy frequency (if asked), and the
    query text whose rows the count counts (:func:`itemset_display`; None when an item name
    is ambiguous in the schema). ``count_floor`` is the one-sided lower bound of the
    confirmation test (:func:`confirmation_margin`, all K together at 1 − α) and
    ``confirmed`` whether it reaches the miner's ``min_count``; both None without counts."""

    rank: int
    items: tuple[str, ...]
    noisy_count: int | None
    noisy_frequency: float | None
    query: str | None = None
    count_low: int | None = None
    count_high: int | None = None
    count_floor: int | None = None
    confirmed: bool | None = None


def item_literals(
    schema: DatasetMetadata, numeric_bins: int | None = None
) -> dict[str, AnyLiteral | None]:
    """The literal of every item name of the server's item universe (§4.1,
    :func:`~dpmine.wire.items.itemset_items`): an item of transaction data or a Boolean
    attribute ``A`` is ``[A]``, the item ``A=c`` of a categorical attribute ``[A = c]``, with
    ``numeric_bins`` the bin ``A=[lo, hi)`` of a numeric attribute its closed interval. A name
    that two items share (an attribute ``a=b`` with category ``c`` and an attribute ``a``
    with category ``b=c``) maps to None."""
    found: dict[str, AnyLiteral | None] = {}
    for group in itemset_items(schema, numeric_bins):
        for name, literal in group:
            found[name] = None if name in found else literal
    return found


def _itemset_literals(
    items: Sequence[str], schema: DatasetMetadata, numeric_bins: int | None
) -> list[AnyLiteral] | None:
    literals = item_literals(schema, numeric_bins)
    terms = [literals.get(item) for item in items]
    chosen = [term for term in terms if term is not None]
    if not chosen or len(chosen) != len(terms):
        return None
    return chosen


def itemset_query(
    items: Sequence[str], schema: DatasetMetadata, numeric_bins: int | None = None
) -> Expr | None:
    """The conjunction of the items' literals: the rows the itemset's count counts (None when
    an item name is ambiguous or unknown)."""
    chosen = _itemset_literals(items, schema, numeric_bins)
    if chosen is None:
        return None
    return chosen[0] if len(chosen) == 1 else And(terms=list(chosen))


def itemset_display(
    items: Sequence[str], schema: DatasetMetadata, numeric_bins: int | None = None
) -> str | None:
    """:func:`itemset_query` as short text with exactly its rows (a bin as
    ``[25.0 <= age] & ![50.0 <= age]``, :func:`dpmine.items.items_display`, as rule lists
    print it); None when an item name is ambiguous or unknown."""
    chosen = _itemset_literals(items, schema, numeric_bins)
    return None if chosen is None else items_display(chosen, schema)


def count_intervals(
    noisy_counts: Sequence[int],
    *,
    scale: float,
    level: float = LEVEL,
    kind: CountNoiseKind = "laplace",
) -> tuple[int, list[tuple[int, int]]]:
    """(t, intervals): [y − t, y + t] ∩ [0, ∞) around each of the K released counts y, with t
    the smallest integer such that P(|Z| > t) ≤ 1 − level^(1/K) for Z discrete Laplace of
    ``scale``, or discrete Gaussian of σ = ``scale`` with ``kind`` "discrete_gaussian" (zCDP
    datasets; exact tails, :func:`dpmine.intervals.half_width`).

    Proof of coverage: given the data, the selected itemsets and their true counts c_i are
    fixed by the selection, whose noise is independent of the count noise; y_i = c_i + Z_i
    with Z_1 … Z_K i.i.d. of that law (the release of §4.2 step 3). So
    P(every c_i ∈ [y_i − t, y_i + t]) = P(|Z| ≤ t)^K ≥ level, and clamping at 0 removes no
    possible count. Post-processing of public values: no data, no budget.
    """
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    if not noisy_counts:
        return 0, []
    miss = -math.expm1(math.log(level) / len(noisy_counts))  # 1 − level^(1/K), without rounding
    t = half_width(scale, miss, kind)
    return t, [cell_interval(count, t) for count in noisy_counts]


def confirmation_margin(
    k: int, *, scale: float, alpha: float = ALPHA, kind: CountNoiseKind = "laplace"
) -> int:
    """The smallest integer t ≥ 0 with P(Z > t) ≤ 1 − (1 − α)^(1/K) for the noise Z of one of
    K released counts (discrete Laplace of ``scale``, or discrete Gaussian of σ = ``scale``).
    An itemset is confirmed at ``min_count`` when its floor y − t ≥ ``min_count``.

    Proof: Z is symmetric, so P(Z > t) = P(|Z| > t)/2, and t is :func:`half_width` at twice
    the one-sided miss. Given the data, the selection fixes the K itemsets and their true
    counts c_i; the count noises Z_i are i.i.d. and independent of the selection (§4.2 step
    3). An itemset with c_i < ``min_count`` is confirmed only if y_i − t ≥ ``min_count`` > c_i,
    i.e. Z_i > t; so P(some confirmed itemset has c_i < ``min_count``) ≤
    P(some Z_i > t) = 1 − (1 − P(Z > t))^K ≤ α, for every table and every ``min_count``.
    Post-processing of public values: no data, no budget.
    """
    if not 0 < alpha < 0.5:
        raise ValueError(f"alpha must be in (0, 0.5), got {alpha!r}")
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k!r}")
    one_sided = -math.expm1(math.log1p(-alpha) / k)  # 1 − (1 − α)^(1/K), without rounding
    return half_width(scale, 2 * one_sided, kind)


def confirmation_note(
    *, shown: int, total: int, min_count: int, alpha: float, margin: int | None
) -> str:
    """What the default output holds: the confirmed picks, and where the others are."""
    if margin is None:
        return (
            f"no counts were released, so none of the {counted(total, 'pick')} is confirmed: "
            "they are the selection's output only (release counts to confirm them)"
        )
    floor = f"≥ {counted(min_count, 'row')} (noisy count − {margin} ≥ {min_count}"
    if shown == 0:
        return (
            f"shown: none of the {counted(total, 'pick')} is confirmed to have {floor} "
            "needed); they may be tail itemsets that won a pick by noise: all_itemsets_ (CLI: "
            "--all) lists them"
        )
    rest = total - shown
    others = (
        f"; the other {rest} may be tail itemsets that won a pick by noise: all_itemsets_ "
        "(CLI: --all) lists them"
        if rest
        else ""
    )
    return (
        f"shown: the {shown} of {total} picks confirmed to have {floor}; all shown hold "
        f"together with probability ≥ {percent_at_least(1 - alpha)}){others}"
    )


def _count_noise_kind(released: TopKItemsetsResponse) -> CountNoiseKind:
    """The counts' noise law as the release reports it (Laplace when it reports none)."""
    return "laplace" if released.count_noise is None else released.count_noise.kind


def order_note(method: str, epsilon_selection: float) -> str:
    """What the rank means (§4.2, §4.3): the order of the private selection, not of the noisy
    counts, which carry noise of their own."""
    noise = "Gumbel" if method == "em" else "Laplace"
    return (
        f"rank = order of the private selection (the top K truncated counts plus {noise} noise, "
        f"ε_s = {epsilon_selection:.6g}), not of the noisy counts: those carry separate noise, "
        "so a count may exceed the count of a better rank"
    )


def _reason(detail: str) -> str:
    """A refusal without the estimate's ``call 0 (operation):`` prefix."""
    head, separator, rest = detail.partition("): ")
    return rest if separator and head.startswith("call ") else detail


def auto_length_note(length: int, refused: Sequence[str]) -> str:
    """What ``length="auto"`` chose and why the longer lengths were refused."""
    why = f" ({'; '.join(refused)})" if refused else ""
    return f"length auto: {length}-itemsets, the longest this server serves at this K and ε{why}"


def intervals_note(
    level: float, k: int, scale: float, half: int, kind: CountNoiseKind = "laplace"
) -> str:
    """How the count intervals read (:func:`count_intervals`)."""
    law = (
        "discrete Gaussian noise of σ"
        if kind == "discrete_gaussian"
        else "discrete Laplace noise of scale"
    )
    return (
        f"count interval: the {k} true counts all lie in their intervals together with "
        f"probability ≥ {percent_at_least(level)} (noisy count ± {half}, clamped at 0; each "
        f"count has {law} {scale:.3g})"
    )


@dataclass(frozen=True)
class Confirmation:
    """What the planned release lets the default output show, from public values only: the
    counts' noise (``kind``, ``scale``), the margin t of :func:`confirmation_margin` and the
    smallest noisy count shown, t + ``min_count``, against the table's public ``n_max``."""

    kind: CountNoiseKind
    scale: float
    margin: int
    min_count: int
    alpha: float
    n_max: int

    @property
    def smallest_shown(self) -> int:
        """The least noisy count a shown pick has."""
        return self.margin + self.min_count


@dataclass(frozen=True)
class ItemsetPlan(Plan):
    """A top-K plan: the priced calls and, with counts, what the confirmation test can show
    (:class:`Confirmation`; None without counts)."""

    confirmation: Confirmation | None = None
    k: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def warnings(self) -> list[str]:
        """When no pick can be shown: no counts, or a floor above every possible count."""
        found = self.confirmation
        if found is None:
            return [
                "no counts are released, so no pick can be confirmed: the output is the "
                "selection's alone"
            ]
        if found.smallest_shown > found.n_max:
            return [
                f"no pick can be shown: a pick needs a noisy count of at least "
                f"{found.smallest_shown}, above the table's n_max of {found.n_max} rows; raise "
                "the budget or count_share, or lower k (the count noise grows with K)"
            ]
        return []

    def report(self) -> str:
        """The confirmation floor, then on a zCDP dataset each call's ρ, then the warnings."""
        lines = list(self.notes)
        found = self.confirmation
        if found is not None:
            law = "discrete Gaussian σ" if found.kind == "discrete_gaussian" else "Laplace scale"
            lines.append(
                f"confirmation: a pick is shown when its noisy count reaches "
                f"{found.smallest_shown} (count noise: {law} {found.scale:.3g} for each of the "
                f"{self.k} counts; t = {found.margin} keeps all shown picks at "
                f"≥ {counted(found.min_count, 'row')} with probability ≥ "
                f"{percent_at_least(1 - found.alpha)}); "
                "itemsets with far fewer rows are left in all_itemsets_"
            )
        lines += self.rho_lines()
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)


@dataclass(frozen=True)
class AssociationRule:
    """X → Y from released noisy counts only (post-processing; no budget, no data)."""

    antecedent: tuple[str, ...]
    consequent: tuple[str, ...]
    noisy_support: int
    confidence: float
    lift: float | None


class TopKItemsets(BaseMiner):
    """The K most frequent itemsets of length ``length`` (or ``(min, max)``), privately.

    ``method="em"`` (Bhaskar et al. Algorithm 1) or ``"laplace"`` (Algorithm 2); ``epsilon`` is
    the cost of the selection (+ counts when ``with_counts``, ``count_share`` of it).
    ``threshold_quantile``: the selection's truncation failure probability (ALGORITHMS.md §4;
    ``rho`` on the wire). ``frequency_epsilon`` > 0 buys a separate noisy row count to turn
    counts into frequencies.

    ``rho``: the run's budget on a zCDP dataset (issue #24), in place of ``epsilon``: the
    counts get ``count_share`` of ρ (ε_p²/2) and the selection the rest (K peeled draws at
    ε_s/K, ε_s²/(8K) for ``em``; ε_s²/2 for ``laplace``), after the row count's
    ``frequency_epsilon``²/2, so that the run costs ρ (:meth:`request_epsilon`).

    ``numeric_bins``: numeric attributes of a table give one item per public bin (the owner's
    grid, else this many equal-width bins, as rule lists do; None: no numeric items).
    ``columns`` / ``exclude``: the attributes whose items may be used, checked against the
    public schema before anything is sent. ``interval_level``: the probability with which the
    K count intervals hold their true counts together.

    ``min_count`` and ``alpha``: the confirmation test of the default output (module
    docstring): ``itemsets_`` holds the picks whose count floor reaches ``min_count`` rows,
    all of them truly so with probability ≥ 1 − α; ``all_itemsets_`` every pick.
    """

    def __init__(
        self,
        *,
        k: int = 10,
        length: int | tuple[int, int] | Literal["auto"] = "auto",
        epsilon: float = 1.4,
        method: Literal["em", "laplace"] = "em",
        threshold_quantile: float = 0.1,
        rho: float | None = None,
        with_counts: bool = True,
        count_share: float = 0.5,
        frequency_epsilon: float = 0.0,
        numeric_bins: int | None = DEFAULT_NUMERIC_BINS,
        columns: Sequence[str] | None = None,
        exclude: Sequence[str] = (),
        interval_level: float = LEVEL,
        min_count: int = 1,
        alpha: float = ALPHA,
    ) -> None:
        self.k = k
        self.length = length
        self.epsilon = epsilon
        self.method = method
        self.threshold_quantile = threshold_quantile
        self.rho = rho
        self.with_counts = with_counts
        self.count_share = count_share
        self.frequency_epsilon = frequency_epsilon
        self.numeric_bins = numeric_bins
        self.columns = columns
        self.exclude = exclude
        self.interval_level = interval_level
        self.min_count = min_count
        self.alpha = alpha

    def _found(self) -> str:
        return f"{len(self._mined())} of {len(self._picked())} itemsets confirmed"

    def _check_params(self) -> None:
        """Refuse what no dataset could accept, naming the parameter and its valid values."""
        if not (isinstance(self.k, int) and self.k >= 1):
            raise ParameterError(f"k must be a whole number of at least 1, got {self.k!r}")
        if self.length != "auto":
            self._given_lengths()
        if not (isinstance(self.epsilon, int | float) and math.isfinite(self.epsilon)) or not (
            self.epsilon > 0
        ):
            raise ParameterError(f"epsilon must be a positive number, got {self.epsilon!r}")
        if self.method not in _METHODS:
            raise ParameterError(f"method must be 'em' or 'laplace', got {self.method!r}")
        check_budget(self.rho, self.epsilon, 1.4, RENAMED_QUANTILE)
        for name in ("threshold_quantile", "count_share", "interval_level"):
            value = getattr(self, name)
            if not 0 < value < 1:
                raise ParameterError(f"{name} must be in (0, 1), got {value!r}")
        if not self.frequency_epsilon >= 0:
            raise ParameterError(
                f"frequency_epsilon must be 0 (no row count) or positive, got "
                f"{self.frequency_epsilon!r}"
            )
        if not (isinstance(self.min_count, int) and not isinstance(self.min_count, bool)) or (
            self.min_count < 1
        ):
            raise ParameterError(
                f"min_count must be a whole number of rows, at least 1, got {self.min_count!r}"
            )
        if not 0 < self.alpha < 0.5:
            raise ParameterError(f"alpha must be in (0, 0.5), got {self.alpha!r}")
        if self.numeric_bins is not None and self.numeric_bins < 2:
            raise ParameterError(
                f"numeric_bins must be at least 2, or None for no numeric items, got "
                f"{self.numeric_bins!r}"
            )

    def columns_for(self, schema: DatasetMetadata) -> list[str] | None:
        """The attributes whose items may be used (``columns`` minus ``exclude``, schema
        order), or None for all (:func:`~dpmine.wire.items.usable_columns`); a
        :class:`~dpmine.errors.ParameterError` names an unknown column."""
        try:
            return usable_columns(schema, self.columns, self.exclude)
        except ValueError as error:
            raise ParameterError(str(error)) from None

    def bins_for(self, schema: DatasetMetadata, columns: Sequence[str] | None) -> int | None:
        """``numeric_bins`` when an allowed attribute is numeric, else None (the request then
        reads as before numeric items existed)."""
        numeric = any(
            isinstance(attribute, NumericAttribute)
            and (columns is None or attribute.name in columns)
            for attribute in schema.attributes
        )
        return self.numeric_bins if numeric else None

    def _given_lengths(self) -> tuple[int, int]:
        """(shortest, longest) of a given ``length``; a ParameterError says what is valid."""
        length = self.length
        low, high = length if isinstance(length, tuple) else (length, length)
        if not (
            isinstance(low, int)
            and isinstance(high, int)
            and not isinstance(low, bool)
            and not isinstance(high, bool)
            and 1 <= low <= high
        ):
            raise ParameterError(
                "length must be 'auto', a whole number of at least 1, or (shortest, longest) "
                f"with 1 ≤ shortest ≤ longest, got {length!r}"
            )
        return low, high

    def _lengths(self, dataset: DatasetHandle) -> tuple[int, int]:
        """The lengths of the run: the given ones, or under ``auto`` the longest of
        :data:`AUTO_LENGTHS` whose request the server prices (free; module docstring). Sets
        ``length_`` and ``length_note_``. Every length refused: the shortest one's error is
        raised, which names what to change."""
        self.length_note_: str | None = None
        if self.length != "auto":
            self.length_ = self._given_lengths()
            return self.length_
        refused: list[str] = []
        for length in AUTO_LENGTHS:
            call = self._operation().plan(self._request(dataset.schema, (length, length)))
            try:
                dataset.estimate([call])
            except InvalidRequestError as error:
                if length == AUTO_LENGTHS[-1]:
                    raise
                refused.append(f"{length}-itemsets: {_reason(error.detail)}")
                continue
            self.length_ = (length, length)
            self.length_note_ = auto_length_note(length, refused)
            return self.length_
        raise AssertionError("unreachable: the last length raises")  # pragma: no cover

    def _request(self, schema: DatasetMetadata, lengths: tuple[int, int]) -> TopKItemsetsRequest:
        if not 0 < self.interval_level < 1:
            raise ParameterError(f"interval_level must be in (0, 1), got {self.interval_level!r}")
        low, high = lengths
        columns = self.columns_for(schema)
        epsilon, count_share = self.request_epsilon(self._unit)
        return TopKItemsetsRequest(
            k=self.k,
            min_length=low,
            max_length=high,
            epsilon=epsilon,
            rho=self.threshold_quantile,
            with_counts=self.with_counts,
            count_share=count_share,
            numeric_bins=self.bins_for(schema, columns),
            columns=columns,
        )

    #: The unit of the current plan or run's dataset (set by ``plan()``).
    _unit: Composition = PURE

    def request_epsilon(self, composition: Composition) -> tuple[float, float]:
        """(ε, count_share) of the top-K request: ``epsilon`` and ``count_share`` on a pure
        dataset. On a zCDP one, of the budget ρ' = ρ·(1 − margin) − ε_f²/2 (ε_f the row
        count's), the counts get ρ_p = count_share·ρ' and the selection ρ_s = ρ' − ρ_p; the
        server charges K·(ε_s/K)²/8 (``em``) or ε_s²/2 (``laplace``) plus ε_p²/2 for the request
        ε = ε_s + ε_p split at ε_p/ε, so ε_s = √(8K·ρ_s) or √(2ρ_s), ε_p = √(2ρ_p) and the
        request costs ρ' exactly."""
        if composition is PURE or self.rho is None:
            return self.epsilon, self.count_share
        budget = self.rho * (1 - RHO_MARGIN) - GENERIC_RHO * self.frequency_epsilon**2
        if not budget > 0:
            raise ParameterError(
                f"frequency_epsilon = {self.frequency_epsilon!r} leaves nothing of rho = "
                f"{self.rho!r} (the row count costs frequency_epsilon²/2): lower it or raise rho"
            )
        share = self.count_share if self.with_counts else 0.0
        per_draw = EM_RHO / self.k if self.method == "em" else GENERIC_RHO
        selection = math.sqrt((1 - share) * budget / per_draw)
        counts = math.sqrt(share * budget / GENERIC_RHO)
        return selection + counts, (counts / (selection + counts) if share else self.count_share)

    def _operation(self) -> Operation[TopKItemsetsRequest, TopKItemsetsResponse]:
        if self.method not in _METHODS:
            raise ParameterError(f"method must be 'em' or 'laplace', got {self.method!r}")
        return _METHODS[self.method]

    def _calls(self, dataset: DatasetHandle) -> list[PlannedCall]:
        self._check_params()
        self._unit = composition_for(dataset, self.rho, "TopKItemsets", RENAMED_QUANTILE)
        calls = [self._operation().plan(self._request(dataset.schema, self._lengths(dataset)))]
        if self.frequency_epsilon > 0:
            count = NoisyCountRequest(epsilon=self.frequency_epsilon)
            calls.append(COUNT_NOISY.plan(count))
        return calls

    def plan(self, dataset: DatasetHandle) -> ItemsetPlan:
        """Price the run (free) and say what the confirmation test can show: the smallest
        noisy count a shown pick has, from the planned count noise (public: K, ε_p and the
        dataset's unit), with a warning when that exceeds the table's ``n_max``."""
        base = super().plan(dataset)
        return ItemsetPlan(
            calls=base.calls,
            estimate=base.estimate,
            budget_rho=base.budget_rho,
            delta=base.delta,
            confirmation=self._planned_confirmation(dataset.schema.n_max),
            k=self.k,
            notes=[] if self.length_note_ is None else [self.length_note_],
        )

    def _planned_confirmation(self, n_max: int) -> Confirmation | None:
        """The :class:`Confirmation` of the planned request (the server's count noise law:
        Laplace of scale K/ε_p on a pure dataset, discrete Gaussian σ = √K/ε_p on a zCDP one;
        ε_p = count_share · ε of the request)."""
        if not self.with_counts:
            return None
        epsilon, share = self.request_epsilon(self._unit)
        counts_epsilon = epsilon * share
        gaussian = self._unit is not PURE
        scale = (math.sqrt(self.k) if gaussian else self.k) / counts_epsilon
        kind: CountNoiseKind = "discrete_gaussian" if gaussian else "laplace"
        margin = confirmation_margin(self.k, scale=scale, alpha=self.alpha, kind=kind)
        return Confirmation(
            kind=kind,
            scale=scale,
            margin=margin,
            min_count=self.min_count,
            alpha=self.alpha,
            n_max=n_max,
        )

    def mine(self, dataset: DatasetHandle) -> TopKItemsets:
        """Run the plan (refused up front if the budget cannot cover it)."""
        self._check_budget(dataset)
        spent = _Spent()
        request = self._request(dataset.schema, self.length_)
        #: The request the run sent (its catalog, lengths and ε): public, for checks and exports.
        self.request_ = request
        released = dataset.run(request, operation=self._operation().name)
        spent.receipts.append(released.receipt)
        n_hat: int | None = None
        if self.frequency_epsilon > 0:
            count: NoisyCountResponse = dataset.count(epsilon=self.frequency_epsilon)
            spent.receipts.append(count.receipt)
            n_hat = max(count.count, 1)
        self.count_half_width_, bounds = self._count_bounds(released)
        self.confirmation_margin_ = self._confirmation_margin(released)
        #: Every pick of the selection, in its order, with its confirmation verdict.
        self.all_itemsets_ = self._itemsets(
            released, dataset.schema, request.numeric_bins, n_hat, bounds
        )
        #: The default output: the confirmed picks (every pick when no counts were released).
        self.itemsets_ = [
            itemset for itemset in self.all_itemsets_ if itemset.confirmed is not False
        ]
        self.noisy_row_count_ = n_hat
        self.epsilon_selection_ = released.epsilon_selection
        self.count_noise_scale_ = released.count_noise_scale
        self.count_noise_kind_ = _count_noise_kind(released)
        self._spent = spent
        return self

    def _count_bounds(
        self, released: TopKItemsetsResponse
    ) -> tuple[int | None, list[tuple[int, int] | None]]:
        """(t, intervals) of :func:`count_intervals` at ``interval_level``; (None, Nones) when
        the release has no counts or does not state their noise scale."""
        counts = [entry.noisy_count for entry in released.itemsets]
        known = [count for count in counts if count is not None]
        scale = released.count_noise_scale
        if scale is None or len(known) != len(counts):
            return None, [None] * len(counts)
        half, found = count_intervals(
            known, scale=scale, level=self.interval_level, kind=_count_noise_kind(released)
        )
        return half, list(found)

    def _confirmation_margin(self, released: TopKItemsetsResponse) -> int | None:
        """t of :func:`confirmation_margin` for this release; None without counts or scale."""
        scale = released.count_noise_scale
        counted = all(entry.noisy_count is not None for entry in released.itemsets)
        if scale is None or not released.itemsets or not counted:
            return None
        return confirmation_margin(
            len(released.itemsets),
            scale=scale,
            alpha=self.alpha,
            kind=_count_noise_kind(released),
        )

    def _itemsets(
        self,
        released: TopKItemsetsResponse,
        schema: DatasetMetadata,
        numeric_bins: int | None,
        n_hat: int | None,
        bounds: Sequence[tuple[int, int] | None],
    ) -> list[MinedItemset]:
        """The released itemsets with their display text, count intervals and verdicts."""
        margin = self.confirmation_margin_
        floors = [
            None if margin is None or entry.noisy_count is None else entry.noisy_count - margin
            for entry in released.itemsets
        ]
        return [
            MinedItemset(
                rank=rank,
                items=tuple(entry.items),
                noisy_count=entry.noisy_count,
                noisy_frequency=None
                if entry.noisy_count is None or n_hat is None
                else max(entry.noisy_count, 0) / n_hat,
                query=itemset_display(entry.items, schema, numeric_bins),
                count_low=None if bound is None else bound[0],
                count_high=None if bound is None else bound[1],
                count_floor=floor,
                confirmed=None if floor is None else floor >= self.min_count,
            )
            for rank, (entry, bound, floor) in enumerate(
                zip(released.itemsets, bounds, floors, strict=True), 1
            )
        ]

    def notes(self) -> list[str]:
        """What the results show: the rank order, which picks are shown and, with counts, the
        intervals' meaning."""
        picked = self._picked()
        lines = [order_note(self.method, self.epsilon_selection_), self.confirmation_note()]
        if self.count_noise_scale_ is not None and self.count_half_width_ is not None:
            lines.append(
                intervals_note(
                    self.interval_level,
                    len(picked),
                    self.count_noise_scale_,
                    self.count_half_width_,
                    self.count_noise_kind_,
                )
            )
        if self.length_note_ is not None:
            lines.append(self.length_note_)
        return lines

    def confirmation_note(self) -> str:
        """Which picks the default output shows (:func:`confirmation_note`)."""
        return confirmation_note(
            shown=len(self._mined()),
            total=len(self._picked()),
            min_count=self.min_count,
            alpha=self.alpha,
            margin=self.confirmation_margin_,
        )

    def nothing_confirmed(self) -> str | None:
        """None when a pick is shown; otherwise that none was confirmed, what was spent and how
        to get more signal."""
        if self._mined() or not self._picked():
            return None
        unit, spent = spent_text(self.receipts_)
        return (
            f"No pick is confirmed to have ≥ {counted(self.min_count, 'row')}. {unit} spent: "
            f"{spent}. For more signal: a smaller k (the selection's noise grows with K), a larger "
            "budget or count_share, a shorter length, or fewer columns. all_itemsets_ (CLI: "
            f"--all) lists the {counted(len(self._picked()), 'pick')}."
        )

    def summary(self) -> dict[str, Any]:
        """The notes and the public figures behind the intervals and the test, for JSON."""
        notes = self.notes()
        return {
            "length": list(self.length_),
            "length_note": self.length_note_,
            "order": notes[0],
            "confirmation": {
                "min_count": self.min_count,
                "alpha": self.alpha,
                "margin": self.confirmation_margin_,
                "shown": len(self._mined()),
                "picks": len(self._picked()),
                "note": notes[1],
                "message": self.nothing_confirmed(),
            },
            "count_intervals": None
            if self.count_half_width_ is None
            else {
                "level": self.interval_level,
                "simultaneous": True,
                "noise": self.count_noise_kind_,
                "noise_scale": self.count_noise_scale_,
                "half_width": self.count_half_width_,
                "note": notes[2],
            },
        }

    def _mined(self) -> list[MinedItemset]:
        itemsets: list[MinedItemset] | None = getattr(self, "itemsets_", None)
        if itemsets is None:
            raise NotMinedError("TopKItemsets has not mined yet; call mine() first")
        return itemsets

    def _picked(self) -> list[MinedItemset]:
        self._mined()
        return self.all_itemsets_

    def rules(self, *, min_confidence: float = 0.5) -> list[AssociationRule]:
        """Association rules among the confirmed itemsets (post-processing of noisy counts)."""
        return association_rules(
            self._mined(), min_confidence=min_confidence, n_rows=self.noisy_row_count_
        )

    def to_json(self, path: PathLike) -> None:
        """Write every pick (with ``confirmed``), the notes and the receipts as JSON."""
        payload = {
            "itemsets": [asdict(itemset) for itemset in self._picked()],
            **self.summary(),
            "receipts": [receipt.model_dump(mode="json") for receipt in self.receipts_],
        }
        as_path(path).write_text(json.dumps(payload, indent=2) + "\n")

    def to_csv(self, path: PathLike) -> None:
        """Write every pick as CSV (items joined with ' & ', the query text, the count interval,
        whose level :meth:`notes` states, the confirmation floor and verdict)."""
        rows = [["" if value is None else value for value in row] for row in self._table_rows()]
        for row in rows:  # the file keeps six significant digits of the frequency
            row[3] = "" if row[3] == "" else f"{row[3]:.6g}"
        write_csv(path, _CSV_HEADER, rows)

    def to_frame(self) -> pd.DataFrame:
        """The itemsets as a pandas DataFrame with the columns of :meth:`to_csv` (missing
        values, e.g. counts not bought, are empty; pandas is optional: ``pip install
        pandas``)."""
        return data_frame(_CSV_HEADER, self._table_rows())

    def _table_rows(self) -> list[list[object]]:
        return [
            [
                itemset.rank,
                " & ".join(itemset.items),
                itemset.noisy_count,
                itemset.noisy_frequency,
                itemset.query or "",
                itemset.count_low,
                itemset.count_high,
                itemset.count_floor,
                itemset.confirmed,
            ]
            for itemset in self._picked()
        ]


def association_rules(
    itemsets: list[MinedItemset], *, min_confidence: float = 0.5, n_rows: int | None = None
) -> list[AssociationRule]:
    """Rules X → Z - X for released itemsets Z and released proper subsets X, with
    confidence ĉ(Z)/ĉ(X) and, when Z - X and a noisy row count are released, lift.

    Only released noisy values are used (clamped at 0), so this costs no budget; the figures are
    as noisy as the counts they come from.
    """
    counts = {
        frozenset(s.items): max(s.noisy_count, 0) for s in itemsets if s.noisy_count is not None
    }
    rules: list[AssociationRule] = []
    for whole, support in counts.items():
        for size in range(1, len(whole)):
            for antecedent in combinations(sorted(whole), size):
                base = counts.get(frozenset(antecedent))
                if not base:
                    continue
                confidence = min(support / base, 1.0)
                if confidence < min_confidence:
                    continue
                consequent = tuple(sorted(whole - set(antecedent)))
                consequent_count = counts.get(frozenset(consequent))
                lift = (
                    confidence / (consequent_count / n_rows)
                    if consequent_count and n_rows
                    else None
                )
                rules.append(
                    AssociationRule(
                        antecedent=antecedent,
                        consequent=consequent,
                        noisy_support=support,
                        confidence=confidence,
                        lift=lift,
                    )
                )
    rules.sort(key=lambda rule: (-rule.confidence, -rule.noisy_support))
    return rules
