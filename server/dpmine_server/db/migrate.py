"""Schema migrations (Alembic) run programmatically: ``upgrade_to_head(engine)``."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine

__all__ = ["MIGRATIONS_DIR", "alembic_config", "upgrade_to_head"]

MIGRATIONS_DIR = Path(__file__).with_name("migrations")


def alembic_config() -> Config:
    """An Alembic configuration pointing at the packaged migration scripts."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return config


def upgrade_to_head(engine: Engine) -> None:
    """Bring the database schema up to the newest revision (idempotent)."""
    config = alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")
