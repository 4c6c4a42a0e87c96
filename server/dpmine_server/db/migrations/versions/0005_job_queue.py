"""Jobs run in worker processes fed by a queue engine (issue #8).

* ``jobs.cancel_requested``: the analyst asked to cancel; a worker stops at its next public
  progress step (the charge stays).
* ``jobs.queue_job_id``: the queue engine's id of the job (PostgreSQL deployments), so recovery
  can tell a job the queue owns from one whose submitting process died before handing it over.
* ``jobs.remaining_units``: what was left of the grant right after the charge, for the receipt
  that the worker writes.
* On PostgreSQL, the schema of the queue engine (procrastinate): its tables, types and
  functions, as the installed library ships them.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24 02:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_DROP_PROCRASTINATE = """
DO $$
DECLARE item record;
BEGIN
    FOR item IN SELECT tablename FROM pg_tables
                WHERE schemaname = current_schema() AND tablename LIKE 'procrastinate%' LOOP
        EXECUTE format('DROP TABLE IF EXISTS %I CASCADE', item.tablename);
    END LOOP;
    FOR item IN SELECT p.oid::regprocedure AS signature FROM pg_proc p
                JOIN pg_namespace n ON n.oid = p.pronamespace
                WHERE n.nspname = current_schema() AND p.proname LIKE 'procrastinate%' LOOP
        EXECUTE format('DROP FUNCTION IF EXISTS %s CASCADE', item.signature);
    END LOOP;
    FOR item IN SELECT t.typname FROM pg_type t
                JOIN pg_namespace n ON n.oid = t.typnamespace
                WHERE n.nspname = current_schema() AND t.typname LIKE 'procrastinate%'
                  AND t.typtype IN ('e', 'c') LOOP
        EXECUTE format('DROP TYPE IF EXISTS %I CASCADE', item.typname);
    END LOOP;
END $$;
"""


def _run_script(bind: sa.Connection, script: str) -> None:
    """Run a multi-statement SQL script on the migration's connection, with no parameter
    processing (the script contains ``%`` signs)."""
    cursor = bind.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.execute(script)
    finally:
        cursor.close()


def upgrade() -> None:
    """Add the job columns; install the queue engine's schema on PostgreSQL."""
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(
            sa.Column("cancel_requested", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch.add_column(sa.Column("queue_job_id", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("remaining_units", sa.BigInteger(), nullable=True))
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        # Imported here: alembic loads every revision at each start, and a SQLite server
        # never needs the queue engine or its PostgreSQL driver.
        from procrastinate.schema import SchemaManager  # noqa: PLC0415

        _run_script(bind, SchemaManager.get_schema())


def downgrade() -> None:
    """Drop the queue engine's schema (PostgreSQL) and the job columns."""
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        _run_script(bind, _DROP_PROCRASTINATE)
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("remaining_units")
        batch.drop_column("queue_job_id")
        batch.drop_column("cancel_requested")
