"""Readable text syntax for queries and redescriptions, and query builders (ALGORITHMS.md §1.1).

The syntax follows Siren/ReReMi. Grammar (EBNF; whitespace is free between tokens)::

    redescription = query , ( "<=>" | "⟺" ) , query ;
    query         = conjunction , { ( "|" | ? U+2228 logical or ? ) , conjunction } ;
    conjunction   = factor , { ( "&" | "∧" ) , factor } ;
    factor        = [ "!" | "¬" ] , literal                (* ![...]: negated literal   *)
                  | ( "!" | "¬" ) , "(" , query , ")"     (* !( ... ): Not, complement *)
                  | "(" , query , ")" ;
    literal       = "[" , body , "]" ;
    body          = name                                  (* Boolean      [A]         *)
                  | name , "=" , name                     (* categorical  [A = c]     *)
                  | number , "<=" , name , "<=" , number  (* numeric [2.5 <= A <= 10] *)
                  | name , "<=" , number                  (* [A <= 10]                *)
                  | number , "<=" , name                  (* [2.5 <= A]               *)
                  | number , ">=" , name , ">=" , number  (* input only: [10 >= A >= 2.5] *)
                  | name , ">=" , number                  (* input only: [A >= 2.5]   *)
                  | number , ">=" , name ;                (* input only: [10 >= A]    *)
    name          = bare | quoted ;
    bare          = ? text without any of []=<>!&|()" and without leading or trailing space ? ;
    quoted        = '"' , { ? any character except " and \\ ? | "\\" , ? any character ? } , '"' ;
    number        = ? a finite Python float literal: 2.5, -3, 1e-05 ? ;

``&`` binds tighter than ``|``; a chain of one operator is one ``And``/``Or`` and parentheses
keep explicit nesting (``[A] & ([B] & [C])`` is an ``And`` inside an ``And``). In a one-sided
numeric literal an attribute name that reads as a number must be quoted (``["2019" <= 5]``).
:func:`format_query` writes the canonical form: ``parse_query(format_query(e)) == e``.

Missing values: a literal is false on a row where its attribute is missing, and so is the
negated literal ``![...]``; ``!( ... )`` is the plain complement of the support, so it is true on
such rows. Hence ``!([A])`` and ``![A]`` differ exactly on the rows where A is missing.

The structural helpers and builders (:func:`literals`, :func:`attributes`, :func:`extend_query`,
:func:`serenade_query`, :func:`serenade_steps`, :func:`tree_query`, …) live in
:mod:`dpmine.wire.query_tree`, shared with the server, and are re-exported here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from dpmine.errors import QuerySyntaxError
from dpmine.wire.queries import (
    MAX_QUERY_DEPTH,
    MAX_QUERY_LITERALS,
    And,
    AnyLiteral,
    BoolLiteral,
    CatLiteral,
    Expr,
    Not,
    NumLiteral,
    Or,
    Redescription,
    check_query_limits,
    register_text_parser,
)
from dpmine.wire.query_tree import (
    SerenadeOp,
    attributes,
    extend_query,
    literals,
    query_length,
    serenade_query,
    serenade_steps,
    tree_query,
)

__all__ = [
    "QuerySyntaxError",
    "SerenadeOp",
    "attributes",
    "extend_query",
    "format_number",
    "format_query",
    "format_redescription",
    "literals",
    "parse_query",
    "parse_redescription",
    "query_length",
    "serenade_query",
    "serenade_steps",
    "tree_query",
]

_SPECIAL = frozenset('[]=<>!&|()"')
_NOT = ("!", "¬")
_AND = ("&", "∧")
_OR = ("|", "\N{LOGICAL OR}")
_IFF = ("<=>", "⟺")
_COMPARISONS = ("<=", ">=", "=")
_MAX_NAME_LENGTH = 200
#: Parentheses may be redundant, so they may nest deeper than the query; this bounds recursion.
_MAX_GROUP_NESTING = 4 * MAX_QUERY_DEPTH
_QUOTE_HINT = 'names containing any of []=<>!&|()" or edge spaces must be in double quotes'


# --------------------------------------------------------------------------------------------
# Formatting


def format_query(expr: Expr, *, digits: int | None = None) -> str:
    """Canonical text of a query: ``parse_query(format_query(e)) == e``. With ``digits``, a text
    for display whose numeric thresholds are rounded to that many significant digits (it no
    longer parses back to ``e`` exactly)."""
    if isinstance(expr, And):
        return " & ".join(_operand(term, (And, Or), digits) for term in expr.terms)
    if isinstance(expr, Or):
        return " | ".join(_operand(term, (Or,), digits) for term in expr.terms)
    if isinstance(expr, Not):
        return f"!({format_query(expr.term, digits=digits)})"
    return _format_literal(expr, digits)


def format_redescription(redescription: Redescription) -> str:
    """Canonical text ``LEFT <=> RIGHT`` of a redescription."""
    return f"{format_query(redescription.left)} <=> {format_query(redescription.right)}"


def _operand(expr: Expr, grouped: tuple[type[And] | type[Or], ...], digits: int | None) -> str:
    text = format_query(expr, digits=digits)
    return f"({text})" if isinstance(expr, grouped) else text


def _format_literal(literal: AnyLiteral, digits: int | None) -> str:
    prefix = "!" if literal.negated else ""
    return f"{prefix}[{_literal_body(literal, digits)}]"


def _literal_body(literal: AnyLiteral, digits: int | None) -> str:
    if isinstance(literal, BoolLiteral):
        return _quote(literal.attribute)
    if isinstance(literal, CatLiteral):
        return f"{_quote(literal.attribute)} = {_quote(literal.category)}"
    return _numeric_body(literal, digits)


def _numeric_body(literal: NumLiteral, digits: int | None) -> str:
    one_sided = literal.lower is None or literal.upper is None
    parts = [_quote(literal.attribute, numeric_ambiguous=one_sided)]
    if literal.lower is not None:
        parts.insert(0, format_number(literal.lower, digits))
    if literal.upper is not None:
        parts.append(format_number(literal.upper, digits))
    return " <= ".join(parts)


def format_number(value: float, digits: int | None = None) -> str:
    """``repr`` of a threshold (exact), or rounded to ``digits`` significant digits for display:
    ``format_number(0.30000000000000004, 4) == "0.3"``, ``format_number(123456.7, 4) ==
    "123500"``."""
    if digits is None:
        return repr(float(value))
    rounded = float(f"{float(value):.{digits}g}")
    return f"{rounded:.{max(digits, 6)}g}"


def _quote(name: str, *, numeric_ambiguous: bool = False) -> str:
    if not _needs_quotes(name, numeric_ambiguous=numeric_ambiguous):
        return name
    escaped = name.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def _needs_quotes(name: str, *, numeric_ambiguous: bool) -> bool:
    return (
        not name
        or name != name.strip()
        or any(char in _SPECIAL for char in name)
        or (numeric_ambiguous and _as_float(name) is not None)
    )


def _as_float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


# --------------------------------------------------------------------------------------------
# Parsing


def parse_query(text: str) -> Expr:
    """Parse the text syntax of the module docstring; raise :class:`QuerySyntaxError`."""
    parser = _Parser(text)
    expr = parser.query()
    parser.expect_end()
    return _within_limits(text, expr, side="query")


def parse_redescription(text: str) -> Redescription:
    """Parse ``LEFT <=> RIGHT`` (also ``⟺``); raise :class:`QuerySyntaxError`."""
    parser = _Parser(text)
    left = _within_limits(text, parser.query(), side="left query")
    parser.expect(_IFF, "'<=>' between the left and the right query", "write LEFT <=> RIGHT")
    parser.literal_count = 0
    right = _within_limits(text, parser.query(), side="right query")
    parser.expect_end()
    return Redescription(left=left, right=right)


def _within_limits(text: str, expr: Expr, *, side: str) -> Expr:
    try:
        check_query_limits(expr, side=side)
    except ValueError as exc:
        raise QuerySyntaxError(
            text, 1, f"{side} exceeds the size limits", f"{exc}; simplify the query"
        ) from exc
    return expr


@dataclass(frozen=True)
class _Token:
    """A name or number inside a literal; ``start`` is its 0-based offset in the text."""

    text: str
    quoted: bool
    start: int


class _Parser:
    """Recursive-descent parser over one text (grammar in the module docstring)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.literal_count = 0
        self.nesting = 0

    # -- low-level helpers

    def error(
        self, expected: str, hint: str, *, at: int | None = None, found: str | None = None
    ) -> QuerySyntaxError:
        pos = self.pos if at is None else at
        if found is None:
            found = "end of input" if pos >= len(self.text) else repr(self.text[pos])
        return QuerySyntaxError(self.text, pos + 1, f"expected {expected}", hint, found)

    def skip_space(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def peek(self, options: Sequence[str]) -> str | None:
        self.skip_space()
        return next((opt for opt in options if self.text.startswith(opt, self.pos)), None)

    def accept(self, options: Sequence[str]) -> str | None:
        found = self.peek(options)
        if found is not None:
            self.pos += len(found)
        return found

    def expect(self, options: Sequence[str], expected: str, hint: str) -> str:
        found = self.accept(options)
        if found is None:
            raise self.error(expected, hint)
        return found

    def expect_end(self) -> None:
        if self.peek(_IFF) is not None:
            raise self.error(
                "end of input", "'<=>' appears once, between the two sides of parse_redescription"
            )
        if self.peek((")",)) is not None:
            raise self.error("end of input", "remove the unbalanced ')'")
        if self.pos < len(self.text):
            raise self.error("'&', '|' or end of input", "join terms with '&' or '|'")

    # -- expressions

    def query(self) -> Expr:
        terms: list[Expr] = [self.conjunction()]
        while self.accept(_OR) is not None:
            terms.append(self.conjunction())
        return terms[0] if len(terms) == 1 else Or(terms=terms)

    def conjunction(self) -> Expr:
        terms: list[Expr] = [self.factor()]
        while self.accept(_AND) is not None:
            terms.append(self.factor())
        return terms[0] if len(terms) == 1 else And(terms=terms)

    def factor(self) -> Expr:
        negated = self.accept(_NOT) is not None
        if self.peek(("[",)) is not None:
            return self.literal(negated=negated)
        if self.peek(("(",)) is not None:
            group = self.group()
            return Not(term=group) if negated else group
        if negated:
            raise self.error("'[' or '(' after '!'", "negate a literal as ![A], a group as !(...)")
        raise self.error("a literal '[...]', '!' or '('", "write a literal such as [A] or [A = c]")

    def group(self) -> Expr:
        self.nesting += 1
        if self.nesting > _MAX_GROUP_NESTING:
            raise self.error(
                f"at most {_MAX_GROUP_NESTING} nested parentheses", "remove redundant ones"
            )
        self.pos += 1  # the '(' seen by peek
        expr = self.query()
        self.expect((")",), "')'", "close the group with ')'")
        self.nesting -= 1
        return expr

    # -- literals

    def literal(self, *, negated: bool) -> AnyLiteral:
        start = self.pos
        self.literal_count += 1
        if self.literal_count > MAX_QUERY_LITERALS:
            raise self.error(
                f"at most {MAX_QUERY_LITERALS} literals",
                "shorten the query",
                found=f"literal {self.literal_count}",
            )
        self.pos += 1  # the '[' seen by peek
        first = self.operand("an attribute name")
        if self.accept(("]",)) is not None:
            return BoolLiteral(attribute=self.attribute(first), negated=negated)
        op = self.comparison()
        second = self.operand("a category" if op == "=" else "a number or an attribute name")
        if op == "=":
            self.expect(("]",), "']'", "close the literal with ']'")
            category = self.checked_name(second, "category")
            return CatLiteral(attribute=self.attribute(first), category=category, negated=negated)
        tokens = [first, second, *self.second_bound(op)]
        if op == ">=":
            tokens.reverse()
        return self.numeric(tokens, negated=negated, start=start)

    def comparison(self) -> str:
        found = self.accept(_COMPARISONS)
        if found is not None:
            return found
        raise self.error("']', '=', '<=' or '>='", self.comparison_hint())

    def comparison_hint(self) -> str:
        if self.peek(("<", ">")) is not None:
            return "bounds are closed: write '<=' or '>='"
        if self.pos < len(self.text) and self.text[self.pos] in _SPECIAL:
            return f"close the literal with ']'; {_QUOTE_HINT}"
        return "close the literal with ']'"

    def second_bound(self, op: str) -> list[_Token]:
        if self.accept(("]",)) is not None:
            return []
        self.expect(
            (op,),
            f"']' or '{op}'",
            "close the literal with ']' or give a second bound: [2.5 <= A <= 10]",
        )
        token = self.operand("a number")
        self.expect(("]",), "']'", "close the literal with ']'")
        return [token]

    def operand(self, what: str) -> _Token:
        self.skip_space()
        start = self.pos
        if self.text.startswith('"', start):
            return _Token(self.quoted(), quoted=True, start=start)
        end = start
        while end < len(self.text) and self.text[end] not in _SPECIAL:
            end += 1
        bare = self.text[start:end].strip()
        if not bare:
            raise self.error(what, _QUOTE_HINT)
        self.pos = end
        return _Token(bare, quoted=False, start=start)

    def quoted(self) -> str:
        opening = self.pos
        pos = opening + 1
        chars: list[str] = []
        while pos < len(self.text):
            char = self.text[pos]
            if char == '"':
                self.pos = pos + 1
                return "".join(chars)
            if char == "\\":
                pos += 1
            if pos < len(self.text):
                chars.append(self.text[pos])
            pos += 1
        raise self.error(
            f"'\"' (closing the quote from column {opening + 1})",
            'close the quote; write \\" for a quote and \\\\ for a backslash inside it',
            at=len(self.text),
        )

    def numeric(self, tokens: list[_Token], *, negated: bool, start: int) -> NumLiteral:
        if len(tokens) == 3:
            lower, name, upper = tokens
            return self.num_literal(name, self.number(lower), self.number(upper), negated, start)
        left, right = tokens
        if self.is_number(right) and not self.is_number(left):
            return self.num_literal(left, None, self.number(right), negated, start)
        if self.is_number(left) and not self.is_number(right):
            return self.num_literal(right, self.number(left), None, negated, start)
        if self.is_number(left):
            raise self.error(
                "an attribute name on one side",
                'both sides read as numbers: quote the attribute name, e.g. ["2019" <= 5]',
                at=left.start,
                found=repr(left.text),
            )
        raise self.error(
            "a number on one side of the comparison",
            "write a bound as [A <= 10] or [2.5 <= A]; numbers are not quoted",
            at=right.start,
            found=repr(right.text),
        )

    def num_literal(
        self, name: _Token, lower: float | None, upper: float | None, negated: bool, start: int
    ) -> NumLiteral:
        attribute = self.attribute(name)
        if lower is not None and upper is not None and lower > upper:
            raise self.error(
                "a lower bound at most the upper bound",
                "swap the bounds: [lower <= A <= upper]",
                at=start,
                found=f"{lower!r} > {upper!r}",
            )
        return NumLiteral(attribute=attribute, lower=lower, upper=upper, negated=negated)

    def is_number(self, token: _Token) -> bool:
        return not token.quoted and _as_float(token.text) is not None

    def number(self, token: _Token) -> float:
        value = None if token.quoted else _as_float(token.text)
        if value is None:
            raise self.error(
                "a number",
                "write numbers without quotes, e.g. 2.5 or 1e-05",
                at=token.start,
                found=repr(token.text),
            )
        if not math.isfinite(value):
            raise self.error(
                "a finite number",
                "leave the bound out for an open side, e.g. [A <= 10]",
                at=token.start,
                found=repr(token.text),
            )
        return value

    def attribute(self, token: _Token) -> str:
        if not token.text:
            raise self.error(
                "a non-empty attribute name", "name the attribute", at=token.start, found='""'
            )
        return self.checked_name(token, "attribute name")

    def checked_name(self, token: _Token, what: str) -> str:
        if len(token.text) > _MAX_NAME_LENGTH:
            raise self.error(
                f"{_article(what)} {what} of at most {_MAX_NAME_LENGTH} characters",
                f"shorten the {what}",
                at=token.start,
                found=f"{len(token.text)} characters",
            )
        return token.text


def _article(noun: str) -> str:
    """``a`` or ``an`` before ``noun``."""
    return "an" if noun[:1].lower() in "aeiou" else "a"


register_text_parser(parse_query)  # query fields of requests accept this text syntax
