"""Routes of the top-K itemset operations ``fim.topk_em`` and ``fim.topk_laplace`` (§4)."""

from dpmine_server.api.common import operation_router
from dpmine_server.operations import itemsets

router = operation_router(itemsets.OPERATIONS)
