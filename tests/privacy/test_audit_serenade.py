"""End-to-end privacy audits of ``serenade.initial_pairs`` and ``serenade.extend_one``
(ALGORITHMS.md §2.3, §2.4; DP-ENGINES.md §5).

Each audit runs the registered kernel (``CATALOG[...].run`` with the charged ``Epsilon``) on a
toy two-view dataset D and on its neighbour D' = D plus one row, at ε = 1 per selection, maps each
output to a category (the chosen redescription's text; a continuous threshold pair by the cell
pair it falls in, cut at the values of D') and checks the Clopper-Pearson lower bound on the
privacy loss (``privacy.audit``). Categories are ordered by their exact log-ratio between D' and
D (computed by the independent reference of ``operations/test_serenade.py``), so the prefix and
suffix unions are the events of largest loss in each direction.

Worst cases. The kernels are range-calibrated (§0.8): c = ε/(Δ_up + Δ_down), and the loss of
one outcome o is c·(Q'(o) − Q(o)) + log(Z/Z'), at most c·(Δ_up + Δ_down) = ε. Under add/remove
neighbours a Jaccard can jump from 0 to 1 (the added row is in both supports of a pair whose
union was empty) but drop by at most ½ (1/1 → 1/2), so a NoSens selection has Δ_up = 1,
Δ_down = ½, c = ε/1.5. The datasets push towards that bound (exact losses asserted in the tests):

* initial pairs, NoSens: D = one row in [l1..l3] and [r1..r7]; the added row is in [l1..l3], [lt]
  and [rt]: 21 pairs drop 1 → ½ and (lt, rt) jumps 0 → 1 (loss 0.868);
* initial pairs, continuous thresholds on x, NoSens: the added row lifts [lt] × (the cells around
  its value) to 1 and halves [l1] × (cells holding both values) (loss 0.57);
* extend one (CS, grid), Serenade Q with s = 1, x0 = 2, N_max = 5 (Δ_up = 0.269, Δ_down =
  0.183): the added row lifts |I| of ([l1], [b]) and of its extensions from 1 to 2, past x0
  (loss 0.76);
* extend one (CS, continuous thresholds; NoSens) and (ES over two positions; Serenade Q): 0.62
  and 0.61;
* initial pairs with the coverage factor σ(10(E00 − ½)) (s = 0.3, x0 = 8, N_max = 16; Δ_up =
  0.879 from the E00 move, Δ_down = 0.059): the added row leaves ([l1], [r1]) and lifts its
  factor from σ(−5) to σ(5) (loss 0.59).

Broken variants. (1) Δ understated four-fold (``quality_parameters`` patched), i.e. c four times
too large: loss 3.69 (pairs) and about 3 (extend), flagged with 2·10⁴ and 10⁴ samples per side.
(2) One-sided calibration c = ε/Δ_up (Δ_down forgotten): for NoSens pairs c = ε instead of ε/1.5,
loss 1.32 (at most 1.5), flagged with 10⁵ samples per side. (3) The coverage factor with the
paper's sensitivities (no E00 term: Δ_up = 0.109 instead of 0.879): loss 3.88, flagged with
2·10⁴ samples per side.

Every audit uses alpha = 1e-5 (a correct kernel fails one with probability at most 1e-5) and
seeded generators, so runs are reproducible.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from dpmine.wire import (
    AnyAttribute,
    BooleanAttribute,
    BoolLiteral,
    CsvSource,
    DatasetMetadata,
    ExtendOneRequest,
    InitialPairsRequest,
    NumericAttribute,
    QualityParameters,
    Redescription,
    SerenadeOptions,
)
from dpmine_server.data.columns import ColumnStore
from dpmine_server.data.loaders import load_store
from dpmine_server.dp.budget import Epsilon
from dpmine_server.dp.rng import seeded_generator
from dpmine_server.operations import CATALOG, redescriptions, serenade
from dpmine_server.operations.base import no_progress
from dpmine_server.operations.serenade import ExtensionRules, QualityParams, ThresholdMode
from dpmine_server.operations.serenade_quality import one_sided
from privacy.audit import AuditResult, assert_audit_flags, assert_audit_passes, audit_categorical
from support.serenade_reference import (
    Data,
    Key,
    extension_key,
    extension_law,
    pair_key,
    pairs_law,
    understated_sensitivity,
)

EPSILON = 1.0
ALPHA = 1e-5
#: Draws per initial-pairs request (≤ the wire's 1000); each draw costs ε/PAIRS_PER_CALL = 1.
PAIRS_PER_CALL = 1000


@dataclass(frozen=True)
class Neighbours:
    """D and D' = D plus one row, loaded by the real loader, with their reference rows (both cut
    at the numeric values of D', so that cells mean the same on both sides)."""

    stores: tuple[ColumnStore, ColumnStore]
    data: tuple[Data, Data]


