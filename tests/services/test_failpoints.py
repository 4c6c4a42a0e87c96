"""``DPMINE_TEST_FAIL_CALLS`` (services/failpoints.py): the N-th call of an operation fails after
its charge, in test mode only; a bad entry or another environment is refused with a message
that says what to fix. The end-to-end use is tests/e2e/test_run_stops.py."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from dpmine_server.services.failpoints import FailPoints, InjectedFailure, parse_fail_calls
from dpmine_server.settings import Settings


def test_entries_name_an_operation_and_its_call_numbers() -> None:
    chosen = parse_fail_calls(" serenade.extend_one@2, tree.leaf_counts@1,serenade.extend_one@5 ")
    assert chosen == {
        "serenade.extend_one": frozenset({2, 5}),
        "tree.leaf_counts": frozenset({1}),
    }
    assert parse_fail_calls("") == {}


@pytest.mark.parametrize("entry", ["extend_one@2", "serenade.extend_one@0", "count.noisy", "a.b@x"])
def test_a_malformed_entry_is_refused(entry: str) -> None:
    with pytest.raises(ValueError, match="is not OPERATION@N"):
        parse_fail_calls(entry)


def test_only_the_chosen_calls_fail_counted_per_operation() -> None:
    points = FailPoints(parse_fail_calls("count.noisy@2,count.noisy@4"))
    outcomes = []
    for _ in range(5):
        try:
            points.check("count.noisy")
            points.check("tree.leaf_counts")  # not chosen: never fails, never counted
        except InjectedFailure:
            outcomes.append("failed")
        else:
            outcomes.append("ran")
    assert outcomes == ["ran", "failed", "ran", "failed", "ran"]


def test_settings_allow_it_in_test_mode_only() -> None:
    assert Settings(environment="test", test_fail_calls="count.noisy@1").test_fail_calls
    with pytest.raises(ValidationError, match="allowed only with DPMINE_ENVIRONMENT=test"):
        Settings(environment="development", test_fail_calls="count.noisy@1")
    with pytest.raises(ValidationError, match="is not OPERATION@N"):
        Settings(environment="test", test_fail_calls="count.noisy@first")
