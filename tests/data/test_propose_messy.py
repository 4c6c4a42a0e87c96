"""Proposals on messy files never copy private values into the public schema (issue #13.1).

Every file is generated here: identifiers, numbers spoiled by text, odd missing tokens, other
delimiters, outliers, high-cardinality text, header-only and non-UTF-8 files.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from dpmine.wire.datasets import (
    CategoricalAttribute,
    CsvPairSource,
    CsvSource,
    DatasetMetadata,
    LabelSpec,
    NumericAttribute,
    ProposalReview,
)
from dpmine.wire.queries import NumLiteral
from dpmine_server.data.loaders import (
    load_csv_frame,
    load_csv_streaming,
    load_store,
    read_csv_strings,
)
from dpmine_server.data.propose import (
    MAX_PUBLIC_CATEGORIES,
    UnreviewedProposal,
    accept_reviewed,
    loaded_value_warnings,
    propose_metadata,
    public_range,
)

N_ROWS = 200


def _write(path: Path, header: list[str], rows: list[list[str]], delimiter: str = ",") -> Path:
    lines = [delimiter.join(header), *(delimiter.join(row) for row in rows)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _ages(rng: random.Random) -> list[str]:
    """Ages in [50, 101] with both extremes present (neither 101 nor the range is round)."""
    ages = [str(rng.randint(51, 100)) for _ in range(N_ROWS - 2)]
    return [*ages, "50", "101"]


def _propose(path: Path, *, label: LabelSpec | None = None) -> DatasetMetadata:
    return propose_metadata(
        CsvSource(path=path.name), kind="table", base_dir=path.parent, label=label
    )


def _notes(metadata: DatasetMetadata) -> str:
    assert metadata.review is not None
    assert metadata.review.reviewed is False
    return "\n".join(metadata.review.notes)


def _public_text(metadata: DatasetMetadata) -> str:
    """Everything the proposal would publish (the review is dropped at registration)."""
    return metadata.model_copy(update={"review": None}).model_dump_json()


def test_identifier_columns_are_excluded_not_listed(tmp_path: Path) -> None:
    rng = random.Random(1)
    ids = [f"P{rng.randrange(10**6):06d}x{i}" for i in range(N_ROWS)]
    rows = [
        [pid, str(10_000 + i), str(i * 7 % 1000), rng.choice(["a", "b"]), age]
        for i, (pid, age) in enumerate(zip(ids, _ages(rng), strict=True))
    ]
    path = _write(tmp_path / "t.csv", ["patient", "record_id", "serial", "group", "age"], rows)
    metadata = _propose(path)
    assert [a.name for a in metadata.attributes] == ["serial", "group", "age"]
    notes = _notes(metadata)
    assert "column 'patient' excluded: it looks like a row identifier" in notes
    assert "column 'record_id' excluded: it looks like a row identifier" in notes
    # An integer column of distinct values not named like an id is kept, as a rounded range,
    # and flagged for the owner.
    assert "column 'serial' flagged: every value is distinct" in notes
    public = _public_text(metadata)
    assert not any(pid in public or pid in notes for pid in ids)


def test_a_few_text_cells_in_a_numeric_column_read_as_missing(tmp_path: Path) -> None:
    rng = random.Random(2)
    values = [f"{rng.uniform(0.5, 9.5):.2f}" for _ in range(N_ROWS)]
    values[17] = "1.2 mg/L"
    values[90] = "<0.1"
    path = _write(tmp_path / "t.csv", ["crp"], [[v] for v in values])
    metadata = _propose(path)
    crp = metadata.attribute("crp")
    assert isinstance(crp, NumericAttribute)
    assert crp.text_as_missing
    assert (crp.lo, crp.hi) == (0.0, 10.0)
    notes = _notes(metadata)
    assert "column 'crp' flagged: a few cells are text" in notes
    for text in ("mg/L", "<0.1"):
        assert text not in notes
        assert text not in _public_text(metadata)
    store, report = load_store(metadata, CsvSource(path="t.csv"), base_dir=tmp_path)
    assert store.n_rows == N_ROWS
    assert report.missing["crp"] == 2


def test_mostly_text_is_not_numeric(tmp_path: Path) -> None:
    """Above the 5 % share of text cells the column is text (here: categorical)."""
    values = ["1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13"] * 10
    values += ["high"] * 10
    path = _write(tmp_path / "t.csv", ["level"], [[v] for v in values])
    level = _propose(path).attribute("level")
    assert isinstance(level, CategoricalAttribute)
    assert "high" in level.categories


def test_common_missing_tokens_are_recognised_and_named(tmp_path: Path) -> None:
    rng = random.Random(3)
    tokens = ["NULL", "n/a", "-", "."]
    values = [f"{rng.uniform(0, 50):.1f}" for _ in range(N_ROWS)]
    for i, token in enumerate(tokens * 10):
        values[i * 4] = token
    path = _write(tmp_path / "t.csv", ["bmi"], [[v] for v in values])
    metadata = _propose(path)
    bmi = metadata.attribute("bmi")
    assert isinstance(bmi, NumericAttribute)
    assert not bmi.text_as_missing  # the tokens are missing values, not stray text
    assert set(tokens) <= set(metadata.missing_values)
    assert "'NULL', 'n/a', '-', '.'" in _notes(metadata)
    _store, report = load_store(metadata, CsvSource(path="t.csv"), base_dir=tmp_path)
    assert report.missing["bmi"] == 40


@pytest.mark.parametrize(
    ("delimiter", "word"), [(";", "semicolon"), ("\t", "tab"), ("|", "vertical bar")]
)
def test_other_delimiters_are_detected(tmp_path: Path, delimiter: str, word: str) -> None:
    rng = random.Random(4)
    rows = [[rng.choice(["x", "y"]), f"{rng.uniform(1, 2):.3f}", "low, stable"] for _ in range(50)]
    path = _write(tmp_path / "t.csv", ["kind", "dose", "note"], rows, delimiter)
    metadata = _propose(path)
    assert [a.name for a in metadata.attributes] == ["kind", "dose", "note"]
    assert metadata.attribute("kind") == CategoricalAttribute(name="kind", categories=["x", "y"])
    assert f"the file is {word}-delimited" in _notes(metadata)
    store, _ = load_store(metadata, CsvSource(path="t.csv"), base_dir=tmp_path)
    assert store.n_rows == 50


def test_a_comma_file_with_semicolons_in_cells_stays_comma(tmp_path: Path) -> None:
    rows = [["a;b", "1"], ["c;d", "2"], ["a;b", "3"]]
    path = _write(tmp_path / "t.csv", ["pair", "n"], rows)
    assert list(read_csv_strings(path).columns) == ["pair", "n"]
    assert "delimited" not in _notes(_propose(path))


def test_ranges_are_rounded_outward_and_say_so(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.csv", ["age"], [[a] for a in _ages(random.Random(5))])
    metadata = _propose(path)
    assert metadata.attribute("age") == NumericAttribute(name="age", lo=40.0, hi=120.0)
    assert "column 'age': range [40, 120] is the data's range rounded outward" in _notes(metadata)


def test_outliers_are_flagged_and_the_range_covers_the_bulk(tmp_path: Path) -> None:
    rng = random.Random(6)
    values = [f"{rng.uniform(0, 100):.1f}" for _ in range(N_ROWS - 2)] + ["-100000", "1000000"]
    path = _write(tmp_path / "t.csv", ["income"], [[v] for v in values])
    metadata = _propose(path)
    income = metadata.attribute("income")
    assert isinstance(income, NumericAttribute)
    assert (income.lo, income.hi) == (0.0, 100.0)
    assert "column 'income' flagged: it has outliers" in _notes(metadata)
    assert "100000" not in _public_text(metadata)
    _store, report = load_store(metadata, CsvSource(path="t.csv"), base_dir=tmp_path)
    assert report.clipped["income"] == 2


def test_high_cardinality_text_is_excluded(tmp_path: Path) -> None:
    cities = [f"city{i:02d}" for i in range(MAX_PUBLIC_CATEGORIES + 10)]
    rows = [[city, str(i % 2)] for i, city in enumerate(cities * 10)]
    path = _write(tmp_path / "t.csv", ["city", "flag"], rows)
    metadata = _propose(path)
    assert [a.name for a in metadata.attributes] == ["flag"]
    notes = _notes(metadata)
    assert f"column 'city' excluded: it has more than {MAX_PUBLIC_CATEGORIES} distinct" in notes
    assert "city0" not in _public_text(metadata)
    assert "city0" not in notes


def test_rare_categories_are_flagged(tmp_path: Path) -> None:
    rows = [["common"]] * 40 + [["rare"]]
    path = _write(tmp_path / "t.csv", ["diagnosis"], rows)
    assert "column 'diagnosis' flagged: some categories occur fewer than 5" in _notes(
        _propose(path)
    )


def test_a_view_left_empty_by_exclusions_is_a_clear_error(tmp_path: Path) -> None:
    rows = [[f"u{i}", str(i % 2)] for i in range(N_ROWS)]
    _write(tmp_path / "t.csv", ["user", "flag"], rows)
    with pytest.raises(ValueError, match=r"no valid proposal .*the left view has no attribute"):
        propose_metadata(
            CsvSource(path="t.csv"),
            kind="views",
            base_dir=tmp_path,
            views={"user": "left", "flag": "right"},
        )


def test_a_numeric_label_with_many_values_is_refused(tmp_path: Path) -> None:
    rows = [[str(i), str(i % 2)] for i in range(N_ROWS)]
    path = _write(tmp_path / "t.csv", ["score", "flag"], rows)
    with pytest.raises(ValueError, match="label column 'score' has more than 50"):
        _propose(path, label=LabelSpec(attribute="score", positive="3"))


def test_header_only_and_bad_encoding_name_the_problem(tmp_path: Path) -> None:
    (tmp_path / "header.csv").write_text("a,b\n", encoding="utf-8")
    with pytest.raises(ValueError, match="has a header but no rows"):
        _propose(tmp_path / "header.csv")
    (tmp_path / "latin.csv").write_bytes("a,b\n1,x\n2,caf\xe9\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"is not UTF-8 text: line 3 holds byte 0xe9"):
        _propose(tmp_path / "latin.csv")


def test_a_pair_proposal_leaves_out_the_id_column(tmp_path: Path) -> None:
    ids = [f"r{i}" for i in range(N_ROWS)]
    _write(tmp_path / "l.csv", ["rid", "a"], [[r, str(i % 2)] for i, r in enumerate(ids)])
    right = [[r, f"{i / 10:.1f}"] for i, r in enumerate(ids)]
    _write(tmp_path / "r.csv", ["rid", "b"], list(reversed(right)))  # other order: joined on rid
    source = CsvPairSource(left="l.csv", right="r.csv", id_column="rid")
    metadata = propose_metadata(source, kind="views", base_dir=tmp_path)
    assert [a.name for a in metadata.attributes] == ["a", "b"]
    store, _ = load_store(metadata, source, base_dir=tmp_path)
    # Row i of the left file meets row i of the right file through the id, not the position.
    late = store.evaluate(NumLiteral(attribute="b", lower=10.0)).to_indices()
    assert [int(row) for row in late] == list(range(100, N_ROWS))


def test_public_range_is_round_and_covers(tmp_path: Path) -> None:
    del tmp_path
    rng = random.Random(7)
    for _ in range(500):
        low = rng.uniform(-1e4, 1e4) * 10 ** rng.randint(-4, 2)
        high = low + abs(rng.gauss(0, 1)) * 10 ** rng.randint(-4, 4)
        lo, hi = public_range(low, high)
        assert lo <= low
        assert hi >= high
        assert lo < hi


# -- review and registration --------------------------------------------------------------------


def test_accept_reviewed() -> None:
    hand = DatasetMetadata(
        kind="table", n_max=10, attributes=[NumericAttribute(name="x", lo=0, hi=1)]
    )
    assert accept_reviewed(hand) is hand  # hand-written metadata: no proposal marker
    proposal = hand.model_copy(
        update={"review": ProposalReview(notes=["column 'id' excluded: it looks like an id"])}
    )
    with pytest.raises(UnreviewedProposal, match=r"not been reviewed.*column 'id' excluded"):
        accept_reviewed(proposal)
    assert accept_reviewed(proposal, force=True).review is None
    reviewed = proposal.model_copy(update={"review": ProposalReview(reviewed=True)})
    assert accept_reviewed(reviewed).review is None


def _load_warnings(metadata: DatasetMetadata, path: Path) -> list[str]:
    """The copied-values warnings of a registration: from what the load gathered, on the
    streaming path and on the whole-frame path (they must agree)."""
    streamed = load_csv_streaming(metadata, path, "t")[1]
    framed = load_csv_frame(metadata, path, "t")[1]
    warnings = loaded_value_warnings(metadata, streamed.values)
    assert loaded_value_warnings(metadata, framed.values) == warnings
    return warnings


def test_copied_values_are_warned(tmp_path: Path) -> None:
    rng = random.Random(8)
    rows = [[age, f"id{i}"] for i, age in enumerate(_ages(rng))]
    rows[5][0] = "?"  # a missing value counts neither as an extreme nor as a category cell
    rows[6][1] = "?"
    path = _write(tmp_path / "t.csv", ["age", "code"], rows)
    categories = [f"id{i}" for i in range(N_ROWS) if i != 6]
    copied = DatasetMetadata(
        kind="table",
        n_max=1000,
        attributes=[
            NumericAttribute(name="age", lo=50, hi=101),
            CategoricalAttribute(name="code", categories=categories),
        ],
    )
    warnings = _load_warnings(copied, path)
    assert len(warnings) == 2
    assert "attribute 'age': hi equals the data's maximum exactly" in warnings[0]  # 50 is round
    assert "attribute 'code': its categories are exactly the distinct values" in warnings[1]
    proposed = _propose(path).model_copy(update={"review": None})
    assert _load_warnings(proposed, path) == []
    declared = DatasetMetadata(
        kind="table",
        n_max=1000,
        attributes=[
            NumericAttribute(name="age", lo=0, hi=120),
            CategoricalAttribute(name="code", categories=[*categories, "unseen"]),
        ],
    )
    assert _load_warnings(declared, path) == []
    # The extremes are the data's, before clipping: a range inside the data is not "copied".
    clipped = DatasetMetadata(
        kind="table", n_max=1000, attributes=[NumericAttribute(name="age", lo=60.5, hi=99.5)]
    )
    assert _load_warnings(clipped, path) == []
    assert _load_warnings(copied.model_copy(update={"attributes": copied.attributes[:1]}), path)
