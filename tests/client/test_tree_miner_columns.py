"""``columns`` / ``exclude`` of the tree miners (issue #21): the drawn target attributes come
from the allowed columns only, every tree request carries them (the server restricts the splits
to them), and a bad list is refused before anything is priced or charged."""

from __future__ import annotations

import pytest

from dpmine.errors import ParameterError
from dpmine.miners import AltExpM, AltMCMC, MCMCTreePair
from dpmine.miners.trees import _placeholder_tree
from dpmine.wire import AttributeTarget, DatasetMetadata

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


def test_draws_come_from_the_allowed_columns_only() -> None:
    miner = AltExpM(seed=3, exclude=["l0", "r1"])
    draws = miner._attribute_draws(METADATA, 200)
    assert set(draws) == {"l1", "l2", "l3", "r0", "r2", "r3"}
    narrowed = MCMCTreePair(seed=3, columns=["l2", "l3", "r3"])
    assert set(narrowed._attribute_draws(METADATA, 200)) == {"l2", "l3", "r3"}


def test_tree_requests_carry_the_allowed_columns() -> None:
    miner = AltMCMC(seed=1, columns=["l1", "l2", "r0"], exclude="l2")
    miner._allowed = miner.columns_for(METADATA)
    assert miner._allowed == ["l1", "r0"]
    request = miner._tree_request("left", AttributeTarget(attribute="r0"))
    assert request.columns == ["l1", "r0"]
    assert AltExpM()._tree_request("left", AttributeTarget(attribute="r0")).columns is None
    pair = MCMCTreePair(columns=["l1", "r0"])
    pair._allowed = pair.columns_for(METADATA)
    assert pair._pair_request("r0").columns == ["l1", "r0"]


def test_the_pricing_tree_uses_allowed_columns_only() -> None:
    tree = _placeholder_tree(METADATA, "left", 2, ["l2", "l3", "r0"])
    assert {split.attribute for split in tree.splits} == {"l2", "l3"}
    with pytest.raises(ParameterError, match="too few attributes"):
        _placeholder_tree(METADATA, "left", 2, ["l2", "r0"])


@pytest.mark.parametrize(
    ("columns", "exclude", "message"),
    [
        (["l1", "zz"], None, "unknown column"),
        (["l0", "l1"], None, "leave the right view no attribute"),
        (None, ["r0", "r1", "r2", "r3"], "leave the right view no attribute"),
        (["l0"], ["l0"], "leave no column"),
    ],
)
def test_bad_columns_are_parameter_errors(
    columns: list[str] | None, exclude: list[str] | None, message: str
) -> None:
    with pytest.raises(ParameterError, match=message):
        AltExpM(columns=columns, exclude=exclude).columns_for(METADATA)
