"""Tree-based redescription operations (ALGORITHMS.md §3): ``tree.expmech``, ``tree.mcmc``,
``tree.pair_mcmc`` and ``tree.leaf_counts``.

Validation reads public metadata only: a two-view dataset, attributes in the right view, numeric
thresholds that are points of the attribute's public lattice, declared categories, and a view
with enough distinct splits for a complete tree without repeats on a path (so every sampler
always finds a split). A request's ``columns`` (public) restricts the split attributes: every
name declared, an attribute target among them, and each view it grows a tree on left with an
attribute; the candidate set stays public and the scores' sensitivity unchanged, and the padded
time (:mod:`~dpmine_server.services.timing`, priced over every attribute of the view) stays an
upper bound. The cost is the requested ε. The kernels are in
:mod:`~dpmine_server.operations.tree_kernels` and :mod:`~dpmine_server.operations.tree_mcmc`
(whose Metropolis–Hastings steps are compiled in :mod:`~dpmine_server.operations.tree_native`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpmine.wire import (
    DEFAULT_TARGET_BINS,
    TREE_EXPMECH,
    TREE_LEAF_COUNTS,
    TREE_MCMC,
    TREE_PAIR_MCMC,
    AnyTreeTarget,
    AttributeTarget,
    BooleanAttribute,
    CategoricalAttribute,
    DatasetKind,
    DatasetMetadata,
    DecisionTree,
    Guarantee,
    LeafCountsRequest,
    NumericAttribute,
    QueryTarget,
    TreeExpMechRequest,
    TreeMCMCRequest,
    TreePairMCMCRequest,
    TreeSamplerRun,
    TreeSplit,
    TreeTarget,
    View,
    tree_nodes,
    usable_columns,
)
from dpmine_server.data.columns import ColumnStore
from dpmine_server.data.validation import validate_expr
from dpmine_server.dp.budget import Epsilon
from dpmine_server.dp.lattice import PublicLattice
from dpmine_server.dp.zcdp import ReleasePart, em_draws, generic_release
from dpmine_server.operations.base import OperationSpec, Progress
from dpmine_server.operations.tree_exact import (
    MAX_EXACT_TREE_MASK_WORDS,
    MAX_EXACT_TREE_WORK,
    exact_split_groups,
    exact_stump_fits,
    exact_stump_seconds,
    exact_target,
    exact_tree_fits,
    exact_tree_mask_words,
    exact_tree_seconds,
    exact_tree_work,
    sample_stump_exact,
    sample_tree_exact,
)
from dpmine_server.operations.tree_kernels import (
    SplitSpace,
    grow_tree_expmech,
    leaf_counts,
    leaf_fields,
    make_target,
    partition_leaf_counts,
)
from dpmine_server.operations.tree_mcmc import sample_tree_mcmc, sample_tree_pair

__all__ = [
    "OPERATIONS",
    "exact_seconds",
    "exact_work",
    "mcmc_sampler",
    "target_classes",
    "validate_split",
    "validate_target",
    "validate_tree",
]

Request = TreeExpMechRequest | TreeMCMCRequest | TreePairMCMCRequest | LeafCountsRequest

# --------------------------------------------------------------------------------------------
# Validation (public metadata only)


def _other(view: View) -> View:
    return "right" if view == "left" else "left"


def _require_views(metadata: DatasetMetadata) -> None:
    if metadata.kind != "views":
        raise ValueError(f"tree operations need a two-view dataset, not kind {metadata.kind!r}")


def _attribute(
    metadata: DatasetMetadata, name: str
) -> BooleanAttribute | CategoricalAttribute | NumericAttribute:
    try:
        return metadata.attribute(name)
    except KeyError:
        raise ValueError(f"unknown attribute {name!r}") from None


def validate_split(split: TreeSplit, view: View, metadata: DatasetMetadata) -> None:
    """A split names an attribute of ``view`` with a test of the attribute's type (§3.1)."""
    attribute = _attribute(metadata, split.attribute)
    if attribute.view != view:
        raise ValueError(f"attribute {split.attribute!r} is not in the {view} view")
    if isinstance(attribute, NumericAttribute):
        if split.threshold is None or split.category is not None:
            raise ValueError(f"numeric attribute {split.attribute!r} needs a threshold")
        points = PublicLattice.of(attribute).points
        index = int(np.searchsorted(points, split.threshold))
        if index >= points.size or float(points[index]) != split.threshold:
            raise ValueError(
                f"threshold {split.threshold} of {split.attribute!r} is not a point of its "
                f"public lattice ({points.size} points of [{attribute.lo}, {attribute.hi}])"
            )
    elif isinstance(attribute, CategoricalAttribute):
        if split.category is None or split.threshold is not None:
            raise ValueError(f"categorical attribute {split.attribute!r} needs a category")
        if split.category not in attribute.categories:
            raise ValueError(f"{split.category!r} is not a category of {split.attribute!r}")
    elif split.threshold is not None or split.category is not None:
        raise ValueError(f"Boolean attribute {split.attribute!r} takes no threshold or category")


