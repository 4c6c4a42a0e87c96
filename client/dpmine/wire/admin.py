"""Owner-side wire models: principals, grants, datasets, ledger and audit exports."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from dpmine.wire.common import (
    AccountingUnit,
    Guarantee,
    GuaranteePolicy,
    Timestamp,
    WireModel,
    ZcdpAmounts,
)
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
    '"approximate" (the MCMC samplers: tree.mcmc when its chain runs, tree.pair_mcmc, '
    "brl.sample_rule_list) are refused before any charge."
)
CapEpsilon = Annotated[float, Field(gt=0, le=1_000_000, allow_inf_nan=False, strict=True)]
CapDelta = Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False, strict=True)]
_ACCOUNTING_HELP = (
    '"pure" (default): the ledger adds epsilon. "zcdp": the ledger adds rho (zero-concentrated '
    "DP), which composes many small releases far more tightly; give the cap as epsilon_cap with "
    "cap_delta (stored as the largest rho whose conversion rho + 2 sqrt(rho ln(1/delta)) stays "
    "within epsilon_cap) or as cap_rho."
)


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
    epsilon: CapEpsilon | None = Field(default=None, description="On a pure dataset.")
    rho: CapEpsilon | None = Field(default=None, description="On a zCDP dataset.")

    @model_validator(mode="after")
    def _one_amount(self) -> GrantRequest:
        if (self.epsilon is None) == (self.rho is None):
            raise ValueError(
                "give the grant as epsilon (pure datasets) or as rho (zCDP datasets), not both"
            )
        return self


class GrantInfo(WireModel):
    """An analyst's allotment on a dataset."""

    analyst: str
    dataset_id: str
    epsilon: float
    spent: float
    remaining: float
    accounting: AccountingUnit = "pure"
    zcdp: ZcdpAmounts | None = None


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
    accounting: AccountingUnit = Field(default="pure", description=_ACCOUNTING_HELP)
    zcdp: ZcdpAmounts | None = Field(
        default=None,
        description="On a zCDP dataset: the exact rho cap and spending; the epsilon fields "
        "then give what they imply at delta (the *_exact ones are that epsilon's decimal).",
    )


class CreateDatasetRequest(WireModel):
    """Register a dataset from a server-side source (files already stored, or SQL)."""

    id: DatasetId
    name: str = Field(min_length=1, max_length=200)
    description: str = Field(default="", max_length=10_000)
    attribution: str = Field(default="", max_length=10_000)
    epsilon_cap: CapEpsilon | None = Field(
        default=None,
        description="Dataset cap: the total epsilon ever spent on it (with cap_delta on a zCDP "
        "dataset).",
    )
    guarantee_policy: GuaranteePolicy = Field(default="allow_approximate", description=_POLICY_HELP)
    accounting: AccountingUnit = Field(default="pure", description=_ACCOUNTING_HELP)
    cap_delta: CapDelta | None = Field(
        default=None, description="zCDP only: the delta of the (epsilon_cap, delta) cap."
    )
    cap_rho: CapEpsilon | None = Field(
        default=None, description="zCDP only: the cap given as rho directly."
    )
    metadata: DatasetMetadata
    source: DatasetSource

    @model_validator(mode="after")
    def _one_cap(self) -> CreateDatasetRequest:
        """Exactly one cap in the accounting unit's forms, before anything is stored."""
        if self.accounting == "pure":
            if self.epsilon_cap is None or self.cap_delta is not None or self.cap_rho is not None:
                raise ValueError(
                    'a "pure" dataset takes epsilon_cap only (cap_delta and cap_rho are for '
                    'accounting "zcdp")'
                )
        elif self.cap_rho is not None:
            if self.epsilon_cap is not None or self.cap_delta is not None:
                raise ValueError("give a zCDP cap as cap_rho or as epsilon_cap with cap_delta")
        elif self.epsilon_cap is None or self.cap_delta is None:
            raise ValueError(
                "a zCDP dataset needs its cap as cap_rho, or as epsilon_cap with cap_delta "
                "(0 < delta < 1, e.g. 1e-6)"
            )
        return self


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
    accounting: AccountingUnit = Field(
        default="pure",
        description='The dataset\'s ledger unit. On "zcdp" the charge is rho_exact, and epsilon '
        "is what that rho implies at delta (for reading).",
    )
    rho_exact: str | None = None
    delta: float | None = None


class AuditEventInfo(WireModel):
    """One audit-log event (owner actions, authentication failures, refusals)."""

    id: int
    at: Timestamp
    principal: str | None
    action: str
    target: str
    details: dict[str, Any]
