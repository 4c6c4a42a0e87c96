"""DP Bayesian rule lists (ALGORITHMS.md §5): ``brl.antecedents``, ``brl.sample_rule_list`` and
``brl.point_estimates``.

The label is the owner's (``DatasetMetadata.label``): a row is *positive* when its label equals
the declared positive value, *negative* when it holds another value, and in neither class when
the label is missing. Validation reads public metadata only (label declared, antecedent literals
that fit the declared attributes, universe sizes); the cost is the requested ε. Kernels:

* ``brl.antecedents`` (§5.2): Bhaskar top-K selection only (the whole ε on selection) run on
  the positive rows and on the negative rows. The classes partition the rows, so one added row
  changes one class's counts only: ε once (parallel composition). The request's ``columns``
  restricts the items to those attributes: the candidate set stays a function of public values,
  so the truncated counts keep their sensitivity.
* ``brl.sample_rule_list`` (§5.3): lazy Metropolis–Hastings in
  :mod:`~dpmine_server.operations.rule_list_mcmc` from the public start (the empty list) for
  at least the public minimum of steps (checked by the wire model), final state only;
  approximate ε-DP.
* ``brl.sample_rule_list_exact`` (§5.3, exact): the same target over the lists of at most
  ``max_rules`` rules, every list enumerated and one exponential-mechanism draw in
  :mod:`~dpmine_server.operations.rule_list_exact`; pure ε-DP, public work capped.
* ``brl.point_estimates`` (§5.4): capture counts + discrete Laplace(1/ε) (one partition, Δ = 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dpmine.wire import (
    BOOLEAN_FALSE,
    BOOLEAN_TRUE,
    BRL_ANTECEDENTS,
    BRL_POINT_ESTIMATES,
    BRL_SAMPLE_RULE_LIST,
    BRL_SAMPLE_RULE_LIST_EXACT,
    MAX_EXACT_RULE_LIST_WORK,
    Antecedent,
    AnyLiteral,
    BooleanAttribute,
    BoolLiteral,
    CategoricalAttribute,
    CatLiteral,
    DatasetKind,
    DatasetMetadata,
    LabelSpec,
    NumericAttribute,
    NumLiteral,
    PointEstimatesRequest,
    RuleListAntecedentsRequest,
    SampleRuleListExactRequest,
    SampleRuleListRequest,
    exact_rule_list_count,
    exact_rule_list_work,
    usable_columns,
)
from dpmine_server.data.bitsets import Bitset
from dpmine_server.data.columns import BooleanColumn, CategoricalColumn, ColumnStore
from dpmine_server.data.itemsets import ItemCatalog, row_subset_index, rule_list_catalog
from dpmine_server.dp.budget import Epsilon
from dpmine_server.dp.mechanisms import noisy_counts
from dpmine_server.dp.zcdp import ReleasePart, generic_release
from dpmine_server.errors import InternalError
from dpmine_server.operations.base import OperationSpec, Progress
from dpmine_server.operations.itemset_plan import TopKPlan
from dpmine_server.operations.itemsets import (
    MAX_UNIVERSE,
    selection_releases,
    top_k_itemsets,
    top_k_plan,
)
from dpmine_server.operations.rule_list_exact import sample_rule_list_exact
from dpmine_server.operations.rule_list_mcmc import (
    PUBLIC_START,
    ClassWords,
    PriorTables,
    capture_counts,
    sample_rule_list,
)
from dpmine_server.public_cache import public_cache

__all__ = [
    "OPERATIONS",
    "antecedent_catalog",
    "antecedent_words",
    "antecedents_plan",
    "class_rows",
    "exact_capture_counts",
    "require_label",
    "validate_antecedent",
]

# --------------------------------------------------------------------------------------------
# Validation (public metadata only)


def require_label(metadata: DatasetMetadata) -> LabelSpec:
    """The declared label, or a ValueError saying how the owner declares one."""
    label = metadata.label
    if label is None:
        raise ValueError(
            "rule lists need a label: the dataset owner sets the metadata field "
            '`label: {"attribute": "<label column>", "positive": "<positive value>"}` '
            "(for a label with more than two classes, `positive` names the class to predict; "
            "every other class is negative)"
        )
    attribute = metadata.attribute(label.attribute)
    if isinstance(attribute, BooleanAttribute) and _boolean_token(label.positive) is None:
        raise ValueError(
            f"the positive value {label.positive!r} of Boolean label {label.attribute!r} must be "
            "a Boolean token (1/0, true/false, t/f, yes/no); the owner corrects the metadata"
        )
    return label


def _boolean_token(text: str) -> bool | None:
    token = text.strip().lower()
    if token in BOOLEAN_TRUE:
        return True
    if token in BOOLEAN_FALSE:
        return False
    return None


def validate_antecedent(antecedent: Antecedent, metadata: DatasetMetadata, label: str) -> None:
    """Every literal names a declared attribute other than the label, with a literal of the
    attribute's type and, for a categorical one, a declared category."""
    for literal in antecedent.items:
        _validate_literal(literal, metadata, label)


