"""Release padding: when a data-touching answer may leave the server (DESIGN.md contract item 7).

Running time is an output. Kernels avoid data-dependent work where the algorithm allows (e.g.
top-K mines at a public threshold), but counting, mining and rejection sampling still take a time
that depends on the data, within public bounds (rejection sampling and top-K's tail: bounds
exceeded with probability at most 10⁻⁹, the residual overrun). So no release is shown before a
deadline computed from public values only, and every release time lies on a coarse public grid:

* ``budget(op, request, metadata)``: seconds from the operation's public parameters and the
  dataset's public metadata (``n_max``, the number of items or literals, K, ℓ, the collection
  size …), times the configured ``scale``, plus a ``base``; with ``DPMINE_TIMING_CALIBRATION``
  the estimate of a measured operation is first scaled by its public factor
  (:meth:`TimingPolicy.calibrated_work`, services/calibration_file.py); a synchronous
  ``serenade.extend_one`` prices the positions whose candidate sets a public cache model holds
  at their draw only (:meth:`TimingPolicy.extend_budget`, services/extension_model.py);
* ``deadline = arrival + grid · ⌈budget / grid⌉``, with ``arrival`` the moment the request reached
  the route (synchronous calls) or the job was submitted (jobs);
* the release is returned (or a job shown done or failed) at the deadline. A kernel still
  running then fails closed (``DPMINE_TIMING_OVERRUN=fail``, the default; services/
  release_guard.py): the answer at the deadline is an OperationFailed whose charge stands, and
  the late release is withheld. Only in test mode (zero budgets) is an overrun shown at the
  first grid tick ``arrival + j · grid`` after the kernel finished.

The residual channel is *whether* a kernel overran, an event whose probability the budgets
keep small (``bench/bench_budgets.py`` measures it per operation). Requests that fail before
their charge (invalid parameters, unknown dataset, budget exhausted) read no data and are not
padded; replays of a stored release are padded exactly like the fresh release of that request.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel

from dpmine.wire import (
    MAX_QUERY_DEPTH,
    MAX_QUERY_LITERALS,
    AnyAttribute,
    CategoricalAttribute,
    DatasetMetadata,
    ExtendOneRequest,
    InitialPairsRequest,
    NumericAttribute,
    RuleListAntecedentsRequest,
    TopKItemsetsRequest,
    TreeMCMCRequest,
    exact_rule_list_count,
    exact_rule_list_work,
)
from dpmine_server.data.validation import iter_literals
from dpmine_server.operations.itemsets import Method, request_plan
from dpmine_server.operations.redescriptions import (
    batch_shared_proposals,
    extend_enumeration,
    extend_rejection_plan,
    extend_threshold_mode,
    extension_candidate_count,
    pairs_enumeration,
    pairs_grid_work,
    pairs_rejection_plan,
    pairs_threshold_mode,
    rejection_plan,
)
from dpmine_server.operations.rule_lists import antecedents_plan
from dpmine_server.operations.serenade import GridPairWork, ThresholdMode, joint_rejection_seconds
from dpmine_server.operations.serenade_quality import sensitivity_scan_length
from dpmine_server.operations.trees import exact_seconds, mcmc_sampler
from dpmine_server.services.calibration_file import TimingCalibration, cached_calibration
from dpmine_server.settings import MIN_FAIL_CLOSED_BASE_MS, Settings

__all__ = [
    "BATCH_PART_SECONDS",
    "GRID_CANDIDATE_SECONDS",
    "GRID_HISTOGRAM_ROW_SECONDS",
    "GRID_PRODUCT_SECONDS",
    "PRICED_OPERATIONS",
    "TAIL_CAPPED",
    "TimingPolicy",
    "load_work",
    "operation_work",
    "pricing_variant",
]

#: Public work estimate (abstract units ≈ seconds at scale 1) of one operation.
Work = Callable[[Mapping[str, Any], DatasetMetadata], float]


def _literals(metadata: DatasetMetadata) -> int:
    """Number of public items/literals (a categorical attribute counts its categories)."""
    if metadata.kind == "transactions":
        return len(metadata.items)
    total = 0
    for attribute in metadata.attributes:
        categories = getattr(attribute, "categories", None)
        total += len(categories) if categories else 1
    return total


#: Seconds to draw one count's noise: OpenDP's exact discrete Laplace or discrete Gaussian
#: sampler, measured at 6–17 µs a cell for scales 0.5–10⁵ (the Gaussian the slower); its time
#: depends on the public scale and the sampler's own randomness, never on the count.
NOISE_CELL_SECONDS = 5e-5
#: Seconds to build the noise mechanism of a scale the process has not built yet (OpenDP's
#: measurement and the search for the scale its map accepts, kept in a public cache,
#: dpmine_server/public_cache.py): measured 0.4–2.9 ms. A budget cannot know whether an earlier
#: request built it, so every noisy release pays it.
NOISE_BUILD_SECONDS = 3e-3


def _noise_work(cells: int) -> float:
    """Drawing the noise of ``cells`` released counts, the mechanism built first."""
    return NOISE_BUILD_SECONDS + NOISE_CELL_SECONDS * cells if cells else 0.0


#: Seconds for Serenade's quality parameters (§2.1), computed in the call's window (public
#: values, cached per process, but a budget cannot know whether an earlier request filled
#: that cache): the line search over the 40 steepnesses of §2.1 measured 10–27 ms from n_max
#: 1,250 to 10⁷ with and without the coverage factor, priced at about three times that. One
#: given steepness's sensitivities scan the values within 40/s of x0 (and of y0 with the
#: coverage factor; operations/serenade_quality.py ``sensitivity_scan_length``): measured
#: 0.07–0.2 ms plus 40–100 ns a scanned value (0.8–5.8 ms for 32,000 values at s = 0.0025,
#: the grid's flattest), priced 1 ms plus 3·10⁻⁷ s a value. A single price of 0.018 s for
#: every steepness was 8 times a mammals-sized call's time and set a tick of its rounds.
_LINE_SEARCH_SECONDS = 0.09
_SENSITIVITY_SECONDS = 1e-3
_SENSITIVITY_VALUE_SECONDS = 3e-7


def _quality_setup_work(request: Mapping[str, Any], metadata: DatasetMetadata) -> float:
    """The quality parameters' share of a Serenade call, from the request and ``n_max``."""
    quality = request.get("quality") or {}
    if quality.get("function") == "jaccard":
        return 0.0
    s = quality.get("s")
    if s is None:
        return _LINE_SEARCH_SECONDS
    scanned = sensitivity_scan_length(
        float(s),
        float(quality.get("x0") or 1.0),  # validated before any pricing that matters
        metadata.n_max,
        y0=quality.get("y0"),
        s2=quality.get("s2"),
    )
    return _SENSITIVITY_SECONDS + _SENSITIVITY_VALUE_SECONDS * scanned


