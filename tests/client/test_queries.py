"""Text syntax of queries and the Serenade/tree builders (dpmine.queries, ALGORITHMS.md §1.1)."""

from __future__ import annotations

from typing import cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dpmine.queries
from dpmine.errors import EXCERPT_WIDTH, DPMineError, ParameterError
from dpmine.queries import (
    QuerySyntaxError,
    SerenadeOp,
    attributes,
    extend_query,
    format_number,
    format_query,
    format_redescription,
    literals,
    parse_query,
    parse_redescription,
    query_length,
    serenade_query,
    serenade_steps,
    tree_query,
)
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
)

A = BoolLiteral(attribute="A")
B = BoolLiteral(attribute="B")
C = BoolLiteral(attribute="C")
D = BoolLiteral(attribute="D")
NOT_A = BoolLiteral(attribute="A", negated=True)
CAT = CatLiteral(attribute="colour", category="dark red")
LOW = NumLiteral(attribute="x", lower=2.5)
HIGH = NumLiteral(attribute="x", upper=10.0)
BOTH = NumLiteral(attribute="x", lower=2.5, upper=10.0)

_SETTINGS = settings(max_examples=300, deadline=None, derandomize=True, database=None)


def test_all_is_sorted_and_complete() -> None:
    assert dpmine.queries.__all__ == sorted(dpmine.queries.__all__)
    assert all(hasattr(dpmine.queries, name) for name in dpmine.queries.__all__)


class TestLiterals:
    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("[A]", A),
            ("![A]", NOT_A),
            ("¬[A]", NOT_A),
            ("! [A]", NOT_A),
            ("[colour = dark red]", CAT),
            ("[2.5 <= x]", LOW),
            ("[x <= 10]", HIGH),
            ("[2.5 <= x <= 10]", BOTH),
            ("[x >= 2.5]", LOW),
            ("[10 >= x]", HIGH),
            ("[10 >= x >= 2.5]", BOTH),
            ("![2.5 <= x <= 10]", BOTH.model_copy(update={"negated": True})),
            ("  [ A ]  ", A),
            ("[-1e-3 <= x]", NumLiteral(attribute="x", lower=-0.001)),
            ("[x <= 1E+300]", NumLiteral(attribute="x", upper=1e300)),
            ("[x <= 1_000]", NumLiteral(attribute="x", upper=1000.0)),
        ],
    )
    def test_parse(self, text: str, expected: Expr) -> None:
        assert parse_query(text) == expected

    @pytest.mark.parametrize(
        ("expr", "text"),
        [
            (A, "[A]"),
            (NOT_A, "![A]"),
            (CAT, "[colour = dark red]"),
            (LOW, "[2.5 <= x]"),
            (HIGH, "[x <= 10.0]"),
            (BOTH, "[2.5 <= x <= 10.0]"),
            (NumLiteral(attribute="x", lower=1e-5), "[1e-05 <= x]"),
            (NumLiteral(attribute="x", upper=-0.0), "[x <= -0.0]"),
            (NumLiteral(attribute="x", upper=5e-324), "[x <= 5e-324]"),
            (NumLiteral(attribute="x", lower=0.1, upper=1e22), "[0.1 <= x <= 1e+22]"),
        ],
    )
    def test_format(self, expr: Expr, text: str) -> None:
        assert format_query(expr) == text
        assert parse_query(text) == expr

    def test_negated_literal_differs_from_not_of_literal(self) -> None:
        # ![A] is false on missing A; !([A]) is the complement, true there (§1.1).
        assert parse_query("![A]") == NOT_A
        assert parse_query("!([A])") == Not(term=A)
        assert format_query(Not(term=A)) == "!([A])"
        assert format_query(Not(term=NOT_A)) == "!(![A])"


