"""The Serenade miners ``SerenadeES``, ``SerenadeCS`` and ``NoSens`` (ALGORITHMS.md §2.5; DESIGN.md
"Client miners") against the real application in-process (``create_app`` + ``TestClient`` handed
to ``dpmine.connect``).

* ``plan`` lists the exact calls (ES: initial pairs, K extend rounds, I quality calls; CS: initial
  pairs, then per pair one quality call and τ × (extend, quality); ``x0_fraction`` adds a noisy
  row count) and prices them on the server, charging nothing: ES and the CS upper bound cost ε
  (+ the count's ε).
* ``mine`` refuses a plan that does not fit (nothing charged); ES spends exactly its plan, CS at
  most its plan; ``budget_spent_`` equals the sum of the receipts and the ledger holds exactly
  the receipts' entries. The CS chains follow Algorithm 1, checked against the ledger's releases.
* On a generated two-view dataset with planted structure ([smoker] ⇔ [sick], [sporty] ⇔ high
  score, [region = north] ⇔ young age), a high-ε run finds a redescription of true Jaccard ≥ 0.8.

The server's selections are seeded (test mode); released counts come from OpenDP (unseedable),
so assertions on noisy values use bands with failure probability below 1e-9.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections import Counter
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

import dpmine
from dpmine.amounts import epsilon_sum, epsilon_text
from dpmine.canonical import redescription_key
from dpmine.errors import ParameterError
from dpmine.intervals import intervals_for, quality_intervals
from dpmine.miners import NoSens, NotMinedError, SerenadeCS, SerenadeES
from dpmine.miners.greedy import (
    DrawPrices,
    Preset,
    auto_cs,
    auto_es,
    log_extension_mass,
    log_pair_mass,
)
from dpmine.queries import format_redescription
from dpmine.wire import (
    AnyAttribute,
    BooleanAttribute,
    BoolLiteral,
    CategoricalAttribute,
    ComputeQualityRequest,
    CreateDatasetRequest,
    CsvSource,
    DatasetMetadata,
    ExtendOneRequest,
    InitialPairsRequest,
    LedgerEntryInfo,
    NoisyCountRequest,
    NumericAttribute,
    Redescription,
    SerenadeOptions,
    attributes,
)
from dpmine_server.app import create_app
from dpmine_server.data.loaders import load_store
from dpmine_server.dp.rng import seeded_generator
from dpmine_server.operations.redescriptions import support_cells
from support.inprocess import TestClient, connect, open_client, settings_for

OWNER_KEY = "serenade-miner-owner-key-0123456789"
N_ROWS = 200
N_MAX = 1000
GRANT = 500.0
REGIONS = ["north", "south", "east", "west"]
X0 = 20.0
#: One pico-epsilon per call at most: each call's ε is rounded up to whole 1e-12 units.
PICO = Decimal("1e-12")


def generated_rows() -> list[dict[str, str]]:
    """200 rows with planted structure (seeded): sick ≈ smoker, score ≥ 55 ≈ sporty, age < 38
    ≈ region north; a few missing ages."""
    rng = seeded_generator(2024)
    rows = []
    for index in range(N_ROWS):
        smoker = bool(rng.random() < 0.35)
        sporty = bool(rng.random() < 0.4)
        region = REGIONS[int(rng.integers(0, 4))]
        sick = smoker != bool(rng.random() < 0.05)
        score = rng.uniform(60, 95) if sporty else rng.uniform(5, 50)
        age = rng.uniform(20, 35) if region == "north" else rng.uniform(40, 90)
        rows.append(
            {
                "smoker": "yes" if smoker else "no",
                "region": region,
                "sporty": "1" if sporty else "0",
                "sick": "true" if sick else "false",
                "score": f"{score:.2f}",
                "age": "" if index % 23 == 0 else f"{age:.1f}",
            }
        )
    return rows


def two_view_metadata() -> DatasetMetadata:
    attributes: list[AnyAttribute] = [
        BooleanAttribute(name="smoker", view="left"),
        CategoricalAttribute(name="region", view="left", categories=REGIONS),
        BooleanAttribute(name="sporty", view="left"),
        BooleanAttribute(name="sick", view="right"),
        NumericAttribute(name="score", view="right", lo=0.0, hi=100.0),
        NumericAttribute(name="age", view="right", lo=0.0, hi=100.0),
    ]
    return DatasetMetadata(kind="views", n_max=N_MAX, attributes=attributes)


def write_csv(path: Path, rows: list[dict[str, str]]) -> Path:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


@pytest.fixture
def http(tmp_path: Path) -> Iterator[TestClient]:
    """The application in test mode on a temp SQLite file, with its lifespan running."""
    settings = settings_for(
        tmp_path,
        database_file="miner.sqlite3",
        owner_key=OWNER_KEY,
        secret_key="serenade-miner-tests-secret-0123456789",
        test_seed=4242,
        job_workers=1,
    )
    with open_client(create_app(settings)) as client:
        yield client


@pytest.fixture
def owner(http: TestClient) -> dpmine.Connection:
    return connect(OWNER_KEY, http)


def register(
    owner: dpmine.Connection,
    http: TestClient,
    folder: Path,
    *,
    dataset_id: str,
    analyst: str,
    grant: float,
    metadata: DatasetMetadata | None = None,
    rows: list[dict[str, str]] | None = None,
) -> dpmine.DatasetHandle:
    """Upload the generated rows as ``dataset_id``; ``analyst`` gets ``grant`` on it."""
    path = write_csv(folder / f"{dataset_id}.csv", rows or generated_rows())
    request = CreateDatasetRequest(
        id=dataset_id,
        name="generated two views",
        epsilon_cap=1000.0,
        metadata=metadata or two_view_metadata(),
        source=CsvSource(path=path.name),
    )
    owner.admin.upload_dataset(request, {"path": path})
    key = owner.admin.add_principal(analyst, "analyst").api_key
    owner.admin.grant(dataset_id, analyst, grant)
    return connect(key, http).dataset(dataset_id)


@pytest.fixture
def people(owner: dpmine.Connection, http: TestClient, tmp_path: Path) -> dpmine.DatasetHandle:
    return register(owner, http, tmp_path, dataset_id="people", analyst="ann", grant=GRANT)


def exact_total(plan_calls: list[Any]) -> Decimal:
    return sum((Decimal(call.epsilon_exact) for call in plan_calls), Decimal(0))


def operations(entries: list[LedgerEntryInfo]) -> list[str]:
    return [entry.operation for entry in sorted(entries, key=lambda e: e.id)]


def true_jaccard(red: Redescription, folder: Path) -> float:
    """The exact Jaccard of a redescription on the generated rows (test-side knowledge)."""
    path = write_csv(folder / "truth.csv", generated_rows())
    store, _report = load_store(two_view_metadata(), CsvSource(path=path.name), base_dir=folder)
    e11, e10, e01, _e00 = support_cells(store, red)
    union = e11 + e10 + e01
    return e11 / union if union else 0.0


# --------------------------------------------------------------------------------------------
# plan


def test_es_plan_lists_the_exact_calls_and_charges_nothing(
    people: dpmine.DatasetHandle, owner: dpmine.Connection
) -> None:
    miner = SerenadeES(preset="paper", epsilon=1.0, n_initial=4, rounds=6, x0=X0)
    plan = miner.plan(people)
    ops = [call.operation for call in plan.calls]
    assert (
        ops
        == ["serenade.initial_pairs"] + ["serenade.extend_one"] * 6 + ["red.compute_quality"] * 4
    )
    pairs = InitialPairsRequest.model_validate(plan.calls[0].request)
    assert (pairs.count, pairs.epsilon, pairs.quality.x0, pairs.quality.s) == (4, 0.6, X0, None)
    assert pairs.quality.function == "serenade"
    for call in plan.calls[1:7]:
        extend = ExtendOneRequest.model_validate(call.request)
        assert extend.mode == "es"
        assert len(extend.collection) == 4
        assert extend.epsilon == pytest.approx(0.3 / 6, rel=1e-15)
    for call in plan.calls[7:]:
        quality = ComputeQualityRequest.model_validate(call.request)
        assert (quality.epsilon, quality.mode) == (0.1 / 4, "cells")
    assert Decimal(plan.estimate.total_epsilon_exact) == Decimal(1)
    assert exact_total(plan.estimate.calls) == Decimal(1)
    assert plan.total_epsilon == 1.0
    assert plan.fits
    assert owner.admin.ledger("people") == []
    assert people.budget().grant_spent == 0.0
    with pytest.raises(NotMinedError):
        _ = miner.receipts_
    with pytest.raises(NotMinedError):
        miner.displayed()


def test_cs_plan_is_the_upper_bound(people: dpmine.DatasetHandle) -> None:
    miner = SerenadeCS(
        preset="paper", epsilon=1.0, n_initial=3, tau=2, x0=X0, split=(0.5, 0.3, 0.2)
    )
    plan = miner.plan(people)
    chain = ["red.compute_quality"] + ["serenade.extend_one", "red.compute_quality"] * 2
    assert [call.operation for call in plan.calls] == ["serenade.initial_pairs", *chain * 3]
    assert InitialPairsRequest.model_validate(plan.calls[0].request).epsilon == 0.5
    extends = [c for c in plan.calls if c.operation == "serenade.extend_one"]
    qualities = [c for c in plan.calls if c.operation == "red.compute_quality"]
    for call in extends:
        request = ExtendOneRequest.model_validate(call.request)
        assert request.mode == "cs"
        assert len(request.collection) == 1
        assert request.epsilon == pytest.approx(0.3 / (2 * 3), rel=1e-15)  # ε_ext/(τI)
    for call in qualities:
        # [REC]: ε_qual/((τ+1)I), the τ+1 quality calls of a chain are all counted.
        assert ComputeQualityRequest.model_validate(call.request).epsilon == pytest.approx(
            0.2 / (3 * 3), rel=1e-15
        )
    total = Decimal(plan.estimate.total_epsilon_exact)
    assert total == exact_total(plan.estimate.calls)
    assert Decimal(1) <= total <= Decimal(1) + len(plan.calls) * PICO


def test_x0_fraction_buys_a_noisy_row_count_first(people: dpmine.DatasetHandle) -> None:
    miner = SerenadeES(
        preset="paper", epsilon=2.0, n_initial=2, rounds=3, x0_fraction=0.1, count_epsilon=0.25
    )
    plan = miner.plan(people)
    assert [call.operation for call in plan.calls][:2] == [
        "count.noisy",
        "serenade.initial_pairs",
    ]
    count = NoisyCountRequest.model_validate(plan.calls[0].request)
    assert count.epsilon == 0.25
    assert count.predicate is None
    # The plan is priced with the public x0 = fraction × n_max (costs do not depend on x0).
    pairs = InitialPairsRequest.model_validate(plan.calls[1].request)
    assert pairs.quality.x0 == 0.1 * N_MAX
    total = Decimal(plan.estimate.total_epsilon_exact)
    assert Decimal("2.25") <= total <= Decimal("2.25") + len(plan.calls) * PICO

    cs = SerenadeCS(
        preset="paper", epsilon=1.0, n_initial=2, tau=1, x0_fraction=0.1, count_epsilon=0.5
    )
    assert cs.plan(people).calls[0].operation == "count.noisy"
    cs_total = Decimal(cs.plan(people).estimate.total_epsilon_exact)
    assert Decimal("1.5") <= cs_total <= Decimal("1.5") + 20 * PICO


def test_nosens_plan_uses_the_jaccard_quality(people: dpmine.DatasetHandle) -> None:
    plan = NoSens(preset="paper", epsilon=1.0, n_initial=2, rounds=2, x0=X0).plan(people)
    assert [call.operation for call in plan.calls] == [
        "serenade.initial_pairs",
        "serenade.extend_one",
        "serenade.extend_one",
        "red.compute_quality",
        "red.compute_quality",
    ]
    pairs = InitialPairsRequest.model_validate(plan.calls[0].request)
    extend = ExtendOneRequest.model_validate(plan.calls[1].request)
    assert pairs.quality.function == extend.quality.function == "jaccard"
    assert Decimal(plan.estimate.total_epsilon_exact) == Decimal(1)


def test_options_are_passed_on(people: dpmine.DatasetHandle) -> None:
    options = SerenadeOptions(
        operators=["and"], negations=True, max_literals=2, threshold_mode="grid"
    )
    plan = SerenadeES(
        preset="paper", n_initial=2, rounds=1, x0=X0, steepness=0.05, options=options
    ).plan(people)
    for call in plan.calls[:2]:
        request = call.request
        assert request["options"] == options.model_dump(mode="json")
        assert request["quality"]["s"] == 0.05


# --------------------------------------------------------------------------------------------
# mine


def test_es_mine_spends_exactly_the_plan(
    people: dpmine.DatasetHandle, owner: dpmine.Connection, tmp_path: Path
) -> None:
    miner = SerenadeES(preset="paper", epsilon=40.0, n_initial=4, rounds=8, x0=X0)
    plan = miner.plan(people)
    assert miner.mine(people) is miner
    receipts = miner.receipts_
    # The draws are the plan's; the final collection's distinct redescriptions are measured
    # once each, with the ε_qual/4 = 1 shares of every position holding them.
    draws = len(plan.calls) - 4
    assert [r.operation for r in receipts[:draws]] == [c.operation for c in plan.calls[:draws]]
    assert [r.epsilon_exact for r in receipts[:draws]] == [
        c.epsilon_exact for c in plan.estimate.calls[:draws]
    ]
    checks = receipts[draws:]
    assert {r.operation for r in checks} == {"red.compute_quality"}
    assert len(checks) == len(miner.redescriptions_)
    spent = sum((Decimal(r.epsilon_exact) for r in receipts), Decimal(0))
    assert spent == Decimal(plan.estimate.total_epsilon_exact) == Decimal(40)
    assert miner.budget_spent_ == float(spent) == 40.0
    assert people.budget().grant_spent == 40.0
    ledger = owner.admin.ledger("people")
    assert sorted(entry.id for entry in ledger) == sorted(r.ledger_entry_id for r in receipts)
    assert all(entry.status == "released" for entry in ledger)
    # At most I redescriptions, one per canonical form; the planted structure is found.
    assert 1 <= len(miner.redescriptions_) <= 4
    assert miner.x0_ == X0
    assert set(miner.threshold_modes_) <= {"continuous", "grid"}
    best = max(true_jaccard(r.redescription, tmp_path) for r in miner.redescriptions_)
    assert best >= 0.8, [format_redescription(r.redescription) for r in miner.redescriptions_]
    # The ES collection evolves by the released extend steps, in order.
    releases = [e.release for e in sorted(ledger, key=lambda e: e.id)]
    pairs = releases[0]
    assert pairs is not None
    collection = [Redescription.model_validate(p) for p in pairs["pairs"]]
    for release in releases[1:9]:
        assert release is not None
        collection[release["position"]] = Redescription.model_validate(release["redescription"])
    copies = Counter(redescription_key(red) for red in collection)
    first: dict[tuple[str, str], Redescription] = {}
    for red in collection:
        first.setdefault(redescription_key(red), red)
    assert [r.redescription for r in miner.redescriptions_] == list(first.values())
    for mined in miner.redescriptions_:
        assert mined.epsilon == copies[redescription_key(mined.redescription)] * 1.0


def chains_of(
    entries: list[LedgerEntryInfo], min_jaccard: float, tau: int, count: int
) -> list[list[str]]:
    """Split a CS run's ledger into its ``count`` chains and check Algorithm 1 on the released
    values: a chain starts with a quality call, extends its own current redescription while its
    noisy J ≥ J_min (at most τ times), and measures again only after an extension that changed
    it. The miner advances the independent chains in lockstep: the starts' checks, then per
    step the extensions of every running chain and the checks of those that changed, each in
    chain order."""
    ordered = sorted(entries, key=lambda e: e.id)
    assert ordered[0].operation == "serenade.initial_pairs"
    chains: list[list[str]] = [[] for _ in range(count)]
    current = [ordered[1 + chain].parameters["redescription"] for chain in range(count)]
    jaccard = [0.0] * count
    index = 1

    def measure(chain: int) -> None:
        nonlocal index
        entry = ordered[index]
        assert entry.operation == "red.compute_quality"
        assert entry.parameters["redescription"] == current[chain]
        assert entry.release is not None
        jaccard[chain] = float(entry.release["statistics"]["jaccard"])
        chains[chain].append(entry.operation)
        index += 1

    for chain in range(count):
        measure(chain)
    while True:
        running = [
            chain
            for chain in range(count)
            if jaccard[chain] >= min_jaccard and chains[chain].count("serenade.extend_one") < tau
        ]
        if not running:
            break
        changed = []
        for chain in running:
            entry = ordered[index]
            assert entry.operation == "serenade.extend_one"
            assert entry.parameters["collection"] == [current[chain]]
            assert entry.release is not None
            chains[chain].append(entry.operation)
            index += 1
            if entry.release["changed"]:
                current[chain] = entry.release["redescription"]
                changed.append(chain)
        for chain in changed:
            measure(chain)
    assert index == len(ordered), "every ledger entry belongs to a chain"
    return chains


def test_cs_mine_spends_at_most_the_plan(
    people: dpmine.DatasetHandle, owner: dpmine.Connection
) -> None:
    miner = SerenadeCS(preset="paper", epsilon=30.0, n_initial=4, tau=3, x0=X0, min_jaccard=0.3)
    plan = miner.plan(people)
    miner.mine(people)
    receipts = miner.receipts_
    spent = sum((Decimal(r.epsilon_exact) for r in receipts), Decimal(0))
    assert spent <= Decimal(plan.estimate.total_epsilon_exact)
    assert miner.budget_spent_ == float(spent)
    assert people.budget().grant_spent == pytest.approx(float(spent), abs=1e-9)
    ledger = owner.admin.ledger("people")
    assert sorted(e.id for e in ledger) == sorted(r.ledger_entry_id for r in receipts)
    chains = chains_of(ledger, 0.3, 3, 4)
    assert len(chains) == 4
    assert len(miner.redescriptions_) <= 4
    assert all(found.noisy_jaccard >= 0.3 for found in miner.redescriptions_)
    # How each chain ended is what the ledger shows: its extension steps, in order.
    assert [stop.steps for stop in miner.chain_stops_] == [
        chain.count("serenade.extend_one") for chain in chains
    ]
    early = sum(stop.early for stop in miner.chain_stops_)
    if early:
        assert f"{early} of 4 chains stopped before their τ = 3 steps" in miner.stop_reason_
    else:
        assert miner.stop_reason_.startswith("Every chain ran all τ = 3 steps.")


def test_x0_fraction_mine(people: dpmine.DatasetHandle) -> None:
    miner = SerenadeES(
        preset="paper",
        epsilon=2.0,
        n_initial=2,
        rounds=2,
        x0_fraction=0.1,
        count_epsilon=1.0,
        split=(0.4, 0.4, 0.2),
    )
    miner.mine(people)
    assert miner.receipts_[0].operation == "count.noisy"
    # Noisy count at ε = 1 (discrete Laplace of scale 1): |error| < 25 w.p. > 1 − 1e-10.
    assert abs(miner.x0_ - 0.1 * N_ROWS) < 2.5
    assert miner.budget_spent_ == pytest.approx(3.0, abs=1e-9)


def test_nosens_mine(people: dpmine.DatasetHandle, owner: dpmine.Connection) -> None:
    miner = NoSens(preset="paper", epsilon=5.0, n_initial=3, rounds=3, x0=X0)
    miner.mine(people)
    assert len(miner.redescriptions_) == 3
    for entry in owner.admin.ledger("people"):
        if entry.operation.startswith("serenade."):
            assert entry.parameters["quality"]["function"] == "jaccard"


def test_a_plan_that_does_not_fit_is_refused_and_nothing_is_charged(
    owner: dpmine.Connection, http: TestClient, tmp_path: Path
) -> None:
    tight = register(owner, http, tmp_path, dataset_id="tight", analyst="bea", grant=1.0)
    for miner in (
        SerenadeES(
            preset="paper", epsilon=1.0, n_initial=2, rounds=2, x0_fraction=0.1, count_epsilon=0.05
        ),
        SerenadeCS(preset="paper", epsilon=1.5, n_initial=2, tau=2, x0=X0),
    ):
        assert not miner.plan(tight).fits
        with pytest.raises(dpmine.BudgetExhaustedError, match="nothing was spent"):
            miner.mine(tight)
        assert not hasattr(miner, "redescriptions_")
        with pytest.raises(NotMinedError):
            _ = miner.receipts_
    assert owner.admin.ledger("tight") == []
    assert tight.budget().grant_spent == 0.0
    # Exactly the grant fits, and ES spends all of it.
    fitting = SerenadeES(preset="paper", epsilon=1.0, n_initial=2, rounds=2, x0=X0)
    fitting.mine(tight)
    assert fitting.budget_spent_ == 1.0
    assert tight.budget().remaining_epsilon == 0.0


# --------------------------------------------------------------------------------------------
# results


def test_displayed_and_exports(people: dpmine.DatasetHandle, tmp_path: Path) -> None:
    miner = SerenadeES(preset="paper", epsilon=20.0, n_initial=5, rounds=5, x0=X0)
    miner.mine(people)
    found = miner.redescriptions_
    assert miner.displayed(min_jaccard=0.0) == found
    assert miner.displayed(min_jaccard=1.01) == []
    assert miner.displayed() == [r for r in found if r.noisy_jaccard >= 0.3]
    middle = sorted(r.noisy_jaccard for r in found)[2]
    assert all(r.noisy_jaccard >= middle for r in miner.displayed(min_jaccard=middle))

    # Exports hold every result, by the lower end of J's joint interval, with the test's verdict.
    ranked = miner.all_results_
    assert sorted(map(id, ranked)) == sorted(map(id, found))
    lows = [r.joint_intervals.jaccard.low for r in ranked]
    assert lows == sorted(lows, reverse=True)
    passed = miner.results_
    json_path = tmp_path / "serenade.json"
    miner.to_json(json_path)
    payload = json.loads(json_path.read_text())
    assert [r["left"] for r in payload["redescriptions"]] == [r.left for r in ranked]
    assert [r["right"] for r in payload["redescriptions"]] == [r.right for r in ranked]
    for item, mined in zip(payload["redescriptions"], ranked, strict=True):
        assert Redescription.model_validate(item["query"]) == mined.redescription
        assert item["noisy_statistics"] == mined.statistics.model_dump(mode="json")
        assert item["significant"] == any(mined is r for r in passed)
        assert item["failed_checks"] == list(miner.significance().failed_checks(mined))
        assert item["significant"] == (not item["failed_checks"])
        joint_p = mined.joint_intervals.p_value
        assert joint_p is not None
        assert item["joint_intervals"]["p_value"] == joint_p.as_list()
    assert payload["significance"]["passed"] == len(passed)
    assert payload["significance"]["examined"] == len(found)  # ES: one check per result
    assert [r["ledger_entry_id"] for r in payload["receipts"]] == [
        r.ledger_entry_id for r in miner.receipts_
    ]

    csv_path = tmp_path / "serenade.csv"
    miner.to_csv(csv_path)
    rows = list(csv.reader(io.StringIO(csv_path.read_text())))
    assert rows[0][:7] == [
        "left",
        "right",
        "noisy_support",
        "noisy_union",
        "noisy_jaccard",
        "noisy_excess",
        "p_value",
    ]
    assert rows[0][-2:] == ["significant", "failed_checks"]
    assert len(rows) == len(found) + 1
    for row, mined in zip(rows[1:], ranked, strict=True):
        assert row[:2] == [mined.left, mined.right]
        assert int(row[2]) == mined.statistics.support
        assert int(row[3]) == mined.statistics.union
        assert float(row[4]) == pytest.approx(mined.noisy_jaccard, rel=1e-5)
        assert mined.statistics.p_value is not None
        assert float(row[6]) == pytest.approx(mined.statistics.p_value, rel=1e-5)
        assert row[-2] == ("true" if any(mined is r for r in passed) else "false")
        assert row[-1] == ";".join(miner.significance().failed_checks(mined))


def test_exports_before_mining_are_refused(tmp_path: Path) -> None:
    miner = SerenadeCS(x0=X0)
    with pytest.raises(NotMinedError):
        miner.to_json(tmp_path / "x.json")
    with pytest.raises(NotMinedError):
        miner.to_csv(tmp_path / "x.csv")
    assert not (tmp_path / "x.json").exists()


# --------------------------------------------------------------------------------------------
# parameter validation


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({"x0": X0, "split": (0.5, 0.5, 0.5)}, "split"),
        ({"x0": X0, "split": (0.0, 0.5, 0.5)}, "split"),
        ({"x0": X0, "split": (1.2, -0.1, -0.1)}, "split"),
        ({}, "exactly one of x0"),
        ({"x0": X0, "x0_fraction": 0.1}, "exactly one of x0"),
        ({"x0_fraction": 0.0}, "x0_fraction"),
        ({"x0_fraction": 1.0}, "x0_fraction"),
        ({"x0": X0, "n_initial": 0}, "n_initial"),
    ],
)
def test_invalid_parameters_are_refused_at_construction(
    parameters: dict[str, Any], message: str
) -> None:
    """Issue #22: refused where they are written, before any dataset or call exists."""
    # Under "auto" no x0 at all is fine (x0_fraction = 0.1 is chosen): only "paper" refuses it.
    presets: list[Preset] = ["paper"] if not parameters else ["paper", "auto"]
    for cls in (SerenadeES, SerenadeCS, NoSens):
        for preset in presets:
            with pytest.raises(ParameterError, match=message):
                cls(preset=preset, **parameters)


