"""The ``TopKItemsets`` miner and ``association_rules`` (ALGORITHMS.md §4; DESIGN.md "Client
miners"), against the real application in-process (``create_app`` + ``TestClient`` handed to
``dpmine.connect``).

* ``plan`` prices the exact calls on the server and charges nothing; ``mine`` refuses a plan that
  does not fit (nothing charged), otherwise runs it and keeps the receipts.
* Mining at a large ε with a negligible ρ returns the true top itemsets of a generated basket file
  (the server's generator is seeded in test mode; released counts come from OpenDP and are checked
  within bands whose failure probability is below 1e-12).
* Exports and association rules are post-processing of the released values only.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest

import dpmine
from dpmine.miners import (
    AssociationRule,
    ItemsetPlan,
    MinedItemset,
    NotMinedError,
    TopKItemsets,
    association_rules,
)
from dpmine.miners.itemsets import (
    confirmation_margin,
    confirmation_note,
    count_intervals,
    intervals_note,
    order_note,
)
from dpmine.wire import CreateDatasetRequest, DatasetMetadata, FimiSource, TopKItemsetsRequest
from dpmine_server.app import create_app
from support.datasets import Row, register_table, table_rows
from support.inprocess import TestClient, connect, open_client, settings_for

Method = Literal["em", "laplace"]
OWNER_KEY = "itemset-miner-owner-key-0123456789"
ITEMS = ["bread", "milk", "eggs", "beer", "nappies", "jam"]
#: Baskets and their multiplicities (185 rows). Pairs: bread&milk 100, bread&eggs 40,
#: milk&eggs 40, beer&nappies 30, eggs&jam 10; singles: milk 105, bread 100, eggs 50, beer 30,
#: nappies 30, jam 10; the triple bread&milk&eggs 40.
BASKETS: list[tuple[str, int]] = [
    ("bread milk", 60),
    ("bread milk eggs", 40),
    ("beer nappies", 30),
    ("eggs jam", 10),
    ("milk", 5),
]
N_ROWS = sum(times for _basket, times in BASKETS)
GRANT = 500.0
#: Makes the truncated block of §4.1 (selected with probability about ρ) negligible.
TINY_RHO = 1e-12
#: |discrete Laplace(K/ε_p)| stays below this band with probability above 1 − 1e-12 for the
#: scales used here (K/ε_p ≤ 0.1: P(|Z| ≥ 3) ≈ 2e^{-30}).
COUNT_BAND = 3
#: The noisy row count at ε = 1 (scale 1): P(|Z| ≥ 40) < 1e-17.
ROW_BAND = 40


@pytest.fixture
def http(tmp_path: Path) -> Iterator[TestClient]:
    """The application in test mode on a temp SQLite file, with its lifespan running."""
    settings = settings_for(
        tmp_path,
        database_file="miner.sqlite3",
        owner_key=OWNER_KEY,
        secret_key="miner-tests-secret-0123456789abcdef",
        test_seed=31337,
        job_workers=1,
    )
    with open_client(create_app(settings)) as client:
        yield client


@pytest.fixture
def owner_connection(http: TestClient) -> dpmine.Connection:
    return connect(OWNER_KEY, http)


def _register_baskets(
    owner: dpmine.Connection, folder: Path, dataset_id: str, analyst: str, grant: float
) -> None:
    path = folder / f"{dataset_id}.dat"
    path.write_text(
        "".join(f"{basket}\n" for basket, times in BASKETS for _ in range(times)), encoding="utf-8"
    )
    request = CreateDatasetRequest(
        id=dataset_id,
        name="baskets",
        epsilon_cap=1000.0,
        metadata=DatasetMetadata(kind="transactions", n_max=10_000, items=ITEMS),
        source=FimiSource(path=path.name),
    )
    owner.admin.upload_dataset(request, {"path": path})
    owner.admin.grant(dataset_id, analyst, grant)


@pytest.fixture
def baskets(
    owner_connection: dpmine.Connection, http: TestClient, tmp_path: Path
) -> dpmine.DatasetHandle:
    """The basket file as dataset ``baskets``; analyst ``ann`` holds GRANT on it."""
    key = owner_connection.admin.add_principal("ann", "analyst").api_key
    _register_baskets(owner_connection, tmp_path, "baskets", "ann", GRANT)
    analyst = connect(key, http)
    return analyst.dataset("baskets")


@pytest.fixture
def small_grant(
    owner_connection: dpmine.Connection, http: TestClient, tmp_path: Path
) -> dpmine.DatasetHandle:
    """The basket file as dataset ``tight``; analyst ``bea`` holds only ε = 1 on it."""
    key = owner_connection.admin.add_principal("bea", "analyst").api_key
    _register_baskets(owner_connection, tmp_path, "tight", "bea", 1.0)
    return connect(key, http).dataset("tight")


# --------------------------------------------------------------------------------------------
# plan


def test_plan_prices_the_calls_and_charges_nothing(
    baskets: dpmine.DatasetHandle, owner_connection: dpmine.Connection
) -> None:
    miner = TopKItemsets(k=3, length=(2, 3), epsilon=2.0, method="laplace", frequency_epsilon=0.5)
    plan = miner.plan(baskets)
    assert [call.operation for call in plan.calls] == ["fim.topk_laplace", "count.noisy"]
    request = TopKItemsetsRequest.model_validate(plan.calls[0].request)
    assert (request.k, request.lengths, request.epsilon) == (3, [2, 3], 2.0)
    assert (request.rho, request.with_counts, request.count_share) == (0.1, True, 0.5)
    assert [call.epsilon_exact for call in plan.estimate.calls] == ["2", "0.5"]
    assert plan.estimate.total_epsilon_exact == "2.5"
    assert plan.total_epsilon == 2.5
    assert plan.fits
    assert owner_connection.admin.ledger("baskets") == []
    assert baskets.budget().grant_spent == 0.0
    with pytest.raises(NotMinedError):
        _ = miner.receipts_
    with pytest.raises(NotMinedError):
        miner.rules()


def test_plan_of_a_request_the_dataset_cannot_serve_is_refused(
    baskets: dpmine.DatasetHandle,
) -> None:
    with pytest.raises(dpmine.InvalidRequestError, match="exceeds the 15"):
        TopKItemsets(k=16, length=2).plan(baskets)  # C(6, 2) = 15 pairs
    with pytest.raises(ValueError, match="max_length"):  # refused by the wire model already
        TopKItemsets(k=1, length=(2, 7)).plan(baskets)
    unknown: dict[str, Any] = {"method": "fpgrowth"}
    with pytest.raises(ValueError, match="method must be 'em' or 'laplace'"):
        TopKItemsets(**unknown).plan(baskets)


# --------------------------------------------------------------------------------------------
# mine


@pytest.mark.parametrize("method", ["em", "laplace"])
def test_mine_returns_the_top_itemsets(
    baskets: dpmine.DatasetHandle, owner_connection: dpmine.Connection, method: Method
) -> None:
    miner = TopKItemsets(k=3, length=2, epsilon=100.0, method=method, threshold_quantile=TINY_RHO)
    assert miner.mine(baskets) is miner
    itemsets = miner.itemsets_
    assert [itemset.rank for itemset in itemsets] == [1, 2, 3]
    assert itemsets[0].items == ("bread", "milk")
    assert {itemsets[1].items, itemsets[2].items} == {("bread", "eggs"), ("milk", "eggs")}
    for itemset, truth in zip(itemsets, (100, 40, 40), strict=True):
        assert itemset.noisy_count is not None
        assert abs(itemset.noisy_count - truth) < COUNT_BAND
        assert itemset.noisy_frequency is None
        # Scale 3/50: the count is exact but with probability about 1e-7, and so is the
        # interval's claim.
        assert itemset.count_low is not None
        assert itemset.count_high is not None
        assert itemset.count_low <= truth <= itemset.count_high
    assert miner.noisy_row_count_ is None
    (receipt,) = miner.receipts_
    assert receipt.operation == f"fim.topk_{method}"
    assert receipt.epsilon_exact == "100"
    assert miner.budget_spent_ == 100.0
    assert baskets.budget().grant_spent == 100.0
    (entry,) = owner_connection.admin.ledger("baskets")
    assert entry.id == receipt.ledger_entry_id
    assert entry.status == "released"
    assert entry.parameters["k"] == 3


def test_mine_without_counts_and_with_a_length_range(baskets: dpmine.DatasetHandle) -> None:
    miner = TopKItemsets(
        k=4, length=(1, 3), epsilon=100.0, with_counts=False, threshold_quantile=TINY_RHO
    )
    miner.mine(baskets)
    # milk 105, then bread and bread&milk (100), then eggs (50)
    items = [itemset.items for itemset in miner.itemsets_]
    assert items[0] == ("milk",)
    assert set(items[1:3]) == {("bread",), ("bread", "milk")}
    assert items[3] == ("eggs",)
    assert all(i.noisy_count is None and i.noisy_frequency is None for i in miner.itemsets_)
    assert miner.rules() == []  # no released counts, no rules


def test_mine_with_frequencies_and_rules(baskets: dpmine.DatasetHandle) -> None:
    miner = TopKItemsets(
        k=6, length=(1, 2), epsilon=120.0, threshold_quantile=TINY_RHO, frequency_epsilon=1.0
    )
    miner.mine(baskets)
    assert [r.operation for r in miner.receipts_] == ["fim.topk_em", "count.noisy"]
    assert miner.budget_spent_ == 121.0
    assert baskets.budget().grant_spent == 121.0
    n_hat = miner.noisy_row_count_
    assert n_hat is not None
    assert abs(n_hat - N_ROWS) < ROW_BAND
    # milk 105, bread 100, bread&milk 100, eggs 50, then the two pairs of count 40
    names = [itemset.items for itemset in miner.itemsets_]
    assert names[0] == ("milk",)
    assert set(names[1:3]) == {("bread",), ("bread", "milk")}
    assert names[3] == ("eggs",)
    assert set(names[4:]) == {("bread", "eggs"), ("milk", "eggs")}  # catalog order
    for itemset in miner.itemsets_:
        assert itemset.noisy_count is not None
        assert itemset.noisy_frequency == max(itemset.noisy_count, 0) / n_hat
    rules = miner.rules(min_confidence=0.0)
    assert rules == association_rules(miner.itemsets_, min_confidence=0.0, n_rows=n_hat)
    by_sides = {(rule.antecedent, rule.consequent): rule for rule in rules}
    bread_milk = by_sides[(("bread",), ("milk",))]
    assert abs(bread_milk.confidence - 1.0) < 0.1  # 100/100 with noise of scale 0.1
    assert bread_milk.lift is not None
    assert abs(bread_milk.lift - n_hat / 105) < 0.05


def test_a_plan_that_does_not_fit_is_refused_and_nothing_is_charged(
    small_grant: dpmine.DatasetHandle, owner_connection: dpmine.Connection
) -> None:
    miner = TopKItemsets(k=2, length=2, epsilon=0.8, frequency_epsilon=0.5)
    assert not miner.plan(small_grant).fits
    before = small_grant.budget()
    with pytest.raises(dpmine.BudgetExhaustedError, match="nothing was spent"):
        miner.mine(small_grant)
    assert owner_connection.admin.ledger("tight") == []
    assert small_grant.budget() == before
    assert not hasattr(miner, "itemsets_")
    with pytest.raises(NotMinedError):
        _ = miner.receipts_
    # The same run without the row count fits, and spends exactly its ε.
    fitting = TopKItemsets(k=2, length=2, epsilon=0.8)
    fitting.mine(small_grant)
    assert [entry.epsilon_exact for entry in owner_connection.admin.ledger("tight")] == ["0.8"]
    assert small_grant.budget().grant_spent == 0.8


# --------------------------------------------------------------------------------------------
# exports


def test_exports(baskets: dpmine.DatasetHandle, tmp_path: Path) -> None:
    miner = TopKItemsets(
        k=3, length=2, epsilon=100.0, threshold_quantile=TINY_RHO, frequency_epsilon=1.0
    )
    miner.mine(baskets)
    json_path = tmp_path / "itemsets.json"
    miner.to_json(json_path)
    payload = json.loads(json_path.read_text())
    assert payload["itemsets"] == [
        {**asdict(itemset), "items": list(itemset.items)} for itemset in miner.itemsets_
    ]
    assert [r["ledger_entry_id"] for r in payload["receipts"]] == [
        r.ledger_entry_id for r in miner.receipts_
    ]
    assert [r["epsilon_exact"] for r in payload["receipts"]] == ["100", "1"]

    csv_path = tmp_path / "itemsets.csv"
    miner.to_csv(csv_path)
    rows = list(csv.reader(io.StringIO(csv_path.read_text())))
    assert rows[0] == [
        "rank",
        "items",
        "noisy_count",
        "noisy_frequency",
        "query",
        "count_low",
        "count_high",
        "count_floor",
        "confirmed",
    ]
    assert rows[1][:2] == ["1", "bread & milk"]
    assert rows[1][4] == "[bread] & [milk]"
    for row, itemset in zip(rows[1:], miner.itemsets_, strict=True):
        assert row[1] == " & ".join(itemset.items)
        assert row[4] == itemset.query
        assert int(row[2]) == itemset.noisy_count
        assert itemset.noisy_frequency is not None
        assert float(row[3]) == pytest.approx(itemset.noisy_frequency, rel=1e-5)
        assert [int(row[5]), int(row[6])] == [itemset.count_low, itemset.count_high]
        assert [int(row[7]), row[8]] == [itemset.count_floor, "True"]
    assert payload["count_intervals"]["level"] == 0.9
    assert payload["order"].startswith("rank = order of the private selection")

    bare = TopKItemsets(k=2, length=2, epsilon=50.0, with_counts=False, threshold_quantile=TINY_RHO)
    bare.mine(baskets)
    bare.to_csv(csv_path)
    rows = list(csv.reader(io.StringIO(csv_path.read_text())))
    assert [row[2:4] + row[5:] for row in rows[1:]] == [[""] * 6, [""] * 6]


def test_exports_before_mining_are_refused(tmp_path: Path) -> None:
    miner = TopKItemsets()
    with pytest.raises(NotMinedError):
        miner.to_json(tmp_path / "x.json")
    with pytest.raises(NotMinedError):
        miner.to_csv(tmp_path / "x.csv")
    assert not (tmp_path / "x.json").exists()


# --------------------------------------------------------------------------------------------
# association rules (pure post-processing)


def _mined(items: str, count: int | None, rank: int = 1) -> MinedItemset:
    return MinedItemset(
        rank=rank, items=tuple(items.split()), noisy_count=count, noisy_frequency=None
    )


HAND_MADE = [
    _mined("bread", 100),
    _mined("milk", 80),
    _mined("bread milk", 60),
    _mined("eggs", None),  # released without a count
    _mined("bread eggs", 30),
    _mined("jam milk", 20),  # {jam} never released
]


def test_rules_confidence_and_lift() -> None:
    rules = association_rules(HAND_MADE, min_confidence=0.0, n_rows=200)
    assert rules == [
        AssociationRule(("milk",), ("bread",), 60, 0.75, 0.75 / (100 / 200)),
        AssociationRule(("bread",), ("milk",), 60, 0.6, 0.6 / (80 / 200)),
        AssociationRule(("bread",), ("eggs",), 30, 0.3, None),  # eggs has no released count
        AssociationRule(("milk",), ("jam",), 20, 0.25, None),  # jam was never released
    ]
    # No rule from an unreleased (or count-less) antecedent: eggs → bread, jam → milk.
    assert all(rule.antecedent not in {("eggs",), ("jam",)} for rule in rules)


def test_rules_min_confidence_and_missing_row_count() -> None:
    rules = association_rules(HAND_MADE, min_confidence=0.5)
    assert [(r.antecedent, r.consequent) for r in rules] == [
        (("milk",), ("bread",)),
        (("bread",), ("milk",)),
    ]
    assert all(rule.lift is None for rule in rules)  # lift needs a noisy row count
    assert association_rules(HAND_MADE, min_confidence=0.8) == []


def test_rules_clamp_noisy_counts() -> None:
    noisy = [
        _mined("a", -3),  # clamped to 0: never an antecedent
        _mined("b", 10),
        _mined("a b", 12),  # above its subset's count: confidence capped at 1
        _mined("c", 5),
        _mined("b c", -1),  # clamped to 0 support
    ]
    rules = association_rules(noisy, min_confidence=0.0, n_rows=50)
    by_sides = {(r.antecedent, r.consequent): r for r in rules}
    assert set(by_sides) == {(("b",), ("a",)), (("b",), ("c",)), (("c",), ("b",))}
    assert by_sides[(("b",), ("a",))].confidence == 1.0
    assert by_sides[(("b",), ("a",))].lift is None  # consequent a has count 0
    assert by_sides[(("b",), ("c",))].confidence == 0.0
    assert by_sides[(("b",), ("c",))].lift == 0.0
    assert by_sides[(("c",), ("b",))].noisy_support == 0


def test_rules_from_triples() -> None:
    itemsets = [
        _mined("a b c", 20),
        _mined("a b", 40),
        _mined("c", 50),
        _mined("a", 80),
    ]
    rules = association_rules(itemsets, min_confidence=0.0, n_rows=100)
    sides = [(r.antecedent, r.consequent) for r in rules]
    assert (("a", "b"), ("c",)) in sides
    assert (("c",), ("a", "b")) in sides
    assert (("a",), ("b", "c")) in sides
    assert (("a",), ("b",)) in sides
    triple = {(r.antecedent, r.consequent): r for r in rules}
    assert triple[(("a", "b"), ("c",))].confidence == 0.5
    assert triple[(("a", "b"), ("c",))].lift == pytest.approx(0.5 / 0.5)
    assert triple[(("c",), ("a", "b"))].lift == pytest.approx(0.4 / 0.4)
    assert triple[(("a",), ("b", "c"))].lift is None  # {b, c} was not released
    assert [r.confidence for r in rules] == sorted((r.confidence for r in rules), reverse=True)


# --------------------------------------------------------------------------------------------
# Displays that say what they show (issue #21)


def _tail(t: int, scale: float) -> float:
    """P(|Z| > t) for discrete Laplace Z of ``scale``: 2q^(t+1)/(1+q), q = e^(−1/scale)."""
    q = math.exp(-1.0 / scale)
    return 2 * q ** (t + 1) / (1 + q)


@pytest.mark.parametrize(("scale", "k", "level"), [(3.0, 3, 0.9), (20.0, 10, 0.9), (0.5, 1, 0.95)])
def test_count_intervals_use_the_exact_simultaneous_quantile(
    scale: float, k: int, level: float
) -> None:
    """t is the smallest integer with P(|Z| ≤ t)^K ≥ level: all K true counts are inside
    together with probability ≥ level (independent noises), and t − 1 would fall short."""
    half, intervals = count_intervals([1000] * k, scale=scale, level=level)
    assert (1 - _tail(half, scale)) ** k >= level
    assert half == 0 or (1 - _tail(half - 1, scale)) ** k < level
    assert intervals == [(1000 - half, 1000 + half)] * k
    # Clamped at 0: no true count is negative.
    pair, clamped = count_intervals([-3, 2], scale=scale, level=level)
    assert clamped == [(0, max(pair - 3, 0)), (max(2 - pair, 0), 2 + pair)]


def test_count_intervals_cover_at_the_stated_level() -> None:
    """Simulated releases c + Z (Z a difference of two geometric variables, the discrete
    Laplace law): the K intervals hold their counts together at least ``level`` of the time
    (t = 15, exact joint coverage 0.9012; 20,000 runs keep the estimate within ±0.007 at
    3σ)."""
    scale, k, level, runs = 4.0, 5, 0.9, 20_000
    rng = np.random.default_rng(2104)
    success = -math.expm1(-1.0 / scale)
    truth = np.array([30, 12, 7, 3, 0])
    noise = rng.geometric(success, (runs, k)) - rng.geometric(success, (runs, k))
    covered = 0
    for released in truth + noise:
        _half, intervals = count_intervals(released.tolist(), scale=scale, level=level)
        covered += all(low <= c <= high for c, (low, high) in zip(truth, intervals, strict=True))
    assert covered / runs >= level - 0.007


def test_the_notes_say_what_the_rank_and_the_intervals_mean() -> None:
    assert order_note("em", 0.7) == (
        "rank = order of the private selection (the top K truncated counts plus Gumbel noise, "
        "ε_s = 0.7), not of the noisy counts: those carry separate noise, so a count may exceed "
        "the count of a better rank"
    )
    assert "Laplace noise" in order_note("laplace", 0.7)
    assert intervals_note(0.9, 10, 14.3, 40) == (
        "count interval: the 10 true counts all lie in their intervals together with "
        "probability ≥ 90% (noisy count ± 40, clamped at 0; each count has discrete Laplace "
        "noise of scale 14.3)"
    )


@pytest.fixture
def table(
    owner_connection: dpmine.Connection, http: TestClient, tmp_path: Path
) -> dpmine.DatasetHandle:
    """support.datasets' generated table (numeric age and score, Boolean smoker, categorical
    region) as dataset ``table``; analyst ``cal`` holds GRANT on it."""
    key = owner_connection.admin.add_principal("cal", "analyst").api_key
    register_table(owner_connection, tmp_path, dataset_id="table", epsilon_cap=1000.0)
    owner_connection.admin.grant("table", "cal", GRANT)
    return connect(key, http).dataset("table")


def _exact(predicate: Callable[[Row], bool]) -> int:
    return sum(1 for row in table_rows() if predicate(row))


def test_numeric_attributes_are_items_through_their_public_bins(
    table: dpmine.DatasetHandle,
) -> None:
    """age on [0, 100] in 4 bins: smoker (80 rows), then age in [25, 50) (67) and [50, 75)
    (66) lead the single items; each display holds exactly the counted rows, and each count
    interval holds its exact count."""
    miner = TopKItemsets(k=3, length=1, epsilon=200.0, threshold_quantile=TINY_RHO)
    request = TopKItemsetsRequest.model_validate(miner.plan(table).calls[0].request)
    assert (request.numeric_bins, request.columns) == (4, None)
    miner.mine(table)
    shown = [(itemset.items, itemset.query) for itemset in miner.itemsets_]
    assert shown == [
        (("smoker",), "[smoker]"),
        (("age=[25.0, 50.0)",), "[25.0 <= age] & ![50.0 <= age]"),
        (("age=[50.0, 75.0)",), "[50.0 <= age] & ![75.0 <= age]"),
    ]
    truths = [
        _exact(lambda row: row["smoker"] == "yes"),
        _exact(lambda row: 25 <= float(row["age"]) < 50),
        _exact(lambda row: 50 <= float(row["age"]) < 75),
    ]
    assert truths == [80, 67, 66]
    for itemset, truth in zip(miner.itemsets_, truths, strict=True):
        assert itemset.count_low is not None
        assert itemset.count_high is not None
        assert itemset.count_low <= truth <= itemset.count_high  # scale 0.03: fails ~1e-14
    assert miner.count_noise_scale_ == pytest.approx(3 / 100)
    without = TopKItemsets(
        k=3, length=1, epsilon=200.0, threshold_quantile=TINY_RHO, numeric_bins=None
    )
    assert (
        TopKItemsetsRequest.model_validate(without.plan(table).calls[0].request).numeric_bins
        is None
    )


def test_the_interval_width_is_the_public_quantile_of_the_released_scale(
    table: dpmine.DatasetHandle,
) -> None:
    miner = TopKItemsets(k=3, length=1, epsilon=2.0, columns=["smoker", "region"])
    miner.mine(table)
    scale = miner.count_noise_scale_
    assert scale is not None
    assert 3.0 <= scale < 3.0 * (1 + 1e-9)  # K/ε_p, rounded up by the server
    half = miner.count_half_width_
    assert half == 10  # (1 − 2q^11/(1+q))^3 ≥ 0.9 > (1 − 2q^10/(1+q))^3, q = e^(−1/3)
    for itemset in miner.itemsets_:
        assert itemset.noisy_count is not None
        assert (itemset.count_low, itemset.count_high) == (
            max(itemset.noisy_count - half, 0),
            max(itemset.noisy_count + half, 0),
        )
        assert itemset.items[0] == "smoker" or itemset.items[0].startswith("region=")
    assert miner.notes()[2].startswith("count interval: the 3 true counts all lie")


def test_columns_and_exclude_are_sent_and_checked_before_anything_is_spent(
    table: dpmine.DatasetHandle, baskets: dpmine.DatasetHandle
) -> None:
    only = TopKItemsets(k=2, length=1, exclude=["age", "score"])
    request = TopKItemsetsRequest.model_validate(only.plan(table).calls[0].request)
    assert request.columns == ["smoker", "region"]
    assert request.numeric_bins is None  # no numeric attribute left
    before = table.budget()
    with pytest.raises(dpmine.ParameterError, match=r"unknown column\(s\) \['income'\]"):
        TopKItemsets(k=2, length=1, columns=["age", "income"]).mine(table)
    with pytest.raises(dpmine.ParameterError, match="transaction data"):
        TopKItemsets(k=2, length=1, columns=["milk"]).plan(baskets)
    assert table.budget() == before


# --------------------------------------------------------------------------------------------
# length="auto" (issue #21)

#: A catalog whose 3-itemsets the server refuses at the default K and ε but whose pairs it
#: serves: 300 items, rows of up to 300 of them (C(300, 3) ≈ 4.5M triples, dense rows).
WIDE_ITEMS = [f"i{index}" for index in range(300)]


def _register_wide(owner: dpmine.Connection, folder: Path, analyst: str) -> None:
    path = folder / "wide.dat"
    rows = [" ".join(WIDE_ITEMS[start : start + 40]) for start in range(0, 260, 20)] * 3
    path.write_text("".join(f"{row}\n" for row in rows), encoding="utf-8")
    request = CreateDatasetRequest(
        id="wide",
        name="wide baskets",
        epsilon_cap=1000.0,
        metadata=DatasetMetadata(
            kind="transactions", n_max=10_000, items=WIDE_ITEMS, max_row_width=300
        ),
        source=FimiSource(path=path.name),
    )
    owner.admin.upload_dataset(request, {"path": path})
    owner.admin.grant("wide", analyst, GRANT)


def test_auto_length_is_the_longest_the_server_serves_and_says_why(
    owner_connection: dpmine.Connection, http: TestClient, tmp_path: Path
) -> None:
    """On a catalog whose triples are refused (decided from public values), the default miner
    mines pairs, charges only the selection and names the refusal; a given length=3 is refused
    with the server's reason, before anything is charged."""
    key = owner_connection.admin.add_principal("wes", "analyst").api_key
    _register_wide(owner_connection, tmp_path, "wes")
    wide = connect(key, http).dataset("wide")
    with pytest.raises(dpmine.InvalidRequestError, match="too many to count one by one"):
        TopKItemsets(length=3).plan(wide)
    assert wide.budget().remaining_epsilon == GRANT
    miner = TopKItemsets(k=5, epsilon=1.4, threshold_quantile=TINY_RHO)
    assert miner.length == "auto"
    plan = miner.plan(wide)
    assert miner.length_ == (2, 2)
    assert json.loads(json.dumps(plan.calls[0].request))["max_length"] == 2
    miner.mine(wide)
    assert all(len(itemset.items) == 2 for itemset in miner.itemsets_)
    assert [r.epsilon_exact for r in miner.receipts_] == ["1.4"]
    note = miner.notes()[-1]
    assert note.startswith("length auto: 2-itemsets, the longest this server serves")
    assert "3-itemsets: the 4455100 itemsets of 3..3 items are too many" in note
    assert miner.summary()["length"] == [2, 2]
    assert miner.summary()["length_note"] == note