def validate_tree(tree: DecisionTree, metadata: DatasetMetadata) -> None:
    """Every split of a released tree fits the metadata (the shape is checked by the model)."""
    for split in tree.splits:
        validate_split(split, tree.view, metadata)


def validate_target(target: AnyTreeTarget, metadata: DatasetMetadata) -> None:
    """An attribute target exists (``bins`` only for numeric ones); a tree target is valid; a
    query target fits the metadata (its view is checked against the tree's by
    :func:`_require_query_view`)."""
    if isinstance(target, QueryTarget):
        validate_expr(target.query, metadata, side="target query")
        return
    if isinstance(target, TreeTarget):
        validate_tree(target.tree, metadata)
        return
    attribute = _attribute(metadata, target.attribute)
    if target.bins is not None and not isinstance(attribute, NumericAttribute):
        raise ValueError(f"'bins' applies to numeric targets only, not {target.attribute!r}")


def _require_splits(space: SplitSpace, depth: int) -> None:
    """A complete tree of ``depth`` needs more distinct splits than a node's ancestors and
    descendants can use (2^depth − 2), so every proposal and every EM has a candidate."""
    if space.n_splits < tree_nodes(depth):
        raise ValueError(
            f"the {space.view} view offers {space.n_splits} distinct splits (without the target); "
            f"a tree of depth {depth} needs at least {tree_nodes(depth)}: use a smaller depth"
        )


def _require_query_view(target: AnyTreeTarget, view: View, metadata: DatasetMetadata) -> None:
    """A query target uses only the other view's attributes: a tree fits one view to the
    other's query, as the layered miner alternates (a same-view query would be split on)."""
    if isinstance(target, QueryTarget):
        validate_expr(target.query, metadata, side="target query", views={_other(view)})


def _target_exclusion(target: AnyTreeTarget) -> str | None:
    return target.attribute if isinstance(target, AttributeTarget) else None


def _validate_columns(
    columns: list[str] | None, target: AnyTreeTarget, metadata: DatasetMetadata
) -> None:
    """``columns`` names declared attributes (:func:`~dpmine.wire.items.usable_columns`) and
    holds an attribute target: the request's attributes, all public."""
    usable_columns(metadata, columns)
    target_attribute = target.attribute if isinstance(target, AttributeTarget) else None
    if columns is not None and target_attribute is not None and target_attribute not in columns:
        raise ValueError(
            f"the target attribute {target_attribute!r} is not among the allowed columns "
            f"{columns}: allow it or draw another target"
        )


def _require_attributes(space: SplitSpace, columns: list[str] | None) -> None:
    """The allowed columns leave the view at least one attribute to split on."""
    if columns is not None and not space.families:
        raise ValueError(
            f"the allowed columns {columns} leave the {space.view} view no attribute to split "
            f"on (the target excluded): allow at least one attribute of the {space.view} view"
        )


