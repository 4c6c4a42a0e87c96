"""DP Bayesian rule lists (ALGORITHMS.md §5): `brl.antecedents`, `brl.sample_rule_list`,
`brl.point_estimates`.

The label is the owner's: the dataset metadata declares the label column and its positive value
(``DatasetMetadata.label``); a row is *positive* when its label equals that value, *negative*
when it holds any other value, and in neither class when the label is missing.

Items (the binary features antecedents are made of) are literals of the query model
(:mod:`dpmine.wire.queries`): ``[A = c]`` for every category c of a categorical attribute,
``[A]`` and ``![A]`` for a Boolean one, and one closed interval ``[a <= A <= b]`` per public bin of
a numeric one (the attribute's public ``grid`` as cut-points when it declares one, else
``numeric_bins`` equal-width bins over its public range). The label's attribute gives no items,
and ``columns`` restricts the attributes that do (:func:`dpmine.wire.items.usable_columns`). The
item functions live in :mod:`dpmine.wire.items` (shared with itemset mining) and are re-exported
here.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from dpmine.wire.common import (
    Epsilon,
    OperationRequest,
    Receipt,
    WireModel,
    check_chain_length,
)
from dpmine.wire.counts import CountNoise
from dpmine.wire.datasets import DatasetMetadata
from dpmine.wire.items import (
    DEFAULT_NUMERIC_BINS,
    MAX_NUMERIC_BINS,
    ColumnNames,
    numeric_bin_edges,
    numeric_bins_of,
    rule_list_items,
)
from dpmine.wire.itemsets import TopKMethod, elementary_symmetric
from dpmine.wire.queries import AnyLiteral

__all__ = [
    "DEFAULT_NUMERIC_BINS",
    "EXACT_LIST_OVERHEAD_WORDS",
    "MAX_ANTECEDENTS",
    "MAX_ANTECEDENTS_PER_CLASS",
    "MAX_ANTECEDENT_LENGTH",
    "MAX_EXACT_RULES",
    "MAX_EXACT_RULE_LIST_WORK",
    "MAX_NUMERIC_BINS",
    "MAX_RULE_LIST_ITERATIONS",
    "MIN_RULE_LIST_ITERATIONS",
    "Antecedent",
    "ClassAntecedents",
    "PointEstimatesRequest",
    "PointEstimatesResponse",
    "RuleClass",
    "RuleListAntecedentsRequest",
    "RuleListAntecedentsResponse",
    "RuleListTarget",
    "RuleListTargetFields",
    "SampleRuleListExactRequest",
    "SampleRuleListExactResponse",
    "SampleRuleListRequest",
    "SampleRuleListResponse",
    "antecedent_universe",
    "every_antecedent",
    "exact_rule_list_count",
    "exact_rule_list_work",
    "numeric_bin_edges",
    "numeric_bins_of",
    "rule_list_items",
]

#: Public resource limits, checked before any data is read.
MAX_ANTECEDENTS_PER_CLASS = 500
MAX_ANTECEDENT_LENGTH = 3
MAX_ANTECEDENTS = 2 * MAX_ANTECEDENTS_PER_CLASS
MAX_RULE_LIST_ITERATIONS = 200_000
#: Public minimum of ``brl.sample_rule_list``'s steps (§5.3; ALGORITHMS.md §6 #16). The release
#: is ε-DP only near the chain's stationary law: one step from a start whose every proposal is
#: uphill on D and rejectable on D' needs δ = 0.39 at ε = 1 (0.22 at ε = 0.5, 0.99 at ε = 10;
#: tests/privacy/test_audit_rule_lists.py). 1000 is the default, the thesis' shortest run
#: (Titanic) and four of its 250-step convergence windows: a floor against short chains, not a
#: proof of convergence.
MIN_RULE_LIST_ITERATIONS = 1000
#: Public cap on ``brl.sample_rule_list_exact``'s list length m (§5.3, exact sampler).
MAX_EXACT_RULES = 4
#: Public cap on the exact sampler's work, :func:`exact_rule_list_work`: about a second of
#: enumeration on one core at 0.5 ns a word (bench/README.md, "Exact rule lists by a compiled
#: count"), and 1.95 million lists at most (31 MB of scores).
MAX_EXACT_RULE_LIST_WORK = 2_000_000_000
#: Per-list bookkeeping of the exact sampler, in 64-row words: its prefix's share of the
#: interpreted work (about 0.5 µs a list), at the compiled count's 0.5 ns a word.
EXACT_LIST_OVERHEAD_WORDS = 1024


def exact_rule_list_count(antecedents: int, max_rules: int) -> int:
    """|D_L|: the rule lists of at most ``max_rules`` distinct antecedents out of
    ``antecedents`` (the empty list included), Σ_{m=0}^{L} M!/(M − m)!."""
    total, ordered = 0, 1
    for length in range(min(max_rules, antecedents) + 1):
        total += ordered
        ordered *= antecedents - length
    return total


def exact_rule_list_work(antecedents: int, max_rules: int, n_max: int) -> int:
    """Public work of the exact sampler, in 64-row words: every list of
    :func:`exact_rule_list_count` is scored by one pass over the ⌈N_max/64⌉ packed words of the
    rows its prefix leaves, plus :data:`EXACT_LIST_OVERHEAD_WORDS` of bookkeeping."""
    words = max(1, -(-n_max // 64)) + EXACT_LIST_OVERHEAD_WORDS
    return exact_rule_list_count(antecedents, max_rules) * words


# --------------------------------------------------------------------------------------------
# The public antecedent universe (metadata only; the server's catalog and the client use the
# same items, :func:`dpmine.wire.items.rule_list_items`)


def antecedent_universe(
    metadata: DatasetMetadata,
    max_length: int,
    numeric_bins: int,
    columns: Collection[str] | None = None,
) -> int:
    """How many antecedents of 1..L items, at most one per attribute (of ``columns`` when
    given), the public schema allows: Σ_ℓ e_ℓ(items per attribute), e_ℓ the elementary
    symmetric polynomial (§5.2)."""
    sizes = [len(items) for items in rule_list_items(metadata, numeric_bins, columns)]
    return sum(elementary_symmetric(sizes, max_length)[1:])


def every_antecedent(
    metadata: DatasetMetadata,
    max_length: int,
    numeric_bins: int,
    columns: Collection[str] | None = None,
) -> list[Antecedent]:
    """Every antecedent of 1..L items in schema order (by length, then attribute and item
    order), over ``columns`` when given. Meant for schemas whose :func:`antecedent_universe` is
    small."""
    groups = rule_list_items(metadata, numeric_bins, columns)
    found: list[Antecedent] = []
    for length in range(1, max_length + 1):
        for chosen in itertools.combinations(groups, length):
            found.extend(Antecedent(items=list(items)) for items in itertools.product(*chosen))
    return found


#: The two label classes (§5.1: y = 1 positive, y = 0 negative).
RuleClass = Literal["positive", "negative"]


class Antecedent(WireModel):
    """A conjunction of 1..L items, at most one per attribute (§5.1)."""

    items: list[AnyLiteral] = Field(min_length=1, max_length=MAX_ANTECEDENT_LENGTH)

    @model_validator(mode="after")
    def _one_item_per_attribute(self) -> Antecedent:
        names = [item.attribute for item in self.items]
        if len(set(names)) != len(names):
            raise ValueError(f"an antecedent holds at most one item per attribute, got {names}")
        return self


class ClassAntecedents(WireModel):
    """The itemsets selected on one class's rows, in selection order (no counts)."""

    label: RuleClass
    antecedents: list[Antecedent]


