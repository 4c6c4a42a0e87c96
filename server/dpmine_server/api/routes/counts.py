"""Route of ``count.noisy`` (ALGORITHMS.md §0.6)."""

from dpmine_server.api.common import operation_router
from dpmine_server.operations import counts

router = operation_router(counts.OPERATIONS)