def _count_work(request: Mapping[str, Any], metadata: DatasetMetadata) -> float:
    # Bitset counting of one predicate: linear in rows, small constant; one noise draw.
    del request
    return 2e-7 * metadata.n_max + _noise_work(1)


def _quality_work(request: Mapping[str, Any], metadata: DatasetMetadata) -> float:
    # Four cells counted and noised (two in "paper" mode).
    del request
    return 5e-7 * metadata.n_max + _noise_work(4)


def _topk_work(method: Method) -> Work:
    def work(request: Mapping[str, Any], metadata: DatasetMetadata) -> float:
        # The plan's public bound on the kernel's work, priced by its measured cost model
        # (operations/itemset_plan.py): mining, dense counting or tail draws, input build;
        # then one noise draw per released count.
        body = TopKItemsetsRequest.model_validate(request)
        counts = body.k if body.with_counts else 0
        return request_plan(body, metadata, method).seconds() + _noise_work(counts)

    return work


#: Seconds per cell pair of an enumerated continuous family (§1.4 at c > 8: log μ and c·Q of a
#: pair from prefix sums; measured 80–150 ns on 500–2,000 distinct values, times about 3).
_CELL_PAIR = 4e-7


#: Seconds per unit of grid-mode pair counting (left literal × row × grid cell: one float32
#: multiply-add of a one-thread matrix product; measured 40–50 ps from 60 × 2,221 to 2,541 ×
#: 10⁵ rows by 41 cells, but 87 ps in mammals' shape, 124 literals × 5,000 rows, once the
#: cells' indicator matrix and the missing rows' product are counted: about three times that)
#: and per (left literal, grid interval)
#: candidate it yields: its Q written by one compiled pass from prefix sums (operations/
#: serenade_thresholds.py ``pair_interval_quality``), c·Q plus its base mass in place, and the
#: cumulative weights over its own memory. 13.06·10⁶ candidates (teeth's shape at n_max 10⁵)
#: took 1.28 s as a process's first call, 98 ns a candidate, most of it the first touch of
#: fresh memory (0.52–0.68 s once the memory is the process's), against 190 ns before the
#: compiled passes. One price per unit for both (6e-10) had put a teeth-sized call at 129 s
#: for 4–6 s of work.
GRID_PRODUCT_SECONDS = 2.5e-10
GRID_CANDIDATE_SECONDS = 3e-7
#: Seconds per row of a joint histogram of a left numeric attribute's grid against a right
#: one's (two masks, a multiply-add and a bincount over the rows), about three times the
#: measured cost.
GRID_HISTOGRAM_ROW_SECONDS = 3e-8


#: Grid-mode initial pairs' set-up and discrete pairs (operations/serenade.py
#: ``GridPairWork``), each about three times what the whole kernel allows it on the tables of
#: bench/README.md ("Held grids and supports, grid-mode pairs priced by their parts"): a
#: discrete left literal's row in the products' float matrix, a left grid interval's row in
#: its support, a 64-bit word of a left support against a right discrete literal (copied,
#: intersected, joined and counted: mushroom's 1.2·10⁶ took at most 10 ns each, the whole
#: kernel included), and a draw's own bookkeeping.
PAIR_MATRIX_ROW_SECONDS = 1e-8
PAIR_INTERVAL_ROW_SECONDS = 1e-8
PAIR_WORD_SECONDS = 3e-8
PAIR_DRAW_SECONDS = 1e-4
#: Seconds per row, declared literal and draw of continuous-mode initial pairs' set-up (the
#: continuous families' left supports and lattices, the discrete pairs): the hand-set term
#: kept for that mode, where the parts have not been priced one by one.
CONTINUOUS_PAIR_LITERAL_ROW_SECONDS = 2e-8


def _pairs_setup_work(
    request: Mapping[str, Any], metadata: DatasetMetadata, grid: GridPairWork | None
) -> float:
    """Initial pairs' work outside the enumerated cells and the grid pairs: in grid mode
    (``grid``) the grids and banks (:func:`_grids_and_banks_work`), the products' matrix, the
    left intervals' supports, the discrete pairs and the draws, by their public counts; in
    continuous mode the hand-set term per row, declared literal and draw."""
    draws = int(request.get("count", 20))
    if grid is None:
        return CONTINUOUS_PAIR_LITERAL_ROW_SECONDS * metadata.n_max * _literals(metadata) * draws
    return (
        _grids_and_banks_work(metadata)
        + PAIR_MATRIX_ROW_SECONDS * grid.matrix_rows
        + PAIR_INTERVAL_ROW_SECONDS * grid.interval_rows
        + PAIR_WORD_SECONDS * grid.pair_words
        + GRID_CANDIDATE_SECONDS * grid.discrete_pairs
        + PAIR_DRAW_SECONDS * draws
    )


def _pairs_draw_work(request: Mapping[str, Any], metadata: DatasetMetadata) -> float:
    """``serenade.initial_pairs`` without its rejection proposals (:func:`_pairs_work`)."""
    # The continuous set-up counts every declared attribute's literals, an upper bound when
    # options.columns restricts them; the families and grid work are counted over the
    # allowed columns, as the kernel builds them (operations/redescriptions.py).
    body = InitialPairsRequest.model_validate(request)
    cells = pairs_enumeration(body, metadata)
    grid = (
        pairs_grid_work(body, metadata) if pairs_threshold_mode(body, metadata) == "grid" else None
    )
    grid_terms = (
        GRID_PRODUCT_SECONDS * grid.products
        + GRID_HISTOGRAM_ROW_SECONDS * grid.histogram_rows
        + GRID_CANDIDATE_SECONDS * grid.candidates
        if grid is not None
        else 0.0
    )
    return (
        _quality_setup_work(request, metadata)
        + _pairs_setup_work(request, metadata, grid)
        + _CELL_PAIR * cells
        + grid_terms
    )


