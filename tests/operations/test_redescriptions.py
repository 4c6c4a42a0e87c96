"""``red.compute_quality`` (ALGORITHMS.md §1.2, §1.6): exact support cells under §1.1 semantics,
noise of the two modes (cells: four cells at scale 1/ε; paper: |I| and |U| at scale 2/ε), the
derived statistics, the charged cost and validation of the views.

Statistical checks use N = 4000 releases and 5-sigma bands derived from the exact moments of
the discrete Laplace distribution (false alarm < 1e-6 per check; OpenDP's noise is unseedable).
"""

from __future__ import annotations

import math
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from dpmine.stats import jaccard, p_value
from dpmine.wire import (
    And,
    BooleanAttribute,
    BoolLiteral,
    CategoricalAttribute,
    CatLiteral,
    ComputeQualityRequest,
    ComputeQualityResponse,
    CsvSource,
    DatasetMetadata,
    Expr,
    Not,
    NumericAttribute,
    NumLiteral,
    Or,
    QualityMode,
    Redescription,
)
from dpmine_server.data.columns import ColumnStore
from dpmine_server.data.loaders import load_store
from dpmine_server.dp.budget import Epsilon
from dpmine_server.dp.rng import seeded_generator
from dpmine_server.operations import CATALOG
from dpmine_server.operations.base import no_progress
from dpmine_server.operations.redescriptions import support_cells

#: Band width in standard deviations (two-sided false alarm 5.7e-7 per check).
Z = 5.0
SAMPLES = 4_000
SPEC = CATALOG["red.compute_quality"]
COLOURS = ["red", "green", "blue"]

#: Ten rows with missing values ("?" and ""); size 12 is clipped to the public hi = 10.
#: Left view: a, colour. Right view: b, size.
CSV_TEXT = """a,colour,b,size
1,red,1,2.0
1,green,0,5
0,red,1,?
?,blue,1,8
0,,0,1
1,red,?,9.5
0,green,1,12
1,blue,0,3
,red,1,0.5
0,blue,?,
"""

A = BoolLiteral(attribute="a")
B = BoolLiteral(attribute="b")
RED = CatLiteral(attribute="colour", category="red")
BLUE = CatLiteral(attribute="colour", category="blue")
GREEN = CatLiteral(attribute="colour", category="green")
SMALL = NumLiteral(attribute="size", lower=0.0, upper=5.0)


def _negated(literal: BoolLiteral | CatLiteral | NumLiteral) -> Expr:
    negated: BoolLiteral | CatLiteral | NumLiteral = literal.model_copy(update={"negated": True})
    return negated


def _metadata(kind: str) -> DatasetMetadata:
    views = kind == "views"
    return DatasetMetadata.model_validate(
        {
            "kind": kind,
            "n_max": 100,
            "attributes": [
                BooleanAttribute(name="a", view="left" if views else None).model_dump(),
                CategoricalAttribute(
                    name="colour", view="left" if views else None, categories=COLOURS
                ).model_dump(),
                BooleanAttribute(name="b", view="right" if views else None).model_dump(),
                NumericAttribute(
                    name="size", view="right" if views else None, lo=0.0, hi=10.0
                ).model_dump(),
            ],
        }
    )


def _load(folder: Path, kind: str) -> ColumnStore:
    (folder / "rows.csv").write_text(CSV_TEXT)
    store, _ = load_store(_metadata(kind), CsvSource(path="rows.csv"), base_dir=folder)
    return store


@pytest.fixture(scope="module")
def views_store(tmp_path_factory: pytest.TempPathFactory) -> ColumnStore:
    return _load(tmp_path_factory.mktemp("views"), "views")


@pytest.fixture(scope="module")
def table_store(tmp_path_factory: pytest.TempPathFactory) -> ColumnStore:
    return _load(tmp_path_factory.mktemp("table"), "table")


