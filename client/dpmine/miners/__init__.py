"""Client-side miners: orchestration only (no data, no mechanisms), one module per family."""

from dpmine.miners._base import BaseMiner, NotMinedError, Plan
from dpmine.miners.greedy import (
    MinedRedescription,
    NoSens,
    SerenadeCS,
    SerenadeES,
    SerenadeParameters,
)
from dpmine.miners.itemsets import AssociationRule, MinedItemset, TopKItemsets, association_rules

__all__ = [
    "AssociationRule",
    "BaseMiner",
    "MinedItemset",
    "MinedRedescription",
    "NoSens",
    "NotMinedError",
    "Plan",
    "SerenadeCS",
    "SerenadeES",
    "SerenadeParameters",
    "TopKItemsets",
    "association_rules",
]
