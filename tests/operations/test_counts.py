"""``count.noisy`` (ALGORITHMS.md §0.6): exact supports under §1.1 semantics, discrete Laplace
noise at scale 1/ε, the charged cost and validation against public metadata.

Statistical checks use N = 1000–4000 releases and 5-sigma bands derived from the exact moments of
the discrete Laplace distribution (false alarm < 1e-6 per check). The noise comes from OpenDP's
CSPRNG and cannot be seeded, so the bands, not a seed, make the tests deterministic enough.
"""

from __future__ import annotations

import math
from decimal import Decimal
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from dpmine.wire import (
    And,
    BooleanAttribute,
    BoolLiteral,
    CategoricalAttribute,
    CatLiteral,
    CsvSource,
    DatasetMetadata,
    Expr,
    FimiSource,
    NoisyCountRequest,
    NoisyCountResponse,
    Not,
    NumericAttribute,
    NumLiteral,
    Or,
)
from dpmine_server.data.columns import (
    BooleanColumn,
    CategoricalColumn,
    ColumnStore,
    NumericColumn,
)
from dpmine_server.data.loaders import load_store
from dpmine_server.dp.budget import Epsilon
from dpmine_server.dp.rng import seeded_generator
from dpmine_server.operations import CATALOG
from dpmine_server.operations.base import no_progress
from dpmine_server.operations.counts import noisy_count

FloatArray = npt.NDArray[np.float64]

#: Band width in standard deviations (two-sided false alarm 5.7e-7 per check).
Z = 5.0
NAN = float("nan")
COLOURS = ["red", "green", "blue"]
SPEC = CATALOG["count.noisy"]

#: Ten rows with missing values ("?" and ""); size 12 is clipped to the public hi = 10.
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


def _metadata(kind: str = "table") -> DatasetMetadata:
    left, right = ("left", "right") if kind == "views" else (None, None)
    attributes = [
        BooleanAttribute(name="a", view=left),
        CategoricalAttribute(name="colour", view=left, categories=COLOURS),
        BooleanAttribute(name="b", view=right),
        NumericAttribute(name="size", view=right, lo=0.0, hi=10.0),
    ]
    return DatasetMetadata.model_validate(
        {"kind": kind, "n_max": 100, "attributes": [a.model_dump() for a in attributes]}
    )


def _store_from_arrays() -> ColumnStore:
    """The same ten rows as CSV_TEXT, built directly from arrays."""
    a_true = np.array([1, 1, 0, 0, 0, 1, 0, 1, 0, 0], dtype=bool)
    a_present = np.array([1, 1, 1, 0, 1, 1, 1, 1, 0, 1], dtype=bool)
    b_true = np.array([1, 0, 1, 1, 0, 0, 1, 0, 1, 0], dtype=bool)
    b_present = np.array([1, 1, 1, 1, 1, 0, 1, 1, 1, 0], dtype=bool)
    codes = np.array([0, 1, 0, 2, -1, 0, 1, 2, 0, 2], dtype=np.int32)
    size = np.array([2.0, 5.0, NAN, 8.0, 1.0, 9.5, 12.0, 3.0, 0.5, NAN])
    return ColumnStore(
        _metadata(),
        n_rows=10,
        columns={
            "a": BooleanColumn.from_arrays("a", a_true, a_present),
            "colour": CategoricalColumn("colour", tuple(COLOURS), codes),
            "b": BooleanColumn.from_arrays("b", b_true, b_present),
            "size": NumericColumn.from_values("size", size, lo=0.0, hi=10.0),
        },
    )


@pytest.fixture(scope="module")
def csv_store(tmp_path_factory: pytest.TempPathFactory) -> ColumnStore:
    folder = tmp_path_factory.mktemp("counts")
    (folder / "rows.csv").write_text(CSV_TEXT)
    store, report = load_store(_metadata(), CsvSource(path="rows.csv"), base_dir=folder)
    assert report.n_rows == 10
    assert report.clipped["size"] == 1
    assert report.missing == {"a": 2, "colour": 1, "b": 2, "size": 2}
    return store


A = BoolLiteral(attribute="a")
B = BoolLiteral(attribute="b")
RED = CatLiteral(attribute="colour", category="red")
SMALL = NumLiteral(attribute="size", lower=0.0, upper=5.0)

