"""The public cache model of Serenade's extension candidate sets (services/extension_model.py;
issue #23): which positions of a ``serenade.extend_one`` call are priced warm is a function of
public events only.

The same public sequence of ES-like rounds (arrivals, collections) is replayed against two
neighbouring tables of different sizes (320 and 321 rows: one more row crosses a 64-bit word,
so every row bitset, and so every candidate set's real bytes, grows), with the real kernel run
on each round and the guard's decision (shown iff the kernel finished by the deadline) taken on
a clock that the kernel's row count moves. The honest model gives the same budgets on both
tables, exactly, including rounds where it evicts by count and by public size. Two broken
variants, built here as subclasses, must give different budgets: one that bounds the cache by
the values' actual bytes, one that inserts an entry when its kernel finished.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dpmine.wire import (
    BooleanAttribute,
    CategoricalAttribute,
    CsvSource,
    DatasetMetadata,
    ExtendOneRequest,
    NumericAttribute,
    Redescription,
)
from dpmine_server.data.columns import ColumnStore
from dpmine_server.data.loaders import load_store
from dpmine_server.operations import serenade
from dpmine_server.operations.redescriptions import OPERATIONS
from dpmine_server.services.extension_model import (
    HISTORY_SECONDS,
    ExtensionCacheModel,
    PricedKey,
    ShownEvent,
    Ticket,
    present_keys,
    running,
)
from dpmine_server.services.extension_pricing import ExtensionCallKeys
from dpmine_server.services.timing import TimingPolicy, _grids_and_banks_work

METADATA = DatasetMetadata(
    kind="views",
    n_max=100_000,  # a public bound far above the rows: building a set is priced dear
    attributes=[
        BooleanAttribute(name="a", view="left"),
        BooleanAttribute(name="b", view="left"),
        CategoricalAttribute(name="c", view="left", categories=["p", "q", "r"]),
        BooleanAttribute(name="e", view="right"),
        BooleanAttribute(name="f", view="right"),
        CategoricalAttribute(name="d", view="right", categories=["u", "v"]),
    ],
)
POLICY = TimingPolicy(enabled=True, grid=0.05, base=0.1, scale=1.0, fail_closed=True)
EXTEND = next(spec for spec in OPERATIONS if spec.name == "serenade.extend_one")
#: The kernel's stand-in duration: seconds per row (the real one grows with the rows too).
KERNEL_SECONDS_PER_ROW = 1e-4


def _store(folder: Path, rows: int) -> ColumnStore:
    lines = ["a,b,c,e,f,d"]
    for row in range(rows):
        lines.append(
            f"{row % 2},{int(row % 3 == 0)},{'pqr'[row % 3]},{int(row % 5 < 2)},"
            f"{int(row % 7 < 3)},{'uv'[(row // 7) % 2]}"
        )
    path = folder / f"table-{rows}.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    store, _report = load_store(METADATA, CsvSource(path=path.name), base_dir=folder)
    return store


@pytest.fixture(scope="module")
def neighbours(tmp_path_factory: pytest.TempPathFactory) -> tuple[ColumnStore, ColumnStore]:
    folder = tmp_path_factory.mktemp("extension-model")
    return _store(folder, 320), _store(folder, 321)


def _red(left: str, right: str) -> Redescription:
    def literal(name: str) -> dict[str, Any]:
        if name in "cd":
            return {"kind": "cat", "attribute": name, "category": "p" if name == "c" else "u"}
        return {"kind": "bool", "attribute": name}

    return Redescription.model_validate({"left": literal(left), "right": literal(right)})


BASE = [_red(left, right) for left, right in ("ae", "bf", "cd", "ad", "be", "cf")]
#: (seconds after the previous arrival, position changed, its new redescription): ES rounds
#: that each change one position; some wait past the previous deadline, some do not.
ROUNDS: list[tuple[float, int | None, Redescription | None]] = [
    (0.0, None, None),
    (1.0, None, None),  # everything warm
    (1.0, 0, _red("b", "d")),  # one position cold
    (0.02, 1, _red("a", "f")),  # arrives before the previous deadline: that key not yet in
    (1.0, 2, _red("c", "e")),
    (1.0, 0, _red("a", "e")),  # back to a key seen before (possibly evicted)
    (1.0, None, None),
]


@dataclass
class Clock:
    now: float = 100.0

    def __call__(self) -> float:
        return self.now


def _request(collection: Sequence[Redescription]) -> ExtendOneRequest:
    return ExtendOneRequest.model_validate(
        {
            "mode": "es",
            "collection": [red.model_dump(mode="json") for red in collection],
            "epsilon": 0.5,
            "quality": {"x0": 30.0},
        }
    )


Round = tuple[float, int | None, Redescription | None]


def _pricer(
    request: ExtendOneRequest,
    arrival: float,
    priced: list[float],
    metadata: DatasetMetadata = METADATA,
) -> Callable[[frozenset[str]], float]:
    """The deadline of a round from its warm keys (as services/extension_pricing.py prices a
    call), recording its budget in ``priced``."""
    keys = ExtensionCallKeys.of(request, metadata)

    def deadline_of(warm: frozenset[str]) -> float:
        budget = keys.budget(POLICY, request, metadata, warm)
        priced.append(budget)
        return arrival + POLICY.deadline_offset(budget)

    return deadline_of


def replay(
    model: ExtensionCacheModel,
    store: ColumnStore,
    clock: Clock,
    rounds: Sequence[Round] = tuple(ROUNDS),
) -> tuple[list[float], list[Ticket]]:
    """The budgets of :data:`ROUNDS` on ``store``: each round priced against the model, its
    real kernel run with the ticket active, settled shown iff the stand-in kernel time
    (rows × :data:`KERNEL_SECONDS_PER_ROW`) ends by its deadline."""
    collection = list(BASE)
    arrival = clock.now
    budgets: list[float] = []
    tickets: list[Ticket] = []
    for gap, position, red in rounds:
        arrival += gap
        if position is not None and red is not None:
            collection[position] = red
        request = _request(collection)
        keys = ExtensionCallKeys.of(request, store.metadata).all
        priced: list[float] = []
        clock.now = arrival
        pricer = _pricer(request, arrival, priced, store.metadata)
        ticket = model.price(store, keys, arrival, pricer)
        with running(ticket):
            EXTEND.run(
                store, request, EXTEND.cost(request), np.random.default_rng(1), lambda *_: None
            )
            finished = arrival + store.n_rows * KERNEL_SECONDS_PER_ROW
            clock.now = finished
            ticket.settle(finished <= ticket.deadline)  # the guard: claim, or the deadline
        budgets.append(priced[-1])
        tickets.append(ticket)
    return budgets, tickets


class NbytesModel(ExtensionCacheModel):
    """Broken: bounds the cache by the values' actual bytes (they grow with the rows)."""

    def entry_size(self, priced: PricedKey, value: Any) -> int:
        del priced
        return int(value.nbytes())