def _validate_single(
    request: TreeExpMechRequest | TreeMCMCRequest, metadata: DatasetMetadata
) -> None:
    _require_views(metadata)
    validate_target(request.target, metadata)
    _require_query_view(request.target, request.view, metadata)
    _validate_columns(request.columns, request.target, metadata)
    space = SplitSpace.of(
        metadata, request.view, _target_exclusion(request.target), request.columns
    )
    _require_attributes(space, request.columns)
    _require_splits(space, request.depth)


def target_classes(target: AnyTreeTarget, metadata: DatasetMetadata) -> int:
    """The public number of classes of a validated target, as :func:`make_target` builds them:
    a query's 2, a released tree's leaves, a Boolean's 2, a categorical attribute's categories
    or a numeric one's bins."""
    if isinstance(target, QueryTarget):
        return 2
    if isinstance(target, TreeTarget):
        return 1 << target.tree.depth
    attribute = _attribute(metadata, target.attribute)
    if isinstance(attribute, CategoricalAttribute):
        return len(attribute.categories)
    if isinstance(attribute, NumericAttribute):
        return target.bins or DEFAULT_TARGET_BINS
    return 2


def _exact_sizes(request: TreeMCMCRequest, metadata: DatasetMetadata) -> dict[str, int]:
    """The public sizes the exact sampler's work depends on: depth, the public bound on the
    split groups of the request's space (the allowed columns, without an attribute target;
    :func:`~dpmine_server.operations.tree_exact.exact_split_groups`), n_max and the target's
    classes."""
    space = SplitSpace.of(
        metadata, request.view, _target_exclusion(request.target), request.columns
    )
    return {
        "depth": request.depth,
        "n_splits": exact_split_groups(space, metadata.n_max),
        "n_max": metadata.n_max,
        "n_classes": target_classes(request.target, metadata),
    }


def _stump_sizes(request: TreeMCMCRequest, metadata: DatasetMetadata) -> dict[str, int]:
    """The public sizes of the depth-1 exact sampler's work: the attributes and the (ungrouped)
    candidate splits of the request's space, n_max and the target's classes."""
    space = SplitSpace.of(
        metadata, request.view, _target_exclusion(request.target), request.columns
    )
    return {
        "n_families": len(space.families),
        "n_splits": space.n_splits,
        "n_max": metadata.n_max,
        "n_classes": target_classes(request.target, metadata),
    }


def _exact_fits(request: TreeMCMCRequest, metadata: DatasetMetadata) -> bool:
    """Whether the exact sampler fits its public caps: the histogram path at depth 1
    (:func:`~dpmine_server.operations.tree_exact.exact_stump_fits`), else the sum-product
    (:func:`~dpmine_server.operations.tree_exact.exact_tree_fits`)."""
    if request.depth == 1:
        return exact_stump_fits(**_stump_sizes(request, metadata))
    return exact_tree_fits(**_exact_sizes(request, metadata))


def exact_work(request: TreeMCMCRequest, metadata: DatasetMetadata) -> int:
    """The public work bound of ``tree.mcmc``'s exact sampler for a validated request
    (:func:`~dpmine_server.operations.tree_exact.exact_tree_work`)."""
    return int(exact_tree_work(**_exact_sizes(request, metadata)))


def exact_seconds(request: TreeMCMCRequest, metadata: DatasetMetadata) -> float:
    """Public time budget of the exact sampler for a validated request (services/timing.py):
    :func:`~dpmine_server.operations.tree_exact.exact_tree_seconds` plus the split masks,
    computed one candidate split at a time: a fixed part (47 µs a split measured on heart's
    65,547 splits at load 7 on 2 cores; budgeted 150 µs) and a pass over the n_max rows
    (10 ns a row, budgeted), one per split group; before them the groups, from the per-row
    split codes of every attribute of the view (a lattice search and a sort of the n_max rows:
    budgeted 200 ns a row and attribute). At depth 1 the histogram path's budget
    (:func:`~dpmine_server.operations.tree_exact.exact_stump_seconds`)."""
    if request.depth == 1:
        return exact_stump_seconds(**_stump_sizes(request, metadata))
    sizes = _exact_sizes(request, metadata)
    space = SplitSpace.of(
        metadata, request.view, _target_exclusion(request.target), request.columns
    )
    groups = 2e-7 * len(space.families) * sizes["n_max"]
    masks = sizes["n_splits"] * (1.5e-4 + 1e-8 * sizes["n_max"])
    return groups + masks + exact_tree_seconds(**sizes)


