"""The ledger's unit per dataset (issue #24): "pure" (pico-epsilon, as before) or "zcdp"
(pico-rho), and the owner's delta for showing rho as (epsilon, delta). Datasets registered
before keep counting epsilon ("pure").

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-26 22:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add ``datasets.accounting`` ("pure" for the existing rows) and ``accounting_delta``."""
    with op.batch_alter_table("datasets") as batch:
        batch.add_column(
            sa.Column("accounting", sa.String(length=8), nullable=False, server_default="pure")
        )
        batch.add_column(sa.Column("accounting_delta", sa.String(length=40), nullable=True))


def downgrade() -> None:
    """Drop both columns (refused while a zCDP dataset exists: its units are not epsilon)."""
    bind = op.get_bind()
    zcdp = bind.execute(sa.text("SELECT count(*) FROM datasets WHERE accounting = 'zcdp'"))
    if zcdp.scalar_one():
        raise RuntimeError("zCDP datasets exist: their ledgers count rho, not epsilon")
    with op.batch_alter_table("datasets") as batch:
        batch.drop_column("accounting_delta")
        batch.drop_column("accounting")
