"""Suggest public metadata from the data, for the trusted owner to confirm (DESIGN.md contract 2).

The proposal looks at the data (types, categories, observed ranges, row count), so it is for the
owner only; once confirmed, the metadata is public and fixed (ALGORITHMS.md §0.2). Numeric
ranges are rounded outward and ``n_max`` upward, so the proposal does not pin the data exactly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

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
    View,
)
from dpmine_server.data.loaders import (
    read_csv_strings,
    read_fimi_lines,
    read_sql_strings,
    resolve_path,
)

__all__ = ["MAX_INTEGER_CATEGORIES", "nice_ceil", "nice_range", "parse_label", "propose_metadata"]

#: Integer-valued columns with at most this many distinct values are proposed as categorical.
MAX_INTEGER_CATEGORIES = 12


def nice_ceil(value: float) -> int:
    """Smallest 1, 2 or 5 times a power of ten that is at least ``value`` (and at least 1)."""
    if value <= 1:
        return 1
    magnitude = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if step * magnitude >= value:
            return int(step * magnitude)
    return int(10 * magnitude)  # pragma: no cover - the loop always returns


def nice_range(low: float, high: float) -> tuple[float, float]:
    """[low, high] widened outward to multiples of a round step (a tenth of the span's decade)."""
    span = high - low if high > low else max(abs(high), 1.0)
    step = 10.0 ** (math.floor(math.log10(span)) - 1)
    digits = max(0, -math.floor(math.log10(step)))
    lo = round(math.floor(low / step) * step, digits)
    hi = round(math.ceil(high / step) * step, digits)
    if lo > low:  # floating-point rounding must never cut into the observed range
        lo = round(lo - step, digits)
    if hi < high:
        hi = round(hi + step, digits)
    if not lo < hi:
        hi = round(lo + step, digits)
    return float(lo), float(hi)


def _sorted_categories(values: Sequence[str]) -> list[str]:
    """Numerically when every value is a number, else lexicographically."""
    numbers = pd.to_numeric(pd.Series(list(values), dtype=object), errors="coerce")
    if len(values) and not numbers.isna().any():
        return [v for _, v in sorted(zip(numbers.tolist(), values, strict=True))]
    return sorted(values)


def _propose_attribute(
    name: str, raw: pd.Series, *, missing: list[str], view: View | None
) -> AnyAttribute:
    present = raw[~raw.isin(missing)]
    distinct = [str(v) for v in pd.unique(present)]
    if not distinct:
        raise ValueError(f"column {name!r} has only missing values; drop it or declare it by hand")
    if {v.lower() for v in distinct} <= BOOLEAN_TRUE | BOOLEAN_FALSE:
        return BooleanAttribute(name=name, view=view)
    numbers = pd.to_numeric(pd.Series(distinct, dtype=object), errors="coerce").to_numpy(
        dtype=np.float64
    )
    if np.all(np.isfinite(numbers)):
        integral = bool(np.all(numbers == np.round(numbers)))
        if len(distinct) > MAX_INTEGER_CATEGORIES or not integral:
            lo, hi = nice_range(float(numbers.min()), float(numbers.max()))
            return NumericAttribute(name=name, view=view, lo=lo, hi=hi)
    if len(distinct) > 10_000:
        raise ValueError(
            f"column {name!r} has {len(distinct)} distinct values, too many for a categorical "
            "attribute (at most 10000); drop it (an identifier?) or declare it by hand"
        )
    return CategoricalAttribute(name=name, view=view, categories=_sorted_categories(distinct))


def _n_max(n_rows: int, headroom: float) -> int:
    return min(MAX_N_MAX, nice_ceil(max(1.0, n_rows * headroom)))


def _columns_with_views(
    source: DatasetSource, kind: DatasetKind, base_dir: Path, views: dict[str, str] | None
) -> tuple[list[tuple[str, pd.Series, View | None]], int]:
    """(name, cells, view) for every column to describe, and the row count."""
    if isinstance(source, CsvPairSource):
        if kind != "views":
            raise ValueError(f"a CSV pair holds a two-view dataset (kind 'views'), not {kind!r}")
        frames = {
            "left": read_csv_strings(resolve_path(source.left, base_dir)),
            "right": read_csv_strings(resolve_path(source.right, base_dir)),
        }
        columns: list[tuple[str, pd.Series, View | None]] = []
        for side in ("left", "right"):
            frame = frames[side]
            for name in frame.columns:
                if name != source.id_column:
                    view = (views or {}).get(str(name), side)
                    columns.append((str(name), frame[name], _as_view(str(name), view)))
        return columns, len(frames["left"])
    if isinstance(source, FimiSource):
        raise ValueError("a FIMI file holds transactions, not attribute columns")
    frame = (
        read_csv_strings(resolve_path(source.path, base_dir))
        if isinstance(source, CsvSource)
        else read_sql_strings(source)
    )
    names = [str(name) for name in frame.columns]
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
        (name, frame[name], _as_view(name, (views or {})[name]) if kind == "views" else None)
        for name in names
    ], len(frame)