class RuleListAntecedentsResponse(WireModel):
    """K itemsets per class (§5.2). Their union is the antecedent set A of the rule list."""

    by_class: list[ClassAntecedents]
    receipt: Receipt


class RuleListAntecedentsRequest(OperationRequest[RuleListAntecedentsResponse]):
    """Private top-K itemset selection (Bhaskar, selection only) run on the positive rows and on
    the negative rows in one call: the classes partition the rows, so the call costs ε once
    (parallel composition, §5.2)."""

    k_per_class: int = Field(
        default=40, ge=1, le=MAX_ANTECEDENTS_PER_CLASS, description="K itemsets per class."
    )
    max_length: int = Field(
        default=2, ge=1, le=MAX_ANTECEDENT_LENGTH, description="L: itemsets of 1..L items."
    )
    epsilon: Epsilon
    method: TopKMethod = "em"
    rho: float = Field(default=0.1, gt=0, lt=1, description="Failure probability of truncation.")
    numeric_bins: int = Field(
        default=DEFAULT_NUMERIC_BINS,
        ge=2,
        le=MAX_NUMERIC_BINS,
        description="Equal-width public bins of a numeric attribute without a declared grid.",
    )
    columns: ColumnNames | None = Field(
        default=None,
        description=(
            "The attributes antecedents may use (default: every attribute but the label); "
            "leave out a column that gives the label away."
        ),
    )