class TestQuoting:
    @pytest.mark.parametrize(
        ("expr", "text"),
        [
            (BoolLiteral(attribute="age: 30-39 y.o."), "[age: 30-39 y.o.]"),
            (
                BoolLiteral(attribute="ünïcødé ∧ \N{LOGICAL OR} ¬ ⟺"),
                "[ünïcødé ∧ \N{LOGICAL OR} ¬ ⟺]",
            ),
            (CatLiteral(attribute="odd = name", category="x"), '["odd = name" = x]'),
            (CatLiteral(attribute="A", category=""), '[A = ""]'),
            (CatLiteral(attribute="A", category=" padded "), '[A = " padded "]'),
            (BoolLiteral(attribute='say "hi"'), r'["say \"hi\""]'),
            (BoolLiteral(attribute="a\\b"), "[a\\b]"),
            (BoolLiteral(attribute="(a|b)"), '["(a|b)"]'),
            (BoolLiteral(attribute="x[1] & !y"), '["x[1] & !y"]'),
            (BoolLiteral(attribute='back\\slash "q" <'), r'["back\\slash \"q\" <"]'),
            # An attribute that reads as a number is quoted only where it would be ambiguous.
            (BoolLiteral(attribute="2019"), "[2019]"),
            (CatLiteral(attribute="2019", category="7"), "[2019 = 7]"),
            (NumLiteral(attribute="2019", upper=5.0), '["2019" <= 5.0]'),
            (NumLiteral(attribute="inf", lower=5.0), '[5.0 <= "inf"]'),
            (NumLiteral(attribute="2019", lower=1.0, upper=5.0), "[1.0 <= 2019 <= 5.0]"),
        ],
    )
    def test_quotes_only_when_needed(self, expr: Expr, text: str) -> None:
        assert format_query(expr) == text
        assert parse_query(text) == expr

    def test_redundant_quotes_are_accepted(self) -> None:
        assert parse_query('["A" = "dark red"]') == CatLiteral(attribute="A", category="dark red")
        assert parse_query(r'["\A"]') == A


class TestOperators:
    def test_precedence_and_binds_tighter(self) -> None:
        assert parse_query("[A] | [B] & [C]") == Or(terms=[A, And(terms=[B, C])])
        assert parse_query("[A] & [B] | [C]") == Or(terms=[And(terms=[A, B]), C])
        assert parse_query("([A] | [B]) & [C]") == And(terms=[Or(terms=[A, B]), C])

    def test_chains_flatten(self) -> None:
        assert parse_query("[A] & [B] & [C] & [D]") == And(terms=[A, B, C, D])
        assert parse_query("[A] | [B] | [C]") == Or(terms=[A, B, C])
        assert parse_query("[A] ∧ [B] & [C]") == And(terms=[A, B, C])

    def test_parentheses_keep_explicit_nesting(self) -> None:
        nested_and = And(terms=[A, And(terms=[B, C])])
        nested_or = Or(terms=[Or(terms=[A, B]), C])
        assert parse_query("[A] & ([B] & [C])") == nested_and
        assert parse_query("([A] | [B]) | [C]") == nested_or
        assert format_query(nested_and) == "[A] & ([B] & [C])"
        assert format_query(nested_or) == "([A] | [B]) | [C]"
        assert parse_query("((([A])))") == A

    def test_not_of_compound(self) -> None:
        expr = Not(term=Or(terms=[A, And(terms=[B, C])]))
        assert parse_query("!([A] | [B] & [C])") == expr
        assert parse_query("¬([A] \N{LOGICAL OR} [B] ∧ [C])") == expr
        assert format_query(expr) == "!([A] | [B] & [C])"
        assert parse_query("!(!([A]))") == Not(term=Not(term=A))

    @pytest.mark.parametrize(
        ("text", "canonical"),
        [
            ("¬[A] ∧ [B] \N{LOGICAL OR} [C]", "![A] & [B] | [C]"),
            ("([A] & [B]) | [C]", "[A] & [B] | [C]"),
            ("[A] & ([B] | [C])", "[A] & ([B] | [C])"),
            ("[A]&[B]|!([C]&[D])", "[A] & [B] | !([C] & [D])"),
            ("[10 >= x >= 2.5] & [colour = dark red]", "[2.5 <= x <= 10.0] & [colour = dark red]"),
            ("!( [A] )", "!([A])"),
        ],
    )
    def test_canonical_form(self, text: str, canonical: str) -> None:
        assert format_query(parse_query(text)) == canonical
        assert format_query(parse_query(canonical)) == canonical