@pytest.mark.parametrize(
    ("cls", "parameters"),
    [(SerenadeES, {"rounds": 0}), (SerenadeCS, {"tau": 0}), (NoSens, {"rounds": 0})],
    ids=["es-rounds", "cs-tau", "nosens-rounds"],
)
def test_zero_rounds_are_a_parameter_error(cls: Any, parameters: dict[str, Any]) -> None:
    """K ≥ 1 and τ ≥ 1 (§2.5): a zero must be refused as a parameter error, not crash in the
    budget split."""
    with pytest.raises(ParameterError, match=r"rounds|tau"):
        cls(x0=X0, **parameters)


def test_server_side_validation_is_refused_and_nothing_charged(
    people: dpmine.DatasetHandle, owner: dpmine.Connection
) -> None:
    with pytest.raises(dpmine.InvalidRequestError, match="n_max"):
        SerenadeES(x0=float(N_MAX), n_initial=2, rounds=1).plan(people)
    with pytest.raises(dpmine.InvalidRequestError, match="n_max"):
        SerenadeES(x0=float(N_MAX) + 1, n_initial=2, rounds=1).mine(people)
    assert owner.admin.ledger("people") == []


def test_continuous_thresholds_far_above_the_rejection_limit_are_enumerated(
    people: dpmine.DatasetHandle,
) -> None:
    """ε_init/I = 60 per draw: continuous families are enumerated exactly, thresholds stay
    continuous (never on the grid, never data values)."""
    options = SerenadeOptions(threshold_mode="continuous")
    miner = SerenadeES(epsilon=100.0, n_initial=1, rounds=1, x0=X0, options=options)
    miner.mine(people)
    assert set(miner.threshold_modes_) == {"continuous"}


