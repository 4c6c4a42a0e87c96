"""Differentially private Bayesian rule lists (DP-BRL, ALGORITHMS.md §5) on the client.

:class:`DPBayesianRuleList` orchestrates the three charged server calls of §5.5 and predicts
locally; no data ever reaches the client:

1. ``brl.antecedents`` (ε1): K private top itemsets on each class's rows (§5.2); their union,
   deduplicated, is the public antecedent set A;
2. ``brl.sample_rule_list_exact`` or ``brl.sample_rule_list`` (ε2, a background job): a rule
   list over A drawn from exp(ε2·u(d)/(2Δu)) (§5.3) either exactly over the lists of at most
   ``max_rules`` rules (pure ε-DP; ``sampler="exact"``, the default whenever its public work
   fits the server's cap) or by MCMC over lists of any length (DP only once the chain has
   converged: ``guarantee="approximate"``), ``iterations`` steps (at least the public minimum
   :data:`~dpmine.wire.MIN_RULE_LIST_ITERATIONS`) from the server's public start, the empty
   list;
3. ``brl.point_estimates`` (ε3): noisy capture counts Ñ_{j,y} of every rule (§5.4), turned into
   the estimates PE_j = (Ñ_{j,1}+α1)/(Ñ_{j,0}+Ñ_{j,1}+α0+α1), Ñ clamped at 0, here.

By default ε1 = ε2 = ε3 = ε/3 (§5.5). The fitted :class:`RuleList` is public (post-processing of
the three releases): it renders as if / else-if text in the project's query syntax, predicts on
public rows (a pandas DataFrame, a mapping of columns, or a 2-D array with column names) and is
saved to JSON and loaded again without a server.

Local evaluation of a literal matches the server's (:mod:`dpmine.wire.queries`): cells are
stripped strings, the dataset's missing-value tokens (and None/NaN) are missing, a literal and its
negation are both false on a missing value, numeric values are clipped to the public range and
compared with closed bounds, Boolean cells read 1/0, true/false, t/f or yes/no.
"""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Literal, Self

import numpy as np
import numpy.typing as npt
from rich.progress import Progress

from dpmine.connection import DatasetHandle
from dpmine.errors import ParameterError
from dpmine.frames import PathLike, as_path, data_frame, write_csv
from dpmine.items import items_display
from dpmine.miners._base import BaseMiner, NotMinedError, _Spent
from dpmine.miners._rho import (
    EM_RHO,
    GENERIC_RHO,
    PURE,
    RENAMED_QUANTILE,
    RHO_MARGIN,
    Composition,
    check_budget,
    composition_for,
    epsilon_for_rho,
)
from dpmine.miners.trees import share_of
from dpmine.queries import format_query
from dpmine.wire import (
    BOOLEAN_FALSE,
    BOOLEAN_TRUE,
    DEFAULT_NUMERIC_BINS,
    MAX_EXACT_RULE_LIST_WORK,
    MAX_EXACT_RULES,
    MIN_RULE_LIST_ITERATIONS,
    AnyLiteral,
    BooleanAttribute,
    BoolLiteral,
    CategoricalAttribute,
    CatLiteral,
    CountNoiseKind,
    DatasetMetadata,
    JobInfo,
    LabelSpec,
    NumericAttribute,
    NumLiteral,
    PlannedCall,
    Receipt,
)
from dpmine.wire.items import usable_columns
from dpmine.wire.operations import (
    BRL_ANTECEDENTS,
    BRL_POINT_ESTIMATES,
    BRL_SAMPLE_RULE_LIST,
    BRL_SAMPLE_RULE_LIST_EXACT,
)
from dpmine.wire.rule_lists import (
    Antecedent,
    ClassAntecedents,
    PointEstimatesRequest,
    RuleListAntecedentsRequest,
    RuleListTarget,
    SampleRuleListExactRequest,
    SampleRuleListExactResponse,
    SampleRuleListRequest,
    SampleRuleListResponse,
    antecedent_universe,
    every_antecedent,
    exact_rule_list_work,
)

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "DEFAULT_ITERATIONS",
    "DEFAULT_K_PER_CLASS",
    "DEFAULT_MAX_LENGTH",
    "DEFAULT_MAX_RULES",
    "MODEL_FORMAT",
    "DPBayesianRuleList",
    "Rule",
    "RuleList",
    "Sampler",
    "antecedent_display",
    "antecedent_text",
    "label_classes",
    "point_estimate",
    "rule_counts_text",
    "union_antecedents",
]

#: Columns of :meth:`RuleList.to_csv` and :meth:`RuleList.to_frame`: the rule's place in the
#: list, its antecedent in query syntax, its released noisy counts and the estimate P(positive).
RULE_COLUMNS = ("position", "rule", "noisy_negative", "noisy_positive", "estimate")

#: Public defaults, data-independent and the same for every dataset (bench/README.md "Rule lists
#: benchmark" says how they were chosen): single-item antecedents, because the most frequent
#: pairs of a class are mostly pairs of near-universal items; K = 40 per class, or every possible
#: antecedent when the public schema allows fewer; T = 3000 steps, the thesis' largest run (§5.3),
#: three times the server's public minimum (:data:`~dpmine.wire.MIN_RULE_LIST_ITERATIONS`).
DEFAULT_K_PER_CLASS = 40
DEFAULT_MAX_LENGTH = 1
DEFAULT_ITERATIONS = 3000
#: Default L of the exact sampler: lists of at most three rules (λ = 3, the prior's mean).
DEFAULT_MAX_RULES = 3

#: How the list is sampled: ``exact`` (``brl.sample_rule_list_exact``, pure ε-DP, lists of at
#: most ``max_rules`` rules), ``mcmc`` (``brl.sample_rule_list``, approximate) or ``auto``
#: (exact when its public work fits the server's cap, else MCMC).
Sampler = Literal["auto", "exact", "mcmc"]
#: The ``format`` tag of a saved model; :meth:`RuleList.from_dict` refuses any other.
MODEL_FORMAT = "dpmine.rule_list/1"


FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
ObjectArray = npt.NDArray[np.object_]


# --------------------------------------------------------------------------------------------
# Pure pieces: antecedent set, estimates, text


def point_estimate(negative: int, positive: int, alpha: tuple[float, float] = (1.0, 1.0)) -> float:
    """PE = (Ñ1 + α1)/(Ñ0 + Ñ1 + α0 + α1) with the noisy counts clamped at 0 (§5.4)."""
    alpha_negative, alpha_positive = alpha
    kept_negative, kept_positive = max(negative, 0), max(positive, 0)
    return (kept_positive + alpha_positive) / (
        kept_negative + kept_positive + alpha_negative + alpha_positive
    )