#: (left, right, (E11, E10, E01, E00)) worked out by hand from CSV_TEXT; the comments give
#: supp(left) and supp(right).
HAND_CELLS: list[tuple[Expr, Expr, tuple[int, int, int, int]]] = [
    # {0,1,5,7} vs {0,2,3,6,8}
    (A, B, (1, 3, 4, 2)),
    # ![a] = {2,4,6,9} vs ![b] = {1,4,7}: missing rows (3, 8 / 5, 9) are in neither literal
    (_negated(A), _negated(B), (1, 3, 2, 4)),
    # Not is the complement: {2,3,4,6,8,9} vs {1,4,5,7,9}
    (Not(term=A), Not(term=B), (2, 4, 3, 1)),
    # {0,2,3,5,7,8,9} vs [size <= 5] = {0,1,4,7,8} (NaN rows 2, 9 never satisfy a bound)
    (Or(terms=[RED, BLUE]), NumLiteral(attribute="size", upper=5.0), (3, 4, 2, 1)),
    # [a] & ![colour = red] = {1,7} vs ![0 <= size <= 5] = {3,5,6}
    (And(terms=[A, _negated(RED)]), _negated(SMALL), (0, 2, 3, 5)),
    # Not([colour = green]) = {0,2,3,4,5,7,8,9} vs [b] & [size >= 10] = {6} (12 clipped to 10)
    (
        Not(term=GREEN),
        And(terms=[B, NumLiteral(attribute="size", lower=10.0)]),
        (0, 8, 1, 1),
    ),
]


def _moments(scale: float) -> tuple[float, float]:
    """Variance and fourth central moment of P(x) ∝ exp(-|x|/scale) on the integers."""
    x = np.arange(-4000, 4001, dtype=np.float64)
    weights = np.exp(-np.abs(x) / scale)
    pmf = weights / weights.sum()
    return float((pmf * x**2).sum()), float((pmf * x**4).sum())


def assert_discrete_laplace(samples: npt.ArrayLike, *, truth: float, scale: float) -> None:
    """Mean within Z standard errors of ``truth``; variance within Z standard errors of the
    discrete Laplace variance at ``scale``."""
    values = np.asarray(samples, dtype=np.float64)
    variance, fourth = _moments(scale)
    assert abs(values.mean() - truth) <= Z * math.sqrt(variance / values.size), (
        values.mean(),
        truth,
    )
    band = Z * math.sqrt((fourth - variance**2) / values.size) + variance / values.size
    assert abs(values.var(ddof=1) - variance) <= band, (values.var(ddof=1), variance, band)


def _run(
    store: ColumnStore, left: Expr, right: Expr, *, epsilon: float, mode: QualityMode
) -> list[dict[str, Any]]:
    """SAMPLES releases through the registered kernel, charged ``epsilon`` each."""
    request = ComputeQualityRequest(
        redescription=Redescription(left=left, right=right), epsilon=epsilon, mode=mode
    )
    cost = SPEC.cost(request)
    rng = seeded_generator(5)
    return [SPEC.run(store, request, cost, rng, no_progress) for _ in range(SAMPLES)]


# --------------------------------------------------------------------------------------------
# Exact cells


@pytest.mark.parametrize(("left", "right", "cells"), HAND_CELLS)
def test_support_cells_match_the_hand_count(
    views_store: ColumnStore, left: Expr, right: Expr, cells: tuple[int, int, int, int]
) -> None:
    got = support_cells(views_store, Redescription(left=left, right=right))
    assert got == cells
    assert sum(got) == 10  # the cells partition the rows
    assert all(type(value) is int for value in got)


def test_support_cells_on_a_table_may_use_one_attribute_on_both_sides(
    table_store: ColumnStore,
) -> None:
    assert support_cells(table_store, Redescription(left=A, right=A)) == (4, 0, 0, 6)
    # [a] vs ![a]: disjoint supports; the two missing rows are in neither.
    assert support_cells(table_store, Redescription(left=A, right=_negated(A))) == (0, 4, 4, 2)
    assert support_cells(table_store, Redescription(left=A, right=Not(term=A))) == (0, 4, 6, 0)


# --------------------------------------------------------------------------------------------
# cells mode [REC]: four cells + Lap(1/ε)


@pytest.fixture(scope="module")
def cells_releases(views_store: ColumnStore) -> list[dict[str, Any]]:
    return _run(views_store, Not(term=A), Not(term=B), epsilon=1.0, mode="cells")


