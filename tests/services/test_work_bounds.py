"""The padding budget prices the public bounds of the kernels' work (DESIGN.md contract item 7,
services/timing.py; issue #20, "bounded kernels"): Serenade's capped rejection proposals and
the splits of ``tree.expmech``.

Pure functions of public values, checked against the real kernels on small hand-built stores:
the cap a Serenade kernel uses is the one the budget prices, the budget pays for every capped
proposal at no less than twice its measured cost, and the modes that make no proposals price
none; a tree node's numeric candidates are bounded by the public lattice and their price does
not depend on the classes, every inner node and the target are paid for. The measured costs
quoted here are those of the comments of services/timing.py (bench/bench_budgets.py checks the
resulting budgets against the kernels).
"""

from __future__ import annotations

import numpy as np
import pytest

from dpmine.wire import (
    AnyAttribute,
    BooleanAttribute,
    BoolLiteral,
    CategoricalAttribute,
    DatasetMetadata,
    ExtendOneRequest,
    InitialPairsRequest,
    NumericAttribute,
    Redescription,
)
from dpmine_server.data.columns import BooleanColumn, ColumnStore, NumericColumn
from dpmine_server.dp.lattice import public_lattice
from dpmine_server.dp.mechanisms import batch_work
from dpmine_server.dp.rng import seeded_generator
from dpmine_server.operations import CATALOG, serenade
from dpmine_server.operations.base import no_progress
from dpmine_server.operations.redescriptions import (
    extend_proposals,
    extend_rejection_plan,
    pairs_enumeration,
    pairs_grid_work,
    pairs_proposals,
    pairs_rejection_plan,
    quality_parameters,
)
from dpmine_server.operations.serenade import RejectionPlan
from dpmine_server.operations.serenade_quality import sensitivity_scan_length
from dpmine_server.operations.tree_kernels import Labels, SplitFamily, _attribute_candidates
from dpmine_server.services.timing import (
    _SENSITIVITY_SECONDS,
    _SENSITIVITY_VALUE_SECONDS,
    CONTINUOUS_ATTRIBUTE_SECONDS,
    DISCRETE_BANK_ROW_SECONDS,
    GRID_CANDIDATE_SECONDS,
    GRID_HISTOGRAM_ROW_SECONDS,
    GRID_PRODUCT_SECONDS,
    NUMERIC_ATTRIBUTE_ROW_SECONDS,
    NUMERIC_ATTRIBUTE_SECONDS,
    PAIR_INTERVAL_ROW_SECONDS,
    PAIR_MATRIX_ROW_SECONDS,
    PAIR_WORD_SECONDS,
    _built_position_work,
    _grids_and_banks_work,
    _pairs_setup_work,
    _quality_setup_work,
    operation_work,
)

ROWS = 400
#: A scanned proposal measured at 80 µs + 0.45 ns a row; a prepared family at ≤ 0.2 ms + 25 ns
#: a row, a prepared proposal at ≤ 0.45 µs and a family present in a batch at ≤ 135 µs
#: (operations/serenade.py, ``RejectionPlan``): the budget must pay at least twice that.
MEASURED_SCANNED = (80e-6, 0.45e-9)
MEASURED_PREPARED = (0.2e-3, 25e-9, 0.45e-6, 135e-6)


def measured_seconds(plan: RejectionPlan, *, prepared: bool | None = None) -> float:
    """The measured cost of the proposals' work bound, weighed the plan's way (or the way
    ``prepared`` names)."""
    if not (plan.prepared if prepared is None else prepared):
        fixed, per_row = MEASURED_SCANNED
        return plan.cap * (fixed + per_row * plan.n_max)
    family, per_row, proposal, batch_family = MEASURED_PREPARED
    work = batch_work(plan.draws, plan.cap)
    return (
        plan.families * (family + per_row * plan.n_max)
        + work.proposals * proposal
        + min(plan.families * work.batches, work.proposals) * batch_family
    )


