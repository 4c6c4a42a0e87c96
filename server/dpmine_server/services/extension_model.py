"""A public model of the cache of Serenade's extension candidate sets (issue #23; DESIGN.md
contract item 7, "time is an output").

SerenadeES's rounds each change one redescription of the collection, so a round's
``serenade.extend_one`` rebuilds one position's candidate set and reuses the others (cached per
redescription). Pricing a round warm needs to know which sets are cached, but the store's own
cache (data/derived.py) is not public: it evicts by the values' actual bytes, which grow with
the private row count, and it fills when kernels finish, which depends on the data. This
module keeps, per loaded store and per process, a cache whose *contents are a function of
public events only*, prices ``extend_one`` against it, and holds (pins) the real values for as
long as it says they are there.

The public events. A priced request ``r`` has a public arrival ``a_r``, a public deadline
``D_r = a_r + grid · ⌈budget_r / grid⌉`` (services/timing.py) and a public set of keys ``K_r``,
one per position (dataset version, redescription JSON, extension rules, threshold mode, Q's
parameters: :func:`~dpmine_server.operations.redescriptions.extension_cache_keys`). Whether
``r``'s release was *shown* at ``D_r`` is public too: the analyst sees a release or a failure
there. Each key has a public size estimate from public metadata (``n_max``, literals, grid
sizes; :func:`public_size`), never the bytes of its value.

The model. At time ``t`` a key ``k`` is *present* when it belongs to the longest prefix of
``order(t)`` that fits the public bounds (at most ``max_entries`` keys, public sizes adding up
to at most ``max_bytes``; the first key always fits), where ``order(t)`` lists the keys of the
shown requests with ``D_r ≤ t``, each at its latest such deadline, newest first (ties by the
key's text). That is an LRU cache in which a shown request inserts or refreshes its keys at
its deadline (not when its kernel finished), evicting by the public sizes. A request arriving
at ``a`` is priced with the keys present at ``a`` warm and the others cold
(:func:`dpmine_server.services.timing.TimingPolicy.extend_budget`).

Proof that the budget is a public function. ``present(t)`` is a function of the finite list of
(``D_r``, ``K_r``, shown_r) with ``D_r ≤ t`` and of public sizes and bounds, all public
values; the budget is a function of ``present(a)``, the request and the public metadata.
The implementation computes exactly that list at pricing time: (i) a request is registered
(:meth:`ExtensionCacheModel.price`) before its kernel starts, at a real time before ``D_r``
(a request registered at or after its own deadline is recorded as not shown, whatever
happens); (ii) it is settled (:meth:`Ticket.settle`) when its :class:`ModelGuard` is claimed
(shown) or expired (withheld), or when its call ends without a claim (refused, replayed or
failed: not a fresh release of these keys, recorded as not shown); (iii) pricing at ``a``
first waits until every registered request with ``D_r ≤ a`` is settled. Whether a request
claimed is decided once, under the guard's lock (services/release_guard.py), and it is the
same event as "its release was shown at ``D_r``", so the list read is exactly the public one.

Residual channels, both documented rather than closed:

* a kernel that finishes right at its deadline: the guard's claim-or-expire race decides both
  the release and the model; it is the existing overrun channel (probability bounded by the
  budgets, ``bench/bench_budgets.py``), and an overrun only ever makes keys *absent*;
* settling delayed past :data:`SETTLE_WAIT_SECONDS` (the event loop stalled that long): the
  pricing then treats the unsettled request as not shown, and logs it.

Values. A present key's value is pinned here (a strong reference); a request pins the values
it was priced on at pricing time (:class:`Ticket`) and its kernel reads them from there, so an
eviction between pricing and the kernel changes nothing. A key's value is dropped once the key
is absent at ``now − HISTORY_SECONDS`` and has no later deadline: no pricing of a request that
arrived in the last ``HISTORY_SECONDS`` can find it present. A request priced later than that
after its arrival may find a present key without its value: its kernel rebuilds it (from the
store's own cache or from the rows), and if that overruns, it fails closed as any overrun.

The model lives on the store it describes (:meth:`ColumnStore.attachment`), so its values die
with the store when the dataset is evicted or retired; a store that is not resident at pricing
gives no model (every position cold). Each API process has its own stores and so its own
model; which process serves a request does not depend on the data. Jobs and batches are priced
cold, as before.
"""

