"""Privacy audit of the exact sampler of the ``tree.mcmc`` target (ALGORITHMS.md §3.4;
``operations/tree_exact.py``) on the neighbouring toy datasets of ``test_audit_trees`` (D and
D' = D plus a row that moves the score of one split by 4/3 of Δ = 2, in a child or, in the
missing-child regime, in the cell of the rows a missing value stops: ALGORITHMS.md §6 item 18),
at depth 1 where the target is one exponential mechanism over the splits p, q, x ≤ 0, 2, 4.
The registered ``tree.mcmc`` with sampler "exact" runs N times a side from seeded generators;
the Clopper-Pearson lower bound on the privacy loss must stay below ε = 1 (alpha = 1e-5), and
the broken variant (the kernel with Δ/10, i.e. run at 10·ε) is flagged. A depth-1 tree is
drawn from histograms (no masks); the sum-product recursion of deeper trees is audited beside
it on the same neighbours, directly as a kernel.

A third regime audits the numeric split groups (operations/tree_exact.py, "Numeric
attributes"): a view whose numeric y has the lattice 0, 1, …, 4 and values 0.5 or 3.5, so the
thresholds 1–3 form one group, and a neighbour whose added row (y = 2, t = 0) splits that group
in two and moves the score of the thresholds 2 and 3 by 1.6: the groups themselves follow the
data, and the released threshold's law must not.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

import numpy as np
import pytest

from dpmine.wire import AttributeTarget, DatasetMetadata, DecisionTree, TreeMCMCRequest
from dpmine_server.data.columns import BooleanColumn, Column, ColumnStore, NumericColumn
from dpmine_server.dp.rng import seeded_generator
from dpmine_server.operations import CATALOG
from dpmine_server.operations.base import no_progress
from dpmine_server.operations.tree_exact import (
    exact_target,
    sample_stump_exact,
    sample_tree_exact,
    split_groups,
)
from dpmine_server.operations.tree_kernels import SplitKey, SplitSpace, make_target
from privacy.audit import AuditResult, assert_audit_flags, assert_audit_passes, audit_categorical
from privacy.sizes import short_and_long
from privacy.test_audit_trees import (
    ALPHA,
    CHARGE,
    EPSILON,
    REGIMES,
    SPLITS,
    _label,
    _neighbours,
)

#: Draws a side: short by default, long under ``slow``.
SAMPLES = short_and_long("samples", 2_000, 6_000)


def _registered(store: ColumnStore, seed: int, samples: int) -> list[Hashable]:
    """Draws of the registered kernel, ``tree.mcmc`` with sampler "exact" at the charged ε."""
    request = TreeMCMCRequest(
        view="left",
        target=AttributeTarget(attribute="t"),
        depth=1,
        epsilon=EPSILON,
        sampler="exact",
    )
    spec = CATALOG["tree.mcmc"]
    spec.validate(request, store.metadata)
    assert spec.request_guarantee(request, store.metadata) == "pure"
    cost = spec.cost(request)
    assert cost == CHARGE
    rng = seeded_generator(seed)
    runs = [spec.run(store, request, cost, rng, no_progress) for _ in range(samples)]
    assert {run["sampler"] for run in runs} == {"exact"}
    return [_label(run["tree"]) for run in runs]


#: The kernels of a depth-1 draw: the registered operation's (the histogram path at depth 1)
#: and the sum-product recursion (the path of deeper trees, which must target the same law).
KERNELS = ("histograms", "recursion")


def _kernel(
    store: ColumnStore, epsilon: float, kernel: str
) -> Callable[[np.random.Generator], list[SplitKey]]:
    """One depth-1 draw of ``kernel`` at ``epsilon`` (as a function of the generator)."""
    space = SplitSpace.of(store.metadata, "left")
    labels = make_target(store, AttributeTarget(attribute="t"))
    if kernel == "histograms":
        return lambda rng: sample_stump_exact(store, space, labels, epsilon=epsilon, rng=rng)
    target = exact_target(store, space, labels.class_words(), epsilon=epsilon)
    return lambda rng: sample_tree_exact(target, depth=1, rng=rng)


def _outputs(
    store: ColumnStore, seed: int, epsilon: float, samples: int, kernel: str
) -> list[Hashable]:
    """Draws of the registered operation (the histograms at the charged ε), else the kernel
    at ``epsilon``."""
    if epsilon == EPSILON and kernel == "histograms":
        return _registered(store, seed, samples)
    space = SplitSpace.of(store.metadata, "left")
    draw = _kernel(store, epsilon, kernel)
    rng = seeded_generator(seed)
    return [_label(space.tree(1, draw(rng))) for _ in range(samples)]


def _audit(epsilon: float, samples: int, regime: str, kernel: str) -> AuditResult:
    data, neighbour = _neighbours(regime)
    return audit_categorical(
        _outputs(data, 51, epsilon, samples, kernel),
        _outputs(neighbour, 52, epsilon, samples, kernel),
        categories=SPLITS,
        alpha=ALPHA,
    )


@SAMPLES
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("regime", list(REGIMES))
def test_exact_tree_draws_pass_the_audit(samples: int, regime: str, kernel: str) -> None:
    assert_audit_passes(_audit(EPSILON, samples, regime, kernel), EPSILON)


@SAMPLES
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("regime", list(REGIMES))
def test_audit_flags_the_exact_tree_sampler_with_a_tenth_of_the_sensitivity(
    samples: int, regime: str, kernel: str
) -> None:
    assert_audit_flags(_audit(10 * EPSILON, samples, regime, kernel), EPSILON)


# --------------------------------------------------------------------------------------------
# Numeric split groups that the added row splits

GROUPS_METADATA = DatasetMetadata.model_validate(
    {
        "kind": "views",
        "n_max": 100,
        "attributes": [
            {"type": "boolean", "name": "p", "view": "left"},
            {"type": "numeric", "name": "y", "view": "left", "lo": 0, "hi": 4, "lattice_bits": 2},
            {"type": "boolean", "name": "t", "view": "right"},
        ],
    }
)
#: (p, y, t): y ≤ 1 rows are all t = 1 and y > 3 rows all t = 0, so the thresholds 1–3 (one
#: group) split the rows perfectly; the added row (p missing, y = 2, t = 0) lands left of the
#: thresholds 2 and 3 only.
GROUP_ROWS: tuple[tuple[int | None, float, int], ...] = (
    (1, 0.5, 1),
    (0, 0.5, 1),
    (1, 0.5, 1),
    (0, 0.5, 1),
    (1, 3.5, 0),
    (0, 3.5, 0),
    (1, 3.5, 0),
    (0, 3.5, 0),
)
GROUP_ADDED: tuple[int | None, float, int] = (None, 2.0, 0)
GROUP_SPLITS = ["p", "y<=0.0", "y<=1.0", "y<=2.0", "y<=3.0", "y<=4.0"]


def _group_store(rows: Sequence[tuple[int | None, float, int]]) -> ColumnStore:
    present = np.array([row[0] is not None for row in rows])
    columns: dict[str, Column] = {
        "p": BooleanColumn.from_arrays("p", np.array([row[0] == 1 for row in rows]), present),
        "y": NumericColumn.from_values("y", np.array([row[1] for row in rows]), lo=0.0, hi=4.0),
        "t": BooleanColumn.from_arrays(
            "t", np.array([row[2] == 1 for row in rows]), np.ones(len(rows), dtype=bool)
        ),
    }
    return ColumnStore(GROUPS_METADATA, n_rows=len(rows), columns=columns)


def _group_label(tree: DecisionTree) -> str:
    split = tree.splits[0]
    return split.attribute if split.threshold is None else f"y<={split.threshold}"


def _group_outputs(store: ColumnStore, seed: int, epsilon: float, samples: int) -> list[Hashable]:
    """Depth-1 draws: the registered ``tree.mcmc`` ("exact") at the charged ε, else the kernel
    at ``epsilon`` (the broken variant)."""
    request = TreeMCMCRequest(
        view="left", target=AttributeTarget(attribute="t"), depth=1, epsilon=EPSILON
    )
    rng = seeded_generator(seed)
    if epsilon == EPSILON:
        spec = CATALOG["tree.mcmc"]
        spec.validate(request, store.metadata)
        assert spec.request_guarantee(request, store.metadata) == "pure"  # "auto" runs exact
        runs = [spec.run(store, request, CHARGE, rng, no_progress) for _ in range(samples)]
        assert {run["sampler"] for run in runs} == {"exact"}
        return [_group_label(run["tree"]) for run in runs]
    space = SplitSpace.of(store.metadata, "left")
    labels = make_target(store, AttributeTarget(attribute="t"))
    return [
        _group_label(
            space.tree(1, sample_stump_exact(store, space, labels, epsilon=epsilon, rng=rng))
        )
        for _ in range(samples)
    ]


def _group_audit(epsilon: float, samples: int) -> AuditResult:
    return audit_categorical(
        _group_outputs(_group_store(GROUP_ROWS), 61, epsilon, samples),
        _group_outputs(_group_store((*GROUP_ROWS, GROUP_ADDED)), 62, epsilon, samples),
        categories=GROUP_SPLITS,
        alpha=ALPHA,
    )


def test_the_added_row_splits_a_threshold_group() -> None:
    """The neighbours' groups differ ([1, 3] against [1] and [2, 3]): the audits below see
    data-dependent groups."""
    space = SplitSpace.of(GROUPS_METADATA, "left")

    def groups(rows: Sequence[tuple[int | None, float, int]]) -> list[tuple[int, int]]:
        found = split_groups(_group_store(rows), space)
        return [(g.start, g.size) for g in found if g.family == 1]

    assert groups(GROUP_ROWS) == [(0, 1), (1, 3), (4, 1)]
    assert groups((*GROUP_ROWS, GROUP_ADDED)) == [(0, 1), (1, 1), (2, 2), (4, 1)]
    assert space.n_splits == 6


@SAMPLES
def test_exact_draws_over_numeric_groups_pass_the_audit(samples: int) -> None:
    assert_audit_passes(_group_audit(EPSILON, samples), EPSILON)


@SAMPLES
def test_audit_flags_the_grouped_sampler_with_a_tenth_of_the_sensitivity(samples: int) -> None:
    assert_audit_flags(_group_audit(10 * EPSILON, samples), EPSILON)