def _pairs_work(request: Mapping[str, Any], metadata: DatasetMetadata) -> float:
    plan = pairs_rejection_plan(InitialPairsRequest.model_validate(request), metadata)
    return _pairs_draw_work(request, metadata) + (plan.seconds() if plan else 0.0)


#: Seconds per candidate of a cached (warm) candidate set in an extension draw: its share of
#: the exponential mechanism over the union (c·Q plus its base mass written in place, the
#: compiled cumulative weights and the choice), plus a fixed cost per set (its blocks and
#: families). Measured 21–26 ns a candidate (an ES round of 19 held sets of 22,000–30,000
#: candidates each, at 1,250 and 10⁵ rows), about a third of the price.
_WARM_CANDIDATE_SECONDS = 8e-8
_WARM_SET_SECONDS = 5e-4
#: Positions a call with held candidate sets is priced for building, at least. It was three
#: while concurrent kernels shared a process: one position alone was measured up to 38 ms on
#: mammals under that load against its 43 ms of work. Kernels now run one at a time
#: (services/kernel_lane.py), and with the quick calibration an ES round that builds one
#: position measured at most 0.107 s (`wide`; 0.083 s on mammals) against budgets of
#: 0.60–1.29 s at one (bench/README.md, "The kernel lane"), so one is priced for one.
MIN_BUILT_POSITIONS = 1


#: The parts of a ``serenade.extend_one`` position built from the rows (§2.2), each priced at
#: about three times what it measured on the development machine, quiet, with negations on
#: (their worst case), at 1,250 and 10⁵ rows (bench/README.md, "Compiled Serenade passes and
#: extension positions priced by their parts"):
#:
#: * a declared discrete literal, both operators and polarities: its support combined with
#:   the side's and popcounts against the other side's (packed words): 5 µs at 1,250 rows,
#:   27 µs at 10⁵ (120 Boolean attributes a side);
#: * a numeric attribute: one compiled pass over the rows counts its grid cells per row
#:   class of the two sides (operations/serenade_thresholds.py ``class_interval_counts``),
#:   then each operator and polarity's intervals from prefix sums: 0.15–0.21 ms at 1,250
#:   rows, 0.34–0.45 ms at 10⁵ (47 numeric attributes);
#: * a literal of the position's own queries, evaluated over the rows (a numeric range a
#:   compiled pass, about 1 ns a row; priced at ten times that, a position has few).
#:
#: Once a call (cached on the store for later positions and calls): each numeric attribute's
#: grid (0.18 ms whatever the rows: its intervals, literals and cell bounds), every row's cell
#: by one compiled pass (on the default equal-width grid a guess and at most a step or two,
#: 4.9 ns a row; on an owner's grid a binary search, 11–17 ns a row for 20 to 1,000 points),
#: and the discrete literals' supports (1.7·10⁻¹⁰ s a row and literal, with negations). The
#: old price, 5·10⁻⁸ s a row and declared literal for every position, was 200× a discrete
#: literal's time at 10⁵ rows, and priced the grids below a first call's time there.
#:
#: In continuous mode a numeric attribute adds only its threshold families (a few objects per
#: operator and polarity; their proposals are priced by the rejection plan, or their cells when
#: enumerated): a whole continuous position measured 0.3–1.0 ms with 5–48 numeric attributes
#: (teeth's 30 and no discrete literal: 0.32 ms, so at most 10 µs an attribute), priced 5·10⁻⁵
#: s an attribute. The grid mode's 6·10⁻⁴ s + 7.5·10⁻⁹ s a row had priced every continuous
#: position on mammals at 0.034 s for its 1 ms.
DISCRETE_LITERAL_SECONDS = 1.5e-5
DISCRETE_LITERAL_ROW_SECONDS = 1e-9
CONTINUOUS_ATTRIBUTE_SECONDS = 5e-5
NUMERIC_ATTRIBUTE_SECONDS = 6e-4
NUMERIC_ATTRIBUTE_ROW_SECONDS = 7.5e-9
QUERY_LITERAL_SECONDS = 5e-5
QUERY_LITERAL_ROW_SECONDS = 1e-8
GRID_BUILD_SECONDS = 6e-4
GRID_BUILD_ROW_SECONDS = 5e-8
DEFAULT_GRID_BUILD_ROW_SECONDS = 1.5e-8
DISCRETE_BANK_ROW_SECONDS = 1e-9


def _numeric_attributes(metadata: DatasetMetadata) -> int:
    """Number of numeric attributes (each a grid family per polarity in an extension)."""
    return sum(1 for attribute in metadata.attributes if attribute.type == "numeric")


def _discrete_literals(metadata: DatasetMetadata) -> int:
    """Number of declared discrete literals (a categorical attribute's categories, a Boolean
    one)."""
    return _literals(metadata) - _numeric_attributes(metadata)


def _built_position_work(
    metadata: DatasetMetadata, query_literals: int = 0, mode: ThresholdMode = "grid"
) -> float:
    """Public bound on one ``serenade.extend_one`` position whose candidate set is built from
    the rows in threshold ``mode``, ``query_literals`` the literals of its two queries: every
    declared discrete literal and numeric attribute (an upper bound under options.columns) and
    the queries' evaluation (the grids and discrete supports are priced once per call,
    :func:`_grids_and_banks_work`)."""
    n_max = metadata.n_max
    numeric = (
        NUMERIC_ATTRIBUTE_SECONDS + NUMERIC_ATTRIBUTE_ROW_SECONDS * n_max
        if mode == "grid"
        else CONTINUOUS_ATTRIBUTE_SECONDS
    )
    return (
        _discrete_literals(metadata)
        * (DISCRETE_LITERAL_SECONDS + DISCRETE_LITERAL_ROW_SECONDS * n_max)
        + _numeric_attributes(metadata) * numeric
        + query_literals * (QUERY_LITERAL_SECONDS + QUERY_LITERAL_ROW_SECONDS * n_max)
    )


