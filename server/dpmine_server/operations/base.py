"""What every private operation declares: its wire models, validation, cost and kernel.

The executor (:mod:`dpmine_server.services.executor`) runs every operation the same way:
validate against public metadata → price → charge the ledger → load columns → run the kernel →
store and return the release. A family module lists its operations in ``OPERATIONS``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import numpy as np

from dpmine.wire import (
    DatasetKind,
    DatasetMetadata,
    ExecutionMode,
    Guarantee,
    Operation,
    OperationRequest,
    WireModel,
)
from dpmine_server.data.columns import ColumnStore
from dpmine_server.dp.budget import AccountingUnit, Epsilon, LedgerAmount
from dpmine_server.dp.zcdp import ReleasePart, rho_of_parts

__all__ = ["PROGRESS_STEPS", "OperationSpec", "Progress", "no_progress", "progress_checkpoints"]

RequestT = TypeVar("RequestT", bound=OperationRequest[Any])
ResponseT = TypeVar("ResponseT", bound=WireModel)


class Progress(Protocol):
    """Reports the fraction of an operation's *public* work steps done (never data-dependent)."""

    def __call__(self, fraction: float, message: str = "") -> None: ...


def no_progress(fraction: float, message: str = "") -> None:
    """A progress sink that ignores reports (synchronous requests)."""
    del fraction, message


#: Iterative kernels (the MCMC samplers) report progress after every 1 % of their public steps.
PROGRESS_STEPS = 100


def progress_checkpoints(iterations: int) -> Iterator[int]:
    """The step counts after which an iterative kernel reports progress: every 1 % of the public
    ``iterations``, and the last step."""
    every = max(1, iterations // PROGRESS_STEPS)
    yield from range(every, iterations, every)
    yield iterations


@dataclass(frozen=True, slots=True)
class OperationSpec(Generic[RequestT, ResponseT]):
    """One private operation: its wire description (``operation``, from the wire table
    :data:`dpmine.wire.OPERATIONS`: name, path, models, guarantee, execution mode) and what only
    the server knows.

    * ``validate(request, metadata)`` raises ValueError with a message saying what to fix; it
      sees only public metadata and runs before anything is charged.
    * ``cost(request)`` is the exact epsilon, from public parameters only.
    * ``guarantee_of(request, metadata)``, when given, is the guarantee of this request's
      release, a public function of the validated request and the public metadata (e.g.
      ``tree.mcmc``: "pure" when its exact sampler runs); otherwise every release has the
      operation's, ``operation.guarantee`` (:meth:`request_guarantee`).
    * ``releases(request, epsilon)`` says what the kernel releases with the charged ``epsilon``:
      parts of one kind each (:class:`~dpmine_server.dp.zcdp.ReleasePart`: ``bounded_range``
      for exponential-mechanism draws, ``pure`` for any other ε-DP release), whose ε add up to
      at most the charge, from public parameters only. On a zCDP dataset the ledger charges
      the sum of their ρ (:meth:`charge`; issue #24).
    * ``run(columns, request, epsilon, rng, progress)`` is the kernel; ``epsilon`` is the charged
      amount (use ``epsilon.for_mechanism()`` for noise scales). It returns the response fields
      except ``receipt``. Kernels keep no state between calls: each call is a fresh release
      whose only cost is its own charge. ``progress`` receives public progress reports (a job's;
      ignored when answered inline).
    """

    operation: Operation[RequestT, ResponseT]
    summary: str
    dataset_kinds: frozenset[DatasetKind]
    validate: Callable[[RequestT, DatasetMetadata], None]
    cost: Callable[[RequestT], Epsilon]
    releases: Callable[[RequestT, Epsilon], tuple[ReleasePart, ...]]
    run: Callable[[ColumnStore, RequestT, Epsilon, np.random.Generator, Progress], dict[str, Any]]
    guarantee_of: Callable[[RequestT, DatasetMetadata], Guarantee] | None = None

    def request_guarantee(self, request: RequestT, metadata: DatasetMetadata) -> Guarantee:
        """The guarantee of ``request``'s release (a validated request; public inputs only)."""
        if self.guarantee_of is None:
            return self.operation.guarantee
        return self.guarantee_of(request, metadata)

    def charge(self, request: RequestT, unit: AccountingUnit) -> tuple[Epsilon, LedgerAmount]:
        """(the ε the kernel runs at, the amount the ledger debits in ``unit``): the same ε on a
        pure dataset, the ρ of :attr:`releases` on a zCDP one. Public parameters only."""
        epsilon = self.cost(request)
        if unit == "pure":
            return epsilon, epsilon
        return epsilon, rho_of_parts(self.releases(request, epsilon))

    @property
    def name(self) -> str:
        """The public name, e.g. ``count.noisy``."""
        return self.operation.name

    @property
    def path(self) -> str:
        """The route below ``/v1/datasets/{dataset_id}/``."""
        return self.operation.path

    @property
    def request_model(self) -> type[RequestT]:
        """The wire request model."""
        return self.operation.request_model

    @property
    def response_model(self) -> type[ResponseT]:
        """The wire response model."""
        return self.operation.response_model

    @property
    def guarantee(self) -> Guarantee:
        """The operation's declared guarantee (its weakest release; see
        :meth:`request_guarantee` for one request's)."""
        return self.operation.guarantee

    @property
    def mode(self) -> ExecutionMode:
        """``inline`` (answered in the request) or ``job`` (always run by the job runner)."""
        return self.operation.mode