class CompletionModel(ExtensionCacheModel):
    """Broken: an entry enters when its kernel finished, not at the public deadline."""

    def event_time(self, ticket: Ticket) -> float:
        assert ticket.settled_at is not None
        return ticket.settled_at


def _budgets(
    factory: type[ExtensionCacheModel],
    pair: tuple[ColumnStore, ColumnStore],
    rounds: Sequence[Round] = tuple(ROUNDS),
    bounds: dict[str, int] | None = None,
) -> tuple[list[float], list[float]]:
    out = []
    for store in pair:
        clock = Clock()
        out.append(replay(factory(clock=clock, **(bounds or {})), store, clock, rounds)[0])
    return out[0], out[1]


def _one_entry_bytes(store: ColumnStore) -> list[int]:
    """Actual bytes of the candidate sets of :data:`BASE` on ``store``."""
    clock = Clock()
    _budgets_, tickets = replay(ExtensionCacheModel(clock=clock), store, clock)
    del _budgets_
    first = tickets[1]  # round 2: every position pinned
    return [int(first.pinned[k.key].nbytes()) for k in first.keys]


@pytest.mark.parametrize(
    "bounds",
    [{}, {"max_entries": 4}, {"max_entries": 2}, {"max_bytes": 40_000}],
    ids=["roomy", "four-entries", "two-entries", "public-bytes"],
)
def test_budgets_are_the_same_on_neighbours_of_different_sizes(
    neighbours: tuple[ColumnStore, ColumnStore], bounds: dict[str, int]
) -> None:
    small, large = _budgets(ExtensionCacheModel, neighbours, bounds=bounds)
    assert small == large
    roomy = _budgets(ExtensionCacheModel, neighbours)[0]
    # The model is in use (warm rounds priced below the first, cold one), and the bounds
    # evict (fewer warm positions than without them).
    assert roomy[1] < roomy[0]
    assert roomy[2] < roomy[0]
    if bounds:
        assert sum(small) > sum(roomy)