#: (predicate, rows satisfying it), worked out by hand from CSV_TEXT.
HAND_SUPPORTS: list[tuple[Expr | None, set[int]]] = [
    (None, set(range(10))),
    (A, {0, 1, 5, 7}),
    (A.model_copy(update={"negated": True}), {2, 4, 6, 9}),  # missing rows 3, 8 in neither
    (Not(term=A), {2, 3, 4, 6, 8, 9}),  # the plain complement includes missing rows
    (RED, {0, 2, 5, 8}),
    (RED.model_copy(update={"negated": True}), {1, 3, 6, 7, 9}),  # row 4 missing
    (Not(term=RED), {1, 3, 4, 6, 7, 9}),
    (SMALL, {0, 1, 4, 7, 8}),
    (SMALL.model_copy(update={"negated": True}), {3, 5, 6}),  # rows 2, 9 missing
    (Not(term=SMALL), {2, 3, 5, 6, 9}),
    (NumLiteral(attribute="size", lower=10.0), {6}),  # 12 clipped to 10, closed bound
    (NumLiteral(attribute="size", upper=0.5), {8}),
    (And(terms=[A, B]), {0}),
    (Or(terms=[A, B]), {0, 1, 2, 3, 5, 6, 7, 8}),
    (Not(term=And(terms=[A, B.model_copy(update={"negated": True})])), set(range(10)) - {1, 7}),
]


def _discrete_laplace_moments(scale: float) -> tuple[float, float]:
    """Variance and fourth central moment of P(x) ∝ exp(-|x|/scale) on the integers."""
    x = np.arange(-4000, 4001, dtype=np.float64)
    weights = np.exp(-np.abs(x) / scale)
    pmf = weights / weights.sum()
    return float((pmf * x**2).sum()), float((pmf * x**4).sum())


def assert_discrete_laplace(samples: npt.ArrayLike, *, truth: float, scale: float) -> None:
    """Mean within Z standard errors of ``truth`` and sample variance within Z standard errors
    of the discrete Laplace variance at ``scale``."""
    values = np.asarray(samples, dtype=np.float64)
    n = values.size
    variance, fourth = _discrete_laplace_moments(scale)
    mean_error = Z * math.sqrt(variance / n)
    assert abs(values.mean() - truth) <= mean_error, (values.mean(), truth, mean_error)
    variance_error = Z * math.sqrt((fourth - variance**2) / n) + variance / n
    sample_variance = float(values.var(ddof=1))
    assert abs(sample_variance - variance) <= variance_error, (
        sample_variance,
        variance,
        variance_error,
    )


def _releases(store: ColumnStore, predicate: Expr | None, epsilon: float, n: int) -> list[int]:
    return [noisy_count(store, predicate=predicate, epsilon=epsilon) for _ in range(n)]


# --------------------------------------------------------------------------------------------
# Exact supports (the noise-free part of the kernel)


def test_moments_helper_matches_the_closed_form() -> None:
    # Var = 2q / (1 - q)^2 with q = exp(-1/scale) for the two-sided geometric distribution.
    for scale in (0.5, 1.0, 2.0):
        q = math.exp(-1.0 / scale)
        assert _discrete_laplace_moments(scale)[0] == pytest.approx(2 * q / (1 - q) ** 2)


def test_csv_and_array_stores_hold_the_same_rows(csv_store: ColumnStore) -> None:
    arrays = _store_from_arrays()
    for predicate, _rows in HAND_SUPPORTS:
        if predicate is None:
            continue
        left = csv_store.evaluate(predicate).to_indices().tolist()
        right = arrays.evaluate(predicate).to_indices().tolist()
        assert left == right, predicate


@pytest.mark.parametrize(("predicate", "rows"), HAND_SUPPORTS)
def test_supports_follow_the_missing_value_and_negation_semantics(
    csv_store: ColumnStore, predicate: Expr | None, rows: set[int]
) -> None:
    support = csv_store.all_rows() if predicate is None else csv_store.evaluate(predicate)
    assert set(support.to_indices().tolist()) == rows


def test_noisy_counts_centre_on_the_hand_counts(csv_store: ColumnStore) -> None:
    # 1000 releases each: the standard error of the mean is 0.043, so 5 sigma (0.21) pins the
    # exact count (neighbouring integers are 1 apart).
    for predicate, rows in HAND_SUPPORTS:
        samples = _releases(csv_store, predicate, 1.0, 1_000)
        mean = float(np.mean(samples))
        assert abs(mean - len(rows)) <= Z * math.sqrt(_discrete_laplace_moments(1.0)[0] / 1_000)
        assert round(mean) == len(rows), predicate


# --------------------------------------------------------------------------------------------
# Noise: integers, discrete Laplace at scale 1/ε


def test_noisy_count_returns_python_integers_that_may_be_negative() -> None:
    empty = ColumnStore(
        _metadata(),
        n_rows=0,
        columns={
            "a": BooleanColumn.from_arrays("a", np.zeros(0, bool), np.zeros(0, bool)),
            "colour": CategoricalColumn("colour", tuple(COLOURS), np.zeros(0, np.int32)),
            "b": BooleanColumn.from_arrays("b", np.zeros(0, bool), np.zeros(0, bool)),
            "size": NumericColumn.from_values("size", np.zeros(0), lo=0.0, hi=10.0),
        },
    )
    samples = _releases(empty, None, 1.0, 500)
    assert all(type(value) is int for value in samples)
    # Count 0 at scale 1: P(noise < 0) = q/(1+q) ≈ 0.27; never clamped by the kernel.
    assert min(samples) < 0
    assert_discrete_laplace(samples, truth=0.0, scale=1.0)


