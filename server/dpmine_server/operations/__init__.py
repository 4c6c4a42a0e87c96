"""Private operations: pure kernels over loaded columns, one module per algorithm family."""

from dpmine_server.operations import counts, itemsets, redescriptions
from dpmine_server.operations.base import OperationSpec

__all__ = ["CATALOG", "OperationSpec"]

#: Every operation by its public name (e.g. "count.noisy").
CATALOG: dict[str, OperationSpec] = {
    spec.name: spec for module in (counts, itemsets, redescriptions) for spec in module.OPERATIONS
}