def _validate_literal(literal: AnyLiteral, metadata: DatasetMetadata, label: str) -> None:
    name = literal.attribute
    if name == label:
        raise ValueError(f"{name!r} is the label attribute; antecedents may not test it")
    try:
        attribute = metadata.attribute(name)
    except KeyError:
        raise ValueError(f"unknown attribute {name!r} in an antecedent") from None
    expected: dict[type[Any], type[Any]] = {
        BooleanAttribute: BoolLiteral,
        CategoricalAttribute: CatLiteral,
        NumericAttribute: NumLiteral,
    }
    if not isinstance(literal, expected[type(attribute)]):
        raise ValueError(
            f"a {literal.kind!r} literal does not apply to the {attribute.type} attribute {name!r}"
        )
    if (
        isinstance(literal, CatLiteral)
        and isinstance(attribute, CategoricalAttribute)
        and literal.category not in attribute.categories
    ):
        raise ValueError(f"{literal.category!r} is not a declared category of {name!r}")


def _validate_rules(rules: Sequence[Antecedent], metadata: DatasetMetadata) -> None:
    label = require_label(metadata)
    for antecedent in rules:
        validate_antecedent(antecedent, metadata, label.attribute)


def antecedent_catalog(
    request: RuleListAntecedentsRequest, metadata: DatasetMetadata
) -> ItemCatalog:
    """The antecedent items a request may use (:func:`rule_list_catalog` with its public
    ``numeric_bins`` and ``columns``); ValueError when a column is unknown or is the label."""
    label = require_label(metadata)
    usable_columns(metadata, request.columns, label=label.attribute)
    return rule_list_catalog(metadata, numeric_bins=request.numeric_bins, columns=request.columns)


def _validate_antecedents(request: RuleListAntecedentsRequest, metadata: DatasetMetadata) -> None:
    catalog = antecedent_catalog(request, metadata)
    if not catalog.names:
        raise ValueError("this dataset declares no attribute besides the label, so no items")
    lengths = list(range(1, request.max_length + 1))
    if request.max_length > len(catalog.groups):
        where = "besides the label" if request.columns is None else "among the allowed columns"
        raise ValueError(
            f"antecedents of {request.max_length} items need that many attributes {where}; "
            f"this dataset has {len(catalog.groups)}: lower max_length"
        )
    universe = catalog.universe_size(lengths)
    if universe > MAX_UNIVERSE:
        raise ValueError(
            "the antecedent universe is too large for this server; lower max_length or numeric_bins"
        )
    if request.k_per_class > universe:
        raise ValueError(
            f"k_per_class = {request.k_per_class} exceeds the {universe} possible antecedents "
            f"of 1..{request.max_length} items: lower k_per_class"
        )
    antecedents_plan(request, metadata)


