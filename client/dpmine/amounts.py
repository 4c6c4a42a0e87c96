"""Privacy amounts as people read them: ``epsilon_text(0.7) == "0.7"``, never ``0.7000000001``
or ``7e-01``.

The server keeps every amount exactly, in whole pico-ε (10^-12 ε), and sends it both as an exact
decimal string (``epsilon_exact``) and as the nearest float. An amount with at most 15
significant digits (every amount below 1000 ε, and any amount of fewer decimals) is the float
rounded to whole pico-ε, so both forms print the same text here. A run may spend a few
nano-ε less than the ε it was given (each call's share is rounded *down* to whole nano- or pico-ε,
so that the total never exceeds it): ``0.999999988`` is then the exact amount charged, not float
noise.
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import ROUND_HALF_EVEN, Decimal

__all__ = ["PICO", "epsilon_sum", "epsilon_text"]

#: The ledger's unit: every amount is a whole number of pico-ε (10^-12 ε).
PICO = Decimal("1e-12")


def epsilon_text(value: float | int | str | Decimal) -> str:
    """The amount as a plain decimal: no exponent, no trailing zeros (``"2"``, ``"0.25"``).

    A string or Decimal is shown exactly. A float is rounded to the ledger's unit, the pico-ε
    (``0.1 + 0.2`` shows as ``0.3``): no amount the server keeps has a finer part.
    """
    if isinstance(value, bool):
        raise TypeError("a privacy amount is a number, not a Boolean")
    if isinstance(value, float):
        exact = Decimal(repr(value)).quantize(PICO, rounding=ROUND_HALF_EVEN)
    else:
        exact = Decimal(value)
    text = format(exact.normalize(), "f")
    return "0" if text in {"-0", "0"} else text


def epsilon_sum(amounts: Iterable[str]) -> Decimal:
    """The exact sum of exact decimal strings (e.g. the ``epsilon_exact`` of receipts)."""
    return sum((Decimal(amount) for amount in amounts), Decimal(0))
