"""The padding budget of a batch (services/timing.py, ``TimingPolicy.batch_budget``; issue #23,
item 2): one base, plus each part's own priced work and bookkeeping allowance."""

from __future__ import annotations

from typing import Any

import pytest

from dpmine_server.services.timing import BATCH_PART_SECONDS, TimingPolicy
from support.datasets import mushroom_metadata

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
