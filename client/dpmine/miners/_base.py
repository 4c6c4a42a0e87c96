"""What every client miner shares (DESIGN.md "Client miners": scikit-learn conventions).

Constructor parameters are keyword-only and stored unchanged; obviously invalid ones (``k=0``,
a negative ε) raise :class:`~dpmine.errors.ParameterError` as the miner is constructed, saying
what to fix. ``plan(dataset)`` prices the exact calls of a run on the server (free, nothing
read); ``mine(dataset)`` refuses to start when the remaining budget cannot cover the plan, runs
it, and returns ``self``. Results end in ``_``. A miner prints as its class, its parameters
that differ from the defaults and what it found (``SerenadeES(epsilon=2) · mined: 3 of 12
results pass``).
"""

from __future__ import annotations

import inspect
import reprlib
import threading
import warnings
from abc import ABCMeta, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Generic, Literal

from rich.progress import Progress

from dpmine.amounts import epsilon_text
from dpmine.connection import DatasetHandle
from dpmine.errors import (
    BudgetExhaustedError,
    ChargeKeptNoResultError,
    DPMineError,
    OperationFailedError,
    checked_parameters,
)
from dpmine.frames import data_frame
from dpmine.miners._rho import amount_text, rho_lines, spent_in_unit, zcdp_delta
from dpmine.significance import ResultT, Significance, Verdict, nothing_passed, significance_test
from dpmine.wire import EstimateResponse, OperationRequest, PlannedCall, Receipt, operation_for

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "STOPPING_ERRORS",
    "BaseMiner",
    "NotMinedError",
    "Plan",
    "RunStopped",
    "RunStoppedWarning",
    "SignificantMiner",
]

#: Errors after which a run keeps what it already released instead of losing it: a charged
#: call that released nothing (an overrun of its padded deadline, a kernel error, a lost
#: worker; the charge stands) and a call refused because the budget ran out meanwhile (nothing
#: charged). Any other error (a refused parameter, a lost connection) still ends ``mine()``.
STOPPING_ERRORS = (OperationFailedError, ChargeKeptNoResultError, BudgetExhaustedError)


class RunStoppedWarning(UserWarning):
    """``mine()`` returned early: a call failed and the run kept what it had released
    (``stopped_`` says which call and why)."""


class NotMinedError(DPMineError):
    """A result was read before ``mine()`` ran."""


@dataclass(frozen=True)
class Plan:
    """The exact calls of a run and their total cost, as priced by the server."""

    calls: list[PlannedCall]
    estimate: EstimateResponse
    #: zCDP datasets: the run's ρ budget, and the δ at which its ρ is shown as (ε, δ).
    budget_rho: float | None = None
    delta: float | None = None

    @property
    def total_epsilon(self) -> float:
        """Total ε of the run."""
        return self.estimate.total_epsilon

    @property
    def fits(self) -> bool:
        """Whether your remaining budget covers the run."""
        return self.estimate.fits

    def __str__(self) -> str:
        """One line: the calls, their exact total, what you have left and whether it fits (in
        ρ on a zCDP dataset)."""
        if self.estimate.accounting == "zcdp":
            return (
                f"{len(self.calls)} calls, total ρ={self.estimate.total_rho_exact}, "
                f"remaining ρ={self.estimate.remaining_rho_exact}, fits: {self.fits}"
            )
        return (
            f"{len(self.calls)} calls, total ε={epsilon_text(self.estimate.total_epsilon_exact)}"
            f", remaining ε={epsilon_text(self.estimate.remaining_epsilon)}, fits: {self.fits}"
        )

    def rho_lines(self) -> list[str]:
        """On a zCDP dataset: each call's ρ, the total against the budget and the (ε, δ) the
        run implies (:func:`dpmine.miners._rho.rho_lines`); nothing on a pure one."""
        return rho_lines(self.estimate, self.budget_rho, self.delta)

    def report(self) -> str:
        """The plan as text: its one-line summary, then on a zCDP dataset :meth:`rho_lines`."""
        return "\n".join([str(self), *self.rho_lines()])


@dataclass(frozen=True)
class RunStopped:
    """Where a run stopped before the end of its plan, and what that call cost.

    ``call`` is what the miner was doing (an operation and its place in the run), ``error``
    the server's message, ``unit`` and ``charged`` the exact charge of the failed request in
    the dataset's unit (``charged`` "0" when the server charged nothing, None when the price
    could not be read back; the ledger has it either way). Privacy: the failure is an answer
    the analyst sees anyway, and every later step of the run is post-processing of what was
    released and of that answer."""

    call: str
    error: str
    unit: Literal["ε", "ρ"] = "ε"
    charged: str | None = None

    def describe(self) -> str:
        """One paragraph: which call failed, what it cost, and that the rest was kept."""
        if self.charged == "0":
            cost = "Nothing was charged for it."
        elif self.charged is None:
            cost = "Its charge stands (the dataset's ledger lists it)."
        else:
            cost = f"Charged for it: {self.unit} = {self.charged}, with nothing released."
        return (
            f"The run stopped early at {self.call}; the server answered: "
            f"{self.error.rstrip('.')}. {cost} The results released before it are kept, and "
            "the test counts only what the run examined."
        )


