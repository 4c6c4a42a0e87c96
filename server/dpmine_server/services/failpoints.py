"""Test mode only: make chosen calls fail after their charge (``DPMINE_TEST_FAIL_CALLS``).

A charged call can fail once its budget is reserved: its kernel overruns its padded deadline
(services/release_guard.py), raises, or its worker dies. The server then answers
``OperationFailed``; the charge stands and nothing is released. What an analyst's miner does
next (it keeps what earlier calls released and says where it stopped) must be tested against a
real server at a chosen call of a real run, and no overrun can be placed that precisely. So in
test mode, ``DPMINE_TEST_FAIL_CALLS="serenade.extend_one@2,tree.leaf_counts@1"`` makes the
2nd ``serenade.extend_one`` call and the 1st ``tree.leaf_counts`` call that this process
computes raise inside the kernel step, after the charge, on the same path as a kernel that
raises (each part of a batch counts as one call). Counts are per process: a job runs in a
worker process, which counts its own calls.

Settings refuse the variable outside ``DPMINE_ENVIRONMENT=test`` (as ``DPMINE_TEST_SEED``), so
no deployment can carry it. It reads no data: whether a call fails depends only on the
operation's name and how many calls of it the process ran before.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping

__all__ = ["FailPoints", "InjectedFailure", "parse_fail_calls"]

_ENTRY = re.compile(r"^(?P<operation>[a-z_]+(?:\.[a-z_]+)+)@(?P<call>[1-9][0-9]{0,8})$")


class InjectedFailure(RuntimeError):
    """The failure ``DPMINE_TEST_FAIL_CALLS`` asked for (test mode only)."""


def parse_fail_calls(text: str) -> dict[str, frozenset[int]]:
    """``"op@N,op@M,..."`` as {operation: the 1-based call numbers that fail}; a ValueError
    says what is wrong with an entry."""
    chosen: dict[str, set[int]] = {}
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        match = _ENTRY.match(entry)
        if match is None:
            raise ValueError(
                f"{entry!r} is not OPERATION@N (e.g. serenade.extend_one@2: the 2nd call of "
                "that operation fails after its charge)"
            )
        chosen.setdefault(match["operation"], set()).add(int(match["call"]))
    return {operation: frozenset(calls) for operation, calls in chosen.items()}


class FailPoints:
    """Counts the calls of each named operation in this process and fails the chosen ones."""

    def __init__(self, chosen: Mapping[str, frozenset[int]]) -> None:
        self._chosen = dict(chosen)
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def check(self, operation: str) -> None:
        """Count one call of ``operation``; raise :class:`InjectedFailure` if it is chosen."""
        calls = self._chosen.get(operation)
        if calls is None:
            return
        with self._lock:
            number = self._counts.get(operation, 0) + 1
            self._counts[operation] = number
        if number in calls:
            raise InjectedFailure(f"DPMINE_TEST_FAIL_CALLS: call {number} of {operation} fails")
