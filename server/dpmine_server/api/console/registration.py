"""The console's dataset registration: a file of the data folder, its metadata proposal as an
editable form, the owner's review, then the same registration as ``dpmine-server datasets add``.

Pure form handling, no database: :class:`SourceForm` names the files (inside the server's data
folder only) and :class:`ReviewForm` is the proposal as the owner edits it. Both are rebuilt from
the submitted fields, so a form with a mistake comes back with the owner's input and a list of
what to fix. The "reviewed" box is never ticked by the server (docs/privacy.md, contract item 2:
the metadata is the owner's declaration, not a copy of the data).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from dpmine.wire import (
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
)
from dpmine_server.services.datasets import StoredFile

__all__ = [
    "MAX_LISTED_FILES",
    "AttributeField",
    "FormProblems",
    "ReviewForm",
    "SourceForm",
    "data_files",
    "metadata_rows",
]

#: Files of the data folder offered as suggestions on the form (the owner may type any other).
MAX_LISTED_FILES = 200
#: The data folder's own tree of registered copies: not a place for new sources.
_STORED = "datasets"
_KINDS: dict[str, DatasetKind] = {
    "views": "views",
    "table": "table",
    "transactions": "transactions",
}

#: A submitted form: field name → every value sent under it (a multi-dict's ``getlist``).
Fields = Callable[[str], Sequence[str]]


class FormProblems(ValueError):
    """What the owner must fix on a form, one message per problem (nothing was changed)."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = tuple(problems)


def data_files(data_dir: Path, limit: int = MAX_LISTED_FILES) -> list[str]:
    """Up to ``limit`` files of the data folder (relative, sorted), outside its ``datasets``
    folder of registered copies and hidden entries: suggestions for the source fields."""
    root = data_dir.resolve()
    if not root.is_dir():
        return []
    found: list[str] = []
    for path in sorted(_walk(root, root)):
        found.append(path)
        if len(found) >= limit:
            break
    return found


def _walk(root: Path, folder: Path) -> Iterator[str]:
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith(".") or (folder == root and entry.name == _STORED):
            continue
        if entry.is_dir() and not entry.is_symlink():
            yield from _walk(root, entry)
        elif entry.is_file():
            yield entry.relative_to(root).as_posix()


def _data_file(data_dir: Path, name: str, what: str) -> Path:
    """The file ``name`` inside the data folder (symbolic links resolved), else a problem."""
    root = data_dir.resolve()
    path = (root / name).resolve()
    if not path.is_relative_to(root):
        raise FormProblems([f"{what}: {name!r} is outside the server's data folder"])
    if not path.is_file():
        raise FormProblems(
            [f"{what}: there is no file {name!r} in the server's data folder ({root})"]
        )
    return path


def _one(fields: Fields, name: str) -> str:
    values = fields(name)
    return values[0].strip() if values else ""


@dataclass(frozen=True, slots=True)
class SourceForm:
    """Where the data is and what kind of dataset it is, as typed on the form."""

    dataset_id: str = ""
    name: str = ""
    kind: str = "table"
    path: str = ""
    left: str = ""
    right: str = ""
    id_column: str = ""
    label: str = ""

    @classmethod
    def from_fields(cls, fields: Fields) -> SourceForm:
        """The source part of a submitted form."""
        return cls(**{f: _one(fields, f) for f in cls.__dataclass_fields__})

    def kind_of(self) -> DatasetKind:
        """The dataset kind, or a problem."""
        if self.kind not in _KINDS:
            raise FormProblems(["kind: choose views, table or transactions"])
        return _KINDS[self.kind]

    def source(self) -> DatasetSource:
        """The source the fields name (relative to the data folder), or a problem."""
        pair = bool(self.left or self.right)
        if pair == bool(self.path):
            raise FormProblems(
                ["source: name one file, or a left file and a right file (not both)"]
            )
        if pair:
            if not (self.left and self.right):
                raise FormProblems(["source: a two-file source needs both a left and a right file"])
            return CsvPairSource(left=self.left, right=self.right, id_column=self.id_column or None)
        if self.kind == "transactions":
            return FimiSource(path=self.path)
        return CsvSource(path=self.path)

    def files(self, data_dir: Path) -> dict[str, StoredFile]:
        """The source's files, checked to be files of the data folder (for registration)."""
        self.source()  # one file or a pair, not both
        names = {"left": self.left, "right": self.right} if self.left else {"path": self.path}
        labels = {"path": "file", "left": "left file", "right": "right file"}
        return {
            part: StoredFile(_data_file(data_dir, name, labels[part]), Path(name).name)
            for part, name in names.items()
        }

    def label_spec(self) -> LabelSpec | None:
        """The label field ``column=positive value``, or None when empty."""
        if not self.label:
            return None
        column, sep, positive = self.label.partition("=")
        if not sep or not column.strip():
            raise FormProblems(["label: write 'column=positive value', e.g. class=p"])
        return LabelSpec(attribute=column.strip(), positive=positive.strip())


