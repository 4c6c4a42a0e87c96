"""The tree miners run their independent iterations (one per drawn attribute, ALGORITHMS.md
§3.7) at the same time, up to ``concurrent_iterations``, and read the releases in the order of
the draws. A stand-in dataset records the calls: the releases themselves do not matter here (the
end-to-end tests run the miners against a live server)."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import cast

import pytest

from dpmine.connection import DatasetHandle
from dpmine.errors import DPMineError
from dpmine.miners import AltMCMC, MCMCTreePair
from dpmine.wire import (
    MIN_TREE_ITERATIONS,
    DatasetMetadata,
    DecisionTree,
    LeafCountsRequest,
    LeafCountsResponse,
    Receipt,
    TreePairMCMCRequest,
    TreePairMCMCResponse,
    TreeSplit,
)

METADATA = DatasetMetadata.model_validate(
    {
        "kind": "views",
        "n_max": 2000,
        "attributes": [
            *({"type": "boolean", "name": f"l{i}", "view": "left"} for i in range(4)),
            *({"type": "boolean", "name": f"r{i}", "view": "right"} for i in range(4)),
        ],
    }
)
LEFT = DecisionTree(view="left", depth=1, splits=[TreeSplit(attribute="l0")])
RIGHT = DecisionTree(view="right", depth=1, splits=[TreeSplit(attribute="r0")])
IN_TREES = 4


class _Recording:
    """Answers tree-pair and leaf-count calls, records them, and can fail or hold some."""

    schema = METADATA

    def __init__(
        self,
        *,
        failing: str | None = None,
        barrier: threading.Barrier | None = None,
        slow: str | None = None,
    ) -> None:
        self.failing, self.barrier, self.slow = failing, barrier, slow
        self.calls: list[str] = []
        self._lock = threading.Lock()

    def run(
        self, request: TreePairMCMCRequest | LeafCountsRequest
    ) -> TreePairMCMCResponse | LeafCountsResponse:
        name = request.attribute if isinstance(request, TreePairMCMCRequest) else "counts"
        with self._lock:
            self.calls.append(name)
        if self.barrier is not None and name != "counts":
            self.barrier.wait()  # times out unless every iteration's first call is in flight
        if name == self.failing:
            raise DPMineError(f"refused {name}")
        if name == self.slow:
            time.sleep(0.3)  # this iteration finishes last
        receipt = Receipt(
            ledger_entry_id=len(self.calls),
            dataset_id=name,
            operation="tree.pair_mcmc" if name != "counts" else "tree.leaf_counts",
            epsilon=request.epsilon,
            epsilon_exact=str(request.epsilon),
            guarantee="approximate" if name != "counts" else "pure",
            remaining_epsilon=1.0,
            created_at=datetime.now(UTC),
        )
        if isinstance(request, TreePairMCMCRequest):
            return TreePairMCMCResponse(left_tree=LEFT, right_tree=RIGHT, receipt=receipt)
        partition = [[400, 10, 5], [10, 500, 5], [3, 2, 1]]
        return LeafCountsResponse(
            intersections=[row[:-1] for row in partition[:-1]],
            left_counts=[sum(row) for row in partition[:-1]],
            partition=partition,
            receipt=receipt,
        )


def _miner(concurrent: int, monkeypatch: pytest.MonkeyPatch) -> MCMCTreePair:
    miner = MCMCTreePair(
        in_trees=IN_TREES, depth=1, seed=5, concurrent_iterations=concurrent, p_max=1.0
    )
    monkeypatch.setattr(MCMCTreePair, "_check_budget", lambda *_: None)  # no server to price
    return miner


def _draws(miner: MCMCTreePair) -> list[str]:
    return miner._attribute_draws(METADATA, IN_TREES)


def test_iterations_overlap_and_are_read_in_the_order_of_the_draws(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    miner = _miner(IN_TREES, monkeypatch)
    draws = _draws(miner)
    dataset = _Recording(barrier=threading.Barrier(IN_TREES, timeout=10), slow=draws[0])
    miner.mine(cast(DatasetHandle, dataset))
    receipts = miner.receipts_
    assert [r.operation for r in receipts] == ["tree.pair_mcmc", "tree.leaf_counts"] * IN_TREES
    # The first draw's iteration finished last, yet its release comes first.
    assert [r.dataset_id for r in receipts[::2]] == draws
    assert dataset.calls[-1] == "counts"
    assert len(miner.trees_) == IN_TREES
    assert {red.round for red in miner.redescriptions_} == {0}  # the first pair's copies stay


def test_one_at_a_time_stops_at_the_first_failure_and_keeps_the_receipts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    miner = _miner(1, monkeypatch)
    draws = _draws(miner)
    assert len(set(draws[:2])) == 2, draws  # the seed draws two different attributes first
    dataset = _Recording(failing=draws[1])
    with pytest.raises(DPMineError, match=f"refused {draws[1]}"):
        miner.mine(cast(DatasetHandle, dataset))
    assert dataset.calls == [draws[0], "counts", draws[1]]  # no iteration after the failure
    assert [r.dataset_id for r in miner.receipts_] == [draws[0], "counts"]
    assert len(miner.trees_) == 1


def test_a_failure_among_overlapping_iterations_keeps_every_charged_receipt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    miner = _miner(IN_TREES, monkeypatch)
    draws = _draws(miner)
    failing = draws[1]
    dataset = _Recording(failing=failing, barrier=threading.Barrier(IN_TREES, timeout=10))
    with pytest.raises(DPMineError, match=f"refused {failing}"):
        miner.mine(cast(DatasetHandle, dataset))
    others = [draw for draw in draws if draw != failing]
    # Every iteration had started (the barrier); the others ran to their end, and their two
    # charges each are on record.
    assert [r.dataset_id for r in miner.receipts_ if r.dataset_id != "counts"] == others
    assert sum(r.dataset_id == "counts" for r in miner.receipts_) == len(others)


def test_concurrent_iterations_must_be_a_whole_number() -> None:
    with pytest.raises(ValueError, match="concurrent_iterations must be a whole number"):
        MCMCTreePair(concurrent_iterations=0)._check_params()


def test_mcmc_steps_reach_the_public_minimum() -> None:
    """Not an iteration of the miner but a sampler's steps (§3.4, §3.5): the defaults pass, and
    fewer than the server's public minimum are refused before any call."""
    for miner in (AltMCMC, MCMCTreePair):
        assert miner().iterations >= MIN_TREE_ITERATIONS
        miner(iterations=MIN_TREE_ITERATIONS)._check_params()
        with pytest.raises(ValueError, match="iterations must be a whole number of at least 1000"):
            miner(iterations=MIN_TREE_ITERATIONS - 1)._check_params()
