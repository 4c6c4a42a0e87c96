"""Private operations on redescriptions: ``red.compute_quality`` (ALGORITHMS.md §1.6) and
Serenade's ``serenade.initial_pairs`` and ``serenade.extend_one`` (§2.3, §2.4; kernels in
:mod:`serenade`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from dpmine.wire import (
    RED_COMPUTE_QUALITY,
    SERENADE_EXTEND_ONE,
    SERENADE_INITIAL_PAIRS,
    ComputeQualityRequest,
    DatasetMetadata,
    ExtendOneRequest,
    InitialPairsRequest,
    QualityMode,
    QualityParameters,
    Redescription,
    SerenadeOptions,
    attributes,
    jaccard,
    statistics_from_cells,
    usable_columns,
)
from dpmine_server.data.columns import ColumnStore
from dpmine_server.data.validation import validate_expr
from dpmine_server.dp.budget import Epsilon
from dpmine_server.dp.candidates import joint_proposal_cap
from dpmine_server.dp.mechanisms import noisy_counts
from dpmine_server.dp.zcdp import ReleasePart, em_draws, generic_release
from dpmine_server.operations.base import OperationSpec, Progress
from dpmine_server.operations.serenade import (
    REJECTION_MAX_EXPONENT,
    ExtensionRules,
    GridPairWork,
    QualityParams,
    RejectionPlan,
    ThresholdMode,
    check_pair_space,
    choose_threshold_mode,
    enumerated_cells,
    extend_one,
    extension_cache_key,
    extension_families,
    extension_key_text,
    extension_public_candidates,
    extension_public_size,
    extension_resources_key,
    extension_resources_key_text,
    extension_resources_public_size,
    grid_pair_work,
    initial_pairs,
    pair_families,
    parse_side,
    rejection_proposals,
)
from dpmine_server.operations.serenade_quality import (
    JACCARD_SENSITIVITY,
    Calibration,
    line_search,
    sensitivities,
)
from dpmine_server.public_cache import public_cache
from dpmine_server.services.extension_model import PricedKey

__all__ = [
    "MAX_ENUMERATED_CELLS",
    "OPERATIONS",
    "SharedProposals",
    "batch_shared_proposals",
    "extend_enumeration",
    "extend_proposals",
    "extend_rejection_plan",
    "extend_threshold_mode",
    "extension_candidate_count",
    "extension_priced_keys",
    "extension_resources_priced_key",
    "noisy_quality",
    "pairs_enumeration",
    "pairs_grid_work",
    "pairs_proposals",
    "pairs_rejection_plan",
    "pairs_threshold_mode",
    "quality_parameters",
    "rejection_plan",
    "support_cells",
    "validate_redescription",
]


def support_cells(columns: ColumnStore, redescription: Redescription) -> tuple[int, int, int, int]:
    """Exact (E11, E10, E01, E00) of a redescription (§1.2). Private: never release these."""
    left = columns.evaluate(redescription.left)
    right = columns.evaluate(redescription.right)
    e11 = (left & right).count()
    e10 = (left - right).count()
    e01 = (right - left).count()
    e00 = columns.all_rows().count() - e11 - e10 - e01
    return e11, e10, e01, e00


def noisy_quality(
    columns: ColumnStore, *, redescription: Redescription, epsilon: float, mode: QualityMode
) -> dict[str, Any]:
    """Noisy support statistics: ε-DP with discrete Laplace noise, ε²/2-zCDP with the discrete
    Gaussian on a zCDP dataset (:func:`~dpmine_server.dp.mechanisms.noisy_counts`).

    * ``cells`` [REC]: the four cells partition the rows, so adding or removing one row moves
      one cell by one: L1 = 1 and Δ₂² = 1. Laplace(1/ε) per cell (cost ε), or σ = 1/ε.
    * ``paper``: |I| and |U|; one row moves each of them by at most one (a row in E11 moves
      both), so L1 = 2 and Δ₂² = 1² + 1² = 2. Laplace(2/ε) each (ε/2 + ε/2), or σ = √2/ε.
    Derived statistics (clamped Ĩ, Ũ, J̃, supports, N̂, p̃) are post-processing of the release.
    """
    e11, e10, e01, e00 = support_cells(columns, redescription)
    if mode == "cells":
        release = noisy_counts([e11, e10, e01, e00], epsilon=epsilon, l1=1, l2_squared=1)
        n11, n10, n01, n00 = (int(v) for v in release.values)
        stats = statistics_from_cells(n11, n10, n01, n00)
        return {
            "mode": mode,
            "cells": {"e11": n11, "e10": n10, "e01": n01, "e00": n00},
            "statistics": {
                "support": stats.support,
                "union": stats.union,
                "jaccard": stats.jaccard,
                "support_left": stats.support_left,
                "support_right": stats.support_right,
                "n_rows": stats.n_rows,
                "p_value": stats.p_value,
            },
            "noise": release.noise(),
        }
    release = noisy_counts([e11, e11 + e10 + e01], epsilon=epsilon, l1=2, l2_squared=2)
    noisy_i, noisy_u = (int(v) for v in release.values)
    support, union = max(noisy_i, 0), max(noisy_u, 0)
    return {
        "mode": mode,
        "cells": {"intersection": noisy_i, "union": noisy_u},
        "statistics": {"support": support, "union": union, "jaccard": jaccard(support, union)},
        "noise": release.noise(),
    }


def _validate(request: ComputeQualityRequest, metadata: DatasetMetadata) -> None:
    validate_redescription(request.redescription, metadata)


def validate_redescription(redescription: Redescription, metadata: DatasetMetadata) -> None:
    """Left query on the left view, right query on the right view; on a single table no
    attribute may appear in both queries (§1.1). Raises ValueError saying what to fix."""
    two_views = metadata.kind == "views"
    left, right = redescription.left, redescription.right
    validate_expr(left, metadata, side="left query", views={"left"} if two_views else None)
    validate_expr(right, metadata, side="right query", views={"right"} if two_views else None)
    if not two_views:
        shared = sorted(attributes(left) & attributes(right))
        if shared:
            raise ValueError(
                f"attributes {shared} appear in both queries; on a single table each attribute "
                "may be used on one side only"
            )


def _cost(request: ComputeQualityRequest | InitialPairsRequest | ExtendOneRequest) -> Epsilon:
    return Epsilon.charge(request.epsilon)


def _quality_releases(_request: ComputeQualityRequest, epsilon: Epsilon) -> tuple[ReleasePart, ...]:
    """One release of the quality's counts (§1.6): Laplace, ε-DP, hence ε²/2-zCDP (Bun &
    Steinke 2016, Prop. 1.4); on a zCDP dataset the discrete Gaussian of σ = Δ₂/ε, exactly
    ε²/2-zCDP (CKS20; Δ₂ in :func:`noisy_quality`)."""
    return generic_release(epsilon)


def _pairs_releases(request: InitialPairsRequest, epsilon: Epsilon) -> tuple[ReleasePart, ...]:
    """``count`` independent exponential-mechanism draws at ε/count each (§2.3; plain or
    range-calibrated, §0.8): each ε/count-bounded-range, so count·(ε/count)²/8-zCDP (Cesar &
    Rogers 2021; Dong, Durfee & Rogers 2020)."""
    return em_draws(epsilon, request.count)


def _extend_releases(_request: ExtendOneRequest, epsilon: Epsilon) -> tuple[ReleasePart, ...]:
    """One exponential-mechanism draw at ε (§2.4): ε-bounded-range, so ε²/8-zCDP (Cesar &
    Rogers 2021)."""
    return em_draws(epsilon)


def _run(
    columns: ColumnStore,
    request: ComputeQualityRequest,
    epsilon: Epsilon,
    _rng: np.random.Generator,
    _progress: Progress,
) -> dict[str, Any]:
    """Kernel of ``red.compute_quality`` (ALGORITHMS.md §1.6): ε-DP, or ε²/2-zCDP on a zCDP
    dataset."""
    return noisy_quality(
        columns,
        redescription=request.redescription,
        epsilon=epsilon.for_mechanism(),
        mode=request.mode,
    )


# -- Serenade (§2) -----------------------------------------------------------------------------


def quality_parameters(quality: QualityParameters, n_max: int) -> QualityParams:
    """Public (s, x0, Δ_up, Δ_down): the given steepness or the line search's, the one-sided
    sensitivities from n_max with the coverage factor if y0 is given (§2.1, §0.8); for the
    plain-Jaccard ablation Δ_up = 1 (J jumps from 0 to 1) and Δ_down = ½. ``calibration``
    "symmetric" keeps the paper's c = ε/(2Δ)."""
    return _quality_parameters(
        quality.x0,
        quality.s,
        quality.function,
        n_max,
        coverage=(quality.y0, quality.s2),
        calibration=quality.calibration,
    )