@dataclass
class _Spent:
    receipts: list[Receipt] = field(default_factory=list)
    #: Calls that failed (the first is where the run stopped; concurrent iterations of a tree
    #: miner can fail together).
    failures: list[RunStopped] = field(default_factory=list)


#: Guards ``_Spent.failures`` against a tree miner's concurrent iterations (module level, so
#: that a mined miner still pickles).
_FAILURES_LOCK = threading.Lock()


class _Stopped(Exception):
    """Internal: a call of the run failed and was recorded (:meth:`BaseMiner._stopping`); the
    miner ends the phase it is in and keeps what was released."""


class _CheckedOnConstruction(ABCMeta):
    """Constructing a miner runs its ``_check_params()`` once the whole constructor chain has
    stored the parameters, so a bad value is refused where it was written, not at ``mine()``."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        miner = super().__call__(*args, **kwargs)
        miner._check_params()
        return miner


def parameter_defaults(cls: type) -> dict[str, Any]:
    """The keyword-only constructor parameters of ``cls`` and its bases with their defaults
    (the nearest class's default wins; ``**parameters`` passed up are found in the bases)."""
    defaults: dict[str, Any] = {}
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or klass is object:
            continue
        for parameter in inspect.signature(init).parameters.values():
            if parameter.kind is parameter.KEYWORD_ONLY:
                defaults.setdefault(parameter.name, parameter.default)
    return defaults


def _differs(value: object, default: object) -> bool:
    try:
        return bool(value != default)
    except (TypeError, ValueError):  # e.g. arrays, whose comparison is not one Boolean
        return True


class BaseMiner(metaclass=_CheckedOnConstruction):
    """Shared plan/mine plumbing; a miner lists its calls in ``_calls`` and runs them in
    ``mine``."""

    def _check_params(self) -> None:
        """Refuse obviously invalid parameters with a :class:`~dpmine.errors.ParameterError`
        saying what to fix (run at construction, and again before planning)."""

    def _found(self) -> str:
        """What the last run found, in a few words (only called once it has run)."""
        return f"{len(self.receipts_)} charged calls"

    def __repr__(self) -> str:
        """``Class(changed=parameters) · not mined`` or ``· mined: <what it found>``."""
        shown = reprlib.Repr()
        shown.maxstring = shown.maxother = 40
        parameters = [
            f"{name}={shown.repr(getattr(self, name))}"
            for name, default in parameter_defaults(type(self)).items()
            if hasattr(self, name) and (name == "epsilon" or _differs(getattr(self, name), default))
        ]
        state = "not mined"
        if getattr(self, "_spent", None) is not None:
            try:
                state = f"mined: {self._found()}"
            except DPMineError:  # a run that stopped before its results
                state = "mined: no results"
        return f"{type(self).__name__}({', '.join(parameters)}) · {state}"

    @abstractmethod
    def _calls(self, dataset: DatasetHandle) -> list[PlannedCall]:
        """The exact calls of a run, for pricing."""

    def plan(self, dataset: DatasetHandle) -> Plan:
        """Price the run on the server; nothing is charged and no data is read. A parameter a
        request refuses raises :class:`~dpmine.errors.ParameterError`."""
        with checked_parameters():
            calls = self._calls(dataset)
        estimate = dataset.estimate(calls)
        return Plan(
            calls=calls,
            estimate=estimate,
            budget_rho=self._budget_rho(),
            delta=zcdp_delta(dataset, estimate),
        )

    def _budget_rho(self) -> float | None:
        """The run's ρ budget (``rho=``, issue #24), or None for a budget in ε."""
        rho: float | None = getattr(self, "rho", None)
        return rho

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
        if not plan.fits and plan.estimate.accounting == "zcdp":
            raise BudgetExhaustedError(
                "BudgetExhausted",
                f"this run costs ρ={plan.estimate.total_rho_exact} but only "
                f"ρ={plan.estimate.remaining_rho_exact} remains; nothing was spent",
            )
        if not plan.fits:
            raise BudgetExhaustedError(
                "BudgetExhausted",
                f"this run costs ε={epsilon_text(plan.estimate.total_epsilon_exact)} but only "
                f"ε={epsilon_text(plan.estimate.remaining_epsilon)} remains; nothing was spent",
            )
        return plan

    @property
    def budget_spent_(self) -> float:
        """Total charged by the last ``mine()`` in the dataset's unit (the exact sum of its
        receipts and of a failed call's charge, ``stopped_``, as a float): ε on a pure dataset,
        ρ on a zCDP one (issue #24), where ρ adds up and the receipts' ε figures (each call's
        implied ε at δ) do not."""
        return float(self.spent_exact()[1])

    def spent_exact(self) -> tuple[Literal["ε", "ρ"], Decimal]:
        """(unit, exact total) charged by the last ``mine()``: its receipts and, when the run
        stopped at a failed call, that call's charge."""
        unit, amount = spent_in_unit(self.receipts_)
        spent: _Spent | None = getattr(self, "_spent", None)
        for failure in [] if spent is None else spent.failures:
            if failure.charged is not None:
                unit, amount = failure.unit, amount + Decimal(failure.charged)
        return unit, amount

    @property
    def stopped_(self) -> RunStopped | None:
        """Where the last ``mine()`` stopped before the end of its plan (None if it ran
        through): a call that failed after its charge or was refused, with what it cost."""
        spent: _Spent | None = getattr(self, "_spent", None)
        if spent is None:
            raise NotMinedError(f"{type(self).__name__} has not mined yet; call mine() first")
        return spent.failures[0] if spent.failures else None

    @contextmanager
    def _stopping(
        self,
        spent: _Spent,
        dataset: DatasetHandle,
        call: str,
        requests: Sequence[OperationRequest[Any]],
    ) -> Iterator[None]:
        """Run the block that sends ``requests`` (at the run's step ``call``); one of
        :data:`STOPPING_ERRORS` is recorded (:meth:`_record_stop`) and raised as the internal
        ``_Stopped``, which the miner catches to end its current phase."""
        try:
            yield
        except STOPPING_ERRORS as error:
            self._record_stop(spent, dataset, error, call, requests)
            raise _Stopped(call) from error

    def _record_stop(
        self,
        spent: _Spent,
        dataset: DatasetHandle,
        error: DPMineError,
        call: str,
        requests: Sequence[OperationRequest[Any]],
    ) -> RunStopped:
        """Record that ``requests`` (one call, or the parts of one batch) failed with ``error``
        (one of :data:`STOPPING_ERRORS`) at ``call``, price them (a free estimate: the charge
        of a failed call is its price) and warn with :class:`RunStoppedWarning`."""
        unit: Literal["ε", "ρ"] = "ε"
        charged: str | None = "0"
        if not isinstance(error, BudgetExhaustedError):
            try:
                estimate = dataset.estimate([operation_for(r).plan(r) for r in requests])
            except DPMineError:
                charged = None
            else:
                zcdp = estimate.accounting == "zcdp"
                unit = "ρ" if zcdp else "ε"
                charged = estimate.total_rho_exact if zcdp else estimate.total_epsilon_exact
        server_message = getattr(error, "detail", None) or str(error)
        stopped = RunStopped(call=call, error=str(server_message), unit=unit, charged=charged)
        with _FAILURES_LOCK:
            first = not spent.failures
            spent.failures.append(stopped)
        if first:
            warnings.warn(stopped.describe(), RunStoppedWarning, stacklevel=4)
        return stopped

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

    def _found(self) -> str:
        verdict = self.significance()
        early = "" if self.stopped_ is None else " (stopped early)"
        return f"{len(verdict.passed)} of {len(verdict.ranked)} results pass{early}"

    @abstractmethod
    def _table(self, min_jaccard: float | None = None) -> tuple[list[str], list[list[object]]]:
        """The columns and rows of ``to_csv``: every result by J's lower end, with whether it
        passes the test with ``min_jaccard`` (default: the run's)."""

    def to_frame(self, min_jaccard: float | None = None) -> pd.DataFrame:
        """Every result of the last run as a pandas DataFrame with the columns of ``to_csv``
        (pandas is optional for the client: ``pip install pandas``)."""
        return data_frame(*self._table(min_jaccard))

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
        unit, amount = self.spent_exact()
        spent = amount_text(unit, amount)
        message = nothing_passed(verdict.summary, spent=spent, unit=unit, hints=self._hints())
        ending = self._ending()
        return message if ending is None else f"{message} {ending}"

    def _ending(self) -> str | None:
        """What ``nothing_passed`` adds about how the run ended: where it stopped early, if it
        did (:attr:`stopped_`)."""
        stopped = self.stopped_
        return None if stopped is None else stopped.describe()