def test_a_numeric_only_left_view_can_be_planned_and_mined(
    owner: dpmine.Connection, http: TestClient, tmp_path: Path
) -> None:
    """§2.3 [REC]: numeric left literals go on the public grid, so the server serves a left view
    without Boolean or categorical attributes; the miners must be able to price such a run."""
    metadata = DatasetMetadata(
        kind="views",
        n_max=N_MAX,
        attributes=[
            NumericAttribute(name="age", view="left", lo=0.0, hi=100.0),
            BooleanAttribute(name="sick", view="right"),
            NumericAttribute(name="score", view="right", lo=0.0, hi=100.0),
        ],
    )
    rows = [{k: row[k] for k in ("age", "sick", "score")} for row in generated_rows()]
    numeric = register(
        owner,
        http,
        tmp_path,
        dataset_id="numeric-left",
        analyst="cyd",
        grant=10.0,
        metadata=metadata,
        rows=rows,
    )
    miner = SerenadeES(epsilon=1.0, n_initial=2, rounds=2, x0=X0)
    assert miner.plan(numeric).fits
    miner.mine(numeric)
    assert len(miner.redescriptions_) == 2
    # The auto preset rounds each call down to whole nano-ε: never above ε, a few nano-ε below.
    assert 1.0 - 1e-6 <= miner.budget_spent_ <= 1.0


