"""The tree miners keep each redescription once across rounds (ALGORITHMS.md §3.6 "drop
duplicates", §3.7): a stand-in dataset releases the same trees and leaf counts in every round,
so every round extracts the same redescriptions; only the first round's copies stay. Copies are
recognised by their canonical form (issue #21): trees that test the same attributes in another
order print the same rows in another order, and count as copies too."""

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


#: Two left trees with the same leaves in another order: [a, c, c] has leaves a∧c, a∧¬c, ¬a∧c,
#: ¬a∧¬c; [c, a, a] has c∧a, c∧¬a, ¬c∧a, ¬c∧¬a. Their partitions are the same rows permuted.
METADATA_AC = DatasetMetadata.model_validate(
    {
        "kind": "views",
        "n_max": 2000,
        "attributes": [
            {"type": "boolean", "name": "a", "view": "left"},
            {"type": "boolean", "name": "c", "view": "left"},
            {"type": "boolean", "name": "t", "view": "right"},
        ],
    }
)
A_THEN_C = DecisionTree(
    view="left",
    depth=2,
    splits=[TreeSplit(attribute="a"), TreeSplit(attribute="c"), TreeSplit(attribute="c")],
)
C_THEN_A = DecisionTree(
    view="left",
    depth=2,
    splits=[TreeSplit(attribute="c"), TreeSplit(attribute="a"), TreeSplit(attribute="a")],
)
#: Rows: left leaves of A_THEN_C and the rows outside; columns: t, ¬t and the rows outside.
A_THEN_C_PARTITION = [[400, 10, 3], [30, 200, 4], [20, 150, 6], [5, 180, 2], [7, 8, 9]]
C_THEN_A_PARTITION = [A_THEN_C_PARTITION[i] for i in (0, 2, 1, 3, 4)]


class _SameRowsOtherOrder:
    """Round 0 releases A_THEN_C, round 1 C_THEN_A, with the same rows in their leaves."""

    schema = METADATA_AC

    def __init__(self) -> None:
        self.rounds = [(A_THEN_C, A_THEN_C_PARTITION), (C_THEN_A, C_THEN_A_PARTITION)]
        self.partitions = {
            A_THEN_C.model_dump_json(): A_THEN_C_PARTITION,
            C_THEN_A.model_dump_json(): C_THEN_A_PARTITION,
        }

    def run(
        self, request: TreePairMCMCRequest | LeafCountsRequest
    ) -> TreePairMCMCResponse | LeafCountsResponse:
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
            left, _partition = self.rounds.pop(0)
            return TreePairMCMCResponse(left_tree=left, right_tree=RIGHT_T, receipt=receipt)
        partition = self.partitions[request.left_tree.model_dump_json()]
        return LeafCountsResponse(
            intersections=[row[:-1] for row in partition[:-1]],
            left_counts=[sum(row) for row in partition[:-1]],
            partition=partition,
            receipt=receipt,
        )


RIGHT_T = DecisionTree(view="right", depth=1, splits=[TreeSplit(attribute="t")])


def test_the_same_rows_printed_in_another_order_are_kept_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    miner = MCMCTreePair(in_trees=2, depth=2, seed=0, concurrent_iterations=1)
    monkeypatch.setattr(MCMCTreePair, "_check_budget", lambda *_: None)
    miner.mine(cast(DatasetHandle, _SameRowsOtherOrder()))
    assert [left.splits[0].attribute for left, _right in miner.trees_] == ["a", "c"]
    found = miner.redescriptions_
    assert found
    assert {red.round for red in found} == {0}, [(r.round, r.left, r.right) for r in found]
    # Round 1 alone finds the same number of results, printed in the other order.
    alone = MCMCTreePair(in_trees=1, depth=2, seed=0)
    monkeypatch.setattr(MCMCTreePair, "_check_budget", lambda *_: None)
    second = _SameRowsOtherOrder()
    second.rounds.pop(0)
    alone.mine(cast(DatasetHandle, second))
    assert len(alone.redescriptions_) == len(found)
    assert {r.left for r in alone.redescriptions_} != {r.left for r in found}
