"""Record which server process reserved each ledger entry and job (crash recovery).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21 07:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add the instance_id columns."""
    with op.batch_alter_table("ledger_entries") as batch:
        batch.add_column(sa.Column("instance_id", sa.String(length=32), nullable=True))
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("instance_id", sa.String(length=32), nullable=True))


def downgrade() -> None:
    """Drop the instance_id columns."""
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("instance_id")
    with op.batch_alter_table("ledger_entries") as batch:
        batch.drop_column("instance_id")
