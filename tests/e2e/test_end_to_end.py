"""End to end: the real client over real HTTP against a live server, on SQLite and PostgreSQL
(DESIGN.md "Testing", "The budget ledger", "Errors").

Noisy counts are compared with the exact counts of the bundled Mushroom data. At epsilon = 1 the
discrete Laplace noise has scale 1 and P(|noise| >= 40) = 2 e^-40 / (1 + e^-1) < 1e-17 per
released count (scale 2 and a bound of 80 for the paper mode), so the tolerance bands never fail
by chance while a wrong predicate (off by hundreds of rows) always fails.
"""

from __future__ import annotations

import csv
import io
import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import httpx
import pytest

import dpmine
from dpmine.queries import parse_query
from dpmine.wire import (
    ComputeQualityRequest,
    ComputeQualityResponse,
    LedgerEntryInfo,
    NoisyCountRequest,
    NoisyCountResponse,
    PlannedCall,
    Redescription,
)
from support.datasets import (
    MUSHROOM_ROWS,
    Row,
    count_rows,
    mushroom_metadata,
    mushroom_rows,
    register_mushroom,
    register_table,
    register_transactions,
)
from support.servers import Account, LiveServer, add_analyst

#: |noise| bound at epsilon 1: scale-1 discrete Laplace (cells, counts) and scale 2 (paper mode).
TOLERANCE = 40
PAPER_TOLERANCE = 80
MUSHROOM_CAP = 20.0
MUSHROOM_GRANT = 10.0


def as_float(exact: str | Decimal) -> float:
    """The float the server displays for an exact amount (nearest float of the exact value)."""
    return float(Fraction(Decimal(exact)))


def exact_total(entries: list[LedgerEntryInfo]) -> Decimal:
    """Exact sum of the entries' charges."""
    return sum((Decimal(entry.epsilon_exact) for entry in entries), Decimal(0))


def new_key() -> str:
    """A fresh Idempotency-Key."""
    return str(uuid.uuid4())


@pytest.fixture
def mushroom(owner: dpmine.Connection, analyst: Account) -> dpmine.DatasetHandle:
    """A fresh Mushroom dataset (cap 20) on which the analyst holds 10."""
    info = register_mushroom(owner, epsilon_cap=MUSHROOM_CAP)
    owner.admin.grant(info.id, analyst.name, MUSHROOM_GRANT)
    return analyst.connection.dataset(info.id)


# -- registration, discovery -------------------------------------------------------------------


def test_register_list_and_grant(owner: dpmine.Connection, analyst: Account) -> None:
    info = register_mushroom(owner, epsilon_cap=MUSHROOM_CAP)
    assert info.metadata == mushroom_metadata()
    assert info.metadata.kind == "views"
    assert len(info.metadata.attributes) == 23
    assert info.status == "active"
    assert info.version == 1
    assert info.id in [d.id for d in owner.datasets()]
    assert info.id not in [d.id for d in analyst.connection.datasets()]

    grant = owner.admin.grant(info.id, analyst.name, MUSHROOM_GRANT)
    assert (grant.epsilon, grant.spent, grant.remaining) == (MUSHROOM_GRANT, 0.0, MUSHROOM_GRANT)
    assert [d.id for d in analyst.connection.datasets()] == [info.id]

    handle = analyst.connection.dataset(info.id)
    assert handle.schema == info.metadata
    budget = handle.budget()
    assert budget.grant_epsilon == MUSHROOM_GRANT
    assert budget.grant_spent == 0.0
    assert budget.remaining_epsilon == MUSHROOM_GRANT
    assert budget.dataset_remaining == MUSHROOM_CAP


def test_owner_writes_are_committed_before_the_answer(
    any_server: LiveServer, owner: dpmine.Connection, tmp_path: Path
) -> None:
    """An owner's write that the server acknowledged must be committed and visible: sequential
    registrations, principals and grants all succeed, and an analyst sees a grant right after
    its answer."""
    step = "registering datasets"
    try:
        datasets = [register_table(owner, tmp_path).id for _ in range(3)]
        for round_ in range(12):
            step = f"round {round_}: adding an analyst"
            account = add_analyst(any_server, owner)
            with account.connection:
                for dataset_id in datasets:
                    step = f"round {round_}: granting {dataset_id} and reading the budget"
                    owner.admin.grant(dataset_id, account.name, 0.5 + round_)
                    budget = account.connection.dataset(dataset_id).budget()
                    assert budget.grant_epsilon == 0.5 + round_
    except dpmine.ServerError as error:
        pytest.fail(
            f"{step}: a sequence of owner writes, each acknowledged before the next, failed with "
            f"{error.status_code} {error}. Every acknowledged write must already be committed "
            "(api/deps.py SessionDep commits after the response is sent; see the server log)"
        )


