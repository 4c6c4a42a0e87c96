"""Suggest public metadata from the data, for the trusted owner to review (DESIGN.md contract 2).

The proposal looks at the data (types, categories, observed ranges, row count), so it is for the
owner only; once reviewed and registered, the metadata is public and fixed (ALGORITHMS.md §0.2).
It never copies private values into the public schema: identifier-like and high-cardinality
columns are excluded, numeric ranges are rounded outward to a coarse grid (:func:`public_range`)
and cut to the bulk of the data when there are outliers, a numeric column spoiled by a few text
cells reads them as missing. Every such decision is written, without data values or counts, into
``review.notes``; ``review.reviewed`` stays false until the owner has checked the proposal, and
registration refuses an unreviewed proposal unless forced (:func:`accept_reviewed`).

Imports. pandas is imported by the functions that use it, as in data/loaders.py ("Imports").
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final

import numpy as np
import numpy.typing as npt
from pydantic import ValidationError

from dpmine.wire.datasets import (
    BOOLEAN_FALSE,
    BOOLEAN_TRUE,
    DEFAULT_MISSING_VALUES,
    MAX_N_MAX,
    AnyAttribute,
    BooleanAttribute,
    CategoricalAttribute,
    CsvPairSource,
    CsvSource,
    DatasetKind,
    DatasetMetadata,
    DatasetSource,
    FimiSource,
    LabelSpec,
    NumericAttribute,
    ProposalReview,
    View,
)
from dpmine_server.data.loaders import (
    CellCounts,
    ValueSummary,
    csv_cell_counts,
    read_fimi_lines,
    read_sql_strings,
    resolve_path,
    sniff_delimiter,
)

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "EXTRA_MISSING_TOKENS",
    "IDENTIFIER_SHARE",
    "MAX_INTEGER_CATEGORIES",
    "MAX_PUBLIC_CATEGORIES",
    "MAX_TEXT_SHARE",
    "OUTLIER_FENCE",
    "RARE_CATEGORY",
    "REVIEW_REMINDER",
    "ROW_WIDTH_SHARE",
    "ROW_WIDTH_STEP",
    "UnreviewedProposal",
    "accept_reviewed",
    "loaded_value_warnings",
    "nice_ceil",
    "nice_step",
    "parse_label",
    "propose_metadata",
    "public_range",
]

#: Integer-valued columns with at most this many distinct values are proposed as categorical.
MAX_INTEGER_CATEGORIES = 12
#: Text columns with more distinct values are excluded (a public list would copy the data).
MAX_PUBLIC_CATEGORIES = 50
#: A column whose share of distinct values among present cells reaches this looks like an id...
IDENTIFIER_SHARE = 0.9
#: ... once it has at least this many present cells.
MIN_IDENTIFIER_CELLS = 20
#: A column is proposed numeric when at most this share of its present cells are not numbers.
MAX_TEXT_SHARE = 0.05
#: Values beyond Q1 - k·IQR or Q3 + k·IQR are outliers (k = this).
OUTLIER_FENCE = 3.0
#: Categories seen fewer times are "rare": a public list reveals that such rows exist.
RARE_CATEGORY = 5
#: A transaction proposal's max_row_width covers this share of the rows (longer rows are cut).
ROW_WIDTH_SHARE = 0.999
#: ... rounded up to a multiple of this.
ROW_WIDTH_STEP = 10
#: Missing-value tokens recognised besides the wire default (whole cells, case as written).
EXTRA_MISSING_TOKENS: tuple[str, ...] = ("NULL", "Null", "n/a", "#N/A", "NAN", "-", "--", ".")

_ID_WORDS = frozenset({"id", "key", "uuid", "guid"})

REVIEW_REMINDER = (
    "REVIEW REQUIRED: this proposal is derived from the private data and becomes public once "
    "registered. Check every attribute, category list and range (replace ranges by the values "
    "the columns can take by definition), read review.notes, then set review.reviewed to true; "
    "'datasets add' refuses the proposal until then."
)


def nice_ceil(value: float) -> int:
    """Smallest 1, 2 or 5 times a power of ten that is at least ``value`` (and at least 1)."""
    return max(1, int(nice_step(max(value, 1.0))))


def nice_step(value: float) -> float:
    """Smallest 1, 2 or 5 times a (possibly negative) power of ten that is at least ``value``."""
    if not value > 0:
        raise ValueError(f"a step must be positive, got {value}")
    magnitude = 10.0 ** math.floor(math.log10(value))
    for multiple in (1, 2, 5, 10):
        step = _tidy(multiple * magnitude)
        if step >= value:
            return step
    return _tidy(10 * magnitude)  # pragma: no cover - the loop always returns


def _tidy(value: float) -> float:
    """``value`` without binary noise (12 significant digits)."""
    return float(f"{value:.12g}")


def _grid_step(low: float, high: float) -> float:
    """The grid step of :func:`public_range` for observed values in [low, high]."""
    scale = max(high - low, max(abs(low), abs(high)) / 10)
    return nice_step(scale / 5 if scale > 0 else 1.0)


def public_range(low: float, high: float) -> tuple[float, float]:
    """[low, high] rounded outward to a coarse grid, so that it does not pin the data.

    The grid step is the smallest 1, 2 or 5 × 10^k that is at least a fifth of
    ``max(high - low, max(|low|, |high|) / 10)``; an endpoint equals ``low`` or ``high`` only
    when that value is itself on this grid (a round number). Age [50, 101] gives [40, 120].
    """
    step = _grid_step(low, high)
    lo = _tidy(math.floor(low / step) * step)
    hi = _tidy(math.ceil(high / step) * step)
    if lo > low:  # floating-point rounding must never cut into the observed range
        lo = _tidy(lo - step)
    if hi < high:
        hi = _tidy(hi + step)
    if not lo < hi:
        hi = _tidy(lo + step)
    return lo, hi


# -- one column ---------------------------------------------------------------------------------


@dataclass
class _Column:
    """What the proposal decided for one column: an attribute (or None if excluded) and notes."""

    attribute: AnyAttribute | None
    notes: list[str] = field(default_factory=list)


def _sorted_categories(values: Sequence[str]) -> list[str]:
    """Numerically when every value is a number, else lexicographically."""
    import pandas as pd  # noqa: PLC0415 (data/loaders.py, "Imports")

    numbers = pd.to_numeric(pd.Series(list(values), dtype=object), errors="coerce")
    if len(values) and not numbers.isna().any():
        return [v for _, v in sorted(zip(numbers.tolist(), values, strict=True))]
    return sorted(values)


def _looks_like_id_name(name: str) -> bool:
    """``id``, ``patient_id``, ``row-key``, ``patientId`` and the like."""
    words = set(re.split(r"[^a-z0-9]+", name.lower()))
    return bool(words & _ID_WORDS) or re.search(r"[a-z]I[dD]$", name) is not None


#: Every Boolean token, lower-case.
BOOLEAN_TOKENS: Final = BOOLEAN_TRUE | BOOLEAN_FALSE


def _identifier_like(n_present: int, n_distinct: int) -> bool:
    return n_present >= MIN_IDENTIFIER_CELLS and n_distinct >= IDENTIFIER_SHARE * n_present


def _categorical(name: str, view: View | None, counts: pd.Series) -> _Column:
    """A categorical attribute from value counts, flagged if some categories are rare."""
    categories = _sorted_categories([str(v) for v in counts.index])
    notes = []
    if int(counts.min()) < RARE_CATEGORY:
        notes.append(
            f"column {name!r} flagged: some categories occur fewer than {RARE_CATEGORY} times; "
            "the public list reveals that such rows exist. Keep the list if every category is "
            "public knowledge (a published code list); otherwise leave the attribute out, or "
            "merge the rare categories in the source data before registering (metadata cannot "
            "merge categories, and a value missing from the list is refused at registration)"
        )
    return _Column(CategoricalAttribute(name=name, view=view, categories=categories), notes)


def _outlier_fences(values: npt.NDArray[np.float64]) -> tuple[float, float] | None:
    """(low, high) fences at Q1 - k·IQR and Q3 + k·IQR, or None if the IQR is zero."""
    q1, q3 = (float(q) for q in np.quantile(values, [0.25, 0.75]))
    iqr = q3 - q1
    if not iqr > 0:
        return None
    return q1 - OUTLIER_FENCE * iqr, q3 + OUTLIER_FENCE * iqr


def _numeric(
    name: str, view: View | None, values: npt.NDArray[np.float64], *, spoiled: bool
) -> _Column:
    """A numeric attribute with a public range from the bulk of ``values`` (finite numbers)."""
    notes: list[str] = []
    bulk = values
    fences = _outlier_fences(values)
    if fences is not None:
        inside = (values >= fences[0]) & (values <= fences[1])
        if not inside.all():
            bulk = values[inside]
            notes.append(
                f"column {name!r} flagged: it has outliers (beyond {OUTLIER_FENCE:g} "
                "inter-quartile ranges from the quartiles); the range covers the bulk of the "
                "data and values outside it are clipped to it when loaded"
            )
    lo, hi = public_range(float(bulk.min()), float(bulk.max()))
    notes.append(
        f"column {name!r}: range [{lo:g}, {hi:g}] is the data's range rounded outward to a "
        "round grid; replace it by the range the column can take by definition"
    )
    if spoiled:
        notes.append(
            f"column {name!r} flagged: a few cells are text, not numbers; they are read as "
            "missing (text_as_missing); clean them or declare the column by hand"
        )
    integral = bool(np.all(values == np.round(values)))
    if integral and np.unique(values).size == values.size and values.size >= MIN_IDENTIFIER_CELLS:
        notes.append(
            f"column {name!r} flagged: every value is distinct; if it is a row identifier, "
            "drop it from the attributes"
        )
    return _Column(
        NumericAttribute(name=name, view=view, lo=lo, hi=hi, text_as_missing=spoiled), notes
    )


def _present(cells: pd.Series, missing: list[str]) -> pd.Series:
    """The value counts of a column's cells without the missing-value tokens."""
    return cells[~cells.index.isin(missing)]


