"""Serenade greedy DP redescription miners: ``SerenadeES``, ``SerenadeCS`` and the ``NoSens``
ablation (ALGORITHMS.md §2.5). Orchestration only: every data access is a charged server call.

Budget split ε = ε_init + ε_ext + ε_qual by ``split`` (default d3 = (0.6, 0.3, 0.1)):

* ES: ``initial_pairs(I, ε_init)``; K rounds of ``extend_one(ES, ε_ext/K)``; one
  ``compute_quality(ε_qual/I)`` per redescription. Always I results.
* CS: ``initial_pairs(I, ε_init)``; per pair up to τ ``extend_one(CS, ε_ext/(τI))`` calls and up
  to τ+1 ``compute_quality(ε_qual/((τ+1)I))`` calls ([REC]: the paper's ε_qual/(τI) overspends);
  a chain stops when its noisy Jaccard falls below J_min, so a run may spend less than planned.

With ``x0_fraction`` the centre x0 is that fraction of a noisy row count bought first with
``count_epsilon`` (included in the plan).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypedDict, Unpack

from dpmine.connection import DatasetHandle
from dpmine.errors import ParameterError
from dpmine.miners._base import BaseMiner, NotMinedError, _Spent
from dpmine.queries import format_query
from dpmine.wire import (
    COUNT_NOISY,
    RED_COMPUTE_QUALITY,
    SERENADE_EXTEND_ONE,
    SERENADE_INITIAL_PAIRS,
    BooleanAttribute,
    BoolLiteral,
    CategoricalAttribute,
    CatLiteral,
    ComputeQualityRequest,
    DatasetMetadata,
    ExtendOneRequest,
    ExtendOneResponse,
    InitialPairsRequest,
    NoisyCells,
    NoisyCountRequest,
    NoisyStatistics,
    NumericAttribute,
    NumLiteral,
    PlannedCall,
    QualityMode,
    QualityParameters,
    Redescription,
    SerenadeOptions,
)

__all__ = ["MinedRedescription", "NoSens", "SerenadeCS", "SerenadeES", "SerenadeParameters"]


@dataclass(frozen=True)
class MinedRedescription:
    """A released redescription: the noisy cells of ``red.compute_quality`` and the statistics
    derived from them (post-processing)."""

    redescription: Redescription
    statistics: NoisyStatistics
    cells: NoisyCells

    @property
    def left(self) -> str:
        """The left query in text syntax."""
        return format_query(self.redescription.left)

    @property
    def right(self) -> str:
        """The right query in text syntax."""
        return format_query(self.redescription.right)

    @property
    def noisy_jaccard(self) -> float:
        """Noisy Jaccard J̃."""
        return self.statistics.jaccard


class SerenadeParameters(TypedDict, total=False):
    """Keyword parameters shared by every Serenade miner (see ``_SerenadeBase``)."""

    epsilon: float
    split: tuple[float, float, float]
    n_initial: int
    x0: float | None
    x0_fraction: float | None
    count_epsilon: float
    steepness: float | None
    options: SerenadeOptions | None
    quality_mode: QualityMode
    quality_function: Literal["serenade", "jaccard"]
    progress: bool


class _SerenadeBase(BaseMiner):
    """Parameters and shared plumbing of the Serenade miners."""

    def __init__(
        self,
        *,
        epsilon: float = 1.0,
        split: tuple[float, float, float] = (0.6, 0.3, 0.1),
        n_initial: int = 20,
        x0: float | None = None,
        x0_fraction: float | None = None,
        count_epsilon: float = 0.05,
        steepness: float | None = None,
        options: SerenadeOptions | None = None,
        quality_mode: QualityMode = "cells",
        quality_function: Literal["serenade", "jaccard"] = "serenade",
        progress: bool = False,
    ) -> None:
        self.epsilon = epsilon
        self.split = split
        self.n_initial = n_initial
        self.x0 = x0
        self.x0_fraction = x0_fraction
        self.count_epsilon = count_epsilon
        self.steepness = steepness
        self.options = options
        self.quality_mode = quality_mode
        self.quality_function = quality_function
        self.progress = progress

    # -- parameters ----------------------------------------------------------------------------

    def _check_params(self) -> None:
        if abs(sum(self.split) - 1.0) > 1e-9 or min(self.split) <= 0:
            raise ParameterError(
                f"split must be three positive shares summing to 1, got {self.split}"
            )
        if (self.x0 is None) == (self.x0_fraction is None):
            raise ParameterError("give exactly one of x0 (a count) or x0_fraction (of a noisy n)")
        if self.x0_fraction is not None and not 0 < self.x0_fraction < 1:
            raise ParameterError("x0_fraction must be in (0, 1)")
        if self.n_initial < 1:
            raise ParameterError("n_initial must be at least 1")
        for name in ("rounds", "tau"):
            value = getattr(self, name, 1)
            if not isinstance(value, int) or value < 1:
                raise ParameterError(f"{name} must be a whole number of at least 1, got {value!r}")
        if not 0 <= getattr(self, "min_jaccard", 0.0) <= 1:
            raise ParameterError("min_jaccard must be in [0, 1]")

    @property
    def _shares(self) -> tuple[float, float, float]:
        e_init, e_ext, e_qual = (self.epsilon * share for share in self.split)
        return e_init, e_ext, e_qual

    def _quality(self, x0: float) -> QualityParameters:
        return QualityParameters(x0=x0, s=self.steepness, function=self.quality_function)

    def _options(self) -> SerenadeOptions:
        return self.options or SerenadeOptions()

    # -- calls ---------------------------------------------------------------------------------

    def _prefix_calls(self, schema: DatasetMetadata) -> tuple[list[PlannedCall], float]:
        """The optional row count and the pricing x0 (costs do not depend on x0)."""
        if self.x0_fraction is None:
            assert self.x0 is not None
            return [], self.x0
        count = NoisyCountRequest(epsilon=self.count_epsilon)
        planned = [COUNT_NOISY.plan(count)]
        return planned, max(self.x0_fraction * schema.n_max, 1.0)

    def _resolve_x0(self, dataset: DatasetHandle, spent: _Spent) -> float:
        if self.x0 is not None:
            return self.x0
        assert self.x0_fraction is not None
        counted = dataset.count(epsilon=self.count_epsilon)
        spent.receipts.append(counted.receipt)
        # Clamped to the fraction of the public n_max, so x0 stays below n_max (post-processing).
        ceiling = self.x0_fraction * dataset.schema.n_max
        return min(max(self.x0_fraction * max(counted.count, 1), 1.0), ceiling)

    def _initial_pairs(
        self, dataset: DatasetHandle, x0: float, spent: _Spent
    ) -> list[Redescription]:
        request = InitialPairsRequest(
            count=self.n_initial,
            epsilon=self._shares[0],
            quality=self._quality(x0),
            options=self._options(),
        )
        response = dataset.run(request)
        spent.receipts.append(response.receipt)
        self.threshold_modes_ = [response.threshold_mode]
        return list(response.pairs)

    def _extend(
        self,
        dataset: DatasetHandle,
        collection: list[Redescription],
        *,
        mode: Literal["cs", "es"],
        epsilon: float,
        x0: float,
        spent: _Spent,
    ) -> ExtendOneResponse:
        request = ExtendOneRequest(
            mode=mode,
            collection=collection,
            epsilon=epsilon,
            quality=self._quality(x0),
            options=self._options(),
        )
        response = dataset.run(request)
        spent.receipts.append(response.receipt)
        self.threshold_modes_.append(response.threshold_mode)
        return response

    def _measure(
        self, dataset: DatasetHandle, red: Redescription, epsilon: float, spent: _Spent
    ) -> MinedRedescription:
        request = ComputeQualityRequest(redescription=red, epsilon=epsilon, mode=self.quality_mode)
        response = dataset.run(request)
        spent.receipts.append(response.receipt)
        return MinedRedescription(red, response.statistics, response.cells)

    # -- results -------------------------------------------------------------------------------

    def _mined(self) -> list[MinedRedescription]:
        found: list[MinedRedescription] | None = getattr(self, "redescriptions_", None)
        if found is None:
            raise NotMinedError(f"{type(self).__name__} has not mined yet; call mine() first")
        return found

    def displayed(self, min_jaccard: float = 0.3) -> list[MinedRedescription]:
        """The paper's display filter: noisy J ≥ ``min_jaccard`` (post-processing)."""
        return [r for r in self._mined() if r.noisy_jaccard >= min_jaccard]

    def to_json(self, path: Path) -> None:
        """Write the redescriptions (queries, noisy statistics) and the receipts."""
        payload = {
            "redescriptions": [
                {
                    "left": r.left,
                    "right": r.right,
                    "query": r.redescription.model_dump(mode="json"),
                    "noisy_cells": r.cells.model_dump(mode="json", exclude_none=True),
                    "noisy_statistics": r.statistics.model_dump(mode="json"),
                }
                for r in self._mined()
            ],
            "receipts": [receipt.model_dump(mode="json") for receipt in self.receipts_],
        }
        path.write_text(json.dumps(payload, indent=2) + "\n")

    def to_csv(self, path: Path) -> None:
        """Write one row per redescription with its noisy statistics."""
        with path.open("w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(
                ["left", "right", "noisy_support", "noisy_union", "noisy_jaccard", "p_value"]
            )
            for r in self._mined():
                stats = r.statistics
                writer.writerow(
                    [
                        r.left,
                        r.right,
                        stats.support,
                        stats.union,
                        f"{stats.jaccard:.6g}",
                        "" if stats.p_value is None else f"{stats.p_value:.6g}",
                    ]
                )