# Keyed by public values only (the request's quality options and n_max): no private data.
@public_cache(maxsize=256)
def _quality_parameters(
    x0: float,
    s: float | None,
    function: Literal["serenade", "jaccard"],
    n_max: int,
    *,
    coverage: tuple[float | None, float | None],
    calibration: Calibration,
) -> QualityParams:
    if x0 >= n_max:
        raise ValueError(f"x0 = {x0} must be below the dataset's public row bound n_max = {n_max}")
    y0, s2 = coverage
    if function == "jaccard":
        sens = JACCARD_SENSITIVITY
        steepness = 0.0
    elif s is None:
        steepness, sens = line_search(x0, n_max, y0=y0, s2=s2, calibration=calibration)
    else:
        steepness, sens = s, sensitivities(s, x0, n_max, y0=y0, s2=s2)
    ranged = calibration == "range"
    return QualityParams(
        s=steepness,
        x0=x0,
        delta=sens.symmetric,
        function=function,
        y0=y0,
        s2=None if y0 is None else (steepness if s2 is None else s2),
        delta_up=sens.up if ranged else None,
        delta_down=sens.down if ranged else None,
    )


def _rules(options: SerenadeOptions) -> ExtensionRules:
    return ExtensionRules(
        operators=frozenset(options.operators),
        negations=options.negations,
        max_literals=options.max_literals,
        single_side_or=options.single_side_or,
        columns=None if options.columns is None else frozenset(options.columns),
    )


