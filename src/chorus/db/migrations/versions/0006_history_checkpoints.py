"""History checkpoints: a playlist's header and live list every N versions.

History committed before this migration has no checkpoints: a read of it
undoes the log from the head (or from the first checkpoint after it).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from chorus.db.tables import POSITION_KEY, UTCDateTime

revision = "0006"
down_revision = "0005"


def upgrade() -> None:
    op.create_table(
        "playlist_checkpoint",
        sa.Column("playlist_id", sa.String(64), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("title", sa.String(200), nullable=False),
        sa.Column("description", sa.Text()),
        sa.Column("visibility", sa.String(16), nullable=False),
        sa.Column("collaborative", sa.Boolean(), nullable=False),
        sa.Column("membership_epoch", sa.Integer(), nullable=False),
        sa.Column("entry_count", sa.Integer(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.Column("deleted_at", UTCDateTime()),
        sa.ForeignKeyConstraint(
            ["playlist_id"], ["playlist.id"], name="fk_playlist_checkpoint_playlist_id_playlist"
        ),
        sa.PrimaryKeyConstraint("playlist_id", "version", name="pk_playlist_checkpoint"),
    )
    op.create_table(
        "playlist_checkpoint_entry",
        sa.Column("playlist_id", sa.String(64), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("position_key", POSITION_KEY, nullable=False),
        sa.Column("entry_id", sa.String(64), nullable=False),
        sa.Column("media_id", sa.String(128), nullable=False),
        sa.Column("added_by", sa.String(128), nullable=False),
        sa.Column("added_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint(
            "playlist_id",
            "version",
            "position_key",
            "entry_id",
            name="pk_playlist_checkpoint_entry",
        ),
    )


def downgrade() -> None:
    op.drop_table("playlist_checkpoint_entry")
    op.drop_table("playlist_checkpoint")
