"""Generic noisy count, ``count.noisy`` (ALGORITHMS.md §0.6)."""

from __future__ import annotations

from typing import Any

import numpy as np

from dpmine.wire import COUNT_NOISY, DatasetMetadata, Expr, NoisyCountRequest
from dpmine_server.data.columns import ColumnStore
from dpmine_server.data.validation import validate_expr
from dpmine_server.dp.budget import Epsilon
from dpmine_server.dp.mechanisms import discrete_laplace
from dpmine_server.dp.zcdp import ReleasePart, generic_release
from dpmine_server.operations.base import OperationSpec, Progress

__all__ = ["OPERATIONS", "noisy_count"]


def noisy_count(columns: ColumnStore, *, predicate: Expr | None, epsilon: float) -> int:
    """|{rows satisfying predicate}| + discrete Laplace(1/ε); ε-DP.

    Sensitivity 1 under add/remove-one-row (one row changes the count by at most 1). The whole
    ε goes to the one count. Returns an integer that may be negative.
    """
    support = columns.all_rows() if predicate is None else columns.evaluate(predicate)
    return int(discrete_laplace([support.count()], epsilon=epsilon, sensitivity=1)[0])


def _validate(request: NoisyCountRequest, metadata: DatasetMetadata) -> None:
    if request.predicate is not None:
        validate_expr(request.predicate, metadata, side="predicate")


def _cost(request: NoisyCountRequest) -> Epsilon:
    return Epsilon.charge(request.epsilon)


def _releases(_request: NoisyCountRequest, epsilon: Epsilon) -> tuple[ReleasePart, ...]:
    """One discrete-Laplace count (§0.6): ε-DP, hence ε²/2-zCDP (Bun & Steinke 2016, Prop.
    1.4)."""
    return generic_release(epsilon)


def _run(
    columns: ColumnStore,
    request: NoisyCountRequest,
    epsilon: Epsilon,
    _rng: np.random.Generator,
    _progress: Progress,
) -> dict[str, Any]:
    """Kernel of ``count.noisy`` (ALGORITHMS.md §0.6): pure ε-DP."""
    return {
        "count": noisy_count(columns, predicate=request.predicate, epsilon=epsilon.for_mechanism())
    }


_NOISY_COUNT = OperationSpec(
    operation=COUNT_NOISY,
    summary="Noisy count of the rows satisfying a predicate (or of all rows).",
    dataset_kinds=frozenset({"views", "table", "transactions"}),
    validate=_validate,
    cost=_cost,
    releases=_releases,
    run=_run,
)

OPERATIONS: list[OperationSpec[Any, Any]] = [_NOISY_COUNT]
