"""Public item universes (ALGORITHMS.md §4.1, §5.1): what itemset mining and rule-list
antecedents may use, from the public metadata and the public request only.

The server builds its catalogs from these functions and the client its displays, so both sides
name and bound every item the same way:

* a numeric attribute becomes items through its **public bins** (:func:`numeric_bins_of`): the
  owner's ``grid`` as cut-points, else ``numeric_bins`` equal-width bins of [lo, hi];
* a request may restrict the attributes an operation uses (``columns``): :func:`usable_columns`
  checks the names against the schema and turns ``columns``/``exclude`` into one list.

Neither changes a sensitivity: the candidate set stays a function of public values, and a count
over any fixed itemset still moves by at most 1 when a row is added or removed.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Collection, Sequence
from typing import Annotated

from pydantic import AfterValidator, Field

from dpmine.wire.datasets import (
    BooleanAttribute,
    CategoricalAttribute,
    DatasetMetadata,
    NumericAttribute,
)
from dpmine.wire.queries import AnyLiteral, BoolLiteral, CatLiteral, NumLiteral

__all__ = [
    "DEFAULT_NUMERIC_BINS",
    "MAX_NUMERIC_BINS",
    "ColumnNames",
    "NamedItem",
    "attribute_items",
    "itemset_items",
    "numeric_bin_edges",
    "numeric_bin_name",
    "numeric_bins_of",
    "rule_list_items",
    "usable_columns",
]

MAX_NUMERIC_BINS = 64
DEFAULT_NUMERIC_BINS = 4

#: An item of itemset mining: its name in releases and the literal whose rows it counts.
NamedItem = tuple[str, AnyLiteral]


def _distinct_names(names: list[str]) -> list[str]:
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"columns lists {repeated} more than once; name each column once")
    return names


#: The attributes an operation may use (a public part of the request): distinct names.
ColumnNames = Annotated[
    list[Annotated[str, Field(min_length=1, max_length=200)]],
    Field(min_length=1, max_length=100_000),
    AfterValidator(_distinct_names),
]


# --------------------------------------------------------------------------------------------
# Numeric attributes: public bins


def numeric_bin_edges(attribute: NumericAttribute, numeric_bins: int) -> list[float]:
    """Public bin edges lo = e_0 < … < e_B = hi of a numeric attribute (§5.1): its declared
    ``grid`` values strictly inside (lo, hi) as cut-points, else ``numeric_bins`` equal-width
    bins."""
    lo, hi = attribute.lo, attribute.hi
    if attribute.grid is not None:
        cuts = [value for value in attribute.grid if lo < value < hi]
    else:
        cuts = [lo + (hi - lo) * step / numeric_bins for step in range(1, numeric_bins)]
        cuts = [value for value in cuts if lo < value < hi]
    return [lo, *cuts, hi]


def numeric_bins_of(attribute: NumericAttribute, numeric_bins: int) -> list[tuple[float, float]]:
    """The public bins of a numeric attribute as closed (lower, upper) bounds (§5.1): [e_0, e_1),
    [e_1, e_2), …, [e_{B−1}, e_B] of :func:`numeric_bin_edges`, each half-open bin written with
    the largest float below its cut-point as upper bound. Bins are disjoint, so no row holds two
    items of one attribute (the invariant the itemset miner relies on, as for categories)."""
    edges = numeric_bin_edges(attribute, numeric_bins)
    last = len(edges) - 2
    return [
        (lower, upper if position == last else math.nextafter(upper, -math.inf))
        for position, (lower, upper) in enumerate(itertools.pairwise(edges))
    ]


def numeric_bin_name(name: str, lower_edge: float, upper_edge: float, *, last: bool) -> str:
    """The item name of a bin, its exact edges: ``age=[25.0, 50.0)``, the last bin closed
    ``age=[50.0, 100.0]``."""
    return f"{name}=[{lower_edge!r}, {upper_edge!r}{']' if last else ')'}"


def _numeric_items(attribute: NumericAttribute, numeric_bins: int) -> list[NamedItem]:
    edges = numeric_bin_edges(attribute, numeric_bins)
    bins = numeric_bins_of(attribute, numeric_bins)
    return [
        (
            numeric_bin_name(attribute.name, edges[at], edges[at + 1], last=at == len(bins) - 1),
            NumLiteral(attribute=attribute.name, lower=lower, upper=upper),
        )
        for at, (lower, upper) in enumerate(bins)
    ]


# --------------------------------------------------------------------------------------------
# Columns an operation may use


def usable_columns(
    metadata: DatasetMetadata,
    columns: str | Sequence[str] | None,
    exclude: str | Sequence[str] | None = (),
    *,
    label: str | None = None,
) -> list[str] | None:
    """The attributes an operation may use, in schema order, or None for all of them.

    ``columns`` (default: every attribute) minus ``exclude`` (None: nothing); a single name
    may be given as a string. ``label``: the attribute a rule list predicts, never an item, so
    naming it in either is a mistake. A name the schema does not declare, a transaction dataset
    (items, no columns) or nothing left to use is a ValueError that says what to fix. Public
    values only.
    """
    chosen = [columns] if isinstance(columns, str) else None if columns is None else list(columns)
    dropped = [exclude] if isinstance(exclude, str) else list(exclude or ())
    if chosen is None and not dropped:
        return None
    if metadata.kind == "transactions":
        raise ValueError(
            "columns and exclude restrict the attributes of a table; this dataset is transaction "
            "data, whose items are not columns: leave both out"
        )
    known = [attribute.name for attribute in metadata.attributes]
    unknown = [name for name in [*(chosen or []), *dropped] if name not in known]
    if unknown:
        raise ValueError(f"unknown column(s) {unknown}; the dataset's columns are {known}")
    if label is not None and label in [*(chosen or []), *dropped]:
        raise ValueError(
            f"{label!r} is the label: a rule list predicts it and never uses it as an item, so "
            "leave it out of columns and exclude (exclude the columns that give it away)"
        )
    allowed = [
        name
        for name in known
        if (chosen is None or name in chosen) and name not in dropped and name != label
    ]
    if not allowed:
        raise ValueError("columns and exclude leave no column to use; allow at least one")
    return allowed


def _allowed(name: str, columns: Collection[str] | None) -> bool:
    return columns is None or name in columns


# --------------------------------------------------------------------------------------------
# The universes


def attribute_items(
    attribute: BooleanAttribute | CategoricalAttribute | NumericAttribute, numeric_bins: int
) -> list[AnyLiteral]:
    """The rule-list items of one attribute (§5.1): ``[A = c]`` per category, ``[A]`` and
    ``![A]`` for a Boolean attribute, one closed interval per public bin of a numeric one."""
    name = attribute.name
    if isinstance(attribute, BooleanAttribute):
        return [BoolLiteral(attribute=name), BoolLiteral(attribute=name, negated=True)]
    if isinstance(attribute, CategoricalAttribute):
        return [CatLiteral(attribute=name, category=c) for c in attribute.categories]
    return [literal for _name, literal in _numeric_items(attribute, numeric_bins)]


def rule_list_items(
    metadata: DatasetMetadata, numeric_bins: int, columns: Collection[str] | None = None
) -> list[list[AnyLiteral]]:
    """The items of every attribute but the label (restricted to ``columns`` when given), one
    list per attribute (§5.1, :func:`attribute_items`)."""
    label = metadata.label.attribute if metadata.label is not None else None
    return [
        attribute_items(attribute, numeric_bins)
        for attribute in metadata.attributes
        if attribute.name != label and _allowed(attribute.name, columns)
    ]


def itemset_items(
    metadata: DatasetMetadata,
    numeric_bins: int | None = None,
    columns: Collection[str] | None = None,
) -> list[list[NamedItem]]:
    """The item universe of itemset mining (§4.1), one group per attribute (an itemset holds at
    most one item of a group): every item of transaction data is its own group ``[item]``; a
    Boolean attribute gives ``A`` = ``[A]``, a categorical one ``A=c`` = ``[A = c]`` per
    category, a numeric one, when ``numeric_bins`` is given, one item per public bin
    (:func:`numeric_bin_name`, :func:`numeric_bins_of`), else none. ``columns`` restricts the
    attributes (tables only)."""
    if metadata.kind == "transactions":
        return [[(item, BoolLiteral(attribute=item))] for item in metadata.items]
    groups: list[list[NamedItem]] = []
    for attribute in metadata.attributes:
        if not _allowed(attribute.name, columns):
            continue
        if isinstance(attribute, BooleanAttribute):
            groups.append([(attribute.name, BoolLiteral(attribute=attribute.name))])
        elif isinstance(attribute, CategoricalAttribute):
            groups.append(
                [
                    (f"{attribute.name}={c}", CatLiteral(attribute=attribute.name, category=c))
                    for c in attribute.categories
                ]
            )
        elif numeric_bins is not None:
            groups.append(_numeric_items(attribute, numeric_bins))
    return groups