def _store(n_max: int = 1_000) -> ColumnStore:
    """Left: three Boolean columns; right: two numeric columns of all-distinct values and one
    Boolean column (so both explicit candidates and threshold families exist)."""
    generator = np.random.default_rng(7)
    attributes: list[AnyAttribute] = [BooleanAttribute(name=f"b{j}", view="left") for j in range(3)]
    attributes += [NumericAttribute(name=f"x{j}", view="right", lo=0.0, hi=1.0) for j in range(2)]
    attributes.append(BooleanAttribute(name="r", view="right"))
    everyone = np.ones(ROWS, dtype=bool)
    columns: dict[str, BooleanColumn | NumericColumn] = {
        f"b{j}": BooleanColumn.from_arrays(f"b{j}", generator.random(ROWS) < 0.4, everyone)
        for j in range(3)
    }
    for j in range(2):
        columns[f"x{j}"] = NumericColumn.from_values(
            f"x{j}", generator.random(ROWS), lo=0.0, hi=1.0
        )
    columns["r"] = BooleanColumn.from_arrays("r", generator.random(ROWS) < 0.5, everyone)
    metadata = DatasetMetadata(kind="views", n_max=n_max, attributes=attributes)
    return ColumnStore(metadata, n_rows=ROWS, columns=columns)


def _pairs(epsilon: float, *, mode: str = "auto", count: int = 20) -> InitialPairsRequest:
    return InitialPairsRequest.model_validate(
        {
            "count": count,
            "epsilon": epsilon,
            "quality": {"x0": 20.0, "s": 0.05},
            "options": {"threshold_mode": mode},
        }
    )


def _extend(epsilon: float, *, mode: str = "auto") -> ExtendOneRequest:
    red = Redescription(left=BoolLiteral(attribute="b0"), right=BoolLiteral(attribute="r"))
    return ExtendOneRequest.model_validate(
        {
            "mode": "cs",
            "collection": [red.model_dump(mode="json")],
            "epsilon": epsilon,
            "quality": {"x0": 20.0, "s": 0.05},
            "options": {"threshold_mode": mode},
        }
    )