def test_auto_length_keeps_triples_where_they_are_served(baskets: dpmine.DatasetHandle) -> None:
    miner = TopKItemsets(k=1, epsilon=100.0, threshold_quantile=TINY_RHO).mine(baskets)
    assert miner.length_ == (3, 3)
    assert miner.itemsets_[0].items == ("bread", "milk", "eggs")
    assert miner.notes()[-1] == (
        "length auto: 3-itemsets, the longest this server serves at this K and ε"
    )


def test_auto_length_raises_the_shortest_lengths_error_when_nothing_is_served(
    baskets: dpmine.DatasetHandle,
) -> None:
    """K above every length's universe: the error is the 1-itemsets' one, which names the
    fix, and nothing is charged."""
    with pytest.raises(dpmine.InvalidRequestError, match="exceeds the 6"):
        TopKItemsets(k=40).mine(baskets)
    assert baskets.budget().remaining_epsilon == GRANT


@pytest.mark.parametrize("length", [0, (3, 2), "longest", True, (1, 2.5)])
def test_bad_lengths_are_refused_at_construction(length: object) -> None:
    with pytest.raises(dpmine.ParameterError, match="length must be 'auto', a whole number"):
        TopKItemsets(length=length)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# The confirmation test: what the default output shows holds after the noise (issue #21)


