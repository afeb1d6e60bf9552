"""Every operation id of an atomic batch, kept: ``playlist_batch_operation``.

An atomic batch is one version and one log row, recorded under its first
operation's id. Its other operations' ids are kept here, beside that log row,
so that none of them is applied again later on its own (``OPERATION_ID_REUSED``,
as resending the batch's first id alone is). A row is dropped with its log
row (``ON DELETE CASCADE``: compaction), so it lives as long as the batch is
replayable.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from chorus.domain.limits import MAX_ID_LENGTH

revision = "0011"
down_revision = "0010"


def upgrade() -> None:
    op.create_table(
        "playlist_batch_operation",
        sa.Column("actor_id", sa.String(MAX_ID_LENGTH), nullable=False),
        sa.Column("operation_id", sa.String(64), nullable=False),
        sa.Column("playlist_id", sa.String(64), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["playlist_id", "version"],
            ["playlist_mutation.playlist_id", "playlist_mutation.version"],
            name="fk_playlist_batch_operation_playlist_id_playlist_mutation",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("actor_id", "operation_id", name="pk_playlist_batch_operation"),
    )


def downgrade() -> None:
    op.drop_table("playlist_batch_operation")