@pytest.fixture
def kernel_caps(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The proposal caps the kernels compute (recorded, not changed)."""
    caps: list[int] = []
    cap = serenade.rejection_proposals

    def recorded(c: float, draws: int) -> int:
        caps.append(cap(c, draws))
        return caps[-1]

    monkeypatch.setattr(serenade, "rejection_proposals", recorded)
    return caps


@pytest.fixture
def kernel_plans(monkeypatch: pytest.MonkeyPatch) -> list[RejectionPlan]:
    """The rejection plans the kernels follow (recorded, not changed)."""
    plans: list[RejectionPlan] = []

    class Recorded(RejectionPlan):
        __slots__ = ()

        @property
        def prepared(self) -> bool:
            plans.append(RejectionPlan(self.families, self.cap, self.draws, self.n_max))
            return plans[-1].prepared

    monkeypatch.setattr(serenade, "RejectionPlan", Recorded)
    return plans


@pytest.mark.parametrize("n_max", [1_000, 10_000_000])
@pytest.mark.parametrize("epsilon", [0.05, 1.0, 3.0])
def test_initial_pairs_price_the_cap_and_plan_their_kernel_uses(
    kernel_caps: list[int], kernel_plans: list[RejectionPlan], epsilon: float, n_max: int
) -> None:
    store = _store(n_max)
    request = _pairs(epsilon)
    spec = CATALOG["serenade.initial_pairs"]
    spec.validate(request, store.metadata)
    spec.run(store, request, spec.cost(request), seeded_generator(1), no_progress)
    assert kernel_caps == [pairs_proposals(request, store.metadata)]
    assert kernel_caps[0] >= request.count
    assert kernel_plans == [pairs_rejection_plan(request, store.metadata)]


@pytest.mark.parametrize("n_max", [1_000, 10_000_000])
@pytest.mark.parametrize("epsilon", [0.05, 1.0])
def test_extensions_price_the_cap_and_plan_their_kernel_uses(
    kernel_caps: list[int], kernel_plans: list[RejectionPlan], epsilon: float, n_max: int
) -> None:
    store = _store(n_max)
    request = _extend(epsilon)
    spec = CATALOG["serenade.extend_one"]
    spec.validate(request, store.metadata)
    spec.run(store, request, spec.cost(request), seeded_generator(2), no_progress)
    assert kernel_caps == [extend_proposals(request, store.metadata)]
    assert kernel_plans == [extend_rejection_plan(request, store.metadata)]
    assert kernel_caps[0] >= 1


@pytest.mark.parametrize("n_max", [1_000, 100_000, 10_000_000])
@pytest.mark.parametrize("count", [1, 20, 1000])
def test_the_budget_pays_every_capped_proposal(n_max: int, count: int) -> None:
    """The continuous request's work exceeds the grid one's (no proposals, the same other
    terms once each mode's set-up and the grid's own counting are set aside) by at least twice
    the measured cost of its capped proposals."""
    metadata = _store(n_max).metadata
    continuous, grid = _pairs(1.0, count=count), _pairs(1.0, mode="grid", count=count)
    plan = pairs_rejection_plan(continuous, metadata)
    assert plan is not None
    assert plan.cap == pairs_proposals(continuous, metadata) > 0
    assert pairs_proposals(grid, metadata) == 0
    counting = pairs_grid_work(grid, metadata)
    grid_counting = (
        GRID_PRODUCT_SECONDS * counting.products
        + GRID_HISTOGRAM_ROW_SECONDS * counting.histogram_rows
        + GRID_CANDIDATE_SECONDS * counting.candidates
    )
    assert grid_counting > 0
    continuous_setup = _pairs_setup_work(continuous.model_dump(mode="json"), metadata, None)
    grid_setup = _pairs_setup_work(grid.model_dump(mode="json"), metadata, counting)
    extra = operation_work("serenade.initial_pairs", continuous, metadata) - continuous_setup
    extra -= operation_work("serenade.initial_pairs", grid, metadata) - grid_counting - grid_setup
    assert extra == pytest.approx(plan.seconds())
    assert extra >= 2 * measured_seconds(plan)


@pytest.mark.parametrize("n_max", [1_000, 100_000, 10_000_000])
@pytest.mark.parametrize("families", [1, 30, 2_000])
@pytest.mark.parametrize("cap", [5, 150, 61_700])
def test_a_plan_weighs_proposals_the_cheaper_public_way(
    n_max: int, families: int, cap: int
) -> None:
    """Many proposals per family are prepared (a pass over the rows per family, then binary
    searches), few are scanned (a pass per proposal); the price is the smaller bound, and each
    bound pays at least twice the measured cost of its way."""
    plan = RejectionPlan(families=families, cap=cap, draws=1, n_max=n_max)
    assert plan.seconds() == min(plan.prepared_seconds(), plan.scanned_seconds())
    assert plan.prepared_seconds() >= 2 * measured_seconds(plan, prepared=True)
    assert plan.scanned_seconds() >= 2 * measured_seconds(plan, prepared=False)
    if cap >= 150 * families:
        assert plan.prepared
    if families >= cap:
        assert not plan.prepared


def test_no_proposals_are_priced_where_none_are_made() -> None:
    metadata = _store().metadata
    # c > 8: "auto" takes the grid, "continuous" enumerates (priced as cell pairs instead).
    per_epsilon = quality_parameters(_pairs(1.0).quality, metadata.n_max).coefficient(1.0)
    large = 1.01 * serenade.REJECTION_MAX_EXPONENT / per_epsilon  # one draw at c > 8
    assert pairs_proposals(_pairs(large, count=1), metadata) == 0
    enumerated = _pairs(large, mode="continuous", count=1)
    assert pairs_proposals(enumerated, metadata) == 0
    assert pairs_enumeration(enumerated, metadata) > 0
    # No numeric attribute in the right view: no threshold family, nothing to propose.
    no_numeric = metadata.model_copy(
        update={"attributes": [a for a in metadata.attributes if a.type != "numeric"]}
    )
    assert pairs_proposals(_pairs(1.0), no_numeric) == 0
    assert extend_proposals(_extend(1.0), no_numeric) == 0


def test_the_cap_grows_with_epsilon_and_the_draws() -> None:
    """One draw at a tiny ε (c ≈ 0, every proposal almost surely accepted) needs about
    ln(10⁹)/ln(1/(1 − e^−c)) proposals at most, a handful; a larger c per draw (more ε for the
    same draws) or more draws at the same c (ε/count fixed) need more."""
    metadata = _store().metadata
    assert 1 <= pairs_proposals(_pairs(1e-6, count=1), metadata) <= 5
    by_epsilon = [pairs_proposals(_pairs(epsilon), metadata) for epsilon in (0.1, 1.0, 10.0)]
    assert by_epsilon == sorted(by_epsilon)
    assert by_epsilon[0] < by_epsilon[-1]
    by_count = [
        pairs_proposals(_pairs(0.05 * count, count=count), metadata) for count in (1, 20, 1000)
    ]
    assert by_count == sorted(by_count)
    assert by_count[-1] >= 1000


# -- tree.expmech: every term bounded by public values (n_max, lattice, classes, depth) --------


def _tree_metadata(
    n_max: int, *, numeric: int = 2, bits: int = 16, categories: int = 0
) -> DatasetMetadata:
    attributes: list[AnyAttribute] = [NumericAttribute(name="t", view="left", lo=0.0, hi=1.0)]
    attributes += [
        NumericAttribute(name=f"x{j}", view="right", lo=0.0, hi=1.0, lattice_bits=bits)
        for j in range(numeric)
    ]
    if categories:
        names = [f"c{i}" for i in range(categories)]
        attributes.append(CategoricalAttribute(name="c", view="right", categories=names))
    return DatasetMetadata(kind="views", n_max=n_max, attributes=attributes)


def _expmech(depth: int = 3, bins: int = 10) -> dict[str, object]:
    target = {"kind": "attribute", "attribute": "t", "bins": bins}
    return {"view": "right", "target": target, "depth": depth, "epsilon": 1.0}


#: One node's numeric attribute measured at 0.17 ms on 2,221 rows and 0.1 ms + 50 ns a row up
#: to 10⁶ rows (services/timing.py): the budget pays at least twice that per inner node.
MEASURED_NUMERIC_NODE = (0.1e-3, 50e-9)


@pytest.mark.parametrize("n_max", [2_221, 100_000, 1_000_000])
@pytest.mark.parametrize("depth", [1, 3, 6])
def test_the_tree_budget_pays_every_node_of_every_numeric_attribute(n_max: int, depth: int) -> None:
    metadata = _tree_metadata(n_max, numeric=5)
    fixed, per_row = MEASURED_NUMERIC_NODE
    inner = 2**depth - 1
    work = operation_work("tree.expmech", _expmech(depth), metadata)
    assert work >= 2 * inner * 5 * (fixed + per_row * n_max)


def test_numeric_splits_cost_the_same_whatever_the_classes() -> None:
    """The sweep has no classes × values table: 2 or 1,000 target bins price alike (up to a
    bincount of the classes), while a categorical attribute pays its categories × classes."""
    numeric = _tree_metadata(100_000)
    few, many = (operation_work("tree.expmech", _expmech(bins=bins), numeric) for bins in (2, 1000))
    assert many - few < 1e-3
    table = _tree_metadata(100_000, numeric=0, categories=500)
    few, many = (operation_work("tree.expmech", _expmech(bins=bins), table) for bins in (2, 1000))
    assert many - few == pytest.approx(7 * 3e-8 * 500 * 998)  # 7 nodes, 500 × 998 more cells


def test_numeric_candidates_are_bounded_by_the_lattice() -> None:
    """On 10⁷ rows a 4-bit lattice has 17 points: at most 18 cells per node, priced as such,
    where a 20-bit one may have 2^20 + 2 (the kernel's side: the next test)."""
    coarse = operation_work("tree.expmech", _expmech(), _tree_metadata(10**7, bits=4))
    fine = operation_work("tree.expmech", _expmech(), _tree_metadata(10**7, bits=20))
    assert fine - coarse >= 7 * 2 * 8e-8 * ((1 << 20) - 17)


def test_a_node_has_at_most_a_lattice_of_cells() -> None:
    """The kernel's candidates of a numeric attribute: distinct lattice ranks of the node's
    rows plus one, so at most min(rows, L) + 1 whatever the number of distinct values."""
    rows = 5_000
    generator = np.random.default_rng(3)
    for bits in (2, 8, 16):
        lattice = public_lattice(0.0, 1.0, bits)
        column = NumericColumn.from_values("v", generator.random(rows), lo=0.0, hi=1.0)
        family = SplitFamily("v", "numeric", lattice.size, lattice)
        labels = Labels(generator.integers(0, 10, rows), 10)
        everyone = np.ones(rows, dtype=bool)
        cells = _attribute_candidates(column, family, everyone, labels, [])
        assert cells.quality.size <= min(rows, lattice.size) + 1
        assert cells.quality.size == cells.log_mass.size


def test_a_tree_target_pays_a_pass_per_leaf() -> None:
    metadata = _tree_metadata(1_000_000)
    attribute = operation_work("tree.expmech", _expmech(), metadata)
    leaves = 2**6
    tree = {"view": "left", "depth": 6, "splits": [{"attribute": "t", "threshold": 0.5}] * 63}
    request = {**_expmech(), "target": {"kind": "tree", "tree": tree}}
    assert operation_work("tree.expmech", request, metadata) > attribute
    # 2.3 ns a row and leaf measured: at least twice that.
    assert operation_work("tree.expmech", request, metadata) >= 2 * 2.3e-9 * 10**6 * leaves


def test_grid_pairs_price_every_left_literal_row_cell_and_candidate() -> None:
    """Two Boolean left literals and one right numeric attribute with a three-point owner grid:
    7 cells (3 points, 4 gaps) counted over n_max rows per literal, and 12 grid intervals, each
    a candidate with every left literal; the price pays at least twice the measured 87 ps a
    product unit (mammals' shape, the indicator matrix included) and 98 ns a candidate (a
    process's first call, its fresh memory included)."""
    metadata = DatasetMetadata(
        kind="views",
        n_max=1_000,
        attributes=[
            BooleanAttribute(name="a", view="left"),
            BooleanAttribute(name="b", view="left"),
            NumericAttribute(name="x", view="right", lo=0.0, hi=1.0, grid=[0.25, 0.5, 0.75]),
        ],
    )
    grid = _pairs(1.0, mode="grid")
    work = pairs_grid_work(grid, metadata)
    assert (work.products, work.histogram_rows, work.candidates) == (2 * 1_000 * 7, 0, 2 * 12)
    continuous = pairs_grid_work(_pairs(1.0, mode="continuous"), metadata)
    assert (continuous.products, continuous.histogram_rows, continuous.candidates) == (0, 0, 0)
    # A left numeric attribute with a two-point grid (7 intervals) instead: one joint histogram
    # of n_max rows against the right attribute, and its 7 interval literals × 12 candidates.
    numeric_left = metadata.model_copy(
        update={
            "attributes": [
                NumericAttribute(name="y", view="left", lo=0.0, hi=1.0, grid=[0.3, 0.6]),
                metadata.attributes[2],
            ]
        }
    )
    work = pairs_grid_work(grid, numeric_left)
    assert (work.products, work.histogram_rows, work.candidates) == (0, 1_000, 7 * 12)
    assert GRID_PRODUCT_SECONDS >= 2 * 87e-12
    assert GRID_CANDIDATE_SECONDS >= 2 * 98e-9


def test_grid_pairs_price_their_set_up_and_discrete_pairs_as_the_kernel_builds_them() -> None:
    """Grid-mode initial pairs with a right discrete literal (no negations, the default): the
    two left Boolean literals and the left numeric attribute's 7 grid intervals each pair with
    the right Boolean, so 9 discrete pairs, whose left supports the kernel builds (7 interval
    passes over n_max rows) and intersects word by word; the Boolean literals' rows also enter
    the products' matrix once (2 × n_max). The kernel's candidate count is the grid pairs' and
    those 9, and the prices pay at least twice the measured word (at most 10 ns, the whole
    kernel included: mushroom's 1.2·10⁶ words in 12 ms) and row."""
    generator = np.random.default_rng(11)
    attributes: list[AnyAttribute] = [BooleanAttribute(name=f"b{j}", view="left") for j in range(2)]
    attributes += [
        NumericAttribute(name="y", view="left", lo=0.0, hi=1.0, grid=[0.3, 0.6]),
        BooleanAttribute(name="r", view="right"),
        NumericAttribute(name="x", view="right", lo=0.0, hi=1.0, grid=[0.25, 0.5, 0.75]),
    ]
    everyone = np.ones(ROWS, dtype=bool)
    columns: dict[str, BooleanColumn | NumericColumn] = {
        name: BooleanColumn.from_arrays(name, generator.random(ROWS) < 0.4, everyone)
        for name in ("b0", "b1", "r")
    }
    for name in ("x", "y"):
        columns[name] = NumericColumn.from_values(name, generator.random(ROWS), lo=0.0, hi=1.0)
    metadata = DatasetMetadata(kind="views", n_max=ROWS, attributes=attributes)
    store = ColumnStore(metadata, n_rows=ROWS, columns=columns)
    request = _pairs(1.0, mode="grid")
    work = pairs_grid_work(request, metadata)
    words = ROWS // 64 + 1
    assert work.matrix_rows == 2 * ROWS
    assert work.interval_rows == 7 * ROWS
    assert work.discrete_pairs == 2 + 7
    assert work.pair_words == (2 + 7) * words
    built = serenade._pair_candidates(
        store,
        rules=serenade.ExtensionRules(),
        mode="grid",
        params=quality_parameters(request.quality, ROWS),
    )
    assert sum(block.quality.size for block in built.blocks) == work.candidates + 9
    assert PAIR_WORD_SECONDS >= 2 * 10e-9
    assert PAIR_INTERVAL_ROW_SECONDS >= 2 * 1e-9
    assert PAIR_MATRIX_ROW_SECONDS >= 2 * 2e-9


def test_a_given_steepness_is_priced_by_the_values_its_sensitivities_scan() -> None:
    """One steepness's sensitivities scan the i within 40/s of x0 (and, with the coverage
    factor, the d within 40/s₂ of y0): at s = 0.0025 and x0 = 100 that is i = 1 … 16,100, with
    y0 = 500,000 also d = 483,999 … 516,000; at s = 0.1, i = 1 … 500. The price is 1 ms plus
    3·10⁻⁷ s a value, at least twice the measured 0.2 ms and 100 ns a value; a request that
    leaves s to the server pays the line search, and plain Jaccard nothing."""
    assert sensitivity_scan_length(0.0025, 100.0, 1_000_000) == 16_100
    assert sensitivity_scan_length(0.0025, 100.0, 1_000_000, y0=500_000.0) == 16_100 + 32_002
    assert sensitivity_scan_length(0.1, 100.0, 1_000_000) == 500
    assert sensitivity_scan_length(0.1, 100.0, 300) == 299  # i < n_max
    metadata = DatasetMetadata(
        kind="views",
        n_max=1_000_000,
        attributes=[
            BooleanAttribute(name="a", view="left"),
            BooleanAttribute(name="b", view="right"),
        ],
    )
    given = {"quality": {"x0": 100.0, "s": 0.0025, "y0": 500_000.0}}
    assert _quality_setup_work(given, metadata) == pytest.approx(1e-3 + 3e-7 * 48_102)
    assert _quality_setup_work({"quality": {"x0": 100.0}}, metadata) == 0.09
    jaccard = {"quality": {"x0": 100.0, "function": "jaccard"}}
    assert _quality_setup_work(jaccard, metadata) == 0.0
    assert _SENSITIVITY_SECONDS >= 2 * 0.2e-3
    assert _SENSITIVITY_VALUE_SECONDS >= 2 * 100e-9


def test_a_continuous_position_prices_its_numeric_attributes_as_families() -> None:
    """In continuous mode a numeric attribute adds threshold families (their proposals priced
    by the rejection plan), no grid: a built position pays a small constant per numeric
    attribute (at least twice the measured 10 µs), not the grid mode's pass over the rows,
    and a call's resources hold the discrete supports only (the kernel builds no grid)."""
    store = _store(100_000)
    metadata = store.metadata
    numeric, discrete = 2, 4  # x0, x1; b0–b2 and r
    row = NUMERIC_ATTRIBUTE_SECONDS + NUMERIC_ATTRIBUTE_ROW_SECONDS * 100_000
    grid_price = _built_position_work(metadata, 2, "grid")
    continuous_price = _built_position_work(metadata, 2, "continuous")
    assert grid_price - continuous_price == pytest.approx(
        numeric * (row - CONTINUOUS_ATTRIBUTE_SECONDS)
    )
    banks = discrete * DISCRETE_BANK_ROW_SECONDS * 100_000
    assert _grids_and_banks_work(metadata, "continuous") == pytest.approx(banks)
    assert _grids_and_banks_work(metadata, "grid") > banks
    assert (
        serenade.build_extension_resources(store, serenade.ExtensionRules(), "continuous").grids
        == {}
    )
    built = serenade.build_extension_resources(store, serenade.ExtensionRules(), "grid")
    assert set(built.grids) == {"x0", "x1"}
    assert CONTINUOUS_ATTRIBUTE_SECONDS >= 2 * 10e-6
