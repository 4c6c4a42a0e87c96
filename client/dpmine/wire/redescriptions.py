"""Redescription wire models: noisy quality (`red.compute_quality`, ALGORITHMS.md §1.6).

The Serenade operations (§2) join this module.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from dpmine.wire.common import Epsilon, Receipt, WireModel
from dpmine.wire.queries import Redescription

__all__ = [
    "ComputeQualityRequest",
    "ComputeQualityResponse",
    "NoisyCells",
    "NoisyStatistics",
    "QualityMode",
]

#: "cells": four noisy cells with Lap(1/eps) each (engine default, §1.6 [REC]);
#: "paper": noisy |I| and |U| with Lap(2/eps) each (paper-compatible switch).
QualityMode = Literal["cells", "paper"]


class ComputeQualityRequest(WireModel):
    """Noisy support statistics of one redescription."""

    redescription: Redescription
    epsilon: Epsilon
    mode: QualityMode = "cells"


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