def neighbours(
    tmp_path: Path, metadata: DatasetMetadata, rows: Sequence[str], added: str
) -> Neighbours:
    header = ",".join(a.name for a in metadata.attributes)
    stores: list[ColumnStore] = []
    texts: list[str] = []
    for index, body in enumerate((list(rows), [*rows, added])):
        text = "\n".join([header, *body]) + "\n"
        path = tmp_path / f"d{index}.csv"
        path.write_text(text)
        store, _report = load_store(metadata, CsvSource(path=path.name), base_dir=tmp_path)
        stores.append(store)
        texts.append(text)
    big = Data.parse(texts[1], metadata)
    cuts = tuple(
        (a.name, value)
        for a in metadata.attributes
        if isinstance(a, NumericAttribute)
        for value in big.values(a.name)
    )
    small = Data.parse(texts[0], metadata)
    return Neighbours(
        stores=(stores[0], stores[1]),
        data=(replace(small, cuts=cuts), replace(big, cuts=cuts)),
    )


def ordered_categories(law_0: dict[Key, float], law_1: dict[Key, float]) -> list[Hashable]:
    """Every outcome, by its exact log-ratio between D' and D (largest loss at both ends)."""
    assert set(law_0) == set(law_1)
    keys: list[Key] = list(law_0)
    keys.sort(key=lambda key: math.log(law_1[key] / law_0[key]))
    return list[Hashable](keys)


def exact_loss(law_0: dict[Key, float], law_1: dict[Key, float]) -> float:
    """The largest |log P1(o)/P0(o)| over single outcomes (unions cannot exceed it)."""
    return max(abs(math.log(law_1[key] / law_0[key])) for key in law_0)


# --------------------------------------------------------------------------------------------
# Runners through the registered kernels