from __future__ import annotations

import bisect
import contextvars
import heapq
import json
import logging
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from dpmine_server.services.kernel_lane import LanePlace
from dpmine_server.services.release_guard import ReleaseGuard

__all__ = [
    "HISTORY_SECONDS",
    "MAX_ENTRIES",
    "MAX_PUBLIC_BYTES",
    "SETTLE_WAIT_SECONDS",
    "ExtensionCacheModel",
    "ModelGuard",
    "PricedKey",
    "Ticket",
    "active_ticket",
    "present_keys",
]

logger = logging.getLogger(__name__)

#: Public bounds of one store's model: keys, and the sum of their public size estimates.
MAX_ENTRIES = 512
MAX_PUBLIC_BYTES = 256 * 2**20
#: How long a pricing waits for the requests whose deadlines have passed to settle.
SETTLE_WAIT_SECONDS = 2.0
#: How far back in time a pricing may look and still find every value it is priced on.
HISTORY_SECONDS = 60.0
#: How far the horizon moves between two passes that drop what it left behind (memory only).
FORGET_EVERY_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class PricedKey:
    """One position's key: ``key`` (hashable, the kernel's cache key), ``text`` (a canonical
    public text of it, the model's tie-break) and ``size`` (its public size estimate)."""

    key: Hashable
    text: str
    size: int


@dataclass(frozen=True, slots=True)
class ShownEvent:
    """A shown request's keys, entering (or refreshed in) the model at its deadline."""

    deadline: float
    keys: tuple[PricedKey, ...]


def present_keys(
    events: Iterable[ShownEvent], at: float, *, max_entries: int, max_bytes: int
) -> frozenset[str]:
    """The texts of the keys present at time ``at`` (see the module docstring): the longest
    prefix, newest first, of the keys of the events with ``deadline ≤ at`` that fits the
    public bounds. A pure function of public values."""
    latest: dict[str, tuple[float, int]] = {}
    for event in events:
        if event.deadline > at:
            continue
        for priced in event.keys:
            seen = latest.get(priced.text)
            if seen is None or event.deadline > seen[0]:
                latest[priced.text] = (event.deadline, priced.size)
    order = sorted(latest.items(), key=lambda item: (-item[1][0], item[0]))
    kept: list[str] = []
    total = 0
    for text, (_deadline, size) in order:
        if kept and (len(kept) >= max_entries or total + size > max_bytes):
            break
        kept.append(text)
        total += size
    return frozenset(kept)


@dataclass(eq=False)
class Ticket:
    """One priced request: its deadline, keys, the values pinned for it at pricing time and
    the values its kernel delivers; settled once (shown or not)."""

    model: ExtensionCacheModel
    store: object
    deadline: float
    keys: tuple[PricedKey, ...]
    warm: frozenset[str]
    pinned: dict[Hashable, Any]
    delivered: dict[Hashable, Any] = field(default_factory=dict)
    shown: bool | None = None
    #: When it was settled (the model's clock); never a model time (see :meth:`event_time`).
    settled_at: float | None = None

    def value(self, key: Hashable, build: Callable[[], Any]) -> Any:
        """The value of ``key`` for this request's kernel: the pinned one, else ``build()``;
        remembered as delivered (the model keeps it if the release is shown)."""
        value = self.pinned.get(key)
        if value is None:
            value = build()
        self.delivered[key] = value
        return value

    def settle(self, shown: bool) -> None:
        """Record, once, whether the release was shown at the deadline (later calls do
        nothing)."""
        self.model.settle(self, shown)


def _deadline(entry: tuple[float, int]) -> float:
    return entry[0]


