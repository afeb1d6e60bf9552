"""Each followed target's fan-out (push, pull, switching), and switches in progress.

``follow_count.fan_out`` holds :class:`chorus.domain.follows.FanOut`; rows
written before this stay NULL and are decided by their count as before, until
their next follow or unfollow stores a value. ``feed_switch`` holds the
cursor of each target a worker is backfilling back to push. ``ix_follow_target``
gains ``follower_id`` after the target, so the worker walks a target's
followers in id order through the index.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from chorus.db.tables import UTCDateTime

revision = "0010"
down_revision = "0009"


def upgrade() -> None:
    with op.batch_alter_table("follow_count") as table:
        table.add_column(sa.Column("fan_out", sa.String(8), nullable=True))
    op.create_table(
        "feed_switch",
        sa.Column("target_kind", sa.String(16), nullable=False),
        sa.Column("target_id", sa.String(128), nullable=False),
        sa.Column("started_at", UTCDateTime(), nullable=False),
        sa.Column("follower_after", sa.String(128), nullable=True),
        sa.Column("playlist_after", sa.String(64), nullable=True),
        sa.Column("version_after", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("target_kind", "target_id", name="pk_feed_switch"),
    )
    op.drop_index("ix_follow_target", table_name="follow")
    op.create_index(
        "ix_follow_target", "follow", ["target_kind", "target_id", "follower_id", "created_at"]
    )


def downgrade() -> None:
    op.drop_index("ix_follow_target", table_name="follow")
    op.create_index("ix_follow_target", "follow", ["target_kind", "target_id", "created_at"])
    op.drop_table("feed_switch")
    with op.batch_alter_table("follow_count") as table:
        table.drop_column("fan_out")
