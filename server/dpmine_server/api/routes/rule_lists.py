"""Routes of the DP Bayesian rule-list operations ``brl.antecedents``, ``brl.sample_rule_list``
(a job) and ``brl.point_estimates`` (ALGORITHMS.md §5)."""

from dpmine_server.api.common import operation_router
from dpmine_server.operations import rule_lists

router = operation_router(rule_lists.OPERATIONS)