def _grids_and_banks_work(metadata: DatasetMetadata, mode: ThresholdMode = "grid") -> float:
    """Public bound on every declared discrete literal's support and, in grid ``mode``, every
    numeric attribute's grid (operations/serenade.py ``build_extension_resources`` builds no
    grid in continuous mode): what a ``serenade.extend_one`` call that builds positions
    without held resources pays once, and what grid-mode initial pairs build."""
    n_max = metadata.n_max
    banks = _discrete_literals(metadata) * DISCRETE_BANK_ROW_SECONDS * n_max
    if mode != "grid":
        return banks
    grids = 0.0
    for attribute in metadata.attributes:
        if isinstance(attribute, NumericAttribute):
            row = GRID_BUILD_ROW_SECONDS if attribute.grid else DEFAULT_GRID_BUILD_ROW_SECONDS
            grids += GRID_BUILD_SECONDS + row * n_max
    return grids + banks


def _most_query_literals(body: ExtendOneRequest) -> int:
    """The most literals of one position's two queries in the collection (public: the
    request)."""
    return max(
        (
            sum(1 for _ in iter_literals(red.left)) + sum(1 for _ in iter_literals(red.right))
            for red in body.collection
        ),
        default=0,
    )


def _warm_position_work(body: ExtendOneRequest, metadata: DatasetMetadata) -> float:
    """Public bound on one position of ``serenade.extend_one`` whose candidate set the public
    cache model holds (services/extension_model.py): no rows are read, only the draw over its
    public number of candidates (:func:`~dpmine_server.operations.redescriptions.
    extension_candidate_count`)."""
    candidates = extension_candidate_count(body, metadata)
    return _WARM_SET_SECONDS + _WARM_CANDIDATE_SECONDS * candidates


def _extend_draw_work(
    request: Mapping[str, Any],
    metadata: DatasetMetadata,
    warm: int = 0,
    resources_held: bool = False,
) -> float:
    """``serenade.extend_one`` without its rejection proposals (:func:`_extend_work`), with
    ``warm`` of its positions' candidate sets held by the public cache model (priced by
    :func:`_warm_position_work`; the others are built from the rows) and, when
    ``resources_held``, the call's banks and grids held too (operations/serenade.py
    ``ExtensionResources``: :func:`_grids_and_banks_work` is then not paid)."""
    body = ExtendOneRequest.model_validate(request)
    return _extend_draw_seconds(body, request, metadata, warm, resources_held)


def _extend_draw_seconds(
    body: ExtendOneRequest,
    request: Mapping[str, Any],
    metadata: DatasetMetadata,
    warm: int,
    resources_held: bool,
) -> float:
    """:func:`_extend_draw_work` of the validated ``body`` of ``request`` (its JSON form)."""
    # As _pairs_work: every declared literal (an upper bound under options.columns).
    cells = extend_enumeration(body, metadata)
    mode = extend_threshold_mode(body, metadata)
    built = _built_position_work(metadata, _most_query_literals(body), mode)
    # Once a call: the grids and discrete supports (built at most once, unless held) and the
    # quality parameters.
    resources = 0.0 if resources_held else _grids_and_banks_work(metadata, mode)
    per_call = resources + _quality_setup_work(request, metadata)
    positions = len(body.collection)
    cold = max(positions - warm, 0)
    if cold == positions:
        return per_call + built * positions + _CELL_PAIR * cells
    # A held set's draw is part of what building it costs, so never priced above that; and a
    # call with held sets is priced for building at least MIN_BUILT_POSITIONS of them.
    held = min(_warm_position_work(body, metadata), built)
    floor = max(cold, MIN_BUILT_POSITIONS)
    priced = built * positions if floor >= positions else built * floor + held * (positions - cold)
    return per_call + priced + _CELL_PAIR * cells


def _extend_work(
    request: Mapping[str, Any],
    metadata: DatasetMetadata,
    warm: int = 0,
    resources_held: bool = False,
) -> float:
    return _extend_seconds(
        ExtendOneRequest.model_validate(request), request, metadata, warm, resources_held
    )


def _extend_seconds(
    body: ExtendOneRequest,
    request: Mapping[str, Any],
    metadata: DatasetMetadata,
    warm: int,
    resources_held: bool,
) -> float:
    """:func:`_extend_work` of the validated ``body`` of ``request`` (its JSON form): the
    request is validated once however many of its public bounds the price reads."""
    plan = extend_rejection_plan(body, metadata)
    draw = _extend_draw_seconds(body, request, metadata, warm, resources_held)
    return draw + (plan.seconds() if plan else 0.0)


#: The work of the operations whose rejection proposals a batch may price jointly, without
#: those proposals (:meth:`TimingPolicy.batch_budget`).
_WORK_WITHOUT_PROPOSALS: dict[str, Work] = {
    "serenade.initial_pairs": _pairs_draw_work,
    "serenade.extend_one": _extend_draw_work,
}


def _tree_depth(request: Mapping[str, Any]) -> int:
    return int(request.get("depth") or 3)


def _tree_classes(target: Mapping[str, Any], metadata: DatasetMetadata) -> int:
    """Public number of classes of a tree target (§3.2): a tree's leaves, a numeric
    attribute's bins, a categorical attribute's categories, or 2."""
    if target.get("tree"):
        return 1 << int(target["tree"].get("depth") or 3)
    for attribute in metadata.attributes:
        if attribute.name == target.get("attribute"):
            categories = getattr(attribute, "categories", None)
            if categories:
                return len(categories)
            if attribute.type == "numeric":
                return int(target.get("bins") or 10)
    return 2


def _split_family_work(attribute: AnyAttribute, n_max: int, classes: int) -> float:
    """Public bound on one node's work for one attribute's splits in ``tree.expmech`` (§3.3,
    operations/tree_kernels.py ``_attribute_candidates``), budgeted at about three times the
    cost measured in-process at the root of synthetic views (2,221 to 10⁶ rows, all values
    distinct, 2 to 1,000 classes):

    * numeric: a sweep of the node's rows in the column's sorted order (gathers, a radix sort
      by class, prefix sums), measured 0.17 ms at 2,221 rows, 50 ns a row at 10⁶, whatever the
      classes; its cells are the distinct lattice ranks, at most min(n_max, L) + 1 candidates
      (L = 2^bits + 1 lattice points);
    * categorical: a pass over the rows (15 ns a row) and a categories × classes table (8 ns a
      cell);
    * Boolean: two passes over the rows (9 ns a row).

    Plus the exponential mechanism's share: a Gumbel key per candidate (20–33 ns each)."""
    if isinstance(attribute, NumericAttribute):
        candidates = min(n_max, (1 << attribute.lattice_bits) + 1) + 1
        return 3e-4 + 1.5e-7 * n_max + 1e-8 * classes + 8e-8 * candidates
    if isinstance(attribute, CategoricalAttribute):
        categories = len(attribute.categories)
        return 1e-4 + 5e-8 * n_max + 3e-8 * categories * classes + 8e-8 * categories
    return 3e-5 + 3e-8 * n_max + 1e-8 * classes


