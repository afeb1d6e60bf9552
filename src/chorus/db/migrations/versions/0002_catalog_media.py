"""Media imported into the embedded catalog (``catalog_media``)."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

from chorus.db.tables import UTCDateTime

revision = "0002"
down_revision = "0001"

JSON_DOCUMENT = sa.JSON().with_variant(JSONB(), "postgresql")
MEDIA_ID = sa.String(128).with_variant(sa.String(128, collation="C"), "postgresql")


def upgrade() -> None:
    op.create_table(
        "catalog_media",
        sa.Column("id", MEDIA_ID, nullable=False),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("artists", JSON_DOCUMENT, nullable=False),
        sa.Column("album", sa.Text()),
        sa.Column("duration_ms", sa.Integer()),
        sa.Column("available", sa.Boolean(), nullable=False),
        sa.Column("search_text", sa.Text(), nullable=False),
        sa.Column("added_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_catalog_media"),
    )


def downgrade() -> None:
    op.drop_table("catalog_media")
