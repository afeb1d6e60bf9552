"""Playlists, members, entries, the mutation log and the outbox (DESIGN §3)."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

from chorus.db.tables import UTCDateTime

revision = "0001"
down_revision = None

JSON_DOCUMENT = sa.JSON().with_variant(JSONB(), "postgresql")
POSITION_KEY = sa.String(32).with_variant(sa.String(32, collation="C"), "postgresql")


def upgrade() -> None:
    op.create_table(
        "playlist",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("owner_id", sa.String(128), nullable=False),
        sa.Column("title", sa.String(200), nullable=False),
        sa.Column("description", sa.Text()),
        sa.Column("visibility", sa.String(16), nullable=False),
        sa.Column("collaborative", sa.Boolean(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("membership_epoch", sa.Integer(), nullable=False),
        sa.Column("entry_count", sa.Integer(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.Column("deleted_at", UTCDateTime()),
        sa.PrimaryKeyConstraint("id", name="pk_playlist"),
    )
    op.create_table(
        "playlist_member",
        sa.Column("playlist_id", sa.String(64), nullable=False),
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("membership_epoch", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["playlist_id"], ["playlist.id"], name="fk_playlist_member_playlist_id_playlist"
        ),
        sa.PrimaryKeyConstraint("playlist_id", "user_id", name="pk_playlist_member"),
    )
    op.create_index("ix_playlist_member_user_id", "playlist_member", ["user_id"])
    op.create_table(
        "playlist_entry",
        sa.Column("playlist_id", sa.String(64), nullable=False),
        sa.Column("entry_id", sa.String(64), nullable=False),
        sa.Column("position_key", POSITION_KEY, nullable=False),
        sa.Column("media_id", sa.String(128), nullable=False),
        sa.Column("added_by", sa.String(128), nullable=False),
        sa.Column("added_at", UTCDateTime(), nullable=False),
        sa.Column("removed_at", UTCDateTime()),
        sa.ForeignKeyConstraint(
            ["playlist_id"], ["playlist.id"], name="fk_playlist_entry_playlist_id_playlist"
        ),
        sa.PrimaryKeyConstraint("playlist_id", "entry_id", name="pk_playlist_entry"),
    )
    op.create_index(
        "ix_playlist_entry_order",
        "playlist_entry",
        ["playlist_id", "position_key", "entry_id"],
        postgresql_where=sa.text("removed_at IS NULL"),
        sqlite_where=sa.text("removed_at IS NULL"),
    )
    op.create_table(
        "playlist_mutation",
        sa.Column("playlist_id", sa.String(64), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("operation_id", sa.String(64), nullable=False),
        sa.Column("actor_id", sa.String(128), nullable=False),
        sa.Column("payload", JSON_DOCUMENT, nullable=False),
        sa.Column("request_hash", sa.String(64), nullable=False),
        sa.Column("result", JSON_DOCUMENT, nullable=False),
        sa.Column("committed_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["playlist_id"], ["playlist.id"], name="fk_playlist_mutation_playlist_id_playlist"
        ),
        sa.PrimaryKeyConstraint("playlist_id", "version", name="pk_playlist_mutation"),
        sa.UniqueConstraint(
            "actor_id", "operation_id", name="uq_playlist_mutation_actor_id_operation_id"
        ),
    )
    op.create_table(
        "outbox",
        sa.Column(
            "event_id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("playlist_id", sa.String(64), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("payload", JSON_DOCUMENT, nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("published_at", UTCDateTime()),
        sa.PrimaryKeyConstraint("event_id", name="pk_outbox"),
    )
    op.create_index(
        "ix_outbox_unpublished",
        "outbox",
        ["event_id"],
        postgresql_where=sa.text("published_at IS NULL"),
        sqlite_where=sa.text("published_at IS NULL"),
    )


def downgrade() -> None:
    op.drop_table("outbox")
    op.drop_table("playlist_mutation")
    op.drop_index("ix_playlist_entry_order", table_name="playlist_entry")
    op.drop_table("playlist_entry")
    op.drop_index("ix_playlist_member_user_id", table_name="playlist_member")
    op.drop_table("playlist_member")
    op.drop_table("playlist")
