"""Routes of the tree operations ``tree.expmech``, ``tree.mcmc``, ``tree.pair_mcmc`` and
``tree.leaf_counts`` (ALGORITHMS.md §3); all run as jobs in worker processes."""

from dpmine_server.api.common import operation_router
from dpmine_server.operations import trees

router = operation_router(trees.OPERATIONS)