def mcmc_sampler(request: TreeMCMCRequest, metadata: DatasetMetadata) -> TreeSamplerRun:
    """The sampler ``tree.mcmc`` runs for a validated request: "mcmc" when asked, else "exact"
    when asked (validation refused it if it does not fit) or when its work and memory fit the
    public caps (:func:`~dpmine_server.operations.tree_exact.exact_tree_fits`, "auto"). A
    public function of public inputs: it may be released, and decides the guarantee."""
    if request.sampler == "mcmc":
        return "mcmc"
    if request.sampler == "exact" or _exact_fits(request, metadata):
        return "exact"
    return "mcmc"


def _mcmc_guarantee(request: TreeMCMCRequest, metadata: DatasetMetadata) -> Guarantee:
    """The request's guarantee: "pure" when the exact sampler runs (an exponential mechanism
    over a public finite set, §0.3), "approximate" for the chain (ε-DP at convergence)."""
    return "pure" if mcmc_sampler(request, metadata) == "exact" else "approximate"


def _validate_mcmc(request: TreeMCMCRequest, metadata: DatasetMetadata) -> None:
    """As ``tree.expmech``; sampler "exact" only when its public work and memory bounds fit
    the public caps (refused here, before any charge, saying what to change)."""
    _validate_single(request, metadata)
    if request.sampler != "exact":
        return
    if _exact_fits(request, metadata):
        return
    sizes = _exact_sizes(request, metadata)
    work = exact_work(request, metadata)
    masks = exact_tree_mask_words(n_splits=sizes["n_splits"], n_max=sizes["n_max"])
    raise ValueError(
        f"sampler 'exact' does not fit: depth {request.depth}, {sizes['n_splits']} candidate "
        f"split groups in the {request.view} view, {sizes['n_classes']} target classes and n_max "
        f"{metadata.n_max} give a public work bound of {work:.3g} word operations (cap "
        f"{MAX_EXACT_TREE_WORK:.3g}) and {masks:.3g} words of split masks (cap "
        f"{MAX_EXACT_TREE_MASK_WORDS:.3g}); use a smaller depth, restrict `columns` (a numeric "
        "attribute counts min(lattice points, n_max + 1) split groups), or sampler 'auto' or "
        "'mcmc' (guarantee approximate)"
    )


def _pair_spaces(
    request: TreePairMCMCRequest, metadata: DatasetMetadata
) -> tuple[SplitSpace, SplitSpace]:
    """(first tree's space: the view without a; second tree's space: a's view), §3.5, each
    restricted to the request's columns when given."""
    view = _attribute(metadata, request.attribute).view
    assert view is not None
    return (
        SplitSpace.of(metadata, _other(view), columns=request.columns),
        SplitSpace.of(metadata, view, columns=request.columns),
    )


def _validate_pair(request: TreePairMCMCRequest, metadata: DatasetMetadata) -> None:
    _require_views(metadata)
    validate_target(request.target, metadata)
    _validate_columns(request.columns, request.target, metadata)
    for space in _pair_spaces(request, metadata):
        _require_attributes(space, request.columns)
        _require_splits(space, request.depth)


def _validate_leaf_counts(request: LeafCountsRequest, metadata: DatasetMetadata) -> None:
    _require_views(metadata)
    validate_tree(request.left_tree, metadata)
    validate_tree(request.right_tree, metadata)


