"""Schema migrations on SQLite: head matches the models, 0003 (drop the mining sessions of
the removed ES memo, issue #7) goes down and up again, and 0006 gives the datasets registered
before it the guarantee policy they had (serve every operation, issue #25)."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import Engine, inspect, text

import dpmine_server.db.models  # noqa: F401  (registers every table on Base.metadata)
from dpmine_server.db.base import Base, make_engine
from dpmine_server.db.migrate import alembic_config, upgrade_to_head


def _tables(engine: Engine) -> set[str]:
    return set(inspect(engine).get_table_names()) - {"alembic_version"}


def _to(engine: Engine, revision: str, *, down: bool) -> None:
    config = alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        (command.downgrade if down else command.upgrade)(config, revision)


def test_head_has_the_model_tables_and_no_mining_sessions(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'head.sqlite3'}")
    upgrade_to_head(engine)
    assert _tables(engine) == set(Base.metadata.tables)
    assert "mining_sessions" not in _tables(engine)


def test_0003_downgrades_and_upgrades_again(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'roundtrip.sqlite3'}")
    upgrade_to_head(engine)
    _to(engine, "0002", down=True)
    columns = {c["name"] for c in inspect(engine).get_columns("mining_sessions")}
    assert columns == {
        "id",
        "principal_id",
        "dataset_id",
        "kind",
        "state",
        "created_at",
        "expires_at",
    }
    _to(engine, "head", down=False)
    assert "mining_sessions" not in _tables(engine)
    _to(engine, "base", down=True)
    assert _tables(engine) == set()


def test_0006_keeps_existing_datasets_serving_every_operation(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'policy.sqlite3'}")
    _to(engine, "0005", down=False)
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO datasets (id, name, description, attribution, kind, metadata_json, "
                "source_json, version, status, cap_units, spent_units, created_at) VALUES "
                "('old', 'Old', '', '', 'table', '{}', '{}', 1, 'active', 5, 0, "
                "'2026-11-01 00:00:00')"
            )
        )
    _to(engine, "head", down=False)
    model_columns = {c.name for c in Base.metadata.tables["datasets"].columns}
    assert {c["name"] for c in inspect(engine).get_columns("datasets")} == model_columns
    with engine.connect() as connection:
        policy = connection.execute(text("SELECT guarantee_policy FROM datasets")).scalar_one()
    assert policy == "allow_approximate"
    _to(engine, "0005", down=True)
    assert "guarantee_policy" not in {c["name"] for c in inspect(engine).get_columns("datasets")}


def test_0007_keeps_existing_datasets_counting_epsilon(tmp_path: Path) -> None:
    """Issue #24: datasets from before count pure epsilon; the downgrade refuses to drop the
    unit while a zCDP dataset exists (its units are rho, which would be read as epsilon)."""
    engine = make_engine(f"sqlite:///{tmp_path / 'units.sqlite3'}")
    _to(engine, "0006", down=False)
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO datasets (id, name, description, attribution, kind, metadata_json, "
                "source_json, version, status, cap_units, spent_units, created_at) VALUES "
                "('old', 'Old', '', '', 'table', '{}', '{}', 1, 'active', 5, 0, "
                "'2026-11-01 00:00:00')"
            )
        )
    _to(engine, "head", down=False)
    with engine.begin() as connection:
        row = connection.execute(text("SELECT accounting, accounting_delta FROM datasets")).one()
        assert tuple(row) == ("pure", None)
        connection.execute(text("UPDATE datasets SET accounting = 'zcdp'"))
    with pytest.raises(RuntimeError, match="zCDP datasets exist"):
        _to(engine, "0006", down=True)
    with engine.begin() as connection:
        connection.execute(text("UPDATE datasets SET accounting = 'pure'"))
    _to(engine, "0006", down=True)
    assert "accounting" not in {c["name"] for c in inspect(engine).get_columns("datasets")}
