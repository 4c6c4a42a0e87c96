"""Structural helpers over the query expression tree (ALGORITHMS.md §1.1, §2.2, §3.6).

Pure functions over the models of :mod:`dpmine.wire.queries`, shared by the client (builders,
printing) and the server (validation, Serenade's extensions, tree queries): listing literals and
attributes, the Serenade left-to-right fold of ∧/∨ and its inverse, and the disjunction of signed
leaf paths of a tree. Like the rest of the wire package they import only pydantic and the
standard library; the text syntax lives in :mod:`dpmine.queries`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from dpmine.wire.queries import (
    MAX_QUERY_LITERALS,
    And,
    AnyLiteral,
    BoolLiteral,
    CatLiteral,
    Expr,
    Not,
    NumLiteral,
    Or,
    check_query_limits,
)

__all__ = [
    "SerenadeOp",
    "attributes",
    "extend_query",
    "literals",
    "query_length",
    "serenade_query",
    "serenade_steps",
    "tree_query",
]

#: The two Serenade extension operators (§1.1): ``q ← q and literal`` and ``q ← q or literal``.
SerenadeOp = Literal["and", "or"]


def literals(expr: Expr) -> list[AnyLiteral]:
    """The literals of a query, left to right as written (§1.1)."""
    if isinstance(expr, And | Or):
        return [lit for term in expr.terms for lit in literals(term)]
    if isinstance(expr, Not):
        return literals(expr.term)
    return [expr]


def attributes(expr: Expr) -> set[str]:
    """The attribute names a query uses (§1.1)."""
    return {lit.attribute for lit in literals(expr)}


def query_length(expr: Expr) -> int:
    """The number of literals of a query (what MAX_QUERY_LITERALS bounds)."""
    return len(literals(expr))


def extend_query(expr: Expr, op: SerenadeOp, literal: AnyLiteral) -> Expr:
    """One Serenade step ``q ← q op literal`` on the whole query (§1.1), flattening same ops."""
    node = _node_type(op)
    if query_length(expr) >= MAX_QUERY_LITERALS:
        raise ValueError(f"cannot extend: a query has at most {MAX_QUERY_LITERALS} literals")
    terms: list[Expr] = [*expr.terms, literal] if isinstance(expr, node) else [expr, literal]
    extended = node(terms=terms)
    check_query_limits(extended)
    return extended


def serenade_query(first: AnyLiteral, steps: Sequence[tuple[SerenadeOp, AnyLiteral]]) -> Expr:
    """The Serenade left-to-right fold (§1.1): ``q ← first``, then ``q ← q op literal``."""
    expr: Expr = first
    for op, literal in steps:
        expr = extend_query(expr, op, literal)
    return expr


def serenade_steps(expr: Expr) -> tuple[AnyLiteral, list[tuple[SerenadeOp, AnyLiteral]]] | None:
    """Inverse of :func:`serenade_query`; None when ``expr`` is not such a fold (§1.1)."""
    if isinstance(expr, BoolLiteral | CatLiteral | NumLiteral):
        return expr, []
    if not isinstance(expr, And | Or):
        return None
    head, *tail = expr.terms
    tail_literals = [
        term for term in tail if isinstance(term, BoolLiteral | CatLiteral | NumLiteral)
    ]
    if isinstance(head, type(expr)) or len(tail_literals) != len(tail):
        return None
    inner = serenade_steps(head)
    if inner is None:
        return None
    op: SerenadeOp = "and" if isinstance(expr, And) else "or"
    first, steps = inner
    return first, [*steps, *((op, literal) for literal in tail_literals)]


def tree_query(paths: Sequence[tuple[bool, Sequence[AnyLiteral]]]) -> Expr:
    """Disjunction of signed leaf paths of one tree (§1.1, §3.6).

    A path is the conjunction of its tests; a negative path is its complement ``Not``, so a
    negative one-test path is ``Not(literal)``, not the negated literal (they differ on missing
    values).
    """
    if not paths:
        raise ValueError("a tree query needs at least one leaf path")
    terms = [_leaf_query(positive, tests) for positive, tests in paths]
    expr = terms[0] if len(terms) == 1 else Or(terms=terms)
    check_query_limits(expr, side="tree query")
    return expr


def _leaf_query(positive: bool, tests: Sequence[AnyLiteral]) -> Expr:
    if not tests:
        raise ValueError("a leaf path needs at least one test (a root-only tree has no query)")
    path: Expr = tests[0] if len(tests) == 1 else And(terms=list(tests))
    return path if positive else Not(term=path)


def _node_type(op: SerenadeOp) -> type[And] | type[Or]:
    if op == "and":
        return And
    if op == "or":
        return Or
    raise ValueError(f"Serenade operator must be 'and' or 'or', not {op!r}")
