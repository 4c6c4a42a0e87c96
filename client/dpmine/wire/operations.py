"""The operation table: every private operation's name, route, wire models, guarantee and mode.

One table read by both sides: the server's catalog (``dpmine_server.operations``) takes each
operation's path, models and guarantee from here and adds only its validation, pricing and
kernel; the client's ``Connection.run`` / ``Connection.submit`` find the route of a request here
and parse the answer (or a job's result) into the operation's response model. Jobs and estimates
name an operation by :attr:`Operation.name`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Generic, Literal, TypeVar

from dpmine.wire.budget import PlannedCall
from dpmine.wire.common import Guarantee, OperationRequest, WireModel, response_model_of
from dpmine.wire.counts import NoisyCountRequest, NoisyCountResponse
from dpmine.wire.itemsets import TopKItemsetsRequest, TopKItemsetsResponse
from dpmine.wire.redescriptions import (
    ComputeQualityRequest,
    ComputeQualityResponse,
    ExtendOneRequest,
    ExtendOneResponse,
    InitialPairsRequest,
    InitialPairsResponse,
)
from dpmine.wire.rule_lists import (
    PointEstimatesRequest,
    PointEstimatesResponse,
    RuleListAntecedentsRequest,
    RuleListAntecedentsResponse,
    SampleRuleListExactRequest,
    SampleRuleListExactResponse,
    SampleRuleListRequest,
    SampleRuleListResponse,
)
from dpmine.wire.trees import (
    LeafCountsRequest,
    LeafCountsResponse,
    TreeExpMechRequest,
    TreeExpMechResponse,
    TreeMCMCRequest,
    TreeMCMCResponse,
    TreePairMCMCRequest,
    TreePairMCMCResponse,
)

__all__ = [
    "BRL_ANTECEDENTS",
    "BRL_POINT_ESTIMATES",
    "BRL_SAMPLE_RULE_LIST",
    "BRL_SAMPLE_RULE_LIST_EXACT",
    "COUNT_NOISY",
    "FIM_TOPK_EM",
    "FIM_TOPK_LAPLACE",
    "OPERATIONS",
    "RED_COMPUTE_QUALITY",
    "SERENADE_EXTEND_ONE",
    "SERENADE_INITIAL_PAIRS",
    "TREE_EXPMECH",
    "TREE_LEAF_COUNTS",
    "TREE_MCMC",
    "TREE_PAIR_MCMC",
    "ExecutionMode",
    "Operation",
    "operation_for",
    "operations_for",
]

#: "inline": fast, computed while the request waits; "job": always computed by a job runner
#: (``POST .../<path>`` submits a job and waits for it, ``POST .../jobs`` returns at once).
ExecutionMode = Literal["inline", "job"]

RequestT = TypeVar("RequestT", bound=OperationRequest[Any])
ResponseT = TypeVar("ResponseT", bound=WireModel)


@dataclass(frozen=True, slots=True)
class Operation(Generic[RequestT, ResponseT]):
    """One private operation as seen on the wire.

    ``path`` is relative to ``/v1/datasets/{dataset_id}/``; ``guarantee`` is the privacy
    guarantee of every release (and of its receipt); ``mode`` is how the server executes it.
    """

    name: str
    path: str
    request_model: type[RequestT]
    response_model: type[ResponseT]
    guarantee: Guarantee
    mode: ExecutionMode = "inline"

    def __post_init__(self) -> None:
        declared = response_model_of(self.request_model)
        if declared is not self.response_model:
            raise TypeError(
                f"{self.name}: {self.request_model.__name__} is declared with "
                f"{declared.__name__}, not {self.response_model.__name__}"
            )

    def url(self, dataset_id: str) -> str:
        """The route of this operation on a dataset, e.g. ``/v1/datasets/toy/counts``."""
        return f"/v1/datasets/{dataset_id}/{self.path}"

    def plan(self, request: RequestT) -> PlannedCall:
        """The call of this operation with ``request``, for an estimate (``POST .../estimate``)."""
        return PlannedCall(operation=self.name, request=request.model_dump(mode="json"))

    def parse_response(self, body: object) -> ResponseT:
        """A response body (a route's answer or a finished job's ``result``), validated."""
        return self.response_model.model_validate(body)


COUNT_NOISY = Operation(
    name="count.noisy",
    path="counts",
    request_model=NoisyCountRequest,
    response_model=NoisyCountResponse,
    guarantee="pure",
)
RED_COMPUTE_QUALITY = Operation(
    name="red.compute_quality",
    path="redescriptions/quality",
    request_model=ComputeQualityRequest,
    response_model=ComputeQualityResponse,
    guarantee="pure",
)
SERENADE_INITIAL_PAIRS = Operation(
    name="serenade.initial_pairs",
    path="redescriptions/serenade/initial-pairs",
    request_model=InitialPairsRequest,
    response_model=InitialPairsResponse,
    guarantee="pure",
)
SERENADE_EXTEND_ONE = Operation(
    name="serenade.extend_one",
    path="redescriptions/serenade/extend",
    request_model=ExtendOneRequest,
    response_model=ExtendOneResponse,
    guarantee="pure",
)
FIM_TOPK_EM = Operation(
    name="fim.topk_em",
    path="itemsets/top-k-em",
    request_model=TopKItemsetsRequest,
    response_model=TopKItemsetsResponse,
    guarantee="pure",
)
FIM_TOPK_LAPLACE = Operation(
    name="fim.topk_laplace",
    path="itemsets/top-k-laplace",
    request_model=TopKItemsetsRequest,
    response_model=TopKItemsetsResponse,
    guarantee="pure",
)
TREE_EXPMECH = Operation(
    name="tree.expmech",
    path="trees/expmech",
    request_model=TreeExpMechRequest,
    response_model=TreeExpMechResponse,
    guarantee="pure",
    mode="job",
)
TREE_MCMC = Operation(
    name="tree.mcmc",
    path="trees/mcmc",
    request_model=TreeMCMCRequest,
    response_model=TreeMCMCResponse,
    guarantee="approximate",
    mode="job",
)
TREE_PAIR_MCMC = Operation(
    name="tree.pair_mcmc",
    path="trees/pair-mcmc",
    request_model=TreePairMCMCRequest,
    response_model=TreePairMCMCResponse,
    guarantee="approximate",
    mode="job",
)
TREE_LEAF_COUNTS = Operation(
    name="tree.leaf_counts",
    path="trees/leaf-counts",
    request_model=LeafCountsRequest,
    response_model=LeafCountsResponse,
    guarantee="pure",
    mode="job",
)

BRL_ANTECEDENTS = Operation(
    name="brl.antecedents",
    path="rule-lists/antecedents",
    request_model=RuleListAntecedentsRequest,
    response_model=RuleListAntecedentsResponse,
    guarantee="pure",
)
BRL_SAMPLE_RULE_LIST = Operation(
    name="brl.sample_rule_list",
    path="rule-lists/sample",
    request_model=SampleRuleListRequest,
    response_model=SampleRuleListResponse,
    guarantee="approximate",
    mode="job",
)
BRL_SAMPLE_RULE_LIST_EXACT = Operation(
    name="brl.sample_rule_list_exact",
    path="rule-lists/sample-exact",
    request_model=SampleRuleListExactRequest,
    response_model=SampleRuleListExactResponse,
    guarantee="pure",
    mode="job",
)
BRL_POINT_ESTIMATES = Operation(
    name="brl.point_estimates",
    path="rule-lists/point-estimates",
    request_model=PointEstimatesRequest,
    response_model=PointEstimatesResponse,
    guarantee="pure",
)

_ALL: tuple[Operation[Any, Any], ...] = (
    COUNT_NOISY,
    RED_COMPUTE_QUALITY,
    SERENADE_INITIAL_PAIRS,
    SERENADE_EXTEND_ONE,
    FIM_TOPK_EM,
    FIM_TOPK_LAPLACE,
    TREE_EXPMECH,
    TREE_MCMC,
    TREE_PAIR_MCMC,
    TREE_LEAF_COUNTS,
    BRL_ANTECEDENTS,
    BRL_SAMPLE_RULE_LIST,
    BRL_SAMPLE_RULE_LIST_EXACT,
    BRL_POINT_ESTIMATES,
)

#: Every operation by its public name (e.g. ``"count.noisy"``).
OPERATIONS: Mapping[str, Operation[Any, Any]] = MappingProxyType(
    {operation.name: operation for operation in _ALL}
)

_by_request: defaultdict[type[WireModel], list[Operation[Any, Any]]] = defaultdict(list)
for _operation in _ALL:
    _by_request[_operation.request_model].append(_operation)
_BY_REQUEST: Mapping[type[WireModel], tuple[Operation[Any, Any], ...]] = MappingProxyType(
    {model: tuple(found) for model, found in _by_request.items()}
)
del _by_request, _operation


def operations_for(request_model: type[WireModel]) -> tuple[Operation[Any, Any], ...]:
    """The operations taking ``request_model`` (several share ``TopKItemsetsRequest``)."""
    return _BY_REQUEST.get(request_model, ())


def operation_for(
    request: OperationRequest[ResponseT], name: str | None = None
) -> Operation[Any, ResponseT]:
    """The operation that answers ``request``: the only one taking its model, or the one called
    ``name`` (needed when several share the model, e.g. ``fim.topk_em`` / ``fim.topk_laplace``).
    Raises ValueError when there is none or the choice is ambiguous."""
    candidates = operations_for(type(request))
    if name is not None:
        chosen = [operation for operation in candidates if operation.name == name]
        if not chosen:
            raise ValueError(
                f"operation {name!r} does not take a {type(request).__name__}; "
                f"known: {', '.join(sorted(OPERATIONS))}"
            )
        candidates = tuple(chosen)
    if not candidates:
        raise ValueError(f"no operation takes a {type(request).__name__}")
    if len(candidates) > 1:
        names = ", ".join(operation.name for operation in candidates)
        raise ValueError(f"a {type(request).__name__} is taken by {names}: name the operation")
    found: Operation[Any, ResponseT] = candidates[0]
    return found