class TestErrors:
    @pytest.mark.parametrize(
        ("text", "column", "fragment"),
        [
            ("[A <= 3", 8, "expected ']' or '<=' at column 8"),
            ("[A < 3]", 4, "bounds are closed"),
            ("[A] [B]", 5, "join terms with '&' or '|'"),
            ("", 1, "expected a literal"),
            ("[A] & ", 7, "expected a literal"),
            ("!A", 2, "expected '[' or '(' after '!'"),
            ("([A]", 5, "expected ')'"),
            ("[A] )", 5, "unbalanced ')'"),
            ("[A] <=> [B]", 5, "parse_redescription"),
            ("[A <= B]", 7, "expected a number on one side"),
            ("[1 <= 2]", 2, "quote the attribute name"),
            ("[3 <= A <= 1]", 1, "swap the bounds"),
            ('["abc', 6, "closing the quote from column 2"),
            ('["abc\\"]', 9, "closing the quote from column 2"),
            ("[A <= inf]", 7, "expected a finite number"),
            ("[nan <= A]", 2, "expected a finite number"),
            ("[A & B]", 4, "quote"),
            ("[]", 2, "expected an attribute name"),
            ('[""]', 2, "non-empty attribute name"),
            ('["" <= 3]', 2, "non-empty attribute name"),
            ("[A = ]", 6, "expected a category"),
            ("[A = c = d]", 8, "expected ']'"),
            ("[1 <= A >= 3]", 9, "expected ']' or '<='"),
            ('[A <= "3"]', 7, "numbers are not quoted"),
            ("[2 <= A <= x]", 12, "expected a number"),
            ("[A] & [B", 9, "expected ']'"),
        ],
    )
    def test_position_and_fix(self, text: str, column: int, fragment: str) -> None:
        with pytest.raises(QuerySyntaxError) as info:
            parse_query(text)
        assert info.value.column == column
        assert fragment in str(info.value)
        assert f'in "{text}"' in str(info.value)
        assert isinstance(info.value, ValueError)

    def test_message_shape(self) -> None:
        with pytest.raises(QuerySyntaxError) as info:
            parse_query("[A <= 3")
        assert str(info.value) == (
            "expected ']' or '<=' at column 8 in \"[A <= 3\" but found end of input; "
            "close the literal with ']' or give a second bound: [2.5 <= A <= 10]"
        )

    def test_name_too_long(self) -> None:
        with pytest.raises(QuerySyntaxError, match="at most 200 characters") as info:
            parse_query(f"[A = {'c' * 201}]")
        assert info.value.column == 6
        assert parse_query(f"[{'a' * 200}]") == BoolLiteral(attribute="a" * 200)

    def test_names_take_the_right_article(self) -> None:
        with pytest.raises(QuerySyntaxError) as info:
            parse_query(f"[{'a' * 201}]")
        assert "expected an attribute name of at most 200 characters" in str(info.value)
        assert "found 201 characters; shorten the attribute name" in str(info.value)
        with pytest.raises(QuerySyntaxError, match="expected a category of at most 200"):
            parse_query(f"[A = {'c' * 201}]")

    def test_a_huge_text_is_quoted_around_the_column_only(self) -> None:
        text = "[A] & " * 200_000 + "[B"
        with pytest.raises(QuerySyntaxError) as info:
            parse_query(text)
        message = str(info.value)
        assert len(message) < 250, message
        assert info.value.column == 7 * 64 - 63  # the 65th literal
        quoted = message.split(' in "', 1)[1].split('"', 1)[0]
        assert len(quoted) <= EXCERPT_WIDTH + 2  # two "…" marks
        assert quoted.startswith("…")
        assert quoted.endswith("…")
        assert f"(of a {len(text)}-character text)" in message
        assert info.value.text == text  # the whole text stays available

    def test_the_excerpt_ends_at_the_error_near_the_end(self) -> None:
        text = "[A] & " * 20 + "[B <= 1"
        with pytest.raises(QuerySyntaxError) as info:
            parse_query(text)
        quoted = str(info.value).split(' in "', 1)[1].split('"', 1)[0]
        assert quoted == "…" + text[-EXCERPT_WIDTH:]
        assert info.value.column == len(text) + 1

    def test_a_long_found_token_is_shortened_and_the_message_is_one_line(self) -> None:
        with pytest.raises(QuerySyntaxError) as info:
            parse_query('[A <= "' + "9" * 500 + '"]')
        message = str(info.value)
        assert "numbers are not quoted" in message
        assert len(message) < 300
        with pytest.raises(QuerySyntaxError) as multi:
            parse_query("[A] &\n\t[B")
        assert "\n" not in str(multi.value)
        assert 'in "[A] &  [B"' in str(multi.value)

    def test_the_error_is_a_dpmine_parameter_error(self) -> None:
        with pytest.raises(ParameterError):
            parse_query("[A")
        with pytest.raises(DPMineError):
            parse_redescription("[A] <=>")


