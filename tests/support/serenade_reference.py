"""Exact Serenade laws for the tests, computed from the spec independently of the kernels
(ALGORITHMS.md §1.4, §2.2–2.3, §7): the candidates of §2.2 and §2.3, the base measure of §7
(one unit per discrete literal, one unit per numeric attribute spread over its grid intervals or
by §1.4's threshold measure, one unit for "unextended"), weights μ·exp(c·Q) with Q from the true
supports evaluated row by row. Shared by tests/operations/test_serenade.py and
tests/privacy/test_audit_serenade.py.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
from collections import defaultdict
from collections.abc import Collection, Hashable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Literal

import pytest

from dpmine.queries import format_query, serenade_steps
from dpmine.wire import (
    AnyAttribute,
    AnyLiteral,
    BooleanAttribute,
    BoolLiteral,
    CategoricalAttribute,
    CatLiteral,
    DatasetMetadata,
    Expr,
    Not,
    NumericAttribute,
    NumLiteral,
    QualityParameters,
    Redescription,
)
from dpmine.wire.queries import And, Or
from dpmine_server.operations import redescriptions
from dpmine_server.operations.serenade import ExtensionRules, QualityParams, ThresholdMode

Side = Literal["left", "right"]
Key = tuple[Hashable, ...]
SIDES: tuple[tuple[Side, Side], ...] = (("left", "right"), ("right", "left"))
Value = bool | str | float | None
Row = dict[str, Value]


@dataclass(frozen=True)
class Data:
    """The rows as Python values (clipped numerics, None = missing) and the public metadata."""

    metadata: DatasetMetadata
    rows: tuple[Row, ...]
    #: Extra cut-points per numeric attribute (to share a neighbour's finer cells).
    cuts: tuple[tuple[str, float], ...] = ()

    @classmethod
    def parse(cls, text: str, metadata: DatasetMetadata) -> Data:
        lines = [line.split(",") for line in text.strip().splitlines()]
        header, body = lines[0], lines[1:]
        rows: list[Row] = []
        for cells in body:
            row: Row = {}
            for name, cell in zip(header, cells, strict=True):
                attribute = metadata.attribute(name)
                if cell in ("", "?"):
                    row[name] = None
                elif isinstance(attribute, BooleanAttribute):
                    row[name] = cell == "1"
                elif isinstance(attribute, CategoricalAttribute):
                    row[name] = cell
                else:
                    row[name] = min(max(float(cell), attribute.lo), attribute.hi)
            rows.append(row)
        return cls(metadata, tuple(rows))

    @property
    def everything(self) -> frozenset[int]:
        return frozenset(range(len(self.rows)))

    def holds(self, literal: AnyLiteral, row: Row) -> bool:
        value = row[literal.attribute]
        if value is None:
            return False  # §1.1: a literal and its negation are false on a missing value
        if isinstance(literal, BoolLiteral):
            inside = value is True
        elif isinstance(literal, CatLiteral):
            inside = value == literal.category
        else:
            assert isinstance(value, float)
            inside = (literal.lower is None or value >= literal.lower) and (
                literal.upper is None or value <= literal.upper
            )
        return inside != literal.negated

    def rows_of(self, expr: Expr) -> frozenset[int]:
        if isinstance(expr, And):
            return frozenset.intersection(*(self.rows_of(term) for term in expr.terms))
        if isinstance(expr, Or):
            return frozenset.union(*(self.rows_of(term) for term in expr.terms))
        if isinstance(expr, Not):
            return self.everything - self.rows_of(expr.term)
        return frozenset(r for r, row in enumerate(self.rows) if self.holds(expr, row))

    def restricted(self, allowed: Collection[str]) -> Data:
        """The same rows over the allowed attributes only: the reference law of a request whose
        ``options.columns`` is ``allowed`` (issue #21)."""
        kept = [a for a in self.metadata.attributes if a.name in allowed]
        return replace(self, metadata=self.metadata.model_copy(update={"attributes": kept}))

    def view(self, side: Side) -> list[AnyAttribute]:
        if self.metadata.kind == "views":
            return [a for a in self.metadata.attributes if a.view == side]
        return list(self.metadata.attributes)

    def values(self, name: str) -> list[float]:
        """Distinct present values of a numeric attribute, increasing (the cut-points)."""
        present = {row[name] for row in self.rows if row[name] is not None}
        present |= {value for attribute, value in self.cuts if attribute == name}
        return sorted(float(v) for v in present if isinstance(v, float))


def discrete_literals(attribute: AnyAttribute, negated: bool) -> list[AnyLiteral]:
    if isinstance(attribute, BooleanAttribute):
        return [BoolLiteral(attribute=attribute.name, negated=negated)]
    assert isinstance(attribute, CategoricalAttribute)
    return [
        CatLiteral(attribute=attribute.name, category=category, negated=negated)
        for category in attribute.categories
    ]


def grid_literals(attribute: NumericAttribute, negated: bool) -> list[AnyLiteral]:
    """§1.4 grid mode: every (lower, upper) on the grid, lower ≤ upper, not both unbounded."""
    assert attribute.grid is not None
    lowers: list[float | None] = [None, *attribute.grid]
    uppers: list[float | None] = [*attribute.grid, None]
    return [
        NumLiteral(attribute=attribute.name, lower=low, upper=high, negated=negated)
        for low in lowers
        for high in uppers
        if not (low is None and high is None) and (low is None or high is None or low <= high)
    ]


Cell = tuple[int | None, int | None]


def lattice_points(lo: float, hi: float, bits: int) -> tuple[float, ...]:
    """The public lattice lo + (hi − lo)·k/2^bits, k = 0 … 2^bits (test ranges are dyadic-exact)."""
    steps = 2**bits
    return tuple(lo + (hi - lo) * k / steps for k in range(steps + 1))


@functools.lru_cache(maxsize=16)
def lattice_point_set(lo: float, hi: float, bits: int) -> frozenset[float]:
    """:func:`lattice_points` as a set, built once per lattice: audits check every released
    bound against it (a tuple scan of 2^16 points per bound dominated their run time)."""
    return frozenset(lattice_points(lo, hi, bits))


@functools.lru_cache(maxsize=64)
def cell_measure(
    values: tuple[float, ...], lo: float, hi: float, bits: int = 16
) -> dict[Cell, float]:
    """Normalised §1.4 measure on the public lattice of every cell pair (k, j): lower bound a with
    k = 1 + #{v < a} (k = 1 … V+1) or unbounded (None); upper bound b with j = #{v ≤ b}
    (j = 0 … V) or unbounded. Each bound is unbounded w.p. ½, else a uniform lattice point; the
    pair is conditioned on a ≤ b and not both unbounded. Counted point by point."""
    points = lattice_points(lo, hi, bits)
    size, count = len(values), len(points)
    n_lower: dict[int, int] = defaultdict(int)
    n_upper: dict[int, int] = defaultdict(int)
    in_gap: dict[int, int] = defaultdict(int)
    for point in points:
        below, at_most = bisect.bisect_left(values, point), bisect.bisect_right(values, point)
        n_lower[below + 1] += 1
        n_upper[at_most] += 1
        if below == at_most:
            in_gap[below] += 1
    unit = 0.25 / count**2
    raw: dict[Cell, float] = {}
    for j in range(size + 1):
        raw[(None, j)] = unit * count * n_upper[j]
    for k in range(1, size + 2):
        raw[(k, None)] = unit * count * n_lower[k]
        for j in range(k - 1, size + 1):
            pairs = in_gap[j] * (in_gap[j] + 1) // 2 if j == k - 1 else n_lower[k] * n_upper[j]
            raw[(k, j)] = unit * pairs
    total = sum(raw.values())
    assert math.isclose(total, 0.5 + 0.25 * (count + 1) / (2 * count)), total
    return {cell: mass / total for cell, mass in raw.items() if mass > 0}


def cell_rows(data: Data, name: str, cell: Cell, negated: bool) -> frozenset[int]:
    """Rows a threshold pair of the cell selects: values in [v_k, v_j] (negated: present and
    outside)."""
    values = data.values(name)
    k, j = cell
    low = -math.inf if k is None else (values[k - 1] if k <= len(values) else math.inf)
    high = math.inf if j is None else (values[j - 1] if j >= 1 else -math.inf)
    rows: set[int] = set()
    for r, row in enumerate(data.rows):
        value = row[name]
        if value is None:
            continue
        assert isinstance(value, float)
        if (low <= value <= high) != negated:
            rows.add(r)
    return frozenset(rows)


def cell_of(data: Data, literal: NumLiteral) -> Cell:
    """The cell pair a reported threshold pair falls in; checks §1.4's reporting rules."""
    attribute = data.metadata.attribute(literal.attribute)
    assert isinstance(attribute, NumericAttribute)
    values = data.values(literal.attribute)
    points = lattice_point_set(attribute.lo, attribute.hi, attribute.lattice_bits)
    for bound in (literal.lower, literal.upper):
        if bound is not None:
            assert bound in points, f"a threshold off the public lattice was released: {literal}"
    k = None if literal.lower is None else bisect.bisect_left(values, literal.lower) + 1
    j = None if literal.upper is None else bisect.bisect_right(values, literal.upper)
    return k, j


@dataclass(frozen=True)
class Quality:
    """Q of §2.1 (or plain Jaccard), written from the formula; with the coverage factor
    σ(s₂(E00 − y0)), E00 = rows in neither support, when y0 is set."""

    s: float
    x0: float
    jaccard_only: bool = False
    y0: float | None = None
    s2: float = 0.0
    n_rows: int = 0

    @classmethod
    def of(cls, params: QualityParams, data: Data | None = None) -> Quality:
        n_rows = 0 if data is None else len(data.rows)
        s2 = params.s if params.s2 is None else params.s2
        return cls(params.s, params.x0, params.function == "jaccard", params.y0, s2, n_rows)

    def __call__(self, left: frozenset[int], right: frozenset[int]) -> float:
        union = len(left | right)
        if union == 0:
            return 0.0
        i = len(left & right)
        j = i / union
        if self.jaccard_only:
            return j
        q = j / (1.0 + math.exp(-self.s * (i - self.x0)))
        if self.y0 is not None:
            q /= 1.0 + math.exp(-self.s2 * (self.n_rows - union - self.y0))
        return q


def coefficient(params: QualityParams, epsilon: float) -> float:
    """c of §0.8: ε/(Δ_up + Δ_down) when both one-sided values are set, else ε/(2Δ)."""
    if params.delta_up is not None and params.delta_down is not None:
        return epsilon / (params.delta_up + params.delta_down)
    return epsilon / (2 * params.delta)


def combine(rows: frozenset[int], literal_rows: frozenset[int], op: str) -> frozenset[int]:
    return rows & literal_rows if op == "and" else rows | literal_rows


def normalise(weights: dict[Key, float]) -> dict[Key, float]:
    total = sum(weights.values())
    return {key: w / total for key, w in weights.items()}


def side_literals(expr: Expr) -> tuple[list[AnyLiteral], bool]:
    """The literals of a Serenade query and whether it holds a disjunction."""
    steps = serenade_steps(expr)
    assert steps is not None
    first, rest = steps
    return [first, *(literal for _op, literal in rest)], any(op == "or" for op, _ in rest)


def literal_choices(
    data: Data, attribute: AnyAttribute, *, negated: bool, mode: ThresholdMode
) -> Iterator[tuple[tuple[Hashable, ...], float, frozenset[int]]]:
    """(key part, base mass, rows) of every literal of one attribute and polarity: one unit per
    discrete literal; one unit per numeric attribute over its grid intervals or its cells."""
    if isinstance(attribute, NumericAttribute) and mode == "continuous":
        measure = cell_measure(
            tuple(data.values(attribute.name)), attribute.lo, attribute.hi, attribute.lattice_bits
        )
        for cell, mass in measure.items():
            rows = cell_rows(data, attribute.name, cell, negated)
            yield ("num", attribute.name, negated, *cell), mass, rows
        return
    if isinstance(attribute, NumericAttribute):
        choices = grid_literals(attribute, negated)
    else:
        choices = discrete_literals(attribute, negated)
    mass = 1.0 / len(choices) if isinstance(attribute, NumericAttribute) else 1.0
    for literal in choices:
        yield ("lit", attribute.name, format_query(literal)), mass, data.rows_of(literal)


def extension_law(
    data: Data,
    collection: Sequence[Redescription],
    *,
    rules: ExtensionRules,
    mode: ThresholdMode,
    params: QualityParams,
    epsilon: float,
) -> dict[Key, float]:
    """The exact law of ``extend_one`` over (position, outcome) keys (§2.2, §2.4, §7)."""
    quality = Quality.of(params, data)
    c = coefficient(params, epsilon)
    weights: dict[Key, float] = defaultdict(float)
    polarities = (False, True) if rules.negations else (False,)
    for position, red in enumerate(collection):
        exprs: dict[Side, Expr] = {"left": red.left, "right": red.right}
        rows = {side: data.rows_of(expr) for side, expr in exprs.items()}
        weights[("same", position)] += math.exp(c * quality(rows["left"], rows["right"]))
        for side, other in SIDES:
            literals, _mine_has_or = side_literals(exprs[side])
            others, other_has_or = side_literals(exprs[other])
            if len(literals) >= rules.max_literals:
                continue
            used = {lit.attribute for lit in literals}
            if data.metadata.kind != "views":
                used |= {lit.attribute for lit in others}
            operators = [
                op
                for op in sorted(rules.operators)
                if not (op == "or" and rules.single_side_or and other_has_or)
            ]
            for attribute in data.view(side):
                if attribute.name in used:
                    continue
                for negated, op in itertools.product(polarities, operators):
                    for part, mass, literal_rows in literal_choices(
                        data, attribute, negated=negated, mode=mode
                    ):
                        new = combine(rows[side], literal_rows, op)
                        pair = (new, rows["right"]) if side == "left" else (rows["left"], new)
                        key = (part[0], position, side, op, *part[1:])
                        weights[key] += mass * math.exp(c * quality(*pair))
    return normalise(weights)


def extension_key(
    data: Data,
    collection: Sequence[Redescription],
    mode: ThresholdMode,
    outcome: tuple[int, Redescription],
) -> Key:
    """The law's key of one kernel output; checks that earlier literals are unchanged."""
    position, red = outcome
    base = collection[position]
    if red == base:
        return ("same", position)
    changed = [side for side, _ in SIDES if getattr(red, side) != getattr(base, side)]
    assert len(changed) == 1, (base, red)
    side = changed[0]
    old, new = serenade_steps(getattr(base, side)), serenade_steps(getattr(red, side))
    assert old is not None
    assert new is not None
    assert (new[0], new[1][:-1]) == old, "earlier literals must stay unchanged"
    op, literal = new[1][-1]
    if isinstance(literal, NumLiteral) and mode == "continuous":
        cell = cell_of(data, literal)
        return ("num", position, side, op, literal.attribute, literal.negated, *cell)
    return ("lit", position, side, op, literal.attribute, format_query(literal))


def left_pair_literals(data: Data, negations: bool) -> list[tuple[AnyLiteral, float]]:
    """§2.3: discrete left literals (one unit each); numeric left attributes on the grid (one
    unit per attribute and polarity, spread over its intervals)."""
    polarities = (False, True) if negations else (False,)
    literals: list[tuple[AnyLiteral, float]] = []
    for attribute in data.view("left"):
        for negated in polarities:
            if isinstance(attribute, NumericAttribute):
                grid = grid_literals(attribute, negated)
                literals += [(literal, 1.0 / len(grid)) for literal in grid]
            else:
                literals += [(literal, 1.0) for literal in discrete_literals(attribute, negated)]
    return literals


def pairs_law(
    data: Data, *, negations: bool, mode: ThresholdMode, params: QualityParams, c: float
) -> dict[Key, float]:
    """The exact law of one initial-pair draw (§2.3): pair mass = left mass × right mass."""
    quality = Quality.of(params, data)
    polarities = (False, True) if negations else (False,)
    weights: dict[Key, float] = defaultdict(float)
    same_table = data.metadata.kind != "views"
    for left, left_mass in left_pair_literals(data, negations):
        left_rows = data.rows_of(left)
        for attribute in data.view("right"):
            if same_table and attribute.name == left.attribute:
                continue
            for negated in polarities:
                for part, mass, rows in literal_choices(
                    data, attribute, negated=negated, mode=mode
                ):
                    tag = "pairnum" if part[0] == "num" else "pair"
                    key = (tag, format_query(left), *part[1:])
                    weights[key] += left_mass * mass * math.exp(c * quality(left_rows, rows))
    return normalise(weights)


def pair_key(data: Data, mode: ThresholdMode, red: Redescription) -> Key:
    left, right = red.left, red.right
    assert isinstance(left, BoolLiteral | CatLiteral | NumLiteral)
    assert isinstance(right, BoolLiteral | CatLiteral | NumLiteral)
    if isinstance(right, NumLiteral) and mode == "continuous":
        cell = cell_of(data, right)
        return ("pairnum", format_query(left), right.attribute, right.negated, *cell)
    return ("pair", format_query(left), right.attribute, format_query(right))


def scaled_sensitivity(params: QualityParams, factor: float) -> QualityParams:
    """``params`` with Δ, Δ_up and Δ_down multiplied by ``factor``."""
    return replace(
        params,
        delta=params.delta * factor,
        delta_up=None if params.delta_up is None else params.delta_up * factor,
        delta_down=None if params.delta_down is None else params.delta_down * factor,
    )


@contextmanager
def understated_sensitivity(factor: float) -> Iterator[None]:
    """BROKEN on purpose, for the audits' power checks: the Serenade kernels see Δ divided by
    ``factor`` (c multiplied by it)."""
    honest = redescriptions.quality_parameters

    def broken(quality: QualityParameters, n_max: int) -> QualityParams:
        params = honest(quality, n_max)
        return scaled_sensitivity(params, 1.0 / factor)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(redescriptions, "quality_parameters", broken)
        yield