def union_antecedents(by_class: Sequence[ClassAntecedents]) -> list[Antecedent]:
    """The antecedent set A of §5.2: the per-class lists interleaved rank by rank (positive
    class first), each antecedent kept at its first occurrence.

    The order only fixes the sampler's public start ([A_1], §5.3): the top positive itemset.
    Antecedents that differ only in the order of their items are the same conjunction.
    """
    ordered = sorted(by_class, key=lambda entry: entry.label != "positive")
    longest = max((len(entry.antecedents) for entry in ordered), default=0)
    seen: set[str] = set()
    union: list[Antecedent] = []
    for rank in range(longest):
        for entry in ordered:
            if rank >= len(entry.antecedents):
                continue
            antecedent = entry.antecedents[rank]
            key = _antecedent_key(antecedent)
            if key not in seen:
                seen.add(key)
                union.append(antecedent)
    return union


def _antecedent_key(antecedent: Antecedent) -> str:
    return "\n".join(sorted(item.model_dump_json() for item in antecedent.items))


def antecedent_text(antecedent: Antecedent, *, digits: int | None = None) -> str:
    """An antecedent in the project's query syntax, e.g. ``[odor = n] & [18.0 <= age <= 40.0]``
    (exact; with ``digits``, bounds rounded to that many significant digits: a text that may
    hold other rows, see :func:`antecedent_display`)."""
    return " & ".join(format_query(item, digits=digits) for item in antecedent.items)


def antecedent_display(antecedent: Antecedent, schema: DatasetMetadata) -> str:
    """The antecedent as short text with exactly its rows, for display (issue #21;
    :func:`dpmine.items.items_display`, the same text as the itemset display): the bins of
    ``age`` on [0, 100] with cut-points 25 and 50 read ``![25.0 <= age]``,
    ``[25.0 <= age] & ![50.0 <= age]`` and ``[50.0 <= age]``."""
    return items_display(antecedent.items, schema)


# --------------------------------------------------------------------------------------------
# Local evaluation of literals on public rows


def _is_missing(value: object, tokens: frozenset[str]) -> bool:
    """None, NaN, pandas' NA/NaT, or a missing-value token (after stripping)."""
    if value is None or type(value).__name__ in {"NAType", "NaTType"}:
        return True
    if isinstance(value, str):
        return value.strip() in tokens
    if isinstance(value, float | np.floating):
        return bool(np.isnan(value))
    return False


def _cell_text(value: object) -> str:
    """A present cell as the stripped text the server's CSV loader would have read."""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, bool | np.bool_):
        return "true" if value else "false"
    if isinstance(value, int | np.integer):
        return str(int(value))
    if isinstance(value, float | np.floating):
        number = float(value)
        return str(int(number)) if number.is_integer() else repr(number)
    return str(value).strip()


def _categorical_column(cells: ObjectArray, tokens: frozenset[str]) -> ObjectArray:
    """Category texts, None where missing (an undeclared category is a present value that
    matches no literal ``[A = c]``)."""
    return np.array(
        [None if _is_missing(cell, tokens) else _cell_text(cell) for cell in cells], dtype=object
    )


def _boolean_column(name: str, cells: ObjectArray, tokens: frozenset[str]) -> FloatArray:
    """1.0 / 0.0, NaN where missing; any other cell is an error, as on the server."""
    values = np.empty(len(cells), dtype=np.float64)
    for index, cell in enumerate(cells):
        if _is_missing(cell, tokens):
            values[index] = np.nan
            continue
        text = _cell_text(cell).lower()
        if text in BOOLEAN_TRUE:
            values[index] = 1.0
        elif text in BOOLEAN_FALSE:
            values[index] = 0.0
        else:
            raise ValueError(
                f"column {name!r}, row {index}: {cell!r} is not a Boolean "
                "(use 1/0, true/false, t/f or yes/no, or a missing-value token)"
            )
    return values


def _numeric_column(
    attribute: NumericAttribute, cells: ObjectArray, tokens: frozenset[str]
) -> FloatArray:
    """Floats clipped to the public range [lo, hi], NaN where missing."""
    values = np.empty(len(cells), dtype=np.float64)
    for index, cell in enumerate(cells):
        if _is_missing(cell, tokens):
            values[index] = np.nan
            continue
        try:
            number = float(_cell_text(cell))
        except ValueError:
            number = math.nan
        if not math.isfinite(number):
            raise ValueError(
                f"column {attribute.name!r}, row {index}: {cell!r} is not a finite number"
            )
        values[index] = number
    clipped: FloatArray = np.clip(values, attribute.lo, attribute.hi)
    return clipped


Column = ObjectArray | FloatArray


def _typed_column(
    attribute: BooleanAttribute | CategoricalAttribute | NumericAttribute,
    cells: ObjectArray,
    tokens: frozenset[str],
) -> Column:
    if isinstance(attribute, CategoricalAttribute):
        return _categorical_column(cells, tokens)
    if isinstance(attribute, BooleanAttribute):
        return _boolean_column(attribute.name, cells, tokens)
    return _numeric_column(attribute, cells, tokens)


def _literal_mask(literal: AnyLiteral, column: Column) -> BoolArray:
    """Rows where the literal holds; false on a missing value, negated or not (§1.1)."""
    if isinstance(literal, CatLiteral):
        present = np.array([cell is not None for cell in column], dtype=bool)
        test = np.array([cell == literal.category for cell in column], dtype=bool)
    else:
        numbers = np.asarray(column, dtype=np.float64)
        present = ~np.isnan(numbers)
        if isinstance(literal, BoolLiteral):
            test = numbers == 1.0
        else:
            test = present.copy()
            if literal.lower is not None:
                test &= numbers >= literal.lower
            if literal.upper is not None:
                test &= numbers <= literal.upper
    holds: BoolArray = present & (test != literal.negated)
    return holds


def _check_literal_type(
    literal: AnyLiteral, attribute: BooleanAttribute | CategoricalAttribute | NumericAttribute
) -> None:
    expected = {CatLiteral: CategoricalAttribute, BoolLiteral: BooleanAttribute}.get(
        type(literal), NumericAttribute
    )
    if not isinstance(attribute, expected):
        raise ValueError(
            f"literal {format_query(literal)} does not fit the {attribute.type} attribute "
            f"{attribute.name!r}"
        )