# -- private operations ------------------------------------------------------------------------


COUNT_CASES: list[tuple[str | None, Callable[[Row], bool]]] = [
    (None, lambda _row: True),
    ("[class = e]", lambda row: row["class"] == "e"),
    ("[class = p] & [odor = n]", lambda row: row["class"] == "p" and row["odor"] == "n"),
    ("[odor = a] | [odor = l] | [odor = n]", lambda row: row["odor"] in {"a", "l", "n"}),
    # '?' (missing) stalk-root: the negated literal is false there, the complement true.
    ("![stalk-root = b]", lambda row: row["stalk-root"] not in {"b", "?"}),
    ("!([stalk-root = b])", lambda row: row["stalk-root"] != "b"),
]


def test_counts_with_and_without_predicates(mushroom: dpmine.DatasetHandle) -> None:
    rows = mushroom_rows()
    assert len(rows) == MUSHROOM_ROWS
    entry_ids = set()
    for text, predicate in COUNT_CASES:
        truth = count_rows(rows, predicate)
        result = mushroom.count(text, epsilon=1.0)
        assert abs(result.count - truth) <= TOLERANCE, (text, result.count, truth)
        receipt = result.receipt
        assert receipt.operation == "count.noisy"
        assert receipt.dataset_id == mushroom.id
        assert receipt.epsilon_exact == "1"
        assert receipt.guarantee == "pure"
        assert not receipt.replayed
        entry_ids.add(receipt.ledger_entry_id)
    assert len(entry_ids) == len(COUNT_CASES)
    spent = Decimal(len(COUNT_CASES))
    assert mushroom.budget().grant_spent == as_float(spent)
    assert mushroom.budget().remaining_epsilon == as_float(Decimal(str(MUSHROOM_GRANT)) - spent)


def _cells(left: Callable[[Row], bool], right: Callable[[Row], bool]) -> dict[str, int]:
    rows = mushroom_rows()
    return {
        "e11": count_rows(rows, lambda r: left(r) and right(r)),
        "e10": count_rows(rows, lambda r: left(r) and not right(r)),
        "e01": count_rows(rows, lambda r: right(r) and not left(r)),
        "e00": count_rows(rows, lambda r: not left(r) and not right(r)),
    }


def test_quality_in_both_modes(mushroom: dpmine.DatasetHandle) -> None:
    left_text, right_text = "[gill-size = n] | [stalk-shape = e]", "[class = p]"
    truth = _cells(
        lambda r: r["gill-size"] == "n" or r["stalk-shape"] == "e", lambda r: r["class"] == "p"
    )

    cells = mushroom.quality(left_text, right_text, epsilon=1.0, mode="cells")
    assert cells.mode == "cells"
    released = cells.cells.model_dump()
    for name, exact in truth.items():
        assert abs(released[name] - exact) <= TOLERANCE, (name, released[name], exact)
    assert cells.cells.intersection is None
    assert cells.cells.union is None
    clamped = {name: max(released[name], 0) for name in truth}
    assert cells.statistics.support == clamped["e11"]
    assert cells.statistics.union == clamped["e11"] + clamped["e10"] + clamped["e01"]
    assert cells.statistics.n_rows == sum(clamped.values())
    assert cells.statistics.p_value is not None
    assert 0.0 <= cells.statistics.jaccard <= 1.0
    assert cells.receipt.operation == "red.compute_quality"
    assert cells.receipt.epsilon_exact == "1"

    paper = mushroom.quality(left_text, right_text, epsilon=1.0, mode="paper")
    assert paper.mode == "paper"
    assert paper.cells.e11 is None
    assert paper.cells.intersection is not None
    assert paper.cells.union is not None
    assert abs(paper.cells.intersection - truth["e11"]) <= PAPER_TOLERANCE
    union = truth["e11"] + truth["e10"] + truth["e01"]
    assert abs(paper.cells.union - union) <= PAPER_TOLERANCE
    assert paper.statistics.support == max(paper.cells.intersection, 0)
    assert paper.receipt.epsilon_exact == "1"
    assert mushroom.budget().grant_spent == 2.0