def test_cells_mode_releases_integer_cells(cells_releases: list[dict[str, Any]]) -> None:
    for release in cells_releases[:200]:
        assert release["mode"] == "cells"
        assert set(release["cells"]) == {"e11", "e10", "e01", "e00"}
        assert all(type(value) is int for value in release["cells"].values())


@pytest.mark.parametrize(("cell", "truth"), [("e11", 2), ("e10", 4), ("e01", 3), ("e00", 1)])
def test_each_cell_is_discrete_laplace_at_scale_one_over_epsilon(
    cells_releases: list[dict[str, Any]], cell: str, truth: int
) -> None:
    assert_discrete_laplace([r["cells"][cell] for r in cells_releases], truth=truth, scale=1.0)


def test_cell_noises_are_uncorrelated(cells_releases: list[dict[str, Any]]) -> None:
    names = ("e11", "e10", "e01", "e00")
    matrix = np.array([[r["cells"][n] for n in names] for r in cells_releases], dtype=np.float64)
    covariance = np.cov(matrix, rowvar=False)
    variance = _moments(1.0)[0]
    # The standard error of a sample covariance of independent variables is ≈ var/√N.
    band = Z * variance / math.sqrt(SAMPLES)
    off_diagonal = covariance[~np.eye(4, dtype=bool)]
    assert np.all(np.abs(off_diagonal) <= band), covariance


def test_cells_mode_scale_follows_epsilon(views_store: ColumnStore) -> None:
    releases = _run(views_store, A, B, epsilon=0.5, mode="cells")
    assert_discrete_laplace([r["cells"]["e01"] for r in releases], truth=4, scale=2.0)


def test_cells_mode_statistics_are_post_processing_of_the_cells(
    cells_releases: list[dict[str, Any]],
) -> None:
    saw_negative = False
    for release in cells_releases:
        cells, stats = release["cells"], release["statistics"]
        e11, e10, e01, e00 = (max(cells[n], 0) for n in ("e11", "e10", "e01", "e00"))
        saw_negative |= min(cells.values()) < 0
        assert stats["support"] == e11
        assert stats["union"] == e11 + e10 + e01
        assert stats["support_left"] == e11 + e10
        assert stats["support_right"] == e11 + e01
        assert stats["n_rows"] == e11 + e10 + e01 + e00
        assert 0.0 <= stats["jaccard"] <= 1.0
        assert stats["jaccard"] == jaccard(e11, e11 + e10 + e01)
        assert 0.0 <= stats["p_value"] <= 1.0
        assert stats["p_value"] == p_value(stats["n_rows"], e11 + e10, e11 + e01, e11)
    # With E00 = 1 at scale 1 a negative cell shows up in about a tenth of the releases.
    assert saw_negative


# --------------------------------------------------------------------------------------------
# paper mode: |I| and |U| + Lap(2/ε)


@pytest.fixture(scope="module")
def paper_releases(views_store: ColumnStore) -> list[dict[str, Any]]:
    # |I| = 2, |U| = 9.
    return _run(views_store, Not(term=A), Not(term=B), epsilon=1.0, mode="paper")


def test_paper_mode_releases_intersection_and_union_only(
    paper_releases: list[dict[str, Any]],
) -> None:
    for release in paper_releases[:200]:
        assert release["mode"] == "paper"
        assert set(release["cells"]) == {"intersection", "union"}
        assert all(type(value) is int for value in release["cells"].values())
        assert set(release["statistics"]) == {"support", "union", "jaccard"}


@pytest.mark.parametrize(("count", "truth"), [("intersection", 2), ("union", 9)])
def test_paper_mode_counts_are_discrete_laplace_at_scale_two_over_epsilon(
    paper_releases: list[dict[str, Any]], count: str, truth: int
) -> None:
    assert_discrete_laplace([r["cells"][count] for r in paper_releases], truth=truth, scale=2.0)


def test_paper_mode_scale_follows_epsilon(views_store: ColumnStore) -> None:
    releases = _run(views_store, A, B, epsilon=2.0, mode="paper")
    assert_discrete_laplace([r["cells"]["intersection"] for r in releases], truth=1, scale=1.0)
    assert_discrete_laplace([r["cells"]["union"] for r in releases], truth=8, scale=1.0)


