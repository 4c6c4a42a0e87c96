"""The operation catalog (``dpmine_server.operations.CATALOG``): every operation declares a unique
name and route, a wire request/response pair, a documented kernel (privacy guarantee and spec
section, DESIGN.md "Operations"), and a kernel whose output validates against its response model
once the executor adds the receipt."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from collections import Counter
from datetime import UTC, datetime
from typing import Any, get_args

import numpy as np
import pytest
from pydantic import BaseModel

import dpmine_server.operations
from dpmine.wire import (
    MIN_TREE_ITERATIONS,
    OPERATIONS,
    Antecedent,
    AttributeTarget,
    BooleanAttribute,
    BoolLiteral,
    CategoricalAttribute,
    CatLiteral,
    ComputeQualityRequest,
    DatasetKind,
    DatasetMetadata,
    DecisionTree,
    ExtendOneRequest,
    InitialPairsRequest,
    LeafCountsRequest,
    NoisyCountRequest,
    NumericAttribute,
    NumLiteral,
    PointEstimatesRequest,
    QualityParameters,
    Receipt,
    Redescription,
    RuleListAntecedentsRequest,
    SampleRuleListExactRequest,
    SampleRuleListRequest,
    SerenadeOptions,
    TopKItemsetsRequest,
    TreeExpMechRequest,
    TreeMCMCRequest,
    TreePairMCMCRequest,
    TreeSplit,
    TreeTarget,
    WireModel,
)
from dpmine_server.app import create_app
from dpmine_server.data.columns import (
    BooleanColumn,
    CategoricalColumn,
    Column,
    ColumnStore,
    ItemColumns,
    NumericColumn,
)
from dpmine_server.dp.budget import Epsilon
from dpmine_server.dp.rng import seeded_generator
from dpmine_server.operations import CATALOG, OperationSpec
from dpmine_server.operations.base import no_progress
from dpmine_server.settings import Settings

SPECS = sorted(CATALOG.values(), key=lambda spec: spec.name)
SPEC_IDS = [spec.name for spec in SPECS]
ALL_KINDS = frozenset(get_args(DatasetKind))
#: The spec section each known operation implements (ALGORITHMS.md §0.7, operation index).
SECTIONS = {
    "count.noisy": "§0.6",
    "red.compute_quality": "§1.6",
    "fim.topk_em": "§4.2",
    "fim.topk_laplace": "§4.3",
    "serenade.initial_pairs": "§2.3",
    "serenade.extend_one": "§2.4",
    "tree.expmech": "§3.3",
    "tree.mcmc": "§3.4",
    "tree.pair_mcmc": "§3.5",
    "tree.leaf_counts": "§3.6",
    "brl.antecedents": "§5.2",
    "brl.sample_rule_list": "§5.3",
    "brl.sample_rule_list_exact": "§5.3",
    "brl.point_estimates": "§5.4",
}
ROWS = 12


def _metadata(kind: DatasetKind) -> DatasetMetadata:
    if kind == "transactions":
        return DatasetMetadata(kind=kind, n_max=100, items=["x", "y", "z"])
    left, right = ("left", "right") if kind == "views" else (None, None)
    attributes = [
        BooleanAttribute(name="a", view=left),
        CategoricalAttribute(name="colour", view=left, categories=["red", "green"]),
        BooleanAttribute(name="b", view=right),
        NumericAttribute(name="size", view=right, lo=0.0, hi=10.0),
    ]
    return DatasetMetadata.model_validate(
        {
            "kind": kind,
            "n_max": 100,
            "attributes": [a.model_dump() for a in attributes],
            "label": {"attribute": "b", "positive": "true"},  # for the rule lists (§5)
        }
    )


def _store(kind: DatasetKind) -> ColumnStore:
    """A deterministic 12-row store of ``kind`` matching :func:`_metadata`."""
    metadata = _metadata(kind)
    rows = np.arange(ROWS)
    if kind == "transactions":
        item_rows = np.concatenate([rows[rows % 2 == 0], rows[rows % 3 == 0], rows[rows % 5 == 0]])
        item_ids = np.repeat([0, 1, 2], [6, 4, 3])
        items = ItemColumns.from_pairs(metadata.items, item_rows, item_ids, ROWS)
        return ColumnStore(metadata, n_rows=ROWS, items=items)
    columns: dict[str, Column] = {
        "a": BooleanColumn.from_arrays("a", rows % 2 == 0, rows % 5 != 0),
        "colour": CategoricalColumn(
            "colour", ("red", "green"), np.where(rows % 7 == 0, -1, rows % 2).astype(np.int32)
        ),
        "b": BooleanColumn.from_arrays("b", rows % 3 == 0, np.ones(ROWS, dtype=bool)),
        "size": NumericColumn.from_values(
            "size", np.where(rows == 4, np.nan, rows * 1.0), lo=0.0, hi=10.0
        ),
    }
    return ColumnStore(metadata, n_rows=ROWS, columns=columns)


def _example_requests(kind: DatasetKind) -> dict[str, list[BaseModel]]:
    """Valid requests of every operation on a ``kind`` dataset (every mode is exercised)."""
    itemsets: list[BaseModel] = [
        TopKItemsetsRequest(k=2, min_length=1, max_length=2, epsilon=1.0),
        TopKItemsetsRequest(k=1, min_length=1, epsilon=0.5, with_counts=False),
    ]
    examples: dict[str, list[BaseModel]] = {
        "fim.topk_em": itemsets,
        "fim.topk_laplace": itemsets,
    }
    if kind == "transactions":
        item = BoolLiteral(attribute="y", negated=True)
        examples["count.noisy"] = [NoisyCountRequest(predicate=item, epsilon=0.5)]
        return examples
    redescription = Redescription(
        left=CatLiteral(attribute="colour", category="red"),
        right=NumLiteral(attribute="size", upper=6.0),
    )
    examples["count.noisy"] = [
        NoisyCountRequest(epsilon=1.0),
        NoisyCountRequest(predicate=BoolLiteral(attribute="a"), epsilon=0.25),
    ]
    examples["red.compute_quality"] = [
        ComputeQualityRequest(redescription=redescription, epsilon=0.5, mode=mode)
        for mode in ("cells", "paper")
    ]
    quality = QualityParameters(x0=3.0, s=0.5)
    examples["serenade.initial_pairs"] = [
        InitialPairsRequest(count=3, epsilon=0.5, quality=quality, options=options)
        for options in (SerenadeOptions(), SerenadeOptions(threshold_mode="grid", negations=True))
    ]
    examples["serenade.extend_one"] = [
        ExtendOneRequest(mode="cs", collection=[redescription], epsilon=0.2, quality=quality),
        ExtendOneRequest(
            mode="es",
            collection=[redescription, redescription],
            epsilon=0.2,
            quality=QualityParameters(x0=3.0, function="jaccard"),
            options=SerenadeOptions(threshold_mode="grid", operators=["and"]),
        ),
    ]
    if kind == "views":
        examples.update(_tree_examples())
    examples.update(_rule_list_examples())
    return examples


def _rule_list_examples() -> dict[str, list[BaseModel]]:
    """Requests of the rule-list operations (§5) on the labelled data of :func:`_metadata`."""
    rules = [
        Antecedent(items=[BoolLiteral(attribute="a")]),
        Antecedent(
            items=[
                CatLiteral(attribute="colour", category="red"),
                NumLiteral(attribute="size", lower=0.0, upper=5.0),
            ]
        ),
    ]
    return {
        "brl.antecedents": [
            RuleListAntecedentsRequest(k_per_class=3, max_length=2, epsilon=1.0),
            RuleListAntecedentsRequest(k_per_class=1, max_length=1, epsilon=0.5, method="laplace"),
        ],
        "brl.sample_rule_list": [
            SampleRuleListRequest(antecedents=rules, epsilon=1.0),
            SampleRuleListRequest(antecedents=rules, epsilon=0.5, iterations=1500),
        ],
        "brl.sample_rule_list_exact": [
            SampleRuleListExactRequest(antecedents=rules, epsilon=1.0),
            SampleRuleListExactRequest(
                antecedents=rules, epsilon=0.5, max_rules=1, target="posterior"
            ),
        ],
        "brl.point_estimates": [
            PointEstimatesRequest(rules=rules, epsilon=1.0),
            PointEstimatesRequest(epsilon=0.5),
        ],
    }


def _tree_examples() -> dict[str, list[BaseModel]]:
    """Requests of the tree operations (§3) on the two-view dataset of :func:`_metadata`."""
    left_tree = DecisionTree(
        view="left",
        depth=2,
        splits=[
            TreeSplit(attribute="a"),
            TreeSplit(attribute="colour", category="red"),
            TreeSplit(attribute="colour", category="green"),
        ],
    )
    right_tree = DecisionTree(
        view="right", depth=1, splits=[TreeSplit(attribute="size", threshold=5.0)]
    )
    return {
        "tree.expmech": [
            TreeExpMechRequest(
                view="left", target=AttributeTarget(attribute="size", bins=3), depth=2, epsilon=1.0
            ),
            TreeExpMechRequest(view="right", target=TreeTarget(tree=left_tree), epsilon=0.5),
        ],
        "tree.mcmc": [
            TreeMCMCRequest(
                view="right",
                target=AttributeTarget(attribute="colour"),
                iterations=MIN_TREE_ITERATIONS,
                epsilon=1.0,
            )
        ],
        "tree.pair_mcmc": [
            TreePairMCMCRequest(attribute="a", depth=2, iterations=MIN_TREE_ITERATIONS, epsilon=1.0)
        ],
        "tree.leaf_counts": [
            LeafCountsRequest(left_tree=left_tree, right_tree=right_tree, epsilon=1.0)
        ],
    }


def _family_modules() -> list[Any]:
    """Every module of ``dpmine_server.operations`` that declares ``OPERATIONS``."""
    package = dpmine_server.operations
    modules = [
        importlib.import_module(f"{package.__name__}.{info.name}")
        for info in pkgutil.iter_modules(package.__path__)
    ]
    return [module for module in modules if hasattr(module, "OPERATIONS")]


def _receipt(spec: OperationSpec[Any, Any], cost: Epsilon, guarantee: str) -> Receipt:
    """The receipt the executor attaches (services/executor.py)."""
    return Receipt(
        ledger_entry_id=1,
        dataset_id="toy",
        operation=spec.name,
        epsilon=cost.display(),
        epsilon_exact=cost.exact_str(),
        guarantee="pure" if guarantee == "pure" else "approximate",
        remaining_epsilon=0.0,
        created_at=datetime(2025, 1, 1, tzinfo=UTC),
    )


# --------------------------------------------------------------------------------------------
# Declarations


def test_catalog_holds_every_family_operation_once() -> None:
    # A family module that is not listed in operations/__init__.py would be missing here.
    declared = [spec.name for module in _family_modules() for spec in module.OPERATIONS]
    assert [name for name, times in Counter(declared).items() if times > 1] == []
    assert sorted(declared) == sorted(CATALOG)
    assert {"count.noisy", "red.compute_quality"} <= set(CATALOG)
    assert all(CATALOG[name].name == name for name in CATALOG)


def test_names_and_paths_are_unique_and_well_formed() -> None:
    paths = [spec.path for spec in SPECS]
    assert len(set(paths)) == len(paths)
    for spec in SPECS:
        assert re.fullmatch(r"[a-z]+\.[a-z_]+", spec.name), spec.name
        assert re.fullmatch(r"[a-z_\-]+(/[a-z_\-]+)*", spec.path), spec.path
        assert spec.summary.strip()


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
def test_request_and_response_models_form_a_wire_pair(spec: OperationSpec[Any, Any]) -> None:
    assert issubclass(spec.request_model, WireModel)
    assert issubclass(spec.response_model, WireModel)
    assert spec.request_model is not spec.response_model
    assert spec.request_model.__name__.endswith("Request")
    assert spec.response_model.__name__.endswith("Response")
    stem = spec.request_model.__name__.removesuffix("Request")
    assert spec.response_model.__name__ == f"{stem}Response"
    receipt = spec.response_model.model_fields.get("receipt")
    assert receipt is not None
    assert receipt.annotation is Receipt
    assert receipt.is_required()
    assert spec.dataset_kinds
    assert spec.dataset_kinds <= ALL_KINDS


@pytest.fixture(scope="module")
def openapi() -> dict[str, Any]:
    """The server's OpenAPI document (services are only built at start-up, so no database)."""
    document: dict[str, Any] = create_app(Settings(environment="test")).openapi()
    return document