def antecedents_plan(request: RuleListAntecedentsRequest, metadata: DatasetMetadata) -> TopKPlan:
    """The public plan of each class's selection (§5.2; the same for both classes: at most
    ``n_max`` rows, one item per attribute); ValueError if the server's caps refuse it."""
    catalog = antecedent_catalog(request, metadata)
    return top_k_plan(
        catalog,
        n_max=metadata.n_max,
        width=len(catalog.groups),
        method=request.method,
        k=request.k_per_class,
        lengths=list(range(1, request.max_length + 1)),
        epsilon_selection=Epsilon.charge(request.epsilon).for_mechanism(),
        rho=request.rho,
    )


def _validate_sample(request: SampleRuleListRequest, metadata: DatasetMetadata) -> None:
    _validate_rules(request.antecedents, metadata)


def _validate_sample_exact(request: SampleRuleListExactRequest, metadata: DatasetMetadata) -> None:
    _validate_rules(request.antecedents, metadata)
    size = len(request.antecedents)
    work = exact_rule_list_work(size, request.max_rules, metadata.n_max)
    if work > MAX_EXACT_RULE_LIST_WORK:
        lists = exact_rule_list_count(size, request.max_rules)
        raise ValueError(
            f"exact sampling over {size} antecedents with max_rules = {request.max_rules} scores "
            f"{lists} rule lists over up to {metadata.n_max} rows, more than this server's cap "
            f"({MAX_EXACT_RULE_LIST_WORK} units of 64-row words): lower max_rules or the number of "
            "antecedents, or use brl.sample_rule_list (MCMC)"
        )


def _validate_point_estimates(request: PointEstimatesRequest, metadata: DatasetMetadata) -> None:
    _validate_rules(request.rules, metadata)


def _cost(
    request: RuleListAntecedentsRequest
    | SampleRuleListRequest
    | SampleRuleListExactRequest
    | PointEstimatesRequest,
) -> Epsilon:
    return Epsilon.charge(request.epsilon)


def _antecedent_releases(
    request: RuleListAntecedentsRequest, epsilon: Epsilon
) -> tuple[ReleasePart, ...]:
    """One top-K selection at the whole ε per class (:func:`_run_antecedents`); the classes hold
    disjoint rows, so a neighbour changes one of them and the release costs what one class's
    selection costs (parallel composition): :func:`selection_releases`."""
    selection = epsilon.for_mechanism()
    return tuple(
        selection_releases(request.method, k=request.k_per_class, epsilon_selection=selection)
    )


def _generic_releases(
    _request: SampleRuleListRequest | SampleRuleListExactRequest | PointEstimatesRequest,
    epsilon: Epsilon,
) -> tuple[ReleasePart, ...]:
    """One ε-DP release as a whole (§5.3, §5.4): ε²/2-zCDP (Bun & Steinke 2016, Prop. 1.4).
    The posterior samplers (the MCMC one charged as its target) are not yet shown
    bounded-range, so they take the generic map; the capture counts are Laplace."""
    return generic_release(epsilon)


# --------------------------------------------------------------------------------------------
# Data (private)


def class_rows(store: ColumnStore) -> tuple[Bitset, Bitset]:
    """(negative rows, positive rows) of the declared label (§5.1). PRIVATE."""
    label = require_label(store.metadata)
    column = store.column(label.attribute)
    if isinstance(column, CategoricalColumn):
        positive = column.category_bitset(label.positive)
        return column.present - positive, positive
    if isinstance(column, BooleanColumn):
        true_rows, false_rows = column.true, column.present - column.true
        if _boolean_token(label.positive):
            return false_rows, true_rows
        return true_rows, false_rows
    raise InternalError("a label column is Boolean or categorical (checked by the metadata)")


def antecedent_words(store: ColumnStore, rules: Sequence[Antecedent]) -> ClassWords:
    """Complements of the antecedents' supports and the two classes' rows, packed. PRIVATE."""
    negative, positive = class_rows(store)
    outside = np.stack(
        [
            ~Bitset.intersection(store.literal_bitset(item) for item in antecedent.items).words
            for antecedent in rules
        ]
        if rules
        else [np.zeros_like(positive.words)]
    )
    return ClassWords(outside=outside, classes=np.stack([negative.words, positive.words]))