class ExtensionCacheModel:
    """The public cache model of one loaded store (see the module docstring)."""

    def __init__(
        self,
        *,
        max_entries: int = MAX_ENTRIES,
        max_bytes: int = MAX_PUBLIC_BYTES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._clock = clock
        #: Per key text, the (deadline, public size) of every shown event that holds it, in
        #: deadline order: the same information as the list of :class:`ShownEvent`, indexed so
        #: that :meth:`present` costs one pass over the live keys instead of one over every
        #: key of every event of the last ``HISTORY_SECONDS`` (:func:`present_keys`).
        self._deadlines: dict[str, list[tuple[float, int]]] = {}
        self._values: dict[str, tuple[Hashable, Any]] = {}
        self._pending: list[Ticket] = []
        self._settled = threading.Condition()
        #: The horizon of the last :meth:`_forget` pass.
        self._forgotten_until = float("-inf")

    # -- the public state ------------------------------------------------------------------

    def event_time(self, ticket: Ticket) -> float:
        """The public time at which a shown ticket's keys enter the model: its deadline
        (never when its kernel finished, which depends on the data)."""
        return ticket.deadline

    def entry_size(self, priced: PricedKey, value: Any) -> int:
        """The size the bounds count for a key: its public estimate (never the value's own
        bytes, which grow with the private row count)."""
        del value
        return priced.size

    def present(self, at: float) -> frozenset[str]:
        """Texts of the keys present at ``at`` (the caller holds the lock): exactly
        :func:`present_keys` over the shown events (tests/services/test_extension_model.py
        compares them), each key at its latest deadline ≤ ``at``, newest first, ties by text."""
        order: list[tuple[float, str, int]] = []
        for text, deadlines in self._deadlines.items():
            if deadlines[-1][0] <= at:
                deadline, size = deadlines[-1]
            else:  # refreshed after ``at``: its latest deadline up to ``at``, if any
                index = bisect.bisect_right(deadlines, at, key=_deadline) - 1
                if index < 0:
                    continue
                deadline, size = deadlines[index]
            order.append((-deadline, text, size))
        kept: list[str] = []
        total = 0
        for _minus_deadline, text, size in heapq.nsmallest(self.max_entries, order):
            if kept and total + size > self.max_bytes:
                break
            kept.append(text)
            total += size
        return frozenset(kept)

    # -- pricing ---------------------------------------------------------------------------

    def price(
        self,
        store: object,
        keys: Sequence[PricedKey],
        arrival: float,
        deadline_of: Callable[[frozenset[str]], float],
    ) -> Ticket:
        """Register a request that arrived at ``arrival`` with ``keys``: the keys present at
        ``arrival`` are warm; ``deadline_of(warm texts)`` gives its public deadline (from the
        budget priced on them). Returns the ticket whose pins the kernel reads.

        ``deadline_of`` runs outside the model's lock: it reserves the call's kernel in its
        process's lane (services/kernel_lane.py), which waits for requests that arrived
        earlier, and those may be pricing here. ``present(arrival)`` cannot change meanwhile
        (every request due by ``arrival`` is settled, and one registered later past its own
        deadline is recorded as not shown), so the warm set and the pins stay those of
        ``arrival``."""
        with self._settled:
            self._wait_settled(arrival)
            present = self.present(arrival)
            warm = frozenset(k.text for k in keys if k.text in present)
            pinned: dict[Hashable, Any] = {}
            for priced in keys:
                held = self._values.get(priced.text) if priced.text in warm else None
                if held is not None:
                    pinned[priced.key] = held[1]
        deadline = deadline_of(warm)
        with self._settled:
            ticket = Ticket(
                model=self,
                store=store,
                deadline=deadline,
                keys=tuple(keys),
                warm=warm,
                pinned=pinned,
            )
            if self._clock() >= ticket.deadline:
                ticket.shown = False  # registered too late to be shown in time: never counts
            else:
                self._pending.append(ticket)
            self._forget(arrival)
            return ticket

    def _wait_settled(self, arrival: float) -> None:
        """Wait (lock held) until every request due by ``arrival`` is settled; one still
        unsettled after :data:`SETTLE_WAIT_SECONDS` is recorded as not shown."""
        give_up = self._clock() + SETTLE_WAIT_SECONDS
        while True:
            due = [t for t in self._pending if t.deadline <= arrival]
            if not due:
                return
            left = give_up - self._clock()
            if left <= 0:
                for ticket in due:
                    logger.warning("an extension request was not settled in time; not shown")
                    self._settle_locked(ticket, shown=False)
                return
            self._settled.wait(left)

    def settle(self, ticket: Ticket, shown: bool) -> None:
        """Record whether ``ticket``'s release was shown (first call wins)."""
        with self._settled:
            self._settle_locked(ticket, shown)

    def _settle_locked(self, ticket: Ticket, shown: bool) -> None:
        if ticket.shown is not None:
            return
        ticket.shown = shown
        ticket.settled_at = self._clock()
        if ticket in self._pending:
            self._pending.remove(ticket)
        delivered = ticket.delivered
        if shown and all(k.key in delivered for k in ticket.keys):
            at = self.event_time(ticket)
            for priced in ticket.keys:
                size = self.entry_size(priced, delivered[priced.key])
                deadlines = self._deadlines.setdefault(priced.text, [])
                index = bisect.bisect_right(deadlines, at, key=_deadline)
                if index == 0 or deadlines[index - 1][0] != at:  # one entry per deadline
                    deadlines.insert(index, (at, size))
                self._values[priced.text] = (priced.key, delivered[priced.key])
        ticket.delivered = {}
        self._settled.notify_all()

    def _forget(self, arrival: float) -> None:
        """Drop the deadlines and values no pricing from ``now − HISTORY_SECONDS`` on can use
        (lock held), at most once per :data:`FORGET_EVERY_SECONDS` of the horizon: a key
        present at the horizon keeps its latest deadline up to it and the later ones; any other
        key keeps only its deadlines after the horizon (none: the key and its value go).

        Exact for every ``at`` from the horizon on (tests/services/test_extension_model.py
        checks it against :func:`present_keys` over every shown event): a key absent at the
        horizon lies behind the cut of the prefix there, and until a later deadline refreshes
        it, every key ahead of it stays ahead (deadlines only grow), so it stays behind the
        cut; the keys ahead of the cut are kept as they were. Memory only, then: pricing reads
        the same present keys."""
        horizon = min(self._clock(), arrival) - HISTORY_SECONDS
        if horizon < self._forgotten_until + FORGET_EVERY_SECONDS:
            return
        self._forgotten_until = horizon
        kept_then = self.present(horizon)
        for text in list(self._deadlines):
            deadlines = self._deadlines[text]
            up_to = bisect.bisect_right(deadlines, horizon, key=_deadline)
            del deadlines[: up_to - 1 if text in kept_then else up_to]
            if not deadlines:
                del self._deadlines[text]
        for text in [text for text in self._values if text not in self._deadlines]:
            del self._values[text]

    def pinned_count(self) -> int:
        """How many values the model holds (for tests and the owner's diagnostics)."""
        with self._settled:
            return len(self._values)


class ModelGuard(ReleaseGuard):
    """A :class:`ReleaseGuard` that settles its ticket with the same decision: shown when the
    kernel claims its release, not shown when the deadline expires it."""

    def __init__(self, ticket: Ticket, place: LanePlace | None = None) -> None:
        super().__init__(place)
        self.ticket = ticket

    def claim(self) -> bool:
        """As :meth:`ReleaseGuard.claim`; a successful claim settles the ticket as shown."""
        claimed = super().claim()
        if claimed:
            self.ticket.settle(True)
        return claimed

    def expire(self) -> bool:
        """As :meth:`ReleaseGuard.expire`; the deadline settles the ticket as not shown."""
        expired = super().expire()
        if expired:
            self.ticket.settle(False)
        return expired


_ACTIVE: contextvars.ContextVar[Ticket | None] = contextvars.ContextVar(
    "dpmine_extension_ticket", default=None
)


def active_ticket(store: object) -> Ticket | None:
    """The ticket of the request this thread is running, if it was priced on ``store``."""
    ticket = _ACTIVE.get()
    return ticket if ticket is not None and ticket.store is store else None


@contextmanager
def running(ticket: Ticket) -> Iterator[None]:
    """Run a request's call with its ticket active; a call that ends without its guard having
    claimed (refused, replayed or failed) settles it as not shown."""
    token = _ACTIVE.set(ticket)
    try:
        yield
    finally:
        _ACTIVE.reset(token)
        ticket.settle(False)


def canonical_text(parts: Mapping[str, Any]) -> str:
    """A canonical public text of a key (sorted JSON), the model's tie-break."""
    return json.dumps(parts, sort_keys=True, default=str, separators=(",", ":"))