# --------------------------------------------------------------------------------------------
# presets and the signal report (issue #12)


def prices(budget_scale: float = 1.0) -> DrawPrices:
    return DrawPrices(
        c_per_epsilon=50.0 * budget_scale, log_pairs=math.log(18), log_extend_one=3.0, check=0.2
    )


def test_auto_es_rule_buys_signal_first_then_results() -> None:
    p = prices()
    per_result = [p.pair + p.check + p.extend(i) for i in range(1, 21)]
    tiny = auto_es(0.01, p, max_rounds=100)
    assert tiny[:2] == (1, 1)  # below one result's price: one result, one round, flagged later
    mid_i, mid_k, mid_split = auto_es(2.0, p, max_rounds=100)
    assert mid_i == max(i for i in range(1, 21) if i * per_result[i - 1] <= 2.0)
    assert mid_k == mid_i  # one extension round per result
    assert sum(mid_split) == pytest.approx(1.0)
    # the split is proportional to the prices: each draw gets at least its price
    assert mid_split[0] * 2.0 / mid_i >= p.pair * (1 - 1e-12)
    assert mid_split[1] * 2.0 / mid_k >= p.extend(mid_i) * (1 - 1e-12)
    assert mid_split[2] * 2.0 / mid_i >= p.check * (1 - 1e-12)
    big_i, big_k, big_split = auto_es(1000.0, p, max_rounds=120)
    assert (big_i, big_k) == (20, 20)
    assert big_split == pytest.approx(mid_split, rel=0.5)  # the shares follow the prices
    assert auto_es(1000.0, p, max_rounds=6)[1] == 6
    counts = [auto_es(b, p, max_rounds=100)[0] for b in (0.5, 1, 2, 4, 8, 16)]
    assert counts == sorted(counts)
    assert auto_es(2.0, p, max_rounds=100, n_initial=3, rounds=7)[:2] == (3, 7)


