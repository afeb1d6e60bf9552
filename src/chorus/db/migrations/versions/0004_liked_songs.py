"""System playlists (Liked Songs): the playlist's kind, and live entries by media."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"


def upgrade() -> None:
    with op.batch_alter_table("playlist") as batch:
        batch.add_column(
            sa.Column("kind", sa.String(16), nullable=False, server_default="PLAYLIST")
        )
    # A like's duplicate check and Media.viewerHasLiked: live entries of one
    # playlist by media id.
    op.create_index(
        "ix_playlist_entry_media",
        "playlist_entry",
        ["playlist_id", "media_id"],
        postgresql_where=sa.text("removed_at IS NULL"),
        sqlite_where=sa.text("removed_at IS NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_playlist_entry_media", table_name="playlist_entry")
    with op.batch_alter_table("playlist") as batch:
        batch.drop_column("kind")
