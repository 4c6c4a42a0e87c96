"""The noise-aware significance test of every redescription miner (issue #21): a claim that
dpmine shows by default still holds after the noise. Pure post-processing of released values
and public quantities: it reads no data and costs no budget.

Every result of a run carries *joint intervals* (:class:`~dpmine.intervals.StatisticIntervals`
with the excess and the p-value) from a box of its true cells (:mod:`dpmine.intervals`). A run
sets its boxes so that **all of them hold the truth together with probability ≥ 1 − α**
(α = :data:`ALPHA` = 0.01), for every true table and however its results were selected:

* Serenade gives the box of each quality check the miss α/M, M the quality checks the run can
  make, fixed before the first one; each check draws fresh noise on a redescription chosen
  before it, so the union bound gives P(some box misses) ≤ M·α/M = α
  (:mod:`dpmine.miners.greedy`). A box is seven ranges, each missing with probability
  ≤ α/(7M): the four cells and three signed sums of them, D = E10 + E01, E11 − D and
  E11 + E00 − D, whose noise ranges are narrower than their cells' added and which cut off
  the box's corners (E11 low with E10 and E01 high) where the p-value and the excess are worst.
* The tree miners give each of their R leaf-count releases the miss α/R, split by a union
  bound over every rectangle of released cells that a query's four cells can sum and the three
  signed sums of each pair of queries, so the boxes hold for every query the extraction could
  pick from that release (:mod:`dpmine.miners.trees`).

A result **passes** when, at its intervals' unfavourable ends (:func:`passes`):

* p ≤ α/m: the p-value's upper end is at most α/m, m the number of results the run examined
  (every candidate whose statistics were computed from a release; a public count). This is
  Bonferroni's correction for m tests: a claim about the data, beyond the noise;
* J − J_ind > 0: the lower end of the excess over independence is positive;
* J ≥ min_jaccard: J's lower end is at least the run's ``min_jaccard``.

The p-value's upper ends are computed as the test reads them, inside
:func:`dpmine.intervals.p_value_decision` at α/m: the search over a box goes on until it is
clear on which side of α/m its largest p-value lies (or its rounds run out); every stopping
point is an upper end, so the guarantee below does not depend on it.

Proof of the guarantee: on the event that every box of the run holds the true cells
(probability ≥ 1 − α), every interval holds its statistic, so every passing result has true
p ≤ α/m, true excess > 0 and true J ≥ min_jaccard. Hence the probability that any shown claim
is false because of the noise is at most α.

Miners show the passing results by default, sorted by J's lower end (:func:`rank`), and keep
the rest one step away (``all_results_``, the CLI's ``--all``), each with the checks it failed
(:func:`failed_checks`); the summary counts the results that failed each check, which says
what more signal would have to tighten.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import ROUND_FLOOR, Decimal
from typing import Generic, Literal, Protocol, TypeVar

from dpmine.intervals import StatisticIntervals, p_value_decision

__all__ = [
    "ALPHA",
    "CHECKS",
    "CHECK_LABELS",
    "Check",
    "HasJointIntervals",
    "ResultT",
    "Significance",
    "Verdict",
    "counted",
    "failed_checks",
    "nothing_passed",
    "passes",
    "rank",
    "significance_test",
    "verdict_fields",
    "verdict_text",
]

#: Probability that any claim a run shows is false because of the noise (issue #21).
ALPHA = 0.01


class HasJointIntervals(Protocol):
    """A result with the run's joint intervals of its statistics."""

    @property
    def joint_intervals(self) -> StatisticIntervals: ...


ResultT = TypeVar("ResultT", bound=HasJointIntervals)


#: The checks of the test, as JSON, CSV and :meth:`Verdict.failed_checks` name them: the
#: p-value's upper end ≤ α/m, the excess's lower end > 0, J's lower end ≥ ``min_jaccard``.
Check = Literal["p_value", "excess", "jaccard"]
CHECKS: tuple[Check, ...] = ("p_value", "excess", "jaccard")