def draw_pairs(
    store: ColumnStore,
    data: Data,
    quality: QualityParameters,
    mode: ThresholdMode,
    *,
    samples: int,
    seed: int,
    columns: Sequence[str] | None = None,
) -> list[Key]:
    """``samples`` initial pairs at ε = 1 each (requests of PAIRS_PER_CALL draws), from the
    allowed ``columns`` (``options.columns``; None: all)."""
    spec = CATALOG["serenade.initial_pairs"]
    request = InitialPairsRequest(
        count=PAIRS_PER_CALL,
        epsilon=EPSILON * PAIRS_PER_CALL,
        quality=quality,
        options=SerenadeOptions(threshold_mode=mode, columns=columns),
    )
    cost, guarantee = spec.cost(request), spec.guarantee
    assert (cost, guarantee) == (Epsilon.charge(EPSILON * PAIRS_PER_CALL), "pure")
    rng = seeded_generator(seed)
    keys: list[Key] = []
    for _ in range(samples // PAIRS_PER_CALL):
        release = spec.run(store, request, cost, rng, no_progress)
        assert release["threshold_mode"] == mode
        keys += [pair_key(data, mode, pair) for pair in release["pairs"]]
    return keys


def draw_extensions(
    store: ColumnStore,
    data: Data,
    request: ExtendOneRequest,
    *,
    samples: int,
    seed: int,
) -> list[Key]:
    """``samples`` extend-one releases of one request, charged ε each, as law keys."""
    spec = CATALOG["serenade.extend_one"]
    cost, guarantee = spec.cost(request), spec.guarantee
    assert (cost, guarantee) == (Epsilon.charge(request.epsilon), "pure")
    mode = request.options.threshold_mode
    assert mode in ("grid", "continuous")
    rng = seeded_generator(seed)
    keys: list[Key] = []
    for _ in range(samples):
        release: dict[str, Any] = spec.run(store, request, cost, rng, no_progress)
        outcome = (release["position"], release["redescription"])
        keys.append(extension_key(data, request.collection, mode, outcome))
    return keys


def audit(samples_0: list[Key], samples_1: list[Key], categories: list[Hashable]) -> AuditResult:
    assert set(samples_0) | set(samples_1) <= set(categories)
    return audit_categorical(samples_0, samples_1, categories=categories, alpha=ALPHA)


# --------------------------------------------------------------------------------------------
# Initial pairs


def boolean_views(left: Sequence[str], right: Sequence[str], n_max: int) -> DatasetMetadata:
    attributes: list[AnyAttribute] = [BooleanAttribute(name=n, view="left") for n in left]
    attributes += [BooleanAttribute(name=n, view="right") for n in right]
    return DatasetMetadata(kind="views", n_max=n_max, attributes=attributes)


PAIR_LEFT = ("l1", "l2", "l3", "lt")
PAIR_RIGHT = ("r1", "r2", "r3", "r4", "r5", "r6", "r7", "rt")
#: D: one row in l1..l3 and r1..r7. D': plus a row in l1..l3, lt and rt.
PAIR_ROWS = ("1,1,1,0,1,1,1,1,1,1,1,0",)
PAIR_ADDED = "1,1,1,1,0,0,0,0,0,0,0,1"
NOSENS = QualityParameters(x0=1.0, function="jaccard")
NOSENS_PARAMS = QualityParams(
    s=0.0, x0=1.0, delta=1.0, function="jaccard", delta_up=1.0, delta_down=0.5
)


def pair_setup(tmp_path: Path) -> tuple[Neighbours, list[Hashable], float, float]:
    """The neighbours, ordered categories, exact loss at ε and at 4ε."""
    pair = neighbours(tmp_path, boolean_views(PAIR_LEFT, PAIR_RIGHT, 10), PAIR_ROWS, PAIR_ADDED)
    laws = [
        [pairs_law(d, negations=False, mode="grid", params=NOSENS_PARAMS, c=c) for d in pair.data]
        for c in (NOSENS_PARAMS.coefficient(EPSILON), 4 * NOSENS_PARAMS.coefficient(EPSILON))
    ]
    return pair, ordered_categories(*laws[0]), exact_loss(*laws[0]), exact_loss(*laws[1])


def test_initial_pairs_pass(tmp_path: Path) -> None:
    pair, categories, loss, _broken_loss = pair_setup(tmp_path)
    assert 0.85 < loss < EPSILON  # close to the add/remove worst case c·1.5 = ε
    samples = [
        draw_pairs(store, data, NOSENS, "grid", samples=20_000, seed=seed)
        for store, data, seed in zip(pair.stores, pair.data, (11, 12), strict=True)
    ]
    assert_audit_passes(audit(samples[0], samples[1], categories), EPSILON)


def test_initial_pairs_with_understated_sensitivity_are_flagged(tmp_path: Path) -> None:
    pair, categories, _loss, broken_loss = pair_setup(tmp_path)
    assert broken_loss > 2.5
    with understated_sensitivity(4.0):
        samples = [
            draw_pairs(store, data, NOSENS, "grid", samples=20_000, seed=seed)
            for store, data, seed in zip(pair.stores, pair.data, (13, 14), strict=True)
        ]
    assert_audit_flags(audit(samples[0], samples[1], categories), EPSILON)


#: ``options.columns`` leaving r7 out (issue #21): the same mechanism over fewer candidates.
PAIR_ALLOWED = sorted(set(PAIR_LEFT) | set(PAIR_RIGHT) - {"r7"})


def restricted_pair_setup(tmp_path: Path) -> tuple[Neighbours, list[Hashable], float, float]:
    """:func:`pair_setup` for requests restricted to PAIR_ALLOWED: the exact laws are those of
    the same rows over the allowed attributes only."""
    pair = neighbours(tmp_path, boolean_views(PAIR_LEFT, PAIR_RIGHT, 10), PAIR_ROWS, PAIR_ADDED)
    laws = [
        [
            pairs_law(
                d.restricted(PAIR_ALLOWED), negations=False, mode="grid", params=NOSENS_PARAMS, c=c
            )
            for d in pair.data
        ]
        for c in (NOSENS_PARAMS.coefficient(EPSILON), 4 * NOSENS_PARAMS.coefficient(EPSILON))
    ]
    return pair, ordered_categories(*laws[0]), exact_loss(*laws[0]), exact_loss(*laws[1])


def test_initial_pairs_restricted_to_columns_pass(tmp_path: Path) -> None:
    """The restricted path (``options.columns``) keeps the guarantee: its candidate set is a
    public function of the request, and the mechanism is the same."""
    pair, categories, loss, _broken_loss = restricted_pair_setup(tmp_path)
    assert 0.5 < loss < EPSILON
    samples = [
        draw_pairs(store, data, NOSENS, "grid", samples=20_000, seed=seed, columns=PAIR_ALLOWED)
        for store, data, seed in zip(pair.stores, pair.data, (15, 16), strict=True)
    ]
    assert all(key[2] != "r7" for key in samples[0] + samples[1])  # ("pair", left, attribute, …)
    assert_audit_passes(audit(samples[0], samples[1], categories), EPSILON)


def test_restricted_initial_pairs_with_understated_sensitivity_are_flagged(tmp_path: Path) -> None:
    pair, categories, _loss, broken_loss = restricted_pair_setup(tmp_path)
    assert broken_loss > 2.5
    with understated_sensitivity(4.0):
        samples = [
            draw_pairs(store, data, NOSENS, "grid", samples=20_000, seed=seed, columns=PAIR_ALLOWED)
            for store, data, seed in zip(pair.stores, pair.data, (17, 18), strict=True)
        ]
    assert_audit_flags(audit(samples[0], samples[1], categories), EPSILON)


NUMERIC_PAIRS = DatasetMetadata(
    kind="views",
    n_max=10,
    attributes=[
        BooleanAttribute(name="l1", view="left"),
        BooleanAttribute(name="lt", view="left"),
        NumericAttribute(name="x", view="right", lo=0.0, hi=10.0),
    ],
)


def test_initial_pairs_continuous_thresholds_pass(tmp_path: Path) -> None:
    """D: ([l1], x = 2); D' adds ([lt], x = 8): the pairs ([lt], cells around 8) jump 0 → 1 and
    ([l1], cells holding both values) drop 1 → ½."""
    pair = neighbours(tmp_path, NUMERIC_PAIRS, ["1,0,2.0"], "0,1,8.0")
    laws = [
        pairs_law(
            d,
            negations=False,
            mode="continuous",
            params=NOSENS_PARAMS,
            c=NOSENS_PARAMS.coefficient(EPSILON),
        )
        for d in pair.data
    ]
    assert 0.5 < exact_loss(*laws) < EPSILON
    samples = [
        draw_pairs(store, pair.data[1], NOSENS, "continuous", samples=6_000, seed=seed)
        for store, seed in zip(pair.stores, (15, 16), strict=True)
    ]
    assert_audit_passes(audit(samples[0], samples[1], ordered_categories(*laws)), EPSILON)


# --------------------------------------------------------------------------------------------
# Extend one


EXTEND_VIEWS = DatasetMetadata(
    kind="views",
    n_max=5,
    attributes=[
        BooleanAttribute(name="l1", view="left"),
        BooleanAttribute(name="l2", view="left"),
        BooleanAttribute(name="b", view="right"),
        NumericAttribute(name="x", view="right", lo=0.0, hi=10.0, grid=[2.5, 5.0, 7.5]),
    ],
)
START = Redescription(left=BoolLiteral(attribute="l1"), right=BoolLiteral(attribute="b"))
#: Serenade Q with s = 1, x0 = 2 on N_max = 5: Δ = σ(s(1 − x0)) = 0.269, the jump (0,0) → (1,1).
STEEP = QualityParameters(x0=2.0, s=1.0)


def steep_params() -> QualityParams:
    """The kernel's parameters: range-calibrated, Δ_up = 0.269 (the jump), Δ_down = 0.183."""
    return redescriptions.quality_parameters(STEEP, EXTEND_VIEWS.n_max)


def extend_request(
    collection: list[Redescription], quality: QualityParameters, mode: ThresholdMode
) -> ExtendOneRequest:
    return ExtendOneRequest(
        mode="cs" if len(collection) == 1 else "es",
        collection=collection,
        epsilon=EPSILON,
        quality=quality,
        options=SerenadeOptions(threshold_mode=mode),
    )


def extend_setup(
    tmp_path: Path,
    rows: Sequence[str],
    added: str,
    request: ExtendOneRequest,
    params: QualityParams,
    *,
    factor: float = 1.0,
) -> tuple[Neighbours, list[Hashable], float]:
    pair = neighbours(tmp_path, EXTEND_VIEWS, rows, added)
    mode = request.options.threshold_mode
    assert mode in ("grid", "continuous")
    laws = [
        extension_law(
            data,
            request.collection,
            rules=ExtensionRules(),
            mode=mode,
            params=params,
            epsilon=request.epsilon * factor,
        )
        for data in pair.data
    ]
    return pair, ordered_categories(*laws), exact_loss(*laws)


def run_extend_audit(
    pair: Neighbours,
    request: ExtendOneRequest,
    categories: list[Hashable],
    *,
    samples: int,
    seeds: tuple[int, int],
) -> AuditResult:
    drawn = [
        draw_extensions(store, pair.data[1], request, samples=samples, seed=seed)
        for store, seed in zip(pair.stores, seeds, strict=True)
    ]
    return audit(drawn[0], drawn[1], categories)


#: D: one row in [l1], [l2], [b] with x = 9; D' adds the same but with x = 4.
STEEP_ROWS = ("1,1,1,9.0",)
STEEP_ADDED = "1,1,1,4.0"


def test_extend_one_grid_pass(tmp_path: Path) -> None:
    request = extend_request([START], STEEP, "grid")
    pair, categories, loss = extend_setup(
        tmp_path, STEEP_ROWS, STEEP_ADDED, request, steep_params()
    )
    assert 0.75 < loss < EPSILON
    result = run_extend_audit(pair, request, categories, samples=10_000, seeds=(21, 22))
    assert_audit_passes(result, EPSILON)


def test_extend_one_with_understated_sensitivity_is_flagged(tmp_path: Path) -> None:
    request = extend_request([START], STEEP, "grid")
    pair, categories, broken_loss = extend_setup(
        tmp_path, STEEP_ROWS, STEEP_ADDED, request, steep_params(), factor=4.0
    )
    assert broken_loss > 2.5
    with understated_sensitivity(4.0):
        result = run_extend_audit(pair, request, categories, samples=10_000, seeds=(23, 24))
    assert_audit_flags(result, EPSILON)


@pytest.mark.parametrize("prepared", [True, False], ids=["prepared", "scanned"])
def test_extend_one_continuous_pass(
    tmp_path: Path, prepared: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NoSens, continuous thresholds on x: D = ([l2], x = 6); D' adds ([l1], x = 9). The
    rejection proposals weighed either way (``RejectionPlan``: prefix sums prepared per family,
    or a scan of the rows each; the plan picks by public cost)."""
    monkeypatch.setattr(serenade.RejectionPlan, "prepared", property(lambda _plan: prepared))
    request = extend_request([START], NOSENS, "continuous")
    pair, categories, loss = extend_setup(
        tmp_path, ["0,1,0,6.0"], "1,0,0,9.0", request, NOSENS_PARAMS
    )
    assert 0.5 < loss < EPSILON
    result = run_extend_audit(pair, request, categories, samples=8_000, seeds=(25, 26))
    assert_audit_passes(result, EPSILON)


def test_extend_one_es_pass(tmp_path: Path) -> None:
    """ES: one EM over the candidates of two positions; D' lifts the second position's
    extensions (Serenade Q, grid)."""
    second = Redescription(left=BoolLiteral(attribute="l2"), right=BoolLiteral(attribute="b"))
    request = extend_request([START, second], STEEP, "grid")
    pair, categories, loss = extend_setup(
        tmp_path, ["0,1,1,9.0"], "0,1,1,4.0", request, steep_params()
    )
    assert 0.5 < loss < EPSILON
    result = run_extend_audit(pair, request, categories, samples=8_000, seeds=(27, 28))
    assert_audit_passes(result, EPSILON)


# --------------------------------------------------------------------------------------------
# Range calibration (§0.8) and the coverage factor (§2.1)


@contextmanager
def one_sided_calibration() -> Iterator[None]:
    """BROKEN on purpose: c = ε/Δ_up, as if Q could only grow when a row is added (Δ_down
    forgotten; right for counts, §0.8, wrong for Q)."""
    honest = redescriptions.quality_parameters

    def broken(quality: QualityParameters, n_max: int) -> QualityParams:
        return replace(honest(quality, n_max), delta_down=0.0)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(redescriptions, "quality_parameters", broken)
        yield


@contextmanager
def coverage_term_dropped() -> Iterator[None]:
    """BROKEN on purpose: the coverage factor is in Q but the sensitivities are the paper's
    (no E00 move, i.e. without the s₂/4 term)."""
    honest = redescriptions.quality_parameters

    def broken(quality: QualityParameters, n_max: int) -> QualityParams:
        params = honest(quality, n_max)
        old = one_sided(params.s, params.x0, n_max)
        return replace(params, delta=old.symmetric, delta_up=old.up, delta_down=old.down)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(redescriptions, "quality_parameters", broken)
        yield


def test_initial_pairs_with_one_sided_calibration_are_flagged(tmp_path: Path) -> None:
    """NoSens pairs at c = ε/Δ_up = ε instead of ε/(Δ_up + Δ_down) = ε/1.5: loss 1.32 (of at
    most 1.5), so it takes 10⁵ draws per side to show it above ε."""
    pair, categories, _loss, _broken_loss = pair_setup(tmp_path)
    laws = [
        pairs_law(d, negations=False, mode="grid", params=NOSENS_PARAMS, c=1.0) for d in pair.data
    ]
    assert exact_loss(*laws) > 1.3
    with one_sided_calibration():
        samples = [
            draw_pairs(store, data, NOSENS, "grid", samples=100_000, seed=seed)
            for store, data, seed in zip(pair.stores, pair.data, (31, 32), strict=True)
        ]
    assert_audit_flags(audit(samples[0], samples[1], categories), EPSILON)


#: Q·σ(10(E00 − ½)) with s = 0.3, x0 = 8 on N_max = 16: the E00 move is worth up to
#: σ(0.3·7)·(σ(5) − σ(−5)) = 0.879 = Δ_up, the paper's Δ_up is 0.109 and Δ_down 0.059.
COVERED = QualityParameters(x0=8.0, s=0.3, y0=0.5, s2=10.0)
#: D: fifteen rows in [l1] and [r1] (E00 = 0, so the factor is σ(−5)); D' adds a row in [l2]
#: and [r2] only, outside ([l1], [r1]), whose factor jumps to σ(5).
COVERED_ROWS = ("1,0,1,0",) * 15
COVERED_ADDED = "0,1,0,1"


def covered_setup(tmp_path: Path, params: QualityParams) -> tuple[Neighbours, list[Hashable]]:
    metadata = boolean_views(("l1", "l2"), ("r1", "r2"), 16)
    pair = neighbours(tmp_path, metadata, COVERED_ROWS, COVERED_ADDED)
    laws = [
        pairs_law(d, negations=False, mode="grid", params=params, c=params.coefficient(1.0))
        for d in pair.data
    ]
    return pair, ordered_categories(*laws)


def covered_params(n_max: int = 16) -> QualityParams:
    return redescriptions.quality_parameters(COVERED, n_max)


def test_initial_pairs_with_coverage_pass(tmp_path: Path) -> None:
    params = covered_params()
    assert params.delta_up == pytest.approx(0.879, abs=1e-3)
    pair, categories = covered_setup(tmp_path, params)
    laws = [
        pairs_law(d, negations=False, mode="grid", params=params, c=params.coefficient(1.0))
        for d in pair.data
    ]
    assert 0.55 < exact_loss(*laws) < EPSILON
    samples = [
        draw_pairs(store, data, COVERED, "grid", samples=20_000, seed=seed)
        for store, data, seed in zip(pair.stores, pair.data, (33, 34), strict=True)
    ]
    assert_audit_passes(audit(samples[0], samples[1], categories), EPSILON)


def test_initial_pairs_with_coverage_but_no_e00_term_are_flagged(tmp_path: Path) -> None:
    params = covered_params()
    old = one_sided(params.s, params.x0, 16)
    broken = replace(params, delta=old.symmetric, delta_up=old.up, delta_down=old.down)
    pair, categories = covered_setup(tmp_path, broken)
    laws = [
        pairs_law(d, negations=False, mode="grid", params=broken, c=broken.coefficient(1.0))
        for d in pair.data
    ]
    assert exact_loss(*laws) > 3.5
    with coverage_term_dropped():
        samples = [
            draw_pairs(store, data, COVERED, "grid", samples=20_000, seed=seed)
            for store, data, seed in zip(pair.stores, pair.data, (35, 36), strict=True)
        ]
    assert_audit_flags(audit(samples[0], samples[1], categories), EPSILON)
