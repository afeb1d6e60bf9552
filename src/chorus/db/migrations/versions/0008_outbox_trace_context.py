"""The outbox keeps the committing request's trace context.

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


def upgrade() -> None:
    with op.batch_alter_table("outbox") as batch:
        batch.add_column(sa.Column("trace_context", sa.String(64)))


def downgrade() -> None:
    with op.batch_alter_table("outbox") as batch:
        batch.drop_column("trace_context")