def _propose_column(
    name: str, cells: pd.Series, *, missing: list[str], view: View | None
) -> _Column:
    """Type one column from the value counts of its string cells, or exclude it with the
    reason (ALGORITHMS.md §0.2)."""
    import pandas as pd  # noqa: PLC0415 (data/loaders.py, "Imports")

    counts = _present(cells, missing)
    if counts.empty:
        raise ValueError(f"column {name!r} has only missing values; drop it or declare it by hand")
    n_present = int(counts.sum())
    distinct = counts.index.to_numpy(dtype=object)  # the distinct cells, as Python strings
    if all(str(value).lower() in BOOLEAN_TOKENS for value in distinct):  # stops at a non-token
        return _Column(BooleanAttribute(name=name, view=view))
    parsed = pd.to_numeric(pd.Series(distinct, dtype=object), errors="coerce").to_numpy(
        dtype=np.float64
    )
    number = np.isfinite(parsed)
    weights = counts.to_numpy(dtype=np.int64)
    text_cells = int(weights[~number].sum())
    identifier = _identifier_like(n_present, len(distinct))
    if text_cells <= MAX_TEXT_SHARE * n_present and number.any():
        values = np.repeat(parsed[number], weights[number])
        return _number_column(
            name, view, counts, values, spoiled=text_cells > 0, identifier=identifier
        )
    return _text_column(name, view, counts, identifier=identifier)


