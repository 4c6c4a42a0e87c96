"""``DatasetMetadata.attribute`` looks names up through an index built on first use: the same
answers as a scan of ``attributes``, on copies too, and invisible to equality and dumps."""

from __future__ import annotations

import pickle

import pytest

from dpmine.wire import DatasetMetadata


def _metadata() -> DatasetMetadata:
    return DatasetMetadata.model_validate(
        {
            "kind": "views",
            "n_max": 100,
            "attributes": [
                {"name": "a", "type": "boolean", "view": "left"},
                {"name": "b", "type": "categorical", "categories": ["x", "y"], "view": "left"},
                {"name": "c", "type": "numeric", "lo": 0.0, "hi": 1.0, "view": "right"},
            ],
        }
    )


def test_every_declared_name_is_found_and_an_unknown_one_is_a_key_error() -> None:
    metadata = _metadata()
    for declared in metadata.attributes:
        assert metadata.attribute(declared.name) is declared
    with pytest.raises(KeyError):
        metadata.attribute("d")


def test_a_copy_with_other_attributes_answers_from_its_own_list() -> None:
    metadata = _metadata()
    metadata.attribute("c")  # the original's index is built
    fewer = metadata.model_copy(update={"attributes": metadata.attributes[:2]})
    assert fewer.attribute("a") is metadata.attributes[0]
    with pytest.raises(KeyError):
        fewer.attribute("c")
    relabelled = metadata.model_copy(update={"n_max": 50})
    assert relabelled.attribute("c") is metadata.attributes[2]


def test_the_index_changes_no_comparison_dump_or_pickle() -> None:
    used, fresh = _metadata(), _metadata()
    used.attribute("b")
    assert used == fresh
    assert fresh == used
    assert used.model_dump() == fresh.model_dump()
    assert used.model_dump_json() == fresh.model_dump_json()
    assert "_attribute_index" not in used.model_dump()
    restored = pickle.loads(pickle.dumps(used))
    assert restored == fresh
    assert restored.attribute("c") == fresh.attribute("c")
