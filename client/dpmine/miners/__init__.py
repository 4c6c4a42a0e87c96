"""Client-side miners: orchestration only (no data, no mechanisms), one module per family."""

from dpmine.miners._base import BaseMiner, NotMinedError, Plan, RunStopped, RunStoppedWarning
from dpmine.miners.greedy import (
    MinedRedescription,
    NoSens,
    Preset,
    SerenadeCS,
    SerenadeES,
    SerenadeParameters,
    SerenadePlan,
    SerenadeSettings,
)
from dpmine.miners.itemsets import (
    AssociationRule,
    ItemsetPlan,
    MinedItemset,
    TopKItemsets,
    association_rules,
)
from dpmine.miners.layered import DPLayeredTrees
from dpmine.miners.trees import (
    AltExpM,
    AltMCMC,
    MCMCTreePair,
    MinedTreeRedescription,
    TreeMinerParameters,
)

__all__ = [
    "AltExpM",
    "AltMCMC",
    "AssociationRule",
    "BaseMiner",
    "DPLayeredTrees",
    "ItemsetPlan",
    "MCMCTreePair",
    "MinedItemset",
    "MinedRedescription",
    "MinedTreeRedescription",
    "NoSens",
    "NotMinedError",
    "Plan",
    "Preset",
    "RunStopped",
    "RunStoppedWarning",
    "SerenadeCS",
    "SerenadeES",
    "SerenadeParameters",
    "SerenadePlan",
    "SerenadeSettings",
    "TopKItemsets",
    "TreeMinerParameters",
    "association_rules",
]
