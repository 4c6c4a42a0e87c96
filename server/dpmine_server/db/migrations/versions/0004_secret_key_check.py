"""Keep named server values, first the check value of DPMINE_SECRET_KEY (issue #9): a server
started with another secret than the one its API-key hashes were made with refuses to start
instead of answering 401 to every key.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create the server_state table (the check value is stored at the next start)."""
    op.create_table(
        "server_state",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )


def downgrade() -> None:
    """Drop the server_state table (and with it the secret key check)."""
    op.drop_table("server_state")
