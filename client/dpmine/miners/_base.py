"""What every client miner shares (DESIGN.md "Client miners": scikit-learn conventions).

Constructor parameters are keyword-only and stored unchanged; ``plan(dataset)`` prices the exact
calls of a run on the server (free, nothing read); ``mine(dataset)`` refuses to start when the
remaining budget cannot cover the plan, runs it, and returns ``self``. Results end in ``_``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Generic

from rich.progress import Progress

from dpmine.amounts import epsilon_sum, epsilon_text
from dpmine.connection import DatasetHandle
from dpmine.errors import BudgetExhaustedError, DPMineError, checked_parameters
from dpmine.significance import ResultT, Significance, Verdict, nothing_passed, significance_test
from dpmine.wire import EstimateResponse, PlannedCall, Receipt

__all__ = ["BaseMiner", "NotMinedError", "Plan", "SignificantMiner"]


class NotMinedError(DPMineError):
    """A result was read before ``mine()`` ran."""


@dataclass(frozen=True)
class Plan:
    """The exact calls of a run and their total cost, as priced by the server."""

    calls: list[PlannedCall]
    estimate: EstimateResponse

    @property
    def total_epsilon(self) -> float:
        """Total ε of the run."""
        return self.estimate.total_epsilon

    @property
    def fits(self) -> bool:
        """Whether your remaining budget covers the run."""
        return self.estimate.fits

    def __str__(self) -> str:
        """One line: the calls, their exact total, what you have left and whether it fits."""
        return (
            f"{len(self.calls)} calls, total ε={epsilon_text(self.estimate.total_epsilon_exact)}"
            f", remaining ε={epsilon_text(self.estimate.remaining_epsilon)}, fits: {self.fits}"
        )


@dataclass
class _Spent:
    receipts: list[Receipt] = field(default_factory=list)


class BaseMiner(ABC):
    """Shared plan/mine plumbing; a miner lists its calls in ``_calls`` and runs them in
    ``mine``."""

    @abstractmethod
    def _calls(self, dataset: DatasetHandle) -> list[PlannedCall]:
        """The exact calls of a run, for pricing."""

    def plan(self, dataset: DatasetHandle) -> Plan:
        """Price the run on the server; nothing is charged and no data is read. A parameter a
        request refuses raises :class:`~dpmine.errors.ParameterError`."""
        with checked_parameters():
            calls = self._calls(dataset)
        return Plan(calls=calls, estimate=dataset.estimate(calls))

    @contextmanager
    def _progress(self, total: int, label: str) -> Iterator[Callable[[], None]]:
        """An ``advance()`` callback: a transient progress bar when ``self.progress`` is set."""
        if not getattr(self, "progress", False):
            yield lambda: None
            return
        with Progress(transient=True) as bar:
            task = bar.add_task(label, total=total)
            yield lambda: bar.advance(task)

    def _check_budget(self, dataset: DatasetHandle) -> Plan:
        plan = self.plan(dataset)
        if not plan.fits:
            raise BudgetExhaustedError(
                "BudgetExhausted",
                f"this run costs ε={epsilon_text(plan.estimate.total_epsilon_exact)} but only "
                f"ε={epsilon_text(plan.estimate.remaining_epsilon)} remains; nothing was spent",
            )
        return plan

    @property
    def budget_spent_(self) -> float:
        """Total ε charged by the last ``mine()`` (exact sum of its receipts, as a float)."""
        return float(epsilon_sum(r.epsilon_exact for r in self.receipts_))

    @property
    def receipts_(self) -> list[Receipt]:
        """Receipts of every charged call of the last ``mine()``."""
        spent: _Spent | None = getattr(self, "_spent", None)
        if spent is None:
            raise NotMinedError(f"{type(self).__name__} has not mined yet; call mine() first")
        return spent.receipts


#: How to get more signal, whatever the miner (issue #21).
GENERAL_HINTS = (
    "a larger ε (less noise on every release)",
    "fewer attributes or columns in the views (fewer candidates per draw, fewer tests)",
)


class SignificantMiner(BaseMiner, Generic[ResultT]):
    """A redescription miner whose default results pass the noise-aware test of
    :mod:`dpmine.significance` (issue #21): ``results_`` the passing results, ``all_results_``
    every result, both by J's lower end, and ``significance_`` the summary (m, α, how many
    passed). ``min_jaccard`` is the run's J threshold."""

    min_jaccard: float

    @abstractmethod
    def _examined(self) -> tuple[list[ResultT], int]:
        """Every result of the last run and m, the number of results it examined."""

    def _hints(self) -> list[str]:
        """How to get more signal from this miner: its plan's weak draws first."""
        return list(GENERAL_HINTS)

    def significance(self, min_jaccard: float | None = None) -> Verdict[ResultT]:
        """The test on the last run's results, with the run's ``min_jaccard`` or another J
        threshold (post-processing, free)."""
        results, examined = self._examined()
        threshold = self.min_jaccard if min_jaccard is None else min_jaccard
        return significance_test(results, examined=examined, min_jaccard=threshold)

    @property
    def results_(self) -> list[ResultT]:
        """The results that pass the noise-aware test, by J's lower end (the default output)."""
        return self.significance().passed

    @property
    def all_results_(self) -> list[ResultT]:
        """Every result of the last run, by J's lower end."""
        return self.significance().ranked

    @property
    def significance_(self) -> Significance:
        """m, α, the J threshold and how many results passed."""
        return self.significance().summary

    def nothing_passed(self, min_jaccard: float | None = None) -> str | None:
        """None when some result passes; otherwise what to say: that none did, the ε spent and
        how to get more signal (:func:`dpmine.significance.nothing_passed`)."""
        verdict = self.significance(min_jaccard)
        if verdict.passed:
            return None
        spent = epsilon_text(epsilon_sum(r.epsilon_exact for r in self.receipts_))
        return nothing_passed(verdict.summary, spent=spent, hints=self._hints())
