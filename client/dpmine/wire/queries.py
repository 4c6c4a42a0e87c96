"""Query model shared by both sides (ALGORITHMS.md §1.1).

A query is a Boolean expression over literals. Literals:

* ``BoolLiteral`` ``[A]``: true iff A is true;
* ``CatLiteral`` ``[A = c]``: true iff A has category c;
* ``NumLiteral`` ``[a <= A <= b]``, ``[A <= b]``, ``[a <= A]``: closed bounds on a numeric A.

Each literal may be negated (``negated=True``, written ``![...]``). A literal on a missing value is
false, and so is its negation (§1.1 [REC]). ``Not`` over a compound expression is the plain
complement of its support (rows where the expression is false, missing values included): this is
what the tree queries of §3.6 need for negated leaves.

Serenade queries (left-to-right folds of ∧/∨) and tree queries (disjunctions of signed leaf paths)
are both expressions of this form; :mod:`dpmine.wire.query_tree` builds and recognises them and
:mod:`dpmine.queries` holds the text syntax.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Literal

from pydantic import BeforeValidator, Discriminator, Field, model_validator

from dpmine.wire.common import WireModel

__all__ = [
    "MAX_QUERY_DEPTH",
    "MAX_QUERY_LITERALS",
    "And",
    "AnyLiteral",
    "BoolLiteral",
    "CatLiteral",
    "Expr",
    "Not",
    "NumLiteral",
    "Or",
    "QueryInput",
    "Redescription",
    "check_query_limits",
    "register_text_parser",
]

#: Public limits on query size, checked before anything else.
MAX_QUERY_LITERALS = 64
MAX_QUERY_DEPTH = 16

AttributeName = Annotated[str, Field(min_length=1, max_length=200)]


class BoolLiteral(WireModel):
    """``[A]``: Boolean attribute A is true (or, for transaction data, item A is present)."""

    kind: Literal["bool"] = "bool"
    attribute: AttributeName
    negated: bool = False


class CatLiteral(WireModel):
    """``[A = c]``: categorical attribute A takes the public category c."""

    kind: Literal["cat"] = "cat"
    attribute: AttributeName
    category: str = Field(max_length=200)
    negated: bool = False


class NumLiteral(WireModel):
    """``[lower <= A <= upper]`` with either bound optional (closed bounds)."""

    kind: Literal["num"] = "num"
    attribute: AttributeName
    lower: float | None = Field(default=None, allow_inf_nan=False)
    upper: float | None = Field(default=None, allow_inf_nan=False)
    negated: bool = False

    @model_validator(mode="after")
    def _bounds_make_sense(self) -> NumLiteral:
        if self.lower is None and self.upper is None:
            raise ValueError(
                f"numeric literal on {self.attribute!r} needs a lower or an upper bound"
            )
        if self.lower is not None and self.upper is not None and self.lower > self.upper:
            raise ValueError(
                f"numeric literal on {self.attribute!r} has lower bound {self.lower} above "
                f"upper bound {self.upper}"
            )
        return self


AnyLiteral = Annotated[BoolLiteral | CatLiteral | NumLiteral, Discriminator("kind")]


class And(WireModel):
    """Conjunction of two or more sub-expressions."""

    kind: Literal["and"] = "and"
    terms: list[Expr] = Field(min_length=2, max_length=MAX_QUERY_LITERALS)


class Or(WireModel):
    """Disjunction of two or more sub-expressions."""

    kind: Literal["or"] = "or"
    terms: list[Expr] = Field(min_length=2, max_length=MAX_QUERY_LITERALS)


class Not(WireModel):
    """Complement of a sub-expression's support (see the module docstring for literals)."""

    kind: Literal["not"] = "not"
    term: Expr


Expr = Annotated[
    BoolLiteral | CatLiteral | NumLiteral | And | Or | Not,
    Discriminator("kind"),
]

And.model_rebuild()
Or.model_rebuild()
Not.model_rebuild()


#: The parser of the text syntax (§1.1). :mod:`dpmine.queries` registers it when it is imported,
#: which importing any part of ``dpmine`` does: the wire package itself imports nothing outside
#: pydantic and the standard library.
_TEXT_PARSERS: list[Callable[[str], Expr]] = []


def register_text_parser(parse: Callable[[str], Expr]) -> None:
    """Make ``parse`` the parser of query fields given as text (called by dpmine.queries)."""
    _TEXT_PARSERS[:] = [parse]


def _from_text(value: object) -> object:
    """A query given as text in the README's syntax (§1.1) becomes its tree; anything else is
    left to the tree's own validation. A text that does not parse is a ValueError naming the
    column and the fix (a 422 on the server, nothing charged)."""
    if isinstance(value, str) and _TEXT_PARSERS:
        return _TEXT_PARSERS[0](value)
    return value


_TEXT_OR_TREE: object = str | Expr
QueryInput = Annotated[Expr, BeforeValidator(_from_text, json_schema_input_type=_TEXT_OR_TREE)]


def _size_and_depth(expr: Expr) -> tuple[int, int]:
    if isinstance(expr, And | Or):
        parts = [_size_and_depth(term) for term in expr.terms]
        return sum(p[0] for p in parts), 1 + max(p[1] for p in parts)
    if isinstance(expr, Not):
        size, depth = _size_and_depth(expr.term)
        return size, depth + 1
    return 1, 1


def check_query_limits(expr: Expr, *, side: str = "query") -> None:
    """Raise ValueError when a query exceeds the public size limits."""
    size, depth = _size_and_depth(expr)
    if size > MAX_QUERY_LITERALS:
        raise ValueError(f"{side} has {size} literals; at most {MAX_QUERY_LITERALS} are allowed")
    if depth > MAX_QUERY_DEPTH:
        raise ValueError(f"{side} is nested {depth} deep; at most {MAX_QUERY_DEPTH} is allowed")


class Redescription(WireModel):
    """A pair of queries, one over each view (§1.1)."""

    left: QueryInput
    right: QueryInput

    @model_validator(mode="after")
    def _within_limits(self) -> Redescription:
        check_query_limits(self.left, side="left query")
        check_query_limits(self.right, side="right query")
        return self
