"""The tree miners keep each redescription once across rounds (ALGORITHMS.md §3.6 "drop
duplicates", §3.7): a stand-in dataset releases the same trees and leaf counts in every round,
so every round extracts the same redescriptions; only the first round's copies stay."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import cast

import pytest

from dpmine.connection import DatasetHandle
from dpmine.miners import AltMCMC, MCMCTreePair
from dpmine.miners.trees import _TreeMinerBase
from dpmine.wire import (
    DatasetMetadata,
    DecisionTree,
    LeafCountsRequest,
    LeafCountsResponse,
    Receipt,
    TreeMCMCRequest,
    TreeMCMCResponse,
    TreePairMCMCRequest,
    TreePairMCMCResponse,
    TreeSplit,
)

METADATA = DatasetMetadata.model_validate(
    {
        "kind": "views",
        "n_max": 2000,
        "attributes": [
            {"type": "boolean", "name": "a", "view": "left"},
            {"type": "boolean", "name": "t", "view": "right"},
        ],
    }
)
LEFT = DecisionTree(view="left", depth=1, splits=[TreeSplit(attribute="a")])
RIGHT = DecisionTree(view="right", depth=1, splits=[TreeSplit(attribute="t")])
#: Leaf 0 of each tree mostly meets leaf 0 of the other, leaf 1 leaf 1: J ≈ 0.95 for both.
INTERSECTIONS = [[400, 10], [10, 500]]
LEFT_COUNTS = [410, 510]


class _SameEveryRound:
    """Answers every call with the same release (a stand-in for the server)."""

    schema = METADATA

    def run(
        self, request: TreePairMCMCRequest | TreeMCMCRequest | LeafCountsRequest
    ) -> TreePairMCMCResponse | TreeMCMCResponse | LeafCountsResponse:
        receipt = Receipt(
            ledger_entry_id=1,
            dataset_id="d",
            operation="tree",
            epsilon=request.epsilon,
            epsilon_exact=str(request.epsilon),
            guarantee="pure",
            remaining_epsilon=1.0,
            created_at=datetime.now(UTC),
        )
        if isinstance(request, TreePairMCMCRequest):
            return TreePairMCMCResponse(left_tree=LEFT, right_tree=RIGHT, receipt=receipt)
        if isinstance(request, TreeMCMCRequest):
            tree = LEFT if request.view == "left" else RIGHT
            return TreeMCMCResponse(tree=tree, receipt=receipt)
        return LeafCountsResponse(
            intersections=INTERSECTIONS, left_counts=LEFT_COUNTS, receipt=receipt
        )


@pytest.mark.parametrize(
    "miner",
    [
        MCMCTreePair(in_trees=3, depth=1, seed=0),
        AltMCMC(in_trees=2, rm_iterations=2, depth=1, seed=0),
    ],
    ids=["tree-pair", "alt-mcmc"],
)
def test_a_redescription_found_in_several_rounds_is_kept_once(
    miner: _TreeMinerBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(type(miner), "_check_budget", lambda *_: None)  # no budget to price
    miner.mine(cast(DatasetHandle, _SameEveryRound()))
    assert len(miner.trees_) >= 3  # every round released the same pair
    found = miner.redescriptions_
    assert found, "the counts pair up leaf 0 with leaf 0 and leaf 1 with leaf 1"
    pairs = [(red.left, red.right) for red in found]
    assert len(pairs) == len(set(pairs))
    assert {red.round for red in found} == {0}  # the first release of each pair is kept
