"""Private operations: pure kernels over loaded columns, one module per algorithm family."""

from typing import Any

from dpmine_server.operations import counts, itemsets, redescriptions, rule_lists, trees
from dpmine_server.operations.base import OperationSpec

__all__ = ["CATALOG", "OperationSpec"]

#: Every operation by its public name (e.g. "count.noisy"); each spec's name, path, models,
#: guarantee and mode come from its entry of the wire table ``dpmine.wire.OPERATIONS``.
CATALOG: dict[str, OperationSpec[Any, Any]] = {
    spec.name: spec
    for module in (counts, itemsets, redescriptions, trees, rule_lists)
    for spec in module.OPERATIONS
}
