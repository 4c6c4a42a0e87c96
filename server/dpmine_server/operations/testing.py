"""Test-mode-only operations (``DPMINE_ENVIRONMENT=test``): never in the catalog otherwise.

``test.spin`` is ``count.noisy`` (ALGORITHMS.md §0.6) after a deliberately slow, GIL-holding
Python loop of a public number of seconds, declared ``mode="job"``. It exists so that the test
suite and the benchmark can show that a long job runs in a worker process without stalling the
API process, that a worker killed mid-job keeps the charge, and that cancellation stops a job at
its next public progress step. Its release is exactly ``count.noisy``'s, so it is pure ε-DP.

``spin_if_any`` makes the loop run only when some row satisfies the predicate: the most
data-dependent running time a kernel can have within its public budget (``seconds``). The
channel audits (tests/privacy/test_audit_channels.py) use it as the adversarial kernel: one
added row decides whether the kernel takes ``seconds`` or nothing, so any state an analyst can
observe before the padded deadline (a retry's answer, a cancel's outcome, a queue's delay)
would tell the neighbours apart. ``test.spin_inline`` is the same operation answered inline.

``unpriced_seconds`` spins that much longer than the padding budget prices (which counts
``seconds`` only): a kernel that overruns its deadline, to show that an overrun fails closed
at the deadline (services/release_guard.py; tests/privacy/test_audit_overruns.py).
"""

from __future__ import annotations

import time
from typing import Any, Literal

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
from dpmine_server.dp.zcdp import ReleasePart, generic_release
from dpmine_server.operations.base import OperationSpec, Progress
from dpmine_server.operations.counts import count_release

__all__ = ["TEST_OPERATIONS", "SpinCountRequest"]

#: Public steps of a spin: progress is reported after each.
SPIN_STEPS = 100


class SpinCountRequest(OperationRequest[NoisyCountResponse]):
    """Spin for ``seconds`` (public), then count the rows satisfying ``predicate`` noisily."""

    predicate: Expr | None = None
    epsilon: WireEpsilon
    seconds: float = Field(ge=0.0, le=60.0, description="Public length of the slow loop.")
    unpriced_seconds: float = Field(
        default=0.0,
        ge=0.0,
        le=60.0,
        description="More loop than the padding budget prices (tests a kernel's overrun).",
    )
    steps: int = Field(
        default=SPIN_STEPS,
        ge=1,
        le=1_000,
        description="Public steps of the loop, progress reported after each (few steps: a "
        "kernel that reaches its next progress call long after its deadline).",
    )
    fail: bool = Field(default=False, description="Raise after the loop (tests the failure path).")
    spin_if_any: bool = Field(
        default=False,
        description="Spin only if some row satisfies the predicate (a data-dependent time).",
    )
    clock: Literal["wall", "cpu"] = Field(
        default="wall",
        description="What the loop's seconds count: 'wall' time (it ends on time whatever "
        "shares its process), or its own thread's 'cpu' time (a fixed amount of work, slowed "
        "by kernels that share the interpreter lock, as an ordinary kernel is).",
    )


TEST_SPIN = Operation(
    name="test.spin",
    path="test/spin",
    request_model=SpinCountRequest,
    response_model=NoisyCountResponse,
    guarantee="pure",
    mode="job",
)
TEST_SPIN_INLINE = Operation(
    name="test.spin_inline",
    path="test/spin-inline",
    request_model=SpinCountRequest,
    response_model=NoisyCountResponse,
    guarantee="pure",
    mode="inline",
)


def _busy(seconds: float, clock: Literal["wall", "cpu"] = "wall") -> None:
    """Pure-Python work that holds the GIL for ``seconds`` (a stand-in for an MCMC loop) of
    wall time, or of this thread's CPU time (``clock="cpu"``)."""
    now = time.monotonic if clock == "wall" else time.thread_time
    end = now() + seconds
    total = 0
    while now() < end:
        for value in range(2_000):
            total += value * value
    del total


def _validate(request: SpinCountRequest, metadata: DatasetMetadata) -> None:
    if request.predicate is not None:
        validate_expr(request.predicate, metadata, side="predicate")


def _cost(request: SpinCountRequest) -> Epsilon:
    return Epsilon.charge(request.epsilon)


def _releases(_request: SpinCountRequest, epsilon: Epsilon) -> tuple[ReleasePart, ...]:
    """One ``count.noisy`` release: ε²/2-zCDP (Bun & Steinke 2016, Prop. 1.4)."""
    return generic_release(epsilon)


def _run(
    columns: ColumnStore,
    request: SpinCountRequest,
    epsilon: Epsilon,
    _rng: np.random.Generator,
    progress: Progress,
) -> dict[str, Any]:
    """Kernel of ``test.spin``: a public-length loop, then ``count.noisy`` (§0.6), pure ε-DP.
    With ``spin_if_any`` the loop runs only if a row satisfies the predicate (its time is then
    data-dependent on purpose, within the public ``seconds``)."""
    rows = columns.all_rows() if request.predicate is None else columns.evaluate(request.predicate)
    spin = not request.spin_if_any or rows.count() > 0
    steps = request.steps
    for step in range(steps if spin else 0):
        _busy((request.seconds + request.unpriced_seconds) / steps, request.clock)
        progress((step + 1) / steps)
    if request.fail:
        raise RuntimeError("test.spin was asked to fail")
    release = count_release(columns, predicate=request.predicate, epsilon=epsilon.for_mechanism())
    return {"count": int(release.values[0]), "noise": release.noise()}


TEST_OPERATIONS: list[OperationSpec[Any, Any]] = [
    OperationSpec(
        operation=operation,
        summary="Test mode only: a slow job, then a noisy count.",
        dataset_kinds=frozenset({"views", "table", "transactions"}),
        validate=_validate,
        cost=_cost,
        releases=_releases,
        run=_run,
    )
    for operation in (TEST_SPIN, TEST_SPIN_INLINE)
]