# -- the budget ----------------------------------------------------------------------------------


def test_budget_decreases_exactly(
    owner: dpmine.Connection, analyst: Account, tmp_path: Path
) -> None:
    info = register_table(owner, tmp_path, epsilon_cap=5.0)
    owner.admin.grant(info.id, analyst.name, 1.0)
    table = analyst.connection.dataset(info.id)
    for call in range(1, 11):
        result = table.count("[smoker] & [region = north]", epsilon=0.1)
        assert result.receipt.epsilon_exact == "0.1"
        assert result.receipt.remaining_epsilon == as_float(Decimal(1) - Decimal("0.1") * call)

    entries = owner.admin.ledger(info.id)
    assert len(entries) == 10
    assert exact_total(entries) == Decimal(1)
    assert format(exact_total(entries).normalize(), "f") == "1"
    budget = table.budget()
    assert budget.grant_spent == 1.0
    assert budget.remaining_epsilon == 0.0
    assert budget.dataset_remaining == 4.0

    with pytest.raises(dpmine.BudgetExhaustedError) as refused:
        table.count(None, epsilon=0.1)
    assert refused.value.status_code == 409
    assert "remaining in your grant=0" in refused.value.detail
    assert len(owner.admin.ledger(info.id)) == 10, "a refused request must not be charged"
    assert table.budget() == budget
    assert owner.admin.verify_ledger() == {"consistent": True, "problems": []}


def test_estimate_is_free_and_exact(
    mushroom: dpmine.DatasetHandle, owner: dpmine.Connection
) -> None:
    redescription = Redescription(
        left=parse_query("[cap-shape = x]"), right=parse_query("[class = e]")
    )
    requests: list[tuple[str, NoisyCountRequest | ComputeQualityRequest]] = [
        ("count.noisy", NoisyCountRequest(epsilon=0.1)),
        ("red.compute_quality", ComputeQualityRequest(redescription=redescription, epsilon=0.25)),
        ("count.noisy", NoisyCountRequest(predicate=parse_query("[odor = n]"), epsilon=1 / 3)),
    ]
    before = mushroom.budget()
    estimate = mushroom.estimate(list(requests))
    # Costs are rounded *up* to 10^-12: 1/3 costs 0.333333333334.
    assert [call.epsilon_exact for call in estimate.calls] == ["0.1", "0.25", "0.333333333334"]
    assert estimate.total_epsilon_exact == "0.683333333334"
    assert estimate.remaining_epsilon == MUSHROOM_GRANT
    assert estimate.fits
    assert owner.admin.ledger(mushroom.id) == [], "an estimate must not be charged"
    assert mushroom.budget() == before

    too_much = mushroom.estimate(
        [PlannedCall(operation="count.noisy", request={"epsilon": 0.1})] * 101
    )
    assert too_much.total_epsilon_exact == "10.1"
    assert not too_much.fits
    assert owner.admin.ledger(mushroom.id) == []

    for operation, request in requests:
        if isinstance(request, NoisyCountRequest):
            mushroom.count(request.predicate, epsilon=request.epsilon)
        else:
            assert operation == "red.compute_quality"
            mushroom.quality(redescription.left, redescription.right, epsilon=request.epsilon)
    entries = owner.admin.ledger(mushroom.id)
    assert exact_total(entries) == Decimal(estimate.total_epsilon_exact)
    spent = Decimal(estimate.total_epsilon_exact)
    assert mushroom.budget().grant_spent == as_float(spent)
    assert mushroom.budget().remaining_epsilon == as_float(Decimal("10") - spent)


# -- the ledger ----------------------------------------------------------------------------------