def _schema_name(content: dict[str, Any]) -> str:
    reference: str = content["content"]["application/json"]["schema"]["$ref"]
    return reference.rsplit("/", 1)[-1]


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
def test_each_operation_has_its_post_route(
    spec: OperationSpec[Any, Any], openapi: dict[str, Any]
) -> None:
    path = f"/v1/datasets/{{dataset_id}}/{spec.path}"
    assert path in openapi["paths"], sorted(openapi["paths"])
    post = openapi["paths"][path]["post"]
    assert _schema_name(post["requestBody"]) == spec.request_model.__name__
    assert _schema_name(post["responses"]["200"]) == spec.response_model.__name__


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
def test_the_kernel_docstring_states_the_guarantee_and_the_spec_section(
    spec: OperationSpec[Any, Any],
) -> None:
    doc = inspect.getdoc(spec.run)
    assert doc, (
        f"{spec.name}: the kernel {spec.run.__module__}.{spec.run.__qualname__} has no docstring"
    )
    assert re.search(r"ε-DP|epsilon-DP|pure|approximate", doc), doc
    section = SECTIONS.get(spec.name, "§")
    assert re.search(re.escape(section) + r"\d*(\.\d+)*", doc), (section, doc)


# --------------------------------------------------------------------------------------------
# Pricing and running


