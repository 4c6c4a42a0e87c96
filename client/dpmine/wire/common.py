"""Shared wire types: the base model, budgets, receipts and the error body (DESIGN.md "Errors")."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, GetJsonSchemaHandler, Strict, model_validator
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

__all__ = [
    "MAX_EPSILON_PER_CALL",
    "AccountingUnit",
    "BudgetStatus",
    "Epsilon",
    "ErrorBody",
    "Guarantee",
    "GuaranteePolicy",
    "OperationRequest",
    "Receipt",
    "Timestamp",
    "WireModel",
    "ZcdpAmounts",
    "check_chain_length",
    "guarantee_allowed",
]

#: Largest epsilon a single call may request; larger values are almost surely a typo.
MAX_EPSILON_PER_CALL = 1000.0

Epsilon = Annotated[
    float,
    Field(
        gt=0,
        le=MAX_EPSILON_PER_CALL,
        allow_inf_nan=False,
        strict=True,  # a number, never true/false or a string
        description="Privacy cost of the call (pure epsilon-DP), charged before data is read.",
    ),
]

#: "pure": the release is epsilon-DP exactly; "approximate": DP only at MCMC convergence.
Guarantee = Literal["pure", "approximate"]

#: A dataset owner's choice of which guarantees the dataset serves (docs/operators.md,
#: "Guarantee policy"): "allow_approximate" serves every operation; "pure_only" refuses the
#: operations whose guarantee is "approximate" (the MCMC samplers), before any charge.
GuaranteePolicy = Literal["allow_approximate", "pure_only"]

#: How a dataset's ledger counts (issue #24): "pure" (epsilon, composed by adding epsilon) or
#: "zcdp" (rho-zero-concentrated DP, composed by adding rho; shown as the (epsilon, delta) it
#: implies). Chosen by the owner at registration; grants are in the same unit.
AccountingUnit = Literal["pure", "zcdp"]


def guarantee_allowed(guarantee: Guarantee, policy: GuaranteePolicy) -> bool:
    """Whether a dataset under ``policy`` serves an operation whose guarantee is ``guarantee``
    (both public: the operation's declaration and the owner's setting)."""
    return guarantee == "pure" or policy == "allow_approximate"


def check_chain_length(iterations: int, minimum: int) -> int:
    """``iterations`` of an MCMC operation if it reaches the operation's public ``minimum``,
    else a ValueError that says why (ALGORITHMS.md §0.1, §6 #16): the release is DP only once
    the chain is near its stationary law, and a chain of a few steps is still near its start.
    Checked by the wire model, so a short chain is refused before anything is charged."""
    if iterations < minimum:
        raise ValueError(
            f"iterations must be at least {minimum}, got {iterations}: an MCMC release is DP "
            "only once the chain has forgotten its start, and a few steps from a start whose "
            "every proposal is uphill on one dataset and rejectable on its neighbour leak far "
            "more than the charged epsilon (the public minimum of ALGORITHMS.md §6 #16)"
        )
    return iterations


#: A point in time: an ISO 8601 string on the wire (the one lax type of the strict models).
Timestamp = Annotated[datetime, Strict(False)]

#: Strict parsing of every wire model: no str → int/float/bool coercion, no float → int.
_STRICT = ConfigDict(strict=True)

#: More unknown fields than this are refused at once, before any field is validated: an object
#: with 200,000 unknown keys would otherwise cost seconds of error reporting.
MAX_UNKNOWN_FIELDS = 16


class WireModel(BaseModel):
    """Base of every HTTP model: immutable, strict about unknown fields and strict about types.

    Strict: ``"10"`` is not an int, ``"yes"`` not a bool, ``1.0`` not an int; an int is a valid
    float (JSON ``1`` for an epsilon). Timestamps (:data:`Timestamp`) take ISO 8601 strings.
    """

    # ``strict`` is merged in rather than passed to ConfigDict(...): pydantic's mypy plugin
    # would otherwise type every __init__ strictly (init_typed), unlike the project's setting.
    # A field with a default is always present in an answer: the answer's schema says so.
    model_config = (
        ConfigDict(frozen=True, extra="forbid", json_schema_serialization_defaults_required=True)
        | _STRICT
    )

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        """The model's JSON schema; as a request (validation mode), each default is stated in
        its field's description instead of a ``default`` keyword.

        Code generators read ``default`` as "always present" (openapi-typescript's default
        options make such a field required), which holds for answers and not for requests: a
        request may leave the field out. The field stays out of ``required`` either way.
        """
        json_schema = handler(core_schema)
        if handler.mode == "validation":
            _defaults_to_descriptions(handler.resolve_ref_schema(json_schema))
        return json_schema

    @model_validator(mode="before")
    @classmethod
    def _not_too_many_fields(cls, data: object) -> object:
        if isinstance(data, dict) and len(data) > len(cls.model_fields) + MAX_UNKNOWN_FIELDS:
            raise ValueError(
                f"{len(data)} fields given but {cls.__name__} has {len(cls.model_fields)}; "
                "send only the documented fields"
            )
        return data


def _defaults_to_descriptions(schema: JsonSchemaValue) -> None:
    """Move each property's ``default`` into its description (``"… Default: 0.1."``)."""
    for field_schema in schema.get("properties", {}).values():
        if "default" not in field_schema:
            continue
        default = json.dumps(field_schema.pop("default"), ensure_ascii=False)
        described = field_schema.get("description", "").rstrip()
        if described and not described.endswith("."):
            described += "."
        field_schema["description"] = f"{described} Default: {default}.".lstrip()


#: The response model of an operation (a type parameter of :class:`OperationRequest`).
ResponseT = TypeVar("ResponseT", bound=WireModel)


class OperationRequest(WireModel, Generic[ResponseT]):
    """Base of a private operation's request, parametrised by the operation's response model.

    ``class NoisyCountRequest(OperationRequest[NoisyCountResponse])`` is how the client's
    ``Connection.run(dataset_id, request)`` knows, statically, what it returns; the operation
    table (:mod:`dpmine.wire.operations`) checks that it names the same response model. The
    parameter adds no field: the JSON shape is the subclass's own.
    """


def response_model_of(request_model: type[OperationRequest[Any]]) -> type[WireModel]:
    """The response model a request model was declared with (``OperationRequest[Response]``)."""
    for base in request_model.__mro__:
        metadata = getattr(base, "__pydantic_generic_metadata__", None)
        if metadata and metadata["origin"] is OperationRequest and metadata["args"]:
            answer: type[WireModel] = metadata["args"][0]
            return answer
    raise TypeError(f"{request_model.__name__} does not subclass OperationRequest[Response]")


class ErrorBody(WireModel):
    """The one JSON shape of every error response."""

    error: str = Field(description="Class name of the error, e.g. BudgetExhausted.")
    detail: str = Field(description="What was wrong and what to do about it.")


class ZcdpAmounts(WireModel):
    """The exact rho amounts behind a zCDP dataset's figures, and the delta they are shown at.

    On a zCDP dataset the epsilon fields beside this object are for reading only: a total (cap,
    grant, spent, charged) is the epsilon it implies at ``delta`` (OpenDP's zCDP to (epsilon,
    delta) conversion); a *remaining* epsilon is the largest epsilon one generic epsilon-DP call
    could still be charged (sqrt(2 rho left)). The ledger itself counts only rho."""

    rho: float = Field(description="The amount in rho (exact decimal rounded to a float).")
    rho_exact: str = Field(description="The amount in rho as an exact decimal string.")
    rho_spent: float | None = Field(default=None, description="Rho spent of it, if it is a cap.")
    rho_remaining: float | None = Field(default=None, description="Rho left of it.")
    delta: float = Field(description="The delta the epsilon figures are given at.")
    delta_is_default: bool = Field(
        description="True when the owner gave the cap as rho and delta is the public default."
    )
    epsilon: float = Field(description="The epsilon that rho implies at delta.")
    epsilon_spent: float | None = Field(
        default=None, description="The epsilon that the rho spent implies at delta."
    )


class Receipt(WireModel):
    """Proof of the charge behind a release: the ledger entry and what is left afterwards."""

    ledger_entry_id: int
    dataset_id: str
    operation: str
    epsilon: float = Field(description="Charged epsilon (exact decimal rounded to a float).")
    epsilon_exact: str = Field(description="Charged epsilon as an exact decimal string.")
    guarantee: Guarantee
    remaining_epsilon: float = Field(
        description="What this analyst can still spend on the dataset after this call."
    )
    replayed: bool = Field(
        default=False, description="True when an Idempotency-Key retry returned the stored release."
    )
    created_at: Timestamp
    accounting: AccountingUnit = Field(
        default="pure", description='The unit the charge was made in ("zcdp": see ``zcdp``).'
    )
    zcdp: ZcdpAmounts | None = Field(
        default=None, description="On a zCDP dataset: the rho charged and what it implies."
    )


class BudgetStatus(WireModel):
    """An analyst's view of the budget of one dataset."""

    dataset_id: str
    grant_epsilon: float = Field(description="The analyst's allotment on this dataset.")
    grant_spent: float
    dataset_remaining: float = Field(description="What is left of the dataset cap for everyone.")
    remaining_epsilon: float = Field(description="min(grant left, dataset cap left).")
    accounting: AccountingUnit = Field(default="pure", description="The dataset's ledger unit.")
    zcdp: ZcdpAmounts | None = Field(
        default=None,
        description="On a zCDP dataset: the grant in rho, its spending and remaining "
        "(min of grant and cap), and the (epsilon, delta) they imply.",
    )
