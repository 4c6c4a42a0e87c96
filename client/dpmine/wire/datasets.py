"""Dataset wire models: public metadata declared by the owner (DESIGN.md contract item 2).

Nothing here is derived from the data at query time. In particular no model carries the row
count: n is private, only the owner's public upper bound ``n_max`` is known.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Annotated, Literal

from pydantic import AfterValidator, Discriminator, Field, model_validator

from dpmine.wire.common import AccountingUnit, GuaranteePolicy, Timestamp, WireModel

__all__ = [
    "BOOLEAN_FALSE",
    "BOOLEAN_TRUE",
    "DATASET_ID_RULE",
    "DEFAULT_MISSING_VALUES",
    "MAX_ROW_WIDTH",
    "AnyAttribute",
    "BooleanAttribute",
    "CategoricalAttribute",
    "CsvPairSource",
    "CsvSource",
    "DatasetId",
    "DatasetInfo",
    "DatasetKind",
    "DatasetMetadata",
    "DatasetSource",
    "FimiSource",
    "LabelSpec",
    "NumericAttribute",
    "ProposalReview",
    "SqlSource",
    "View",
    "is_dataset_id",
]

View = Literal["left", "right"]
DatasetKind = Literal["views", "table", "transactions"]
#: The dataset-id rule in words (errors and documentation say this, never the pattern).
DATASET_ID_RULE = (
    "1 to 64 characters: lower-case letters a-z, digits 0-9, '-' and '_', starting with a "
    "letter or a digit"
)
_DATASET_ID = re.compile(r"[a-z0-9][a-z0-9_-]*")
_DATASET_ID_LENGTH = 64


def is_dataset_id(text: str) -> bool:
    """Whether ``text`` follows :data:`DATASET_ID_RULE`."""
    return len(text) <= _DATASET_ID_LENGTH and _DATASET_ID.fullmatch(text) is not None


def _dataset_id(text: str) -> str:
    if not is_dataset_id(text):
        shown = text if len(text) <= 80 else f"{text[:80]}…"
        raise ValueError(f"a dataset id has {DATASET_ID_RULE}; got {shown!r}")
    return text


DatasetId = Annotated[
    str,
    AfterValidator(_dataset_id),
    Field(
        description=f"Dataset id: {DATASET_ID_RULE}.",
        json_schema_extra={
            "minLength": 1,
            "maxLength": _DATASET_ID_LENGTH,
            "pattern": "^[a-z0-9][a-z0-9_\\-]*$",
        },
    ),
]
Name = Annotated[str, Field(min_length=1, max_length=200)]

DEFAULT_MISSING_VALUES: tuple[str, ...] = ("", "?", "NA", "N/A", "nan", "NaN", "null")
#: The cell texts (lower-cased) a Boolean attribute reads as true and as false.
BOOLEAN_TRUE = frozenset({"1", "1.0", "true", "t", "yes"})
BOOLEAN_FALSE = frozenset({"0", "0.0", "false", "f", "no"})

#: Largest public row bound accepted (sensitivities are computed from it).
MAX_N_MAX = 1_000_000_000
#: Largest declared row width of transaction data.
MAX_ROW_WIDTH = 1_000_000


class BooleanAttribute(WireModel):
    """A 0/1 attribute. CSV cells may read 1/0, true/false, t/f, yes/no (any case)."""

    type: Literal["boolean"] = "boolean"
    name: Name
    view: View | None = None


class CategoricalAttribute(WireModel):
    """An attribute with a full public list of categories."""

    type: Literal["categorical"] = "categorical"
    name: Name
    view: View | None = None
    categories: list[Annotated[str, Field(max_length=200)]] = Field(min_length=1, max_length=10_000)

    @model_validator(mode="after")
    def _unique_categories(self) -> CategoricalAttribute:
        seen: set[str] = set()
        for category in self.categories:
            if category in seen:
                raise ValueError(f"attribute {self.name!r} lists category {category!r} twice")
            seen.add(category)
        return self


class NumericAttribute(WireModel):
    """A real-valued attribute with a public range [lo, hi]; values are clipped to it."""

    type: Literal["numeric"] = "numeric"
    name: Name
    view: View | None = None
    lo: float = Field(allow_inf_nan=False)
    hi: float = Field(allow_inf_nan=False)
    grid: list[float] | None = Field(
        default=None,
        max_length=10_000,
        description="Optional public threshold grid (§1.4 grid mode; docs/operations.md).",
    )
    text_as_missing: bool = Field(
        default=False,
        description=(
            "Read cells that are not numbers as missing instead of refusing the data "
            "(proposed for a numeric column spoiled by a few text cells)."
        ),
    )
    lattice_bits: int = Field(
        default=16,
        ge=1,
        le=24,
        description=(
            "Released continuous thresholds are points of a public lattice of 2^bits + 1 "
            "equally spaced values of [lo, hi] (docs/privacy.md, contract item 6)."
        ),
    )

    @model_validator(mode="after")
    def _range_is_proper(self) -> NumericAttribute:
        if not self.lo < self.hi:
            raise ValueError(
                f"attribute {self.name!r}: public range needs lo < hi, got [{self.lo}, {self.hi}]"
            )
        if self.grid is not None:
            for value in self.grid:
                if not math.isfinite(value) or not self.lo <= value <= self.hi:
                    raise ValueError(
                        f"attribute {self.name!r}: grid value {value} is outside "
                        f"[{self.lo}, {self.hi}]"
                    )
            if sorted(set(self.grid)) != self.grid:
                raise ValueError(f"attribute {self.name!r}: grid must be strictly increasing")
        return self


AnyAttribute = Annotated[
    BooleanAttribute | CategoricalAttribute | NumericAttribute, Discriminator("type")
]


class LabelSpec(WireModel):
    """The label column of classification data and its positive value."""

    attribute: Name
    positive: str = Field(max_length=200)


class ProposalReview(WireModel):
    """The owner's review of a ``propose-metadata`` proposal (docs/privacy.md, contract item 2).

    Owner-side only: registration refuses a proposal whose ``reviewed`` is false (unless forced)
    and drops this field, so analysts never see it. The notes name columns and reasons, never
    data values or counts.
    """

    reviewed: bool = Field(
        default=False, description="Set to true once the owner has checked every attribute."
    )
    notes: list[Annotated[str, Field(max_length=2000)]] = Field(
        default_factory=list,
        max_length=100_000,
        description="Why columns were excluded or flagged, and what the owner should check.",
    )


class DatasetMetadata(WireModel):
    """Everything public about a dataset, declared by its owner (docs/privacy.md, item 2)."""

    kind: DatasetKind
    n_max: int = Field(ge=1, le=MAX_N_MAX, description="Public upper bound on the row count.")
    attributes: list[AnyAttribute] = Field(default_factory=list, max_length=100_000)
    items: list[Annotated[str, Field(min_length=1, max_length=200)]] = Field(
        default_factory=list,
        max_length=1_000_000,
        description="Item universe of transaction data.",
    )
    max_row_width: int | None = Field(
        default=None,
        ge=1,
        le=MAX_ROW_WIDTH,
        description=(
            "Transaction data: the most items a row holds. A longer row is cut to its first "
            "max_row_width items in the order of 'items' when the data is loaded (a per-row "
            "map, so neighbouring datasets stay neighbours). Unset: the number of items. "
            "Itemset mining's running time is bounded from it (docs/operations.md §4.1)."
        ),
    )
    label: LabelSpec | None = None
    missing_values: list[str] = Field(default_factory=lambda: list(DEFAULT_MISSING_VALUES))
    review: ProposalReview | None = Field(
        default=None,
        description=(
            "Present only in a proposal: the owner's review. Metadata written by hand has none; "
            "registration drops it."
        ),
    )

    @model_validator(mode="after")
    def _consistent(self) -> DatasetMetadata:
        names = [attribute.name for attribute in self.attributes]
        duplicated = sorted(name for name, seen in Counter(names).items() if seen > 1)
        if duplicated:
            raise ValueError(f"attribute names must be unique; repeated: {duplicated}")
        if self.kind == "transactions":
            self._check_transactions()
            return self
        if self.items:
            raise ValueError(f"'items' is only for transaction datasets, not kind {self.kind!r}")
        if self.max_row_width is not None:
            raise ValueError(
                f"'max_row_width' is only for transaction datasets, not kind {self.kind!r} (a "
                "row of attribute data holds at most one item per attribute)"
            )
        if not self.attributes:
            raise ValueError(f"a {self.kind!r} dataset needs at least one attribute")
        if self.kind == "views":
            self._check_views()
        if self.label is not None:
            self._check_label(self.label)
        return self

    def _check_transactions(self) -> None:
        if self.attributes:
            raise ValueError("transaction datasets declare 'items', not 'attributes'")
        if not self.items:
            raise ValueError("transaction datasets need a non-empty public item universe")
        if len(set(self.items)) != len(self.items):
            raise ValueError("the item universe lists an item twice")
        if self.label is not None:
            raise ValueError("transaction datasets have no label column")

    @property
    def row_width(self) -> int:
        """The public bound on the items of one row of transaction data: ``max_row_width``,
        or the number of items when it is unset."""
        if self.max_row_width is None:
            return len(self.items)
        return min(self.max_row_width, len(self.items))

    def _check_views(self) -> None:
        missing_view = [a.name for a in self.attributes if a.view is None]
        if missing_view:
            raise ValueError(f"every attribute of a two-view dataset needs a view: {missing_view}")
        for view in ("left", "right"):
            if not any(a.view == view for a in self.attributes):
                raise ValueError(f"the {view} view has no attribute")

    def _check_label(self, label_spec: LabelSpec) -> None:
        label = next((a for a in self.attributes if a.name == label_spec.attribute), None)
        if label is None:
            raise ValueError(f"label attribute {label_spec.attribute!r} is not declared")
        if isinstance(label, NumericAttribute):
            raise ValueError(f"label attribute {label.name!r} must be Boolean or categorical")
        if isinstance(label, CategoricalAttribute) and label_spec.positive not in label.categories:
            raise ValueError(
                f"positive label {label_spec.positive!r} is not a category of {label.name!r}"
            )

    def attribute(self, name: str) -> BooleanAttribute | CategoricalAttribute | NumericAttribute:
        """The declared attribute called ``name`` (KeyError if there is none).

        By a name index built on first use: the kernels look attributes up thousands of times
        a call (a linear scan took 0.12 s of a 0.18 s Serenade extension over 172 attributes).
        The index sits in the instance's ``__dict__`` beside the fields, as a
        ``functools.cached_property`` would (pydantic's equality, dumps and schema read the
        fields only), and remembers the list it was built from, so a copy whose
        ``attributes`` were replaced (``model_copy(update=...)`` copies the ``__dict__``)
        builds its own."""
        cached: tuple[list[AnyAttribute], dict[str, AnyAttribute]] | None
        cached = self.__dict__.get(_ATTRIBUTE_INDEX)
        if cached is None or cached[0] is not self.attributes:
            cached = (self.attributes, {a.name: a for a in self.attributes})
            self.__dict__[_ATTRIBUTE_INDEX] = cached
        return cached[1][name]


#: Where :meth:`DatasetMetadata.attribute` keeps its name index (not a field).
_ATTRIBUTE_INDEX = "_attribute_index"


class CsvSource(WireModel):
    """One CSV file (optionally gzip); columns map to views through the metadata."""

    format: Literal["csv"] = "csv"
    path: str = Field(min_length=1, description="Server-side path of the stored file.")


class CsvPairSource(WireModel):
    """Two CSV files with the same rows in the same order, one per view."""

    format: Literal["csv_pair"] = "csv_pair"
    left: str = Field(min_length=1)
    right: str = Field(min_length=1)
    id_column: str | None = Field(
        default=None,
        description=(
            "Row id column present in both files: rows are matched on it (each id once in each "
            "file, the same ids in both), then it is dropped."
        ),
    )


class FimiSource(WireModel):
    """A FIMI ``.dat`` file (optionally gzip): one transaction of item tokens per line."""

    format: Literal["fimi"] = "fimi"
    path: str = Field(min_length=1)


class SqlSource(WireModel):
    """A table or query in an existing SQL database reachable with a SQLAlchemy URL."""

    format: Literal["sql"] = "sql"
    url: str = Field(min_length=1)
    table: str | None = None
    query: str | None = None

    @model_validator(mode="after")
    def _table_or_query(self) -> SqlSource:
        if (self.table is None) == (self.query is None):
            raise ValueError("an SQL source needs exactly one of 'table' or 'query'")
        return self


DatasetSource = Annotated[
    CsvSource | CsvPairSource | FimiSource | SqlSource, Discriminator("format")
]


class DatasetInfo(WireModel):
    """What an analyst (or the owner) sees of a dataset: public metadata, never rows or n."""

    id: DatasetId
    name: str
    description: str = ""
    attribution: str = ""
    version: int
    status: Literal["active", "retired"]
    guarantee_policy: GuaranteePolicy = Field(
        default="allow_approximate",
        description='The owner\'s policy: "pure_only" refuses operations whose guarantee is '
        '"approximate" (before any charge); "allow_approximate" serves every operation.',
    )
    accounting: AccountingUnit = Field(
        default="pure",
        description='The unit of the dataset\'s ledger (public, set by the owner): "pure" adds '
        'epsilon; "zcdp" adds rho (each call\'s receipt shows both).',
    )
    metadata: DatasetMetadata
    created_at: Timestamp