def test_warm_positions_are_served_from_the_pins(
    neighbours: tuple[ColumnStore, ColumnStore],
) -> None:
    clock = Clock()
    _budgets_, tickets = replay(ExtensionCacheModel(clock=clock), neighbours[0], clock)
    del _budgets_
    assert tickets[0].warm == frozenset()
    assert len(tickets[1].warm) == len(BASE) + 1  # and the call's resources
    assert tickets[1].pinned
    assert all(t.shown for t in tickets)
    # Round 3 changed position 0 (cold there); round 4 arrived before round 3's deadline, so
    # that key is not in the model yet: cold again, though round 3 built it.
    assert tickets[2].keys[0].text not in tickets[2].warm
    assert tickets[3].keys[0].text == tickets[2].keys[0].text
    assert tickets[3].keys[0].text not in tickets[3].warm
    assert tickets[4].keys[0].text in tickets[4].warm


def test_a_model_bounded_by_actual_bytes_is_flagged(
    neighbours: tuple[ColumnStore, ColumnStore],
) -> None:
    sizes = _one_entry_bytes(neighbours[0])
    assert _one_entry_bytes(neighbours[1]) != sizes  # the real bytes follow the rows
    # Room for every set of BASE on the small table only.
    small, large = _budgets(NbytesModel, neighbours, bounds={"max_bytes": sum(sizes)})
    assert small != large


def test_a_model_filled_at_kernel_completion_is_flagged(
    neighbours: tuple[ColumnStore, ColumnStore],
) -> None:
    # A round that arrives between the two tables' kernel completions (32.0 / 32.1 ms).
    rounds: list[Round] = [(0.0, None, None), (0.03205, None, None)]
    small, large = _budgets(CompletionModel, neighbours, rounds)
    honest = _budgets(ExtensionCacheModel, neighbours, rounds)
    assert small != large
    assert honest[0] == honest[1]


def test_present_keys_is_an_lru_over_public_deadlines() -> None:
    def key(text: str, size: int = 10) -> PricedKey:
        key_value: Hashable = ("k", text)
        return PricedKey(key=key_value, text=text, size=size)

    events = [
        ShownEvent(1.0, (key("a"), key("b"))),
        ShownEvent(2.0, (key("c"),)),
        ShownEvent(3.0, (key("a"),)),  # refreshes a
        ShownEvent(9.0, (key("d"),)),  # not yet at t = 5
    ]
    assert present_keys(events, 0.5, max_entries=10, max_bytes=100) == frozenset()
    assert present_keys(events, 5.0, max_entries=2, max_bytes=100) == {"a", "c"}
    assert present_keys(events, 5.0, max_entries=10, max_bytes=25) == {"a", "c"}
    assert present_keys(events, 9.0, max_entries=3, max_bytes=100) == {"d", "a", "c"}
    # The newest key always fits, whatever its size.
    assert present_keys([ShownEvent(1.0, (key("z", 10**9),))], 1.0, max_entries=1, max_bytes=0)


def _due(deadline: float, warm: frozenset[str]) -> float:
    """A pricer whose deadline does not depend on the warm keys."""
    del warm
    return deadline


def test_the_indexed_model_is_the_lru_of_every_shown_event() -> None:
    """:meth:`ExtensionCacheModel.present` keeps its keys' deadlines indexed (one pass over
    the live keys, where a scan of every event of the last minute slowed each pricing by
    tens of milliseconds on a server that had served ten SerenadeES runs) and forgets what
    no pricing from ``now − HISTORY_SECONDS`` on can read. On random ES-like traffic over
    five minutes (overlapping requests, refreshed, new and evicted keys, withheld releases),
    it answers every query from the horizon on exactly as :func:`present_keys` over every
    shown event ever."""
    rng = np.random.default_rng(20261129)
    pool = [f"key-{index:03d}" for index in range(60)]
    sizes = {text: int(rng.integers(1, 40)) for text in pool}  # public: a function of the key
    clock = Clock(now=0.0)
    model = ExtensionCacheModel(clock=clock, max_entries=12, max_bytes=250)
    shown: list[ShownEvent] = []
    collection = list(rng.choice(pool, size=8, replace=False))
    arrival = 0.0
    checked = 0
    while arrival < 300.0:
        arrival += float(rng.choice([0.01, 0.03, 0.06, 0.5, 2.0, 7.0]))
        collection[int(rng.integers(len(collection)))] = str(rng.choice(pool))
        keys = [PricedKey(key=("k", text), text=text, size=sizes[text]) for text in collection]
        budget = float(rng.choice([0.02, 0.05, 0.2]))
        clock.now = arrival
        ticket = model.price(object(), keys, arrival, functools.partial(_due, arrival + budget))
        for priced in keys:
            ticket.value(priced.key, object)
        released = bool(rng.random() < 0.9)
        clock.now = arrival + budget
        ticket.settle(released)
        if released:
            shown.append(ShownEvent(ticket.deadline, tuple(keys)))
        with model._settled:
            for at in arrival + rng.uniform(-HISTORY_SECONDS + 1.0, 1.0, size=4):
                expected = present_keys(
                    shown, float(at), max_entries=model.max_entries, max_bytes=model.max_bytes
                )
                assert model.present(float(at)) == expected, (arrival, at)
                checked += 1
    assert checked > 500
    assert model.pinned_count() < len(pool)  # the forgotten keys' values were dropped