@pytest.mark.parametrize(("epsilon", "scale"), [(1.0, 1.0), (0.5, 2.0), (2.0, 0.5)])
def test_noisy_count_noise_is_discrete_laplace_at_scale_one_over_epsilon(
    csv_store: ColumnStore, epsilon: float, scale: float
) -> None:
    samples = _releases(csv_store, A, epsilon, 4_000)
    assert_discrete_laplace(samples, truth=4.0, scale=scale)


def test_the_kernel_uses_the_charged_epsilon(csv_store: ColumnStore) -> None:
    request = NoisyCountRequest(predicate=Or(terms=[A, B]), epsilon=0.5)
    cost = SPEC.cost(request)
    rng = seeded_generator(11)
    fields = [SPEC.run(csv_store, request, cost, rng, no_progress) for _ in range(4_000)]
    assert all(set(f) == {"count", "noise"} and type(f["count"]) is int for f in fields)
    assert all(f["noise"] == {"kind": "laplace", "scale": 2.0} for f in fields)
    assert_discrete_laplace([f["count"] for f in fields], truth=8.0, scale=2.0)


def test_the_kernel_counts_transactions(tmp_path: Path) -> None:
    (tmp_path / "baskets.dat").write_text("x y\ny\n\nx z\nz\n")
    metadata = DatasetMetadata(kind="transactions", n_max=10, items=["x", "y", "z"])
    store, _ = load_store(metadata, FimiSource(path="baskets.dat"), base_dir=tmp_path)
    x = BoolLiteral(attribute="x")
    # Transactions have no missing values: ![x] is every row without x (3 of 5).
    for predicate, truth in ((x, 2), (x.model_copy(update={"negated": True}), 3), (None, 5)):
        assert_discrete_laplace(_releases(store, predicate, 1.0, 2_000), truth=truth, scale=1.0)


# --------------------------------------------------------------------------------------------
# Cost and validation


@pytest.mark.parametrize("epsilon", [1.0, 0.1, 0.3, 1e-6, 2.5, 1000.0])
def test_cost_charges_exactly_the_requested_epsilon(epsilon: float) -> None:
    cost, guarantee = SPEC.cost(NoisyCountRequest(epsilon=epsilon)), SPEC.guarantee
    assert cost == Epsilon.charge(epsilon)
    assert cost.as_decimal() == Decimal(repr(epsilon))
    assert guarantee == "pure"


def test_cost_of_one_tenth_is_exact() -> None:
    cost = SPEC.cost(NoisyCountRequest(epsilon=0.1))
    assert cost.exact_str() == "0.1"
    assert sum((cost for _ in range(10)), Epsilon.zero()) == Epsilon.charge(1)


def test_spec_declares_its_models_and_kinds() -> None:
    assert SPEC.name == "count.noisy"
    assert SPEC.request_model is NoisyCountRequest
    assert SPEC.response_model is NoisyCountResponse
    assert SPEC.dataset_kinds == frozenset({"views", "table", "transactions"})


@pytest.mark.parametrize(
    ("predicate", "message"),
    [
        (BoolLiteral(attribute="colur"), "unknown attribute 'colur'"),
        (CatLiteral(attribute="colour", category="purple"), "not a declared category"),
        (BoolLiteral(attribute="size"), "numeric"),
        (NumLiteral(attribute="size", lower=-1.0), "outside its public range"),
        (And(terms=[A, Not(term=BoolLiteral(attribute="nope"))]), "unknown attribute 'nope'"),
    ],
)
def test_validation_rejects_what_the_metadata_does_not_declare(
    predicate: Expr, message: str
) -> None:
    request = NoisyCountRequest(predicate=predicate, epsilon=1.0)
    # Validation sees only the public metadata: no store exists at this point.
    with pytest.raises(ValueError, match=message):
        SPEC.validate(request, _metadata())


def test_validation_accepts_any_view_and_all_rows() -> None:
    # A count predicate may mix the views of a two-view dataset (§0.6: "over one or both views").
    SPEC.validate(NoisyCountRequest(predicate=And(terms=[A, B]), epsilon=1.0), _metadata("views"))
    SPEC.validate(NoisyCountRequest(epsilon=1.0), _metadata("views"))


def test_validation_of_transaction_items() -> None:
    metadata = DatasetMetadata(kind="transactions", n_max=10, items=["x", "y"])
    SPEC.validate(NoisyCountRequest(predicate=BoolLiteral(attribute="x"), epsilon=1.0), metadata)
    with pytest.raises(ValueError, match="unknown item 'w'"):
        SPEC.validate(
            NoisyCountRequest(predicate=BoolLiteral(attribute="w"), epsilon=1.0), metadata
        )
    with pytest.raises(ValueError, match="item literals"):
        SPEC.validate(
            NoisyCountRequest(predicate=CatLiteral(attribute="x", category="1"), epsilon=1.0),
            metadata,
        )