def test_auto_cs_rule_grows_tau_only_once_twenty_chains_fit() -> None:
    p = prices()
    chain = p.pair + p.extend(1) + 2 * p.check
    i, tau, split = auto_cs(3.0, p, max_tau=4)
    assert i == min(20, int(3.0 / chain))
    # the spare ε that buys no further chain lengthens the chains while they fit
    assert tau == max(
        t for t in range(1, 5) if i * (p.pair + t * p.extend(1) + (t + 1) * p.check) <= 3.0
    )
    assert sum(split) == pytest.approx(1.0)
    i, tau, _ = auto_cs(1000.0, p, max_tau=4)
    assert (i, tau) == (20, 4)
    assert auto_cs(1.0, p, max_tau=4, n_initial=2, tau=3)[:2] == (2, 3)


def test_candidate_masses_come_from_the_schema() -> None:
    schema = two_view_metadata()
    options = SerenadeOptions()
    # left: smoker, 4 regions, sporty = 6 units; right: sick, score, age = 3 units
    assert log_pair_mass(schema, options) == pytest.approx(math.log(18))
    assert log_extension_mass(schema, options, 1) == pytest.approx(math.log(1 + 2 * 9))
    assert log_extension_mass(schema, options, 4) == pytest.approx(math.log(4 * 19))
    negated = SerenadeOptions(negations=True, operators=["and"])
    assert log_pair_mass(schema, negated) == pytest.approx(math.log(12 * 6))