def exact_capture_counts(store: ColumnStore, rules: Sequence[Antecedent]) -> np.ndarray:
    """Exact N_{j,y} of a public rule list, default rule last ((m + 1) × 2). PRIVATE."""
    return capture_counts(antecedent_words(store, rules), range(len(rules)))


# --------------------------------------------------------------------------------------------
# Kernels


def _antecedent(catalog: ItemCatalog, itemset: Sequence[int]) -> Antecedent:
    return Antecedent(items=[catalog.literals[item] for item in itemset])


def _run_antecedents(
    columns: ColumnStore,
    request: RuleListAntecedentsRequest,
    epsilon: Epsilon,
    rng: np.random.Generator,
    progress: Progress,
) -> dict[str, Any]:
    """Kernel of ``brl.antecedents`` (ALGORITHMS.md §5.2): pure ε-DP. Bhaskar top-K selection
    only (§4.2/§4.3 with ε_s = ε, monotone truncated counts Δ_up = 1, Δ_down = 0) on each class's
    rows; the classes are disjoint, so the two selections together cost ε (parallel
    composition)."""
    label = require_label(columns.metadata)
    catalog = antecedent_catalog(request, columns.metadata)
    plan = antecedents_plan(request, columns.metadata)
    negative, positive = class_rows(columns)
    lengths = list(range(1, request.max_length + 1))
    by_class = []
    for step, (name, rows) in enumerate((("positive", positive), ("negative", negative))):
        progress(step / 2, f"selecting the {name} class's antecedents")
        index = row_subset_index(
            columns,
            catalog,
            rows,
            key=(
                "brl",
                label.attribute,
                label.positive,
                name,
                request.numeric_bins,
                None if request.columns is None else tuple(sorted(request.columns)),
            ),
        )
        selected = top_k_itemsets(
            index,
            method=request.method,
            k=request.k_per_class,
            lengths=lengths,
            epsilon_selection=epsilon.for_mechanism(),
            epsilon_counts=None,
            rho=request.rho,
            rng=rng,
            plan=plan,
        )
        antecedents = [_antecedent(catalog, itemset) for itemset, _count in selected]
        by_class.append({"label": name, "antecedents": antecedents})
    return {"by_class": by_class}


def _prior_tables(request: SampleRuleListRequest | SampleRuleListExactRequest) -> PriorTables:
    """The §5.1 prior tables of a sampler request: public (the antecedents' cardinalities, λ
    and η), the same for the MCMC and the exact sampler."""
    return _cached_prior_tables(
        tuple(len(antecedent.items) for antecedent in request.antecedents),
        request.expected_length,
        request.expected_cardinality,
    )


@public_cache(maxsize=64)
def _cached_prior_tables(
    cardinalities: tuple[int, ...], expected_length: float, expected_cardinality: float
) -> PriorTables:
    """:meth:`PriorTables.of`, kept for repeated requests: the tables are a function of public
    values only (so is whether a request finds them here), and building them costs ~1.5 ms of
    log-sum-exps, more than the draw over a small list set."""
    return PriorTables.of(
        cardinalities,
        expected_length=expected_length,
        expected_cardinality=expected_cardinality,
    )


def _run_sample(
    columns: ColumnStore,
    request: SampleRuleListRequest,
    epsilon: Epsilon,
    rng: np.random.Generator,
    progress: Progress,
) -> dict[str, Any]:
    """Kernel of ``brl.sample_rule_list`` (ALGORITHMS.md §5.3): approximate ε-DP (exact at
    convergence of a fixed, public number of lazy Metropolis–Hastings steps, at least
    MIN_RULE_LIST_ITERATIONS; Δu from N_max). The chain starts from PUBLIC_START, never from a
    list the analyst chose (§6 #16)."""
    tables = _prior_tables(request)
    final = sample_rule_list(
        antecedent_words(columns, request.antecedents),
        tables,
        alpha=(request.alpha_negative, request.alpha_positive),
        epsilon=epsilon.for_mechanism(),
        n_max=columns.metadata.n_max,
        iterations=request.iterations,
        rng=rng,
        progress=progress,
        target=request.target,
        initial=PUBLIC_START,
    )
    return {
        "rules": [request.antecedents[position] for position in final],
        "iterations": request.iterations,
    }