def _named_columns(
    rows: object, names: Sequence[str], columns: Sequence[str] | None, default: Sequence[str]
) -> dict[str, ObjectArray]:
    """The cells of the columns ``names`` from a DataFrame, a mapping of columns or a 2-D
    array (whose columns are ``columns``, else ``default``)."""
    if columns is None and hasattr(rows, "columns") and hasattr(rows, "__getitem__"):
        available = [str(name) for name in rows.columns]
        frame: Any = rows
        lookup = {str(name): name for name in frame.columns}
        missing = [name for name in names if name not in lookup]
        if missing:
            raise ValueError(f"the rows have no column {missing}; they have {available}")
        return {name: np.asarray(frame[lookup[name]], dtype=object) for name in names}
    if columns is None and isinstance(rows, Mapping):
        missing = [name for name in names if name not in rows]
        if missing:
            raise ValueError(f"the rows have no column {missing}; they have {sorted(rows)}")
        return {name: np.asarray(rows[name], dtype=object).reshape(-1) for name in names}
    table = np.asarray(rows, dtype=object)
    if table.ndim != 2:
        raise ValueError(f"expected a 2-D table of rows, got an array of shape {table.shape}")
    header = list(default if columns is None else columns)
    if len(header) != table.shape[1]:
        raise ValueError(
            f"the rows have {table.shape[1]} columns but {len(header)} names were given "
            f"({header}); pass columns=[...] with the names of the table's columns"
        )
    missing = [name for name in names if name not in header]
    if missing:
        raise ValueError(f"no column {missing} among the given column names {header}")
    return {name: table[:, header.index(name)] for name in names}


def _row_count(columns: Mapping[str, ObjectArray], rows: object) -> int:
    if columns:
        return len(next(iter(columns.values())))
    if hasattr(rows, "shape"):
        return int(rows.shape[0])
    if isinstance(rows, Mapping):
        first: Sequence[object] = next(iter(rows.values()), [])
        return len(first)
    return len(np.asarray(rows, dtype=object))


# --------------------------------------------------------------------------------------------
# The fitted model


@dataclass(frozen=True)
class Rule:
    """One rule of a fitted list: its antecedent (None for the default rule), the released
    noisy capture counts (negative, positive) and the point estimate P(positive)."""

    antecedent: Antecedent | None
    noisy_negative: int
    noisy_positive: int
    estimate: float

    @property
    def text(self) -> str:
        """The antecedent in query syntax (``"(default)"`` for the default rule)."""
        return "(default)" if self.antecedent is None else antecedent_text(self.antecedent)

    @property
    def noisy_captured(self) -> int:
        """n̂ = n̂₊ + n̂₋: the noisy number of labelled rows the rule captures (the sum of its
        two released counts; it may be ≤ 0)."""
        return self.noisy_negative + self.noisy_positive

    @property
    def estimated(self) -> bool:
        """Whether the counts estimate P at all: False when n̂ ≤ 0, where the released counts
        say only that the rule captures few rows (its :attr:`estimate` is then what the
        counts clamped at 0 and the prior α give, :func:`point_estimate`)."""
        return self.noisy_captured > 0