def _check_columns(options: SerenadeOptions, metadata: DatasetMetadata) -> None:
    """``options.columns`` names declared attributes and leaves a pair of attributes, one per
    side (public values only, before the charge); ValueError saying what to fix."""
    if options.columns is None:
        return
    try:
        usable_columns(metadata, options.columns)
    except ValueError as error:
        raise ValueError(f"options.columns: {error}") from None
    check_pair_space(metadata, _rules(options).columns)


def _check_allowed(red: Redescription, options: SerenadeOptions) -> None:
    """A query of the collection may use only the allowed columns (a restricted run never
    starts from, nor keeps, a literal the analyst left out)."""
    if options.columns is None:
        return
    outside = sorted((attributes(red.left) | attributes(red.right)) - set(options.columns))
    if outside:
        raise ValueError(
            f"uses column(s) {outside} that options.columns leaves out; allow them in "
            "options.columns or drop them from the query"
        )


#: Most cell pairs one call may enumerate (continuous thresholds at c > 8; public cap, checked
#: before the charge): about 10 minutes at the measured cost of a cell pair.
MAX_ENUMERATED_CELLS = 2 * 10**9


def _pairs_coefficient(request: InitialPairsRequest, metadata: DatasetMetadata) -> float:
    """c of one initial-pair draw, as the kernel computes it from the charged ε."""
    params = quality_parameters(request.quality, metadata.n_max)
    return params.coefficient(_cost(request).for_mechanism() / request.count)


def _extend_coefficient(request: ExtendOneRequest, metadata: DatasetMetadata) -> float:
    """c of the extension draw, as the kernel computes it from the charged ε."""
    params = quality_parameters(request.quality, metadata.n_max)
    return params.coefficient(_cost(request).for_mechanism())


def pairs_threshold_mode(request: InitialPairsRequest, metadata: DatasetMetadata) -> ThresholdMode:
    """The threshold mode a ``serenade.initial_pairs`` call runs in (public: the request and
    the metadata)."""
    return choose_threshold_mode(
        _pairs_coefficient(request, metadata), request.options.threshold_mode
    )


def extend_threshold_mode(request: ExtendOneRequest, metadata: DatasetMetadata) -> ThresholdMode:
    """The threshold mode a ``serenade.extend_one`` call runs in (public: the request and the
    metadata)."""
    return choose_threshold_mode(
        _extend_coefficient(request, metadata), request.options.threshold_mode
    )