def failed_checks(
    intervals: StatisticIntervals, *, threshold: float, min_jaccard: float
) -> tuple[Check, ...]:
    """The checks of :data:`CHECKS` that one result fails, in that order: ``p_value`` unless
    the p-value's upper end is ≤ ``threshold`` (α/m), ``excess`` unless the excess's lower end
    is > 0, ``jaccard`` unless J's lower end is ≥ ``min_jaccard``. A result without a p-value
    or an excess (the "paper" quality mode releases no supports) fails those checks: nothing
    bounds them. An end that is NaN fails its check."""
    p, excess = intervals.p_value, intervals.excess
    failed: list[Check] = []
    if p is None or not p.high <= threshold:
        failed.append("p_value")
    if excess is None or not excess.low > 0:
        failed.append("excess")
    if not intervals.jaccard.low >= min_jaccard:
        failed.append("jaccard")
    return tuple(failed)


#: Short names of the checks in tables (the ``passes`` column of ``--all``).
CHECK_LABELS: dict[Check, str] = {"p_value": "p", "excess": "excess", "jaccard": "J"}


def verdict_text(failed: Sequence[Check]) -> str:
    """A result's verdict in a table: ``yes``, or ``no`` with the checks it failed
    (``no: excess, p``)."""
    if not failed:
        return "yes"
    return "no: " + ", ".join(CHECK_LABELS[check] for check in failed)


def verdict_fields(failed: Sequence[Check]) -> dict[str, object]:
    """A result's verdict in JSON: ``significant`` and ``failed_checks`` (:data:`CHECKS`
    names)."""
    return {"significant": not failed, "failed_checks": list(failed)}


def passes(intervals: StatisticIntervals, *, threshold: float, min_jaccard: float) -> bool:
    """The test of one result: it fails none of :func:`failed_checks`."""
    return not failed_checks(intervals, threshold=threshold, min_jaccard=min_jaccard)


def rank(results: Iterable[ResultT]) -> list[ResultT]:
    """``results`` by the lower end of J's joint interval, highest first; ties keep their
    order. A noisy J says little by itself (``1.000 ± 5.5`` on a true support of 0), its lower
    end is what the data support."""
    return sorted(results, key=lambda result: -result.joint_intervals.jaccard.low)


@dataclass(frozen=True, slots=True)
class Significance:
    """What the test did on one run: α, m (results examined), the J threshold, how many
    results there are and how many passed."""

    alpha: float
    examined: int
    min_jaccard: float
    total: int
    passed: int
    #: How many results failed each check (:data:`CHECKS` order; a result can fail several).
    failed: tuple[tuple[Check, int], ...] = ()

    @property
    def threshold(self) -> float:
        """α/m, the largest p-value a passing result may have (α when nothing was examined)."""
        return self.alpha / max(self.examined, 1)

    @property
    def level(self) -> float:
        """1 − α: the probability that every interval of the run holds together."""
        return 1.0 - self.alpha

    def rule(self) -> str:
        """The test in words, with its numbers."""
        return (
            f"p ≤ α/m = {self.alpha:g}/{self.examined} = {self.threshold:.2g}, J − J_ind > 0 "
            f"and J ≥ {self.min_jaccard:g} at the unfavourable ends of intervals that hold "
            f"together with probability ≥ {100 * self.level:g} %"
        )

    def check_text(self, check: Check) -> str:
        """One check in words, with its number (``p ≤ α/m = 0.00025``)."""
        if check == "p_value":
            return f"p ≤ α/m = {self.threshold:.2g}"
        if check == "excess":
            return "J − J_ind > 0"
        return f"J ≥ {self.min_jaccard:g}"

    def failures(self) -> str | None:
        """Which checks the results that did not pass failed, most often first (``of the 9
        others, 9 fail J − J_ind > 0 and 1 fails p ≤ α/m = 0.00025``); None when all passed."""
        others = self.total - self.passed
        counts = sorted(
            ((count, check) for check, count in self.failed if count),
            key=lambda pair: -pair[0],
        )
        if not others or not counts:
            return None
        if others == 1:
            checks = _listed([self.check_text(check) for _count, check in counts])
            return f"{'the one result' if self.passed == 0 else 'the other one'} fails {checks}"
        parts = [
            f"{count} {'fails' if count == 1 else 'fail'} {self.check_text(check)}"
            for count, check in counts
        ]
        whom = f"the {others} results" if self.passed == 0 else f"the {others} others"
        return f"of {whom}, {_listed(parts)}"

    def describe(self) -> str:
        """``3 of 12 results pass the noise-aware test: p ≤ α/m = …; of the 9 others, …``."""
        failures = self.failures()
        return f"{self.passed} of {self.total} results pass the noise-aware test: {self.rule()}" + (
            "" if failures is None else f"; {failures}"
        )

    def as_dict(self) -> dict[str, float | int | dict[str, int]]:
        """The summary for JSON."""
        return {
            "alpha": self.alpha,
            "examined": self.examined,
            "p_threshold": self.threshold,
            "min_jaccard": self.min_jaccard,
            "level": self.level,
            "total": self.total,
            "passed": self.passed,
            "failed_checks": dict(self.failed),
        }


