"""One example request per operation, shown in the OpenAPI document (``/docs``, ``/redoc``).

Each is a valid request on the README's ``mushroom`` dataset (the bundled UCI Mushroom data as
its owner registers it: the cap/gill/odor view on the left, the stalk/veil/ring/spore/class view
on the right, label ``class`` with positive ``p``). ``tests/api/test_openapi_examples.py`` checks
that every operation has one and that the server validates and prices it on that dataset.
"""

from __future__ import annotations

from typing import Any

from fastapi.openapi.models import Example

__all__ = ["OPERATION_EXAMPLES", "job_examples", "openapi_examples"]

_ODOR_N = {"kind": "cat", "attribute": "odor", "category": "n", "negated": False}
_EDIBLE = {"kind": "cat", "attribute": "class", "category": "e", "negated": False}
_QUALITY = {"x0": 800.0, "y0": 800.0, "function": "serenade", "calibration": "range"}
_OPTIONS = {"operators": ["and", "or"], "max_literals": 4, "threshold_mode": "auto"}
_LEFT_TREE = {
    "view": "left",
    "depth": 1,
    "splits": [{"attribute": "odor", "threshold": None, "category": "n"}],
}
_RIGHT_TREE = {
    "view": "right",
    "depth": 1,
    "splits": [{"attribute": "ring-type", "threshold": None, "category": "p"}],
}
_RULES = [
    {"items": [{"kind": "cat", "attribute": "odor", "category": "f", "negated": False}]},
    {"items": [{"kind": "cat", "attribute": "gill-size", "category": "b", "negated": False}]},
]

#: Operation name → an example request body.
OPERATION_EXAMPLES: dict[str, dict[str, Any]] = {
    "count.noisy": {"predicate": _ODOR_N, "epsilon": 0.1},
    "red.compute_quality": {
        "redescription": {"left": _ODOR_N, "right": _EDIBLE},
        "epsilon": 0.2,
        "mode": "cells",
    },
    "serenade.initial_pairs": {
        "count": 5,
        "epsilon": 0.3,
        "quality": _QUALITY,
        "options": _OPTIONS,
    },
    "serenade.extend_one": {
        "mode": "es",
        "collection": [{"left": _ODOR_N, "right": _EDIBLE}],
        "epsilon": 0.1,
        "quality": _QUALITY,
        "options": _OPTIONS,
    },
    "fim.topk_em": {"k": 10, "min_length": 1, "max_length": 3, "epsilon": 1.0, "rho": 0.1},
    "fim.topk_laplace": {"k": 10, "min_length": 1, "max_length": 3, "epsilon": 1.0, "rho": 0.1},
    "tree.expmech": {
        "view": "left",
        "target": {"kind": "attribute", "attribute": "ring-number"},
        "depth": 3,
        "epsilon": 0.2,
    },
    "tree.mcmc": {
        "view": "left",
        "target": {"kind": "attribute", "attribute": "ring-number"},
        "depth": 3,
        "iterations": 10_000,
        "epsilon": 0.2,
    },
    "tree.pair_mcmc": {
        "attribute": "stalk-shape",
        "depth": 3,
        "iterations": 10_000,
        "epsilon": 0.1,
    },
    "tree.leaf_counts": {
        "left_tree": _LEFT_TREE,
        "right_tree": _RIGHT_TREE,
        "epsilon": 0.2,
        "release": "partition",
    },
    "brl.antecedents": {"k_per_class": 40, "max_length": 1, "epsilon": 0.3, "method": "em"},
    "brl.sample_rule_list": {"antecedents": _RULES, "epsilon": 0.3, "iterations": 3000},
    "brl.sample_rule_list_exact": {"antecedents": _RULES, "epsilon": 0.3, "max_rules": 3},
    "brl.point_estimates": {"rules": _RULES, "epsilon": 0.3},
}


def openapi_examples(operation: str) -> dict[str, Example] | None:
    """The ``openapi_examples`` of an operation's body (None when it has no example)."""
    example = OPERATION_EXAMPLES.get(operation)
    if example is None:
        return None
    return {"mushroom": Example(summary="on the README's mushroom dataset", value=example)}


def job_examples() -> dict[str, Example]:
    """The ``openapi_examples`` of ``POST .../jobs``: each operation's example as a job."""
    return {
        name: Example(
            summary=f"{name} on the README's mushroom dataset",
            value={"operation": name, "request": example},
        )
        for name, example in OPERATION_EXAMPLES.items()
    }