PositiveFloat = Annotated[float, Field(gt=0, le=1e6, allow_inf_nan=False)]


class SampleRuleListResponse(WireModel):
    """The final state of the Metropolis–Hastings chain (§5.3): a rule list over the given
    antecedents, in order (the default rule is implicit). Nothing about the chain is released."""

    rules: list[Antecedent]
    iterations: int
    receipt: Receipt


#: The chain's target (§5.3). ``likelihood``: π(d) ∝ p(d)·exp(ε·ℓ(d)/Δu), the data-independent
#: prior p as the base measure of an exponential mechanism on the log-likelihood ℓ, whose
#: sensitivity is one-sided (a added row only lowers ℓ, by at most Δu; §0.8). ``posterior``:
#: π(d) ∝ exp(ε·u(d)/(2Δu)) with u = ℓ + ln p, the thesis' tempered posterior, which tempers
#: the prior too (at small ε the length prior then barely acts and lists grow long).
RuleListTarget = Literal["likelihood", "posterior"]


def _rule_list_chain_length(iterations: int) -> int:
    return check_chain_length(iterations, MIN_RULE_LIST_ITERATIONS)


RuleListIterations = Annotated[
    int,
    Field(
        le=MAX_RULE_LIST_ITERATIONS,
        json_schema_extra={"minimum": MIN_RULE_LIST_ITERATIONS},
        description=(
            f"Public number of Metropolis–Hastings steps, at least {MIN_RULE_LIST_ITERATIONS}; "
            "the final state is released."
        ),
    ),
    AfterValidator(_rule_list_chain_length),
]


class RuleListTargetFields(WireModel):
    """The target of both rule-list samplers (§5.1, §5.3): the prior's λ and η, the Dirichlet
    α and whether the prior is the base measure or part of the score. One definition, so that
    the MCMC and the exact sampler draw from the same law."""

    expected_length: PositiveFloat = Field(default=3.0, description="λ: prior mean list length.")
    expected_cardinality: PositiveFloat = Field(
        default=1.0, description="η: prior mean antecedent cardinality."
    )
    alpha_negative: PositiveFloat = Field(default=1.0, description="α0 of the Dirichlet prior.")
    alpha_positive: PositiveFloat = Field(default=1.0, description="α1 of the Dirichlet prior.")
    target: RuleListTarget = Field(
        default="likelihood", description="likelihood (prior as base measure) or posterior."
    )


