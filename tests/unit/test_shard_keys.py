"""The schema is ready to shard by playlist (docs/capacity.md, "Sharding by playlist_id").

A table of one playlist's state is distributed by the playlist's id; PostgreSQL
sharding (Citus) enforces a primary key or unique key of a distributed table
only when it holds the distribution column, so every such key of a
playlist-scoped table must include it. The other tables are named with the
way they would be placed, and a new table must be put in one list or the other.
"""

from __future__ import annotations

from sqlalchemy import Index, Table, UniqueConstraint

from chorus.db.tables import metadata

PLAYLIST_SCOPED = {
    "playlist": "id",
    "playlist_member": "playlist_id",
    "playlist_entry": "playlist_id",
    "playlist_mutation": "playlist_id",
    "playlist_checkpoint": "playlist_id",
    "playlist_checkpoint_entry": "playlist_id",
    "playlist_batch_operation": "playlist_id",
}
"""Table → its distribution column: the playlist's id."""

ELSEWHERE = {
    "outbox": "a queue of the relay: distributed by playlist_id it needs the key "
    "(playlist_id, event_id), see KNOWN_GAPS",
    "catalog_media": "a reference table (media are read by every playlist's pages)",
    "follow": "distributed by follower_id: a user's follows together",
    "follow_count": "distributed by target_id (a playlist's or user's count)",
    "feed_switch": "distributed by target_id, beside follow_count",
    "feed_item": "distributed by follower_id: a follower's feed on one node",
}
"""Tables that are not one playlist's state, and where each would go."""

KNOWN_GAPS = {
    ("playlist_mutation", ("actor_id", "operation_id")): "operation ids are unique per actor "
    "across playlists; sharded, the key becomes (playlist_id, actor_id, operation_id)",
    ("playlist_batch_operation", ("actor_id", "operation_id")): "an atomic batch's later "
    "operation ids share playlist_mutation's key: unique per actor across playlists",
    ("outbox", ("event_id",)): "one sequence orders the whole outbox; sharded, each shard "
    "relays its own rows and the key becomes (playlist_id, event_id)",
}
"""Keys without the playlist's id that a sharded deployment must change (docs/capacity.md)."""


def _unique_keys(table: Table) -> list[tuple[str, ...]]:
    """The column names of the primary key, each unique constraint and each unique index."""
    keys = [tuple(c.name for c in table.primary_key.columns)]
    for constraint in table.constraints:
        if isinstance(constraint, UniqueConstraint):
            keys.append(tuple(c.name for c in constraint.columns))
    for index in table.indexes:
        if isinstance(index, Index) and index.unique:
            keys.append(tuple(c.name for c in index.columns))
    return [k for k in keys if k]


def test_every_table_is_placed() -> None:
    tables = set(metadata.tables)
    placed = set(PLAYLIST_SCOPED) | set(ELSEWHERE)
    assert tables - placed == set(), "a new table: is it one playlist's state or not?"
    assert placed - tables == set(), "a table named here no longer exists"
    assert not set(PLAYLIST_SCOPED) & set(ELSEWHERE)


def test_every_table_with_a_playlist_id_is_considered() -> None:
    with_column = {name for name, t in metadata.tables.items() if "playlist_id" in t.columns}
    # feed_item holds a playlist id but belongs to its follower (ELSEWHERE says so).
    assert with_column <= set(PLAYLIST_SCOPED) | {"outbox", "feed_item"}


def test_every_unique_key_of_a_playlist_table_holds_the_playlist_id() -> None:
    missing = []
    for name, column in PLAYLIST_SCOPED.items():
        for key in _unique_keys(metadata.tables[name]):
            if column not in key and (name, key) not in KNOWN_GAPS:
                missing.append((name, key))
    assert missing == []


def test_the_known_gaps_are_still_there() -> None:
    """Each gap is a real key: once one is fixed it leaves this list (and capacity.md)."""
    for name, key in KNOWN_GAPS:
        assert key in _unique_keys(metadata.tables[name]), (name, key)


def test_the_playlist_tables_reach_each_other_through_the_playlist() -> None:
    """Colocated tables join on the distribution column: every foreign key of a playlist
    table goes from its ``playlist_id`` to ``playlist.id``, or to another playlist table's
    ``playlist_id`` among its columns (``playlist_batch_operation`` → its log row)."""
    for name in PLAYLIST_SCOPED:
        for constraint in metadata.tables[name].foreign_key_constraints:
            pairs = {
                (e.parent.name, e.column.table.name, e.column.name) for e in constraint.elements
            }
            referred = constraint.referred_table.name
            assert referred in PLAYLIST_SCOPED, (name, constraint)
            assert ("playlist_id", referred, PLAYLIST_SCOPED[referred]) in pairs, (name, pairs)