class TestDisplayPrecision:
    def test_thresholds_rounded_for_display_only(self) -> None:
        expr = parse_query("[0.30000000000000004 <= A <= 123456.789] & ![B <= 2.0000001]")
        assert format_query(expr, digits=4) == "[0.3 <= A <= 123500] & ![B <= 2]"
        assert parse_query(format_query(expr)) == expr  # the canonical text stays exact

    @pytest.mark.parametrize(
        ("value", "shown"),
        [(0.30000000000000004, "0.3"), (1e-7, "1e-07"), (-3.14159, "-3.142"), (2.0, "2")],
    )
    def test_format_number(self, value: float, shown: str) -> None:
        assert format_number(value, 4) == shown
        assert format_number(value) == repr(value)

    def test_a_rounded_one_sided_number_name_is_still_quoted(self) -> None:
        expr = NumLiteral(attribute="2019", upper=0.123456789)
        assert format_query(expr, digits=4) == '["2019" <= 0.1235]'


class TestLimits:
    def test_too_many_literals(self) -> None:
        ok = " & ".join(f"[A{i}]" for i in range(MAX_QUERY_LITERALS))
        assert query_length(parse_query(ok)) == MAX_QUERY_LITERALS
        text = f"{ok} & [extra]"
        with pytest.raises(QuerySyntaxError, match="at most 64 literals") as info:
            parse_query(text)
        assert info.value.column == text.index("[extra]") + 1

    def test_too_deep(self) -> None:
        def nots(depth: int) -> str:
            return "!(" * depth + "[A]" + ")" * depth

        assert parse_query(nots(MAX_QUERY_DEPTH - 1)) is not None
        with pytest.raises(QuerySyntaxError, match="nested 17 deep") as info:
            parse_query(nots(MAX_QUERY_DEPTH))
        assert info.value.column == 1

    def test_redundant_parentheses_are_bounded(self) -> None:
        assert parse_query("(" * 64 + "[A]" + ")" * 64) == A
        with pytest.raises(QuerySyntaxError, match="nested parentheses"):
            parse_query("(" * 65 + "[A]" + ")" * 65)

    def test_each_side_of_a_redescription_has_its_own_limit(self) -> None:
        side = " | ".join(f"[A{i}]" for i in range(MAX_QUERY_LITERALS))
        red = parse_redescription(f"{side} <=> {side}")
        assert query_length(red.left) == query_length(red.right) == MAX_QUERY_LITERALS