def pairs_enumeration(request: InitialPairsRequest, metadata: DatasetMetadata) -> int:
    """Public bound on the cell pairs a ``serenade.initial_pairs`` call enumerates: 0 unless
    its continuous families are enumerated (c > 8, :func:`~.serenade.enumerated_cells`)."""
    c = _pairs_coefficient(request, metadata)
    if pairs_threshold_mode(request, metadata) != "continuous" or c <= REJECTION_MAX_EXPONENT:
        return 0
    families = pair_families(metadata, _rules(request.options))
    return enumerated_cells(families, request.count, metadata.n_max) if families else 0


def extend_enumeration(request: ExtendOneRequest, metadata: DatasetMetadata) -> int:
    """Public bound on the cell pairs a ``serenade.extend_one`` call enumerates (as
    :func:`pairs_enumeration`, one draw)."""
    c = _extend_coefficient(request, metadata)
    if extend_threshold_mode(request, metadata) != "continuous" or c <= REJECTION_MAX_EXPONENT:
        return 0
    families = extension_families(metadata, request.collection, _rules(request.options))
    return enumerated_cells(families, 1, metadata.n_max) if families else 0


def extension_priced_keys(request: ExtendOneRequest, metadata: DatasetMetadata) -> list[PricedKey]:
    """The public cache key of every position of a ``serenade.extend_one`` call, as its kernel
    builds them (:func:`~.serenade.extension_cache_key`), with its canonical text and public
    size (services/extension_model.py prices the call against them)."""
    rules = _rules(request.options)
    mode = extend_threshold_mode(request, metadata)
    params = quality_parameters(request.quality, metadata.n_max)
    size = extension_public_size(metadata, rules, mode)
    keys = []
    for red in request.collection:
        red_json = red.model_dump_json()
        keys.append(
            PricedKey(
                key=extension_cache_key(red_json, rules, mode, params),
                text=extension_key_text(red_json, rules, mode, params),
                size=size,
            )
        )
    return keys


def extension_resources_priced_key(
    request: ExtendOneRequest, metadata: DatasetMetadata
) -> PricedKey:
    """The public cache key of a ``serenade.extend_one`` call's banks and grids (the kernel's
    :func:`~.serenade.extension_resources_key`), with its canonical text and public size:
    held by the model, they price the call without its per-call work
    (services/extension_pricing.py)."""
    rules = _rules(request.options)
    mode = extend_threshold_mode(request, metadata)
    return PricedKey(
        key=extension_resources_key(rules, mode),
        text=extension_resources_key_text(rules, mode),
        size=extension_resources_public_size(metadata, rules, mode),
    )


def extension_candidate_count(request: ExtendOneRequest, metadata: DatasetMetadata) -> int:
    """Public bound on the candidates of one position's set in a ``serenade.extend_one`` call
    (:func:`~.serenade.extension_public_candidates`)."""
    return extension_public_candidates(
        metadata, _rules(request.options), extend_threshold_mode(request, metadata)
    )


def pairs_proposals(request: InitialPairsRequest, metadata: DatasetMetadata) -> int:
    """Public bound on the rejection proposals of a ``serenade.initial_pairs`` call: the
    kernel's cap (:func:`~.serenade.rejection_proposals`, exceeded with probability ≤ 10⁻⁹)
    when it has continuous families sampled by rejection (c ≤ 8), else 0."""
    if pairs_threshold_mode(request, metadata) != "continuous":
        return 0
    if not pair_families(metadata, _rules(request.options)):
        return 0
    return rejection_proposals(_pairs_coefficient(request, metadata), request.count)


def pairs_grid_work(request: InitialPairsRequest, metadata: DatasetMetadata) -> GridPairWork:
    """Public bounds on the grid counting of a ``serenade.initial_pairs`` call in grid mode
    (:func:`~.serenade.grid_pair_work`), else none."""
    if pairs_threshold_mode(request, metadata) != "grid":
        return GridPairWork(products=0, histogram_rows=0, candidates=0)
    return grid_pair_work(metadata, _rules(request.options))


def extend_proposals(request: ExtendOneRequest, metadata: DatasetMetadata) -> int:
    """Public bound on the rejection proposals of a ``serenade.extend_one`` call (as
    :func:`pairs_proposals`, one draw): the cap of its :func:`extend_rejection_plan`, 0
    without one."""
    plan = extend_rejection_plan(request, metadata)
    return 0 if plan is None else plan.cap