NUMERIC_METADATA = DatasetMetadata(
    kind="views",
    n_max=100_000,
    attributes=[
        BooleanAttribute(name="a", view="left"),
        NumericAttribute(name="x", view="left", lo=0.0, hi=1.0),
        BooleanAttribute(name="e", view="right"),
        NumericAttribute(name="y", view="right", lo=0.0, hi=1.0),
    ],
)
GRID_REQUEST = ExtendOneRequest.model_validate(
    {
        "mode": "es",
        "collection": [
            {
                "left": {"kind": "bool", "attribute": "a"},
                "right": {"kind": "bool", "attribute": "e"},
            },
            {
                "left": {"kind": "num", "attribute": "x", "lower": 0.5},
                "right": {"kind": "bool", "attribute": "e"},
            },
        ],
        "epsilon": 0.5,
        "quality": {"x0": 30.0},
        "options": {"threshold_mode": "grid"},
    }
)


def _numeric_store(folder: Path) -> ColumnStore:
    lines = ["a,x,e,y"]
    generator = np.random.default_rng(3)
    for row in range(400):
        x, y = generator.random(2)
        missing = row % 11 == 0
        lines.append(f"{row % 2},{x:.4f},{int(row % 3 == 0)},{'' if missing else f'{y:.4f}'}")
    (folder / "numeric.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    store, _report = load_store(NUMERIC_METADATA, CsvSource(path="numeric.csv"), base_dir=folder)
    return store


def _grid_round(
    model: ExtensionCacheModel | None, store: ColumnStore, arrival: float, clock: Clock
) -> tuple[float | None, Ticket | None, Any]:
    """:data:`GRID_REQUEST` run on ``store`` (priced against ``model`` and settled shown,
    when given); its budget, its ticket and the drawn outcome."""
    request = GRID_REQUEST

    def run() -> Any:
        generator = np.random.default_rng(7)
        return EXTEND.run(store, request, EXTEND.cost(request), generator, lambda *_: None)

    if model is None:
        return None, None, run()
    priced: list[float] = []
    clock.now = arrival
    keys = ExtensionCallKeys.of(request, NUMERIC_METADATA).all
    pricer = _pricer(request, arrival, priced, NUMERIC_METADATA)
    ticket = model.price(store, keys, arrival, pricer)
    with running(ticket):
        outcome = run()
        ticket.settle(True)
    return priced[-1], ticket, outcome


def test_held_resources_price_a_call_without_its_grids_and_are_not_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shown call leaves its banks and grids (operations/serenade.py ExtensionResources) in
    the model; the next call is priced without exactly the per-call work that builds them,
    reads the pinned copy instead of building them again, and draws what a call without the
    model draws."""
    store = _numeric_store(tmp_path)
    _none, _no_ticket, unpriced_outcome = _grid_round(None, store, 0.0, Clock())
    builds: list[Any] = []
    real_build = serenade.build_extension_resources

    def counted(*args: Any) -> Any:
        built = real_build(*args)
        builds.append(built)
        return built

    monkeypatch.setattr(serenade, "build_extension_resources", counted)
    clock = Clock()
    model = ExtensionCacheModel(clock=clock)
    first_budget, first, first_outcome = _grid_round(model, store, 100.0, clock)
    second_budget, second, second_outcome = _grid_round(model, store, 200.0, clock)
    assert first is not None
    assert second is not None
    assert first.warm == frozenset()
    resources = first.keys[-1]
    assert resources.key == serenade.extension_resources_key(serenade.ExtensionRules(), "grid")
    assert set(builds[0].grids) == {"x", "y"}
    assert set(builds[0].banks) == {"left", "right"}
    # The second call holds every key, reads the pinned resources and builds nothing.
    assert second.warm == frozenset(key.text for key in second.keys)
    assert second.pinned[resources.key] is builds[0]
    assert len(builds) == 1
    # Its budget is the warm positions' and no per-call work; without the held resources it
    # would be that work more.
    held = POLICY.extend_budget(GRID_REQUEST, NUMERIC_METADATA, 2, resources_held=True)
    not_held = POLICY.extend_budget(GRID_REQUEST, NUMERIC_METADATA, 2)
    assert second_budget == held
    assert not_held - held == pytest.approx(_grids_and_banks_work(NUMERIC_METADATA))
    assert first_budget == POLICY.extend_budget(GRID_REQUEST, NUMERIC_METADATA, 0)
    assert first_outcome == second_outcome == unpriced_outcome