@pytest.mark.parametrize("kind", sorted(ALL_KINDS))
def test_every_operation_has_an_example_for_each_kind_it_supports(kind: DatasetKind) -> None:
    supported = {spec.name for spec in SPECS if kind in spec.dataset_kinds}
    assert set(_example_requests(kind)) == supported


SPEC_KINDS = [
    pytest.param(spec, kind, id=f"{spec.name}-{kind}")
    for spec in SPECS
    for kind in sorted(spec.dataset_kinds)
]


@pytest.mark.parametrize(("spec", "kind"), SPEC_KINDS)
def test_run_output_plus_receipt_validates_against_the_response_model(
    spec: OperationSpec[Any, Any], kind: DatasetKind
) -> None:
    store = _store(kind)
    rng = seeded_generator(3)
    for request in _example_requests(kind)[spec.name]:
        assert isinstance(request, spec.request_model)
        spec.validate(request, store.metadata)
        cost, guarantee = spec.cost(request), spec.guarantee
        assert guarantee in {"pure", "approximate"}
        assert cost.units > 0
        fields: dict[str, Any] = spec.run(store, request, cost, rng, no_progress)
        assert "receipt" not in fields
        assert set(fields) <= set(spec.response_model.model_fields) - {"receipt"}
        response = spec.response_model.model_validate(
            {**fields, "receipt": _receipt(spec, cost, guarantee)}
        )
        # The wire round trip keeps every released field.
        assert spec.response_model.model_validate_json(response.model_dump_json()) == response
        dumped = response.model_dump(mode="json")
        assert dumped["receipt"]["operation"] == spec.name
        assert dumped["receipt"]["epsilon_exact"] == cost.exact_str()


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
def test_cost_is_a_function_of_public_parameters_only(spec: OperationSpec[Any, Any]) -> None:
    for kind in sorted(spec.dataset_kinds):
        for request in _example_requests(kind)[spec.name]:
            first = spec.cost(request)
            copy = spec.request_model.model_validate(request.model_dump(mode="json"))
            assert spec.cost(copy) == first


