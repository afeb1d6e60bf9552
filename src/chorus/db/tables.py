"""The relational source of truth (DESIGN §3), as SQLAlchemy Core tables.

Both dialects share these definitions; what differs is spelled with
``with_variant``: position keys sort bytewise (``COLLATE "C"`` on PostgreSQL;
SQLite's default ``BINARY`` already does), JSON is ``JSONB`` on PostgreSQL,
and SQLite's auto-increment wants ``INTEGER``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Dialect,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.dialects.postgresql import JSONB

from chorus.domain.limits import MAX_ID_LENGTH
from chorus.domain.playlist_search import MAX_TITLE_KEY_LENGTH
from chorus.domain.positions import MAX_LENGTH

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC timestamp on both dialects (SQLite drops the zone)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime")
        return value.astimezone(UTC)  # SQLite keeps the wall clock only

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value


POSITION_KEY = String(MAX_LENGTH).with_variant(String(MAX_LENGTH, collation="C"), "postgresql")
# Title keys compare by code point too: the title search is a range of them
# (chorus.domain.playlist_search.prefix_end), and PostgreSQL's locale order is not that.
TITLE_KEY = String(MAX_TITLE_KEY_LENGTH).with_variant(
    String(MAX_TITLE_KEY_LENGTH, collation="C"), "postgresql"
)
JSON_DOCUMENT: Any = JSON().with_variant(JSONB(), "postgresql")
ID = String(MAX_ID_LENGTH)

playlist = Table(
    "playlist",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("owner_id", ID, nullable=False),
    Column("title", String(200), nullable=False),
    Column("description", Text),
    Column("visibility", String(16), nullable=False),
    Column("collaborative", Boolean, nullable=False),
    Column("version", Integer, nullable=False),
    Column("membership_epoch", Integer, nullable=False),
    Column("entry_count", Integer, nullable=False),
    # The oldest version the mutation log still holds changes for; below it,
    # only operation-id records kept for idempotent retries (chorus.db.compaction).
    Column("log_floor", Integer, nullable=False, server_default="0"),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Column("deleted_at", UTCDateTime),
    # PLAYLIST, or a system playlist such as LIKED_SONGS (chorus.domain.library).
    Column("kind", String(16), nullable=False, server_default="PLAYLIST"),
    # The title case-folded (chorus.domain.playlist_search.title_key), written with the
    # title: ordering by title and searching titles ignore case on both dialects.
    Column("title_key", TITLE_KEY, nullable=False, server_default=""),
)
# searchPlaylists: PUBLIC titles by prefix, in (title key, id) order, one range scan.
Index(
    "ix_playlist_visibility_title_key", playlist.c.visibility, playlist.c.title_key, playlist.c.id
)

playlist_member = Table(
    "playlist_member",
    metadata,
    Column("playlist_id", ForeignKey("playlist.id"), primary_key=True),
    Column("user_id", ID, primary_key=True),
    Column("role", String(16), nullable=False),
    Column("membership_epoch", Integer, nullable=False),
    Index(None, "user_id"),
)

playlist_entry = Table(
    "playlist_entry",
    metadata,
    Column("playlist_id", ForeignKey("playlist.id"), primary_key=True),
    Column("entry_id", String(64), primary_key=True),
    Column("position_key", POSITION_KEY, nullable=False),
    Column("media_id", ID, nullable=False),
    Column("added_by", ID, nullable=False),
    Column("added_at", UTCDateTime, nullable=False),
    Column("removed_at", UTCDateTime),
)
# Live entries in list order: every page, neighbour and window read. Tombstones
# are only ever read by entry id, through the primary key.
Index(
    "ix_playlist_entry_order",
    playlist_entry.c.playlist_id,
    playlist_entry.c.position_key,
    playlist_entry.c.entry_id,
    postgresql_where=playlist_entry.c.removed_at.is_(None),
    sqlite_where=playlist_entry.c.removed_at.is_(None),
)

# A like's duplicate check and Media.viewerHasLiked: live entries by media id.
Index(
    "ix_playlist_entry_media",
    playlist_entry.c.playlist_id,
    playlist_entry.c.media_id,
    postgresql_where=playlist_entry.c.removed_at.is_(None),
    sqlite_where=playlist_entry.c.removed_at.is_(None),
)

playlist_mutation = Table(
    "playlist_mutation",
    metadata,
    Column("playlist_id", ForeignKey("playlist.id"), primary_key=True),
    Column("version", Integer, primary_key=True),
    Column("operation_id", String(64), nullable=False),
    Column("actor_id", ID, nullable=False),
    Column("payload", JSON_DOCUMENT, nullable=False),
    Column("request_hash", String(64), nullable=False),
    Column("result", JSON_DOCUMENT, nullable=False),
    Column("committed_at", UTCDateTime, nullable=False),
    # Operation ids are the client's; scoping them per actor keeps one user's
    # id from replaying (or blocking) another user's command.
    UniqueConstraint("actor_id", "operation_id"),
)

# The operation ids of an atomic batch after its first (the log row holds the first):
# each one's record, so that it is never applied again on its own (chorus.db.batches).
# Dropped with its log row (compaction), so kept as long as the batch is replayable.
playlist_batch_operation = Table(
    "playlist_batch_operation",
    metadata,
    Column("actor_id", ID, primary_key=True),
    Column("operation_id", String(64), primary_key=True),
    Column("playlist_id", String(64), nullable=False),
    Column("version", Integer, nullable=False),
    ForeignKeyConstraint(
        ["playlist_id", "version"],
        ["playlist_mutation.playlist_id", "playlist_mutation.version"],
        ondelete="CASCADE",
    ),
)

# The feed pulls a large target's recent versions (chorus.db.feed): by time, per playlist.
Index(
    "ix_playlist_mutation_committed",
    playlist_mutation.c.playlist_id,
    playlist_mutation.c.committed_at,
)
# A followed user's playlists, for the feed's pull side.
Index("ix_playlist_owner_id", playlist.c.owner_id)

# History checkpoints (chorus.domain.version_history): every CHECKPOINT_EVERY versions, the
# header and the whole live list as that version left them, so a read of an
# older version undoes at most that many log rows. Deleted below the log floor
# by compaction. The entries' key is the keyset order a window reads in.
playlist_checkpoint = Table(
    "playlist_checkpoint",
    metadata,
    Column("playlist_id", ForeignKey("playlist.id"), primary_key=True),
    Column("version", Integer, primary_key=True),
    Column("title", String(200), nullable=False),
    Column("description", Text),
    Column("visibility", String(16), nullable=False),
    Column("collaborative", Boolean, nullable=False),
    Column("membership_epoch", Integer, nullable=False),
    Column("entry_count", Integer, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Column("deleted_at", UTCDateTime),
)

playlist_checkpoint_entry = Table(
    "playlist_checkpoint_entry",
    metadata,
    Column("playlist_id", String(64), primary_key=True),
    Column("version", Integer, primary_key=True),
    Column("position_key", POSITION_KEY, primary_key=True),
    Column("entry_id", String(64), primary_key=True),
    Column("media_id", ID, nullable=False),
    Column("added_by", ID, nullable=False),
    Column("added_at", UTCDateTime, nullable=False),
)

outbox = Table(
    "outbox",
    metadata,
    Column("event_id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True),
    Column("playlist_id", String(64), nullable=False),
    Column("version", Integer, nullable=False),
    Column("payload", JSON_DOCUMENT, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("published_at", UTCDateTime),
    # The committing request's W3C traceparent (chorus.tracing); NULL when untraced.
    Column("trace_context", String(64)),
)
Index(
    "ix_outbox_unpublished",
    outbox.c.event_id,
    postgresql_where=outbox.c.published_at.is_(None),
    sqlite_where=outbox.c.published_at.is_(None),
)

# Media imported into the embedded catalog at run time (chorus.catalog.embedded);
# the Chinook sample lives in memory. ``search_text`` is title, artists and album
# case-folded (chorus.catalog.matching), so a plain escaped LIKE searches alike
# on both dialects. Ids sort bytewise, as search results are ordered by id.
catalog_media = Table(
    "catalog_media",
    metadata,
    Column(
        "id",
        String(MAX_ID_LENGTH).with_variant(String(MAX_ID_LENGTH, collation="C"), "postgresql"),
        primary_key=True,
    ),
    Column("title", Text, nullable=False),
    Column("artists", JSON_DOCUMENT, nullable=False),
    Column("album", Text),
    Column("duration_ms", Integer),
    Column("available", Boolean, nullable=False),
    Column("search_text", Text, nullable=False),
    Column("added_at", UTCDateTime, nullable=False),
)

# One follows relation for every kind of target (chorus.domain.follows):
# PLAYLIST targets are playlist ids, USER targets user ids.
follow = Table(
    "follow",
    metadata,
    Column("follower_id", ID, primary_key=True),
    Column("target_kind", String(16), primary_key=True),
    Column("target_id", ID, primary_key=True),
    Column("created_at", UTCDateTime, nullable=False),
)
# A target's followers: the push side's INSERT … SELECT, and a switch back to
# push walking them by follower id in batches (migration 0010).
Index(
    "ix_follow_target",
    follow.c.target_kind,
    follow.c.target_id,
    follow.c.follower_id,
    follow.c.created_at,
)

# Followers per target, kept with every follow and unfollow, so deciding push or
# pull for an event and Playlist.followerCount read one row, not count them.
follow_count = Table(
    "follow_count",
    metadata,
    Column("target_kind", String(16), primary_key=True),
    Column("target_id", ID, primary_key=True),
    Column("follower_count", Integer, nullable=False),
    # chorus.domain.follows.FanOut; NULL: untouched since migration 0010, by count.
    Column("fan_out", String(8)),
)

# A target switching back from pull to push (fan_out TO_PUSH): how far the
# worker has backfilled its followers' rows. Followers are walked by id; a
# target with more retained versions than a batch holds is walked by
# (playlist, version) within one follower.
feed_switch = Table(
    "feed_switch",
    metadata,
    Column("target_kind", String(16), primary_key=True),
    Column("target_id", ID, primary_key=True),
    Column("started_at", UTCDateTime, nullable=False),
    Column("follower_after", ID),
    Column("playlist_after", String(64)),
    Column("version_after", Integer),
)

# The push side of the feed: one row per follower and playlist version, written
# at least once by the feed consumer (ON CONFLICT DO NOTHING on the key). Thin:
# ids and the time only.
feed_item = Table(
    "feed_item",
    metadata,
    Column("follower_id", ID, primary_key=True),
    Column("playlist_id", String(64), primary_key=True),
    Column("version", Integer, primary_key=True),
    Column("actor_id", ID, nullable=False),
    Column("happened_at", UTCDateTime, nullable=False),
)
# A follower's feed, newest first.
Index(
    "ix_feed_item_order",
    feed_item.c.follower_id,
    feed_item.c.happened_at,
    feed_item.c.playlist_id,
    feed_item.c.version,
)
# Retention deletes by age.
Index("ix_feed_item_happened_at", feed_item.c.happened_at)