#: Public bound on the nodes of any admissible query: every node lies on a root-to-literal
#: path, at most MAX_QUERY_LITERALS paths of at most MAX_QUERY_DEPTH nodes.
_QUERY_NODES = MAX_QUERY_LITERALS * MAX_QUERY_DEPTH


def _target_work(target: Mapping[str, Any], metadata: DatasetMetadata) -> float:
    """makeTarget (§3.2): a pass over the rows for an attribute (8.5 ns a row measured), or
    routing every row through a released tree, one pass per leaf (2.3 ns a row and leaf). A
    query target (tree_kernels ``query_labels``) is priced for the largest admissible query
    whatever its text: a literal's first bitset is a pass over its column (budgeted 5 ns a
    row), each node one operation on n_max/64 words (budgeted 6.4 ns a word), plus the
    unpacking of the support (30 ns a row). Measured 0.10 s against 0.45 s budgeted for 64
    uncached numeric literals in 89 nodes, 0.09 s for 961 nodes (Not chains 16 deep) on 10⁶
    rows."""
    if target.get("kind") == "query":
        literals = 5e-9 * metadata.n_max * MAX_QUERY_LITERALS
        return 1e-3 + literals + 1e-10 * metadata.n_max * _QUERY_NODES + 3e-8 * metadata.n_max
    if target.get("tree"):
        leaves = 1 << int(target["tree"].get("depth") or 3)
        return 1e-3 + 7e-9 * metadata.n_max * leaves
    return 1e-3 + 3e-8 * metadata.n_max


def _tree_expmech_work(request: Mapping[str, Any], metadata: DatasetMetadata) -> float:
    # One exponential mechanism per inner node (2^depth − 1) over every split of the view,
    # each attribute's candidates bounded by public values (:func:`_split_family_work`; a
    # node's passes over all n_max rows make every node as dear as the root), plus the node's
    # own passes: its row mask unpacked, the labelled rows and the chosen split's masks (2 ns a
    # row measured, budgeted 10). Measured 0.06 s against 0.27 s budgeted for 48 numeric
    # attributes on 2,221 rows (n_max = 2,221), 0.5 s against 2.3 s for 2 all-distinct ones on
    # 10⁶ rows, depth 3 (synthetic views; bench/bench_budgets.py checks the budget on mammals
    # and on all-distinct columns).
    # Every attribute of the view is priced, also when ``columns`` restricts the splits: a
    # restricted tree does less work, so the price stays an upper bound.
    nodes = (1 << _tree_depth(request)) - 1
    target = request.get("target") or {}
    classes = _tree_classes(target, metadata)
    per_node = 1e-4 + 1e-8 * metadata.n_max
    for attribute in metadata.attributes:
        if attribute.view == request.get("view"):
            per_node += _split_family_work(attribute, metadata.n_max, classes)
    return _target_work(target, metadata) + nodes * per_node


def _tree_step_work(depth: int, classes: int, metadata: DatasetMetadata) -> float:
    # One compiled step: the new split's row masks (a pass over the rows) and every node below
    # the moved one recounted against every class by popcount (the scores count the inner
    # nodes' missing rows too): on average about 1.5·``depth`` nodes (34/7 at depth 3, against
    # 24/7 leaves when only the leaves were counted, measured ≈ 15 µs at depth 3 with 10
    # classes on 28,886 rows; the popcount term is scaled by that ratio). Per row and per step
    # a chain on 48 all-distinct numeric columns measured up to 1.2 ns at 2 classes (24 µs a
    # step on 20,000 rows, bench_budgets.py's ``wide`` table; 2026-11-28), and 1.5–2 µs a step
    # on 200 rows: priced 1.2 ns a row beside the popcounts, and 4 µs a step.
    return 4e-6 + metadata.n_max * (1.2e-9 + 2.2e-11 * depth * (classes + 2))


def _tree_setup_work(metadata: DatasetMetadata, view: str | None = None) -> float:
    # The per-row split codes of ``view`` (every attribute when None) and the random initial
    # tree (operations/tree_kernels.py ``split_codes``): a numeric attribute's codes are binary
    # searches of its present values, in their stored order, in the 2^16-point lattice, measured
    # 36–53 ns a row (all-distinct values, 10³–10⁵ rows; 170–190 ns before they were searched
    # in order), budgeted 150 ns; a Boolean or categorical attribute's a copy or two passes,
    # 7–15 ns measured, budgeted 50 ns.
    per_row = 0.0
    for attribute in metadata.attributes:
        if view is None or attribute.view == view:
            per_row += 1.5e-7 if isinstance(attribute, NumericAttribute) else 5e-8
    return 1e-3 + metadata.n_max * per_row


def _tree_mcmc_work(request: Mapping[str, Any], metadata: DatasetMetadata) -> float:
    # The exact sampler (operations/tree_exact.py) when the request runs it: its public work
    # bound priced by exact_tree_seconds, plus makeTarget and the split masks (a pass over the
    # rows per candidate split); else the chain's steps.
    body = TreeMCMCRequest.model_validate(request)
    if mcmc_sampler(body, metadata) == "exact":
        return _target_work(request.get("target") or {}, metadata) + exact_seconds(body, metadata)
    depth = _tree_depth(request)
    classes = _tree_classes(request.get("target") or {}, metadata)
    iterations = int(request.get("iterations") or 10_000)
    view = request.get("view")
    setup = _tree_setup_work(metadata, view if isinstance(view, str) else None)
    return setup + iterations * _tree_step_work(depth, classes, metadata)