def _number_column(
    name: str,
    view: View | None,
    counts: pd.Series,
    values: npt.NDArray[np.float64],
    *,
    spoiled: bool,
    identifier: bool,
) -> _Column:
    """A column of numbers (``values``, one per numeric cell): excluded if an id, categorical
    if few distinct integers, else numeric."""
    integral = bool(np.all(values == np.round(values)))
    if identifier and integral and _looks_like_id_name(name):
        return _excluded(name, "it looks like a row identifier (nearly every value distinct)")
    if not spoiled and integral and len(counts) <= MAX_INTEGER_CATEGORIES:
        return _categorical(name, view, counts)
    return _numeric(name, view, values, spoiled=spoiled)


def _text_column(name: str, view: View | None, counts: pd.Series, *, identifier: bool) -> _Column:
    """A column of text: excluded if an id or too many values, else categorical."""
    if identifier:
        return _excluded(name, "it looks like a row identifier (nearly every value distinct)")
    if len(counts) > MAX_PUBLIC_CATEGORIES:
        return _excluded(
            name,
            f"it has more than {MAX_PUBLIC_CATEGORIES} distinct values, too many for a public "
            "category list (group the values into fewer categories, or declare it by hand)",
        )
    return _categorical(name, view, counts)


def _excluded(name: str, why: str) -> _Column:
    return _Column(None, [f"column {name!r} excluded: {why}; its values are not copied"])


