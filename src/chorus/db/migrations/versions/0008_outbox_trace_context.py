"""The outbox keeps the committing request's trace context.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01

``outbox.trace_context`` is the W3C ``traceparent`` of the span the commit
ran in (``NULL`` when tracing is off, and for rows written before this
migration); the relay links its publish span to it and sends it on as each
Kafka record's ``traceparent`` header (docs/observability.md).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("outbox") as batch:
        batch.add_column(sa.Column("trace_context", sa.String(64)))


def downgrade() -> None:
    with op.batch_alter_table("outbox") as batch:
        batch.drop_column("trace_context")
