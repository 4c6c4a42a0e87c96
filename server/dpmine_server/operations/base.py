"""What every private operation declares: its wire models, validation, cost and kernel.

The executor (:mod:`dpmine_server.services.executor`) runs every operation the same way:
validate against public metadata → price → charge the ledger → load columns → run the kernel →
store and return the release. A family module lists its operations in ``OPERATIONS``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from pydantic import BaseModel

from dpmine.wire import DatasetKind, DatasetMetadata, Guarantee
from dpmine_server.data.columns import ColumnStore
from dpmine_server.dp.budget import Epsilon

__all__ = ["OperationSpec", "Progress", "no_progress"]


class Progress(Protocol):
    """Reports the fraction of an operation's *public* work steps done (never data-dependent)."""

    def __call__(self, fraction: float, message: str = "") -> None: ...


def no_progress(fraction: float, message: str = "") -> None:
    """A progress sink that ignores reports (synchronous requests)."""
    del fraction, message


@dataclass(frozen=True, slots=True)
class OperationSpec:
    """One private operation.

    * ``validate(request, metadata)`` raises ValueError with a message saying what to fix; it
      sees only public metadata and runs before anything is charged.
    * ``cost(request)`` is the exact epsilon and guarantee, from public parameters only.
    * ``run(columns, request, epsilon, rng, progress)`` is the kernel; ``epsilon`` is the charged
      amount (use ``epsilon.for_mechanism()`` for noise scales). It returns the response fields
      except ``receipt``. Kernels keep no state between calls: each call is a fresh release
      whose only cost is its own charge.
    """

    name: str
    path: str
    summary: str
    request_model: type[BaseModel]
    response_model: type[BaseModel]
    dataset_kinds: frozenset[DatasetKind]
    validate: Callable[[Any, DatasetMetadata], None]
    cost: Callable[[Any], tuple[Epsilon, Guarantee]]
    run: Callable[[ColumnStore, Any, Epsilon, np.random.Generator, Progress], dict[str, Any]]