def _label_column(
    name: str, cells: pd.Series, proposed: _Column, *, missing: list[str], view: View | None
) -> _Column:
    """A label is Boolean or categorical: a numeric proposal becomes its category list."""
    if proposed.attribute is None:
        raise ValueError(f"the label column {name!r} cannot be proposed: {proposed.notes[0]}")
    if proposed.attribute.type != "numeric":
        return proposed
    counts = _present(cells, missing)
    if len(counts) > MAX_PUBLIC_CATEGORIES:
        raise ValueError(
            f"the label column {name!r} has more than {MAX_PUBLIC_CATEGORIES} distinct values; "
            "a label needs a short public list of classes"
        )
    return _categorical(name, view, counts)


# -- the whole source ---------------------------------------------------------------------------


def _n_max(n_rows: int, headroom: float) -> int:
    return min(MAX_N_MAX, nice_ceil(max(1.0, n_rows * headroom)))


#: The review note on the proposed ``n_max`` (it is published, and derived from the private n).
N_MAX_NOTE = (
    "n_max is the data's row count times {headroom:g}, rounded up: it derives from the private "
    "row count and is published. Replace it by an upper bound that is public knowledge (the "
    "size of the population the table can hold); every sensitivity and padding budget scales "
    "with it, so a tight public bound gives faster and more accurate answers"
)


def _tables(
    source: DatasetSource, base_dir: Path
) -> tuple[list[tuple[CellCounts, str | None]], list[str]]:
    """(cell counts, side) of each file of the source (side None for one table), and notes on
    how the files were read (their delimiters)."""
    notes: list[str] = []
    if isinstance(source, CsvPairSource):
        sides: list[tuple[CellCounts, str | None]] = []
        for side, path in (("left", source.left), ("right", source.right)):
            resolved = resolve_path(path, base_dir)
            notes += _delimiter_notes(resolved, f"the {side} file")
            sides.append((csv_cell_counts(resolved), side))
        return sides, notes
    if isinstance(source, CsvSource):
        resolved = resolve_path(source.path, base_dir)
        notes += _delimiter_notes(resolved, "the file")
        return [(csv_cell_counts(resolved), None)], notes
    if isinstance(source, FimiSource):
        raise ValueError("a FIMI file holds transactions, not attribute columns")
    return [(CellCounts.of_frame(read_sql_strings(source)), None)], notes


def _delimiter_notes(path: Path, what: str) -> list[str]:
    delimiter = sniff_delimiter(path)
    if delimiter == ",":
        return []
    shown = {"\t": "tab", ";": "semicolon", "|": "vertical bar"}[delimiter]
    return [f"{what} is {shown}-delimited; it is read so here and when the dataset is added"]


def _columns_with_views(
    source: DatasetSource,
    tables: list[tuple[CellCounts, str | None]],
    kind: DatasetKind,
    views: dict[str, str] | None,
) -> list[tuple[str, pd.Series, View | None]]:
    """(name, cell counts, view) for every column to describe."""
    if isinstance(source, CsvPairSource):
        if kind != "views":
            raise ValueError(f"a CSV pair holds a two-view dataset (kind 'views'), not {kind!r}")
        return [
            (name, table.counts[name], _as_view(name, (views or {}).get(name, str(side))))
            for table, side in tables
            for name in table.names
            if name != source.id_column
        ]
    table = tables[0][0]
    names = table.names
    unknown = sorted(set(views or {}) - set(names))
    if unknown:
        raise ValueError(f"'views' names columns that the source does not have: {unknown}")
    if kind == "views":
        unassigned = [name for name in names if name not in (views or {})]
        if unassigned:
            raise ValueError(
                f"a two-view dataset needs a view for every column; add these to 'views' "
                f"(as 'left' or 'right'): {unassigned}"
            )
    return [
        (
            name,
            table.counts[name],
            _as_view(name, (views or {})[name]) if kind == "views" else None,
        )
        for name in names
    ]


def _as_view(name: str, view: str) -> View:
    if view == "left":
        return "left"
    if view == "right":
        return "right"
    raise ValueError(f"view of column {name!r} must be 'left' or 'right', got {view!r}")


def _found_missing_tokens(tables: list[tuple[CellCounts, str | None]]) -> list[str]:
    """The extra missing-value tokens that occur as whole cells somewhere in the data."""
    found: set[str] = set()
    for table, _ in tables:
        for counts in table.counts.values():
            cells = counts.index
            found.update(str(cell) for cell in cells[cells.isin(EXTRA_MISSING_TOKENS)])
    return [token for token in EXTRA_MISSING_TOKENS if token in found]


