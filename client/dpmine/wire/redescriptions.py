"""Redescription wire models: noisy quality (`red.compute_quality`, ALGORITHMS.md §1.6).

and the Serenade operations (§2): calibrate, initial pairs, extend one.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field, model_validator

from dpmine.wire.common import Epsilon, OperationRequest, Receipt, WireModel
from dpmine.wire.counts import CountNoise
from dpmine.wire.items import ColumnNames
from dpmine.wire.queries import Redescription

__all__ = [
    "CalibrateRequest",
    "CalibrateResponse",
    "Calibration",
    "CalibrationRow",
    "ComputeQualityRequest",
    "ComputeQualityResponse",
    "ExtendOneRequest",
    "ExtendOneResponse",
    "InitialPairsRequest",
    "InitialPairsResponse",
    "NoisyCells",
    "NoisyStatistics",
    "QualityMode",
    "QualityParameters",
    "SerenadeOptions",
    "ThresholdModeRequest",
]

#: "cells": four noisy cells with Lap(1/eps) each (engine default, §1.6 [REC]);
#: "paper": noisy |I| and |U| with Lap(2/eps) each (paper-compatible switch).
QualityMode = Literal["cells", "paper"]


class NoisyCells(WireModel):
    """Released noisy counts. In "cells" mode e11..e00; in "paper" mode intersection and union."""

    e11: int | None = Field(default=None, description="|supp L ∩ supp R| + noise")
    e10: int | None = Field(default=None, description="|supp L \\ supp R| + noise")
    e01: int | None = Field(default=None, description="|supp R \\ supp L| + noise")
    e00: int | None = Field(default=None, description="rows in neither support + noise")
    intersection: int | None = Field(default=None, description="paper mode: |I| + noise")
    union: int | None = Field(default=None, description="paper mode: |U| + noise")


class NoisyStatistics(WireModel):
    """Statistics derived from the noisy counts by post-processing (clamped at 0)."""

    support: int = Field(description="clamped noisy |I|")
    union: int = Field(description="clamped noisy |U|")
    jaccard: float = Field(description="support / union (0 when union is 0)")
    support_left: int | None = None
    support_right: int | None = None
    n_rows: int | None = Field(default=None, description="sum of the four clamped cells")
    p_value: float | None = Field(default=None, description="§1.3 p-value on the noisy counts")


class ComputeQualityResponse(WireModel):
    """The released noisy counts, the derived statistics and the receipt."""

    mode: QualityMode
    cells: NoisyCells
    statistics: NoisyStatistics
    receipt: Receipt
    noise: CountNoise | None = Field(
        default=None,
        description=(
            "The noise law of every released count: discrete Laplace on a pure dataset, "
            "discrete Gaussian on a zcdp one; null on releases stored before it was reported "
            "(Laplace)."
        ),
    )


class ComputeQualityRequest(OperationRequest[ComputeQualityResponse]):
    """Noisy support statistics of one redescription."""

    redescription: Redescription
    epsilon: Epsilon
    mode: QualityMode = "cells"


# -- Serenade (ALGORITHMS.md §2) ---------------------------------------------------------------

ThresholdModeRequest = Literal["auto", "continuous", "grid"]
SerenadeOperator = Literal["and", "or"]


def _both_operators() -> list[SerenadeOperator]:
    return ["and", "or"]


class SerenadeOptions(WireModel):
    """Data-independent candidate rules (§2.2), the threshold mode (§1.4) and the attributes
    candidates may use (``columns``: a public list, so the candidate set stays a function of
    public values)."""

    operators: list[SerenadeOperator] = Field(default_factory=_both_operators, min_length=1)
    negations: bool = False
    max_literals: int = Field(default=4, ge=1, le=16, description="Literals per query at most.")
    single_side_or: bool = Field(default=True, description="Disjunctions on one side only.")
    threshold_mode: ThresholdModeRequest = Field(
        default="auto",
        description="continuous (exact: by rejection while the draw's exponent factor c ≤ 8, "
        "by enumerating every cell pair above, which costs O(V²) per numeric attribute), grid "
        "(public grid), or auto (continuous while c ≤ 8, else grid; decided from public values "
        "only). c = ε/(Δ_up + Δ_down) under the default range calibration, else ε/(2Δ).",
    )
    columns: ColumnNames | None = Field(
        default=None,
        description="The attributes whose literals may start or extend a query (default: "
        "all). Each view (or, on a table, the pair's two sides) must keep at least one.",
    )


#: "range" (§0.8 [REC], default): c = ε/(Δ_up + Δ_down) with the one-sided maxima of the
#: calibration scan; "symmetric": the paper's c = ε/(2Δ), Δ = max(Δ_up, Δ_down).
Calibration = Literal["range", "symmetric"]


class QualityParameters(WireModel):
    """Public parameters of Serenade's quality (§2.1)

    Q = J·σ(s(E11 − x0)), times the coverage factor σ(s₂(E00 − y0)) when y0 is given.
    """

    x0: float = Field(gt=0, allow_inf_nan=False, description="Minimum-support centre, a count.")
    s: float | None = Field(
        default=None,
        gt=0,
        le=10,
        allow_inf_nan=False,
        description="Steepness; null = the server's line search (serenade.calibrate).",
    )
    function: Literal["serenade", "jaccard"] = Field(
        default="serenade",
        description="'jaccard' = plain Jaccard quality with sensitivity 1 (the NoSens ablation).",
    )
    y0: float | None = Field(
        default=None,
        ge=0,
        allow_inf_nan=False,
        description="Minimum-uncovered centre, a public count (e.g. a fraction of a noisy n̂): "
        "adds the coverage factor σ(s₂(E00 − y0)), E00 = rows in neither support (§2.1). "
        "null = no coverage factor (the paper's quality).",
    )
    s2: float | None = Field(
        default=None,
        gt=0,
        le=10,
        allow_inf_nan=False,
        description="Steepness s₂ of the coverage factor; null = the same as s (the given or "
        "line-searched one). Only with y0.",
    )
    calibration: Calibration = Field(
        default="range",
        description="'range' (default): every draw uses c = ε/(Δ_up + Δ_down), the one-sided "
        "sensitivities (§0.8); 'symmetric': the paper's c = ε/(2Δ).",
    )

    @model_validator(mode="after")
    def _coverage_options(self) -> QualityParameters:
        if self.s2 is not None and self.y0 is None:
            raise ValueError("s2 is the steepness of the coverage factor: give y0 too, or drop s2")
        if self.function == "jaccard" and self.y0 is not None:
            raise ValueError(
                "the coverage factor (y0) belongs to the 'serenade' quality; drop y0 or use "
                "function='serenade'"
            )
        return self


class CalibrateRequest(WireModel):
    """Sensitivity of Q for given x0 (and s, or the steepness line search), optionally with the
    coverage factor (y0, s₂) and an x0 trade-off table. Free: public inputs only (§2.1)."""

    x0: float = Field(gt=0, allow_inf_nan=False)
    s: float | None = Field(default=None, gt=0, le=10, allow_inf_nan=False)
    grid: list[float] | None = Field(default=None, min_length=1, max_length=1000)
    y0: float | None = Field(
        default=None,
        ge=0,
        allow_inf_nan=False,
        description="Coverage-factor centre (a count); null = the paper's quality.",
    )
    s2: float | None = Field(
        default=None,
        gt=0,
        le=10,
        allow_inf_nan=False,
        description="Coverage-factor steepness; null = the same as s. Only with y0.",
    )
    calibration: Calibration = Field(
        default="range",
        description="Which c the draws use (and the line search minimises the denominator of): "
        "'range' c = ε/(Δ_up + Δ_down), 'symmetric' c = ε/(2Δ).",
    )
    tradeoff_x0: list[float] | None = Field(
        default=None,
        min_length=1,
        max_length=20,
        description="Further x0 counts (e.g. fractions of a noisy n̂) for the trade-off table: "
        "Δ and c per unit ε for each, with the same s rule (given s, else line search), y0, s₂.",
    )

    @model_validator(mode="after")
    def _coverage_options(self) -> CalibrateRequest:
        if self.s2 is not None and self.y0 is None:
            raise ValueError("s2 is the steepness of the coverage factor: give y0 too, or drop s2")
        for x0 in self.tradeoff_x0 or []:
            if not (x0 > 0 and math.isfinite(x0)):
                raise ValueError(f"tradeoff_x0 values must be positive counts, got {x0}")
        return self


class CalibrationRow(WireModel):
    """Sensitivities and exponent factor of Q for one x0 (§2.1, §0.8)."""

    x0: float
    s: float = Field(description="Steepness used (given, or the line search's for this x0).")
    delta: float = Field(description="Symmetric sensitivity Δ = max(Δ_up, Δ_down).")
    delta_up: float = Field(description="Largest increase of Q when one row is added.")
    delta_down: float = Field(description="Largest decrease of Q when one row is added.")
    c_per_epsilon: float = Field(
        description="Factor of ε in the EM exponent: a draw charged ε weighs candidates by "
        "exp(ε·c_per_epsilon·Q); 1/(Δ_up + Δ_down) (range) or 1/(2Δ) (symmetric)."
    )


class CalibrateResponse(WireModel):
    """The steepness used and Δ(s, x0) computed from the public n_max; with the one-sided
    sensitivities, c per unit ε and the x0 trade-off table (empty unless requested)."""

    s: float
    delta: float
    x0: float
    n_max: int
    y0: float | None = None
    s2: float | None = Field(default=None, description="Coverage steepness used (with y0).")
    calibration: Calibration = "symmetric"
    delta_up: float | None = Field(default=None, description="Δ_up (§0.8); null: old server.")
    delta_down: float | None = Field(default=None, description="Δ_down (§0.8); null: old server.")
    c_per_epsilon: float | None = Field(
        default=None, description="Factor of ε in the EM exponent; null: old server."
    )
    tradeoff: list[CalibrationRow] = Field(
        default_factory=list, description="One row per requested tradeoff_x0, in order."
    )


class InitialPairsResponse(WireModel):
    """The drawn pairs (numeric bounds drawn inside their cells, never data values)."""

    pairs: list[Redescription]
    threshold_mode: Literal["continuous", "grid"]
    s: float
    delta: float
    receipt: Receipt
    delta_up: float | None = Field(default=None, description="Δ_up (§0.8); null: old server.")
    delta_down: float | None = Field(default=None, description="Δ_down (§0.8); null: old server.")
    c_per_epsilon: float | None = Field(
        default=None, description="Factor of ε in each draw's exponent (the draws get ε/count)."
    )


class InitialPairsRequest(OperationRequest[InitialPairsResponse]):
    """``count`` independent exponential-mechanism draws of literal pairs (§2.3); costs ε."""

    count: int = Field(default=20, ge=1, le=1000)
    epsilon: Epsilon
    quality: QualityParameters
    options: SerenadeOptions = Field(default_factory=SerenadeOptions)


class ExtendOneResponse(WireModel):
    """The chosen candidate: its position and redescription (``changed`` = it was extended)."""

    position: int
    redescription: Redescription
    changed: bool
    threshold_mode: Literal["continuous", "grid"]
    receipt: Receipt


class ExtendOneRequest(OperationRequest[ExtendOneResponse]):
    """One extension step (§2.4). ``cs``: a collection of one redescription; ``es``: one draw
    over the union of the candidates of every redescription of the collection."""

    mode: Literal["cs", "es"] = "es"
    collection: list[Redescription] = Field(min_length=1, max_length=1000)
    epsilon: Epsilon
    quality: QualityParameters
    options: SerenadeOptions = Field(default_factory=SerenadeOptions)

    @model_validator(mode="before")
    @classmethod
    def _no_memo(cls, data: Any) -> Any:
        removed = sorted({"max_age", "session_id"} & set(data)) if isinstance(data, dict) else []
        if removed:
            raise ValueError(
                f"{' and '.join(removed)}: the ES memo and mining sessions were removed because "
                "they under-charged the privacy budget; every extend call is now a fresh draw "
                "charged its own epsilon. Drop these fields."
            )
        return data

    @model_validator(mode="after")
    def _consistent(self) -> ExtendOneRequest:
        if self.mode == "cs" and len(self.collection) != 1:
            raise ValueError("mode 'cs' extends exactly one redescription")
        return self