def pairs_rejection_plan(
    request: InitialPairsRequest, metadata: DatasetMetadata
) -> RejectionPlan | None:
    """How a ``serenade.initial_pairs`` call weighs its rejection proposals (public), or None
    when it makes none (:func:`pairs_proposals` is 0)."""
    cap = pairs_proposals(request, metadata)
    if cap == 0:
        return None
    families = pair_families(metadata, _rules(request.options))
    return RejectionPlan(families=families, cap=cap, draws=request.count, n_max=metadata.n_max)


def extend_rejection_plan(
    request: ExtendOneRequest, metadata: DatasetMetadata
) -> RejectionPlan | None:
    """As :func:`pairs_rejection_plan`, for a ``serenade.extend_one`` call (one draw): the
    kernel's cap when it has continuous families sampled by rejection (c ≤ 8), its families
    counted once."""
    if extend_threshold_mode(request, metadata) != "continuous":
        return None
    families = extension_families(metadata, request.collection, _rules(request.options))
    if not families:
        return None
    cap = rejection_proposals(_extend_coefficient(request, metadata), 1)
    if cap == 0:
        return None
    return RejectionPlan(families=families, cap=cap, draws=1, n_max=metadata.n_max)


def rejection_plan(
    operation: str, request: Mapping[str, Any], metadata: DatasetMetadata
) -> RejectionPlan | None:
    """The rejection plan of a Serenade call by its operation's name (None for others)."""
    if operation == SERENADE_EXTEND_ONE.name:
        return extend_rejection_plan(ExtendOneRequest.model_validate(request), metadata)
    if operation == SERENADE_INITIAL_PAIRS.name:
        return pairs_rejection_plan(InitialPairsRequest.model_validate(request), metadata)
    return None


def _proposal_demand(
    operation: str, request: Mapping[str, Any], metadata: DatasetMetadata
) -> tuple[int, float] | None:
    """(draws, c) of a Serenade call that samples continuous thresholds by rejection (a
    positive :func:`pairs_proposals` or :func:`extend_proposals` cap), else None."""
    if operation == SERENADE_EXTEND_ONE.name:
        extend = ExtendOneRequest.model_validate(request)
        if extend_proposals(extend, metadata) == 0:
            return None
        return 1, _extend_coefficient(extend, metadata)
    if operation == SERENADE_INITIAL_PAIRS.name:
        pairs = InitialPairsRequest.model_validate(request)
        if pairs_proposals(pairs, metadata) == 0:
            return None
        return pairs.count, _pairs_coefficient(pairs, metadata)
    return None


@dataclass(frozen=True, slots=True)
class SharedProposals:
    """The rejection draws of a batch's parts ``parts`` (positions) priced and capped jointly:
    ``cap`` proposals in all, shared in the parts' order (services/executor.py)."""

    cap: int
    parts: frozenset[int]
    #: The sum of the parts' own caps, which ``cap`` replaces (for the timing budget).
    separate: int


def batch_shared_proposals(
    parts: Sequence[tuple[str, Mapping[str, Any]]], metadata: DatasetMetadata
) -> SharedProposals | None:
    """The joint cap of a batch's Serenade parts that sample by rejection
    (:func:`~dpmine_server.dp.candidates.joint_proposal_cap`, exceeded with probability
    ≤ 10⁻⁹, as one call's cap), when there are two or more and it is below the sum of their
    own caps; else None (every part keeps its own cap). Public: the parts' operations and
    parameters and the metadata only, so the timing budget and the executor agree on it."""
    demands = {
        position: demand
        for position, (operation, request) in enumerate(parts)
        if (demand := _proposal_demand(operation, request, metadata)) is not None
    }
    if len(demands) < 2:
        return None
    cap = joint_proposal_cap(list(demands.values()))
    separate = sum(rejection_proposals(c, draws) for draws, c in demands.values())
    if cap >= separate:
        return None
    return SharedProposals(cap=cap, parts=frozenset(demands), separate=separate)