def _cost(request: Request) -> Epsilon:
    return Epsilon.charge(request.epsilon)


# --------------------------------------------------------------------------------------------
# Kernels


def _expmech_releases(request: TreeExpMechRequest, epsilon: Epsilon) -> tuple[ReleasePart, ...]:
    """One exponential-mechanism draw per level at ε/depth (§3.3); the nodes of a level hold
    disjoint rows, so a level is one ε/depth-bounded-range release (parallel composition) and
    the tree depth·(ε/depth)²/8-zCDP (Cesar & Rogers 2021)."""
    return em_draws(epsilon, request.depth)


def _mcmc_releases(
    _request: TreeMCMCRequest | TreePairMCMCRequest, epsilon: Epsilon
) -> tuple[ReleasePart, ...]:
    """Charged as the chain's target, one exponential-mechanism draw at ε (§3.4, §3.5):
    ε²/8-zCDP, exactly for ``tree.mcmc``'s exact sampler, at convergence for a chain (whose
    guarantee stays labelled approximate)."""
    return em_draws(epsilon)


def _leaf_count_releases(_request: LeafCountsRequest, epsilon: Epsilon) -> tuple[ReleasePart, ...]:
    """Partition counts (§3.6): Laplace, ε-DP in both releases, hence ε²/2-zCDP (Bun & Steinke
    2016, Prop. 1.4); on a zCDP dataset the discrete Gaussian of σ = Δ₂/ε, exactly ε²/2-zCDP
    (CKS20; Δ₂ in :func:`~dpmine_server.operations.tree_kernels.leaf_counts`)."""
    return generic_release(epsilon)


def _run_expmech(
    columns: ColumnStore,
    request: TreeExpMechRequest,
    epsilon: Epsilon,
    rng: np.random.Generator,
    progress: Progress,
) -> dict[str, Any]:
    """Kernel of ``tree.expmech`` (ALGORITHMS.md §3.3): pure ε-DP, ε/depth per level."""
    space = SplitSpace.of(
        columns.metadata, request.view, _target_exclusion(request.target), request.columns
    )
    labels = make_target(columns, request.target)
    keys = grow_tree_expmech(
        columns,
        space,
        labels,
        depth=request.depth,
        epsilon=epsilon.for_mechanism(),
        rng=rng,
        progress=progress,
    )
    return {"tree": space.tree(request.depth, keys)}


def _run_mcmc(
    columns: ColumnStore,
    request: TreeMCMCRequest,
    epsilon: Epsilon,
    rng: np.random.Generator,
    progress: Progress,
) -> dict[str, Any]:
    """Kernel of ``tree.mcmc`` (ALGORITHMS.md §3.4), with the sampler :func:`mcmc_sampler`
    names (public): "exact", pure ε-DP (one exact draw from the target,
    :mod:`~dpmine_server.operations.tree_exact`), or "mcmc", approximate ε-DP (exact at
    convergence of a fixed, public number of Metropolis–Hastings steps)."""
    space = SplitSpace.of(
        columns.metadata, request.view, _target_exclusion(request.target), request.columns
    )
    labels = make_target(columns, request.target)
    sampler = mcmc_sampler(request, columns.metadata)
    if sampler == "exact" and request.depth == 1:
        keys = sample_stump_exact(columns, space, labels, epsilon=epsilon.for_mechanism(), rng=rng)
        progress(1.0)
    elif sampler == "exact":
        target = exact_target(columns, space, labels.class_words(), epsilon=epsilon.for_mechanism())
        keys = sample_tree_exact(target, depth=request.depth, rng=rng, progress=progress)
    else:
        keys = sample_tree_mcmc(
            columns,
            space,
            labels,
            depth=request.depth,
            iterations=request.iterations,
            epsilon=epsilon.for_mechanism(),
            rng=rng,
            progress=progress,
        )
    return {"tree": space.tree(request.depth, keys), "sampler": sampler}