def test_ledger_export_lists_every_release(
    mushroom: dpmine.DatasetHandle, owner: dpmine.Connection, analyst: Account
) -> None:
    keys = [new_key() for _ in range(3)]
    responses: list[NoisyCountResponse | ComputeQualityResponse] = [
        mushroom.count("[habitat = d]", epsilon=0.5, idempotency_key=keys[0]),
        mushroom.quality("[cap-color = n]", "[odor = n]", epsilon=0.25, idempotency_key=keys[1]),
        mushroom.quality(
            "[cap-color = n]", "[odor = n]", epsilon=0.125, mode="paper", idempotency_key=keys[2]
        ),
    ]
    with pytest.raises(dpmine.BudgetExhaustedError):
        mushroom.count(None, epsilon=MUSHROOM_GRANT)

    entries = owner.admin.ledger(mushroom.id)
    assert [entry.id for entry in entries] == [r.receipt.ledger_entry_id for r in responses]
    for entry, response, key, epsilon in zip(
        entries, responses, keys, ("0.5", "0.25", "0.125"), strict=True
    ):
        assert entry.status == "released"
        assert entry.principal == analyst.name
        assert entry.dataset_id == mushroom.id
        assert entry.idempotency_key == key
        assert entry.epsilon_exact == epsilon
        assert entry.guarantee == "pure"
        assert entry.completed_at is not None
        assert entry.release is not None
        assert type(response).model_validate(entry.release) == response
    assert entries[0].operation == "count.noisy"
    assert entries[0].parameters["predicate"] == parse_query("[habitat = d]").model_dump(
        mode="json"
    )
    assert entries[2].parameters["mode"] == "paper"
    assert owner.admin.ledger() != [], "the unfiltered export holds them too"
    assert {e.id for e in entries} <= {e.id for e in owner.admin.ledger()}

    rows = list(csv.DictReader(io.StringIO(owner.admin.ledger_csv(mushroom.id))))
    assert [int(row["id"]) for row in rows] == [entry.id for entry in entries]
    for row, entry in zip(rows, entries, strict=True):
        assert row["status"] == "released"
        assert row["principal"] == analyst.name
        assert row["epsilon_exact"] == entry.epsilon_exact
        assert row["idempotency_key"] == entry.idempotency_key
        assert json.loads(row["release"]) == entry.release
        assert json.loads(row["parameters"]) == entry.parameters
    assert owner.admin.verify_ledger() == {"consistent": True, "problems": []}


# -- idempotency ---------------------------------------------------------------------------------


def test_idempotent_replay_returns_the_stored_release(
    any_server: LiveServer,
    mushroom: dpmine.DatasetHandle,
    owner: dpmine.Connection,
    analyst: Account,
) -> None:
    key = new_key()
    first = mushroom.count("[class = e] & [bruises = t]", epsilon=0.5, idempotency_key=key)
    again = mushroom.count("[class = e] & [bruises = t]", epsilon=0.5, idempotency_key=key)
    assert not first.receipt.replayed
    assert again.receipt.replayed
    assert again.count == first.count
    assert again.receipt.ledger_entry_id == first.receipt.ledger_entry_id
    assert again.model_copy(update={"receipt": first.receipt}) == first
    assert again.receipt.model_copy(update={"replayed": False}) == first.receipt

    body = NoisyCountRequest(predicate=parse_query("[class = e] & [bruises = t]"), epsilon=0.5)
    raw = httpx.post(
        f"{any_server.url}/v1/datasets/{mushroom.id}/counts",
        json=body.model_dump(mode="json"),
        headers={"Authorization": f"Bearer {analyst.api_key}", "Idempotency-Key": key},
    )
    assert raw.status_code == 200
    assert raw.headers["Idempotent-Replayed"] == "true"
    assert raw.json()["count"] == first.count

    quality_key = new_key()
    quality = mushroom.quality(
        "[cap-shape = f]", "[odor = f]", epsilon=0.25, idempotency_key=quality_key
    )
    quality_again = mushroom.quality(
        "[cap-shape = f]", "[odor = f]", epsilon=0.25, idempotency_key=quality_key
    )
    assert quality_again.cells == quality.cells
    assert quality_again.statistics == quality.statistics

    entries = owner.admin.ledger(mushroom.id)
    assert len(entries) == 2, "each request is charged once, however often it is retried"
    assert exact_total(entries) == Decimal("0.75")
    assert mushroom.budget().grant_spent == 0.75