def _placeholder(schema: DatasetMetadata) -> Redescription:
    """A valid redescription used only to price extend/quality calls (costs ignore queries)."""

    def literal(view: str) -> BoolLiteral | CatLiteral | NumLiteral:
        for attribute in schema.attributes:
            if schema.kind == "views" and attribute.view != view:
                continue
            if isinstance(attribute, BooleanAttribute):
                return BoolLiteral(attribute=attribute.name)
            if isinstance(attribute, CategoricalAttribute):
                return CatLiteral(attribute=attribute.name, category=attribute.categories[0])
            if isinstance(attribute, NumericAttribute):
                return NumLiteral(attribute=attribute.name, lower=attribute.lo)
        raise ValueError(f"the {view} view has no attribute a Serenade query can start with")

    left = literal("left")
    right = literal("right")
    if schema.kind != "views" and right.attribute == left.attribute:
        others = [a for a in schema.attributes if a.name != left.attribute]
        if not others:
            raise ValueError("a single-table dataset needs two attributes")
        first = others[0]
        right = (
            NumLiteral(attribute=first.name, lower=first.lo)
            if isinstance(first, NumericAttribute)
            else BoolLiteral(attribute=first.name)
            if isinstance(first, BooleanAttribute)
            else CatLiteral(attribute=first.name, category=first.categories[0])
        )
    return Redescription(left=left, right=right)