def _as_view(name: str, view: str) -> View:
    if view == "left":
        return "left"
    if view == "right":
        return "right"
    raise ValueError(f"view of column {name!r} must be 'left' or 'right', got {view!r}")


def _propose_items(source: FimiSource, base_dir: Path) -> tuple[list[str], int]:
    lines = read_fimi_lines(resolve_path(source.path, base_dir))
    tokens = sorted({token for line in lines for token in line.split()})
    if tokens and all(token.lstrip("-").isdigit() for token in tokens):
        tokens.sort(key=int)
    return tokens, len(lines)


def propose_metadata(
    source: DatasetSource,
    *,
    kind: DatasetKind,
    base_dir: Path,
    label: LabelSpec | None = None,
    views: dict[str, str] | None = None,
    headroom: float = 2.0,
) -> DatasetMetadata:
    """Propose metadata for ``source``: types, categories, ranges, items, views and n_max.

    Types: Boolean if every value is a Boolean token; numeric if every value is a number and
    there are more than :data:`MAX_INTEGER_CATEGORIES` distinct values or some are not integers;
    categorical otherwise (a label column is always categorical or Boolean). ``n_max`` is
    ``headroom`` times the row count rounded up to 1, 2 or 5 times a power of ten. Views come
    from ``views`` (column -> "left"/"right"), or for a CSV pair from the file of each column.
    Owner only: the proposal is derived from the data and must be confirmed before use.
    """
    if headroom < 1:
        raise ValueError(f"headroom must be at least 1, got {headroom}")
    if isinstance(source, FimiSource) != (kind == "transactions"):
        raise ValueError("transaction datasets come from FIMI files, and FIMI files only hold them")
    if kind == "transactions" and isinstance(source, FimiSource):
        items, n_rows = _propose_items(source, base_dir)
        if not items:
            raise ValueError("the FIMI file has no items; nothing to propose")
        return DatasetMetadata(kind=kind, n_max=_n_max(n_rows, headroom), items=items)
    missing = list(DEFAULT_MISSING_VALUES)
    columns, n_rows = _columns_with_views(source, kind, base_dir, views)
    attributes: list[AnyAttribute] = []
    for name, raw, view in columns:
        attribute = _propose_attribute(name, raw, missing=missing, view=view)
        if label is not None and name == label.attribute and attribute.type == "numeric":
            present = [str(v) for v in pd.unique(raw[~raw.isin(missing)])]
            attribute = CategoricalAttribute(
                name=name, view=view, categories=_sorted_categories(present)
            )
        attributes.append(attribute)
    return DatasetMetadata(
        kind=kind, n_max=_n_max(n_rows, headroom), attributes=attributes, label=label
    )


def parse_label(text: str) -> LabelSpec:
    """``"column=positive"`` → :class:`LabelSpec` (the CLI's and the form's label syntax)."""
    column, separator, positive = text.partition("=")
    if not separator or not column.strip() or not positive.strip():
        raise ValueError(f"label {text!r} must read 'column=positive value', e.g. 'class=p'")
    return LabelSpec(attribute=column.strip(), positive=positive.strip())