def test_same_key_with_another_request_is_refused(
    mushroom: dpmine.DatasetHandle,
    owner: dpmine.Connection,
    analyst: Account,
    tmp_path: Path,
) -> None:
    key = new_key()
    original = mushroom.count("[odor = n]", epsilon=0.5, idempotency_key=key)
    table = register_table(owner, tmp_path)
    owner.admin.grant(table.id, analyst.name, 1.0)
    other_dataset = analyst.connection.dataset(table.id)
    attempts: list[Callable[[], Any]] = [
        lambda: mushroom.count("[odor = n]", epsilon=0.25, idempotency_key=key),
        lambda: mushroom.count("[odor = a]", epsilon=0.5, idempotency_key=key),
        lambda: mushroom.count(None, epsilon=0.5, idempotency_key=key),
        lambda: mushroom.quality("[cap-shape = x]", "[odor = n]", epsilon=0.5, idempotency_key=key),
        lambda: other_dataset.count(None, epsilon=0.5, idempotency_key=key),
    ]
    for attempt in attempts:
        with pytest.raises(dpmine.IdempotencyConflictError) as conflict:
            attempt()
        assert conflict.value.status_code == 409  # DESIGN.md: idempotency conflict
        assert "different request" in conflict.value.detail
    entries = owner.admin.ledger(mushroom.id)
    assert [entry.id for entry in entries] == [original.receipt.ledger_entry_id]
    assert exact_total(entries) == Decimal("0.5")
    assert owner.admin.ledger(table.id) == []
    assert other_dataset.budget().grant_spent == 0.0
    replay = mushroom.count("[odor = n]", epsilon=0.5, idempotency_key=key)
    assert replay.count == original.count


# -- bad input -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Targets:
    """Datasets of every kind, granted to one analyst, on which nothing may ever be charged."""

    server: LiveServer
    analyst: Account
    datasets: dict[str, str]
    caps: dict[str, float]


GRANT_ON_TARGETS = 2.0


@pytest.fixture(scope="module")
def targets(any_server: LiveServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Targets]:
    """A views, a table and a transactions dataset (module-wide: the refusals charge nothing)."""
    folder = tmp_path_factory.mktemp("targets")
    with dpmine.connect(any_server.url, any_server.owner_key, retries=0) as owner:
        account = add_analyst(any_server, owner)
        infos = {
            "views": register_mushroom(owner, epsilon_cap=MUSHROOM_CAP),
            "table": register_table(owner, folder, epsilon_cap=3.0),
            "transactions": register_transactions(owner, folder, epsilon_cap=4.0),
        }
        for info in infos.values():
            owner.admin.grant(info.id, account.name, GRANT_ON_TARGETS)
        yield Targets(
            server=any_server,
            analyst=account,
            datasets={kind: info.id for kind, info in infos.items()},
            caps={"views": MUSHROOM_CAP, "table": 3.0, "transactions": 4.0},
        )
        account.connection.close()


def _q(text: str) -> dict[str, Any]:
    return parse_query(text).model_dump(mode="json")


def _red(left: str, right: str) -> dict[str, Any]:
    return {"left": _q(left), "right": _q(right)}


def _too_many_literals() -> dict[str, Any]:
    """An And of two 33-literal Ors: each list is within bounds, the 66 literals are not."""
    half = {"kind": "or", "terms": [{"kind": "bool", "attribute": "smoker"}] * 33}
    return {"kind": "and", "terms": [half, half]}


@dataclass(frozen=True)
class BadInput:
    """A request that must be refused before anything is charged."""

    name: str
    dataset: str  # "views" | "table" | "transactions" | a literal unknown id
    path: str
    body: dict[str, Any] | bytes
    status: int
    error: str
    detail: str
    headers: tuple[tuple[str, str], ...] = ()


