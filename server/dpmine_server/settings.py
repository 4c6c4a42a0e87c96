"""Server settings from the environment (prefix ``DPMINE_``) and an optional TOML file.

Safe defaults for a laptop (embedded SQLite under ``./var``); a production configuration refuses
test-mode seeding and the development secret (DESIGN.md contract item 6).
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from dpmine_server.services.failpoints import parse_fail_calls

__all__ = [
    "DEFAULT_CONFIG_FILE",
    "DEVELOPMENT_SECRET",
    "Settings",
    "UnsafeSettingsError",
    "get_settings",
]

#: The secret used when none is configured. Fine on a laptop, refused in production.
DEVELOPMENT_SECRET = "dpmine-development-secret-change-me"
_CONFIG_FILE_ENV = "DPMINE_CONFIG_FILE"
#: The settings file read from the working directory when DPMINE_CONFIG_FILE is unset (what
#: ``dpmine-server init`` writes), so that every command and every new shell started in that
#: folder uses the same secret and database.
DEFAULT_CONFIG_FILE = "dpmine.toml"
#: Where ``DPMINE_TIMING_CALIBRATION=auto`` keeps the budgets measured at the first start,
#: in the data folder (services/first_start.py).
AUTO_CALIBRATION_FILE = "timing-calibration.json"
#: Padding defaults of test mode (explicit values win): releases wait at most 1 ms. Without
#: padding a request holds its in-flight place only while it runs, and the suite's ledger races
#: send 64 requests at once, so test mode admits up to 1000 (the admission tests set their own).
_TEST_TIMING = {
    "timing_grid_ms": 1.0,
    "timing_base_ms": 0.0,
    "timing_scale": 0.0,
    "timing_overrun": "release",
    "max_in_flight": 1000,
    "max_open_jobs": 1000,
}
#: Least fixed budget when overruns fail closed: the request's own bookkeeping (ledger writes,
#: metadata reads) must fit before the deadline, or every answer would be a failure. Also the
#: floor of a calibrated base (services/timing.py): a measured base below it would leave no room
#: for one scheduler time slice of a busy Linux machine (a few ms) or a slow disk sync.
MIN_FAIL_CLOSED_BASE_MS = 20.0


class UnsafeSettingsError(ValueError):
    """A setting that would break the privacy contract in production."""


class Settings(BaseSettings):
    """Everything the server reads from its environment."""

    model_config = SettingsConfigDict(env_prefix="DPMINE_", extra="forbid", frozen=True)

    environment: Literal["development", "test", "production"] = "development"
    database_url: str = Field(
        default="sqlite:///var/dpmine.sqlite3",
        description="SQLAlchemy URL of the engine's own database (SQLite file or PostgreSQL).",
    )
    data_dir: Path = Field(default=Path("var/data"), description="Where uploaded files are kept.")
    secret_key: str = Field(
        default=DEVELOPMENT_SECRET,
        min_length=16,
        description="Pepper for API-key hashes (HMAC-SHA256). Set a long random value.",
    )
    test_seed: int | None = Field(
        default=None, description="Seed for reproducible noise. Only allowed in test mode."
    )
    test_fail_calls: str | None = Field(
        default=None,
        description="Test mode only: calls that fail after their charge, as OPERATION@N "
        "separated by commas (the N-th call of OPERATION in each process; "
        "services/failpoints.py).",
    )
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    job_workers: int = Field(
        default=2,
        ge=0,
        le=64,
        description="Worker processes this server starts for jobs. SQLite: the embedded pool "
        "(at least 1). PostgreSQL: local `dpmine-server worker` processes started and stopped "
        "with the server; 0 when workers run elsewhere.",
    )
    worker_heartbeat_s: float = Field(
        default=10.0,
        gt=0,
        le=3600,
        allow_inf_nan=False,
        description="PostgreSQL workers: seconds between heartbeats (and stalled-job sweeps).",
    )
    worker_stalled_after_s: float = Field(
        default=30.0,
        gt=0,
        le=86_400,
        allow_inf_nan=False,
        description="PostgreSQL workers: a worker silent this long is dead; its job is marked "
        "interrupted (charge kept, never run again).",
    )
    job_wait_s: float = Field(
        default=3600.0,
        gt=0,
        allow_inf_nan=False,
        description="How long the synchronous route of a job operation waits for its job "
        "before answering 409 (the job goes on; fetch it with the same Idempotency-Key).",
    )
    max_cached_datasets: int = Field(
        default=16, ge=1, description="Dataset versions kept loaded in memory."
    )
    max_upload_bytes: int = Field(default=2 * 1024**3, ge=1)
    max_json_bytes: int = Field(
        default=16 * 1024**2,
        ge=64 * 1024,
        description="Largest request body of every route but the uploads (which take "
        "max_upload_bytes plus 1 MiB of form fields), refused with 413 before authentication "
        "and parsing. 16 MiB fits an extend call on 1000 redescriptions of 16 literals a side.",
    )
    login_failures_per_client: int = Field(
        default=60,
        ge=1,
        description="Failed logins one client address may make per login_failure_window_s "
        "(a token bucket); more are answered 429 before any database work.",
    )
    login_failures_global: int = Field(
        default=600, ge=1, description="Failed logins from all clients per window."
    )
    login_failure_window_s: float = Field(
        default=60.0,
        gt=0,
        le=86_400,
        allow_inf_nan=False,
        description="Window of the failed-login limits and of their audit summaries.",
    )
    auth_cache_ttl_s: float = Field(
        default=5.0,
        ge=0,
        le=300,
        allow_inf_nan=False,
        description="Seconds an authenticated API key is remembered (by its HMAC) before the "
        "database is asked again; 0 turns it off. Disabling or rotating in this process takes "
        "effect at once; done by another process it takes effect within this time.",
    )
    auth_cache_size: int = Field(
        default=10_000, ge=1, description="Most API keys the authentication cache remembers."
    )
    bootstrap_owner_key: str | None = Field(
        default=None,
        min_length=24,
        description="If set and no owner exists, create owner 'admin' with this API key at start.",
    )
    allow_sql_sources: bool = Field(
        default=True, description="Owners may register tables of other SQL databases."
    )
    max_in_flight: int = Field(
        default=16,
        ge=1,
        le=1000,
        description="Data-touching requests one API process holds at once, each until its "
        "padded deadline (services/admission.py; test mode's default: 1000). More are refused "
        "at once with 429 Overloaded and Retry-After, before anything is charged. Public (shown "
        "in /v1/health); a calibrated base (dpmine-server calibrate) covers this many requests "
        "at once.",
    )
    max_open_jobs: int = Field(
        default=32,
        ge=1,
        le=100_000,
        description="Jobs one analyst may have that are not yet shown settled, counted on the "
        "public schedule (services/jobs.py; test mode's default: 1000). One more is refused "
        "with 429 TooManyJobs before anything is charged.",
    )
    # Release padding (DESIGN.md contract item 7, services/timing.py). Unset values take the
    # defaults of the environment: a 50 ms grid, 100 ms base and scale 1 everywhere but in
    # test mode, where a 1 ms grid, no base and scale 0 keep the test suite fast.
    timing_padding: bool = Field(
        default=True,
        description="Hold every data-touching release until a deadline from public values, "
        "on a public time grid. Refused off in production.",
    )
    timing_grid_ms: float = Field(
        default=50.0,
        gt=0,
        le=60_000,
        allow_inf_nan=False,
        description="Release times are multiples of this many ms after the request's arrival.",
    )
    timing_base_ms: float = Field(
        default=100.0,
        ge=0,
        allow_inf_nan=False,
        description="Fixed part of every operation's time budget, in ms.",
    )
    timing_scale: float = Field(
        default=1.0,
        ge=0,
        allow_inf_nan=False,
        description="Multiplier of the per-operation budget from public parameters.",
    )
    timing_calibration: Literal["auto"] | Path | None = Field(
        default=None,
        description="Public calibration file written by `dpmine-server calibrate` on this "
        "machine: budgets become base + scale × max(margin × factor × work, margin × floor) "
        "per measured operation (services/calibration_file.py). 'auto' (production's "
        "default): the first start measures them (the quick calibration) into "
        f"DPMINE_DATA_DIR/{AUTO_CALIBRATION_FILE} and later starts read it "
        "(services/first_start.py). Unset: the hand-set estimates.",
    )
    timing_warm_extensions: bool = Field(
        default=True,
        description="Price a synchronous serenade.extend_one with the candidate sets that the "
        "public cache model holds at its arrival as drawn only (services/extension_model.py). "
        "Safe under concurrent calls since kernels run one at a time in the kernel lane; "
        "false prices every position as built from the rows.",
    )
    timing_kernel_lane: bool = Field(
        default=True,
        description="Run a padded process's inline kernels one at a time, in arrival order, "
        "each deadline adding the public wait for the kernels before it "
        "(services/kernel_lane.py). 'false' lets concurrent kernels share the process, so "
        "they can overrun by a data-dependent amount; allowed in test mode only (the lane "
        "audit's broken variant).",
    )
    timing_overrun: Literal["fail", "release"] = Field(
        default="fail",
        description="A kernel still running at its padded deadline: 'fail' answers at the "
        "deadline with OperationFailed (charge kept, nothing released), so answers come only "
        "at public times; 'release' shows it at the first grid tick after it finished (test "
        "mode's default, whose budgets are zero). Refused 'release' in production.",
    )

    @model_validator(mode="before")
    @classmethod
    def _timing_defaults(cls, data: object) -> object:
        if not isinstance(data, dict):
            return data
        if data.get("environment") == "production":
            return {"timing_calibration": "auto", **data}
        if data.get("environment") != "test":
            return data
        return {**_TEST_TIMING, **data}

    @property
    def calibration_file(self) -> Path | None:
        """The calibration file in force: ``DPMINE_TIMING_CALIBRATION``'s, or for ``auto``
        the data folder's :data:`AUTO_CALIBRATION_FILE` (which may not be written yet)."""
        if self.timing_calibration == "auto":
            return self.data_dir / AUTO_CALIBRATION_FILE
        return self.timing_calibration

    @field_validator("test_fail_calls")
    @classmethod
    def _fail_calls_parse(cls, value: str | None) -> str | None:
        if value is not None:
            parse_fail_calls(value)
        return value

    @field_validator("bootstrap_owner_key", "timing_calibration", "test_fail_calls", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        return None if value == "" else value

    @model_validator(mode="after")
    def _refuse_unsafe(self) -> Settings:
        if self.test_seed is not None and self.environment != "test":
            raise UnsafeSettingsError(
                "DPMINE_TEST_SEED makes the noise reproducible and is allowed only with "
                "DPMINE_ENVIRONMENT=test; unset it"
            )
        if self.test_fail_calls is not None and self.environment != "test":
            raise UnsafeSettingsError(
                "DPMINE_TEST_FAIL_CALLS makes charged calls fail on purpose and is allowed only "
                "with DPMINE_ENVIRONMENT=test; unset it"
            )
        if self.job_workers == 0 and self.database_url.startswith("sqlite"):
            raise UnsafeSettingsError(
                "DPMINE_JOB_WORKERS=0 leaves jobs without workers: on SQLite the server runs "
                "its own worker processes; set it to 1 or more"
            )
        if self.worker_stalled_after_s <= self.worker_heartbeat_s:
            raise UnsafeSettingsError(
                "DPMINE_WORKER_STALLED_AFTER_S must exceed DPMINE_WORKER_HEARTBEAT_S "
                "(a live worker would be taken for dead)"
            )
        if self.environment == "production":
            if self.secret_key == DEVELOPMENT_SECRET:
                raise UnsafeSettingsError(
                    "production needs its own DPMINE_SECRET_KEY (a long random string); "
                    "the development default is public"
                )
            if len(self.secret_key) < 32:
                raise UnsafeSettingsError("DPMINE_SECRET_KEY must be at least 32 characters")
            if not self.timing_padding:
                raise UnsafeSettingsError(
                    "DPMINE_TIMING_PADDING=false releases results as soon as they are computed, "
                    "so response times reveal the data; production keeps it on"
                )
            if self.timing_overrun != "fail":
                raise UnsafeSettingsError(
                    "DPMINE_TIMING_OVERRUN=release shows an overrunning kernel's release at a "
                    "data-dependent time; production keeps 'fail'"
                )
        if not self.timing_kernel_lane and self.environment != "test":
            raise UnsafeSettingsError(
                "DPMINE_TIMING_KERNEL_LANE=false lets concurrent kernels slow each other by a "
                "data-dependent amount past their padded deadlines; it is allowed only with "
                "DPMINE_ENVIRONMENT=test"
            )
        if (
            self.timing_padding
            and self.timing_overrun == "fail"
            and self.timing_base_ms < MIN_FAIL_CLOSED_BASE_MS
        ):
            raise UnsafeSettingsError(
                f"DPMINE_TIMING_BASE_MS={self.timing_base_ms:g} leaves a request no time for its "
                "own bookkeeping, and overruns fail closed, so answers would fail; set it to "
                f"at least {MIN_FAIL_CLOSED_BASE_MS:g} (or DPMINE_TIMING_OVERRUN=release in test "
                "mode)"
            )
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Explicit arguments, then the environment, then the TOML file named by
        ``DPMINE_CONFIG_FILE`` or else ``./dpmine.toml`` if it exists (``dpmine-server init``
        writes it); no .env or secrets-directory sources."""
        del dotenv_settings, file_secret_settings
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        config_file = os.environ.get(_CONFIG_FILE_ENV)
        if not config_file and Path(DEFAULT_CONFIG_FILE).is_file():
            config_file = DEFAULT_CONFIG_FILE
        if config_file:
            path = Path(config_file)
            if not path.is_file():
                raise UnsafeSettingsError(f"{_CONFIG_FILE_ENV}={config_file} is not a file")
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=path))
        return tuple(sources)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings (read once)."""
    return Settings()
