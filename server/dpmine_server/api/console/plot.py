"""Cumulative ε spent over time as an SVG line chart, computed here and drawn by a template
(no script, no plotting library: the console's content security policy allows neither)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

__all__ = ["Charge", "Chart", "Series", "cumulative_chart"]

#: Colour-blind-safe palette (Okabe–Ito); one colour per line.
PALETTE = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442", "#000")
WIDTH, HEIGHT = 640, 240
LEFT, RIGHT, TOP, BOTTOM = 56, 12, 12, 28


@dataclass(frozen=True, slots=True)
class Charge:
    """One ledger charge: when, to which line (a dataset or an analyst), how much ε (exact)."""

    at: datetime
    label: str
    epsilon: Decimal


@dataclass(frozen=True, slots=True)
class Series:
    """One line: its label, colour, exact total and SVG polyline points."""

    label: str
    color: str
    total: Decimal
    points: str


@dataclass(frozen=True, slots=True)
class Chart:
    """A chart ready to draw: lines, axis labels and the y tick positions."""

    title: str
    series: tuple[Series, ...]
    start: str
    end: str
    y_ticks: tuple[tuple[float, str], ...]
    hidden: int
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    right: int = WIDTH - RIGHT
    top: int = TOP
    bottom: int = HEIGHT - BOTTOM


def _steps(charges: list[Charge]) -> list[tuple[datetime, Decimal]]:
    """The exact running total after each charge, in time order."""
    total = Decimal(0)
    steps = []
    for charge in sorted(charges, key=lambda c: c.at):
        total += charge.epsilon
        steps.append((charge.at, total))
    return steps


def _nice_max(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5, 10 × 10^k at or above ``value`` (1 for nothing spent)."""
    if value <= 0:
        return 1.0
    scale = 10.0 ** math.floor(math.log10(value))
    return next(step * scale for step in (1, 2, 2.5, 5, 10) if step * scale >= value)


def cumulative_chart(title: str, charges: Iterable[Charge], *, max_lines: int = 8) -> Chart:
    """Step lines of cumulative ε per label, the largest ``max_lines`` totals (DESIGN.md
    "The budget ledger": every charge stays, whatever the operation's outcome)."""
    by_label: dict[str, list[Charge]] = defaultdict(list)
    for charge in charges:
        by_label[charge.label].append(charge)
    steps = {label: _steps(items) for label, items in by_label.items()}
    ranked = sorted(steps, key=lambda label: (-steps[label][-1][1], label))
    shown = ranked[:max_lines]
    times = [at for label in shown for at, _ in steps[label]]
    if not times:
        return Chart(title, (), "", "", ((float(HEIGHT - BOTTOM), "0"),), 0)
    first, last = min(times), max(times)
    span = max((last - first).total_seconds(), 1.0)
    y_max = _nice_max(float(max(steps[label][-1][1] for label in shown)))

    def x(at: datetime) -> float:
        return LEFT + (WIDTH - RIGHT - LEFT) * (at - first).total_seconds() / span

    def y(total: Decimal | float) -> float:
        return HEIGHT - BOTTOM - (HEIGHT - BOTTOM - TOP) * float(total) / y_max

    series = []
    for index, label in enumerate(shown):
        points = [(x(first), y(0.0))]
        previous = Decimal(0)
        for at, total in steps[label]:
            points += [(x(at), y(previous)), (x(at), y(total))]
            previous = total
        points.append((x(last), y(previous)))
        text = " ".join(f"{px:.1f},{py:.1f}" for px, py in points)
        series.append(Series(label, PALETTE[index % len(PALETTE)], previous, text))
    ticks = tuple((y(y_max * k / 4), f"{y_max * k / 4:g}") for k in range(5))
    return Chart(
        title,
        tuple(series),
        first.strftime("%Y-%m-%d %H:%M"),
        last.strftime("%Y-%m-%d %H:%M"),
        ticks,
        len(ranked) - len(shown),
    )
