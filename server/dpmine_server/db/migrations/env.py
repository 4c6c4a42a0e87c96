"""Alembic environment: migrates the connection handed over by dpmine_server.db.migrate."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from dpmine_server.db import models  # noqa: F401  (registers the tables)
from dpmine_server.db.base import Base

target_metadata = Base.metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


connection = context.config.attributes.get("connection")
if connection is None:
    from dpmine_server.db.base import make_engine
    from dpmine_server.settings import get_settings

    engine = make_engine(get_settings().database_url)
    with engine.connect() as fresh:
        _run(fresh)
else:
    _run(connection)