@dataclass(frozen=True)
class RuleList:
    """A fitted DP rule list: rules in order, then the default rule (§5.1), with the public
    schema needed to evaluate them on new rows. Capture: the first rule a row satisfies; the
    default rule's estimate applies to every row no rule captures."""

    rules: tuple[Rule, ...]
    default: Rule
    noise_scale: float
    alpha: tuple[float, float]
    schema: DatasetMetadata
    dataset_id: str = ""
    guarantee: Literal["pure", "approximate"] = "approximate"
    #: The counts' noise: discrete Laplace of scale ``noise_scale``, or on a zCDP dataset the
    #: discrete Gaussian of σ = ``noise_scale``.
    noise: CountNoiseKind = "laplace"

    @classmethod
    def from_counts(
        cls,
        antecedents: Sequence[Antecedent],
        negative_counts: Sequence[int],
        positive_counts: Sequence[int],
        *,
        noise_scale: float,
        alpha: tuple[float, float],
        schema: DatasetMetadata,
        dataset_id: str = "",
    ) -> RuleList:
        """The list from the released counts (rules 1..m, then the default rule last)."""
        if not len(negative_counts) == len(positive_counts) == len(antecedents) + 1:
            raise ValueError(
                f"{len(antecedents)} rules need {len(antecedents) + 1} counts per class, got "
                f"{len(negative_counts)} and {len(positive_counts)}"
            )
        if schema.label is None:
            raise ValueError("the schema declares no label column")
        rules = [
            Rule(a, int(n0), int(n1), point_estimate(n0, n1, alpha))
            for a, n0, n1 in zip(antecedents, negative_counts, positive_counts, strict=False)
        ]
        n0, n1 = negative_counts[-1], positive_counts[-1]
        for antecedent in antecedents:
            for item in antecedent.items:
                _check_literal_type(item, schema.attribute(item.attribute))
        return cls(
            rules=tuple(rules),
            default=Rule(None, int(n0), int(n1), point_estimate(n0, n1, alpha)),
            noise_scale=noise_scale,
            alpha=alpha,
            schema=schema,
            dataset_id=dataset_id,
        )

    @property
    def label(self) -> LabelSpec:
        """The label column and its positive value (declared by the data owner)."""
        assert self.schema.label is not None  # checked when built
        return self.schema.label

    @property
    def classes(self) -> tuple[str, str]:
        """(negative, positive) class names (:func:`label_classes`): the other category of a
        two-category label, ``"not <positive>"`` for more, ``"False"``/``"True"`` for a
        Boolean label."""
        return label_classes(self.label, self.schema)

    def __len__(self) -> int:
        return len(self.rules)

    @property
    def average_antecedent_length(self) -> float:
        """Mean number of items per antecedent (0 for an empty list)."""
        if not self.rules:
            return 0.0
        return sum(len(r.antecedent.items) for r in self.rules if r.antecedent) / len(self.rules)

    # -- prediction ----------------------------------------------------------------------------

    def _used_attributes(self) -> list[str]:
        names: list[str] = []
        for rule in self.rules:
            assert rule.antecedent is not None
            for item in rule.antecedent.items:
                if item.attribute not in names:
                    names.append(item.attribute)
        return names

    def _default_columns(self, width: int) -> list[str]:
        names = [a.name for a in self.schema.attributes]
        features = [name for name in names if name != self.label.attribute]
        return features if width == len(features) else names

    def capture(
        self, rows: object, *, columns: Sequence[str] | None = None
    ) -> npt.NDArray[np.int64]:
        """Index of the rule capturing each row: 0..m-1, or m for the default rule.

        ``rows``: a pandas DataFrame, a mapping column → values, or a 2-D array whose columns
        are ``columns`` (default: the schema's attributes, with or without the label).
        """
        names = self._used_attributes()
        width = np.asarray(rows, dtype=object).shape[1] if _is_plain_table(rows) else 0
        cells = _named_columns(rows, names, columns, self._default_columns(width))
        tokens = frozenset(self.schema.missing_values)
        typed = {
            name: _typed_column(self.schema.attribute(name), cells[name], tokens) for name in names
        }
        count = _row_count(cells, rows)
        captured = np.full(count, len(self.rules), dtype=np.int64)
        free = np.ones(count, dtype=bool)
        for index, rule in enumerate(self.rules):
            assert rule.antecedent is not None
            holds = free.copy()
            for item in rule.antecedent.items:
                holds &= _literal_mask(item, typed[item.attribute])
            captured[holds] = index
            free &= ~holds
        return captured

    def predict_proba(self, rows: object, *, columns: Sequence[str] | None = None) -> FloatArray:
        """(n, 2) probabilities of (negative, positive): the capturing rule's estimate."""
        estimates = np.array([r.estimate for r in (*self.rules, self.default)], dtype=np.float64)
        positive = estimates[self.capture(rows, columns=columns)]
        proba: FloatArray = np.column_stack([1.0 - positive, positive])
        return proba

    # -- text ----------------------------------------------------------------------------------

    def to_text(self, *, digits: int = 3) -> str:
        """The list as if / else-if text, each rule with its estimate (``digits`` decimals) and
        its noisy counts named (:func:`rule_counts_text`), then what the counts are. Each
        antecedent is :func:`antecedent_display`: short, and with exactly the rows the server
        evaluated, so rule j's counts are those of the rows its text holds and no earlier text
        holds (:attr:`Rule.text` is the antecedent as fitted)."""
        target = f"P({_class_events(self.label, self.schema)[1]})"
        lines = []
        for index, rule in enumerate(self.rules):
            keyword = "if" if index == 0 else "else if"
            shown = (
                rule.text
                if rule.antecedent is None
                else antecedent_display(rule.antecedent, self.schema)
            )
            lines.append(f"{keyword} {shown} then {_estimate_text(rule, target, digits)}")
        keyword = "else" if self.rules else "always"
        lines.append(f"{keyword} {_estimate_text(self.default, target, digits)}")
        lines.extend(self._counts_legend())
        return "\n".join(lines)

    def _counts_legend(self) -> list[str]:
        """Two lines saying which noisy count is which, their noise and how P uses them."""
        negative, positive = _class_events(self.label, self.schema)
        return [
            f"(noisy counts of the labelled rows a rule captures: n̂₊ with {positive}, "
            f"n̂₋ with {negative}, captured n̂ = n̂₊ + n̂₋; each count has {self._noise_text()}, "
            "so it may be negative;",
            f" P = (n̂₊ + α1)/(n̂₊ + n̂₋ + α0 + α1) with a negative count read as 0, "
            f"α = ({self.alpha[0]:g}, {self.alpha[1]:g}); n̂ ≤ 0: too few rows to estimate; "
            f"guarantee: {self.guarantee})",
        ]

    def _noise_text(self) -> str:
        if self.noise == "discrete_gaussian":
            return f"discrete Gaussian noise of σ {self.noise_scale:.3g}"
        return f"discrete Laplace noise of scale {self.noise_scale:.3g}"

    def __str__(self) -> str:
        return self.to_text()

    # -- JSON ----------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready description (everything needed to predict; all of it public)."""

        def rule_dict(rule: Rule) -> dict[str, Any]:
            return {
                "text": rule.text,
                "antecedent": None
                if rule.antecedent is None
                else rule.antecedent.model_dump(mode="json"),
                "noisy_negative": rule.noisy_negative,
                "noisy_positive": rule.noisy_positive,
                "noisy_captured": rule.noisy_captured,
                "estimated": rule.estimated,
                "estimate": rule.estimate,
            }

        return {
            "format": MODEL_FORMAT,
            "dataset_id": self.dataset_id,
            "guarantee": self.guarantee,
            "label": self.label.model_dump(mode="json"),
            "classes": list(self.classes),
            "alpha": list(self.alpha),
            "noise_scale": self.noise_scale,
            "noise": self.noise,
            "rules": [rule_dict(rule) for rule in self.rules],
            "default": rule_dict(self.default),
            "text": self.to_text(),
            "schema": self.schema.model_dump(mode="json"),
        }

    @classmethod
    def from_dict(cls, payload: Mapping[str, Any]) -> RuleList:
        """The list saved by :meth:`to_dict`; estimates are recomputed from the counts."""
        if payload.get("format") != MODEL_FORMAT:
            raise ValueError(
                f"not a saved dpmine rule list (format {payload.get('format')!r}, "
                f"expected {MODEL_FORMAT!r})"
            )
        rules = payload["rules"]
        alpha = payload["alpha"]
        built = cls.from_counts(
            [Antecedent.model_validate(rule["antecedent"]) for rule in rules],
            [rule["noisy_negative"] for rule in rules] + [payload["default"]["noisy_negative"]],
            [rule["noisy_positive"] for rule in rules] + [payload["default"]["noisy_positive"]],
            noise_scale=float(payload["noise_scale"]),
            alpha=(float(alpha[0]), float(alpha[1])),
            schema=DatasetMetadata.model_validate(payload["schema"]),
            dataset_id=str(payload.get("dataset_id", "")),
        )
        if payload.get("noise") == "discrete_gaussian":
            built = replace(built, noise="discrete_gaussian")
        if payload.get("guarantee", "approximate") == "pure":
            return replace(built, guarantee="pure")
        return built

    def to_json(self, path: PathLike) -> None:
        """Write :meth:`to_dict` as JSON."""
        text = json.dumps(self.to_dict(), indent=2) + "\n"
        as_path(path).write_text(text, encoding="utf-8")

    def _table(self) -> tuple[list[str], list[list[object]]]:
        """One row per rule, in order, the default rule last."""
        rows: list[list[object]] = [
            [position, rule.text, rule.noisy_negative, rule.noisy_positive, rule.estimate]
            for position, rule in enumerate((*self.rules, self.default), start=1)
        ]
        return list(RULE_COLUMNS), rows

    def to_csv(self, path: PathLike) -> None:
        """Write the rules as CSV (:data:`RULE_COLUMNS`), the default rule last."""
        write_csv(path, *self._table())

    def to_frame(self) -> pd.DataFrame:
        """The rules as a pandas DataFrame with the columns of :meth:`to_csv`."""
        return data_frame(*self._table())

    @classmethod
    def from_json(cls, path: PathLike) -> RuleList:
        """Load a list written by :meth:`to_json` (or by ``DPBayesianRuleList.to_json``)."""
        payload = json.loads(as_path(path).read_text(encoding="utf-8"))
        return cls.from_dict(payload.get("model", payload))


def _is_plain_table(rows: object) -> bool:
    return not hasattr(rows, "columns") and not isinstance(rows, Mapping)


def _boolean_token(text: str) -> bool:
    """The truth value of a Boolean label's declared positive value (a Boolean token)."""
    token = text.strip().lower()
    if token not in BOOLEAN_TRUE | BOOLEAN_FALSE:
        raise ValueError(
            f"the positive value {text!r} of a Boolean label must be a Boolean token "
            "(1/0, true/false, t/f, yes/no)"
        )
    return token in BOOLEAN_TRUE


