"""Query validation against public metadata only."""

from __future__ import annotations

import pytest

from dpmine.wire.datasets import (
    BooleanAttribute,
    CategoricalAttribute,
    DatasetMetadata,
    NumericAttribute,
)
from dpmine.wire.queries import (
    MAX_QUERY_DEPTH,
    And,
    BoolLiteral,
    CatLiteral,
    Expr,
    Not,
    NumLiteral,
    Or,
)
from dpmine_server.data.validation import QueryError, iter_literals, validate_expr

ATTRIBUTES = [
    CategoricalAttribute(name="odor", categories=["a", "c", "n"]),
    BooleanAttribute(name="bruises"),
    NumericAttribute(name="age", lo=0.0, hi=120.0),
]
VIEWS = DatasetMetadata(
    kind="views",
    n_max=1000,
    attributes=[
        ATTRIBUTES[0].model_copy(update={"view": "left"}),
        ATTRIBUTES[1].model_copy(update={"view": "left"}),
        ATTRIBUTES[2].model_copy(update={"view": "right"}),
    ],
)
TABLE = DatasetMetadata(kind="table", n_max=1000, attributes=ATTRIBUTES)
ITEMS = DatasetMetadata(kind="transactions", n_max=1000, items=["bread", "butter", "milk"])


def _error(
    expr: Expr,
    metadata: DatasetMetadata = VIEWS,
    *,
    side: str = "predicate",
    views: set[str] | None = None,
) -> str:
    with pytest.raises(QueryError) as info:
        validate_expr(expr, metadata, side=side, views=views)
    return str(info.value)


def test_valid_queries_pass() -> None:
    query = And(
        terms=[
            CatLiteral(attribute="odor", category="n", negated=True),
            Or(
                terms=[BoolLiteral(attribute="bruises"), Not(term=BoolLiteral(attribute="bruises"))]
            ),
        ]
    )
    validate_expr(query, VIEWS)
    validate_expr(query, VIEWS, side="left query", views={"left"})
    validate_expr(NumLiteral(attribute="age", lower=0.0, upper=120.0), VIEWS, views={"right"})
    validate_expr(NumLiteral(attribute="age", upper=18.0), TABLE, views={"left"})


def test_unknown_attribute_suggests_close_names() -> None:
    message = _error(BoolLiteral(attribute="bruise"), side="left query")
    assert message.startswith("left query: unknown attribute 'bruise'")
    assert "did you mean 'bruises'?" in message
    assert "'odor'" in message  # the declared names are listed


def test_literal_kind_must_match_type() -> None:
    message = _error(CatLiteral(attribute="age", category="3"))
    assert "'age' is numeric" in message
    assert "'num' literal" in message
    assert "not a 'cat' literal" in message
    assert "'bool' literal" in _error(NumLiteral(attribute="bruises", lower=0.0))
    assert "'cat' literal" in _error(BoolLiteral(attribute="odor"))


def test_category_must_be_declared() -> None:
    message = _error(CatLiteral(attribute="odor", category="z"))
    assert "'z' is not a declared category of 'odor'" in message
    assert "['a', 'c', 'n']" in message
    assert "did you mean" not in message


@pytest.mark.parametrize(
    ("lit", "fragment"),
    [
        (NumLiteral(attribute="age", lower=-1.0), "lower bound -1.0"),
        (NumLiteral(attribute="age", upper=121.0), "upper bound 121.0"),
        (NumLiteral(attribute="age", lower=10.0, upper=200.0), "upper bound 200.0"),
    ],
)
def test_numeric_bounds_inside_public_range(lit: NumLiteral, fragment: str) -> None:
    message = _error(lit)
    assert fragment in message
    assert "[0.0, 120.0]" in message


def test_non_finite_bounds_are_rejected() -> None:
    # The wire model refuses inf/nan; a model built without validation is still caught here.
    lit = NumLiteral.model_construct(attribute="age", lower=float("nan"), upper=None)
    assert "must be finite" in _error(lit)


def test_views_restrict_attributes_on_two_view_data() -> None:
    message = _error(NumLiteral(attribute="age", upper=3.0), side="left query", views={"left"})
    assert "'age' is in the right view" in message
    assert "only use left-view attributes" in message
    nested = And(terms=[BoolLiteral(attribute="bruises"), Not(term=BoolLiteral(attribute="odor"))])
    assert "right query" in _error(nested, side="right query", views={"right"})


def test_table_has_no_views() -> None:
    validate_expr(BoolLiteral(attribute="bruises"), TABLE, views={"right"})
    validate_expr(CatLiteral(attribute="odor", category="a"), TABLE, views={"left"})


def test_transactions_use_items() -> None:
    validate_expr(
        And(terms=[BoolLiteral(attribute="bread"), BoolLiteral(attribute="milk", negated=True)]),
        ITEMS,
    )
    message = _error(BoolLiteral(attribute="buter"), ITEMS)
    assert "unknown item 'buter'" in message
    assert "'butter'" in message
    assert "item literals" in _error(CatLiteral(attribute="bread", category="x"), ITEMS)


def test_query_limits_become_query_errors() -> None:
    expr: Expr = BoolLiteral(attribute="bruises")
    for _ in range(MAX_QUERY_DEPTH):
        expr = Not(term=expr)
    assert "nested" in _error(expr)


def test_iter_literals_in_order() -> None:
    a, b, c = (BoolLiteral(attribute=name) for name in "abc")
    assert list(iter_literals(And(terms=[a, Or(terms=[b, Not(term=c)])]))) == [a, b, c]


def test_error_is_a_value_error() -> None:
    assert issubclass(QueryError, ValueError)