@pytest.mark.parametrize("miner_class", [SerenadeES, SerenadeCS])
def test_auto_plan_gives_every_draw_signal(
    people: dpmine.DatasetHandle,
    owner: dpmine.Connection,
    miner_class: type[SerenadeES] | type[SerenadeCS],
) -> None:
    plan = miner_class(epsilon=3.0).plan(people)
    settings = plan.settings
    assert settings is not None
    assert (settings.preset, settings.calibration) == ("auto", "range")
    assert settings.count_epsilon == pytest.approx(0.05)
    ops = [call.operation for call in plan.calls]
    assert ops[:2] == ["count.noisy", "serenade.initial_pairs"]
    pairs = InitialPairsRequest.model_validate(plan.calls[1].request)
    assert pairs.count == settings.n_initial
    assert (pairs.quality.x0, pairs.quality.y0) == (0.1 * N_MAX, 0.1 * N_MAX)
    assert pairs.quality.calibration == "range"
    # ε is the whole run, the row count included; calls are rounded down to whole nano-ε.
    total = Decimal(plan.estimate.total_epsilon_exact)
    assert Decimal("2.99999") <= total <= Decimal(3)
    assert len(plan.signals) == 2
    for signal in plan.signals:
        assert signal.signal >= 2.0 * signal.log_candidates * (1 - 1e-6), plan.report()
        assert not signal.uniform_like
    assert plan.signals[1].signal >= 4.0 * plan.signals[1].log_candidates * (1 - 1e-6)
    assert plan.check_noise is not None
    assert plan.check_noise.scale <= 0.1 * N_MAX / 20 * (1 + 1e-6)
    assert plan.warnings == []
    assert "serenade.initial_pairs" in plan.report()
    assert "UNIFORM-LIKE" not in plan.report()
    assert owner.admin.ledger("people") == []


def test_paper_plan_at_small_epsilon_is_flagged_uniform_like(people: dpmine.DatasetHandle) -> None:
    plan = SerenadeES(preset="paper", epsilon=1.0, x0=X0).plan(people)
    settings = plan.settings
    assert settings is not None
    assert (settings.n_initial, settings.steps, settings.split) == (20, 80, (0.6, 0.3, 0.1))
    assert settings.calibration == "symmetric"
    assert InitialPairsRequest.model_validate(plan.calls[0].request).quality.y0 is None
    assert all(signal.uniform_like for signal in plan.signals)
    assert plan.check_noise is not None
    assert plan.check_noise.noisy  # scale 200 per cell against x0 = 20
    assert len(plan.warnings) == 3
    assert plan.report().count("UNIFORM-LIKE") == 2


def test_auto_count_must_leave_budget(people: dpmine.DatasetHandle) -> None:
    with pytest.raises(ValueError, match="count_epsilon"):
        SerenadeES(epsilon=0.1, count_epsilon=0.2).plan(people)


