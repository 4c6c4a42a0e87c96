"""Private operations on redescriptions: ``red.compute_quality`` (ALGORITHMS.md §1.6).

The Serenade operations (§2) join this module.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpmine.queries import attributes
from dpmine.stats import jaccard, statistics_from_cells
from dpmine.wire import (
    ComputeQualityRequest,
    ComputeQualityResponse,
    DatasetMetadata,
    Guarantee,
    QualityMode,
    Redescription,
)
from dpmine_server.data.columns import ColumnStore
from dpmine_server.data.validation import validate_expr
from dpmine_server.dp.budget import Epsilon
from dpmine_server.dp.mechanisms import discrete_laplace
from dpmine_server.operations.base import OperationSpec, Progress

__all__ = ["OPERATIONS", "noisy_quality", "support_cells", "validate_redescription"]


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
    """Noisy support statistics; ε-DP.

    * ``cells`` [REC]: the four cells partition the rows, so the vector has L1 sensitivity 1;
      each cell gets discrete Laplace(1/ε), total cost ε.
    * ``paper``: |I| and |U| (each sensitivity 1), discrete Laplace(2/ε) each, ε/2 + ε/2.
    Derived statistics (clamped Ĩ, Ũ, J̃, supports, N̂, p̃) are post-processing of the release.
    """
    e11, e10, e01, e00 = support_cells(columns, redescription)
    if mode == "cells":
        n11, n10, n01, n00 = (
            int(v) for v in discrete_laplace([e11, e10, e01, e00], epsilon=epsilon, sensitivity=1)
        )
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
        }
    noisy_i, noisy_u = (
        int(v) for v in discrete_laplace([e11, e11 + e10 + e01], epsilon=epsilon, sensitivity=2)
    )
    support, union = max(noisy_i, 0), max(noisy_u, 0)
    return {
        "mode": mode,
        "cells": {"intersection": noisy_i, "union": noisy_u},
        "statistics": {"support": support, "union": union, "jaccard": jaccard(support, union)},
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


def _cost(request: ComputeQualityRequest) -> tuple[Epsilon, Guarantee]:
    return Epsilon.charge(request.epsilon), "pure"


def _run(
    columns: ColumnStore,
    request: ComputeQualityRequest,
    epsilon: Epsilon,
    _rng: np.random.Generator,
    _progress: Progress,
) -> dict[str, Any]:
    """Kernel of ``red.compute_quality`` (ALGORITHMS.md §1.6): pure ε-DP."""
    return noisy_quality(
        columns,
        redescription=request.redescription,
        epsilon=epsilon.for_mechanism(),
        mode=request.mode,
    )


OPERATIONS = [
    OperationSpec(
        name="red.compute_quality",
        path="redescriptions/quality",
        summary="Noisy support cells, Jaccard and p-value of a redescription.",
        request_model=ComputeQualityRequest,
        response_model=ComputeQualityResponse,
        dataset_kinds=frozenset({"views", "table"}),
        validate=_validate,
        cost=_cost,
        run=_run,
    )
]