def _tree_pair_work(request: Mapping[str, Any], metadata: DatasetMetadata) -> float:
    # As tree.mcmc against the larger of the two trees' class counts, plus the second tree's
    # node × leaf recount after a first-tree move (measured ≈ 21 µs a step at depth 3 with 10
    # classes on 28,886 rows when only its 2^depth leaves were recounted; now its 2^(depth+1) − 1
    # nodes, so the recount term is doubled).
    depth = _tree_depth(request)
    leaves = 1 << depth
    target = {"attribute": request.get("attribute"), "bins": request.get("bins")}
    classes = max(_tree_classes(target, metadata), leaves)
    recount = 1.2e-11 * metadata.n_max * leaves * depth
    per_step = _tree_step_work(depth, classes, metadata) + recount
    iterations = int(request.get("iterations") or 10_000)
    return 2 * _tree_setup_work(metadata) + iterations * per_step


def _leaf_counts_work(request: Mapping[str, Any], metadata: DatasetMetadata) -> float:
    trees = [request.get("left_tree") or {}, request.get("right_tree") or {}]
    leaves = [1 << int(tree.get("depth") or 3) for tree in trees]
    # Counting, then one noise draw per released cell: at most (a + 1)(b + 1) of them.
    cells = (leaves[0] + 1) * (leaves[1] + 1)
    return (
        5e-7 * metadata.n_max + 2e-10 * metadata.n_max * leaves[0] * leaves[1] + _noise_work(cells)
    )


def _rule_list_antecedents_work(request: Mapping[str, Any], metadata: DatasetMetadata) -> float:
    # Two top-K selections (one per label class) over at most n_max rows in all: the plan's
    # bound priced for two disjoint row subsets.
    body = RuleListAntecedentsRequest.model_validate(request)
    return antecedents_plan(body, metadata).seconds(classes=2)


def _rule_list_sample_work(request: Mapping[str, Any], metadata: DatasetMetadata) -> float:
    # Per step: the prefixes from the first changed rule recounted, at most the whole list of
    # len(antecedents) rules over n_max rows (measured ≈ 0.45 ms a step with 136 rules on
    # 32,561 rows, the posterior target's long lists).
    antecedents = len(request.get("antecedents") or ())
    per_step = 5e-5 + 1e-10 * metadata.n_max * max(antecedents, 1)
    return int(request.get("iterations") or 1000) * per_step


def _rule_list_exact_work(request: Mapping[str, Any], metadata: DatasetMetadata) -> float:
    # Every list of D_L scored by one compiled pass over its prefix's remaining words plus
    # per-list bookkeeping (exact_rule_list_work), and a fixed cost per prefix (the
    # likelihoods, the prior and the interpreter). Measured 0.4-0.5 ns a word and 25-50 µs a
    # prefix, quiet to loaded (M = 40 and 80, L = 3, 10³-2·10⁵ rows; bench/README.md "Exact
    # rule lists by a compiled count"); budgeted at 3× the loaded figures.
    antecedents = len(request.get("antecedents") or ())
    max_rules = int(request.get("max_rules") or 3)
    prefixes = exact_rule_list_count(antecedents, max_rules - 1)
    words = exact_rule_list_work(antecedents, max_rules, metadata.n_max)
    return 0.05 + 1.5e-4 * prefixes + 1.5e-9 * words


def _rule_list_estimates_work(request: Mapping[str, Any], metadata: DatasetMetadata) -> float:
    # One pass over the rows per rule, then one noise draw per count: 2 per rule and default.
    rules = len(request.get("rules") or ())
    return 5e-7 * metadata.n_max + 1e-9 * metadata.n_max * rules + _noise_work(2 * (rules + 1))


def _row_width(metadata: DatasetMetadata) -> int:
    """Public bound on the cells a loader parses per row: the declared columns of a table, the
    item universe of transactions (a row holds at most every item)."""
    if metadata.kind == "transactions":
        return max(len(metadata.items), 1)
    return max(len(metadata.attributes), 1)


def load_work(metadata: DatasetMetadata) -> float:
    """Public bound on loading a dataset version from its stored files: a fixed part (files,
    parser set-up) plus a parse of at most ``n_max`` rows of :func:`_row_width` cells (measured
    ≈ 0.35 µs a cell on the bundled Mushroom table; budgeted at about three times that). It
    covers mapping the packed columns (data/packed.py) too: a CRC-32 pass over at most 16 bytes
    a cell (≈ 0.012 µs) and one bitset per categorical column."""
    return 0.05 + 1e-6 * metadata.n_max * _row_width(metadata)


def _spin_work(request: Mapping[str, Any], metadata: DatasetMetadata) -> float:
    # Test mode only (operations/testing.py): the public loop length bounds the spin.
    return float(request.get("seconds") or 0.0) + _count_work(request, metadata)


#: Work estimate of every operation (unknown names: the count estimate).
_WORK: dict[str, Work] = {
    "count.noisy": _count_work,
    "red.compute_quality": _quality_work,
    "fim.topk_em": _topk_work("em"),
    "fim.topk_laplace": _topk_work("laplace"),
    "serenade.initial_pairs": _pairs_work,
    "serenade.extend_one": _extend_work,
    "tree.expmech": _tree_expmech_work,
    "tree.mcmc": _tree_mcmc_work,
    "tree.pair_mcmc": _tree_pair_work,
    "tree.leaf_counts": _leaf_counts_work,
    "brl.antecedents": _rule_list_antecedents_work,
    "brl.sample_rule_list": _rule_list_sample_work,
    "brl.sample_rule_list_exact": _rule_list_exact_work,
    "brl.point_estimates": _rule_list_estimates_work,
    "test.spin": _spin_work,
    "test.spin_inline": _spin_work,
}


#: The operations a calibration file may name (test-mode operations are not calibrated).
PRICED_OPERATIONS = tuple(name for name in _WORK if not name.startswith("test."))

#: Operations whose work estimate prices a probabilistic public cap (Serenade's rejection
#: proposals, top-K's tail reveals and draws: exceeded with probability ≤ 10⁻⁹). A calibration
#: times typical runs, far below the cap, so it may raise their budgets but never lower them
#: below the hand-set estimate, which is what covers a run that reaches its cap.
TAIL_CAPPED = frozenset(
    {
        "serenade.initial_pairs",
        "serenade.extend_one",
        "fim.topk_em",
        "fim.topk_laplace",
        "brl.antecedents",
    }
)


#: Seconds of a batch part's own bookkeeping (issue #23, item 2): its validation and pricing,
#: its row in the batch's one reservation and one release transaction, its receipt and the
#: validation of its response. Measured ≤ 1.6 ms a part *with* its kernel (``bench/
#: bench_serenade.py --batching``: red.compute_quality parts over HTTP on SQLite, padding off,
#: mammals and asia, a loaded 2-core machine), so at least 3× the bookkeeping alone.
BATCH_PART_SECONDS = 0.005


