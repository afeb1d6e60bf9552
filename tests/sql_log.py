"""Every SQL statement a database reads with, for tests that check a read reached SQL or not."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event

from chorus.db.engine import Database


@contextmanager
def read_statements(db: Database) -> Iterator[list[str]]:
    """The statements ``db``'s read engine runs inside the block, in order, as they run."""
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        seen.append(statement)

    engine = db.read_engine.sync_engine
    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)