@dataclass(frozen=True, slots=True)
class AttributeField:
    """One attribute of the review form: its public type and domain as text the owner edits."""

    name: str
    type: str
    keep: bool = True
    view: str = ""
    lo: str = ""
    hi: str = ""
    categories: str = ""
    text_as_missing: bool = False

    @classmethod
    def of(
        cls, attribute: BooleanAttribute | CategoricalAttribute | NumericAttribute
    ) -> AttributeField:
        """The form row of a proposed attribute."""
        base = cls(name=attribute.name, type=attribute.type, view=attribute.view or "")
        if isinstance(attribute, NumericAttribute):
            return replace(
                base,
                lo=_number_text(attribute.lo),
                hi=_number_text(attribute.hi),
                text_as_missing=attribute.text_as_missing,
            )
        if isinstance(attribute, CategoricalAttribute):
            return replace(base, categories="\n".join(attribute.categories))
        return base

    def declared(self) -> dict[str, Any]:
        """The attribute as metadata JSON, or a problem naming the field."""
        declared: dict[str, Any] = {"type": self.type, "name": self.name}
        if self.view:
            declared["view"] = self.view
        if self.type == "numeric":
            declared["lo"] = _number(self.lo, f"attribute {self.name!r}: lower bound")
            declared["hi"] = _number(self.hi, f"attribute {self.name!r}: upper bound")
            declared["text_as_missing"] = self.text_as_missing
        elif self.type == "categorical":
            declared["categories"] = _lines(self.categories)
        return declared


def _number_text(value: float) -> str:
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)


