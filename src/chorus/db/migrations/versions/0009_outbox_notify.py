"""PostgreSQL tells listening relays when outbox rows are committed.

A statement-level trigger on ``outbox`` runs ``pg_notify('chorus_outbox', '')``
in the inserting transaction; PostgreSQL delivers it at commit (never for a
transaction rolled back) and folds the identical notifications of one
transaction into one, so a group commit of many edits sends one. A relay in
another process ``LISTEN``\\ s (:func:`chorus.db.watch.listen_commits`) and
drains at once instead of at its next poll (``poll_interval_s``, 0.5 s).
SQLite has no notifications; its commit watch reads ``PRAGMA data_version``.
"""

from __future__ import annotations

from alembic import op

revision = "0009"
down_revision = "0008"

CHANNEL = "chorus_outbox"
"""Kept equal to :data:`chorus.db.watch.OUTBOX_CHANNEL` (a migration never imports the app)."""


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(
        f"""
        CREATE FUNCTION chorus_outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_notify('{CHANNEL}', '');
            RETURN NULL;
        END
        $$
        """
    )
    op.execute(
        "CREATE TRIGGER outbox_notify AFTER INSERT ON outbox"
        " FOR EACH STATEMENT EXECUTE FUNCTION chorus_outbox_notify()"
    )


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP TRIGGER outbox_notify ON outbox")
    op.execute("DROP FUNCTION chorus_outbox_notify()")
