"""Batches: several independent calls of inline operations in one request, charged as the sum of
their parts and padded once (``POST /v1/datasets/{id}/batch``; issue #23, item 2).

A batch is a list of :class:`~dpmine.wire.budget.PlannedCall` (the shape an estimate prices).
Every part keeps its own mechanism, randomness, ledger entry and receipt: the answer lists the
parts' releases in order, each exactly what the part's own route would have answered. The
charge is atomic (all parts or none), a part the server refuses refuses the whole batch before
anything is charged, and an ``Idempotency-Key`` covers the whole batch.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from dpmine.wire.budget import PlannedCall
from dpmine.wire.common import WireModel

__all__ = ["MAX_BATCH_PARTS", "BatchRequest", "BatchResponse"]

#: Most parts one batch holds (public): a Serenade round's checks of up to 20 initial pairs fit
#: three times over, and the padded budget of the largest batch stays a few seconds.
MAX_BATCH_PARTS = 64


class BatchRequest(WireModel):
    """Independent calls of inline operations, run in order in one request."""

    parts: list[PlannedCall] = Field(
        min_length=1,
        max_length=MAX_BATCH_PARTS,
        description=f"1 to {MAX_BATCH_PARTS} calls (operation name and its request body)",
    )


class BatchResponse(WireModel):
    """The parts' releases in the order of the request, each with its own receipt."""

    parts: list[dict[str, Any]]
