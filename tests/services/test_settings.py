"""Server settings: safe defaults, and a production configuration that refuses what would break
the privacy contract (DESIGN.md contract item 6: seeding only in an explicit test mode; the
public development secret is refused)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from dpmine_server.settings import DEVELOPMENT_SECRET, Settings, UnsafeSettingsError

LONG_SECRET = "p" * 40


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No DPMINE_* variable of the calling shell, and no ./dpmine.toml of the folder the tests
    started in, leaks into a test."""
    for name in list(os.environ):
        if name.startswith("DPMINE_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def test_a_settings_file_in_the_working_folder_is_read(tmp_path: Path) -> None:
    """What ``dpmine-server init`` writes is read without DPMINE_CONFIG_FILE; the environment
    still wins."""
    (tmp_path / "dpmine.toml").write_text(f'secret_key = "{"s" * 40}"\nport = 8123\n')
    assert (Settings().secret_key, Settings().port) == ("s" * 40, 8123)
    assert Settings(port=9000).port == 9000


def unsafe(error: ValidationError) -> UnsafeSettingsError:
    """The UnsafeSettingsError behind a validation error."""
    [detail] = error.errors()
    cause = detail.get("ctx", {}).get("error")
    assert isinstance(cause, UnsafeSettingsError), detail
    return cause


def test_laptop_defaults() -> None:
    settings = Settings()
    assert settings.environment == "development"
    assert settings.database_url == "sqlite:///var/dpmine.sqlite3"
    assert settings.secret_key == DEVELOPMENT_SECRET
    assert settings.test_seed is None
    assert settings.bootstrap_owner_key is None


class TestOverruns:
    def test_overruns_fail_closed_by_default_and_test_mode_releases_them(self) -> None:
        assert Settings().timing_overrun == "fail"
        assert Settings(environment="test").timing_overrun == "release"
        assert Settings(environment="test", timing_overrun="fail", timing_base_ms=150.0)

    @pytest.mark.parametrize("environment", ["development", "test"])
    def test_a_base_too_short_for_the_bookkeeping_is_refused(self, environment: str) -> None:
        with pytest.raises(ValidationError, match="DPMINE_TIMING_BASE_MS=5") as raised:
            Settings(environment=environment, timing_overrun="fail", timing_base_ms=5.0)
        unsafe(raised.value)

    def test_no_padding_needs_no_base(self) -> None:
        assert Settings(timing_padding=False, timing_base_ms=0.0).timing_base_ms == 0.0


class TestProduction:
    def test_refuses_the_development_secret(self) -> None:
        with pytest.raises(ValidationError, match="DPMINE_SECRET_KEY") as raised:
            Settings(environment="production")
        assert "public" in str(unsafe(raised.value))

    def test_refuses_a_short_secret(self) -> None:
        with pytest.raises(ValidationError, match="at least 32 characters") as raised:
            Settings(environment="production", secret_key="s" * 31)
        unsafe(raised.value)

    @pytest.mark.parametrize("seed", [0, 1, 2**40])
    def test_refuses_any_test_seed(self, seed: int) -> None:
        with pytest.raises(ValidationError, match="DPMINE_TEST_SEED") as raised:
            Settings(environment="production", secret_key=LONG_SECRET, test_seed=seed)
        unsafe(raised.value)

    def test_refuses_late_release_of_overruns(self) -> None:
        with pytest.raises(ValidationError, match="DPMINE_TIMING_OVERRUN") as raised:
            Settings(environment="production", secret_key=LONG_SECRET, timing_overrun="release")
        unsafe(raised.value)

    @pytest.mark.parametrize("environment", ["production", "development"])
    def test_refuses_kernels_outside_the_lane(self, environment: str) -> None:
        with pytest.raises(ValidationError, match="DPMINE_TIMING_KERNEL_LANE") as raised:
            Settings(environment=environment, secret_key=LONG_SECRET, timing_kernel_lane=False)
        unsafe(raised.value)
        assert not Settings(environment="test", timing_kernel_lane=False).timing_kernel_lane

    def test_accepts_a_long_secret(self) -> None:
        settings = Settings(environment="production", secret_key=LONG_SECRET)
        assert (settings.environment, settings.test_seed) == ("production", None)

    def test_environment_variables_are_checked_too(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("DPMINE_ENVIRONMENT", "production")
        monkeypatch.setenv("DPMINE_SECRET_KEY", LONG_SECRET)
        assert Settings().environment == "production"
        monkeypatch.setenv("DPMINE_TEST_SEED", "42")
        with pytest.raises(ValidationError, match="DPMINE_TEST_SEED"):
            Settings()


class TestSeedAndSecrets:
    def test_seed_allowed_only_in_test_mode(self) -> None:
        assert Settings(environment="test", test_seed=3).test_seed == 3
        with pytest.raises(ValidationError, match="only with DPMINE_ENVIRONMENT=test"):
            Settings(environment="development", test_seed=3)

    def test_seed_from_the_environment(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("DPMINE_ENVIRONMENT", "test")
        monkeypatch.setenv("DPMINE_TEST_SEED", "11")
        assert Settings().test_seed == 11

    @pytest.mark.parametrize("environment", ["development", "test"])
    def test_secrets_shorter_than_16_are_refused_everywhere(self, environment: str) -> None:
        with pytest.raises(ValidationError, match="secret_key"):
            Settings(environment=environment, secret_key="s" * 15)

    def test_bootstrap_key_needs_24_characters(self) -> None:
        with pytest.raises(ValidationError, match="bootstrap_owner_key"):
            Settings(bootstrap_owner_key="k" * 23)
        assert Settings(bootstrap_owner_key="k" * 24).bootstrap_owner_key == "k" * 24

    def test_settings_are_frozen_and_closed(self) -> None:
        settings = Settings()
        with pytest.raises(ValidationError):
            settings.environment = "production"  # type: ignore[misc]  # frozen on purpose
        with pytest.raises(ValidationError, match="not_a_setting"):
            Settings(not_a_setting=1)  # type: ignore[call-arg]  # unknown names are refused


class TestConfigFile:
    def _write(self, tmp_path: Path, text: str) -> Path:
        path = tmp_path / "dpmine.toml"
        path.write_text(text, encoding="utf-8")
        return path

    def test_values_come_from_the_toml_file(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        path = self._write(
            tmp_path,
            'environment = "test"\n'
            'database_url = "sqlite:////srv/dpmine.sqlite3"\n'
            'data_dir = "/srv/dpmine-data"\n'
            "job_workers = 4\n"
            "test_seed = 5\n",
        )
        monkeypatch.setenv("DPMINE_CONFIG_FILE", str(path))
        settings = Settings()
        assert settings.database_url == "sqlite:////srv/dpmine.sqlite3"
        assert settings.data_dir == Path("/srv/dpmine-data")
        assert (settings.job_workers, settings.test_seed) == (4, 5)

    def test_environment_and_arguments_override_the_file(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        path = self._write(tmp_path, "job_workers = 4\nport = 9000\n")
        monkeypatch.setenv("DPMINE_CONFIG_FILE", str(path))
        monkeypatch.setenv("DPMINE_JOB_WORKERS", "3")
        assert (Settings().job_workers, Settings().port) == (3, 9000)
        assert Settings(job_workers=7).job_workers == 7

    @pytest.mark.parametrize(
        ("text", "fragment"),
        [
            ('environment = "production"\n', "DPMINE_SECRET_KEY"),
            (f'environment = "production"\nsecret_key = "{LONG_SECRET}"\ntest_seed = 1\n', "SEED"),
            ('environment = "development"\ntest_seed = 1\n', "SEED"),
        ],
    )
    def test_unsafe_files_are_refused(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, fragment: str
    ) -> None:
        monkeypatch.setenv("DPMINE_CONFIG_FILE", str(self._write(tmp_path, text)))
        with pytest.raises(ValidationError, match=fragment):
            Settings()

    def test_production_file_with_its_own_secret(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        path = self._write(tmp_path, f'environment = "production"\nsecret_key = "{LONG_SECRET}"\n')
        monkeypatch.setenv("DPMINE_CONFIG_FILE", str(path))
        assert Settings().secret_key == LONG_SECRET

    def test_unknown_keys_are_refused(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("DPMINE_CONFIG_FILE", str(self._write(tmp_path, "workers = 4\n")))
        with pytest.raises(ValidationError, match="workers"):
            Settings()

    def test_missing_file_is_refused(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("DPMINE_CONFIG_FILE", str(tmp_path / "missing.toml"))
        with pytest.raises(UnsafeSettingsError, match="is not a file"):
            Settings()