class SerenadeES(_SerenadeBase):
    """SerenadeES (Algorithm 2): one collection of I redescriptions, K extension rounds."""

    def __init__(self, *, rounds: int = 80, **parameters: Unpack[SerenadeParameters]) -> None:
        super().__init__(**parameters)
        self.rounds = rounds

    def _calls(self, dataset: DatasetHandle) -> list[PlannedCall]:
        self._check_params()
        schema = dataset.schema
        calls, x0 = self._prefix_calls(schema)
        e_init, e_ext, e_qual = self._shares
        quality = self._quality(x0)
        pairs = InitialPairsRequest(
            count=self.n_initial, epsilon=e_init, quality=quality, options=self._options()
        )
        calls.append(SERENADE_INITIAL_PAIRS.plan(pairs))
        collection = [_placeholder(schema)] * self.n_initial
        extend = ExtendOneRequest(
            mode="es",
            collection=collection,
            epsilon=e_ext / self.rounds,
            quality=quality,
            options=self._options(),
        )
        calls += [SERENADE_EXTEND_ONE.plan(extend)] * self.rounds
        measure = ComputeQualityRequest(
            redescription=collection[0], epsilon=e_qual / self.n_initial, mode=self.quality_mode
        )
        calls += [RED_COMPUTE_QUALITY.plan(measure)] * self.n_initial
        return calls

    def mine(self, dataset: DatasetHandle) -> SerenadeES:
        """Run the plan (refused up front when the budget cannot cover it)."""
        self._check_budget(dataset)
        spent = _Spent()
        x0 = self._resolve_x0(dataset, spent)
        _e_init, e_ext, e_qual = self._shares
        collection = self._initial_pairs(dataset, x0, spent)
        with self._progress(self.rounds + len(collection), "Serenade ES") as advance:
            for _ in range(self.rounds):
                step = self._extend(
                    dataset,
                    collection,
                    mode="es",
                    epsilon=e_ext / self.rounds,
                    x0=x0,
                    spent=spent,
                )
                collection[step.position] = step.redescription
                advance()
            results = self._measure_all(dataset, collection, e_qual, spent, advance)
        self.redescriptions_ = results
        self.x0_ = x0
        self._spent = spent
        return self

    def _measure_all(
        self,
        dataset: DatasetHandle,
        collection: list[Redescription],
        e_qual: float,
        spent: _Spent,
        advance: Callable[[], None],
    ) -> list[MinedRedescription]:
        results = []
        for red in collection:
            results.append(self._measure(dataset, red, e_qual / len(collection), spent))
            advance()
        return results


