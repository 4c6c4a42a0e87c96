"""The timing calibration file: measured public factors for the padding budgets (issue #23).

``dpmine-server calibrate`` (services/calibration.py) times every priced operation's real
kernel on synthetic adversarial data on the deployment's own machine and writes this file;
``DPMINE_TIMING_CALIBRATION`` names it, and :class:`~dpmine_server.services.timing.TimingPolicy`
then grants an operation ``base + scale · max(margin · factor · work, margin · floor)``
seconds instead of ``base + scale · work`` (``work`` the hand-set estimate of
services/timing.py; for the operations whose estimate prices a probabilistic public cap,
``TAIL_CAPPED``, never less than ``work``: a calibration times typical runs, not runs at the
cap).

Privacy: the file is public configuration, not data. Its factors are measured on synthetic
data generated from public sizes only (never a registered dataset), so a calibrated budget is
still a function of public values (the request's parameters, the dataset's public metadata
and this public file): DESIGN.md contract item 7 holds as before, and an overrun still fails
closed at the deadline (the residual channel is unchanged).
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Collection
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

__all__ = [
    "CALIBRATION_VERSION",
    "MARGIN",
    "CalibrationError",
    "OperationCalibration",
    "RequestPathCalibration",
    "TimingCalibration",
    "VariantCalibration",
    "cached_calibration",
    "read_calibration",
    "write_calibration",
]

#: Version of the file's format and of the method that measured it (a server refuses any
#: other). 2: every timed call runs on a store as freshly loaded (services/calibration.py
#: ``_timed``); version 1 timed calls on caches that the first call had filled, which
#: under-priced ``serenade.extend_one`` calls that build their candidate sets. 3: every timed
#: call also finds the process's caches of public values empty (dpmine_server/public_cache.py);
#: version 2 timed them filled, 10–16 ms short on small Serenade and tree calls. 4: Serenade's
#: rejection proposals are priced by their public plan (operations/serenade.py
#: ``RejectionPlan``), up to 50 times lower than the per-proposal scan that version 3's factors
#: were measured against, and grid-mode pairs by their products and candidates apart. 5: a
#: built ``serenade.extend_one`` position is priced by its discrete literals, numeric
#: attributes and query literals apart (services/timing.py), up to 200 times lower per
#: discrete literal, and a call's grids and discrete supports by their rows. 6: grid-mode
#: initial pairs are priced by their set-up and discrete pairs' parts (services/timing.py
#: ``_pairs_setup_work``) instead of a term per row, literal and draw up to 20 times higher,
#: and the calibration times a grid-mode initial pairs call of its own; a given steepness's
#: sensitivities are priced by the values they scan, up to 18 times lower than before, and a
#: continuous-mode extension position by its families, up to 8 times lower.
CALIBRATION_VERSION = 6

#: Public safety margin over the measured worst case, written into every new file. Three
#: covers a machine about three times slower than during the calibration (other processes,
#: frequency scaling, a colder cache) before a kernel overruns and fails closed.
MARGIN = 3.0


class CalibrationError(ValueError):
    """The calibration file cannot be used; the message says what to fix."""


def _finite_positive(value: float, what: str) -> float:
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{what} must be a positive finite number, got {value!r}")
    return value


class CalibrationCase(BaseModel):
    """One measured case: the synthetic dataset, its hand-set work and the worst time."""

    model_config = ConfigDict(extra="forbid")

    dataset: str
    note: str = ""
    n_max: int = Field(ge=1)
    work: float = Field(gt=0, allow_inf_nan=False)
    max_seconds: float = Field(ge=0, allow_inf_nan=False)
    #: The kernel variant measured (``OperationCalibration.variants``), if the operation has any.
    variant: str | None = None


class VariantCalibration(BaseModel):
    """The factor and floor of one kernel variant of an operation, over its cases only."""

    model_config = ConfigDict(extra="forbid")

    factor: float = Field(description="max over the variant's cases of seconds / work")
    floor_seconds: float = Field(ge=0, allow_inf_nan=False)

    @field_validator("factor")
    @classmethod
    def _positive(cls, value: float) -> float:
        return _finite_positive(value, "factor")


class OperationCalibration(BaseModel):
    """One operation's measured factor (max seconds per work unit) and fixed-cost floor."""

    model_config = ConfigDict(extra="forbid")

    factor: float = Field(description="max over cases and repetitions of seconds / work")
    floor_seconds: float = Field(
        ge=0, allow_inf_nan=False, description="the smallest case's worst time (fixed cost)"
    )
    cases: list[CalibrationCase] = Field(default_factory=list)
    #: Per kernel variant that a request selects from public values (``tree.mcmc``: "exact"
    #: or "mcmc", services/timing.py ``pricing_variant``): its own factor and floor, over its
    #: own cases. A request of a variant measured here is priced by it; otherwise by the
    #: operation's factor, the largest over all cases.
    variants: dict[str, VariantCalibration] = Field(default_factory=dict)

    @field_validator("factor")
    @classmethod
    def _positive(cls, value: float) -> float:
        return _finite_positive(value, "factor")