def _gaussian_upper_tail(t: int, sigma: float) -> float:
    """P(Z > t) for Z discrete Gaussian of σ, by summing its pmf (normalised over ±60σ)."""
    support = np.arange(-math.ceil(60 * sigma), math.ceil(60 * sigma) + 1)
    weights = np.exp(-(support.astype(float) ** 2) / (2 * sigma**2))
    return float(weights[support > t].sum() / weights.sum())


@pytest.mark.parametrize(
    ("scale", "k", "alpha", "kind"),
    [
        (3.0, 3, 0.01, "laplace"),
        (20.0, 100, 0.01, "laplace"),
        (0.5, 1, 0.05, "laplace"),
        (4.0, 10, 0.01, "discrete_gaussian"),
        (30.0, 50, 0.01, "discrete_gaussian"),
    ],
)
def test_the_confirmation_margin_is_the_one_sided_joint_quantile(
    scale: float, k: int, alpha: float, kind: Literal["laplace", "discrete_gaussian"]
) -> None:
    """t keeps P(some of K noises > t) = 1 − (1 − P(Z > t))^K at or below α. For Laplace t is
    the smallest such integer (P(Z > t) = q^(t+1)/(1+q) exactly); for the Gaussian t is the
    two-sided half-width at twice the miss, an upper bound on the tail, so within one of the
    pmf's own quantile."""
    t = confirmation_margin(k, scale=scale, alpha=alpha, kind=kind)

    def upper(value: int) -> float:
        if kind == "laplace":
            return _tail(value, scale) / 2
        return _gaussian_upper_tail(value, scale)

    assert 1 - (1 - upper(t)) ** k <= alpha
    if kind == "laplace":
        assert t == 0 or 1 - (1 - upper(t - 1)) ** k > alpha
    else:
        assert t <= 1 or 1 - (1 - upper(t - 2)) ** k > alpha


