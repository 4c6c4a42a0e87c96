"""The garbage collection policy of API processes (services/collector.py)."""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from starlette.types import Message, Receive, Scope, Send

from dpmine_server.api.collection_hold import CollectionHold
from dpmine_server.services.collector import (
    COLLECTION_WINDOW_SECONDS,
    FULL_COLLECTION_OFF,
    MIN_INTERVAL_SECONDS,
    IdleCollector,
    defer_full_collections,
)


@pytest.fixture
def thresholds() -> Iterator[tuple[int, int, int]]:
    before = gc.get_threshold()
    try:
        yield before
    finally:
        gc.set_threshold(*before)


def test_deferring_keeps_the_young_collections_and_stops_the_full_ones(
    thresholds: tuple[int, int, int],
) -> None:
    defer_full_collections()
    young, middle, full = gc.get_threshold()
    assert (young, middle) == thresholds[:2]
    assert full == FULL_COLLECTION_OFF
    # The young generations are still collected automatically: a young cycle goes away.
    collected_before = gc.get_stats()[0]["collections"]
    for _ in range(young * 3):
        cycle: list[object] = []
        cycle.append(cycle)
    assert gc.get_stats()[0]["collections"] > collected_before


class _Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_collection_holds_a_public_window_from_its_due_moment() -> None:
    clock = _Clock(10.02)  # the check ran a little after it was due
    collector = IdleCollector(lambda: 0, collect=lambda: None, clock=clock)
    clock.now = 20.0
    assert collector.shown_at(20.0) == 20.0  # no collection yet: nothing held
    clock.now = 20.02
    assert collector.idle_check(due=20.0)
    assert collector.window_end == 20.0 + COLLECTION_WINDOW_SECONDS
    assert collector.shown_at(20.1) == collector.window_end
    later = 20.0 + COLLECTION_WINDOW_SECONDS + 0.01
    assert collector.shown_at(later) == later


def test_a_pause_past_its_window_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    clock = _Clock(0.0)

    def long_pause() -> None:
        clock.now += COLLECTION_WINDOW_SECONDS + 0.1

    collector = IdleCollector(lambda: 0, collect=long_pause, clock=clock)
    clock.now = 10.0
    with caplog.at_level(logging.WARNING, logger="dpmine_server.services.collector"):
        assert collector.idle_check(due=10.0)
    assert "past its public window" in caplog.text


class _Services:
    def __init__(self, collector: IdleCollector) -> None:
        self.collector = collector


def _scope(collector: IdleCollector) -> Scope:
    app = SimpleNamespace(state=SimpleNamespace(services=_Services(collector)))
    return {"type": "http", "method": "GET", "path": "/v1/health", "headers": [], "app": app}


async def _receive() -> Message:
    return {"type": "http.request", "body": b"", "more_body": False}


def _pausing_collector() -> IdleCollector:
    """A real-clock collector whose last collection is long past and whose collection blocks
    the event loop for 30 ms, as a full collection of a large heap does."""
    shift = [-2 * MIN_INTERVAL_SECONDS]  # its "last collection" is two intervals old
    collector = IdleCollector(
        lambda: 0, collect=lambda: time.sleep(0.03), clock=lambda: time.monotonic() + shift[0]
    )
    shift[0] = 0.0
    return collector


def test_a_request_read_during_a_collection_starts_at_its_window_end() -> None:
    """The real middleware and collector on a real event loop: the request read right after
    a collection's pause is routed, and answered, only at the window's end."""
    entered: list[float] = []
    sent: list[float] = []

    async def app(_scope: Scope, _receive: Receive, send: Send) -> None:
        entered.append(time.monotonic())
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async def record(_message: Message) -> None:
        sent.append(time.monotonic())

    async def scenario(collector: IdleCollector) -> None:
        assert collector.idle_check(due=time.monotonic())
        await CollectionHold(app)(_scope(collector), _receive, record)

    collector = _pausing_collector()
    asyncio.run(scenario(collector))
    assert len(entered) == 1
    assert len(sent) == 2
    assert entered[0] >= collector.window_end
    assert min(sent) >= collector.window_end


def test_an_answer_due_during_a_collection_goes_out_at_its_window_end() -> None:
    """A request being handled when a collection starts: its answer waits for the window."""
    sent: list[float] = []

    async def scenario(collector: IdleCollector) -> None:
        ready = asyncio.Event()

        async def app(_scope: Scope, _receive: Receive, send: Send) -> None:
            await ready.wait()
            await send({"type": "http.response.start", "status": 200, "headers": []})

        async def record(_message: Message) -> None:
            sent.append(time.monotonic())

        handling = asyncio.create_task(CollectionHold(app)(_scope(collector), _receive, record))
        await asyncio.sleep(0.01)  # the request is in the app, waiting
        assert collector.idle_check(due=time.monotonic())
        ready.set()
        await handling

    collector = _pausing_collector()
    asyncio.run(scenario(collector))
    assert len(sent) == 1
    assert sent[0] >= collector.window_end


def test_without_a_collector_requests_pass_straight_through() -> None:
    """Padding off (no collector): the middleware adds no wait and no await of its own."""
    calls: list[Scope] = []

    async def app(scope: Scope, _receive: Receive, _send: Send) -> None:
        calls.append(scope)

    scope: Scope = {"type": "http", "app": SimpleNamespace(state=SimpleNamespace())}
    asyncio.run(CollectionHold(app)(scope, _receive, _record_nothing))
    assert calls == [scope]


async def _record_nothing(_message: Message) -> None:
    return None