class RequestPathCalibration(BaseModel):
    """The measured fixed cost of one request at its process's in-flight limit."""

    model_config = ConfigDict(extra="forbid")

    limit: int = Field(ge=1, description="requests sent at once (the in-flight limit measured)")
    bursts: int = Field(ge=1, description="timed bursts")
    burst_seconds: float = Field(
        gt=0, allow_inf_nan=False, description="worst time from a burst's start to its last answer"
    )
    seconds_per_request: float = Field(
        gt=0, allow_inf_nan=False, description="burst_seconds / limit"
    )
    jobs: int | None = Field(default=None, ge=1, description="timed jobs (job path)")
    job_seconds: float | None = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,
        description="worst time from a job's submission to its settled state stored (a "
        "count.noisy job, padding off): the hand-over to a worker and the final write",
    )

    def base_seconds(self, *, limit: int, margin: float, floor: float) -> float:
        """The base for a process admitting ``limit`` requests at once:
        ``max(floor, margin · limit · seconds_per_request)``."""
        return max(floor, margin * limit * self.seconds_per_request)

    def job_base_seconds(self, *, base: float, margin: float) -> float:
        """The base of a job's budget: ``max(base, 2 · margin · job_seconds)`` (``base``
        when the job path was not measured). A job's base pays for its hand-over to a worker
        (half of it, services/workers.py ``PublicSchedule``) and for its final write (the
        other half, services/jobs.py ``_shown_at``); ``job_seconds`` is measured as both
        together, so each half covers the whole measured path ``margin`` times."""
        if self.job_seconds is None:
            return base
        return max(base, 2.0 * margin * self.job_seconds)


class TimingCalibration(BaseModel):
    """The whole file: format version, margin, the machine and every operation measured."""

    model_config = ConfigDict(extra="forbid")

    version: int
    margin: float
    created: str
    quick: bool = False
    machine: dict[str, Any] = Field(default_factory=dict)
    operations: dict[str, OperationCalibration]
    #: The request path at the in-flight limit (server/dpmine_server/request_path.py); when
    #: present the server's base is measured rather than DPMINE_TIMING_BASE_MS.
    request_path: RequestPathCalibration | None = None

    @field_validator("version")
    @classmethod
    def _known_version(cls, value: int) -> int:
        if value != CALIBRATION_VERSION:
            raise ValueError(
                f"version {value} is not supported (this server reads version "
                f"{CALIBRATION_VERSION}); re-run dpmine-server calibrate"
            )
        return value

    @field_validator("margin")
    @classmethod
    def _margin_at_least_one(cls, value: float) -> float:
        if not math.isfinite(value) or value < 1:
            raise ValueError(
                f"margin must be a finite number of at least 1 (a budget below the measured "
                f"worst time would overrun), got {value!r}"
            )
        return value

    def label(self, path: Path) -> str:
        """Which calibration is in force, in one line (for /v1/health and logs)."""
        digest = hashlib.sha256(self.model_dump_json().encode()).hexdigest()[:12]
        cpu = self.machine.get("cpu_model") or "unknown CPU"
        return f"{path.name} sha256:{digest} ({self.created}, {cpu}, margin {self.margin:g})"


def write_calibration(calibration: TimingCalibration, path: Path) -> None:
    """Write ``calibration`` to ``path`` whole or not at all (a sibling file renamed over it),
    so that a process reading the file never sees half of it."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(calibration.model_dump_json(indent=2) + "\n", encoding="utf-8")
    os.replace(partial, path)


def read_calibration(path: Path, known: Collection[str]) -> TimingCalibration:
    """The validated file at ``path``; :class:`CalibrationError` says what to fix when the file
    is missing, not JSON, of another version, names an operation the server does not price
    (not in ``known``) or has a non-positive factor."""
    where = f"DPMINE_TIMING_CALIBRATION={path}"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise CalibrationError(
            f"{where}: cannot read the file ({error.strerror or error}); write it with "
            "dpmine-server calibrate --out FILE or unset the setting"
        ) from error
    try:
        calibration = TimingCalibration.model_validate_json(text)
    except ValidationError as error:
        first = error.errors()[0]
        at = ".".join(str(part) for part in first["loc"])
        message = str(first["msg"]).removeprefix("Value error, ")
        raise CalibrationError(
            f"{where}: {at + ': ' if at else ''}{message}; fix the file or write a new one "
            "with dpmine-server calibrate"
        ) from error
    unknown = sorted(set(calibration.operations) - set(known))
    if unknown:
        raise CalibrationError(
            f"{where}: unknown operation(s) {', '.join(unknown)}; this server prices "
            f"{', '.join(sorted(known))}; remove them or write a new file with "
            "dpmine-server calibrate"
        )
    return calibration


@lru_cache(maxsize=8)
def cached_calibration(path: str, known: tuple[str, ...]) -> TimingCalibration:
    """:func:`read_calibration`, read once per process (restart the server to apply a new
    file)."""
    return read_calibration(Path(path), known)
