"""Tree operations (ALGORITHMS.md §3): the wire models, routing with packed bitsets, makeTarget,
validation against public metadata, ``tree.leaf_counts`` and the exact exponential mechanism of
``tree.expmech`` (chi-square against brute-force probabilities on a tiny dataset).

Seeded draws (test-mode generators) are checked at p > 1e-4; OpenDP's noise cannot be seeded, so
the noisy means use 5-sigma bands from the exact discrete Laplace variance.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from pydantic import ValidationError
from scipy.stats import chisquare

from dpmine.wire import (
    MIN_TREE_ITERATIONS,
    AttributeTarget,
    DatasetMetadata,
    DecisionTree,
    LeafCountsRequest,
    TreeExpMechRequest,
    TreeMCMCRequest,
    TreePairMCMCRequest,
    TreeSplit,
    TreeTarget,
)
from dpmine_server.data.columns import (
    BooleanColumn,
    CategoricalColumn,
    Column,
    ColumnStore,
    NumericColumn,
)
from dpmine_server.dp.budget import Epsilon
from dpmine_server.dp.lattice import public_lattice
from dpmine_server.dp.mechanisms import count_noise
from dpmine_server.dp.rng import seeded_generator
from dpmine_server.operations import CATALOG
from dpmine_server.operations.base import no_progress
from dpmine_server.operations.tree_kernels import (
    Labels,
    SplitFamily,
    SplitSpace,
    _attribute_candidates,
    _node_split,
    exact_leaf_counts,
    exact_partition_counts,
    grow_tree_expmech,
    make_target,
    split_codes,
    tree_leaves,
)

SEEDED_P_VALUE = 1e-4
Z = 5.0
NAN = math.nan

#: Twelve hand-made rows. Left view: a (Boolean), colour (categorical), x (numeric on [0, 4],
#: lattice 0, 1, 2, 3, 4). Right view: b (Boolean), y (numeric on [0, 10], lattice 0, 2.5, …).
A = [1, 1, 0, 0, 1, 0, 1, 0, 1, 0, -1, 1]
COLOUR = [0, 1, 2, 0, 1, 2, 0, -1, 1, 2, 0, 0]  # red, green, blue; -1 missing
X = [0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, NAN, 0.2, 3.9]
B = [1, 0, 1, 0, 1, 1, 0, 0, 1, -1, 0, 1]
Y = [0.0, 9.0, 2.5, 3.0, 7.5, 10.0, NAN, 5.0, 1.0, 6.0, 8.0, 4.0]
ROWS = len(A)


def _metadata() -> DatasetMetadata:
    return DatasetMetadata.model_validate(
        {
            "kind": "views",
            "n_max": 100,
            "attributes": [
                {"type": "boolean", "name": "a", "view": "left"},
                {
                    "type": "categorical",
                    "name": "colour",
                    "view": "left",
                    "categories": ["red", "green", "blue"],
                },
                {
                    "type": "numeric",
                    "name": "x",
                    "view": "left",
                    "lo": 0.0,
                    "hi": 4.0,
                    "lattice_bits": 2,
                },
                {"type": "boolean", "name": "b", "view": "right"},
                {
                    "type": "numeric",
                    "name": "y",
                    "view": "right",
                    "lo": 0.0,
                    "hi": 10.0,
                    "lattice_bits": 2,
                },
            ],
        }
    )


def _boolean(name: str, values: list[int]) -> BooleanColumn:
    array = np.asarray(values)
    return BooleanColumn.from_arrays(name, array == 1, array >= 0)


def _store() -> ColumnStore:
    columns: dict[str, Column] = {
        "a": _boolean("a", A),
        "colour": CategoricalColumn(
            "colour", ("red", "green", "blue"), np.asarray(COLOUR, dtype=np.int32)
        ),
        "x": NumericColumn.from_values("x", np.asarray(X), lo=0.0, hi=4.0),
        "b": _boolean("b", B),
        "y": NumericColumn.from_values("y", np.asarray(Y), lo=0.0, hi=10.0),
    }
    return ColumnStore(_metadata(), n_rows=ROWS, columns=columns)


def _goes_left(split: TreeSplit, row: int) -> bool | None:
    """Reference routing in plain Python: True/False, None for a missing value (§3.1)."""
    if split.attribute in {"a", "b"}:
        value = (A if split.attribute == "a" else B)[row]
        return None if value < 0 else value == 1
    if split.attribute == "colour":
        code = COLOUR[row]
        return None if code < 0 else ["red", "green", "blue"][code] == split.category
    number = (X if split.attribute == "x" else Y)[row]
    assert split.threshold is not None
    return None if math.isnan(number) else min(number, 10.0) <= split.threshold


def _reference_leaf(tree: DecisionTree, row: int) -> int:
    node = 0
    while node < len(tree.splits):
        left = _goes_left(tree.splits[node], row)
        if left is None:
            return -1
        node = 2 * node + (1 if left else 2)
    return node - len(tree.splits)


def _leaf_of_rows(leaves: npt.NDArray[np.uint64]) -> list[int]:
    found = [-1] * ROWS
    for leaf, words in enumerate(leaves):
        for row in range(ROWS):
            if int(words[row // 64]) >> (row % 64) & 1:
                assert found[row] == -1, "a row is in two leaves"
                found[row] = leaf
    return found


LEFT_TREE = DecisionTree(
    view="left",
    depth=2,
    splits=[
        TreeSplit(attribute="x", threshold=2.0),
        TreeSplit(attribute="a"),
        TreeSplit(attribute="colour", category="red"),
    ],
)
RIGHT_TREE = DecisionTree(
    view="right",
    depth=2,
    splits=[
        TreeSplit(attribute="b"),
        TreeSplit(attribute="y", threshold=5.0),
        TreeSplit(attribute="y", threshold=2.5),
    ],
)


# --------------------------------------------------------------------------------------------
# Wire models


def test_a_tree_needs_a_complete_shape_and_no_repeat_on_a_path() -> None:
    with pytest.raises(ValidationError, match="has 3 splits"):
        DecisionTree(view="left", depth=2, splits=[TreeSplit(attribute="a")])
    with pytest.raises(ValidationError, match="repeats the split of its ancestor 0"):
        DecisionTree(
            view="left",
            depth=2,
            splits=[TreeSplit(attribute="a"), TreeSplit(attribute="b"), TreeSplit(attribute="a")],
        )
    # The same split in two sibling subtrees is allowed (different paths).
    tree = DecisionTree(
        view="left",
        depth=2,
        splits=[TreeSplit(attribute="a"), TreeSplit(attribute="b"), TreeSplit(attribute="b")],
    )
    assert tree.n_leaves == 4
    with pytest.raises(ValidationError, match="not both"):
        TreeSplit(attribute="x", threshold=1.0, category="red")
    with pytest.raises(ValidationError):
        DecisionTree(view="left", depth=7, splits=[TreeSplit(attribute="a")] * 127)


def test_requests_have_public_defaults_and_bounds() -> None:
    target = AttributeTarget(attribute="b")
    request = TreeMCMCRequest(view="left", target=target, epsilon=1.0)
    assert (request.depth, request.iterations) == (3, 10_000)
    with pytest.raises(ValidationError):
        TreeMCMCRequest(view="left", target=target, epsilon=1.0, iterations=200_001)
    # The public minimum of both samplers (§3.4, §3.5; ALGORITHMS.md §6 #16), with its reason.
    assert MIN_TREE_ITERATIONS == 1000
    pair = {"attribute": "b", "epsilon": 1.0}
    single = {"view": "left", "target": target.model_dump(), "epsilon": 1.0}
    for model, body in ((TreeMCMCRequest, single), (TreePairMCMCRequest, pair)):
        assert model.model_validate({**body, "iterations": MIN_TREE_ITERATIONS}).iterations == 1000
        for short in (1, MIN_TREE_ITERATIONS - 1):
            with pytest.raises(ValidationError, match=r"at least 1000, got \d+: an MCMC release"):
                model.model_validate({**body, "iterations": short})
        # The start is the server's random tree: there is no field to choose one.
        with pytest.raises(ValidationError, match="Extra inputs"):
            model.model_validate({**body, "initial": LEFT_TREE.model_dump()})
    with pytest.raises(ValidationError, match="left-view tree"):
        LeafCountsRequest(left_tree=RIGHT_TREE, right_tree=LEFT_TREE, epsilon=1.0)
    parsed = TreeExpMechRequest.model_validate(
        {"view": "right", "target": {"kind": "tree", "tree": LEFT_TREE.model_dump()}, "epsilon": 1}
    )
    assert isinstance(parsed.target, TreeTarget)


# --------------------------------------------------------------------------------------------
# Routing and targets


@pytest.mark.parametrize("tree", [LEFT_TREE, RIGHT_TREE], ids=["left", "right"])
def test_bitset_routing_matches_row_by_row_routing(tree: DecisionTree) -> None:
    leaves = tree_leaves(_store(), tree)
    assert leaves.shape == (4, 1)
    assert _leaf_of_rows(leaves) == [_reference_leaf(tree, row) for row in range(ROWS)]


def test_routing_by_hand() -> None:
    # x ≤ 2 then a / colour = red; missing x (row 9), missing a (row 10) and missing colour
    # (row 7) reach no leaf.
    assert _leaf_of_rows(tree_leaves(_store(), LEFT_TREE)) == [
        0, 0, 1, 1, 0, 3, 2, -1, 3, -1, -1, 2,
    ]  # fmt: skip


def test_make_target_of_each_attribute_type_and_of_a_tree() -> None:
    store = _store()
    boolean = make_target(store, AttributeTarget(attribute="b"))
    assert (boolean.n_classes, boolean.classes.tolist()) == (2, B)
    categorical = make_target(store, AttributeTarget(attribute="colour"))
    assert (categorical.n_classes, categorical.classes.tolist()) == (3, COLOUR)
    binned = make_target(store, AttributeTarget(attribute="y", bins=4))
    # Equal-width bins of the public range [0, 10]: [0, 2.5), [2.5, 5), [5, 7.5), [7.5, 10].
    assert binned.n_classes == 4
    assert binned.classes.tolist() == [0, 3, 1, 1, 3, 3, -1, 2, 0, 2, 3, 1]
    assert make_target(store, AttributeTarget(attribute="x")).n_classes == 10
    leaves = make_target(store, TreeTarget(tree=LEFT_TREE))
    assert leaves.n_classes == 4
    assert leaves.classes.tolist() == [_reference_leaf(LEFT_TREE, row) for row in range(ROWS)]


# --------------------------------------------------------------------------------------------
# Validation (public metadata only)


def _validate(name: str, request: Any) -> None:
    CATALOG[name].validate(request, _metadata())


@pytest.mark.parametrize(
    ("split", "message"),
    [
        (TreeSplit(attribute="b"), "not in the left view"),
        (TreeSplit(attribute="x", threshold=2.5), "not a point of its public lattice"),
        (TreeSplit(attribute="x"), "needs a threshold"),
        (TreeSplit(attribute="colour", category="pink"), "not a category"),
        (TreeSplit(attribute="a", threshold=1.0), "takes no threshold"),
        (TreeSplit(attribute="zz"), "unknown attribute"),
    ],
)
def test_validation_refuses_splits_that_do_not_fit_the_metadata(
    split: TreeSplit, message: str
) -> None:
    tree = DecisionTree(view="left", depth=1, splits=[split])
    with pytest.raises(ValueError, match=message):
        _validate(
            "tree.leaf_counts",
            LeafCountsRequest(left_tree=tree, right_tree=RIGHT_TREE, epsilon=1.0),
        )
    target = TreeTarget(tree=tree)
    with pytest.raises(ValueError, match=message):
        _validate("tree.expmech", TreeExpMechRequest(view="right", target=target, epsilon=1.0))


def test_validation_needs_enough_splits_for_the_depth() -> None:
    small = DatasetMetadata.model_validate(
        {
            "kind": "views",
            "n_max": 10,
            "attributes": [
                {"type": "boolean", "name": "p", "view": "left"},
                {"type": "boolean", "name": "q", "view": "left"},
                {"type": "boolean", "name": "r", "view": "right"},
            ],
        }
    )
    spec = CATALOG["tree.mcmc"]
    target = AttributeTarget(attribute="r")
    spec.validate(TreeMCMCRequest(view="left", target=target, depth=1, epsilon=1.0), small)
    with pytest.raises(ValueError, match="needs at least 3"):
        spec.validate(TreeMCMCRequest(view="left", target=target, depth=2, epsilon=1.0), small)
    # A target in the same view is not a candidate split.
    same_view = AttributeTarget(attribute="q")
    with pytest.raises(ValueError, match="offers 1 distinct splits"):
        spec.validate(TreeMCMCRequest(view="left", target=same_view, depth=2, epsilon=1.0), small)
    with pytest.raises(ValueError, match="right view offers 1"):
        CATALOG["tree.pair_mcmc"].validate(
            TreePairMCMCRequest(attribute="p", depth=2, epsilon=1.0), small
        )
    with pytest.raises(ValueError, match="numeric targets only"):
        CATALOG["tree.pair_mcmc"].validate(
            TreePairMCMCRequest(attribute="r", bins=3, depth=1, epsilon=1.0), small
        )
    binned = AttributeTarget(attribute="r", bins=3)
    with pytest.raises(ValueError, match="numeric targets only"):
        spec.validate(TreeMCMCRequest(view="left", target=binned, depth=1, epsilon=1.0), small)


# --------------------------------------------------------------------------------------------
# tree.leaf_counts (§3.6)


def test_exact_leaf_counts_by_hand() -> None:
    intersections, sizes = exact_leaf_counts(_store(), LEFT_TREE, RIGHT_TREE)
    left = [_reference_leaf(LEFT_TREE, row) for row in range(ROWS)]
    right = [_reference_leaf(RIGHT_TREE, row) for row in range(ROWS)]
    expected = np.zeros((4, 4), dtype=np.int64)
    for i, j in zip(left, right, strict=True):
        if i >= 0 and j >= 0:
            expected[i, j] += 1
    assert intersections.tolist() == expected.tolist()
    assert sizes.tolist() == [left.count(leaf) for leaf in range(4)]


def test_exact_partition_by_hand_puts_rows_outside_every_leaf_in_the_last_row_and_column() -> None:
    partition = exact_partition_counts(_store(), LEFT_TREE, RIGHT_TREE)
    left = [_reference_leaf(LEFT_TREE, row) for row in range(ROWS)]
    right = [_reference_leaf(RIGHT_TREE, row) for row in range(ROWS)]
    expected = np.zeros((5, 5), dtype=np.int64)
    for i, j in zip(left, right, strict=True):
        expected[i if i >= 0 else 4, j if j >= 0 else 4] += 1
    assert partition.tolist() == expected.tolist()
    assert partition.sum() == ROWS
    assert expected[4].sum() + expected[:, 4].sum() > 0  # the data has rows outside a leaf


def _discrete_laplace_variance(scale: float) -> float:
    return 2 * math.exp(-1.0 / scale) / (1 - math.exp(-1.0 / scale)) ** 2


def _assert_centred(samples: list[Any], truth: npt.NDArray[np.int64], scale: float) -> None:
    """Mean within 5 sigma of the truth, spread within 20 % of the discrete Laplace variance."""
    variance = _discrete_laplace_variance(scale)
    band = Z * math.sqrt(variance / len(samples))
    assert np.abs(np.mean(samples, axis=0) - truth).max() < band
    spread = np.var(np.asarray(samples) - truth)
    assert 0.8 * variance < spread < 1.25 * variance


def test_paper_leaf_counts_are_integers_centred_on_the_exact_counts() -> None:
    spec = CATALOG["tree.leaf_counts"]
    request = LeafCountsRequest(
        left_tree=LEFT_TREE, right_tree=RIGHT_TREE, epsilon=2.0, release="paper"
    )
    store = _store()
    cost = spec.cost(request)
    assert cost == Epsilon.charge(2.0)
    intersections, sizes = exact_leaf_counts(store, LEFT_TREE, RIGHT_TREE)
    matrices, vectors = [], []
    for _ in range(2_000):
        fields = spec.run(store, request, cost, seeded_generator(1), no_progress)
        assert all(isinstance(v, int) for row in fields["intersections"] for v in row)
        assert all(isinstance(v, int) for v in fields["left_counts"])
        assert "partition" not in fields
        matrices.append(fields["intersections"])
        vectors.append(fields["left_counts"])
    _assert_centred(matrices, intersections, scale=2 / 2.0)  # ε/2 per release
    _assert_centred(vectors, sizes, scale=2 / 2.0)


def test_partition_leaf_counts_are_one_release_at_scale_one_over_epsilon() -> None:
    spec = CATALOG["tree.leaf_counts"]
    request = LeafCountsRequest(left_tree=LEFT_TREE, right_tree=RIGHT_TREE, epsilon=2.0)
    assert request.release == "partition"  # the default
    store = _store()
    cost = spec.cost(request)
    assert cost == Epsilon.charge(2.0)  # the same charge as the paper's two releases
    truth = exact_partition_counts(store, LEFT_TREE, RIGHT_TREE)
    partitions = []
    for _ in range(2_000):
        fields = spec.run(store, request, cost, seeded_generator(1), no_progress)
        partition = np.asarray(fields["partition"])
        assert partition.dtype == np.int64
        assert partition.shape == (5, 5)
        # The paper's fields are the partition's a × b block and its row sums.
        assert fields["intersections"] == partition[:4, :4].tolist()
        assert fields["left_counts"] == partition[:4].sum(axis=1).tolist()
        partitions.append(partition)
    _assert_centred(partitions, truth, scale=1 / 2.0)


@pytest.mark.parametrize(("release", "sigma"), [("partition", 0.5), ("paper", math.sqrt(2) / 2)])
def test_leaf_counts_on_a_zcdp_dataset_are_discrete_gaussian(release: str, sigma: float) -> None:
    """Under the executor's zCDP choice the same charge (ε = 2, ρ = ε²/2) buys the discrete
    Gaussian of σ = Δ₂/ε: Δ₂ = 1 for the partition, √2 for the paper's intersections and
    sizes released as one vector (one row moves one cell of each)."""
    spec = CATALOG["tree.leaf_counts"]
    request = LeafCountsRequest.model_validate(
        {"left_tree": LEFT_TREE, "right_tree": RIGHT_TREE, "epsilon": 2.0, "release": release}
    )
    store = _store()
    cost = spec.cost(request)
    intersections, _sizes = exact_leaf_counts(store, LEFT_TREE, RIGHT_TREE)
    samples = []
    with count_noise("discrete_gaussian"):
        for _ in range(2_000):
            fields = spec.run(store, request, cost, seeded_generator(1), no_progress)
            assert fields["noise"]["kind"] == "discrete_gaussian"
            assert fields["noise"]["scale"] == pytest.approx(sigma, rel=1e-12)
            samples.append(np.asarray(fields["intersections"]) - intersections)
    noise = np.asarray(samples)
    ks = np.arange(-40, 41, dtype=np.float64)
    weights = np.exp(-(ks**2) / (2 * sigma**2))
    variance = float((ks**2 * weights).sum() / weights.sum())  # below σ² at small σ
    assert abs(float(noise.mean())) < 5 * math.sqrt(variance / noise.size)
    assert 0.9 * variance < float(noise.var()) < 1.1 * variance
    laplace = spec.run(store, request, cost, seeded_generator(1), no_progress)["noise"]
    assert laplace == {"kind": "laplace", "scale": 0.5 if release == "partition" else 1.0}


# --------------------------------------------------------------------------------------------
# tree.expmech (§3.3): exact probabilities on a tiny space


def _gini_quality(
    split: TreeSplit, labels: list[int], rows: range | list[int] = range(ROWS)
) -> float:
    """q = −Σ_children |c|·Gini(c) over the labelled rows, those with a missing value forming
    a third child (ALGORITHMS.md §6 item 18; brute force)."""
    children: dict[bool | None, Counter[int]] = {True: Counter(), False: Counter(), None: Counter()}
    for row in rows:
        if labels[row] >= 0:
            children[_goes_left(split, row)][labels[row]] += 1
    total = 0.0
    for counts in children.values():
        size = sum(counts.values())
        if size:
            total += size - sum(c * c for c in counts.values()) / size
    return -total


def _depth_one_splits() -> list[tuple[TreeSplit, float]]:
    """Every depth-1 split of the left view without colour, with its base mass."""
    splits = [(TreeSplit(attribute="a"), 0.5)]
    splits += [(TreeSplit(attribute="x", threshold=float(t)), 0.5 / 5) for t in range(5)]
    return splits


def test_expmech_matches_the_exact_distribution_on_a_tiny_space() -> None:
    metadata = _metadata()
    store = _store()
    space = SplitSpace(
        view="left",
        families=tuple(f for f in SplitSpace.of(metadata, "left").families if f.name != "colour"),
    )
    labels = make_target(store, AttributeTarget(attribute="b"))
    epsilon = 3.0
    splits = _depth_one_splits()
    weights = [mass * math.exp(epsilon / 4 * _gini_quality(split, B)) for split, mass in splits]
    expected = np.asarray(weights) / sum(weights)
    draws = 4_000
    rng = seeded_generator(11)
    observed = Counter(
        space.split_of(
            grow_tree_expmech(store, space, labels, depth=1, epsilon=epsilon, rng=rng)[0]
        )
        for _ in range(draws)
    )
    counts = [observed[split] for split, _ in splits]
    assert sum(counts) == draws
    assert chisquare(counts, expected * draws).pvalue > SEEDED_P_VALUE
    # Power: the same draws refute an EM run with half the sensitivity (Δ = 1).
    wrong = np.asarray(
        [mass * math.exp(epsilon / 2 * _gini_quality(split, B)) for split, mass in splits]
    )
    assert chisquare(counts, wrong / wrong.sum() * draws).pvalue < SEEDED_P_VALUE


def test_a_node_em_gives_an_ancestor_split_no_mass_inside_its_numeric_cell() -> None:
    # A node holding rows 1 and 7 (x = 0.5 and 3.5): lattice points 1, 2, 3 share one cell.
    # The ancestor used x ≤ 2, so that cell loses the point 2 and the released threshold is
    # 1 or 3, equally likely.
    store = _store()
    space = SplitSpace(
        view="left",
        families=tuple(
            f for f in SplitSpace.of(_metadata(), "left").families if f.name != "colour"
        ),
    )
    labels = make_target(store, AttributeTarget(attribute="b"))
    epsilon = 3.0
    excluded_key = space.key_of(TreeSplit(attribute="x", threshold=2.0))
    splits = _depth_one_splits()
    weights = np.asarray(
        [
            0.0
            if split.threshold == 2.0
            else mass * math.exp(epsilon / 4 * _gini_quality(split, B, [1, 7]))
            for split, mass in splits
        ]
    )
    draws = 4_000
    rng = seeded_generator(13)
    rows = np.isin(np.arange(ROWS), [1, 7])
    observed = Counter(
        space.split_of(
            _node_split(
                store, space, rows, labels, excluded={excluded_key}, epsilon=epsilon, rng=rng
            )
        )
        for _ in range(draws)
    )
    counts = [observed[split] for split, _ in splits]
    assert counts[splits.index((TreeSplit(attribute="x", threshold=2.0), 0.1))] == 0
    keep = weights > 0
    expected = weights[keep] / weights.sum() * draws
    assert chisquare(np.asarray(counts)[keep], expected).pvalue > SEEDED_P_VALUE


@pytest.mark.parametrize(
    ("rows", "bits", "classes", "seed"),
    [(60, 4, 7, 1), (200, 2, 3, 2), (40, 6, 64, 3), (1, 3, 2, 4), (0, 3, 2, 5)],
)
def test_numeric_cells_give_every_lattice_threshold_its_brute_force_quality(
    rows: int, bits: int, classes: int, seed: int
) -> None:
    """Per lattice index k, the split ``A ≤ point k`` on a node's labelled rows: its Gini
    quality by brute force (class tables per threshold, the rows with a missing value as a third
    child, ALGORITHMS.md §6 item 18) equals its cell's, each cell holds the
    lattice indices [edges[b], edges[b+1]) and its mass counts those not used by an ancestor.
    Values tie, fall between lattice points and lie on the range's ends; some are missing, some
    rows unlabelled, some outside the node."""
    generator = np.random.default_rng(seed)
    lattice = public_lattice(0.0, 1.0, bits)
    values = generator.random(rows)
    values[: min(rows, 4)] = [0.0, 1.0, 0.5, 0.5][:rows]
    values[generator.random(rows) < 0.1] = NAN
    column = NumericColumn.from_values("v", values, lo=0.0, hi=1.0)
    labels = Labels(generator.integers(-1, classes, rows), classes)
    node = (generator.random(rows) < 0.8) & (labels.classes >= 0)
    family = SplitFamily("v", "numeric", lattice.size, lattice)
    banned = sorted({int(k) for k in generator.integers(0, lattice.size, 2)})
    candidates = _attribute_candidates(column, family, node, labels, banned)
    assert candidates.edges is not None
    edges = candidates.edges.tolist()
    assert edges[0] == 0
    assert edges[-1] == lattice.size
    assert all(a < b for a, b in itertools.pairwise(edges[1:]))  # only cell 0 can be empty
    present = node & ~np.isnan(values)
    for cell, (start, stop) in enumerate(itertools.pairwise(edges)):
        free = sum(1 for k in range(start, stop) if k not in banned)
        want_mass = math.log(free / lattice.size) if free else -math.inf
        assert candidates.log_mass[cell] == pytest.approx(want_mass)
        for k in range(start, stop):
            left = present & (values <= lattice.point(k))
            total = 0.0
            for side in (left, present & ~left, node & np.isnan(values)):
                counts = np.bincount(labels.classes[side], minlength=classes)
                size = int(counts.sum())
                total += size - float(counts @ counts) / size if size else 0.0
            assert candidates.quality[cell] == pytest.approx(-total, abs=1e-9)


def test_expmech_never_reuses_a_split_on_a_path_and_fills_every_node() -> None:
    metadata = _metadata()
    store = _store()
    space = SplitSpace.of(metadata, "left")
    labels = make_target(store, AttributeTarget(attribute="y"))
    rng = seeded_generator(5)
    for _ in range(200):
        keys = grow_tree_expmech(store, space, labels, depth=3, epsilon=50.0, rng=rng)
        tree = space.tree(3, keys)  # the model re-checks the no-reuse rule
        assert len(tree.splits) == 7


def test_expmech_operation_releases_a_valid_tree() -> None:
    spec = CATALOG["tree.expmech"]
    request = TreeExpMechRequest(
        view="right", target=TreeTarget(tree=LEFT_TREE), depth=2, epsilon=1.0
    )
    spec.validate(request, _metadata())
    fields = spec.run(_store(), request, spec.cost(request), seeded_generator(2), no_progress)
    tree = fields["tree"]
    assert isinstance(tree, DecisionTree)
    assert tree.view == "right"
    CATALOG["tree.leaf_counts"].validate(
        LeafCountsRequest(left_tree=LEFT_TREE, right_tree=tree, epsilon=1.0), _metadata()
    )


# --------------------------------------------------------------------------------------------
# columns: a public restriction of the split attributes


_OPERATION: dict[type[Any], str] = {
    TreeExpMechRequest: "tree.expmech",
    TreeMCMCRequest: "tree.mcmc",
    TreePairMCMCRequest: "tree.pair_mcmc",
}


def test_restricted_trees_never_split_on_an_excluded_column() -> None:
    """With ``columns`` the samplers' candidates are the allowed attributes only: on the exact
    rows, at an ε where the unrestricted trees do use colour, no released tree splits on it."""
    allowed = ["a", "x", "b", "y"]
    target = AttributeTarget(attribute="y")
    requests: list[Any] = [
        TreeExpMechRequest(view="left", target=target, depth=2, epsilon=50.0, columns=allowed),
        TreeMCMCRequest(
            view="left",
            target=target,
            depth=2,
            iterations=MIN_TREE_ITERATIONS,
            epsilon=50.0,
            columns=allowed,
        ),
        TreePairMCMCRequest(
            attribute="y", depth=2, iterations=MIN_TREE_ITERATIONS, epsilon=50.0, columns=allowed
        ),
    ]
    used: Counter[str] = Counter()
    for request in requests:
        spec = CATALOG[_OPERATION[type(request)]]
        spec.validate(request, _metadata())
        for seed in range(25 if _OPERATION[type(request)] == "tree.expmech" else 4):
            fields = spec.run(
                _store(), request, spec.cost(request), seeded_generator(seed), no_progress
            )
            trees = [fields[name] for name in ("tree", "left_tree", "right_tree") if name in fields]
            used.update(split.attribute for tree in trees for split in tree.splits)
    assert "colour" not in used
    assert used["a"] > 0
    assert used["x"] > 0
    # Unrestricted, the same requests do split on colour: the restriction is what removed it.
    free = TreeExpMechRequest(view="left", target=target, depth=2, epsilon=50.0)
    spec = CATALOG["tree.expmech"]
    splits = [
        split.attribute
        for seed in range(25)
        for split in spec.run(_store(), free, spec.cost(free), seeded_generator(seed), no_progress)[
            "tree"
        ].splits
    ]
    assert "colour" in splits


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (
            TreeExpMechRequest(
                view="left", target=AttributeTarget(attribute="y"), epsilon=1.0, columns=["zz"]
            ),
            "unknown column",
        ),
        (
            TreeExpMechRequest(
                view="left",
                target=AttributeTarget(attribute="y"),
                depth=1,
                epsilon=1.0,
                columns=["b", "y"],
            ),
            "leave the left view no attribute",
        ),
        (
            TreeMCMCRequest(
                view="left",
                target=AttributeTarget(attribute="y"),
                depth=1,
                epsilon=1.0,
                columns=["a", "b"],
            ),
            "target attribute 'y' is not among the allowed columns",
        ),
        (
            TreePairMCMCRequest(attribute="b", depth=1, epsilon=1.0, columns=["b", "y"]),
            "leave the left view no attribute",
        ),
        (
            TreeExpMechRequest(
                view="left",
                target=AttributeTarget(attribute="y"),
                depth=2,
                epsilon=1.0,
                columns=["a", "y"],
            ),
            "needs at least 3",
        ),
    ],
)
def test_columns_are_validated_from_public_metadata(request_: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _validate(_OPERATION[type(request_)], request_)


# --------------------------------------------------------------------------------------------
# Missing values as a child (ALGORITHMS.md §6 item 18): a mostly-present attribute must not win
# a split by dropping its missing rows from the penalty.

#: 600 rows, target t half 1 and half 0. The complete Boolean c agrees with t on 80 % of the
#: rows; m (1/6 missing, 50 rows of each class) agrees with t on 80 % of its present rows, so it
#: is no more informative. Children of c: (240, 60) and (60, 240), q = −(96 + 96) = −192.
#: Children of m: (200, 50) and (50, 200), 80 each, and the missing child (50, 50), 50: q = −210.
#: Without the missing child m would score −160 and win every draw.
SYNTH_ROWS = 600


def _synthetic_columns() -> tuple[list[int], list[int], list[int]]:
    t = [1] * 300 + [0] * 300
    c = [1] * 240 + [0] * 60 + [0] * 240 + [1] * 60
    m = [1] * 200 + [0] * 50 + [-1] * 50 + [0] * 200 + [1] * 50 + [-1] * 50
    return t, c, m


def _synthetic_store(kind: str) -> ColumnStore:
    """Left view: c (Boolean) and m of ``kind`` (Boolean, numeric 0/1 on [0, 1] or categorical
    no/yes); right view: the target t."""
    t, c, m = _synthetic_columns()
    missing: dict[str, Any]
    column: Column
    values = np.asarray(m)
    if kind == "boolean":
        missing = {"type": "boolean"}
        column = _boolean("m", m)
    elif kind == "numeric":
        missing = {"type": "numeric", "lo": 0.0, "hi": 1.0, "lattice_bits": 1}
        numbers = np.where(values < 0, NAN, values.astype(np.float64))
        column = NumericColumn.from_values("m", numbers, lo=0.0, hi=1.0)
    else:
        missing = {"type": "categorical", "categories": ["no", "yes"]}
        column = CategoricalColumn("m", ("no", "yes"), values.astype(np.int32))
    metadata = DatasetMetadata.model_validate(
        {
            "kind": "views",
            "n_max": 1000,
            "attributes": [
                {"type": "boolean", "name": "c", "view": "left"},
                {**missing, "name": "m", "view": "left"},
                {"type": "boolean", "name": "t", "view": "right"},
            ],
        }
    )
    columns: dict[str, Column] = {"c": _boolean("c", c), "m": column, "t": _boolean("t", t)}
    return ColumnStore(metadata, n_rows=SYNTH_ROWS, columns=columns)


@pytest.mark.parametrize("kind", ["boolean", "numeric", "categorical"])
def test_a_partly_missing_attribute_pays_for_its_missing_rows(kind: str) -> None:
    store = _synthetic_store(kind)
    space = SplitSpace.of(store.metadata, "left")
    labels = make_target(store, AttributeTarget(attribute="t"))
    rows = np.ones(SYNTH_ROWS, dtype=np.bool_)
    best = {
        family.name: float(
            _attribute_candidates(store.column(family.name), family, rows, labels, []).quality.max()
        )
        for family in space.families
    }
    assert best == pytest.approx({"c": -192.0, "m": -210.0})
    # The exponential mechanism's argmax at a high ε: the complete attribute, every time
    # (P(m) ≈ exp(−(ε/4)·18) ≈ 1e−98).
    rng = seeded_generator(3)
    chosen = {
        space.families[
            grow_tree_expmech(store, space, labels, depth=1, epsilon=50.0, rng=rng)[0][0]
        ].name
        for _ in range(20)
    }
    assert chosen == {"c"}


@pytest.mark.parametrize("kind", ["boolean", "numeric", "categorical"])
def test_the_scored_missing_child_is_the_rows_outside_every_leaf(kind: str) -> None:
    """Printed = measured: a tree on m scores its missing rows as their own cell, and those are
    exactly the rows routing puts in no leaf (the partition's outside row), which no leaf's
    query holds."""
    store = _synthetic_store(kind)
    space = SplitSpace.of(store.metadata, "left")
    family = next(i for i, f in enumerate(space.families) if f.name == "m")
    split = space.split_of((family, 0))
    tree = DecisionTree(view="left", depth=1, splits=[split])
    leaves = tree_leaves(store, tree)
    in_a_leaf = np.bitwise_or.reduce(leaves, axis=0)
    counts = np.bitwise_count(in_a_leaf).sum()
    assert int(counts) == SYNTH_ROWS - 100  # the 100 rows with m missing reach no leaf
    right = DecisionTree(view="right", depth=1, splits=[TreeSplit(attribute="t")])
    partition = exact_partition_counts(store, tree, right)
    assert partition[-1, :-1].tolist() == [50, 50]  # outside row: the missing child's classes


@pytest.mark.parametrize("seed", range(4))
def test_split_codes_follow_their_definition_with_missing_values_and_ties(seed: int) -> None:
    """``split_codes`` searches a numeric column's present values in their stored order (for
    speed); every code must still be the number of lattice points below the row's value, −1
    where it is missing, whatever the order of the rows (ties, values on lattice points,
    values clipped at the bounds)."""
    generator = np.random.default_rng(seed)
    rows = 500
    metadata = DatasetMetadata.model_validate(
        {
            "kind": "views",
            "n_max": rows,
            "attributes": [
                {"type": "numeric", "name": "u", "view": "left", "lo": 0.0, "hi": 1.0},
                {
                    "type": "numeric",
                    "name": "v",
                    "view": "left",
                    "lo": -5.0,
                    "hi": 5.0,
                    "lattice_bits": 3,
                },
                {"type": "boolean", "name": "w", "view": "left"},
                {"type": "boolean", "name": "r", "view": "right"},
            ],
        }
    )
    space = SplitSpace.of(metadata, "left")
    lattices = {family.name: family.lattice for family in space.families}
    u = generator.choice([0.0, 0.25, 0.5, 0.5, 1.0, generator.random()], size=rows)
    v = generator.normal(0.0, 4.0, size=rows)  # beyond the bounds too: clipped
    for values in (u, v):
        values[generator.random(rows) < 0.2] = np.nan
    columns: dict[str, Column] = {
        "u": NumericColumn.from_values("u", u, lo=0.0, hi=1.0),
        "v": NumericColumn.from_values("v", v, lo=-5.0, hi=5.0),
        "w": _boolean("w", list(generator.integers(-1, 2, size=rows))),
        "r": _boolean("r", [1] * rows),
    }
    codes, ordered = split_codes(ColumnStore(metadata, n_rows=rows, columns=columns), space)
    for index, family in enumerate(space.families):
        if family.name == "w":
            assert not ordered[index]
            continue
        lattice = lattices[family.name]
        assert lattice is not None
        assert ordered[index]
        stored = columns[family.name]
        assert isinstance(stored, NumericColumn)
        expected = [
            -1 if math.isnan(value) else int(np.sum(lattice.points < value))
            for value in stored.values
        ]
        assert codes[index].tolist() == expected
