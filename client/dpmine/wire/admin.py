"""Owner-side wire models: principals, grants, datasets, ledger and audit exports."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from dpmine.wire.common import Guarantee, GuaranteePolicy, Timestamp, WireModel
from dpmine.wire.datasets import DatasetId, DatasetMetadata, DatasetSource

__all__ = [
    "AuditEventInfo",
    "CapRequest",
    "CreateDatasetRequest",
    "DatasetCap",
    "GrantInfo",
    "GrantRequest",
    "GuaranteePolicyRequest",
    "LedgerEntryInfo",
    "LedgerStatus",
    "PrincipalCreateRequest",
    "PrincipalCreated",
    "PrincipalInfo",
    "Role",
]

Role = Literal["owner", "analyst"]
LedgerStatus = Literal["reserved", "released", "failed", "interrupted"]
PrincipalName = Annotated[
    str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.@\-]*$")
]
_POLICY_HELP = (
    '"allow_approximate": every operation is served; "pure_only": operations whose guarantee is '
    '"approximate" (the MCMC samplers tree.mcmc, tree.pair_mcmc, brl.sample_rule_list) are '
    "refused before any charge."
)
CapEpsilon = Annotated[float, Field(gt=0, le=1_000_000, allow_inf_nan=False, strict=True)]


class PrincipalCreateRequest(WireModel):
    """Create an owner or an analyst."""

    name: PrincipalName
    role: Role


class PrincipalInfo(WireModel):
    """A principal as listed to owners (never its key)."""

    id: int
    name: str
    role: Role
    disabled: bool
    key_prefix: str = Field(description="First characters of the key, to recognise it.")
    created_at: Timestamp


class PrincipalCreated(WireModel):
    """A principal with its new API key. The key is shown once and stored only as a hash."""

    principal: PrincipalInfo
    api_key: str


class GrantRequest(WireModel):
    """Set an analyst's allotment on a dataset (it can never fall below what was spent)."""

    analyst: PrincipalName
    epsilon: CapEpsilon


class GrantInfo(WireModel):
    """An analyst's allotment on a dataset."""

    analyst: str
    dataset_id: str
    epsilon: float
    spent: float
    remaining: float


class CapRequest(WireModel):
    """Change a dataset's cap (it can never fall below what was spent on the dataset)."""

    epsilon_cap: CapEpsilon = Field(description="Dataset cap: the total epsilon ever spent on it.")


class GuaranteePolicyRequest(WireModel):
    """Change which guarantees a dataset serves (takes effect for the next call)."""

    guarantee_policy: GuaranteePolicy = Field(description=_POLICY_HELP)


class DatasetCap(WireModel):
    """A dataset's cap and what was spent of it (owners only; amounts exact as decimals too)."""

    dataset_id: str
    status: Literal["active", "retired"]
    epsilon_cap: float
    spent: float
    remaining: float
    epsilon_cap_exact: str
    spent_exact: str


class CreateDatasetRequest(WireModel):
    """Register a dataset from a server-side source (files already stored, or SQL)."""

    id: DatasetId
    name: str = Field(min_length=1, max_length=200)
    description: str = Field(default="", max_length=10_000)
    attribution: str = Field(default="", max_length=10_000)
    epsilon_cap: CapEpsilon = Field(description="Dataset cap: the total epsilon ever spent on it.")
    guarantee_policy: GuaranteePolicy = Field(default="allow_approximate", description=_POLICY_HELP)
    metadata: DatasetMetadata
    source: DatasetSource


class LedgerEntryInfo(WireModel):
    """One append-only ledger entry."""

    id: int
    dataset_id: str
    principal: str
    operation: str
    epsilon: float
    epsilon_exact: str
    guarantee: Guarantee
    status: LedgerStatus
    parameters: dict[str, Any]
    release: dict[str, Any] | None
    idempotency_key: str | None
    created_at: Timestamp
    completed_at: Timestamp | None


class AuditEventInfo(WireModel):
    """One audit-log event (owner actions, authentication failures, refusals)."""

    id: int
    at: Timestamp
    principal: str | None
    action: str
    target: str
    details: dict[str, Any]