@pytest.mark.parametrize("alpha", [0.0, 0.5, 1.2])
def test_the_confirmation_margin_refuses_a_level_it_cannot_state(alpha: float) -> None:
    with pytest.raises(ValueError, match="alpha must be in"):
        confirmation_margin(5, scale=2.0, alpha=alpha)


def test_confirmed_picks_hold_at_the_stated_rate_and_the_two_sided_floor_does_not() -> None:
    """Simulated releases of K = 8 picks, most with true count 0 (tail picks) and the rest
    large: a run errs when a pick with a true count below ``min_count`` = 1 is confirmed. The
    test keeps the rate at or below α = 0.01 (exact bound 1 − (1 − P(Z > t))^8; 20,000 runs,
    +0.003 at 3σ). Two broken floors must exceed it: the noisy count itself confirms a tail
    pick in nearly every run, and the 90 % interval's lower end in about 4 % of them (7 tail
    picks, each past the two-sided t with probability ≤ 0.0066)."""
    scale, alpha, runs = 6.0, 0.01, 20_000
    truth = np.array([0, 0, 0, 0, 0, 120, 300, 0])
    k = truth.size
    rng = np.random.default_rng(7213)
    success = -math.expm1(-1.0 / scale)
    noise = rng.geometric(success, (runs, k)) - rng.geometric(success, (runs, k))
    released = truth + noise
    tail = truth < 1
    margin = confirmation_margin(k, scale=scale, alpha=alpha)
    wrong = ((released - margin >= 1) & tail).any(axis=1).mean()
    assert wrong <= alpha + 0.003
    assert (released[:, ~tail] - margin >= 1).all()  # the large counts are always confirmed
    half, _ = count_intervals([0] * k, scale=scale, level=0.9)
    two_sided = ((released - half >= 1) & tail).any(axis=1).mean()
    assert two_sided > alpha + 0.015
    assert ((released >= 1) & tail).any(axis=1).mean() > 0.9