def _check_enumeration(cells: int) -> None:
    if cells > MAX_ENUMERATED_CELLS:
        raise ValueError(
            f"continuous thresholds at this epsilon are sampled by enumerating up to {cells} "
            "cell pairs (n_max² per numeric family), more than this server does in one call: "
            "use options.threshold_mode 'auto' or 'grid', or a smaller epsilon"
        )


def _validate_pairs(request: InitialPairsRequest, metadata: DatasetMetadata) -> None:
    _check_columns(request.options, metadata)
    check_pair_space(metadata)
    _check_enumeration(pairs_enumeration(request, metadata))


def _run_pairs(
    columns: ColumnStore,
    request: InitialPairsRequest,
    epsilon: Epsilon,
    rng: np.random.Generator,
    _progress: Progress,
) -> dict[str, Any]:
    """Kernel of ``serenade.initial_pairs`` (§2.3): pure ε-DP, ε/count per draw."""
    metadata = columns.metadata
    params = quality_parameters(request.quality, metadata.n_max)
    mode = pairs_threshold_mode(request, metadata)
    pairs = initial_pairs(
        columns,
        count=request.count,
        epsilon=epsilon.for_mechanism(),
        params=params,
        rules=_rules(request.options),
        mode=mode,
        rng=rng,
    )
    return {
        "pairs": pairs,
        "threshold_mode": mode,
        "s": params.s,
        "delta": params.delta,
        "delta_up": params.delta_up,
        "delta_down": params.delta_down,
        "c_per_epsilon": params.coefficient(1.0),
    }


def _validate_extend(request: ExtendOneRequest, metadata: DatasetMetadata) -> None:
    _check_columns(request.options, metadata)
    for position, red in enumerate(request.collection):
        try:
            validate_redescription(red, metadata)
            _check_allowed(red, request.options)
            for side, expr in (("left", red.left), ("right", red.right)):
                parsed = parse_side(expr, side=side)
                if len(parsed.literals) > request.options.max_literals:
                    raise ValueError(
                        f"the {side} query has {len(parsed.literals)} literals, more than "
                        f"options.max_literals = {request.options.max_literals}"
                    )
        except ValueError as error:
            raise ValueError(f"collection[{position}]: {error}") from error
    _check_enumeration(extend_enumeration(request, metadata))


def _run_extend(
    columns: ColumnStore,
    request: ExtendOneRequest,
    epsilon: Epsilon,
    rng: np.random.Generator,
    _progress: Progress,
) -> dict[str, Any]:
    """Kernel of ``serenade.extend_one`` (§2.4): pure ε-DP, one fresh exponential-mechanism
    draw per call (no state is kept between calls)."""
    metadata = columns.metadata
    params = quality_parameters(request.quality, metadata.n_max)
    mode = extend_threshold_mode(request, metadata)
    position, red = extend_one(
        columns,
        request.collection,
        epsilon=epsilon.for_mechanism(),
        params=params,
        rules=_rules(request.options),
        mode=mode,
        rng=rng,
    )
    return {
        "position": position,
        "redescription": red,
        "changed": red != request.collection[position],
        "threshold_mode": mode,
    }


_COMPUTE_QUALITY = OperationSpec(
    operation=RED_COMPUTE_QUALITY,
    summary="Noisy support cells, Jaccard and p-value of a redescription.",
    dataset_kinds=frozenset({"views", "table"}),
    validate=_validate,
    cost=_cost,
    releases=_quality_releases,
    run=_run,
)
_INITIAL_PAIRS = OperationSpec(
    operation=SERENADE_INITIAL_PAIRS,
    summary="Serenade initial pairs: independent exponential-mechanism draws of literal pairs.",
    dataset_kinds=frozenset({"views", "table"}),
    validate=_validate_pairs,
    cost=_cost,
    releases=_pairs_releases,
    run=_run_pairs,
)
_EXTEND_ONE = OperationSpec(
    operation=SERENADE_EXTEND_ONE,
    summary="Serenade ExtendOne: one exponential-mechanism draw over all extensions.",
    dataset_kinds=frozenset({"views", "table"}),
    validate=_validate_extend,
    cost=_cost,
    releases=_extend_releases,
    run=_run_extend,
)

OPERATIONS: list[OperationSpec[Any, Any]] = [_COMPUTE_QUALITY, _INITIAL_PAIRS, _EXTEND_ONE]