class SampleRuleListRequest(RuleListTargetFields, OperationRequest[SampleRuleListResponse]):
    """A rule list drawn by Metropolis–Hastings from an exponential mechanism over rule lists
    (see :data:`RuleListTarget`), Δu = ln((N_max − 1 + α0 + α1)/min(α0, α1)) from public values
    (§5.3). Approximate DP: ε-DP once the chain has converged. The chain runs a fixed, public
    number of steps, at least :data:`MIN_RULE_LIST_ITERATIONS`, from a public start the analyst
    does not choose (the empty list, the same for every antecedent list and every order of
    it), and only its final state is released."""

    antecedents: list[Antecedent] = Field(min_length=1, max_length=MAX_ANTECEDENTS)
    epsilon: Epsilon
    iterations: RuleListIterations = MIN_RULE_LIST_ITERATIONS

    @model_validator(mode="before")
    @classmethod
    def _no_analyst_start(cls, data: object) -> object:
        # A start chosen by the analyst (the removed ``initial`` field) could be one whose every
        # proposal is uphill on D and rejectable on D' (§6 #16): refused with the reason rather
        # than as an unknown field. ``"initial": null`` chose nothing and is dropped, so that
        # requests of earlier clients (and jobs queued by them) still parse.
        if isinstance(data, dict) and "initial" in data:
            if data["initial"] is not None:
                raise ValueError(
                    "'initial' is no longer accepted: the chain starts from the empty rule list, "
                    "a public start that the analyst does not choose (ALGORITHMS.md §5.3, §6 #16)"
                )
            return {key: value for key, value in data.items() if key != "initial"}
        return data

    @model_validator(mode="after")
    def _distinct(self) -> SampleRuleListRequest:
        _require_distinct(self.antecedents)
        return self


def _require_distinct(antecedents: list[Antecedent]) -> None:
    keys = [antecedent.model_dump_json() for antecedent in antecedents]
    if len(set(keys)) != len(keys):
        raise ValueError("antecedents must be distinct")


class SampleRuleListExactResponse(WireModel):
    """One exact draw of the rule-list exponential mechanism over every list of at most
    ``max_rules`` rules (the default rule is implicit); ``lists`` is the public |D_L|."""

    rules: list[Antecedent]
    max_rules: int
    lists: int
    receipt: Receipt


class SampleRuleListExactRequest(
    RuleListTargetFields, OperationRequest[SampleRuleListExactResponse]
):
    """A rule list drawn *exactly* from the exponential mechanism of :data:`RuleListTarget`
    restricted to the public finite set D_L of lists of at most ``max_rules`` distinct
    antecedents (§5.3): every list is enumerated and scored, one Gumbel-max draw. Pure ε-DP,
    with Δu as for :class:`SampleRuleListRequest`. The public work
    :func:`exact_rule_list_work` must stay within :data:`MAX_EXACT_RULE_LIST_WORK`."""

    antecedents: list[Antecedent] = Field(min_length=1, max_length=MAX_ANTECEDENTS)
    epsilon: Epsilon
    max_rules: int = Field(
        default=3, ge=1, le=MAX_EXACT_RULES, description="L: lists of at most L rules."
    )

    @model_validator(mode="after")
    def _distinct(self) -> SampleRuleListExactRequest:
        _require_distinct(self.antecedents)
        return self


class PointEstimatesResponse(WireModel):
    """Noisy capture counts Ñ_{j,y} of every rule j = 1..m and of the default rule (last):
    N + discrete Laplace of scale 1/ε (one partition of the rows, Δ = 1; §5.4), or on a zCDP
    dataset the discrete Gaussian of σ = 1/ε (``noise``). Counts may be negative; clamp at 0
    before forming estimates."""

    negative_counts: list[int]
    positive_counts: list[int]
    noise_scale: float
    receipt: Receipt
    noise: CountNoise | None = Field(
        default=None,
        description=(
            "The noise law of the counts (`noise_scale` is its b or sigma); null on releases "
            "stored before it was reported (Laplace)."
        ),
    )


class PointEstimatesRequest(OperationRequest[PointEstimatesResponse]):
    """Noisy capture counts of a public rule list (§5.4). An empty list has the default only."""

    rules: list[Antecedent] = Field(default_factory=list, max_length=MAX_ANTECEDENTS)
    epsilon: Epsilon