class SerenadeCS(_SerenadeBase):
    """SerenadeCS (Algorithm 1): each initial pair extended alone for up to τ rounds."""

    def __init__(
        self, *, tau: int = 4, min_jaccard: float = 0.3, **parameters: Unpack[SerenadeParameters]
    ) -> None:
        super().__init__(**parameters)
        self.tau = tau
        self.min_jaccard = min_jaccard

    def _budgets(self) -> tuple[float, float]:
        _e_init, e_ext, e_qual = self._shares
        return e_ext / (self.tau * self.n_initial), e_qual / ((self.tau + 1) * self.n_initial)

    def _calls(self, dataset: DatasetHandle) -> list[PlannedCall]:
        self._check_params()
        schema = dataset.schema
        calls, x0 = self._prefix_calls(schema)
        e_x, e_q = self._budgets()
        quality = self._quality(x0)
        pairs = InitialPairsRequest(
            count=self.n_initial, epsilon=self._shares[0], quality=quality, options=self._options()
        )
        calls.append(SERENADE_INITIAL_PAIRS.plan(pairs))
        red = _placeholder(schema)
        extend = ExtendOneRequest(
            mode="cs", collection=[red], epsilon=e_x, quality=quality, options=self._options()
        )
        measure = ComputeQualityRequest(redescription=red, epsilon=e_q, mode=self.quality_mode)
        for _ in range(self.n_initial):
            calls.append(RED_COMPUTE_QUALITY.plan(measure))
            for _ in range(self.tau):
                calls.append(SERENADE_EXTEND_ONE.plan(extend))
                calls.append(RED_COMPUTE_QUALITY.plan(measure))
        return calls

    def mine(self, dataset: DatasetHandle) -> SerenadeCS:
        """Run the chains; the plan is an upper bound (chains stop below J_min)."""
        self._check_budget(dataset)
        spent = _Spent()
        x0 = self._resolve_x0(dataset, spent)
        e_x, e_q = self._budgets()
        pairs = self._initial_pairs(dataset, x0, spent)
        results: list[MinedRedescription] = []
        with self._progress(len(pairs), "Serenade CS") as advance:
            for start in pairs:
                found = self._chain(dataset, start, x0=x0, e_x=e_x, e_q=e_q, spent=spent)
                if found is not None:
                    results.append(found)
                advance()
        self.redescriptions_ = results
        self.x0_ = x0
        self._spent = spent
        return self

    def _chain(
        self,
        dataset: DatasetHandle,
        start: Redescription,
        *,
        x0: float,
        e_x: float,
        e_q: float,
        spent: _Spent,
    ) -> MinedRedescription | None:
        measured = self._measure(dataset, start, e_q, spent)
        last_good = measured if measured.noisy_jaccard >= self.min_jaccard else None
        for _ in range(self.tau):
            if measured.noisy_jaccard < self.min_jaccard:
                break
            step = self._extend(
                dataset, [measured.redescription], mode="cs", epsilon=e_x, x0=x0, spent=spent
            )
            if step.changed:  # an unchanged chain keeps its noisy J (no new quality call)
                measured = self._measure(dataset, step.redescription, e_q, spent)
            if measured.noisy_jaccard >= self.min_jaccard:
                last_good = measured
        return last_good


class NoSens(SerenadeES):
    """The paper's ablation: SerenadeES with plain Jaccard quality (sensitivity 1)."""

    def __init__(self, *, rounds: int = 80, **parameters: Unpack[SerenadeParameters]) -> None:
        parameters.setdefault("quality_function", "jaccard")
        super().__init__(rounds=rounds, **parameters)