def test_paper_mode_statistics_are_clamped(paper_releases: list[dict[str, Any]]) -> None:
    saw_negative = False
    for release in paper_releases:
        noisy_i, noisy_u = release["cells"]["intersection"], release["cells"]["union"]
        saw_negative |= noisy_i < 0
        stats = release["statistics"]
        assert stats["support"] == max(noisy_i, 0)
        assert stats["union"] == max(noisy_u, 0)
        assert 0.0 <= stats["jaccard"] <= 1.0
        assert stats["jaccard"] == jaccard(max(noisy_i, 0), max(noisy_u, 0))
    assert saw_negative


def test_responses_validate_against_the_wire_model(
    cells_releases: list[dict[str, Any]], paper_releases: list[dict[str, Any]]
) -> None:
    receipt = {
        "ledger_entry_id": 1,
        "dataset_id": "toy",
        "operation": SPEC.name,
        "epsilon": 1.0,
        "epsilon_exact": "1",
        "guarantee": "pure",
        "remaining_epsilon": 0.0,
        "created_at": "2025-01-01T00:00:00Z",
    }
    for release in (cells_releases[0], paper_releases[0]):
        response = ComputeQualityResponse.model_validate({**release, "receipt": receipt})
        assert response.mode == release["mode"]


# --------------------------------------------------------------------------------------------
# Cost and validation


@pytest.mark.parametrize("mode", ["cells", "paper"])
@pytest.mark.parametrize("epsilon", [1.0, 0.1, 0.25, 3.0])
def test_cost_charges_exactly_the_requested_epsilon(epsilon: float, mode: QualityMode) -> None:
    request = ComputeQualityRequest(
        redescription=Redescription(left=A, right=B), epsilon=epsilon, mode=mode
    )
    cost, guarantee = SPEC.cost(request), SPEC.guarantee
    assert cost == Epsilon.charge(epsilon)
    assert cost.as_decimal() == Decimal(repr(epsilon))
    assert guarantee == "pure"


def test_spec_declares_models_and_kinds() -> None:
    assert SPEC.name == "red.compute_quality"
    assert SPEC.request_model is ComputeQualityRequest
    assert SPEC.response_model is ComputeQualityResponse
    # Transactions have no two queries over attributes.
    assert SPEC.dataset_kinds == frozenset({"views", "table"})


def _request(left: Expr, right: Expr) -> ComputeQualityRequest:
    return ComputeQualityRequest(redescription=Redescription(left=left, right=right), epsilon=1.0)


@pytest.mark.parametrize(
    ("left", "right", "message"),
    [
        (B, B, r"left query: attribute 'b' is in the right view"),
        (And(terms=[A, SMALL]), B, r"left query: attribute 'size' is in the right view"),
        (A, A, r"right query: attribute 'a' is in the left view"),
        (A, Or(terms=[B, Not(term=RED)]), r"right query: attribute 'colour' is in the left view"),
        (BoolLiteral(attribute="aa"), B, r"left query: unknown attribute 'aa'"),
        (A, NumLiteral(attribute="size", upper=11.0), r"outside its public range"),
        (CatLiteral(attribute="colour", category="pink"), B, r"not a declared category"),
    ],
)
def test_validation_rejects_wrong_views_and_unknown_attributes(
    left: Expr, right: Expr, message: str
) -> None:
    # Only public metadata is involved: validation runs before any data is loaded or charged.
    with pytest.raises(ValueError, match=message):
        SPEC.validate(_request(left, right), _metadata("views"))


def test_validation_accepts_correct_views_and_any_table_attribute() -> None:
    for left, right, _cells in HAND_CELLS:
        SPEC.validate(_request(left, right), _metadata("views"))
    # "table" datasets have no views: both queries may use any attribute.
    SPEC.validate(_request(B, A), _metadata("table"))
    SPEC.validate(_request(And(terms=[A, SMALL]), Or(terms=[B, RED])), _metadata("table"))
    with pytest.raises(ValueError, match="unknown attribute"):
        SPEC.validate(_request(A, BoolLiteral(attribute="zz")), _metadata("table"))
