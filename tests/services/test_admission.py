"""The admission gate (services/admission.py): its limit, its refusal, and the audit rule that
its decisions follow public times only.

:func:`admission_pattern` replays a fixed schedule of arrivals on a real
:class:`AdmissionGate`; each admitted request leaves at the time a ``leave_at`` rule gives it.
The server's rule (leave at the padded deadline, a public time) gives the same sequence of
admitted/refused on two neighbouring tables whose kernel times differ; a gate left when the
kernel ends (a data-dependent time) does not, and the audit flags it. The same exact comparison
is made over real HTTP in tests/privacy/test_audit_admission.py.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence

import pytest

from dpmine_server.errors import Overloaded
from dpmine_server.services.admission import RETRY_AFTER_S, AdmissionGate

#: Two requests at once, one while both are held, one after their deadlines.
ARRIVALS = (0.0, 0.0, 0.2, 0.9)
#: The public padded deadline of every request (seconds after its arrival).
DEADLINE_S = 0.55
#: The adversarial kernel's time on each neighbour: nothing on D, its whole budget on D'.
KERNEL_S = {"D": 0.0, "D'": 0.4}
LIMIT = 2


def admission_pattern(
    arrivals: Sequence[float], leave_at: Callable[[int, float], float], limit: int
) -> tuple[bool, ...]:
    """Admitted (True) or refused for each arrival, in order, on a gate of ``limit`` places;
    admitted request ``i`` arriving at ``t`` leaves at ``leave_at(i, t)`` (leaves before
    arrivals at the same instant)."""
    gate = AdmissionGate(limit)
    leaving: list[float] = []
    pattern = []
    for index, arrival in enumerate(arrivals):
        while leaving and leaving[0] <= arrival:
            heapq.heappop(leaving)
            gate.leave()
        admitted = gate.try_enter()
        if admitted:
            heapq.heappush(leaving, leave_at(index, arrival))
        pattern.append(admitted)
    return tuple(pattern)


def leaks(patterns: dict[str, tuple[bool, ...]]) -> bool:
    """The audit: the neighbours' sequences must be equal, exactly."""
    return len(set(patterns.values())) > 1


def test_the_limit_admits_and_refuses() -> None:
    gate = AdmissionGate(2)
    assert (gate.limit, gate.in_flight) == (2, 0)
    assert gate.try_enter()
    assert gate.try_enter()
    assert not gate.try_enter()
    gate.leave()
    assert gate.in_flight == 1
    with gate.admitted():
        assert gate.in_flight == 2
        with pytest.raises(Overloaded) as refused, gate.admitted():
            pass  # pragma: no cover (refused before the body)
    assert gate.in_flight == 1
    assert refused.value.status_code == 429
    assert refused.value.headers == {"Retry-After": str(RETRY_AFTER_S)}
    assert "DPMINE_MAX_IN_FLIGHT" in refused.value.message
    assert "nothing was charged" in refused.value.message


def test_a_failing_request_gives_its_place_back() -> None:
    gate = AdmissionGate(1)
    with pytest.raises(RuntimeError), gate.admitted():
        raise RuntimeError("the request failed")
    assert gate.in_flight == 0
    with pytest.raises(RuntimeError, match="without a matching"):
        gate.leave()
    with pytest.raises(ValueError, match="at least 1"):
        AdmissionGate(0)


def test_leaving_at_the_padded_deadline_hides_the_kernel_time() -> None:
    patterns = {
        side: admission_pattern(ARRIVALS, lambda _i, t: t + DEADLINE_S, LIMIT) for side in KERNEL_S
    }
    assert patterns["D"] == (True, True, False, True)
    assert not leaks(patterns)


def test_the_audit_flags_a_gate_left_when_the_kernel_ends() -> None:
    def kernel_end(side: str) -> Callable[[int, float], float]:
        return lambda _index, arrival: arrival + KERNEL_S[side]

    patterns = {side: admission_pattern(ARRIVALS, kernel_end(side), LIMIT) for side in KERNEL_S}
    assert patterns == {"D": (True, True, True, True), "D'": (True, True, False, True)}
    assert leaks(patterns)