def _run_sample_exact(
    columns: ColumnStore,
    request: SampleRuleListExactRequest,
    epsilon: Epsilon,
    rng: np.random.Generator,
    progress: Progress,
) -> dict[str, Any]:
    """Kernel of ``brl.sample_rule_list_exact`` (ALGORITHMS.md §5.3, exact): pure ε-DP. The
    exponential mechanism of the MCMC target over the public finite set D_L of lists of at most
    ``max_rules`` rules; the prior restricted to D_L is data-independent and the quality has the
    chain's sensitivity Δu (from N_max), so one Gumbel-max draw over all of D_L is ε-DP (proof
    in :mod:`~dpmine_server.operations.rule_list_exact`)."""
    tables = _prior_tables(request)
    drawn = sample_rule_list_exact(
        antecedent_words(columns, request.antecedents),
        tables,
        alpha=(request.alpha_negative, request.alpha_positive),
        epsilon=epsilon.for_mechanism(),
        n_max=columns.metadata.n_max,
        max_rules=request.max_rules,
        rng=rng,
        progress=progress,
        target=request.target,
    )
    return {
        "rules": [request.antecedents[position] for position in drawn],
        "max_rules": request.max_rules,
        "lists": exact_rule_list_count(len(request.antecedents), request.max_rules),
    }


def _run_point_estimates(
    columns: ColumnStore,
    request: PointEstimatesRequest,
    epsilon: Epsilon,
    _rng: np.random.Generator,
    _progress: Progress,
) -> dict[str, Any]:
    """Kernel of ``brl.point_estimates`` (ALGORITHMS.md §5.4): pure ε-DP, or ε²/2-zCDP on a
    zCDP dataset. The 2(m + 1) capture counts partition the labelled rows, so one row moves one
    count by 1 (L1 = 1, Δ₂² = 1): discrete Laplace of scale 1/ε on each, or the discrete
    Gaussian of σ = 1/ε (:func:`~dpmine_server.dp.mechanisms.noisy_counts`)."""
    captures = exact_capture_counts(columns, request.rules)
    release = noisy_counts(captures.T.ravel(), epsilon=epsilon.for_mechanism(), l1=1, l2_squared=1)
    noisy = release.values
    rules = len(request.rules) + 1
    return {
        "negative_counts": noisy[:rules].tolist(),
        "positive_counts": noisy[rules:].tolist(),
        "noise_scale": release.scale,
        "noise": release.noise(),
    }


_TABULAR: frozenset[DatasetKind] = frozenset({"table", "views"})

OPERATIONS: list[OperationSpec[Any, Any]] = [
    OperationSpec(
        operation=BRL_ANTECEDENTS,
        summary="Rule-list antecedents: private top-K itemsets of each label class (DP-BRL).",
        dataset_kinds=_TABULAR,
        validate=_validate_antecedents,
        cost=_cost,
        releases=_antecedent_releases,
        run=_run_antecedents,
    ),
    OperationSpec(
        operation=BRL_SAMPLE_RULE_LIST,
        summary="A Bayesian rule list sampled by Metropolis–Hastings (DP-BRL); DP at convergence.",
        dataset_kinds=_TABULAR,
        validate=_validate_sample,
        cost=_cost,
        releases=_generic_releases,
        run=_run_sample,
    ),
    OperationSpec(
        operation=BRL_SAMPLE_RULE_LIST_EXACT,
        summary="A Bayesian rule list of at most max_rules rules, drawn exactly (DP-BRL).",
        dataset_kinds=_TABULAR,
        validate=_validate_sample_exact,
        cost=_cost,
        releases=_generic_releases,
        run=_run_sample_exact,
    ),
    OperationSpec(
        operation=BRL_POINT_ESTIMATES,
        summary="Noisy capture counts of every rule of a public rule list (DP-BRL).",
        dataset_kinds=_TABULAR,
        validate=_validate_point_estimates,
        cost=_cost,
        releases=_generic_releases,
        run=_run_point_estimates,
    ),
]