def _run_pair(
    columns: ColumnStore,
    request: TreePairMCMCRequest,
    epsilon: Epsilon,
    rng: np.random.Generator,
    progress: Progress,
) -> dict[str, Any]:
    """Kernel of ``tree.pair_mcmc`` (ALGORITHMS.md §3.5): approximate ε-DP (exact at
    convergence of a fixed, public number of Metropolis–Hastings steps), on the request's
    ``pair_score`` (the paper's, or the Gini gain score of §6 item 19)."""
    spaces = _pair_spaces(request, columns.metadata)
    first, second = sample_tree_pair(
        columns,
        spaces,
        make_target(columns, request.target),
        depth=request.depth,
        iterations=request.iterations,
        epsilon=epsilon.for_mechanism(),
        rng=rng,
        progress=progress,
        score=request.pair_score,
    )
    trees = {
        spaces[0].view: spaces[0].tree(request.depth, first),
        spaces[1].view: spaces[1].tree(request.depth, second),
    }
    return {"left_tree": trees["left"], "right_tree": trees["right"]}


def _run_leaf_counts(
    columns: ColumnStore,
    request: LeafCountsRequest,
    epsilon: Epsilon,
    _rng: np.random.Generator,
    _progress: Progress,
) -> dict[str, Any]:
    """Kernel of ``tree.leaf_counts`` (ALGORITHMS.md §3.6): ε-DP, or ε²/2-zCDP with the
    discrete Gaussian on a zCDP dataset.

    ``partition`` [REC]: one noisy (a + 1) × (b + 1) partition matrix at ε; the intersections
    and left counts returned beside it are its cells and row sums (post-processing).
    ``paper``: the intersection matrix and the left leaf sizes as one vector (Laplace: ε/2
    each).
    """
    if request.release == "partition":
        partition, release = partition_leaf_counts(
            columns, request.left_tree, request.right_tree, epsilon=epsilon.for_mechanism()
        )
        intersections, sizes = leaf_fields(partition)
        return {
            "intersections": intersections.tolist(),
            "left_counts": sizes.tolist(),
            "partition": partition.tolist(),
            "noise": release.noise(),
        }
    intersections, sizes, release = leaf_counts(
        columns, request.left_tree, request.right_tree, epsilon=epsilon.for_mechanism()
    )
    return {
        "intersections": intersections.tolist(),
        "left_counts": sizes.tolist(),
        "noise": release.noise(),
    }


_VIEWS: frozenset[DatasetKind] = frozenset({"views"})

OPERATIONS: list[OperationSpec[Any, Any]] = [
    OperationSpec(
        operation=TREE_EXPMECH,
        summary="A decision tree grown by one exponential mechanism per node (AltExpM).",
        dataset_kinds=_VIEWS,
        validate=_validate_single,
        cost=_cost,
        releases=_expmech_releases,
        run=_run_expmech,
    ),
    OperationSpec(
        operation=TREE_MCMC,
        summary=(
            "A decision tree sampled from AltMCMC's target: exactly (pure) where the public "
            "work bound fits, else by Metropolis–Hastings (DP at convergence)."
        ),
        dataset_kinds=_VIEWS,
        validate=_validate_mcmc,
        cost=_cost,
        releases=_mcmc_releases,
        run=_run_mcmc,
        guarantee_of=_mcmc_guarantee,
    ),
    OperationSpec(
        operation=TREE_PAIR_MCMC,
        summary="A pair of trees, one per view, sampled jointly (MCMCTreePair); DP at convergence.",
        dataset_kinds=_VIEWS,
        validate=_validate_pair,
        cost=_cost,
        releases=_mcmc_releases,
        run=_run_pair,
    ),
    OperationSpec(
        operation=TREE_LEAF_COUNTS,
        summary="Noisy leaf × leaf intersections and left leaf sizes of two released trees.",
        dataset_kinds=_VIEWS,
        validate=_validate_leaf_counts,
        cost=_cost,
        releases=_leaf_count_releases,
        run=_run_leaf_counts,
    ),
]
