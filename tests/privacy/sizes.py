"""Short and long runs of one statistical audit (the ``slow`` marker; ``make audit``).

Every audit runs by default at a short sample size and again, marked ``slow``, at its long one.
The short size is chosen so that the audit's broken variant is still flagged at that size (the
power check runs at the same size as the passing audit, through the same kernel), so the default
run covers every audited path and can still fail; the long run tightens the bounds, and the
checks that a passing audit is not vacuous (its lower bound above some floor) hold only there.
"""

from __future__ import annotations

import pytest

__all__ = ["LONG", "SHORT", "short_and_long"]

#: The ids of the two runs (``pytest -k short`` / ``-k long`` select one of them).
SHORT = "short"
LONG = "long"


def short_and_long(argument: str, short: int, long: int) -> pytest.MarkDecorator:
    """Parametrize ``argument`` with ``short`` (default run) and ``long`` (marked ``slow``)."""
    if not 0 < short < long:
        raise ValueError(f"the short size must lie in (0, long): {short}, {long}")
    return pytest.mark.parametrize(
        argument,
        [pytest.param(short, id=SHORT), pytest.param(long, id=LONG, marks=pytest.mark.slow)],
    )