def _propose_items(source: FimiSource, base_dir: Path) -> tuple[list[str], int, int]:
    """(item universe, row count, proposed max_row_width) of a FIMI file."""
    lines = read_fimi_lines(resolve_path(source.path, base_dir))
    rows = [set(line.split()) for line in lines]
    tokens = sorted(set().union(*rows)) if rows else []
    if tokens and all(token.lstrip("-").isdigit() for token in tokens):
        tokens.sort(key=int)
    widths = np.fromiter((len(row) for row in rows), dtype=np.int64, count=len(rows))
    return tokens, len(lines), _row_width(widths, len(tokens))


def _row_width(widths: npt.NDArray[np.int64], n_items: int) -> int:
    """The width of :data:`ROW_WIDTH_SHARE` of the rows rounded up to a multiple of
    :data:`ROW_WIDTH_STEP` (at least 1, at most the number of items)."""
    if widths.size == 0:
        return max(1, n_items)
    covered = int(np.quantile(widths, ROW_WIDTH_SHARE, method="higher"))
    step = ROW_WIDTH_STEP * max(1, math.ceil(covered / ROW_WIDTH_STEP))
    return max(1, min(step, n_items))


def propose_metadata(
    source: DatasetSource,
    *,
    kind: DatasetKind,
    base_dir: Path,
    label: LabelSpec | None = None,
    views: dict[str, str] | None = None,
    headroom: float = 2.0,
) -> DatasetMetadata:
    """Propose metadata for ``source``, with ``review.reviewed`` false and the reasons in
    ``review.notes`` (no data values there). Owner only: derived from the data.

    Types: Boolean if every value is a Boolean token; numeric if at most
    :data:`MAX_TEXT_SHARE` of the cells are text (read as missing) and there are more than
    :data:`MAX_INTEGER_CATEGORIES` distinct values or some are not integers; categorical
    otherwise, unless identifier-like or with more than :data:`MAX_PUBLIC_CATEGORIES` values
    (excluded). Ranges: :func:`public_range` of the values within the outlier fences. Missing
    tokens of :data:`EXTRA_MISSING_TOKENS` found in the data are declared. ``n_max`` is
    ``headroom`` times the row count rounded up to 1, 2 or 5 times a power of ten. Views come
    from ``views`` (column -> "left"/"right"), or for a CSV pair from the file of each column.
    """
    if headroom < 1:
        raise ValueError(f"headroom must be at least 1, got {headroom}")
    if isinstance(source, FimiSource) != (kind == "transactions"):
        raise ValueError("transaction datasets come from FIMI files, and FIMI files only hold them")
    if kind == "transactions" and isinstance(source, FimiSource):
        items, n_rows, width = _propose_items(source, base_dir)
        if not items:
            raise ValueError("the FIMI file has no items; nothing to propose")
        notes = [
            "the item universe lists every item seen in the data; remove items that are not "
            "public knowledge (rare items reveal that some transaction holds them)",
            f"max_row_width covers {ROW_WIDTH_SHARE:.1%} of the rows, rounded up to a multiple "
            f"of {ROW_WIDTH_STEP}; longer rows are cut to their first items (in the order of "
            "'items') when loaded. Itemset mining is padded to a time that grows like "
            "n_max·C(max_row_width, ℓ): lower it to answer faster, raise it to cut fewer rows",
            N_MAX_NOTE.format(headroom=headroom),
        ]
        return DatasetMetadata(
            kind=kind,
            n_max=_n_max(n_rows, headroom),
            items=items,
            max_row_width=width,
            review=ProposalReview(reviewed=False, notes=notes),
        )
    tables, notes = _tables(source, base_dir)
    extra_tokens = _found_missing_tokens(tables)
    missing = [*DEFAULT_MISSING_VALUES, *extra_tokens]
    if extra_tokens:
        notes.append(
            f"cells reading {', '.join(repr(t) for t in extra_tokens)} are read as missing "
            "(added to missing_values); remove any that is a real value"
        )
    attributes: list[AnyAttribute] = []
    for name, cells, view in _columns_with_views(source, tables, kind, views):
        column = _propose_column(name, cells, missing=missing, view=view)
        if label is not None and name == label.attribute:
            column = _label_column(name, cells, column, missing=missing, view=view)
        notes += column.notes
        if column.attribute is not None:
            attributes.append(column.attribute)
    notes.append(N_MAX_NOTE.format(headroom=headroom))
    try:
        return DatasetMetadata(
            kind=kind,
            n_max=_n_max(tables[0][0].n_rows, headroom),
            attributes=attributes,
            label=label,
            missing_values=missing,
            review=ProposalReview(reviewed=False, notes=notes),
        )
    except ValidationError as error:
        problem = str(error.errors()[0]["msg"]).removeprefix("Value error, ")
        raise ValueError(
            f"no valid proposal once unsuitable columns are left out ({problem}); "
            f"declare the metadata by hand. Notes: {'; '.join(notes)}"
        ) from None


