"""Tree-based DP redescription mining (ALGORITHMS.md §3): trees, targets and the four operations
``tree.expmech``, ``tree.mcmc``, ``tree.pair_mcmc`` and ``tree.leaf_counts``.

A :class:`DecisionTree` is public syntax: a complete binary tree of ``depth`` split levels whose
inner nodes are listed in heap order (node i has children 2i+1 and 2i+2). A row goes left when
its value satisfies the node's split (numeric ``value ≤ threshold``, categorical
``value = category``, Boolean ``value = true``), right when it does not, and to no child when its
value is missing (§3.1). Leaves are numbered 0 … 2^depth − 1 from left to right.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Discriminator, Field, model_validator

from dpmine.wire.common import (
    Epsilon,
    OperationRequest,
    Receipt,
    WireModel,
    check_chain_length,
)
from dpmine.wire.counts import CountNoise
from dpmine.wire.datasets import View
from dpmine.wire.items import ColumnNames
from dpmine.wire.queries import QueryInput

__all__ = [
    "DEFAULT_TARGET_BINS",
    "DEFAULT_TREE_ITERATIONS",
    "MAX_TREE_DEPTH",
    "MAX_TREE_ITERATIONS",
    "MIN_TREE_ITERATIONS",
    "AnyTreeTarget",
    "AttributeTarget",
    "DecisionTree",
    "LeafCountsRelease",
    "LeafCountsRequest",
    "LeafCountsResponse",
    "QueryTarget",
    "SplitKey",
    "TreeExpMechRequest",
    "TreeExpMechResponse",
    "TreeMCMCRequest",
    "TreeMCMCResponse",
    "TreePairMCMCRequest",
    "TreePairMCMCResponse",
    "TreePairResponse",
    "TreePairScore",
    "TreeResponse",
    "TreeSampler",
    "TreeSamplerRun",
    "TreeSplit",
    "TreeTarget",
    "TreeTargetSpec",
    "tree_nodes",
]

#: Public limits checked before any data is read.
MAX_TREE_DEPTH = 6
MAX_TREE_ITERATIONS = 200_000
DEFAULT_TREE_ITERATIONS = 10_000
#: Public minimum of the steps of ``tree.mcmc`` and ``tree.pair_mcmc`` (§3.4, §3.5; ALGORITHMS.md
#: §6 #16): their releases are ε-DP only near the chain's stationary law, which a chain of a
#: few steps is not. 1000 is a tenth of the paper's MCIter = 10,000 (§3.8, the default) and
#: twice its stopping window k = 500, before which the paper's chain could not stop; a floor
#: against short chains, not a proof of convergence. The start is the server's: a random tree
#: drawn from the public base measure (§3.4 step 1), never the analyst's.
MIN_TREE_ITERATIONS = 1000
#: Equal-width bins of a numeric target over its public range (§3.2 [REC]).
DEFAULT_TARGET_BINS = 10
MAX_TARGET_BINS = 1_000

Name = Annotated[str, Field(min_length=1, max_length=200)]

#: What makes two splits the same (no-reuse rule of §3.1): (attribute, threshold, category).
SplitKey = tuple[str, float | None, str | None]


class TreeSplit(WireModel):
    """The test of one inner node: ``threshold`` for a numeric attribute (a point of its public
    lattice; rows with value ≤ threshold go left), ``category`` for a categorical one (rows equal
    to it go left), neither for a Boolean one (true rows go left)."""

    attribute: Name
    threshold: float | None = Field(default=None, allow_inf_nan=False)
    category: str | None = Field(default=None, max_length=200)

    @model_validator(mode="after")
    def _one_test(self) -> TreeSplit:
        if self.threshold is not None and self.category is not None:
            raise ValueError(
                f"split on {self.attribute!r}: give a threshold or a category, not both"
            )
        return self

    @property
    def key(self) -> SplitKey:
        """The identity used by the no-reuse rule."""
        return (self.attribute, self.threshold, self.category)


def tree_nodes(depth: int) -> int:
    """Number of inner nodes of a complete binary tree with ``depth`` split levels."""
    nodes: int = 2**depth - 1
    return nodes


class DecisionTree(WireModel):
    """A complete binary tree of splits in heap order (§3.1; docs/operations.md)."""

    view: View
    depth: int = Field(ge=1, le=MAX_TREE_DEPTH, description="Number of split levels.")
    splits: list[TreeSplit] = Field(
        min_length=1,
        max_length=tree_nodes(MAX_TREE_DEPTH),
        description="Inner nodes in heap order: node i has children 2i+1 and 2i+2.",
    )

    @model_validator(mode="after")
    def _complete_and_no_reuse(self) -> DecisionTree:
        if len(self.splits) != tree_nodes(self.depth):
            raise ValueError(
                f"a tree of depth {self.depth} has {tree_nodes(self.depth)} splits, "
                f"got {len(self.splits)}"
            )
        for node in range(1, len(self.splits)):
            parent = (node - 1) // 2
            while True:
                if self.splits[parent].key == self.splits[node].key:
                    raise ValueError(
                        f"node {node} repeats the split of its ancestor {parent} "
                        f"({self.splits[node].attribute!r}); a split is used once per path"
                    )
                if parent == 0:
                    break
                parent = (parent - 1) // 2
        return self

    @property
    def n_leaves(self) -> int:
        """Number of leaves (2^depth)."""
        leaves: int = 2**self.depth
        return leaves


TargetBins = Annotated[
    int | None,
    Field(
        ge=2,
        le=MAX_TARGET_BINS,
        description=(
            f"Numeric target attributes only: public number of equal-width bins over [lo, hi] "
            f"(default {DEFAULT_TARGET_BINS})."
        ),
    ),
]


class AttributeTarget(WireModel):
    """Classes from one attribute (makeTarget, §3.2): the value of a Boolean or categorical
    attribute, or for a numeric one its equal-width bin over the public range."""

    kind: Literal["attribute"] = "attribute"
    attribute: Name
    bins: TargetBins = None


class TreeTarget(WireModel):
    """Classes from a released tree: the class of a row is the index of the leaf it reaches."""

    kind: Literal["tree"] = "tree"
    tree: DecisionTree


class QueryTarget(WireModel):
    """Two classes from a public query over the other view's attributes (the layered miner's
    target): class 1 for the rows the query selects, exactly as ``count.noisy`` and the
    redescription statistics evaluate it (missing values included), class 0 for all others."""

    kind: Literal["query"] = "query"
    query: QueryInput


#: Every kind of tree target (the kernels' argument type).
AnyTreeTarget = AttributeTarget | TreeTarget | QueryTarget

TreeTargetSpec = Annotated[AnyTreeTarget, Discriminator("kind")]


class TreeResponse(WireModel):
    """One released tree (structure and splits only; no counts, §3.3–3.4)."""

    tree: DecisionTree
    receipt: Receipt


class TreeExpMechResponse(TreeResponse):
    """The tree of ``tree.expmech``."""


#: How ``tree.mcmc`` draws its tree (ALGORITHMS.md §3.4): ``"exact"`` by sum-product over the
#: tree lattice (guarantee "pure"), ``"mcmc"`` by Metropolis–Hastings (guarantee "approximate"),
#: ``"auto"`` the exact sampler whenever its public work bound fits the server's public cap.
TreeSampler = Literal["auto", "mcmc", "exact"]
#: The sampler that ran: a public function of the request and the public metadata.
TreeSamplerRun = Literal["exact", "mcmc"]


class TreeMCMCResponse(TreeResponse):
    """The tree of ``tree.mcmc`` and the sampler that drew it."""

    sampler: TreeSamplerRun = Field(
        default="mcmc",
        description=(
            '"exact": drawn exactly from the target by sum-product (guarantee "pure"); "mcmc": '
            'the final state of the Metropolis–Hastings chain (guarantee "approximate"; the '
            "default, as every release stored before the exact sampler existed). A public "
            "function of the request and the dataset's public metadata."
        ),
    )


class TreePairResponse(WireModel):
    """A pair of released trees, one per view (§3.5)."""

    left_tree: DecisionTree
    right_tree: DecisionTree
    receipt: Receipt


class TreePairMCMCResponse(TreePairResponse):
    """The trees of ``tree.pair_mcmc``."""


Depth = Annotated[int, Field(ge=1, le=MAX_TREE_DEPTH, description="Number of split levels.")]


def _tree_chain_length(iterations: int) -> int:
    return check_chain_length(iterations, MIN_TREE_ITERATIONS)


Iterations = Annotated[
    int,
    Field(
        le=MAX_TREE_ITERATIONS,
        json_schema_extra={"minimum": MIN_TREE_ITERATIONS},
        description=(
            f"Public number of Metropolis–Hastings steps, at least {MIN_TREE_ITERATIONS}, from "
            "a random tree the server draws from the public base measure; the final state is "
            "released."
        ),
    ),
    AfterValidator(_tree_chain_length),
]


class TreeExpMechRequest(OperationRequest[TreeExpMechResponse]):
    """A tree grown top-down by one exponential mechanism per node (§3.3), ε/depth per level."""

    view: View
    target: TreeTargetSpec
    depth: Depth = 3
    epsilon: Epsilon
    columns: ColumnNames | None = Field(
        default=None,
        description=(
            "The attributes the trees may split on (default: every attribute of the view); an "
            "attribute target must be one of them. Public: it narrows the candidate splits."
        ),
    )


class TreeMCMCRequest(OperationRequest[TreeMCMCResponse]):
    """A tree sampled from exp(ε·g₁/4) × base measure (§3.4): exactly by sum-product when the
    sampler's public work bound fits (guarantee "pure"), else by Metropolis–Hastings, DP only
    at convergence (guarantee "approximate"): at least :data:`MIN_TREE_ITERATIONS` steps from
    a random tree drawn by the server (no start of the analyst's)."""

    view: View
    target: TreeTargetSpec
    depth: Depth = 3
    iterations: Iterations = DEFAULT_TREE_ITERATIONS
    epsilon: Epsilon
    columns: ColumnNames | None = Field(
        default=None,
        description=(
            "The attributes the trees may split on (default: every attribute of the view); an "
            "attribute target must be one of them. Public: it narrows the candidate splits."
        ),
    )
    sampler: TreeSampler = Field(
        default="auto",
        description=(
            '"auto": the exact sampler (guarantee "pure") whenever its public work bound — '
            "from the depth, the view's candidate splits (lattice points, categories, Booleans; "
            "the allowed columns only), the target's classes and n_max — fits the server's "
            'public cap, else the MCMC chain; "exact": refused before any charge when it does '
            'not fit; "mcmc": the chain (guarantee "approximate"). `iterations` applies to the '
            "chain only."
        ),
    )


#: The score of ``tree.pair_mcmc``: ``"paper"`` g(T_L)·(1 + g(T_R))/2 (§3.5, eq. 6) or
#: ``"gain"`` −WGini(T_L; a) + the Gini gain of T_R predicting T_L's leaf (ALGORITHMS.md §6
#: item 19), which gives a one-leaf T_L no credit.
TreePairScore = Literal["paper", "gain"]


class TreePairMCMCRequest(OperationRequest[TreePairMCMCResponse]):
    """A pair of trees sampled jointly (§3.5): the tree on the view without ``attribute``
    predicts makeTarget(attribute), the other predicts that tree's leaves. DP only at
    convergence (guarantee "approximate"): at least :data:`MIN_TREE_ITERATIONS` steps from two
    random trees drawn by the server (no start of the analyst's)."""

    attribute: Name
    bins: TargetBins = None
    depth: Depth = 3
    iterations: Iterations = DEFAULT_TREE_ITERATIONS
    epsilon: Epsilon
    columns: ColumnNames | None = Field(
        default=None,
        description=(
            "The attributes the trees may split on (default: every attribute of the view); an "
            "attribute target must be one of them. Public: it narrows the candidate splits."
        ),
    )

    pair_score: TreePairScore = Field(
        default="gain",
        description=(
            "'gain' (default): −WGini(T_L; a) + [WGini(root; T_L leaf) − WGini(T_R; T_L "
            "leaf)] (count-weighted Gini over the leaves and the rows stopped by a missing "
            "value), one-sided sensitivity (2, 4), zero credit for T_R when T_L has one leaf; "
            "'paper': g(T_L)·(1 + g(T_R))/2 of §3.5, sensitivity 1, which peaks at a first "
            "tree with one dominant leaf."
        ),
    )

    @property
    def target(self) -> AttributeTarget:
        """makeTarget(a), the first tree's target."""
        return AttributeTarget(attribute=self.attribute, bins=self.bins)


class LeafCountsResponse(WireModel):
    """Noisy leaf statistics of a tree pair (§3.6), integers that may be negative."""

    intersections: list[list[int]] = Field(
        description=(
            "intersections[i][j] ≈ |leaf i of the left tree ∩ leaf j of the right tree|: "
            "with release 'paper' the count + discrete Laplace noise of scale 2/ε; with "
            "'partition' the cell (i, j) of `partition`."
        )
    )
    left_counts: list[int] = Field(
        description=(
            "≈ |leaf i of the left tree|: with release 'paper' the count + discrete Laplace "
            "noise of scale 2/ε; with 'partition' the sum of row i of `partition`."
        )
    )
    partition: list[list[int]] | None = Field(
        default=None,
        description=(
            "Release 'partition' only: the (a + 1) × (b + 1) matrix of |leaf i of the left "
            "tree ∩ leaf j of the right tree| + discrete Laplace noise of scale 1/ε, where row a "
            "counts the rows in no left leaf and column b the rows in no right leaf (a value "
            "missing on their path). Its cells cover every row once."
        ),
    )
    receipt: Receipt
    noise: CountNoise | None = Field(
        default=None,
        description=(
            "The noise law of every released count: discrete Laplace (scales above) on a pure "
            "dataset; on a zcdp one the discrete Gaussian of sigma 1/ε ('partition') or √2/ε "
            "('paper'); null on releases stored before it was reported (Laplace)."
        ),
    )


#: How ``tree.leaf_counts`` releases (§3.6): ``"partition"`` [REC, default] one noisy
#: (a + 1) × (b + 1) partition matrix at scale 1/ε; ``"paper"`` the paper's two releases, the
#: a × b intersections and the a left counts, each at scale 2/ε.
LeafCountsRelease = Literal["partition", "paper"]


class LeafCountsRequest(OperationRequest[LeafCountsResponse]):
    """Noisy leaf × leaf intersections and left leaf sizes of two released trees (§3.6)."""

    left_tree: DecisionTree
    right_tree: DecisionTree
    epsilon: Epsilon
    release: LeafCountsRelease = Field(
        default="partition",
        description=(
            "'partition' (default): one noisy partition matrix at scale 1/ε, a quarter of the "
            "noise variance of 'paper' for the same ε and exact supports when values are "
            "missing; 'paper': the intersection matrix and the left counts at 2/ε each (§3.6)."
        ),
    )

    @model_validator(mode="after")
    def _views(self) -> LeafCountsRequest:
        if self.left_tree.view != "left" or self.right_tree.view != "right":
            raise ValueError("left_tree must be a left-view tree and right_tree a right-view tree")
        return self