def test_the_confirmation_note_says_what_is_shown() -> None:
    assert confirmation_note(shown=3, total=10, min_count=1, alpha=0.01, margin=42) == (
        "shown: the 3 of 10 picks confirmed to have ≥ 1 row (noisy count − 42 ≥ 1; all shown "
        "hold together with probability ≥ 99%); the other 7 may be tail itemsets that won a "
        "pick by noise: all_itemsets_ (CLI: --all) lists them"
    )
    five = confirmation_note(shown=2, total=2, min_count=5, alpha=0.05, margin=3)
    assert five == (
        "shown: the 2 of 2 picks confirmed to have ≥ 5 rows (noisy count − 3 ≥ 5; all shown hold "
        "together with probability ≥ 95%)"
    )
    assert confirmation_note(shown=0, total=10, min_count=1, alpha=0.01, margin=124) == (
        "shown: none of the 10 picks is confirmed to have ≥ 1 row (noisy count − 124 ≥ 1 "
        "needed); they may be tail itemsets that won a pick by noise: all_itemsets_ (CLI: "
        "--all) lists them"
    )
    assert confirmation_note(shown=0, total=1, min_count=1, alpha=0.01, margin=7).startswith(
        "shown: none of the 1 pick is confirmed to have ≥ 1 row"
    )
    assert confirmation_note(shown=4, total=4, min_count=1, alpha=0.01, margin=None) == (
        "no counts were released, so none of the 4 picks is confirmed: they are the "
        "selection's output only (release counts to confirm them)"
    )


