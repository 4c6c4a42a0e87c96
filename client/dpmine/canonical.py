"""Canonical, simplified queries (ALGORITHMS.md §1.1): the same rows, written once.

Two pure tools, both exact on every dataset under the query semantics of §1.1:

* :func:`simplify_conjunction` rewrites a conjunction of literals (a tree's leaf path) without
  changing its rows: repeated tests on one attribute are merged into the tightest one, tests
  implied by another are dropped, and a contradiction (``[g = 7] & [g = 6]``) is reported as
  ``None``, the empty set on every dataset. It uses only what holds on every dataset: a literal
  and its negation are false on a missing value; a present categorical value is one of the
  declared categories (the loader refuses any other); numeric values are clipped to the public
  range [lo, hi].
* :func:`canonical_query` and :func:`redescription_key` write a query so that queries equal up
  to the order and nesting of ``&`` and ``|``, repeated terms and double complements get the
  same text: the key by which a miner keeps a result once within a run.

Neither reads data; both are post-processing of public syntax.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dpmine.queries import format_query
from dpmine.wire import (
    AnyLiteral,
    BoolLiteral,
    CategoricalAttribute,
    CatLiteral,
    DatasetMetadata,
    NumericAttribute,
    NumLiteral,
)
from dpmine.wire.queries import And, Expr, Not, Or, Redescription

__all__ = ["canonical_query", "redescription_key", "simplify_conjunction"]


# --------------------------------------------------------------------------------------------
# Conjunctions of literals


def simplify_conjunction(
    tests: Sequence[AnyLiteral], schema: DatasetMetadata | None = None
) -> list[AnyLiteral] | None:
    """The conjunction of ``tests`` with the same rows on every dataset, or None when it is a
    contradiction (empty on every dataset).

    Literals are grouped by attribute, in the order of each attribute's first test; a group
    becomes its tightest equivalent: a Boolean ``[A]`` once (``[A] & ![A]`` is empty); a
    categorical ``[A = c]`` absorbs every ``![A = d]`` (d ≠ c; two different ``[A = c]`` are
    empty), and the ``![A = d]`` of every declared category but c are ``[A = c]``; numeric
    bounds merge into one lower and one upper bound, closed (``[a <= A <= b]``) or strict
    (``![A <= a]`` is A > a, ``![b <= A]`` is A < b), empty when they cross or leave the
    public range. A two-sided negation ``![a <= A <= b]`` is kept unless the bounds make it
    empty or imply it. ``schema`` gives the categories and ranges (without it, only the rules
    that need neither apply). Every group keeps at least one literal, so a row missing the
    attribute stays out, as before.
    """
    attributes = {a.name: a for a in schema.attributes} if schema is not None else {}
    groups: dict[str, list[AnyLiteral]] = {}
    for test in tests:
        groups.setdefault(test.attribute, []).append(test)
    simplified: list[AnyLiteral] = []
    for name, group in groups.items():
        merged = _merge_group(group, attributes.get(name))
        if merged is None:
            return None
        simplified += merged
    return simplified


def _merge_group(group: list[AnyLiteral], attribute: object) -> list[AnyLiteral] | None:
    if all(isinstance(test, BoolLiteral) for test in group):
        return _boolean(group)
    categorical = [test for test in group if isinstance(test, CatLiteral)]
    if len(categorical) == len(group):
        categories = attribute.categories if isinstance(attribute, CategoricalAttribute) else None
        return _categorical(categorical, categories)
    numeric = [test for test in group if isinstance(test, NumLiteral)]
    if len(numeric) == len(group):
        bounds = (attribute.lo, attribute.hi) if isinstance(attribute, NumericAttribute) else None
        return _numeric(numeric, bounds)
    return _unique(group)  # literals of different kinds on one attribute: left as written


def _unique(group: Sequence[AnyLiteral]) -> list[AnyLiteral]:
    return list(dict.fromkeys(group))


def _boolean(group: list[AnyLiteral]) -> list[AnyLiteral] | None:
    """``[A]`` and ``![A]`` together are empty; a repeated test is dropped."""
    return None if len({test.negated for test in group}) > 1 else [group[0]]


def _categorical(
    group: list[CatLiteral], categories: Sequence[str] | None
) -> list[AnyLiteral] | None:
    """One ``[A = c]``, or the ``![A = d]`` that are not implied (see the caller)."""
    attribute = group[0].attribute
    equal = list(dict.fromkeys(test.category for test in group if not test.negated))
    other = list(dict.fromkeys(test.category for test in group if test.negated))
    if len(equal) > 1 or (equal and equal[0] in other):
        return None
    if equal:
        return [CatLiteral(attribute=attribute, category=equal[0])]
    if categories is not None:
        remaining = [category for category in categories if category not in other]
        if not remaining:
            return None
        if len(remaining) == 1:
            return [CatLiteral(attribute=attribute, category=remaining[0])]
    return [CatLiteral(attribute=attribute, category=c, negated=True) for c in other]


@dataclass(frozen=True, slots=True)
class _Bound:
    """One side of an interval: ``value``, excluded when ``strict``."""

    value: float
    strict: bool


def _tighter_lower(current: _Bound | None, new: _Bound) -> _Bound:
    if current is None or new.value > current.value:
        return new
    if new.value == current.value and new.strict:
        return new
    return current


def _tighter_upper(current: _Bound | None, new: _Bound) -> _Bound:
    if current is None or new.value < current.value:
        return new
    if new.value == current.value and new.strict:
        return new
    return current


def _crossed(lower: _Bound | None, upper: _Bound | None) -> bool:
    """No value lies between the two bounds."""
    if lower is None or upper is None:
        return False
    return lower.value > upper.value or (
        lower.value == upper.value and (lower.strict or upper.strict)
    )


def _numeric(
    group: list[NumLiteral], bounds: tuple[float, float] | None
) -> list[AnyLiteral] | None:
    """One lower and one upper bound (closed or strict) and the two-sided negations left."""
    attribute = group[0].attribute
    lower: _Bound | None = None
    upper: _Bound | None = None
    holes: list[tuple[float, float]] = []  # ![a <= A <= b]: A outside [a, b]
    for test in group:
        if not test.negated:
            if test.lower is not None:
                lower = _tighter_lower(lower, _Bound(test.lower, strict=False))
            if test.upper is not None:
                upper = _tighter_upper(upper, _Bound(test.upper, strict=False))
        elif test.lower is None:
            assert test.upper is not None  # a literal has a bound (wire model)
            lower = _tighter_lower(lower, _Bound(test.upper, strict=True))
        elif test.upper is None:
            upper = _tighter_upper(upper, _Bound(test.lower, strict=True))
        else:
            holes.append((test.lower, test.upper))
    # The public range bounds every present value: it only serves to find empty sets.
    low, high = lower, upper
    if bounds is not None:
        low = _tighter_lower(lower, _Bound(bounds[0], strict=False))
        high = _tighter_upper(upper, _Bound(bounds[1], strict=False))
    if _crossed(low, high):
        return None
    kept_holes: list[NumLiteral] = []
    for a, b in dict.fromkeys(holes):
        inside = low is not None and high is not None and low.value >= a and high.value <= b
        if inside:
            return None  # every value the bounds allow is in the hole
        outside = _crossed(low, _Bound(b, strict=False)) or _crossed(_Bound(a, strict=False), high)
        if outside and (lower is not None or upper is not None):
            continue  # implied; another literal still keeps missing rows out
        kept_holes.append(NumLiteral(attribute=attribute, lower=a, upper=b, negated=True))
    return [*_bound_literals(attribute, lower, upper), *kept_holes]


def _bound_literals(attribute: str, lower: _Bound | None, upper: _Bound | None) -> list[AnyLiteral]:
    """The bounds as literals: closed ones in one ``[a <= A <= b]``, strict ones negated."""
    closed_lower = lower.value if lower is not None and not lower.strict else None
    closed_upper = upper.value if upper is not None and not upper.strict else None
    literals: list[AnyLiteral] = []
    if lower is not None and lower.strict:
        literals.append(NumLiteral(attribute=attribute, upper=lower.value, negated=True))
    if closed_lower is not None or closed_upper is not None:
        literals.append(NumLiteral(attribute=attribute, lower=closed_lower, upper=closed_upper))
    if upper is not None and upper.strict:
        literals.append(NumLiteral(attribute=attribute, lower=upper.value, negated=True))
    return literals


# --------------------------------------------------------------------------------------------
# Canonical form of a query


def canonical_query(expr: Expr) -> Expr:
    """``expr`` with nested ``&`` (and ``|``) flattened, repeated terms dropped, terms sorted
    by their text, and ``!(!(q))`` written ``q``: the same rows on every dataset (∧ and ∨ are
    associative, commutative and idempotent; ``!`` is the plain complement, §1.1)."""
    if isinstance(expr, Not):
        inner = canonical_query(expr.term)
        return inner.term if isinstance(inner, Not) else Not(term=inner)
    if isinstance(expr, And | Or):
        node = type(expr)
        terms: dict[str, Expr] = {}
        for term in expr.terms:
            canonical = canonical_query(term)
            parts = canonical.terms if isinstance(canonical, node) else [canonical]
            for part in parts:
                terms.setdefault(format_query(part), part)
        ordered = [terms[text] for text in sorted(terms)]
        return ordered[0] if len(ordered) == 1 else node(terms=ordered)
    return expr


def redescription_key(redescription: Redescription) -> tuple[str, str]:
    """The canonical texts of both sides: equal for redescriptions that differ only in the
    order, nesting or repetition of their terms."""
    return (
        format_query(canonical_query(redescription.left)),
        format_query(canonical_query(redescription.right)),
    )
