"""Drop the mining sessions: they held only SerenadeES's ES memo, removed because it
under-charged (issue #7).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23 22:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Drop the mining_sessions table (its memo state is discarded)."""
    op.drop_table("mining_sessions")


def downgrade() -> None:
    """Recreate the empty mining_sessions table as revision 0001 made it."""
    op.create_table(
        "mining_sessions",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("principal_id", sa.Integer(), nullable=False),
        sa.Column("dataset_id", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=64), nullable=False),
        sa.Column("state", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["dataset_id"],
            ["datasets.id"],
        ),
        sa.ForeignKeyConstraint(
            ["principal_id"],
            ["principals.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