def _number(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise FormProblems([f"{what}: {text!r} is not a number"]) from None
    if not math.isfinite(value):
        raise FormProblems([f"{what}: enter a finite number"])
    return value


def _integer(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise FormProblems([f"{what}: {text!r} is not a whole number"]) from None


def _lines(text: str) -> list[str]:
    """Non-empty lines, without their line breaks (spaces are kept: they are part of a value)."""
    return [line for line in text.replace("\r", "").split("\n") if line]


@dataclass(frozen=True, slots=True)
class ReviewForm:
    """A metadata proposal as the owner edits it, with the proposal's notes beside it."""

    source: SourceForm
    kind: str
    n_max: str
    attributes: tuple[AttributeField, ...] = ()
    items: str = ""
    max_row_width: str = ""
    label_attribute: str = ""
    label_positive: str = ""
    missing_values: str = ""
    notes: tuple[str, ...] = ()
    epsilon_cap: str = ""
    guarantee_policy: str = "allow_approximate"
    description: str = ""
    reviewed: bool = field(default=False)

    @classmethod
    def of_proposal(cls, source: SourceForm, proposal: DatasetMetadata) -> ReviewForm:
        """The form of a fresh proposal (never marked reviewed)."""
        return cls(
            source=source,
            kind=source.kind,
            n_max=str(proposal.n_max),
            attributes=tuple(AttributeField.of(a) for a in proposal.attributes),
            items="\n".join(proposal.items),
            max_row_width="" if proposal.max_row_width is None else str(proposal.max_row_width),
            label_attribute=proposal.label.attribute if proposal.label else "",
            label_positive=proposal.label.positive if proposal.label else "",
            missing_values="\n".join(v for v in proposal.missing_values if v),
            notes=tuple(proposal.review.notes if proposal.review else ()),
        )

    @classmethod
    def from_fields(cls, fields: Fields) -> ReviewForm:
        """The form as submitted (the ``reviewed`` box only as the owner ticked it)."""
        try:
            count = int(_one(fields, "attribute_count") or "0")
        except ValueError:
            count = 0
        attributes = tuple(
            AttributeField(
                name=_one(fields, f"a{i}.name"),
                type=_one(fields, f"a{i}.type"),
                keep=_one(fields, f"a{i}.keep") == "yes",
                view=_one(fields, f"a{i}.view"),
                lo=_one(fields, f"a{i}.lo"),
                hi=_one(fields, f"a{i}.hi"),
                categories=(fields(f"a{i}.categories") or [""])[0],
                text_as_missing=_one(fields, f"a{i}.text_as_missing") == "yes",
            )
            for i in range(min(count, 10_000))
        )
        return cls(
            source=SourceForm.from_fields(fields),
            kind=_one(fields, "kind"),
            n_max=_one(fields, "n_max"),
            attributes=attributes,
            items=(fields("items") or [""])[0],
            max_row_width=_one(fields, "max_row_width"),
            label_attribute=_one(fields, "label_attribute"),
            label_positive=_one(fields, "label_positive"),
            missing_values=(fields("missing_values") or [""])[0],
            notes=tuple(fields("note")),
            epsilon_cap=_one(fields, "epsilon_cap"),
            guarantee_policy=_one(fields, "guarantee_policy") or "allow_approximate",
            description=_one(fields, "description"),
            reviewed=_one(fields, "reviewed") == "yes",
        )

    def cap(self) -> float:
        """The cap field as a number, or a problem."""
        if not self.epsilon_cap:
            raise FormProblems(["cap: enter the total ε ever spendable on the dataset, e.g. 5"])
        return _number(self.epsilon_cap, "cap")

    def metadata(self) -> DatasetMetadata:
        """The edited metadata as a proposal carrying the owner's review (the registration
        refuses it unless ``reviewed``), or every problem found."""
        problems: list[str] = []
        attributes = []
        for row in self.attributes:
            if not row.keep:
                continue
            try:
                attributes.append(row.declared())
            except FormProblems as error:
                problems += error.problems
        n_max: int | str = self.n_max
        try:
            n_max = _integer(self.n_max, "public row bound n_max")
        except FormProblems as error:
            problems += error.problems
        declared: dict[str, Any] = {
            "kind": self.kind,
            "n_max": n_max,
            "attributes": attributes,
            "items": _lines(self.items),
            "missing_values": ["", *_lines(self.missing_values)],
            "review": ProposalReview(reviewed=self.reviewed, notes=list(self.notes)),
        }
        if self.max_row_width:
            try:
                declared["max_row_width"] = _integer(self.max_row_width, "most items per row")
            except FormProblems as error:
                problems += error.problems
        if self.label_attribute:
            declared["label"] = {
                "attribute": self.label_attribute,
                "positive": self.label_positive,
            }
        if problems:
            raise FormProblems(problems)
        try:
            return DatasetMetadata.model_validate(declared)
        except ValidationError as error:
            raise FormProblems([_problem(e) for e in error.errors()[:10]]) from None


def _problem(error: Mapping[str, Any]) -> str:
    """One validation error in the form's words (the message, where it is)."""
    message = str(error["msg"]).removeprefix("Value error, ")
    where = [str(part) for part in error["loc"]]
    if not where:
        return message
    if where[0] == "attributes" and len(where) > 1:
        return f"attribute #{int(where[1]) + 1} ({'.'.join(where[3:]) or 'value'}): {message}"
    return f"{'.'.join(where)}: {message}"


@dataclass(frozen=True, slots=True)
class MetadataRow:
    """One attribute as the dataset page shows it: name, type and public domain in words."""

    name: str
    type: str
    domain: str
    note: str = ""


def metadata_rows(metadata: DatasetMetadata) -> list[tuple[str, list[MetadataRow]]]:
    """The public metadata as one table per view (one table for a single-view dataset)."""
    label = metadata.label
    groups: dict[str, list[MetadataRow]] = {}
    for attribute in metadata.attributes:
        if isinstance(attribute, NumericAttribute):
            domain = f"[{_number_text(attribute.lo)}, {_number_text(attribute.hi)}]"
            extra = ["text cells read as missing"] if attribute.text_as_missing else []
            if attribute.grid is not None:
                extra.append(f"grid of {len(attribute.grid)} thresholds")
        elif isinstance(attribute, CategoricalAttribute):
            domain = ", ".join(attribute.categories)
            extra = []
        else:
            domain, extra = "true / false", []
        if label is not None and label.attribute == attribute.name:
            extra.append(f"label (positive: {label.positive})")
        title = f"{attribute.view} view" if attribute.view else "attributes"
        groups.setdefault(title, []).append(
            MetadataRow(attribute.name, attribute.type, domain, "; ".join(extra))
        )
    return sorted(groups.items())
