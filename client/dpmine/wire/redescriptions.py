"""Redescription wire models: noisy quality (`red.compute_quality`, ALGORITHMS.md §1.6).

and the Serenade operations (§2): calibrate, initial pairs, extend one.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from dpmine.wire.common import Epsilon, OperationRequest, Receipt, WireModel
from dpmine.wire.queries import Redescription

__all__ = [
    "CalibrateRequest",
    "CalibrateResponse",
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
    """Data-independent candidate rules (§2.2) and the threshold mode (§1.4)."""

    operators: list[SerenadeOperator] = Field(default_factory=_both_operators, min_length=1)
    negations: bool = False
    max_literals: int = Field(default=4, ge=1, le=16, description="Literals per query at most.")
    single_side_or: bool = Field(default=True, description="Disjunctions on one side only.")
    threshold_mode: ThresholdModeRequest = Field(
        default="auto",
        description="continuous (exact: by rejection while ε/(2Δ) ≤ 8, by enumerating every "
        "cell pair above, which costs O(V²) per numeric attribute), grid (public grid), or auto "
        "(continuous while ε/(2Δ) ≤ 8, else grid; decided from public values only).",
    )


class QualityParameters(WireModel):
    """Parameters of Serenade's quality Q = J·σ(s(|I| − x0)) (§2.1); both public."""

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


class CalibrateRequest(WireModel):
    """Sensitivity of Q for given x0 (and s, or the steepness line search). Free."""

    x0: float = Field(gt=0, allow_inf_nan=False)
    s: float | None = Field(default=None, gt=0, le=10, allow_inf_nan=False)
    grid: list[float] | None = Field(default=None, min_length=1, max_length=1000)


class CalibrateResponse(WireModel):
    """The steepness used and Δ(s, x0) computed from the public n_max."""

    s: float
    delta: float
    x0: float
    n_max: int


class InitialPairsResponse(WireModel):
    """The drawn pairs (numeric bounds drawn inside their cells, never data values)."""

    pairs: list[Redescription]
    threshold_mode: Literal["continuous", "grid"]
    s: float
    delta: float
    receipt: Receipt


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
