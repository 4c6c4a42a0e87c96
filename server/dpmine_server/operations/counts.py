"""Generic noisy count, ``count.noisy`` (ALGORITHMS.md §0.6)."""

from __future__ import annotations

from typing import Any

import numpy as np

from dpmine.wire import COUNT_NOISY, DatasetMetadata, Expr, NoisyCountRequest
from dpmine_server.data.columns import ColumnStore
from dpmine_server.data.validation import validate_expr
from dpmine_server.dp.budget import Epsilon
from dpmine_server.dp.mechanisms import CountRelease, noisy_counts
from dpmine_server.dp.zcdp import ReleasePart, generic_release
from dpmine_server.operations.base import OperationSpec, Progress

__all__ = ["OPERATIONS", "count_release", "noisy_count"]


def count_release(columns: ColumnStore, *, predicate: Expr | None, epsilon: float) -> CountRelease:
    """|{rows satisfying predicate}| + noise of the dataset's unit (§0.6, issue #24).

    Sensitivity 1 under add/remove-one-row (one row changes the count by at most 1), so L1 = 1
    and Δ₂² = 1: discrete Laplace(1/ε) is ε-DP, the discrete Gaussian with σ = 1/ε is
    ε²/2-zCDP (:func:`~dpmine_server.dp.mechanisms.noisy_counts`). The whole ε goes to the one
    count. The released integer may be negative.
    """
    support = columns.all_rows() if predicate is None else columns.evaluate(predicate)
    return noisy_counts([support.count()], epsilon=epsilon, l1=1, l2_squared=1)


def noisy_count(columns: ColumnStore, *, predicate: Expr | None, epsilon: float) -> int:
    """The released integer of :func:`count_release`."""
    return int(count_release(columns, predicate=predicate, epsilon=epsilon).values[0])


def _validate(request: NoisyCountRequest, metadata: DatasetMetadata) -> None:
    if request.predicate is not None:
        validate_expr(request.predicate, metadata, side="predicate")


def _cost(request: NoisyCountRequest) -> Epsilon:
    return Epsilon.charge(request.epsilon)


def _releases(_request: NoisyCountRequest, epsilon: Epsilon) -> tuple[ReleasePart, ...]:
    """One count (§0.6): discrete Laplace, ε-DP, hence ε²/2-zCDP (Bun & Steinke 2016, Prop.
    1.4); on a zCDP dataset the discrete Gaussian of σ = 1/ε, exactly ε²/2-zCDP (CKS20)."""
    return generic_release(epsilon)


def _run(
    columns: ColumnStore,
    request: NoisyCountRequest,
    epsilon: Epsilon,
    _rng: np.random.Generator,
    _progress: Progress,
) -> dict[str, Any]:
    """Kernel of ``count.noisy`` (ALGORITHMS.md §0.6): ε-DP, or ε²/2-zCDP on a zCDP dataset."""
    release = count_release(columns, predicate=request.predicate, epsilon=epsilon.for_mechanism())
    return {"count": int(release.values[0]), "noise": release.noise()}


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
