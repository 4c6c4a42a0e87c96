"""Admission control: a public limit on the data-touching requests one API process holds at once
(issue #23, "throughput with padding on"; DESIGN.md contract item 7).

A padded request occupies its API process from its arrival until its padded deadline, when its
answer is shown (services/timing.py). Past the limit (``DPMINE_MAX_IN_FLIGHT``), a new request
is refused at once with 429 ``Overloaded`` and ``Retry-After``, *before* anything is read or
charged: nothing is spent and nothing is lost, and the client library sends it again with the
same Idempotency-Key. Without the limit an overloaded process admits every request, runs out of
CPU and lets the admitted requests overrun their deadlines, which fail closed with their charge
kept: analysts lose budget for nothing.

Why the admission decision is not a timing channel. The decision for a request arriving at t
depends only on how many admitted requests are in flight at t. A request enters at its
arrival (a public time: the analysts chose it) and leaves when its answer is shown, which is

* at its padded deadline ``arrival + grid · ⌈budget / grid⌉``, a function of public values only
  (the operation, its public parameters, the dataset's public metadata, the configuration),
  for every request that was charged: a release, a replay, a failure after the charge and an
  overrun (settled at the deadline, services/release_guard.py) alike; or
* at once, for a request refused before its charge (invalid input, unknown dataset, budget
  exhausted, in progress): no data was read, and the refusal depends on the request and the
  ledger, not on the rows.

So the in-flight count at any time, and with it every admission decision, is a function of the
arrival times, the requests and public values: on two neighbouring tables the same schedule of
requests is admitted and refused identically (tests/privacy/test_audit_admission.py compares
the sequences exactly, and shows that a gate left when the kernel ends, a data-dependent time,
would tell the neighbours apart). The limit is public configuration, shown in ``/v1/health``.
This holds when overruns fail closed (production's only setting); in test mode's
``DPMINE_TIMING_OVERRUN=release`` an overrun leaves at its late, data-dependent release.

What the limit does not count: the kernel of an overrun is stopped in its abandoned thread at
its deadline, but a compiled call it is inside then runs to its return (services/release_guard.py,
``stoppable``); that CPU is the residual cost of the overrun event, whose probability the
budgets keep small.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from dpmine_server.errors import Overloaded

__all__ = ["RETRY_AFTER_S", "AdmissionGate"]

#: Seconds a refused client is asked to wait (the Retry-After header: whole seconds, RFC 9110).
RETRY_AFTER_S = 1


class AdmissionGate:
    """At most ``limit`` requests in flight in this process; the rest are refused at arrival."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"the in-flight limit must be at least 1, got {limit}")
        self._limit = limit
        self._in_flight = 0
        self._lock = threading.Lock()
        #: Told how many requests remain each time one leaves (services/collector.py): the
        #: in-flight count changes only at public moments, so what it starts does too.
        self.on_leave: Callable[[int], None] | None = None

    @property
    def limit(self) -> int:
        """The public limit (``DPMINE_MAX_IN_FLIGHT``)."""
        return self._limit

    @property
    def in_flight(self) -> int:
        """Requests admitted and not yet answered."""
        return self._in_flight

    def try_enter(self) -> bool:
        """Admit one request if fewer than ``limit`` are in flight (then :meth:`leave` must
        follow); False if the process is full."""
        with self._lock:
            if self._in_flight >= self._limit:
                return False
            self._in_flight += 1
            return True

    def leave(self) -> None:
        """One admitted request has been answered."""
        with self._lock:
            if self._in_flight <= 0:
                raise RuntimeError("AdmissionGate.leave without a matching try_enter")
            self._in_flight -= 1
            remaining = self._in_flight
        if self.on_leave is not None:
            self.on_leave(remaining)

    @contextmanager
    def admitted(self) -> Iterator[None]:
        """Hold a place for the body of the ``with`` block (the whole padded request, up to
        its answer), or raise :class:`~dpmine_server.errors.Overloaded` (429) at once, before
        anything is read or charged."""
        if not self.try_enter():
            raise Overloaded(
                f"this server is answering its limit of {self._limit} requests at once "
                f"(DPMINE_MAX_IN_FLIGHT); nothing was charged. Send the request again after "
                f"Retry-After seconds with the same Idempotency-Key (the dpmine client does)",
                retry_after=RETRY_AFTER_S,
            )
        try:
            yield
        finally:
            self.leave()