def test_results_carry_intervals_and_the_lower_end_filter(
    people: dpmine.DatasetHandle, tmp_path: Path
) -> None:
    miner = SerenadeES(epsilon=20.0)
    miner.mine(people)
    settings = miner.settings_
    assert settings.preset == "auto"
    assert miner.receipts_[0].operation == "count.noisy"
    # The count costs 0.05 (scale 20): |n̂ − n| < 400 with probability 1 − 2e-9.
    assert abs(miner.x0_ - 0.1 * N_ROWS) < 40
    assert miner.y0_ == miner.x0_
    assert miner.budget_spent_ <= 20.0
    found = miner.redescriptions_
    # One result per distinct redescription of the final collection (a repeat is measured once,
    # with the shares of every position holding it): ε_qual is spent in full.
    assert 1 <= len(found) <= settings.n_initial
    assert len({redescription_key(r.redescription) for r in found}) == len(found)
    checks = [r for r in miner.receipts_ if r.operation == "red.compute_quality"]
    assert sum(r.epsilon for r in checks) == pytest.approx(settings.shares[2], abs=1e-8)
    for mined, receipt in zip(found, checks, strict=True):
        assert mined.epsilon == pytest.approx(receipt.epsilon)
        assert mined.intervals == intervals_for(mined.cells, epsilon=mined.epsilon, mode="cells")
        assert mined.noise_scale == pytest.approx(1.0 / mined.epsilon)
        assert mined.jaccard_interval.low <= mined.jaccard_interval.high
        assert mined.support_interval == mined.intervals.support
        assert mined.p_value_interval == mined.intervals.p_value
        assert mined.uninformative == (mined.jaccard_interval.width > 0.8)
        assert mined.describe_jaccard().startswith(f"{mined.noisy_jaccard:.2f} [")
    assert max(true_jaccard(r.redescription, tmp_path) for r in found) >= 0.8
    lower = miner.displayed(min_jaccard=0.5, by="lower")
    assert lower == [r for r in found if r.jaccard_interval.low >= 0.5]
    assert all(r in miner.displayed(min_jaccard=0.5) or r.noisy_jaccard < 0.5 for r in lower)
    with pytest.raises(ValueError, match="by must be"):
        miner.displayed(by="upper")  # type: ignore[arg-type]

    json_path = tmp_path / "auto.json"
    miner.to_json(json_path)
    items = json.loads(json_path.read_text())["redescriptions"]
    for item, mined in zip(items, miner.all_results_, strict=True):
        assert item["intervals"]["jaccard"] == mined.jaccard_interval.as_list()
        assert item["intervals"]["level"] == 0.9
        assert item["noise_scale"] == pytest.approx(1.0 / mined.epsilon)
        assert item["uninformative"] == mined.uninformative
    csv_path = tmp_path / "auto.csv"
    miner.to_csv(csv_path)
    rows = list(csv.DictReader(io.StringIO(csv_path.read_text())))
    for row, mined in zip(rows, miner.all_results_, strict=True):
        assert float(row["jaccard_low"]) == pytest.approx(mined.jaccard_interval.low, rel=1e-5)
        assert float(row["jaccard_high"]) == pytest.approx(mined.jaccard_interval.high, rel=1e-5)
        assert float(row["support_low"]) == mined.support_interval.low
        assert row["uninformative"] == ("true" if mined.uninformative else "false")


def test_quality_answers_have_intervals(people: dpmine.DatasetHandle, tmp_path: Path) -> None:
    """At ε = 50 per call (scale 0.02) the cells are exact with probability 1 − 4e-22, so the
    intervals shrink to the true values."""
    response = people.quality("[smoker]", "[sick]", epsilon=50.0)
    got = quality_intervals(response)
    truth = true_jaccard(
        Redescription(left=BoolLiteral(attribute="smoker"), right=BoolLiteral(attribute="sick")),
        tmp_path,
    )
    assert got.jaccard.contains(truth)
    assert got.jaccard.width == 0.0
    assert got.scale == pytest.approx(0.02)


# --------------------------------------------------------------------------------------------
# the noise-aware significance test (issue #21)


@pytest.mark.parametrize("miner_class", [SerenadeES, SerenadeCS])
def test_default_results_pass_the_noise_aware_test(
    people: dpmine.DatasetHandle, miner_class: type[SerenadeES | SerenadeCS]
) -> None:
    """The planted [smoker] ⇔ [sick] at ε = 20: results_ are exactly the results whose joint
    intervals pass (p ≤ α/m, excess > 0, J ≥ min_jaccard at their unfavourable ends), m counts
    the quality checks made, and each check's box misses with probability α/M, M the checks
    the run could make."""
    miner = miner_class(epsilon=20.0)
    miner.mine(people)
    settings = miner.settings_
    checks = [r for r in miner.receipts_ if r.operation == "red.compute_quality"]
    summary = miner.significance_
    assert (summary.alpha, summary.examined, summary.min_jaccard) == (0.01, len(checks), 0.3)
    possible = (
        len(checks) if miner_class is SerenadeES else (settings.steps + 1) * settings.n_initial
    )
    everything = miner.all_results_
    assert sorted(map(id, everything)) == sorted(map(id, miner.redescriptions_))
    for mined in everything:
        assert mined.joint_miss == pytest.approx(0.01 / possible)
        assert mined.joint_intervals.level == pytest.approx(1 - 0.01 / possible)
    passing = [
        r
        for r in everything
        if r.joint_intervals.p_value is not None
        and r.joint_intervals.excess is not None
        and r.joint_intervals.p_value.high <= 0.01 / len(checks)
        and r.joint_intervals.excess.low > 0
        and r.joint_intervals.jaccard.low >= 0.3
    ]
    assert miner.results_ == passing
    assert summary.passed == len(passing) >= 1, [r.joint_intervals for r in everything]
    assert summary.total == len(everything)
    assert miner.nothing_passed() is None
    # Another J threshold: the same test, post-processing only.
    assert miner.significance(min_jaccard=0.9).passed == [
        r for r in passing if r.joint_intervals.jaccard.low >= 0.9
    ]