#: The basket file's 15 pairs: 5 occur (bread&milk 100, bread&eggs 40, milk&eggs 40,
#: beer&nappies 30, eggs&jam 10), 10 never do.
TRUE_PAIRS = {
    ("bread", "milk"): 100,
    ("bread", "eggs"): 40,
    ("eggs", "milk"): 40,
    ("beer", "nappies"): 30,
    ("eggs", "jam"): 10,
}


def test_the_default_output_holds_only_picks_the_counts_confirm(
    baskets: dpmine.DatasetHandle, tmp_path: Path
) -> None:
    """K = 12 pairs of a table where only 5 pairs occur: at least 7 picks are tail itemsets of
    true count 0. ``itemsets_`` keeps the confirmed picks, all of which occur, ``all_itemsets_``
    all 12 in selection order; the files hold every pick with its floor and verdict; rules use
    the confirmed picks only. The counts' noise is OpenDP's and not seeded, so the run sets
    α = 1e-12 (the module's bound on a failing band): at the default α = 0.01 a tail pick is
    confirmed in up to 1 % of runs, as the test above measures."""
    alpha = 1e-12
    miner = TopKItemsets(k=12, length=2, epsilon=60.0, threshold_quantile=TINY_RHO, alpha=alpha)
    miner.mine(baskets)
    picks = miner.all_itemsets_
    assert [itemset.rank for itemset in picks] == list(range(1, 13))
    margin = miner.confirmation_margin_
    assert margin == confirmation_margin(12, scale=12 / 30.0, alpha=alpha)
    for itemset in picks:
        assert itemset.noisy_count is not None
        assert itemset.count_floor == itemset.noisy_count - margin
        assert itemset.confirmed is (itemset.count_floor >= 1)
    shown = miner.itemsets_
    assert shown == [itemset for itemset in picks if itemset.confirmed]
    assert all(tuple(sorted(itemset.items)) in TRUE_PAIRS for itemset in shown)
    assert len(shown) >= 3  # the three pairs of 40 rows or more clear any floor at this scale
    assert sum(tuple(sorted(i.items)) not in TRUE_PAIRS for i in picks) >= 7
    assert miner.notes()[1].startswith(f"shown: the {len(shown)} of 12 picks confirmed")
    assert "with probability ≥ 99.9999999999%)" in miner.notes()[1]
    assert miner.nothing_confirmed() is None
    assert miner.rules(min_confidence=0.0) == association_rules(shown, min_confidence=0.0)
    miner.to_csv(tmp_path / "picks.csv")
    rows = list(csv.DictReader(io.StringIO((tmp_path / "picks.csv").read_text())))
    assert [row["confirmed"] for row in rows] == [str(i.confirmed) for i in picks]
    miner.to_json(tmp_path / "picks.json")
    payload = json.loads((tmp_path / "picks.json").read_text())
    assert [entry["confirmed"] for entry in payload["itemsets"]] == [i.confirmed for i in picks]
    assert payload["confirmation"]["shown"] == len(shown)
    assert payload["confirmation"]["picks"] == 12


