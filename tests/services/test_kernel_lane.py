"""The kernel lane (services/kernel_lane.py): public waits in arrival order, one kernel at a
time, every kernel done by its public bound, and the same waits whatever the data.

The neighbour audit at the end replays one schedule of concurrent requests whose kernels take
their priced seconds on D' and nothing on D, through real threads, and compares the public
waits exactly; a lane whose free time follows the kernels' real ends (a data-dependent time)
must be told apart by the same comparison. The HTTP audit of the same property is
tests/privacy/test_audit_kernel_lane.py."""

from __future__ import annotations

import itertools
import threading
import time

import pytest

from dpmine_server.services.kernel_lane import KernelLane, LanePlace


class _Clock:
    """A settable monotonic clock."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_request_alone_waits_for_nothing() -> None:
    lane = KernelLane(_Clock())
    place = lane.register(10.0)
    assert place.reserve(pre=0.05, kernel=0.3) == 0.0
    assert lane.free_at() == pytest.approx(10.35)
    place.leave()
    later = lane.register(11.0)  # after the first one's bound
    assert later.reserve(pre=0.05, kernel=0.1) == 0.0


def test_requests_that_arrive_together_wait_for_the_priced_kernels_before_them() -> None:
    lane = KernelLane(_Clock())
    places = [lane.register(10.0 + 0.001 * i) for i in range(3)]
    waits = [
        place.reserve(pre=0.05, kernel=kernel)
        for place, kernel in zip(places, (0.3, 0.2, 0.1), strict=True)
    ]
    # S₀ = 10.05; S₁ = max(10.051, 10.35) = 10.35; S₂ = max(10.052, 10.55) = 10.55.
    assert waits == pytest.approx([0.0, 0.299, 0.498])
    assert lane.free_at() == pytest.approx(10.65)


def test_a_place_that_leaves_unreserved_costs_the_others_nothing() -> None:
    lane = KernelLane(_Clock())
    first, second = lane.register(10.0), lane.register(10.0)
    first.leave()  # a job-mode operation, or a request refused before it was priced
    assert second.reserve(pre=0.05, kernel=0.2) == 0.0


def test_reserving_twice_or_after_leaving_is_a_bug() -> None:
    lane = KernelLane(_Clock())
    place = lane.register(10.0)
    place.reserve(pre=0.0, kernel=0.1)
    with pytest.raises(RuntimeError, match="reserves once"):
        place.reserve(pre=0.0, kernel=0.1)
    with pytest.raises(ValueError, match="non-negative"):
        lane.register(10.0).reserve(pre=-1.0, kernel=0.1)


def _reserve_in_thread(
    place: LanePlace, kernel: float, waits: dict[int, float]
) -> threading.Thread:
    thread = threading.Thread(
        target=lambda: waits.__setitem__(place.number, place.reserve(pre=0.0, kernel=kernel))
    )
    thread.start()
    return thread


def test_a_reservation_waits_for_every_earlier_arrival_whatever_the_threads_order() -> None:
    """The later arrival reserves first (its thread was quicker) yet is queued second: the
    waits are those of the arrival order."""
    lane = KernelLane(_Clock())
    early, late = lane.register(10.0), lane.register(10.0)
    waits: dict[int, float] = {}
    late_thread = _reserve_in_thread(late, 0.1, waits)
    time.sleep(0.05)
    assert late.number not in waits, "reserved before an earlier arrival had"
    early_thread = _reserve_in_thread(early, 0.3, waits)
    for thread in (early_thread, late_thread):
        thread.join(timeout=5)
    assert waits == {early.number: 0.0, late.number: pytest.approx(0.3)}


def test_a_stalled_earlier_arrival_is_passed_over_after_the_order_wait(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr("dpmine_server.services.kernel_lane.ORDER_WAIT_SECONDS", 0.05)
    lane = KernelLane()
    lane.register(10.0)  # never reserves nor leaves
    late = lane.register(10.0)
    assert late.reserve(pre=0.0, kernel=0.1) == 0.0
    assert "passed over" in caplog.text


def test_kernels_take_their_turns_one_at_a_time_in_arrival_order() -> None:
    lane = KernelLane()
    places = [lane.register(time.monotonic()) for _ in range(4)]
    for place in places:
        place.reserve(pre=0.0, kernel=0.01)
    spans: list[tuple[int, float, float]] = []
    lock = threading.Lock()

    def kernel(place: LanePlace) -> None:
        place.take_turn(lambda: False)
        start = time.monotonic()
        time.sleep(0.02)
        with lock:
            spans.append((place.number, start, time.monotonic()))
        place.leave()

    threads = [threading.Thread(target=kernel, args=(place,)) for place in reversed(places)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=5)
    assert [number for number, _, _ in spans] == [place.number for place in places]
    for (_, _, end), (_, start, _) in itertools.pairwise(spans):
        assert start >= end, "two kernels of the lane overlapped"


def test_a_kernel_whose_deadline_passed_stops_waiting_for_its_turn() -> None:
    lane = KernelLane()
    holder, waiter = lane.register(1.0), lane.register(1.0)
    holder.reserve(pre=0.0, kernel=1.0)
    waiter.reserve(pre=0.0, kernel=1.0)
    expired = threading.Event()
    done = threading.Event()

    def wait_for_turn() -> None:
        waiter.take_turn(expired.is_set)
        done.set()

    thread = threading.Thread(target=wait_for_turn)
    thread.start()
    assert not done.wait(0.05)
    expired.set()
    assert done.wait(2)
    thread.join(timeout=2)
    assert lane.waiting() == 2  # still queued: its own call leaves when it unwinds


def test_a_place_left_by_its_call_thread_is_not_left_by_the_route() -> None:
    lane = KernelLane()
    place = lane.register(1.0)
    place.reserve(pre=0.0, kernel=0.1)
    place.hand_over()
    place.leave_unless_handed_over()
    assert lane.waiting() == 1
    place.leave()
    place.leave()  # idempotent
    assert lane.waiting() == 0


# -- the neighbour audit -------------------------------------------------------------------


class _RealEndLane(KernelLane):
    """Broken variant: the free time follows the kernels' real ends (their data), as a lane
    that frees itself when a kernel finishes would."""

    def leave(self, place: LanePlace) -> None:
        with self._changed:
            if place.number in self._queued:
                self._free_at = time.monotonic()
        super().leave(place)


#: The schedule: arrivals (seconds after the start) and priced kernels (seconds).
_SCHEDULE = ((0.0, 0.06), (0.005, 0.04), (0.01, 0.05), (0.08, 0.03), (0.3, 0.02))
_PRE = 0.01
#: Thread wake-ups of a loaded test machine, allowed past a kernel's bound.
_SLACK = 0.05


def _replay(lane: KernelLane, spins_on_data: bool) -> tuple[list[float], list[int]]:
    """Run the schedule: each request registers at its arrival, reserves, takes its turn and
    runs its kernel for its priced seconds when ``spins_on_data`` (D'), for nothing on D.
    Returns the public waits in arrival order and the requests whose kernel ended after its
    public bound."""
    start = time.monotonic()
    waits: dict[int, float] = {}
    overran: list[int] = []
    threads: list[threading.Thread] = []

    def request(place: LanePlace, kernel: float) -> None:
        wait = place.reserve(_PRE, kernel)
        waits[place.number] = wait
        bound = place.arrival + _PRE + wait + kernel
        place.take_turn(lambda: False)
        if spins_on_data:
            end = time.monotonic() + kernel
            while time.monotonic() < end:
                pass
        if time.monotonic() > bound + _SLACK:
            overran.append(place.number)
        place.leave()

    numbers = []
    for at, kernel in _SCHEDULE:
        time.sleep(max(start + at - time.monotonic(), 0.0))
        place = lane.register(start + at)  # the public arrival of the schedule
        numbers.append(place.number)
        thread = threading.Thread(target=request, args=(place, kernel))
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join(timeout=10)
    return [round(waits[number], 6) for number in numbers], overran


def test_the_waits_are_the_same_on_neighbouring_data_and_every_kernel_ends_in_time() -> None:
    (on_d, late_d), (on_d_prime, late_d_prime) = (
        _replay(KernelLane(), False),
        _replay(KernelLane(), True),
    )
    assert on_d == on_d_prime
    assert on_d == pytest.approx([0.0, 0.055, 0.09, 0.07, 0.0], abs=1e-6)
    assert late_d == late_d_prime == []


def test_the_comparison_flags_a_lane_freed_at_the_kernels_real_ends() -> None:
    """The audit's broken variant: the same comparison tells D and D' apart."""
    (on_d, _), (on_d_prime, _) = _replay(_RealEndLane(), False), _replay(_RealEndLane(), True)
    assert on_d != on_d_prime