BAD_INPUTS = [
    BadInput(
        "unknown attribute",
        "views",
        "counts",
        {"predicate": _q("[cap-colour = n]"), "epsilon": 0.1},
        422,
        "InvalidRequest",
        "unknown attribute 'cap-colour'; did you mean 'cap-color'",
    ),
    BadInput(
        "undeclared category",
        "views",
        "counts",
        {"predicate": _q("[class = edible]"), "epsilon": 0.1},
        422,
        "InvalidRequest",
        "'edible' is not a declared category of 'class'",
    ),
    BadInput(
        "numeric bound outside the public range",
        "table",
        "counts",
        {"predicate": _q("[0 <= age <= 120]"), "epsilon": 0.1},
        422,
        "InvalidRequest",
        "upper bound 120.0 on 'age' is outside its public range [0.0, 100.0]",
    ),
    BadInput(
        "literal kind does not match the attribute type",
        "table",
        "counts",
        {"predicate": _q("[smoker = yes]"), "epsilon": 0.1},
        422,
        "InvalidRequest",
        "'smoker' is boolean, so it needs a 'bool' literal",
    ),
    BadInput(
        "right-view attribute in the left query",
        "views",
        "redescriptions/quality",
        {"redescription": _red("[class = e]", "[odor = n]"), "epsilon": 0.1},
        422,
        "InvalidRequest",
        "'class' is in the right view",
    ),
    BadInput(
        "unknown item",
        "transactions",
        "counts",
        {"predicate": _q("[wine]"), "epsilon": 0.1},
        422,
        "InvalidRequest",
        "unknown item 'wine'",
    ),
    BadInput(
        "wrong dataset kind",
        "transactions",
        "redescriptions/quality",
        {"redescription": _red("[milk]", "[beer]"), "epsilon": 0.1},
        422,
        "InvalidRequest",
        "does not apply to a 'transactions' dataset",
    ),
    BadInput(
        "epsilon zero",
        "views",
        "counts",
        {"epsilon": 0},
        422,
        "InvalidRequest",
        "epsilon: Input should be greater than 0",
    ),
    BadInput(
        "epsilon negative",
        "views",
        "counts",
        {"epsilon": -0.5},
        422,
        "InvalidRequest",
        "epsilon: Input should be greater than 0",
    ),
    BadInput(
        "epsilon NaN (raw JSON)",
        "views",
        "counts",
        b'{"epsilon": NaN}',
        422,
        "InvalidRequest",
        "epsilon: Input should be a finite number",
    ),
    BadInput(
        "epsilon Infinity (raw JSON)",
        "views",
        "counts",
        b'{"epsilon": Infinity}',
        422,
        "InvalidRequest",
        "epsilon: Input should be a finite number",
    ),
    BadInput(
        "epsilon overflowing to infinity (raw JSON)",
        "table",
        "counts",
        b'{"epsilon": 1e999}',
        422,
        "InvalidRequest",
        "epsilon: Input should be a finite number",
    ),
    BadInput(
        "epsilon huge",
        "views",
        "counts",
        {"epsilon": 1e308},
        422,
        "InvalidRequest",
        "epsilon: Input should be less than or equal to 1000",
    ),
    BadInput(
        "epsilon above the remaining budget",
        "views",
        "counts",
        {"epsilon": 1000},
        409,
        "BudgetExhausted",
        "requested epsilon=1000",
    ),
    BadInput(
        "missing epsilon",
        "views",
        "counts",
        {"predicate": None},
        422,
        "InvalidRequest",
        "epsilon: Field required",
    ),
    BadInput(
        "a client-chosen seed",
        "views",
        "counts",
        {"epsilon": 0.1, "seed": 42},
        422,
        "InvalidRequest",
        "seed: Extra inputs are not permitted",
    ),
    BadInput(
        "malformed JSON",
        "views",
        "counts",
        b'{"epsilon": 0.1,',
        422,
        "InvalidRequest",
        "JSON decode error",
    ),
    BadInput(
        "not JSON at all",
        "table",
        "counts",
        b"count everything please",
        422,
        "InvalidRequest",
        "JSON decode error",
    ),
    BadInput(
        "unknown quality mode",
        "views",
        "redescriptions/quality",
        {"redescription": _red("[cap-shape = x]", "[class = e]"), "epsilon": 0.1, "mode": "x"},
        422,
        "InvalidRequest",
        "mode: Input should be 'cells' or 'paper'",
    ),
    BadInput(
        "query over the size limit",
        "table",
        "counts",
        {"predicate": _too_many_literals(), "epsilon": 0.1},
        422,
        "InvalidRequest",
        "predicate has 66 literals; at most 64 are allowed",
    ),
    BadInput(
        "unknown dataset",
        "no-such-dataset",
        "counts",
        {"epsilon": 0.1},
        404,
        "NotFound",
        "'no-such-dataset' does not exist or is not granted to you",
    ),
    BadInput(
        "Idempotency-Key too long",
        "views",
        "counts",
        {"epsilon": 0.1},
        422,
        "InvalidRequest",
        "Idempotency-Key must be 1 to 200 printable characters",
        (("Idempotency-Key", "k" * 201),),
    ),
    BadInput(
        "job of an unknown operation",
        "views",
        "jobs",
        {"operation": "count.everything", "request": {"epsilon": 0.1}},
        422,
        "InvalidRequest",
        "unknown operation 'count.everything'",
    ),
    BadInput(
        "job with an invalid request",
        "table",
        "jobs",
        {"operation": "count.noisy", "request": {"epsilon": -1}},
        422,
        "InvalidRequest",
        "epsilon: Input should be greater than 0",
    ),
    BadInput(
        "estimate with an invalid call",
        "views",
        "estimate",
        {
            "calls": [
                {"operation": "count.noisy", "request": {"epsilon": 0.1}},
                {"operation": "count.noisy", "request": {"epsilon": float("-1")}},
            ]
        },
        422,
        "InvalidRequest",
        "call 1 (count.noisy): epsilon: Input should be greater than 0",
    ),
]