def test_when_no_pick_is_confirmed_the_miner_says_what_was_spent_and_what_to_change(
    baskets: dpmine.DatasetHandle,
) -> None:
    miner = TopKItemsets(
        k=2, length=1, epsilon=50.0, threshold_quantile=TINY_RHO, min_count=N_ROWS + 1
    )
    miner.mine(baskets)
    assert miner.itemsets_ == []
    assert [itemset.confirmed for itemset in miner.all_itemsets_] == [False, False]
    assert miner.nothing_confirmed() == (
        f"No pick is confirmed to have ≥ {N_ROWS + 1} rows. ε spent: 50. For more signal: a "
        "smaller k (the selection's noise grows with K), a larger budget or count_share, a "
        "shorter length, or fewer columns. all_itemsets_ (CLI: --all) lists the 2 picks."
    )
    without_counts = TopKItemsets(k=2, length=1, epsilon=50.0, with_counts=False)
    without_counts.mine(baskets)
    assert len(without_counts.itemsets_) == 2
    assert without_counts.confirmation_margin_ is None
    assert without_counts.notes()[1].startswith("no counts were released")


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({"min_count": 0}, "min_count must be a whole number of rows, at least 1, got 0"),
        ({"min_count": 2.5}, "min_count must be a whole number of rows, at least 1, got 2.5"),
        ({"alpha": 0.5}, r"alpha must be in \(0, 0.5\), got 0.5"),
    ],
)
def test_bad_confirmation_parameters_are_refused_before_anything_is_spent(
    baskets: dpmine.DatasetHandle, parameters: dict[str, Any], message: str
) -> None:
    with pytest.raises(dpmine.ParameterError, match=message):
        TopKItemsets(k=2, length=1, epsilon=1.0, **parameters).mine(baskets)
    assert baskets.budget().grant_spent == 0


