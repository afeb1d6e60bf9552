"""The mutation log's retention floor per playlist."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"


def upgrade() -> None:
    with op.batch_alter_table("playlist") as batch:
        batch.add_column(sa.Column("log_floor", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("playlist") as batch:
        batch.drop_column("log_floor")