@pytest.mark.parametrize("case", BAD_INPUTS, ids=[case.name for case in BAD_INPUTS])
def test_bad_input_is_refused_and_costs_nothing(targets: Targets, case: BadInput) -> None:
    dataset_id = targets.datasets.get(case.dataset, case.dataset)
    headers = {"Authorization": f"Bearer {targets.analyst.api_key}", **dict(case.headers)}
    with httpx.Client(base_url=targets.server.url, headers=headers, timeout=30) as http:
        url = f"/v1/datasets/{dataset_id}/{case.path}"
        if isinstance(case.body, bytes):
            response = http.post(
                url, content=case.body, headers={"Content-Type": "application/json"}
            )
        else:
            response = http.post(url, json=case.body)
    assert response.status_code == case.status, response.text
    body = response.json()
    assert set(body) == {"error", "detail"}
    assert body["error"] == case.error
    assert case.detail in body["detail"]
    assert "Traceback" not in body["detail"]

    with dpmine.connect(targets.server.url, targets.server.owner_key, retries=0) as owner:
        for kind, target_id in targets.datasets.items():
            assert owner.admin.ledger(target_id) == [], f"{case.name}: charged on {kind}"
            budget = targets.analyst.connection.dataset(target_id).budget()
            assert budget.grant_spent == 0.0
            assert budget.remaining_epsilon == GRANT_ON_TARGETS
            assert budget.dataset_remaining == targets.caps[kind]
        assert owner.admin.verify_ledger()["consistent"]


def test_epsilon_must_be_a_number_not_a_boolean(
    any_server: LiveServer, owner: dpmine.Connection, analyst: Account, tmp_path: Path
) -> None:
    """JSON ``true`` is not a privacy cost (dp/budget.py refuses Booleans); it must not be read
    as epsilon = 1 and charged."""
    info = register_table(owner, tmp_path)
    owner.admin.grant(info.id, analyst.name, 2.0)
    response = httpx.post(
        f"{any_server.url}/v1/datasets/{info.id}/counts",
        json={"epsilon": True},
        headers={"Authorization": f"Bearer {analyst.api_key}"},
    )
    charged = owner.admin.ledger(info.id)
    problem = (
        f"epsilon=true was answered {response.status_code} and charged "
        f"{[entry.epsilon_exact for entry in charged]}: the wire Epsilon type coerces JSON "
        "Booleans to 1.0 (client/dpmine/wire/common.py Epsilon needs strict numbers)"
    )
    assert response.status_code == 422, problem
    assert not charged, problem


def test_timestamps_carry_their_time_zone(
    mushroom: dpmine.DatasetHandle, owner: dpmine.Connection
) -> None:
    """Every timestamp the API returns is unambiguous (UTC with its offset), on every backend."""
    result = mushroom.count(None, epsilon=0.1)
    (entry,) = owner.admin.ledger(mushroom.id)
    stamps = {
        "receipt.created_at": result.receipt.created_at,
        "ledger created_at": entry.created_at,
        "ledger completed_at": entry.completed_at,
        "dataset created_at": mushroom.info.created_at,
        "audit at": owner.admin.audit()[0].at,
    }
    naive = [name for name, stamp in stamps.items() if stamp is None or stamp.tzinfo is None]
    assert naive == [], (
        f"timestamps without a time zone: {naive}; SQLite drops the zone of "
        "DateTime(timezone=True) columns when they are read back (db/models.py)"
    )
