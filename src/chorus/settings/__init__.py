"""Settings, read once at start-up from ``CHORUS_*`` environment variables.

Every field is one variable: ``database_url`` is ``CHORUS_DATABASE_URL`` and
so on (docs/settings.md). Unset Redis and Kafka mean the in-process adapters
of the embedded profile. A bad value stops start-up with a message naming the
variable; nothing is guessed.

:class:`Settings` is composed of one group of fields per concern, each with
its checks: storage (:mod:`~chorus.settings.storage`: the database, the data
directory and its secrets, writes, retention), the database's topology
(:mod:`~chorus.settings.database`: read replicas, a transaction pooler), the full profile
(:mod:`~chorus.settings.profile`: Kafka and Redis), the HTTP server
(:mod:`~chorus.settings.server`: bind address, transport bounds, CORS,
``/metrics``, trusted proxies, drain, WebSocket pings), the API
(:mod:`~chorus.settings.api`: request limits, the catalog, the response
cache, the feed), identity
(:mod:`~chorus.settings.identity`: the JWKS URL and the claims tokens hold)
and observability (:mod:`~chorus.settings.observability`: the log format,
the OTLP endpoint).
A check of one value stays with its field; the checks across settings are :class:`Settings`' own.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from typing import Self

from pydantic import model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from chorus.settings.api import ApiSettings
from chorus.settings.database import DatabaseSettings, masked_url
from chorus.settings.identity import IdentitySettings
from chorus.settings.observability import ObservabilitySettings
from chorus.settings.profile import FULL_PROFILE_SETTINGS, ProfileSettings
from chorus.settings.server import OPERATION_NAME, ServerSettings
from chorus.settings.storage import DEFAULT_DATABASE_URL, MAX_KEEP_DAYS, StorageSettings

MAX_SETTING_INTEGER = 2**31 - 1
"""The largest value any integer setting takes (a larger one is refused as a typo)."""

__all__ = [
    "DEFAULT_DATABASE_URL",
    "FULL_PROFILE_SETTINGS",
    "MAX_KEEP_DAYS",
    "MAX_SETTING_INTEGER",
    "NOT_SETTINGS",
    "OPERATION_NAME",
    "Settings",
    "masked_url",
    "unknown_variables",
]


_WHOLE = (int, int | None)
_WHOLE_NUMBER = re.compile(r"\s*[+-]?[0-9]+\s*")


class Settings(
    IdentitySettings,
    ApiSettings,
    ServerSettings,
    ProfileSettings,
    StorageSettings,
    DatabaseSettings,
    ObservabilitySettings,
    BaseSettings,
):
    """Chorus configuration; frozen once read."""

    # allow_inf_nan: every float setting is finite ("inf" and "nan" parse as floats).
    model_config = SettingsConfigDict(
        env_prefix="CHORUS_", frozen=True, extra="ignore", allow_inf_nan=False
    )

    @model_validator(mode="before")
    @classmethod
    def _whole_numbers(cls, data: object) -> object:
        """A whole-number setting is written as one: digits, a sign at most.

        pydantic reads ``"18720.0"``, ``"1_000"`` as integers; nothing is
        guessed here, so they are refused as ``18720.5`` is.
        """
        if not isinstance(data, Mapping):
            return data
        for name, value in data.items():
            field = cls.model_fields.get(name)
            if (
                field is not None
                and field.annotation in _WHOLE
                and isinstance(value, str)
                and not _WHOLE_NUMBER.fullmatch(value)
            ):
                shown = value if len(value) <= 60 else value[:57] + "..."
                raise ValueError(f"CHORUS_{name.upper()}={shown!r}: must be a whole number")
        return data

    # The checks across settings; each names its variables. They run in this order and
    # the first that fails is the one reported.

    @model_validator(mode="after")
    def _budget_fits_a_query(self) -> Self:
        budget = self.query_cost_per_minute
        if budget is not None and budget < self.max_query_cost:
            raise ValueError(
                f"CHORUS_QUERY_COST_PER_MINUTE ({budget}) is below CHORUS_MAX_QUERY_COST "
                f"({self.max_query_cost}): the largest queries could never run"
            )
        return self

    @model_validator(mode="after")
    def _page_sizes(self) -> Self:
        return self._not_above("page_size_default", "page_size_max")

    @model_validator(mode="after")
    def _integers_fit(self) -> Self:
        # No limit, size or count of Chorus's means anything past 2**31 - 1; a
        # larger one is a typo (an extra digit, a pasted number), not a wish.
        for name, info in type(self).model_fields.items():
            value = getattr(self, name)
            is_int = info.annotation in (int, int | None) and isinstance(value, int)
            if is_int and value > MAX_SETTING_INTEGER:
                raise ValueError(f"CHORUS_{name.upper()} ({value}) is above {MAX_SETTING_INTEGER}")
        return self

    @model_validator(mode="after")
    def _batch_holds_an_edit(self) -> Self:
        largest_edit = max(self.max_media_per_add, self.max_entries_per_edit)
        if self.max_batch_entries < largest_edit:
            raise ValueError(
                f"CHORUS_MAX_BATCH_ENTRIES ({self.max_batch_entries}) is below the largest "
                f"single edit (CHORUS_MAX_MEDIA_PER_ADD / CHORUS_MAX_ENTRIES_PER_EDIT, "
                f"{largest_edit}): an edit the mutation accepts could not go in a batch"
            )
        return self

    @model_validator(mode="after")
    def _feed_page_sizes(self) -> Self:
        return self._not_above("feed_page_size_default", "feed_page_size_max")

    @model_validator(mode="after")
    def _full_profile_together(self) -> Self:
        if (self.redis_url is None) != (self.kafka_bootstrap_servers is None):
            raise ValueError(
                "CHORUS_REDIS_URL and CHORUS_KAFKA_BOOTSTRAP_SERVERS go together: set both "
                "for the full profile, neither for the embedded one"
            )
        return self

    @model_validator(mode="after")
    def _registered_documents_named(self) -> Self:
        if self.persisted_documents_only and not self.persisted_documents:
            raise ValueError(
                "CHORUS_PERSISTED_DOCUMENTS_ONLY needs CHORUS_PERSISTED_DOCUMENTS: the file "
                "of the documents that may run"
            )
        return self

    @model_validator(mode="after")
    def _provider_named(self) -> Self:
        if self.jwks_url is not None and (self.jwt_issuer is None or self.jwt_audience is None):
            raise ValueError(
                "CHORUS_JWKS_URL needs CHORUS_JWT_ISSUER and CHORUS_JWT_AUDIENCE: a provider's "
                "token for another service must not open this one"
            )
        return self

    @model_validator(mode="after")
    def _topology_is_postgres(self) -> Self:
        postgres = self.database_url.startswith("postgresql")
        if self.database_replica_urls is not None and not postgres:
            raise ValueError(
                "CHORUS_DATABASE_REPLICA_URLS needs a PostgreSQL CHORUS_DATABASE_URL: "
                "replicas are PostgreSQL streaming replicas of it"
            )
        if self.behind_transaction_pooler and not postgres:
            raise ValueError("CHORUS_DATABASE_POOLER=transaction needs a PostgreSQL database")
        if self.database_direct_url is not None and not self.behind_transaction_pooler:
            raise ValueError(
                "CHORUS_DATABASE_DIRECT_URL is for CHORUS_DATABASE_POOLER=transaction: "
                "without a pooler every connection is direct already"
            )
        return self

    @property
    def direct_database_url(self) -> str:
        """The primary without a pooler: LISTEN and migrations connect here."""
        return self.database_direct_url or self.database_url

    def require_postgres_full_profile(self, what: str) -> None:
        """Nothing, when Kafka, Redis and a PostgreSQL database are all set.

        A gateway hears of commits only through Redis pub/sub, which the relay
        feeds from PostgreSQL's outbox (docs/full-profile.md): Kafka and Redis
        beside an embedded SQLite file are not the full profile.

        Raises:
            ValueError: "<what> needs the full profile: set …", naming all three settings.
        """
        if not (self.full_profile and self.database_url.startswith("postgresql")):
            raise ValueError(f"{what} needs the full profile: {FULL_PROFILE_WITH_POSTGRES}")

    @model_validator(mode="after")
    def _user_share_fits(self) -> Self:
        return self._not_above("owner_queue_per_user", "owner_queue_size", "is larger than")

    def _not_above(self, name: str, bound: str, said: str = "is above") -> Self:
        """``self``, unless setting ``name`` is above setting ``bound``.

        Raises:
            ValueError: "CHORUS_<NAME> (value) <said> CHORUS_<BOUND> (value)".
        """
        value, most = getattr(self, name), getattr(self, bound)
        if value > most:
            raise ValueError(
                f"CHORUS_{name.upper()} ({value}) {said} CHORUS_{bound.upper()} ({most})"
            )
        return self


FULL_PROFILE_WITH_POSTGRES = (
    "set CHORUS_KAFKA_BOOTSTRAP_SERVERS, CHORUS_REDIS_URL and a PostgreSQL CHORUS_DATABASE_URL"
)
"""What a process that needs the whole full profile (a gateway) tells any other."""

NOT_SETTINGS = frozenset(
    {
        # The scripts' own (scripts/_venv.sh) and the tests' (CHORUS_TEST_*).
        "CHORUS_VENV",
        "CHORUS_UV_VENV",
        "CHORUS_EXTRAS",
        "CHORUS_TEST_PATIENCE",
        # The README's watch.mjs reads these; they are often exported in the same shell.
        "CHORUS_TOKEN",
        "CHORUS_PLAYLIST",
        "CHORUS_SINCE",
        "CHORUS_WS_URL",
    }
)
"""``CHORUS_*`` variables that are not settings but are expected in an environment."""


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """Lines about ``CHORUS_*`` variables in ``environ`` that no setting reads, or that
    only match one in another case (``CHORUS_port``), each with a close setting's name.

    Such a variable is ignored (a typo like ``CHORUS_RATE_LIMT_PER_MINUTE``
    would silently leave a limit at its default), so ``chorus`` says so on
    stderr at start; it never stops a process for it. Shape: one line each.
    """
    known = {f"CHORUS_{name.upper()}" for name in Settings.model_fields}
    lines = []
    for name in sorted(environ):
        if not name.upper().startswith("CHORUS_") or name in known or name in NOT_SETTINGS:
            continue
        if name.upper().startswith("CHORUS_TEST_"):
            continue
        if name.upper() in known:
            lines.append(f"{name} is read as {name.upper()}: write setting names in upper case")
            continue
        close = difflib.get_close_matches(name.upper(), known, n=1, cutoff=0.8)
        hint = f" (did you mean {close[0]}?)" if close else ""
        lines.append(f"{name} is not a Chorus setting and is ignored{hint}")
    return lines