def label_classes(label: LabelSpec, schema: DatasetMetadata) -> tuple[str, str]:
    """(negative, positive) class names of a label (§5.1): the other category of a
    two-category label, ``"not <positive>"`` for more categories, and for a Boolean label
    ``"False"``/``"True"`` whatever token the owner declared (``yes``, ``1``, ``t``, …)."""
    attribute = schema.attribute(label.attribute)
    if isinstance(attribute, BooleanAttribute):
        truth = _boolean_token(label.positive)
        return str(not truth), str(truth)
    positive = label.positive
    if isinstance(attribute, CategoricalAttribute) and len(attribute.categories) == 2:
        other = next(c for c in attribute.categories if c != positive)
        return other, positive
    return f"not {positive}", positive


def _class_events(label: LabelSpec, schema: DatasetMetadata) -> tuple[str, str]:
    """(negative, positive) classes as events: ``sick = no`` (``sick ≠ yes`` when the label has
    more than two categories) and ``sick = yes``; ``died = False`` and ``died = True``."""
    negative, positive = label_classes(label, schema)
    attribute = schema.attribute(label.attribute)
    several = isinstance(attribute, CategoricalAttribute) and len(attribute.categories) > 2
    other = f"{label.attribute} ≠ {positive}" if several else f"{label.attribute} = {negative}"
    return other, f"{label.attribute} = {positive}"


def rule_counts_text(rule: Rule) -> str:
    """The rule's released counts, each named: ``captured n̂ = 10, positives n̂₊ = 2,
    negatives n̂₋ = 8`` (all noisy); a negative count is marked ``read as 0``, as the
    estimate reads it (§5.4)."""

    def shown(value: int) -> str:
        return f"{value} read as 0" if value < 0 else str(value)

    return (
        f"captured n̂ = {rule.noisy_captured}, positives n̂₊ = {shown(rule.noisy_positive)}, "
        f"negatives n̂₋ = {shown(rule.noisy_negative)}"
    )


def _estimate_text(rule: Rule, target: str, digits: int) -> str:
    """``P(...) = 0.250  (noisy: …)``; when n̂ ≤ 0 no estimate is claimed, only what the model
    predicts there (from the counts clamped at 0 and the prior α)."""
    counts = f"(noisy: {rule_counts_text(rule)})"
    if rule.estimated:
        return f"{target} = {rule.estimate:.{digits}f}  {counts}"
    return (
        f"{target}: too few rows to estimate  {counts}; "
        f"predicts {rule.estimate:.{digits}f} from the counts read as 0 and α"
    )


# --------------------------------------------------------------------------------------------
# The estimator


def _placeholder_antecedent(schema: DatasetMetadata, numeric_bins: int) -> Antecedent:
    """A valid one-item antecedent over the schema, only for pricing a plan (the costs do not
    depend on the antecedents): the first item of the first non-label attribute."""
    label = schema.label.attribute if schema.label is not None else None
    for attribute in schema.attributes:
        if attribute.name == label:
            continue
        item: AnyLiteral
        if isinstance(attribute, CategoricalAttribute):
            item = CatLiteral(attribute=attribute.name, category=attribute.categories[0])
        elif isinstance(attribute, BooleanAttribute):
            item = BoolLiteral(attribute=attribute.name)
        else:
            width = (attribute.hi - attribute.lo) / numeric_bins
            item = NumLiteral(
                attribute=attribute.name, lower=attribute.lo, upper=attribute.lo + width
            )
        return Antecedent(items=[item])
    raise ValueError("the dataset has no attribute besides its label to build rules from")