# --------------------------------------------------------------------------------------------
# The wire table (dpmine.wire.OPERATIONS) is the one source of names, paths, models and modes


def test_the_catalog_and_the_wire_table_agree() -> None:
    assert sorted(CATALOG) == sorted(OPERATIONS)
    for name, operation in OPERATIONS.items():
        spec = CATALOG[name]
        assert spec.operation is operation
        assert (spec.name, spec.path, spec.request_model, spec.response_model) == (
            operation.name,
            operation.path,
            operation.request_model,
            operation.response_model,
        )
        assert (spec.guarantee, spec.mode) == (operation.guarantee, operation.mode)
        assert spec.mode in {"inline", "job"}


def test_the_openapi_operation_routes_are_the_wire_tables(openapi: dict[str, Any]) -> None:
    routes = {
        path
        for path, methods in openapi["paths"].items()
        if "operations" in methods.get("post", {}).get("tags", [])
    }
    # serenade.calibrate is free (no charge, no release): a route of its own, not an operation.
    free = {"/v1/datasets/{dataset_id}/redescriptions/serenade/calibrate"}
    # A batch carries several operations' requests, each priced and released as its own.
    batch = "/v1/datasets/{dataset_id}/batch"
    assert _schema_name(openapi["paths"][batch]["post"]["requestBody"]) == "BatchRequest"
    assert routes - free - {batch} == {
        f"/v1/datasets/{{dataset_id}}/{op.path}" for op in OPERATIONS.values()
    }
    for operation in OPERATIONS.values():
        post = openapi["paths"][f"/v1/datasets/{{dataset_id}}/{operation.path}"]["post"]
        assert _schema_name(post["requestBody"]) == operation.request_model.__name__
        assert _schema_name(post["responses"]["200"]) == operation.response_model.__name__
    # A job names its operation and carries that operation's own request model.
    jobs = openapi["paths"]["/v1/datasets/{dataset_id}/jobs"]["post"]
    union = jobs["requestBody"]["content"]["application/json"]["schema"]
    mapping = union["discriminator"]["mapping"]
    assert union["discriminator"]["propertyName"] == "operation"
    assert set(mapping) == set(OPERATIONS)
    schemas = openapi["components"]["schemas"]
    for name, operation in OPERATIONS.items():
        job = schemas[mapping[name].rsplit("/", 1)[-1]]
        assert job["properties"]["operation"]["const"] == name
        request = job["properties"]["request"]["$ref"].rsplit("/", 1)[-1]
        assert request == operation.request_model.__name__
