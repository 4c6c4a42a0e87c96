"""dpmine: the analyst client of a differentially private data-mining server.

>>> import dpmine
>>> conn = dpmine.connect("http://127.0.0.1:8000", api_key="dpm_...")  # doctest: +SKIP
>>> mammals = conn.dataset("mammals")  # doctest: +SKIP
>>> mammals.count("[Alces alces]", epsilon=0.1).count  # doctest: +SKIP
"""

from dpmine.connection import AdminClient, Connection, DatasetHandle, Job, connect
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
    TransportError,
)
from dpmine.queries import format_query, format_redescription, parse_query, parse_redescription
from dpmine.rule_lists import DPBayesianRuleList, RuleList

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
    "TransportError",
    "connect",
    "format_query",
    "format_redescription",
    "parse_query",
    "parse_redescription",
]
