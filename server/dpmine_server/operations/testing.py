"""Test-mode-only operations (``DPMINE_ENVIRONMENT=test``): never in the catalog otherwise.

``test.spin`` is ``count.noisy`` (ALGORITHMS.md §0.6) after a deliberately slow, GIL-holding
Python loop of a public number of seconds, declared ``mode="job"``. It exists so that the test
suite and the benchmark can show that a long job runs in a worker process without stalling the
API process, that a worker killed mid-job keeps the charge, and that cancellation stops a job at
its next public progress step. Its release is exactly ``count.noisy``'s, so it is pure ε-DP.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from pydantic import Field

from dpmine.wire import (
    DatasetMetadata,
    Expr,
    NoisyCountResponse,
    Operation,
    OperationRequest,
)
from dpmine.wire import (
    Epsilon as WireEpsilon,
)
from dpmine_server.data.columns import ColumnStore
from dpmine_server.data.validation import validate_expr
from dpmine_server.dp.budget import Epsilon
from dpmine_server.operations.base import OperationSpec, Progress
from dpmine_server.operations.counts import noisy_count

__all__ = ["TEST_OPERATIONS", "SpinCountRequest"]

#: Public steps of a spin: progress is reported after each.
SPIN_STEPS = 100


class SpinCountRequest(OperationRequest[NoisyCountResponse]):
    """Spin for ``seconds`` (public), then count the rows satisfying ``predicate`` noisily."""

    predicate: Expr | None = None
    epsilon: WireEpsilon
    seconds: float = Field(ge=0.0, le=60.0, description="Public length of the slow loop.")
    fail: bool = Field(default=False, description="Raise after the loop (tests the failure path).")


TEST_SPIN = Operation(
    name="test.spin",
    path="test/spin",
    request_model=SpinCountRequest,
    response_model=NoisyCountResponse,
    guarantee="pure",
    mode="job",
)


def _busy(seconds: float) -> None:
    """Pure-Python work that holds the GIL for ``seconds`` (a stand-in for an MCMC loop)."""
    end = time.monotonic() + seconds
    total = 0
    while time.monotonic() < end:
        for value in range(2_000):
            total += value * value
    del total


def _validate(request: SpinCountRequest, metadata: DatasetMetadata) -> None:
    if request.predicate is not None:
        validate_expr(request.predicate, metadata, side="predicate")


def _cost(request: SpinCountRequest) -> Epsilon:
    return Epsilon.charge(request.epsilon)


def _run(
    columns: ColumnStore,
    request: SpinCountRequest,
    epsilon: Epsilon,
    _rng: np.random.Generator,
    progress: Progress,
) -> dict[str, Any]:
    """Kernel of ``test.spin``: a public-length loop, then ``count.noisy`` (§0.6), pure ε-DP."""
    for step in range(SPIN_STEPS):
        _busy(request.seconds / SPIN_STEPS)
        progress((step + 1) / SPIN_STEPS)
    if request.fail:
        raise RuntimeError("test.spin was asked to fail")
    return {
        "count": noisy_count(columns, predicate=request.predicate, epsilon=epsilon.for_mechanism())
    }


TEST_OPERATIONS: list[OperationSpec[Any, Any]] = [
    OperationSpec(
        operation=TEST_SPIN,
        summary="Test mode only: a slow job, then a noisy count.",
        dataset_kinds=frozenset({"views", "table", "transactions"}),
        validate=_validate,
        cost=_cost,
        run=_run,
    )
]
