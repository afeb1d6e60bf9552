"""The stored result of a commit: what a retry of its operation is answered with.

A commit keeps its :class:`~chorus.domain.decisions.Outcome` as JSON in its
log row's ``result`` (:mod:`chorus.db.writer`); a retry of the same
operation id reads it back (:mod:`chorus.db.idempotency`,
:mod:`chorus.db.batches`) instead of deciding again.
"""

from __future__ import annotations

from typing import Any

from chorus.domain.changes import WIRE_VERSION, entry_from_wire, entry_to_wire
from chorus.domain.decisions import Outcome


def outcome_to_json(outcome: Outcome) -> dict[str, Any]:
    """The stored result of a commit, replayed on a retry."""
    return {
        "v": WIRE_VERSION,
        "playlist_id": outcome.playlist_id,
        "version": outcome.version,
        "rebased": outcome.rebased,
        "entries": [entry_to_wire(e) for e in outcome.entries],
        "skipped_entry_ids": list(outcome.skipped_entry_ids),
        "removed_entry_ids": list(outcome.removed_entry_ids),
    }


def outcome_from_json(data: dict[str, Any], payload: dict[str, Any] | None = None) -> Outcome:
    """The :class:`Outcome` that :func:`outcome_to_json` stored.

    Args:
        data: the log row's ``result``.
        payload: the same row's ``payload`` (its canonical changes); read only
            for a result stored before results kept ``removed_entry_ids``
            (:mod:`chorus.db.idempotency` passes it), whose removed entries are
            those of its ``EntriesRemoved`` changes.
    """
    if "removed_entry_ids" in data:
        removed = tuple(data["removed_entry_ids"])
    else:
        changes = payload["changes"] if payload else []
        removed = tuple(
            e["entry_id"] for c in changes if c["type"] == "EntriesRemoved" for e in c["entries"]
        )
    return Outcome(
        playlist_id=data["playlist_id"],
        version=data["version"],
        rebased=data["rebased"],
        entries=tuple(entry_from_wire(e) for e in data["entries"]),
        skipped_entry_ids=tuple(data["skipped_entry_ids"]),
        removed_entry_ids=removed,
    )
