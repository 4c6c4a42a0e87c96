"""Background jobs: long operations that report progress and keep their charged result."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from dpmine.wire.common import Timestamp, WireModel

__all__ = ["FINAL_JOB_STATES", "JobInfo", "JobStatus", "SubmitJobRequest"]

#: ``cancelled``: stopped at the analyst's request; ``interrupted``: its worker process died.
#: Both keep the charge and release nothing, like ``failed``.
JobStatus = Literal["queued", "running", "done", "failed", "cancelled", "interrupted"]
#: The states a job never leaves.
FINAL_JOB_STATES: frozenset[str] = frozenset({"done", "failed", "cancelled", "interrupted"})


class JobInfo(WireModel):
    """State of a background job. ``result`` is the operation's response body once done."""

    id: str
    dataset_id: str
    operation: str
    status: JobStatus
    progress: float = Field(ge=0.0, le=1.0, description="Fraction of public work steps done.")
    message: str = ""
    result: dict[str, Any] | None = None
    created_at: Timestamp
    updated_at: Timestamp


class SubmitJobRequest(WireModel):
    """An operation by name (``dpmine.wire.OPERATIONS``) and its request body: the body of
    ``POST .../jobs`` as this client sends it. The server validates it as the operation's own
    job model (``CountNoisyJob``, ``FimTopkEmJob``, …; one per operation in its OpenAPI
    document), so ``request`` must be that operation's request."""

    operation: str = Field(min_length=1, max_length=64)
    request: dict[str, Any]
