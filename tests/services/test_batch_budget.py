"""The padding budget of a batch (services/timing.py, ``TimingPolicy.batch_budget``; issue #23,
item 2): one base, plus each part's own priced work and bookkeeping allowance."""

from __future__ import annotations

from typing import Any

import pytest

from dpmine.wire import ExtendOneRequest
from dpmine_server.operations.redescriptions import (
    _extend_coefficient,
    batch_shared_proposals,
    rejection_plan,
)
from dpmine_server.operations.serenade import joint_rejection_seconds, rejection_proposals
from dpmine_server.services.timing import (
    BATCH_PART_SECONDS,
    TimingPolicy,
    operation_work,
)
from support.datasets import REGIONS, mushroom_metadata, table_metadata

POLICY = TimingPolicy(enabled=True, grid=0.05, base=0.1, scale=2.0, fail_closed=True)
QUALITY: dict[str, Any] = {
    "redescription": {
        "left": {"kind": "cat", "attribute": "cap-shape", "category": "x"},
        "right": {"kind": "cat", "attribute": "odor", "category": "n"},
    },
    "epsilon": 0.1,
}
COUNT: dict[str, Any] = {"predicate": None, "epsilon": 0.1}


def test_a_batch_budget_adds_the_parts_work_to_one_base() -> None:
    metadata = mushroom_metadata()
    parts = [
        ("red.compute_quality", QUALITY),
        ("count.noisy", COUNT),
        ("red.compute_quality", QUALITY),
    ]
    single = [POLICY.budget(operation, request, metadata) for operation, request in parts]
    batch = POLICY.batch_budget(parts, metadata)
    # Each part's own budget is base + its work: the batch pays the base once.
    expected = POLICY.base + sum(b - POLICY.base + BATCH_PART_SECONDS for b in single)
    assert batch == pytest.approx(expected)
    assert batch >= max(single)
    assert batch < sum(single)
    # More parts, more budget: the batch's budget grows with every part's work.
    assert POLICY.batch_budget([*parts, parts[0]], metadata) == pytest.approx(
        batch + single[0] - POLICY.base + BATCH_PART_SECONDS
    )


def test_no_padding_no_budget() -> None:
    off = TimingPolicy(enabled=False, grid=0.05, base=0.1, scale=2.0)
    assert off.batch_budget([("count.noisy", COUNT)], mushroom_metadata()) == 0.0


def _extension(epsilon: float) -> dict[str, Any]:
    """One CS extension draw on the generated table: its numeric attributes (age, score) are
    continuous families, sampled by rejection while c ≤ 8 (small ε)."""
    pair = {
        "left": {"kind": "bool", "attribute": "smoker"},
        "right": {"kind": "cat", "attribute": "region", "category": REGIONS[0]},
    }
    return {"mode": "cs", "collection": [pair], "epsilon": epsilon, "quality": {"x0": 100.0}}


def test_rejection_draws_of_several_parts_are_priced_by_one_joint_cap() -> None:
    metadata = table_metadata()
    parts = [("serenade.extend_one", _extension(0.05))] * 6 + [("count.noisy", COUNT)]
    shared = batch_shared_proposals(parts, metadata)
    assert shared is not None
    assert shared.parts == frozenset(range(6))
    single = rejection_proposals(_extend_coefficient(ExtendOneRequest(**parts[0][1]), metadata), 1)
    assert shared.separate == 6 * single
    assert 0 < shared.cap < shared.separate / 2
    per_part = sum(
        BATCH_PART_SECONDS + POLICY.scale * operation_work(operation, request, metadata)
        for operation, request in parts
    )
    # Each extension's own proposals are replaced by the joint cap's, priced once.
    plans = [rejection_plan(operation, request, metadata) for operation, request in parts[:6]]
    assert all(plan is not None for plan in plans)
    own = sum(plan.seconds() for plan in plans if plan is not None)
    joint = joint_rejection_seconds([plan for plan in plans if plan is not None], shared.cap)
    saved = POLICY.scale * (own - joint)
    assert saved > 0
    assert POLICY.batch_budget(parts, metadata) == pytest.approx(POLICY.base + per_part - saved)
    assert POLICY.batch_budget(parts, metadata) < POLICY.base + per_part


def test_a_lone_rejection_draw_or_enumerated_thresholds_keep_their_own_cap() -> None:
    metadata = table_metadata()
    alone = [("serenade.extend_one", _extension(0.05)), ("count.noisy", COUNT)]
    large = [("serenade.extend_one", _extension(50.0))] * 3  # c > 8: no rejection
    for parts in (alone, large):
        assert batch_shared_proposals(parts, metadata) is None
        expected = POLICY.base + sum(
            BATCH_PART_SECONDS + POLICY.scale * operation_work(operation, request, metadata)
            for operation, request in parts
        )
        assert POLICY.batch_budget(parts, metadata) == pytest.approx(expected)