class TestRedescriptions:
    def test_parse_and_format(self) -> None:
        red = Redescription(left=And(terms=[A, LOW]), right=Or(terms=[CAT, Not(term=B)]))
        text = "[A] & [2.5 <= x] <=> [colour = dark red] | !([B])"
        assert format_redescription(red) == text
        assert parse_redescription(text) == red
        assert (
            parse_redescription("[A]∧[2.5 <= x] ⟺ [colour = dark red] \N{LOGICAL OR} ¬([B])") == red
        )

    @pytest.mark.parametrize(
        ("text", "column", "fragment"),
        [
            ("[A] [B]", 5, "expected '<=>'"),
            ("[A]", 4, "write LEFT <=> RIGHT"),
            ("[A] <=> ", 9, "expected a literal"),
            ("[A] <=> [B] <=> [C]", 13, "expected end of input"),
            ("[A] <=> [B", 11, "expected ']'"),
        ],
    )
    def test_errors(self, text: str, column: int, fragment: str) -> None:
        with pytest.raises(QuerySyntaxError, match=fragment) as info:
            parse_redescription(text)
        assert info.value.column == column


class TestInspection:
    def test_literals_left_to_right(self) -> None:
        expr = parse_query("[C] & !([A] | [2.5 <= x]) | ![A] & [colour = dark red]")
        assert literals(expr) == [C, A, LOW, NOT_A, CAT]
        assert attributes(expr) == {"A", "C", "x", "colour"}
        assert query_length(expr) == 5
        assert literals(A) == [A]
        assert query_length(Not(term=A)) == 1


class TestSerenade:
    def test_fold_flattens_identical_operators(self) -> None:
        assert serenade_query(A, []) == A
        assert serenade_query(A, [("and", B), ("and", C)]) == And(terms=[A, B, C])
        assert serenade_query(A, [("and", B), ("or", C)]) == Or(terms=[And(terms=[A, B]), C])
        # The operator applies to the whole current query: ((A | B) & C) | D.
        folded = serenade_query(A, [("or", B), ("and", C), ("or", D)])
        assert folded == Or(terms=[And(terms=[Or(terms=[A, B]), C]), D])
        assert format_query(folded) == "([A] | [B]) & [C] | [D]"

    def test_steps_invert_the_fold(self) -> None:
        steps: list[tuple[SerenadeOp, AnyLiteral]] = [("or", B), ("and", NOT_A), ("and", LOW)]
        assert serenade_steps(serenade_query(CAT, steps)) == (CAT, steps)
        assert serenade_steps(A) == (A, [])
        assert serenade_steps(NOT_A) == (NOT_A, [])

    @pytest.mark.parametrize(
        "text",
        [
            "!([A] & [B])",  # Not is not a Serenade step
            "[A] & ([B] | [C])",  # a compound term after the first one
            "([A] & [B]) & [C]",  # the fold would have flattened this
            "!([A]) & [B]",  # the fold starts from a literal
        ],
    )
    def test_steps_reject_other_shapes(self, text: str) -> None:
        assert serenade_steps(parse_query(text)) is None

    def test_extend_query(self) -> None:
        assert extend_query(A, "or", B) == Or(terms=[A, B])
        assert extend_query(Or(terms=[A, B]), "or", C) == Or(terms=[A, B, C])
        assert extend_query(Or(terms=[A, B]), "and", C) == And(terms=[Or(terms=[A, B]), C])
        assert extend_query(Not(term=A), "and", B) == And(terms=[Not(term=A), B])

    def test_extend_query_errors(self) -> None:
        with pytest.raises(ValueError, match="'and' or 'or'"):
            extend_query(A, cast(SerenadeOp, "xor"), B)
        full = serenade_query(A, [("and", BoolLiteral(attribute=f"B{i}")) for i in range(63)])
        with pytest.raises(ValueError, match="at most 64 literals"):
            extend_query(full, "and", C)
        alternating = serenade_query(
            A, [("and" if i % 2 else "or", BoolLiteral(attribute=f"B{i}")) for i in range(15)]
        )
        with pytest.raises(ValueError, match="nested 17 deep"):
            extend_query(alternating, "and", C)