def parse_label(text: str) -> LabelSpec:
    """``"column=positive"`` → :class:`LabelSpec` (the CLI's and the form's label syntax)."""
    column, separator, positive = text.partition("=")
    if not separator or not column.strip() or not positive.strip():
        raise ValueError(f"label {text!r} must read 'column=positive value', e.g. 'class=p'")
    return LabelSpec(attribute=column.strip(), positive=positive.strip())


# -- registration -------------------------------------------------------------------------------


class UnreviewedProposal(ValueError):
    """The metadata is a proposal whose ``review.reviewed`` is still false."""


def accept_reviewed(metadata: DatasetMetadata, *, force: bool = False) -> DatasetMetadata:
    """The metadata to register: hand-written metadata (no ``review``) as is, a reviewed (or
    forced) proposal without its owner-only ``review``. Raises :class:`UnreviewedProposal`
    (listing the proposal's notes) for a proposal not marked reviewed."""
    review = metadata.review
    if review is None:
        return metadata
    if not review.reviewed and not force:
        reasons = "; ".join(review.notes) if review.notes else "no notes"
        raise UnreviewedProposal(
            "the metadata is a proposal that has not been reviewed: check it, then set "
            '"review": {"reviewed": true} in it (or force the registration). '
            f"Notes of the proposal: {reasons}"
        )
    return metadata.model_copy(update={"review": None})


def _is_round(value: float, low: float, high: float) -> bool:
    """Whether ``value`` is a round number at the scale of observed values in [low, high]: a
    multiple of the 1, 2 or 5 × 10^k step at least a tenth of :func:`public_range`'s step."""
    ratio = value / nice_step(_grid_step(low, high) / 10)
    return math.isclose(ratio, round(ratio), abs_tol=1e-9)


def _copied_range(attribute: NumericAttribute, low: float, high: float) -> list[str]:
    """The warning when a range end equals the data's finite extreme (``low``, ``high``)."""
    copied = [
        end
        for end, bound, extreme in (("lo", attribute.lo, low), ("hi", attribute.hi, high))
        if bound == extreme and not _is_round(bound, low, high)
    ]
    if not copied:
        return []
    return [
        f"attribute {attribute.name!r}: {' and '.join(copied)} "
        f"{'equals' if len(copied) == 1 else 'equal'} the data's "
        f"{'minimum' if copied == ['lo'] else 'maximum' if copied == ['hi'] else 'extremes'} "
        "exactly; a public range copied from the data reveals it (round it outward)"
    ]


def _copied_categories(attribute: CategoricalAttribute, seen: list[int], cells: int) -> list[str]:
    """The warning when the declared categories (each seen ``seen[i]`` times among ``cells``
    non-missing cells) look like the data's own distinct values."""
    if min(seen, default=0) == 0:
        return []  # a category absent from the data was declared on purpose
    if len(attribute.categories) > MAX_PUBLIC_CATEGORIES or _identifier_like(
        cells, len(attribute.categories)
    ):
        return [
            f"attribute {attribute.name!r}: its categories are exactly the distinct values of "
            f"the data, more than {MAX_PUBLIC_CATEGORIES} or nearly one per row; the list looks "
            "copied from the data (an identifier?)"
        ]
    return []


def loaded_value_warnings(metadata: DatasetMetadata, values: ValueSummary) -> list[str]:
    """Warnings (owner only) about category lists or ranges that look copied from the data: a
    range end equal to the data's finite extreme that is not a round number, or a long category
    list that is exactly the data's distinct values. Read from what a successful load gathered
    (:attr:`LoadReport.values`): the source is not read again (at 10^7 rows that re-reading
    took minutes and the whole table in memory)."""
    warnings: list[str] = []
    for attribute in metadata.attributes:
        if isinstance(attribute, NumericAttribute) and attribute.name in values.extremes:
            warnings += _copied_range(attribute, *values.extremes[attribute.name])
        elif isinstance(attribute, CategoricalAttribute):
            seen = values.category_counts.get(attribute.name)
            if seen is not None:
                warnings += _copied_categories(attribute, seen, sum(seen))
    return warnings
