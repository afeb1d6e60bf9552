"""Follows (one table for every kind of target), their counts, and the pushed feed."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from chorus.db.tables import UTCDateTime

revision = "0005"
down_revision = "0004"


def upgrade() -> None:
    op.create_index(
        "ix_playlist_mutation_committed", "playlist_mutation", ["playlist_id", "committed_at"]
    )
    op.create_index("ix_playlist_owner_id", "playlist", ["owner_id"])
    op.create_table(
        "follow",
        sa.Column("follower_id", sa.String(128), nullable=False),
        sa.Column("target_kind", sa.String(16), nullable=False),
        sa.Column("target_id", sa.String(128), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("follower_id", "target_kind", "target_id", name="pk_follow"),
    )
    op.create_index("ix_follow_target", "follow", ["target_kind", "target_id", "created_at"])
    op.create_table(
        "follow_count",
        sa.Column("target_kind", sa.String(16), nullable=False),
        sa.Column("target_id", sa.String(128), nullable=False),
        sa.Column("follower_count", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("target_kind", "target_id", name="pk_follow_count"),
    )
    op.create_table(
        "feed_item",
        sa.Column("follower_id", sa.String(128), nullable=False),
        sa.Column("playlist_id", sa.String(64), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("actor_id", sa.String(128), nullable=False),
        sa.Column("happened_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("follower_id", "playlist_id", "version", name="pk_feed_item"),
    )
    op.create_index(
        "ix_feed_item_order", "feed_item", ["follower_id", "happened_at", "playlist_id", "version"]
    )
    op.create_index("ix_feed_item_happened_at", "feed_item", ["happened_at"])


def downgrade() -> None:
    op.drop_table("feed_item")
    op.drop_table("follow_count")
    op.drop_table("follow")
    op.drop_index("ix_playlist_owner_id", table_name="playlist")
    op.drop_index("ix_playlist_mutation_committed", table_name="playlist_mutation")
