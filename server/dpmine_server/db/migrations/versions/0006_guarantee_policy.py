"""The owner's guarantee policy per dataset (issue #25): "pure_only" refuses the operations
whose guarantee is "approximate" (the MCMC samplers) before any charge. Datasets registered
before keep serving every operation ("allow_approximate"), as they did.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-26 19:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add ``datasets.guarantee_policy``, "allow_approximate" for the existing rows."""
    with op.batch_alter_table("datasets") as batch:
        batch.add_column(
            sa.Column(
                "guarantee_policy",
                sa.String(length=24),
                nullable=False,
                server_default="allow_approximate",
            )
        )


def downgrade() -> None:
    """Drop the column (every dataset serves every operation again)."""
    with op.batch_alter_table("datasets") as batch:
        batch.drop_column("guarantee_policy")
