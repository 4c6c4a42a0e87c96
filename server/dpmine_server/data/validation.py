"""Checks of a query against the public metadata, before any data is read (DESIGN.md contract 5).

:func:`validate_expr` looks only at the owner's :class:`DatasetMetadata`, never at the rows, so
its messages may be returned to the analyst verbatim. Literal semantics: ALGORITHMS.md §1.1.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Collection, Iterator

from dpmine.wire.datasets import (
    BooleanAttribute,
    CategoricalAttribute,
    DatasetMetadata,
    NumericAttribute,
)
from dpmine.wire.queries import (
    And,
    BoolLiteral,
    CatLiteral,
    Expr,
    Not,
    NumLiteral,
    Or,
    check_query_limits,
)

__all__ = ["QueryError", "iter_literals", "validate_expr"]

_KIND_BY_TYPE = {"boolean": "bool", "categorical": "cat", "numeric": "num"}
_MAX_LISTED = 20

LiteralModel = BoolLiteral | CatLiteral | NumLiteral
Attribute = BooleanAttribute | CategoricalAttribute | NumericAttribute


class QueryError(ValueError):
    """A query does not fit the dataset's public metadata; the message says what to fix."""


def iter_literals(expr: Expr) -> Iterator[LiteralModel]:
    """The literals of ``expr``, left to right."""
    if isinstance(expr, And | Or):
        for term in expr.terms:
            yield from iter_literals(term)
    elif isinstance(expr, Not):
        yield from iter_literals(expr.term)
    else:
        yield expr


def _listing(names: Collection[str]) -> str:
    shown = list(names)[:_MAX_LISTED]
    more = len(names) - len(shown)
    return repr(shown) + (f" and {more} more" if more > 0 else "")


def _suggest(name: str, candidates: Collection[str]) -> str:
    close = difflib.get_close_matches(name, list(candidates), n=3, cutoff=0.6)
    return f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else "."


def _check_transaction_literal(lit: LiteralModel, items: set[str], side: str) -> None:
    if not isinstance(lit, BoolLiteral):
        raise QueryError(
            f"{side}: transaction datasets only have item literals (kind 'bool' naming an item), "
            f"got a {lit.kind!r} literal on {lit.attribute!r}"
        )
    if lit.attribute not in items:
        raise QueryError(
            f"{side}: unknown item {lit.attribute!r}{_suggest(lit.attribute, items)} "
            "Use an item of the dataset's public item universe."
        )


def _check_kind(lit: LiteralModel, attribute: Attribute, side: str) -> None:
    expected = _KIND_BY_TYPE[attribute.type]
    if lit.kind == expected:
        return
    if isinstance(attribute, NumericAttribute):
        hint = f"[a <= {attribute.name} <= b] with bounds in [{attribute.lo}, {attribute.hi}]"
    elif isinstance(attribute, CategoricalAttribute):
        hint = f"[{attribute.name} = <category>]"
    else:
        hint = f"[{attribute.name}]"
    raise QueryError(
        f"{side}: attribute {attribute.name!r} is {attribute.type}, so it needs a {expected!r} "
        f"literal such as {hint}, not a {lit.kind!r} literal"
    )


def _check_category(lit: CatLiteral, attribute: CategoricalAttribute, side: str) -> None:
    if lit.category in attribute.categories:
        return
    raise QueryError(
        f"{side}: {lit.category!r} is not a declared category of {attribute.name!r}"
        f"{_suggest(lit.category, attribute.categories)} "
        f"Declared categories: {_listing(attribute.categories)}."
    )


def _check_bounds(lit: NumLiteral, attribute: NumericAttribute, side: str) -> None:
    for which, bound in (("lower", lit.lower), ("upper", lit.upper)):
        if bound is None:
            continue
        if not math.isfinite(bound):
            raise QueryError(f"{side}: the {which} bound on {attribute.name!r} must be finite")
        if not attribute.lo <= bound <= attribute.hi:
            raise QueryError(
                f"{side}: the {which} bound {bound} on {attribute.name!r} is outside its public "
                f"range [{attribute.lo}, {attribute.hi}]; use a bound inside the range (or leave "
                f"the {which} bound out)"
            )
    if lit.lower is not None and lit.upper is not None and lit.lower > lit.upper:
        raise QueryError(
            f"{side}: lower bound {lit.lower} is above upper bound {lit.upper} "
            f"on {attribute.name!r}"
        )


def _check_view(
    attribute: Attribute, metadata: DatasetMetadata, views: set[str] | None, side: str
) -> None:
    if views is None or metadata.kind != "views" or attribute.view in views:
        return
    allowed = " or ".join(sorted(views)) or "no"
    raise QueryError(
        f"{side}: attribute {attribute.name!r} is in the {attribute.view} view, but this query "
        f"may only use {allowed}-view attributes; move the literal to the other query"
    )


def validate_expr(
    expr: Expr,
    metadata: DatasetMetadata,
    *,
    side: str = "predicate",
    views: set[str] | None = None,
) -> None:
    """Raise :class:`QueryError` unless every literal of ``expr`` fits the public metadata.

    Checks the public size limits, that each attribute exists (with close names suggested), that
    the literal kind matches the attribute type, that categories are declared, that numeric
    bounds are finite and inside [lo, hi], and, when ``views`` is given on a two-view dataset,
    that each attribute belongs to one of those views ("table" datasets have no views: any
    attribute may be used on either side). For transactions, literals are items.
    """
    try:
        check_query_limits(expr, side=side)
    except ValueError as error:
        raise QueryError(str(error)) from None
    if metadata.kind == "transactions":
        items = set(metadata.items)
        for lit in iter_literals(expr):
            _check_transaction_literal(lit, items, side)
        return
    by_name = {attribute.name: attribute for attribute in metadata.attributes}
    for lit in iter_literals(expr):
        attribute = by_name.get(lit.attribute)
        if attribute is None:
            raise QueryError(
                f"{side}: unknown attribute {lit.attribute!r}{_suggest(lit.attribute, by_name)} "
                f"Declared attributes: {_listing(by_name)}."
            )
        _check_kind(lit, attribute, side)
        if isinstance(lit, CatLiteral) and isinstance(attribute, CategoricalAttribute):
            _check_category(lit, attribute, side)
        if isinstance(lit, NumLiteral) and isinstance(attribute, NumericAttribute):
            _check_bounds(lit, attribute, side)
        _check_view(attribute, metadata, views, side)