def test_paper_quality_mode_cannot_pass_and_says_why(people: dpmine.DatasetHandle) -> None:
    """The "paper" quality mode releases |I| and |U| only: no p-value or excess can be
    bounded, so no result passes, and the hint names the "cells" mode."""
    miner = SerenadeES(epsilon=20.0, quality_mode="paper")
    miner.mine(people)
    assert miner.redescriptions_
    assert miner.results_ == []
    assert all(r.joint_intervals.p_value is None for r in miner.all_results_)
    message = miner.nothing_passed()
    assert message is not None
    spent = epsilon_text(epsilon_sum(r.epsilon_exact for r in miner.receipts_))
    checks = sum(r.operation == "red.compute_quality" for r in miner.receipts_)
    assert message.startswith(f"No result passes the noise-aware test (p ≤ α/m = 0.01/{checks} ")
    assert f"ε spent: {spent}. For more signal: quality_mode='cells'" in message
    assert "a larger ε" in message
    assert "fewer attributes" in message
    assert f"all_results_ (CLI: --all) lists the {len(miner.redescriptions_)} result" in message


# --------------------------------------------------------------------------------------------
# Allowed columns (issue #21) and why a CS run stopped


def test_candidate_masses_count_only_the_allowed_columns() -> None:
    schema = two_view_metadata()
    options = SerenadeOptions(columns=["smoker", "sick", "score"])
    # left: smoker = 1 unit; right: sick, score = 2 units
    assert log_pair_mass(schema, options) == pytest.approx(math.log(2))
    assert log_extension_mass(schema, options, 1) == pytest.approx(math.log(1 + 2 * 3))


def test_columns_and_exclude_restrict_every_draw(
    people: dpmine.DatasetHandle, owner: dpmine.Connection
) -> None:
    """columns minus exclude is sent as options.columns of every draw; the plan's signals count
    the candidates over them; no released query uses another attribute."""
    allowed = ["region", "sporty", "score", "age"]
    miner = SerenadeCS(
        epsilon=20.0, n_initial=3, tau=2, columns=[*allowed, "smoker"], exclude=["smoker"]
    )
    plan = miner.plan(people)
    draws = [call for call in plan.calls if call.operation.startswith("serenade.")]
    assert draws
    assert all(call.request["options"]["columns"] == allowed for call in draws)
    restricted = SerenadeOptions(columns=allowed)
    assert plan.signals[0].log_candidates == pytest.approx(log_pair_mass(people.schema, restricted))
    unrestricted = SerenadeCS(epsilon=20.0, n_initial=3, tau=2).plan(people)
    assert plan.signals[0].log_candidates < unrestricted.signals[0].log_candidates
    miner.mine(people)
    assert miner.columns_ == allowed
    used: set[str] = set()
    for entry in owner.admin.ledger("people"):
        release = entry.release or {}
        reds = release.get("pairs") or [
            release.get("redescription") or entry.parameters.get("redescription")
        ]
        for red in reds:
            if red is not None:
                parsed = Redescription.model_validate(red)
                used |= attributes(parsed.left) | attributes(parsed.right)
    assert used
    assert used <= set(allowed)


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({"columns": ["smoker", "weight"]}, "unknown column(s) ['weight']"),
        ({"exclude": ["sick", "score", "age"]}, "leave the right view no attribute"),
        (
            {"columns": ["smoker", "sick"], "options": SerenadeOptions(columns=["smoker", "sick"])},
            "give the allowed columns once",
        ),
    ],
)
def test_bad_columns_are_refused_before_any_call(
    people: dpmine.DatasetHandle,
    owner: dpmine.Connection,
    parameters: dict[str, Any],
    message: str,
) -> None:
    for cls in (SerenadeES, SerenadeCS):
        miner = cls(epsilon=1.0, **parameters)
        with pytest.raises(dpmine.ParameterError, match=re.escape(message)):
            miner.plan(people)
        with pytest.raises(dpmine.ParameterError, match=re.escape(message)):
            miner.mine(people)
    assert owner.admin.ledger("people") == []


def test_a_cs_run_that_stops_early_says_why(people: dpmine.DatasetHandle) -> None:
    """Left query on smoker only, right on score/age (independent of smoking): every true
    Jaccard is about |smoker| / |union| ≤ 0.35, so at this ε (each check ε_qual/((τ+1)·I) =
    4/9, per-cell noise scale 2.25) every chain's initial pair is below min_jaccard = 0.6 (a
    miss needs ≥ 70 counts of noise, probability < 1e-12) and stops before extending; the run
    spends less than planned and says so."""
    miner = SerenadeCS(
        preset="paper",
        epsilon=40.0,
        n_initial=3,
        tau=2,
        x0=X0,
        min_jaccard=0.6,
        columns=["smoker", "score", "age"],
    )
    plan = miner.plan(people)
    miner.mine(people)
    assert [(stop.steps, stop.early) for stop in miner.chain_stops_] == [(0, True)] * 3
    reason = miner.stop_reason_
    assert reason.startswith(
        "3 of 3 chains stopped before their τ = 2 steps because their noisy Jaccard fell below "
        "min_jaccard = 0.6 (chain 1: initial pair at noisy J "
    ), reason
    assert miner.budget_spent_ < plan.total_epsilon
    used = epsilon_text(epsilon_sum(r.epsilon_exact for r in miner.receipts_))
    planned = epsilon_text(plan.estimate.total_epsilon_exact)
    assert reason.endswith(f" ε spent: {used} of the {planned} planned."), reason
    assert miner.redescriptions_ == []
    message = miner.nothing_passed()
    assert message is not None
    assert message.endswith(f"How the run ended: {reason}")


def test_es_says_it_ran_its_whole_plan(people: dpmine.DatasetHandle) -> None:
    miner = SerenadeES(preset="paper", epsilon=4.0, n_initial=2, rounds=3, x0=X0)
    miner.mine(people)
    assert miner.stop_reason_.startswith(
        "SerenadeES ran its whole plan: 2 initial pairs, all K = 3 extension rounds ("
    )