class DPBayesianRuleList(BaseMiner):
    """A differentially private Bayesian rule list (DP-BRL, ALGORITHMS.md §5), fitted remotely.

    Parameters (keyword-only, stored unchanged; scikit-learn's ``get_params``/``set_params``):

    * ``epsilon``: total budget of a fit; ``epsilon_split``: relative weights of (antecedents,
      sampler, point estimates), default equal thirds (§5.5);
    * ``rho``: the fit's budget on a zCDP dataset (issue #24), in place of ``epsilon``: the
      three calls keep the ε proportions of ``epsilon_split``, of the E at which they cost ρ
      (the selection K peeled draws per class at ε1/K, ε1²/(8K) for "em", ε1²/2 for
      "laplace"; the sampler and the estimates ε²/2 each; :meth:`budgets_for`);
    * ``k_per_class``: K itemsets selected per class (§5.2; default ``None``: 40, or every
      possible antecedent when the public schema allows fewer); ``max_length``: L, items per
      antecedent; ``numeric_bins``: equal-width public bins of a numeric attribute without a
      declared grid; ``method``: "em" or "laplace" top-K selection; ``threshold_quantile``: its
      truncation failure probability (``rho`` on the wire);
    * ``columns``: the attributes antecedents may use (default: all but the label), and
      ``exclude``: attributes they may not use, e.g. a proxy that gives the label away (a
      cause-of-death column for a survival label); checked against the public schema before
      anything is sent, and sent to the server as the public set the selection draws from;
    * ``expected_length`` λ and ``expected_cardinality`` η of the prior, ``alpha`` = (α0, α1)
      of the Dirichlet prior (§5.1); ``iterations``: MCMC steps of the sampler (§5.3), at
      least :data:`~dpmine.wire.MIN_RULE_LIST_ITERATIONS` (the server refuses shorter chains,
      whose release is far from DP; the chain starts from the empty list, never the caller's);
      ``target``: the sampler's target, "likelihood" (the prior as base measure, short lists)
      or "posterior" (the thesis' tempered posterior; :data:`dpmine.wire.RuleListTarget`);
    * ``sampler``: "exact" (every list of at most ``max_rules`` rules scored on the server and
      one drawn exactly: pure ε-DP, no ``iterations``), "mcmc" (the chain above, lists of any
      length, approximate) or "auto" (the default: exact when the public work, from at most
      2K antecedents, ``max_rules`` and N_max, fits the server's cap; :meth:`sampler_for`);
    * ``progress``: show a progress bar.

    ``fit(dataset)`` returns self; results: ``rule_list_``, ``antecedents_``, ``classes_``,
    ``receipts_``, ``budget_spent_``, ``sampler_`` ("exact" or "mcmc") and ``guarantee_``.
    """

    def __init__(
        self,
        *,
        epsilon: float = 1.0,
        epsilon_split: tuple[float, float, float] | None = None,
        k_per_class: int | None = None,
        max_length: int = DEFAULT_MAX_LENGTH,
        expected_length: float = 3.0,
        expected_cardinality: float = 1.0,
        alpha: tuple[float, float] = (1.0, 1.0),
        iterations: int = DEFAULT_ITERATIONS,
        target: RuleListTarget = "likelihood",
        sampler: Sampler = "auto",
        max_rules: int = DEFAULT_MAX_RULES,
        numeric_bins: int = DEFAULT_NUMERIC_BINS,
        method: Literal["em", "laplace"] = "em",
        threshold_quantile: float = 0.1,
        rho: float | None = None,
        columns: Sequence[str] | None = None,
        exclude: Sequence[str] = (),
        progress: bool = False,
    ) -> None:
        self.epsilon = epsilon
        self.epsilon_split = epsilon_split
        self.k_per_class = k_per_class
        self.max_length = max_length
        self.expected_length = expected_length
        self.expected_cardinality = expected_cardinality
        self.alpha = alpha
        self.iterations = iterations
        self.target = target
        self.sampler = sampler
        self.max_rules = max_rules
        self.numeric_bins = numeric_bins
        self.method = method
        self.threshold_quantile = threshold_quantile
        self.rho = rho
        self.columns = columns
        self.exclude = exclude
        self.progress = progress

    # -- scikit-learn conventions --------------------------------------------------------------

    @classmethod
    def _param_names(cls) -> list[str]:
        signature = inspect.signature(cls.__init__)
        return [p.name for p in signature.parameters.values() if p.kind is p.KEYWORD_ONLY]

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor parameters (``deep`` is accepted for scikit-learn; nothing nests)."""
        del deep
        return {name: getattr(self, name) for name in self._param_names()}

    def set_params(self, **params: Any) -> Self:
        """Set constructor parameters; an unknown name is an error."""
        known = self._param_names()
        for name, value in params.items():
            if name not in known:
                raise ParameterError(f"unknown parameter {name!r}; the parameters are {known}")
            setattr(self, name, value)
        return self

    def _found(self) -> str:
        return f"{len(self.rule_list_.rules)} rules and the default rule"

    # -- budget --------------------------------------------------------------------------------

    #: The unit of the current plan or fit's dataset (set by ``plan()``).
    _unit: Composition = PURE

    @property
    def budgets(self) -> tuple[float, float, float]:
        """(ε1, ε2, ε3) on a pure dataset: antecedents, sampler, point estimates; each rounded
        down to the ledger's pico-ε, so they never sum to more than ``epsilon``."""
        first, second, third = self._shares(self._weights(), self.epsilon)
        return first, second, third

    def _weights(self) -> tuple[float, float, float]:
        weights = (1.0, 1.0, 1.0) if self.epsilon_split is None else self.epsilon_split
        if len(weights) != 3 or not all(math.isfinite(w) and w > 0 for w in weights):
            raise ParameterError(f"epsilon_split takes three positive weights, got {weights!r}")
        return weights

    def _shares(self, weights: Sequence[float], budget: float) -> list[float]:
        """``budget`` (an ε) in the proportions of ``weights``, each rounded down to the
        ledger's pico-ε."""
        exact = [Fraction(repr(float(w))) for w in weights]
        total = sum(exact, Fraction(0))
        return [share_of(budget, w / total) for w in exact]

    def _split_epsilon(self, weights: Sequence[float], per_e2: Sequence[float]) -> float:
        """The ε the split divides: ``epsilon``, or on a zCDP dataset the E at which calls of
        ρ per ε² ``per_e2`` at the shares of ``weights`` cost ρ less the margin
        (:func:`~dpmine.miners._rho.epsilon_for_rho`)."""
        if self._unit is PURE or self.rho is None:
            return self.epsilon
        total = sum(weights)
        releases = [(rho, w / total) for rho, w in zip(per_e2, weights, strict=True)]
        return epsilon_for_rho(self.rho * (1 - RHO_MARGIN), releases)

    def selects_antecedents(self, schema: DatasetMetadata) -> bool:
        """False when K per class reaches the public number of possible antecedents
        (:func:`antecedent_universe`): the selection would release all of them, so the fit skips
        it, uses every antecedent (:func:`every_antecedent`, schema order) and gives its share
        of ε to the sampler and the point estimates."""
        universe = antecedent_universe(
            schema, self.max_length, self.numeric_bins, self.columns_for(schema)
        )
        return self.k_for(schema) < universe

    def budgets_for(self, schema: DatasetMetadata) -> tuple[float, float, float]:
        """(ε1, ε2, ε3) of a fit on ``schema``: ``epsilon`` (or on a zCDP dataset the E whose
        calls cost ``rho``) in the proportions of ``epsilon_split``, or (0, ε2, ε3) when the
        selection is skipped (:meth:`selects_antecedents`)."""
        selection = EM_RHO / self.k_for(schema) if self.method == "em" else GENERIC_RHO
        weights, per_e2 = list(self._weights()), [selection, GENERIC_RHO, GENERIC_RHO]
        if not self.selects_antecedents(schema):
            weights, per_e2 = weights[1:], per_e2[1:]
        shares = self._shares(weights, self._split_epsilon(weights, per_e2))
        if len(shares) == 2:
            return 0.0, shares[0], shares[1]
        return shares[0], shares[1], shares[2]

    def _check_params(self) -> None:
        """The checks that need no schema (also run at construction)."""
        if not (isinstance(self.epsilon, int | float) and math.isfinite(self.epsilon)):
            raise ParameterError(f"epsilon must be a positive number, got {self.epsilon!r}")
        if not self.epsilon > 0:
            raise ParameterError(f"epsilon must be positive, got {self.epsilon!r}")
        if self.target not in {"likelihood", "posterior"}:
            raise ParameterError(f"target must be 'likelihood' or 'posterior', got {self.target!r}")
        if self.method not in {"em", "laplace"}:
            raise ParameterError(f"method must be 'em' or 'laplace', got {self.method!r}")
        if self.sampler not in {"auto", "exact", "mcmc"}:
            raise ParameterError(f"sampler must be 'auto', 'exact' or 'mcmc', got {self.sampler!r}")
        if not (isinstance(self.max_rules, int) and 1 <= self.max_rules <= MAX_EXACT_RULES):
            raise ParameterError(
                f"max_rules must be a whole number from 1 to {MAX_EXACT_RULES}, "
                f"got {self.max_rules!r}"
            )
        if not isinstance(self.iterations, int) or self.iterations < MIN_RULE_LIST_ITERATIONS:
            raise ParameterError(
                f"iterations must be a whole number of at least {MIN_RULE_LIST_ITERATIONS} (the "
                f"server's public minimum for an MCMC release), got {self.iterations!r}"
            )
        if len(self.alpha) != 2 or not all(a > 0 for a in self.alpha):
            raise ParameterError(f"alpha takes two positive numbers (α0, α1), got {self.alpha!r}")
        self._weights()
        if self.k_per_class is not None and not (
            isinstance(self.k_per_class, int) and self.k_per_class >= 1
        ):
            raise ParameterError(f"k_per_class must be at least 1, got {self.k_per_class!r}")
        if not (isinstance(self.max_length, int) and self.max_length >= 1):
            raise ParameterError(f"max_length must be at least 1, got {self.max_length!r}")
        if not 0 < self.threshold_quantile < 1:
            raise ParameterError(
                f"threshold_quantile must be in (0, 1), got {self.threshold_quantile!r}"
            )
        check_budget(self.rho, self.epsilon, 1.0, RENAMED_QUANTILE)

    def _check_params_for(self, schema: DatasetMetadata) -> None:
        """Every check, the schema's included."""
        self._check_params()
        if schema.kind == "transactions" or schema.label is None:
            raise ParameterError(
                "rule lists need a table with a label column: the dataset's owner declares it "
                "(metadata 'label': attribute and positive value)"
            )
        self.columns_for(schema)
        self.sampler_for(schema)

    def antecedent_bound(self, schema: DatasetMetadata) -> int:
        """Public bound on |A|: 2K when the selection runs (K per class, the union of the two
        classes' lists), else every possible antecedent."""
        universe = antecedent_universe(
            schema, self.max_length, self.numeric_bins, self.columns_for(schema)
        )
        return min(2 * self.k_for(schema), universe)

    def exact_fits(self, schema: DatasetMetadata) -> bool:
        """Whether the exact sampler's public work over :meth:`antecedent_bound` antecedents
        (:func:`~dpmine.wire.exact_rule_list_work`) fits the server's cap."""
        work = exact_rule_list_work(self.antecedent_bound(schema), self.max_rules, schema.n_max)
        return work <= MAX_EXACT_RULE_LIST_WORK

    def sampler_for(self, schema: DatasetMetadata) -> Literal["exact", "mcmc"]:
        """The sampler a fit on ``schema`` runs: ``sampler``, or for "auto" exact when
        :meth:`exact_fits`, else MCMC; "exact" that does not fit is a ParameterError."""
        if self.sampler == "mcmc":
            return "mcmc"
        if self.exact_fits(schema):
            return "exact"
        if self.sampler == "auto":
            return "mcmc"
        raise ParameterError(
            f"the exact sampler over up to {self.antecedent_bound(schema)} antecedents with "
            f"max_rules = {self.max_rules} exceeds the server's public work cap: lower max_rules "
            "or k_per_class, or use sampler='mcmc'"
        )

    # -- requests ------------------------------------------------------------------------------

    def k_for(self, schema: DatasetMetadata) -> int:
        """K per class: ``k_per_class``, or by default 40 capped at the public number of
        possible antecedents (:func:`antecedent_universe`)."""
        if self.k_per_class is not None:
            return self.k_per_class
        universe = antecedent_universe(
            schema, self.max_length, self.numeric_bins, self.columns_for(schema)
        )
        return max(1, min(DEFAULT_K_PER_CLASS, universe))

    def columns_for(self, schema: DatasetMetadata) -> list[str] | None:
        """The attributes antecedents may use (``columns`` minus ``exclude``, schema order), or
        None for every attribute but the label (:func:`~dpmine.wire.items.usable_columns`); a
        :class:`~dpmine.errors.ParameterError` names an unknown column or the label."""
        label = schema.label.attribute if schema.label is not None else None
        try:
            return usable_columns(schema, self.columns, self.exclude, label=label)
        except ValueError as error:
            raise ParameterError(str(error)) from None

    def _antecedents_request(self, schema: DatasetMetadata) -> RuleListAntecedentsRequest:
        return RuleListAntecedentsRequest(
            k_per_class=self.k_for(schema),
            max_length=self.max_length,
            epsilon=self.budgets_for(schema)[0],
            method=self.method,
            rho=self.threshold_quantile,
            numeric_bins=self.numeric_bins,
            columns=self.columns_for(schema),
        )

    def _sample_request(
        self, schema: DatasetMetadata, antecedents: list[Antecedent]
    ) -> SampleRuleListRequest:
        return SampleRuleListRequest(
            antecedents=antecedents,
            epsilon=self.budgets_for(schema)[1],
            iterations=self.iterations,
            expected_length=self.expected_length,
            expected_cardinality=self.expected_cardinality,
            alpha_negative=self.alpha[0],
            alpha_positive=self.alpha[1],
            target=self.target,
        )

    def _exact_request(
        self, schema: DatasetMetadata, antecedents: list[Antecedent]
    ) -> SampleRuleListExactRequest:
        return SampleRuleListExactRequest(
            antecedents=antecedents,
            epsilon=self.budgets_for(schema)[1],
            max_rules=self.max_rules,
            expected_length=self.expected_length,
            expected_cardinality=self.expected_cardinality,
            alpha_negative=self.alpha[0],
            alpha_positive=self.alpha[1],
            target=self.target,
        )

    def _estimates_request(
        self, schema: DatasetMetadata, rules: list[Antecedent]
    ) -> PointEstimatesRequest:
        return PointEstimatesRequest(rules=rules, epsilon=self.budgets_for(schema)[2])

    def _calls(self, dataset: DatasetHandle) -> list[PlannedCall]:
        """The calls of a fit (placeholder antecedents: the costs do not depend on them); the
        selection only when :meth:`selects_antecedents`."""
        schema = dataset.schema
        self._check_params_for(schema)
        self._unit = composition_for(dataset, self.rho, "DPBayesianRuleList", RENAMED_QUANTILE)
        placeholder = [_placeholder_antecedent(schema, self.numeric_bins)]
        selection = (
            [BRL_ANTECEDENTS.plan(self._antecedents_request(schema))]
            if self.selects_antecedents(schema)
            else []
        )
        sampling = (
            BRL_SAMPLE_RULE_LIST_EXACT.plan(self._exact_request(schema, placeholder))
            if self.sampler_for(schema) == "exact"
            else BRL_SAMPLE_RULE_LIST.plan(self._sample_request(schema, placeholder))
        )
        return [
            *selection,
            sampling,
            BRL_POINT_ESTIMATES.plan(self._estimates_request(schema, placeholder)),
        ]

    # -- fitting -------------------------------------------------------------------------------

    def fit(self, dataset: DatasetHandle) -> Self:
        """Run the three charged calls (refused up front when the remaining budget cannot cover
        them); returns self with ``rule_list_`` set."""
        self._check_params_for(dataset.schema)
        self._check_budget(dataset)
        self._spent = _Spent()
        schema = dataset.schema
        with self._stages() as report:
            if self.selects_antecedents(schema):
                report("selecting antecedents", 0.0)
                selected = dataset.run(self._antecedents_request(schema))
                self._spent.receipts.append(selected.receipt)
                self.antecedents_ = union_antecedents(selected.by_class)
            else:  # every possible antecedent: public, nothing to select
                self.antecedents_ = every_antecedent(
                    schema, self.max_length, self.numeric_bins, self.columns_for(schema)
                )
            report("sampling a rule list", 1.0)
            sampled = self._sample(dataset, report)
            self._spent.receipts.append(sampled.receipt)
            report("noisy point estimates", 2.0)
            counts = dataset.run(self._estimates_request(schema, sampled.rules))
            self._spent.receipts.append(counts.receipt)
            report("done", 3.0)
        self.sampler_: Literal["exact", "mcmc"] = "mcmc"
        self.guarantee_: Literal["pure", "approximate"] = "approximate"
        self.iterations_: int | None = None
        if isinstance(sampled, SampleRuleListExactResponse):
            self.sampler_, self.guarantee_ = "exact", "pure"
        else:
            self.iterations_ = sampled.iterations
        self.budgets_ = self.budgets_for(schema)
        rule_list = RuleList.from_counts(
            sampled.rules,
            counts.negative_counts,
            counts.positive_counts,
            noise_scale=counts.noise_scale,
            alpha=(float(self.alpha[0]), float(self.alpha[1])),
            schema=dataset.schema,
            dataset_id=dataset.id,
        )
        # Every call of the fit is pure ε-DP except the MCMC sampler's release.
        noise: CountNoiseKind = "laplace" if counts.noise is None else counts.noise.kind
        self.rule_list_ = replace(rule_list, guarantee=self.guarantee_, noise=noise)
        return self

    def _sample(
        self, dataset: DatasetHandle, report: Callable[[str, float], None]
    ) -> SampleRuleListResponse | SampleRuleListExactResponse:
        """The sampler's job (:meth:`sampler_for`) over ``antecedents_``, waited for."""
        connection, schema = dataset.connection, dataset.schema

        def progress(info: JobInfo) -> None:
            report("sampling a rule list", 1.0 + info.progress)

        if self.sampler_for(schema) == "exact":
            exact = connection.submit(dataset.id, self._exact_request(schema, self.antecedents_))
            return connection.wait_for_job(exact, on_progress=progress)
        chain = connection.submit(dataset.id, self._sample_request(schema, self.antecedents_))
        return connection.wait_for_job(chain, on_progress=progress)

    def mine(self, dataset: DatasetHandle) -> Self:
        """The miners' name for :meth:`fit`."""
        return self.fit(dataset)

    @contextmanager
    def _stages(self) -> Iterator[Callable[[str, float], None]]:
        """A ``report(stage, done)`` callback; ``done`` counts the calls finished (0..3)."""
        if not self.progress:
            yield lambda _stage, _done: None
            return
        with Progress(transient=True) as bar:
            task = bar.add_task("DP rule list", total=3.0)

            def report(stage: str, done: float) -> None:
                bar.update(task, completed=done, description=f"DP rule list: {stage}")

            yield report

    # -- results -------------------------------------------------------------------------------

    def _fitted(self) -> RuleList:
        rule_list: RuleList | None = getattr(self, "rule_list_", None)
        if rule_list is None:
            raise NotMinedError(f"{type(self).__name__} is not fitted yet; call fit() first")
        return rule_list

    @property
    def receipts_(self) -> list[Receipt]:
        """Receipts of the charged calls of the last fit."""
        spent: _Spent | None = getattr(self, "_spent", None)
        if spent is None:
            raise NotMinedError(f"{type(self).__name__} is not fitted yet; call fit() first")
        return spent.receipts

    @property
    def classes_(self) -> npt.NDArray[np.str_]:
        """The (negative, positive) class names, in the column order of ``predict_proba``."""
        return np.array(self._fitted().classes)

    def predict_proba(self, rows: object, *, columns: Sequence[str] | None = None) -> FloatArray:
        """(n, 2) probabilities of (negative, positive) for public rows (see
        :meth:`RuleList.capture` for the accepted inputs)."""
        return self._fitted().predict_proba(rows, columns=columns)

    def predict(
        self, rows: object, *, columns: Sequence[str] | None = None, threshold: float = 0.5
    ) -> npt.NDArray[np.str_]:
        """The positive class where P(positive) > ``threshold``, else the negative class."""
        positive = self.predict_proba(rows, columns=columns)[:, 1]
        negative_name, positive_name = self._fitted().classes
        return np.where(positive > threshold, positive_name, negative_name)

    def __str__(self) -> str:
        rule_list: RuleList | None = getattr(self, "rule_list_", None)
        return repr(self) if rule_list is None else rule_list.to_text()

    # -- JSON ----------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The fitted model, the parameters, the antecedent set and the receipts."""
        params = self.get_params()
        return {
            "model": self._fitted().to_dict(),
            "params": {
                **params,
                "alpha": list(params["alpha"]),
                "epsilon_split": None
                if params["epsilon_split"] is None
                else list(params["epsilon_split"]),
                "columns": None if params["columns"] is None else list(params["columns"]),
                "exclude": list(params["exclude"]),
            },
            "budgets": list(getattr(self, "budgets_", self.budgets)),
            "sampler": getattr(self, "sampler_", None),
            "antecedents": [a.model_dump(mode="json") for a in getattr(self, "antecedents_", [])],
            "receipts": [
                r.model_dump(mode="json") for r in getattr(self, "_spent", _Spent()).receipts
            ],
        }

    def to_json(self, path: PathLike) -> None:
        """Write :meth:`to_dict` as JSON; :meth:`from_json` loads it without a server."""
        text = json.dumps(self.to_dict(), indent=2) + "\n"
        as_path(path).write_text(text, encoding="utf-8")

    def to_csv(self, path: PathLike) -> None:
        """Write the fitted rules as CSV (:meth:`RuleList.to_csv`)."""
        self.rule_list_.to_csv(path)

    def to_frame(self) -> pd.DataFrame:
        """The fitted rules as a pandas DataFrame (:meth:`RuleList.to_frame`)."""
        return self.rule_list_.to_frame()

    @classmethod
    def from_dict(cls, payload: Mapping[str, Any]) -> DPBayesianRuleList:
        """A fitted estimator from :meth:`to_dict` (predicts; cannot refit without a server)."""
        params = dict(payload.get("params", {}))
        if "rho" in params and "threshold_quantile" not in params:  # saved before issue #24
            params["threshold_quantile"] = params.pop("rho")
        for name in ("alpha", "epsilon_split", "exclude"):
            if params.get(name) is not None:
                params[name] = tuple(params[name])
        estimator = cls().set_params(**params)
        estimator.rule_list_ = RuleList.from_dict(payload["model"])
        if payload.get("sampler") in {"exact", "mcmc"}:
            estimator.sampler_ = payload["sampler"]
            estimator.guarantee_ = estimator.rule_list_.guarantee
        estimator.antecedents_ = [
            Antecedent.model_validate(a) for a in payload.get("antecedents", [])
        ]
        estimator._spent = _Spent(
            receipts=[Receipt.model_validate(r) for r in payload.get("receipts", [])]
        )
        return estimator

    @classmethod
    def from_json(cls, path: PathLike) -> DPBayesianRuleList:
        """Load a model written by :meth:`to_json`."""
        return cls.from_dict(json.loads(as_path(path).read_text(encoding="utf-8")))
