"""dpmine: the analyst client of a differentially private data-mining server.

>>> import dpmine
>>> conn = dpmine.connect("http://127.0.0.1:8000", api_key="dpm_...")  # doctest: +SKIP
>>> mammals = conn.dataset("mammals")  # doctest: +SKIP
>>> mammals.count("[Alces alces]", epsilon=0.1).count  # doctest: +SKIP
"""

import importlib as _importlib
import typing as _typing

from dpmine.errors import (
    AuthenticationError,
    BudgetExhaustedError,
    ChargeKeptNoResultError,
    ConflictError,
    DPMineError,
    IdempotencyConflictError,
    InvalidRequestError,
    JobCancelledError,
    NotFoundError,
    OperationFailedError,
    OverloadedError,
    ParameterError,
    PayloadTooLargeError,
    PermissionDeniedError,
    QuerySyntaxError,
    RateLimitedError,
    RequestInProgressError,
    ServerError,
    TooManyJobsError,
    TransportError,
)
from dpmine.queries import format_query, format_redescription, parse_query, parse_redescription

if _typing.TYPE_CHECKING:
    from dpmine.connection import AdminClient, Connection, DatasetHandle, Job, connect
    from dpmine.rule_lists import DPBayesianRuleList, RuleList

#: Names imported on first use (PEP 562), so that ``import dpmine.wire`` (the server's, and
#: every job worker's, only use of this package) does not load httpx, rich and the miners.
_LAZY = {
    "AdminClient": "dpmine.connection",
    "Connection": "dpmine.connection",
    "DatasetHandle": "dpmine.connection",
    "Job": "dpmine.connection",
    "connect": "dpmine.connection",
    "DPBayesianRuleList": "dpmine.rule_lists",
    "RuleList": "dpmine.rule_lists",
}

__version__ = "0.1.0"

__all__ = [
    "AdminClient",
    "AuthenticationError",
    "BudgetExhaustedError",
    "ChargeKeptNoResultError",
    "ConflictError",
    "Connection",
    "DPBayesianRuleList",
    "DPMineError",
    "DatasetHandle",
    "IdempotencyConflictError",
    "InvalidRequestError",
    "Job",
    "JobCancelledError",
    "NotFoundError",
    "OperationFailedError",
    "OverloadedError",
    "ParameterError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "QuerySyntaxError",
    "RateLimitedError",
    "RequestInProgressError",
    "RuleList",
    "ServerError",
    "TooManyJobsError",
    "TransportError",
    "connect",
    "format_query",
    "format_redescription",
    "parse_query",
    "parse_redescription",
]


def __getattr__(name: str) -> _typing.Any:
    """The names of :data:`_LAZY`, imported when first asked for."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'dpmine' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The module's names, the lazy ones included (for completion in a shell)."""
    return sorted({*globals(), *_LAZY})
