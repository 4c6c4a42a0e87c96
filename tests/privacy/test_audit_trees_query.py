"""Privacy audit of ``tree.expmech`` with a query target (ALGORITHMS.md §3.2–§3.3; the layered
miner's tree): the released split at depth 1 on neighbouring toy datasets, D and D' = D plus one
row, against the charged ε = 1 (alpha = 1e-5; harness in ``audit.py``).

The target is the right-view query ``[t] | [s]``. The added row (p = 1, q, x and t missing,
s = 0) gets class 0 from the query (a literal on a missing value is false), not "no class" as an
attribute target would give it: it enters the Gini penalty of the split on p, moving that
split's quality by 4/3 of the bound Δ = 2 and no other split's. The broken variant uses Δ/10
(c = 10·ε/4) and the audit must flag it.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

import numpy as np
import pytest

from dpmine.wire import DatasetMetadata, DecisionTree, QueryTarget, TreeExpMechRequest
from dpmine_server.data.columns import BooleanColumn, Column, ColumnStore, NumericColumn
from dpmine_server.dp.budget import Epsilon
from dpmine_server.dp.rng import seeded_generator
from dpmine_server.operations import CATALOG
from dpmine_server.operations.base import no_progress
from dpmine_server.operations.tree_kernels import (
    SplitSpace,
    grow_tree_expmech,
    make_target,
)
from privacy.audit import AuditResult, assert_audit_flags, assert_audit_passes, audit_categorical
from privacy.sizes import short_and_long

Row = tuple[int | None, int | None, float | None, int | None, int | None]

EPSILON = 1.0
ALPHA = 1e-5
#: Draws a side: short (default) and long (slow), as the attribute-target audit.
SAMPLES = short_and_long("samples", 2_000, 6_000)
TARGET = QueryTarget(query="[t] | [s]")

METADATA = DatasetMetadata.model_validate(
    {
        "kind": "views",
        "n_max": 100,
        "attributes": [
            {"type": "boolean", "name": "p", "view": "left"},
            {"type": "boolean", "name": "q", "view": "left"},
            {"type": "numeric", "name": "x", "view": "left", "lo": 0, "hi": 4, "lattice_bits": 1},
            {"type": "boolean", "name": "t", "view": "right"},
            {"type": "boolean", "name": "s", "view": "right"},
        ],
    }
)
#: D: (p, q, x, t, s) per row, None = missing. The query's class is 1 on the p = 1 rows (once
#: through s with t missing), so the added class-0 row there costs 4/3 of Gini weight.
BASE_ROWS: tuple[Row, ...] = (
    (1, 1, 0.5, None, 1),
    (1, 0, 1.5, 1, 0),
    (0, 1, 2.5, 0, 0),
    (0, 0, 3.5, 1, 0),
    (0, 1, 3.0, 0, None),
    (0, 0, 1.0, 0, 0),
)
ADDED: Row = (1, None, None, None, 0)
SPLITS = ["p", "q", "x<=0.0", "x<=2.0", "x<=4.0"]


def _store(rows: Sequence[Row]) -> ColumnStore:
    def boolean(name: str, position: int) -> BooleanColumn:
        values = [row[position] for row in rows]
        present = np.array([v is not None for v in values], dtype=bool)
        return BooleanColumn.from_arrays(name, np.array([v == 1 for v in values]), present)

    x = np.array([math.nan if row[2] is None else row[2] for row in rows], dtype=np.float64)
    columns: dict[str, Column] = {
        "p": boolean("p", 0),
        "q": boolean("q", 1),
        "x": NumericColumn.from_values("x", x, lo=0.0, hi=4.0),
        "t": boolean("t", 3),
        "s": boolean("s", 4),
    }
    return ColumnStore(METADATA, n_rows=len(rows), columns=columns)


def _label(tree: DecisionTree) -> str:
    split = tree.splits[0]
    return split.attribute if split.threshold is None else f"x<={split.threshold}"


def _quality(rows: Sequence[Row], split: str) -> float:
    """q = −Σ_children |c|·Gini(c), by hand: class = [t] or [s] (missing → false)."""
    children: dict[bool, list[int]] = {True: [0, 0], False: [0, 0]}
    for p, q, x, t, s in rows:
        value: float | None = {"p": p, "q": q}.get(split, x)
        if value is None:
            continue
        left = value == 1 if split in {"p", "q"} else value <= float(split.split("<=")[1])
        children[left][int(t == 1 or s == 1)] += 1
    return -float(sum(_weighted_gini(c) for c in children.values()))


def _weighted_gini(counts: list[int]) -> float:
    total = sum(counts)
    return 0.0 if total == 0 else total - sum(c * c for c in counts) / total


def test_the_query_labels_the_added_row_and_it_moves_only_the_split_on_p() -> None:
    labels = make_target(_store((*BASE_ROWS, ADDED)), TARGET)
    assert labels.classes.tolist() == [1, 1, 0, 1, 0, 0, 0]
    moved = [_quality((*BASE_ROWS, ADDED), s) - _quality(BASE_ROWS, s) for s in SPLITS]
    assert moved == pytest.approx([-4 / 3, 0, 0, 0, 0])
    assert abs(moved[0]) <= 2.0  # within the sensitivity bound the mechanism charges for


def _outputs(store: ColumnStore, seed: int, broken: bool, samples: int) -> list[Hashable]:
    request = TreeExpMechRequest(view="left", target=TARGET, depth=1, epsilon=EPSILON)
    spec = CATALOG["tree.expmech"]
    spec.validate(request, METADATA)
    cost = spec.cost(request)
    assert cost == Epsilon.charge(EPSILON)
    rng = seeded_generator(seed)
    if not broken:
        return [
            _label(spec.run(store, request, cost, rng, no_progress)["tree"]) for _ in range(samples)
        ]
    space = SplitSpace.of(store.metadata, "left")
    labels = make_target(store, TARGET)
    # Δ/10: the same mechanism with ten times the coefficient.
    return [
        _label(
            space.tree(
                1, grow_tree_expmech(store, space, labels, depth=1, epsilon=10 * EPSILON, rng=rng)
            )
        )
        for _ in range(samples)
    ]


def _audit(broken: bool, samples: int) -> AuditResult:
    data, neighbour = _store(BASE_ROWS), _store((*BASE_ROWS, ADDED))
    outputs = [_outputs(data, 41, broken, samples), _outputs(neighbour, 42, broken, samples)]
    return audit_categorical(*outputs, categories=SPLITS, alpha=ALPHA)


@SAMPLES
def test_expmech_with_a_query_target_passes_the_audit(samples: int) -> None:
    assert_audit_passes(_audit(broken=False, samples=samples), EPSILON)


@SAMPLES
def test_audit_flags_a_query_target_with_a_tenth_of_the_sensitivity(samples: int) -> None:
    assert_audit_flags(_audit(broken=True, samples=samples), EPSILON)
