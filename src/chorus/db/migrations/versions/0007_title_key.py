"""Playlist title keys: case-folded titles for ordering and the PUBLIC title search.

Existing rows get their key from Python (``title_key``), not from SQL's
``lower()``: SQLite's folds ASCII only and PostgreSQL's depends on the locale.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from chorus.db.tables import TITLE_KEY
from chorus.domain.playlist_search import title_key

revision = "0007"
down_revision = "0006"

_BATCH = 1000


def upgrade() -> None:
    with op.batch_alter_table("playlist") as batch:
        batch.add_column(sa.Column("title_key", TITLE_KEY, nullable=False, server_default=""))
    table = sa.table(
        "playlist",
        sa.column("id", sa.String()),
        sa.column("title", sa.String()),
        sa.column("title_key", sa.String()),
    )
    conn = op.get_bind()
    after = ""
    while True:
        rows = conn.execute(
            sa.select(table.c.id, table.c.title)
            .where(table.c.id > after)
            .order_by(table.c.id)
            .limit(_BATCH)
        ).all()
        if not rows:
            break
        for row in rows:
            conn.execute(
                table.update().where(table.c.id == row.id).values(title_key=title_key(row.title))
            )
        after = rows[-1].id
    op.create_index(
        "ix_playlist_visibility_title_key", "playlist", ["visibility", "title_key", "id"]
    )


def downgrade() -> None:
    op.drop_index("ix_playlist_visibility_title_key", table_name="playlist")
    with op.batch_alter_table("playlist") as batch:
        batch.drop_column("title_key")