def test_the_plan_says_which_noisy_count_a_shown_pick_needs(
    baskets: dpmine.DatasetHandle,
) -> None:
    """From public values only (K, ε_p, the unit, n_max = 10,000): the margin of the planned
    release's count noise (the one a run then gets), the smallest noisy count shown, no
    warning while that fits the table; a warning when it cannot (tiny ε) or when no counts are
    bought. Plans are free."""
    plan = TopKItemsets(k=4, length=2, epsilon=2.0).plan(baskets)
    assert isinstance(plan, ItemsetPlan)
    found = plan.confirmation
    assert found is not None
    assert (found.kind, found.scale, found.n_max) == ("laplace", 4.0, 10_000)  # K/ε_p, ε_p = 1
    assert found.margin == confirmation_margin(4, scale=4.0)
    assert found.smallest_shown == found.margin + 1
    assert plan.warnings == []
    assert f"a pick is shown when its noisy count reaches {found.smallest_shown}" in plan.report()
    mined = TopKItemsets(k=4, length=2, epsilon=2.0, threshold_quantile=TINY_RHO).mine(baskets)
    assert mined.count_noise_scale_ == pytest.approx(found.scale, rel=1e-9)
    assert mined.confirmation_margin_ == found.margin
    spent = baskets.budget().grant_spent
    hopeless = TopKItemsets(k=10, length=2, epsilon=0.002).plan(baskets)
    assert hopeless.confirmation is not None
    assert hopeless.confirmation.smallest_shown > 10_000
    (warning,) = hopeless.warnings
    assert warning.startswith(
        f"no pick can be shown: a pick needs a noisy count of at least "
        f"{hopeless.confirmation.smallest_shown}, above the table's n_max of 10000 rows"
    )
    assert f"warning: {warning}" in hopeless.report()
    bare = TopKItemsets(k=4, length=2, epsilon=2.0, with_counts=False).plan(baskets)
    assert bare.confirmation is None
    assert bare.warnings[0].startswith("no counts are released, so no pick can be confirmed")
    assert baskets.budget().grant_spent == spent == 2.0  # only the run was charged