@dataclass(frozen=True)
class Verdict(Generic[ResultT]):
    """The passing results and every result, both ranked (:func:`rank`), and the summary."""

    passed: list[ResultT]
    ranked: list[ResultT]
    summary: Significance
    #: The checks each result failed, by the result's ``id`` (the results are held in ``ranked``).
    failures: dict[int, tuple[Check, ...]]

    def failed_checks(self, result: ResultT) -> tuple[Check, ...]:
        """The checks ``result`` (one of ``ranked``) failed; empty when it passed."""
        return self.failures[id(result)]


def significance_test(
    results: Sequence[ResultT], *, examined: int, min_jaccard: float, alpha: float = ALPHA
) -> Verdict[ResultT]:
    """Apply :func:`passes` with threshold α/m (m = ``examined``) to every result.

    ``examined`` must count every result whose statistics the run computed (at least the
    results given), so that α/m is Bonferroni's correction for what was looked at."""
    if not 0 < alpha < 1:  # NaN fails too
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    if not 0 <= min_jaccard <= 1:
        raise ValueError(f"min_jaccard must be in [0, 1], got {min_jaccard!r}")
    if examined < len(results):
        raise ValueError(f"{len(results)} results cannot come from {examined} examined")
    threshold = alpha / max(examined, 1)
    with p_value_decision(threshold):  # intervals read here aim their p-value search at α/m
        ranked = rank(results)
        failures = {
            id(r): failed_checks(r.joint_intervals, threshold=threshold, min_jaccard=min_jaccard)
            for r in ranked
        }
    passed = [r for r in ranked if not failures[id(r)]]
    summary = Significance(
        alpha=alpha,
        examined=examined,
        min_jaccard=min_jaccard,
        total=len(results),
        passed=len(passed),
        failed=tuple(
            (check, sum(check in failed for failed in failures.values())) for check in CHECKS
        ),
    )
    return Verdict(passed=passed, ranked=ranked, summary=summary, failures=failures)


def nothing_passed(
    summary: Significance, *, spent: str, hints: Sequence[str], unit: str = "ε"
) -> str:
    """What to say when no result passes: that nothing did and why, the budget spent (in
    ``unit``: "ρ" on a zCDP dataset), and how to get more signal (``hints``: the plan's weak
    draws first, then the general remedies)."""
    remedies = "; ".join(hints) if hints else "a larger ε"
    failures = summary.failures()
    why = "" if failures is None else f" {failures[0].upper()}{failures[1:]}."
    listed = (
        f" all_results_ (CLI: --all) lists the {counted(summary.total, 'result')} that did "
        "not pass, each with the checks it failed."
        if summary.total
        else ""
    )
    return (
        f"No result passes the noise-aware test ({summary.rule()}).{why} {unit} spent: "
        f"{spent}. For more signal: {remedies}.{listed}"
    )


def _listed(parts: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"


def percent_at_least(probability: float) -> str:
    """``probability`` as a percentage that never overstates it: exact when its decimal form is
    short ("99%", "99.85%", "99.9999999%"), otherwise rounded down; "≥ 100%" is never printed
    for a probability below 1."""
    exact = Decimal(repr(probability)) * 100
    exponent = exact.normalize().as_tuple().exponent
    if isinstance(exponent, int) and -exponent <= 12:
        return f"{exact.normalize():f}%"
    for places in range(2, 16):
        floored = exact.quantize(Decimal(1).scaleb(-places), rounding=ROUND_FLOOR)
        if floored < 100:
            return f"{floored.normalize():f}%"
    return f"{exact:f}%"


def counted(count: int, noun: str) -> str:
    """``count`` and ``noun`` in words that agree in number: "1 result", "3 results"."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"
