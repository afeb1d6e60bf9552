"""Size limits of DESIGN §4, as one frozen value the settings can override."""

from __future__ import annotations

from dataclasses import dataclass

MAX_ID_LENGTH = 128
"""Characters in a user, media, entry or playlist id, everywhere: the domain's
checks, the token's ``sub``, the catalog (embedded, service and client) and the
width of the id columns (:mod:`chorus.db.tables`)."""


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds every command is checked against; defaults are DESIGN §4's."""

    max_entries: int = 10_000
    """Live entries per playlist."""
    max_media_per_add: int = 100
    max_entries_per_edit: int = 100
    """Entry ids per move or remove."""
    max_title_length: int = 200
    """Title length in characters (Unicode code points), after trimming; minimum 1."""
    max_description_length: int = 1_000
    max_operation_id_length: int = 64
    max_id_length: int = MAX_ID_LENGTH
    """User, media, entry and playlist ids; not above :data:`MAX_ID_LENGTH`, the columns' width."""
    page_size_default: int = 50
    page_size_max: int = 100
    max_subscriber_lag: int = 1_000
    """Versions a live subscriber may fall behind before it gets a resync."""
    max_batch_operations: int = 100
    """Operations in one ``applyOperations`` batch."""
    max_batch_entries: int = 1_000
    """Media ids and entry ids across one batch's operations, all counted together;
    also the entries one revert may change (each is one version)."""


DEFAULT_LIMITS = Limits()