class TestTreeQuery:
    def test_single_positive_path(self) -> None:
        assert tree_query([(True, [A])]) == A
        assert tree_query([(True, [A, LOW])]) == And(terms=[A, LOW])

    def test_negative_single_literal_path_is_the_complement(self) -> None:
        assert tree_query([(False, [A])]) == Not(term=A)
        assert tree_query([(False, [A])]) != NOT_A

    def test_disjunction_of_signed_paths(self) -> None:
        split = NumLiteral(attribute="x", upper=3.0)
        right_branch = NumLiteral(attribute="x", upper=3.0, negated=True)  # x > 3
        expr = tree_query([(True, [split, A]), (False, [right_branch, CAT]), (True, [B])])
        assert expr == Or(
            terms=[And(terms=[split, A]), Not(term=And(terms=[right_branch, CAT])), B]
        )
        assert format_query(expr) == "[x <= 3.0] & [A] | !(![x <= 3.0] & [colour = dark red]) | [B]"

    def test_errors(self) -> None:
        with pytest.raises(ValueError, match="at least one leaf path"):
            tree_query([])
        with pytest.raises(ValueError, match="at least one test"):
            tree_query([(True, [A]), (False, [])])


# --------------------------------------------------------------------------------------------
# Property tests

_SPECIAL_NAMES = st.sampled_from(
    ['a "quoted" name', "x = y", "[a]", "a\\b", " lead", "trail ", "(|&!)", "<=>", "2019",
     "-1e-05", "inf", "nan", "1_0", "٣", "¬∧\N{LOGICAL OR}⟺", "tab\there", "new\nline", "é ü"]
)  # fmt: skip
_NAMES = st.one_of(st.text(min_size=1, max_size=12), _SPECIAL_NAMES)
_CATEGORIES = st.one_of(st.text(max_size=12), _SPECIAL_NAMES)
_FLOATS = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.floats(min_value=-1e-300, max_value=1e-300),
    st.integers(-1000, 1000).map(float),
)


@st.composite
def _num_literals(draw: st.DrawFn) -> NumLiteral:
    lower = draw(st.none() | _FLOATS)
    upper = draw(_FLOATS) if lower is None else draw(st.none() | _FLOATS)
    if lower is not None and upper is not None and lower > upper:
        lower, upper = upper, lower
    return NumLiteral(attribute=draw(_NAMES), lower=lower, upper=upper, negated=draw(st.booleans()))


_LITERALS: st.SearchStrategy[AnyLiteral] = st.one_of(
    st.builds(BoolLiteral, attribute=_NAMES, negated=st.booleans()),
    st.builds(CatLiteral, attribute=_NAMES, category=_CATEGORIES, negated=st.booleans()),
    _num_literals(),
)


def _compound(children: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
    terms = st.lists(children, min_size=2, max_size=4)
    return st.one_of(
        terms.map(lambda ts: And(terms=ts)),
        terms.map(lambda ts: Or(terms=ts)),
        children.map(lambda t: Not(term=t)),
    )


def _within_limits(expr: Expr) -> bool:
    try:
        check_query_limits(expr)
    except ValueError:
        return False
    return True


_EXPRS: st.SearchStrategy[Expr] = st.recursive(_LITERALS, _compound, max_leaves=12).filter(
    _within_limits
)


@_SETTINGS
@given(_EXPRS)
def test_format_then_parse_is_identity(expr: Expr) -> None:
    text = format_query(expr)
    assert parse_query(text) == expr
    assert format_query(parse_query(text)) == text


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(_EXPRS, _EXPRS)
def test_redescription_round_trip(left: Expr, right: Expr) -> None:
    red = Redescription(left=left, right=right)
    assert parse_redescription(format_redescription(red)) == red


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(_LITERALS, st.lists(st.tuples(st.sampled_from(["and", "or"]), _LITERALS), max_size=10))
def test_serenade_fold_round_trip(
    first: AnyLiteral, steps: list[tuple[SerenadeOp, AnyLiteral]]
) -> None:
    expr = serenade_query(first, steps)
    assert serenade_steps(expr) == (first, steps)
    assert query_length(expr) == 1 + len(steps)
    assert parse_query(format_query(expr)) == expr


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(_EXPRS)
def test_serenade_steps_only_accepts_folds(expr: Expr) -> None:
    found = serenade_steps(expr)
    if found is not None:
        assert serenade_query(*found) == expr