def operation_work(
    operation: str, request: BaseModel | Mapping[str, Any], metadata: DatasetMetadata
) -> float:
    """The public work estimate of ``operation`` (seconds at scale 1)."""
    body = request.model_dump(mode="json") if isinstance(request, BaseModel) else request
    work = _WORK.get(operation, _count_work)
    try:
        return max(float(work(body, metadata)), 0.0)
    except (TypeError, ValueError):
        return 0.0


def pricing_variant(
    operation: str, request: BaseModel | Mapping[str, Any], metadata: DatasetMetadata
) -> str | None:
    """The kernel variant a request runs, where one operation has kernels of different cost
    per work unit: ``tree.mcmc``'s sampler ("exact" or "mcmc", ``mcmc_sampler``, a public
    function of the request and the metadata); None for every other operation (or a request
    that does not validate: priced by the operation's factor)."""
    if operation != "tree.mcmc":
        return None
    body = request.model_dump(mode="json") if isinstance(request, BaseModel) else request
    try:
        model = TreeMCMCRequest.model_validate(body)
    except ValueError:
        return None
    return mcmc_sampler(model, metadata)


@dataclass(frozen=True, slots=True)
class TimingPolicy:
    """When a data-touching release may be shown (all times in seconds)."""

    enabled: bool
    grid: float
    base: float
    scale: float
    #: Overruns fail closed at the deadline (else they are shown at the next grid tick).
    fail_closed: bool = False
    #: Measured public factors (``DPMINE_TIMING_CALIBRATION``; None: the hand-set estimates).
    calibration: TimingCalibration | None = field(default=None, compare=False)
    #: Which calibration file is in force, in one line (None without one).
    calibration_label: str | None = None
    #: The base of a job's budget when it differs from ``base`` (a calibration file that
    #: measured the job path: :meth:`for_jobs`).
    job_base: float | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> TimingPolicy:
        """The policy configured by ``DPMINE_TIMING_*`` (see :class:`Settings`). A calibration
        file that measured the request path sets the base to ``max(floor, margin ·
        DPMINE_MAX_IN_FLIGHT · measured seconds per request)`` (the floor:
        ``MIN_FAIL_CLOSED_BASE_MS``) instead of ``DPMINE_TIMING_BASE_MS``
        (server/dpmine_server/request_path.py); a calibration file that cannot be used raises
        :class:`~dpmine_server.services.calibration_file.CalibrationError` (at start-up: the
        container builds the policy before serving)."""
        calibration, label = None, None
        base = settings.timing_base_ms / 1000.0
        job_base: float | None = None
        path = settings.calibration_file
        if path is not None and settings.timing_calibration == "auto" and not path.exists():
            # Not measured yet: a serving process measures it before it builds this policy
            # (services/first_start.py); the administration commands price nothing.
            label = f"auto: not measured yet ({path}); hand-set estimates"
        elif path is not None:
            calibration = cached_calibration(str(path), PRICED_OPERATIONS)
            label = calibration.label(path)
            measured = calibration.request_path
            if measured is not None:
                base = measured.base_seconds(
                    limit=settings.max_in_flight,
                    margin=calibration.margin,
                    floor=MIN_FAIL_CLOSED_BASE_MS / 1000.0,
                )
                job_base = measured.job_base_seconds(base=base, margin=calibration.margin)
        return cls(
            enabled=settings.timing_padding,
            grid=settings.timing_grid_ms / 1000.0,
            base=base,
            scale=settings.timing_scale,
            fail_closed=settings.timing_overrun == "fail",
            calibration=calibration,
            calibration_label=label,
            job_base=job_base,
        )

    def for_jobs(self) -> TimingPolicy:
        """The policy that pads background jobs: this one with the job path's base.

        Why jobs need their own base: a job's budget is counted from its submission, and
        before its kernel starts it is handed to a worker process (the queue, the claim
        transaction, the job's rows read again); after it ends the worker writes the settled
        state, which must land before it is shown (services/workers.py ``PublicSchedule``,
        services/jobs.py ``_shown_at``). The synchronous request path measured for ``base``
        includes neither, and a base measured at a small in-flight limit (20 ms at one) is
        shorter than the hand-over alone, so calibrated jobs were claimed later than half the
        base and their slots started at the hand-over, a load-dependent time (bench/README.md,
        "Jobs on a calibrated server"). A calibration file that measured the
        job path gives ``job_base`` (``RequestPathCalibration.job_base_seconds``); a public
        value, measured on synthetic data."""
        if self.job_base is None or self.job_base == self.base:
            return self
        return replace(self, base=self.job_base, job_base=None)

    @property
    def fails_closed(self) -> bool:
        """Whether a kernel still running at its deadline is settled there as a failure."""
        return self.enabled and self.fail_closed

    def budget(
        self, operation: str, request: BaseModel | Mapping[str, Any], metadata: DatasetMetadata
    ) -> float:
        """Seconds granted to ``operation`` on this request (public values only)."""
        if not self.enabled:
            return 0.0
        work = operation_work(operation, request, metadata)
        measured = self.calibration.operations.get(operation) if self.calibration else None
        # Only a file that measured the operation's variants needs to know which one runs.
        variant = (
            pricing_variant(operation, request, metadata)
            if measured and measured.variants
            else None
        )
        return self.base + self.scale * self.calibrated_work(operation, work, variant)

    def batch_budget(
        self,
        parts: Sequence[tuple[str, BaseModel | Mapping[str, Any]]],
        metadata: DatasetMetadata,
    ) -> float:
        """Seconds granted to a batch of (operation, request) parts, run in one request:
        ``base + Σᵢ (BATCH_PART_SECONDS + scale · calibrated workᵢ)``, where the Serenade parts
        that sample by rejection share one proposal cap when the batch has several
        (:func:`~dpmine_server.operations.redescriptions.batch_shared_proposals`): their work
        is then priced without their own caps' proposals, and the batch adds the J proposals
        of the joint cap once, calibrated as those parts' operations (the largest).

        Why it covers the batch whenever each part's own budget covers the part: a request's
        fixed bookkeeping (authentication, the metadata read, one reservation and one release
        transaction) is what ``base`` pays for, and a batch does it once; each part then runs
        the same kernel on the same public inputs as its own call would, within the same
        ``scale · calibrated work`` that call's budget grants it, plus its own bookkeeping
        (:data:`BATCH_PART_SECONDS`). The parts run one after another in one thread, so the
        times add up, and so do the terms. Jointly capped parts spend one pool of J proposals
        (the executor runs them in it), so J proposals bound all of theirs together as each
        cap bounded its call's: exceeded with probability ≤ 10⁻⁹, when the remaining draws
        enumerate, as a call's do at its own cap (dp/candidates.py ``joint_proposal_cap``).
        Every term is a public function of the operations' names, their public parameters, the
        public metadata and the part count, never of the rows."""
        if not self.enabled:
            return 0.0
        bodies = [
            (op, r.model_dump(mode="json") if isinstance(r, BaseModel) else r) for op, r in parts
        ]
        shared = batch_shared_proposals(bodies, metadata)
        total = self.base
        for position, (operation, request) in enumerate(bodies):
            if shared is not None and position in shared.parts:
                work = _WORK_WITHOUT_PROPOSALS[operation](request, metadata)
            else:
                work = operation_work(operation, request, metadata)
            total += BATCH_PART_SECONDS + self.scale * self.calibrated_work(operation, work)
        if shared is not None:
            plans = [
                plan
                for position in sorted(shared.parts)
                if (plan := rejection_plan(*bodies[position], metadata)) is not None
            ]
            proposals = joint_rejection_seconds(plans, shared.cap)
            operations = {bodies[position][0] for position in shared.parts}
            total += self.scale * max(self.calibrated_work(op, proposals) for op in operations)
        return total

    def extend_budget(
        self,
        request: BaseModel | Mapping[str, Any],
        metadata: DatasetMetadata,
        warm: int,
        *,
        resources_held: bool = False,
    ) -> float:
        """Seconds granted to a ``serenade.extend_one`` call of which ``warm`` positions'
        candidate sets, and its banks and grids when ``resources_held``, the public cache
        model holds (services/extension_model.py): as :meth:`budget`, the warm positions
        priced by their draw only and held resources not at all. Both are functions of
        public events (that module's proof), so this is a public value; ``warm = 0`` without
        resources is :meth:`budget`."""
        if not self.enabled:
            return 0.0
        body: Mapping[str, Any]
        if isinstance(request, ExtendOneRequest):
            model, body = request, request.model_dump(mode="json")
        else:
            body = request.model_dump(mode="json") if isinstance(request, BaseModel) else request
            model = ExtendOneRequest.model_validate(body)
        operation = "serenade.extend_one"
        work = max(float(_extend_seconds(model, body, metadata, warm, resources_held)), 0.0)
        return self.base + self.scale * self.calibrated_work(operation, work)

    def calibrated_work(self, operation: str, work: float, variant: str | None = None) -> float:
        """Seconds (at scale 1) for hand-set ``work`` of ``operation``: ``work`` itself
        without a calibration or for an operation it did not measure (factor 1), else
        ``max(margin · factor · work, margin · floor)`` (and at least ``work`` for the
        :data:`TAIL_CAPPED` operations). The factor is the largest measured seconds per work
        unit, so on every calibrated case the budget is at least ``margin`` times the measured
        worst time; the floor keeps requests smaller than every measured case above
        ``margin`` times the kernel's measured fixed cost. ``variant`` (:func:`pricing_variant`)
        picks the factor and floor measured on that kernel variant's cases when the file has
        them: every case of the variant still gets ``margin`` times its worst time. All these
        numbers are public (measured on synthetic data of public sizes), and the variant is a
        public function of the request and the metadata, so the budget stays a public function
        of public values."""
        measured = self.calibration.operations.get(operation) if self.calibration else None
        if self.calibration is None or measured is None:
            return work
        margin = self.calibration.margin
        own = measured.variants.get(variant) if variant is not None else None
        factor, floor = (
            (own.factor, own.floor_seconds) if own else (measured.factor, measured.floor_seconds)
        )
        calibrated = max(margin * factor * work, margin * floor)
        return max(calibrated, work) if operation in TAIL_CAPPED else calibrated

    def lane_reservation(self, budget: float, cold: float) -> tuple[float, float]:
        """``(pre, kernel)`` seconds of a padded inline request in its process's kernel lane
        (services/kernel_lane.py): half the base, plus the load budget ``cold`` when its
        dataset must be loaded first, for the work before its kernel (the other half is left
        for the ledger write after it), and the budget less the base for the kernel itself.
        Public values only."""
        return self.base / 2 + cold, max(budget - self.base, 0.0)

    def load_budget(self, metadata: DatasetMetadata) -> float:
        """Seconds a load of this dataset is padded to when it happens inside a request (a
        cold cache): the load then takes this public time, whatever the private row count,
        and the request's deadline moves by the same amount (:meth:`budget` ``+`` this)."""
        if not self.enabled:
            return 0.0
        return self.scale * load_work(metadata)

    def _ticks(self, seconds: float) -> int:
        return max(math.ceil(seconds / self.grid - 1e-9), 0) if self.grid > 0 else 0

    def offset(self, budget: float, elapsed: float) -> float:
        """Seconds after arrival at which a release computed in ``elapsed`` seconds is shown:
        the padded deadline, or the first grid tick after an overrun."""
        if not self.enabled:
            return elapsed
        if self.grid <= 0:
            return max(budget, elapsed)
        return self.grid * max(self._ticks(budget), self._ticks(elapsed))

    def deadline_offset(self, budget: float) -> float:
        """Seconds after arrival of the padded deadline (no overrun)."""
        return self.offset(budget, 0.0)

    def remaining(self, arrival: float, budget: float, now: float | None = None) -> float:
        """Seconds to wait from ``now`` (monotonic) before releasing a request that arrived at
        ``arrival`` (monotonic) and finished now."""
        current = time.monotonic() if now is None else now
        return max(arrival + self.offset(budget, current - arrival) - current, 0.0)

    def visible_at(self, arrival: datetime, budget: float, finished: datetime) -> datetime:
        """Wall-clock time at which a job that arrived at ``arrival`` and finished at
        ``finished`` is shown finished."""
        elapsed = max((finished - arrival).total_seconds(), 0.0)
        return arrival + timedelta(seconds=self.offset(budget, elapsed))
