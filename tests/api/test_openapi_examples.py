"""The OpenAPI document as a REST caller in any language reads it (issue #22, "REST that any
language can use"): stable operation ids, every error status declared, and one example request
per operation that the server accepts and prices on the README's mushroom dataset."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI

from dpmine.wire import DatasetMetadata, LabelSpec
from dpmine_server.api.examples import OPERATION_EXAMPLES
from dpmine_server.operations import CATALOG

#: The README's mushroom metadata: the demo's views, label class = p.
MUSHROOM = DatasetMetadata.model_validate_json(
    (Path(__file__).resolve().parents[2] / "config" / "demo" / "mushroom.metadata.json").read_text()
).model_copy(update={"label": LabelSpec(attribute="class", positive="p")})


def _operations(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [operation for path in document["paths"].values() for operation in path.values()]


def test_every_operation_has_an_example() -> None:
    assert set(OPERATION_EXAMPLES) == set(CATALOG)


@pytest.mark.parametrize("name", sorted(OPERATION_EXAMPLES))
def test_each_example_is_valid_and_priced_on_the_readme_dataset(name: str) -> None:
    spec = CATALOG[name]
    request = spec.request_model.model_validate(OPERATION_EXAMPLES[name])
    spec.validate(request, MUSHROOM)  # raises on an unknown attribute, view or category
    assert spec.cost(request).units > 0


def test_the_document_shows_them_with_stable_ids_and_every_error(app: FastAPI) -> None:
    document = app.openapi()
    operations = _operations(document)
    ids = [operation["operationId"] for operation in operations]
    assert len(ids) == len(set(ids))
    assert {"count_noisy", "fim_topk_em", "submit_job", "set_grant", "set_cap"} <= set(ids)
    assert all(id_.isidentifier() for id_ in ids), ids
    for operation in operations:
        declared = set(operation["responses"])
        if operation["operationId"] != "health":  # the one route without a key
            assert {"401", "403", "404", "409", "413", "422", "429"} <= declared, operation
    counts = document["paths"]["/v1/datasets/{dataset_id}/counts"]["post"]
    shown = counts["requestBody"]["content"]["application/json"]["examples"]
    assert shown["mushroom"]["value"] == OPERATION_EXAMPLES["count.noisy"]
    assert "500" in counts["responses"]


def _references(node: object) -> set[str]:
    """Names of the component schemas ``node`` refers to directly."""
    if isinstance(node, dict):
        found = {node["$ref"].rsplit("/", 1)[-1]} if isinstance(node.get("$ref"), str) else set()
        return found.union(*(_references(value) for value in node.values()))
    if isinstance(node, list):
        return set().union(*(_references(value) for value in node))
    return set()


def _reachable(schemas: dict[str, Any], roots: set[str]) -> set[str]:
    seen: set[str] = set()
    todo = set(roots)
    while todo:
        name = todo.pop()
        seen.add(name)
        todo |= _references(schemas[name]) - seen
    return seen


def test_request_fields_with_a_default_are_optional_for_code_generators(app: FastAPI) -> None:
    # openapi-typescript's default options read a `default` as "always present" (required);
    # in a request it is not: a request schema states its defaults in the description.
    document = app.openapi()
    schemas: dict[str, Any] = document["components"]["schemas"]
    bodies = [op["requestBody"] for op in _operations(document) if "requestBody" in op]
    requests = _reachable(schemas, _references(bodies))
    answers = _reachable(schemas, _references([op["responses"] for op in _operations(document)]))
    assert {"NoisyCountRequest", "TopKItemsetsRequest", "CatLiteral-Input"} <= requests
    for name in requests:
        for field, schema in schemas[name].get("properties", {}).items():
            assert "default" not in schema, (name, field)
    rho = schemas["TopKItemsetsRequest"]["properties"]["rho"]
    assert "rho" not in schemas["TopKItemsetsRequest"]["required"]
    assert rho["description"].endswith("Default: 0.1.")
    # An answer always has its defaulted fields: its schema lists them as required.
    for name in answers - requests:
        schema = schemas[name]
        for field, property_schema in schema.get("properties", {}).items():
            if "default" in property_schema:
                assert field in schema.get("required", []), (name, field)
