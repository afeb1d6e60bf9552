"""Settings of the full profile: Kafka and Redis, which carry events and snapshots.

Part of :class:`chorus.settings.Settings`. Unset Redis and Kafka mean the
in-process adapters of the embedded profile; the two go together.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from chorus.caches.snapshot import SNAPSHOT_PAGE_SIZE
from chorus.events.wire import DEFAULT_TOPIC, FANOUT_GROUP, FEED_GROUP, PROJECTOR_GROUP

FULL_PROFILE_SETTINGS = "set CHORUS_KAFKA_BOOTSTRAP_SERVERS and CHORUS_REDIS_URL"
"""What a command that needs the full profile tells a user of the embedded one."""


class ProfileSettings(BaseModel):
    """Kafka (the event log) and Redis (pub/sub, snapshots, heads) of the full profile."""

    model_config = ConfigDict(frozen=True)

    redis_url: str | None = Field(
        None,
        description="redis://host:port/db for pub/sub and snapshots; set together with "
        "kafka_bootstrap_servers (the full profile); unset: in-process.",
    )
    redis_cluster: bool = Field(
        False,
        description="CHORUS_REDIS_URL is one node of a Redis Cluster: cluster client, "
        "sharded pub/sub, one cache generation per slot.",
    )
    kafka_bootstrap_servers: str | None = Field(
        None, description="host:port[,host:port]; unset: the in-process bus."
    )
    kafka_topic: str = Field(
        DEFAULT_TOPIC, min_length=1, max_length=249, pattern=r"^[A-Za-z0-9._-]+$"
    )
    kafka_topic_partitions: int = Field(
        12, ge=1, le=10_000, description="Partitions of the topic when Chorus creates it."
    )
    kafka_idempotent_producer: bool = Field(
        True,
        description="enable.idempotence on the relay's producer; Tansu (tests) needs false.",
    )
    kafka_fanout_group: str = Field(FANOUT_GROUP, min_length=1)
    kafka_projector_group: str = Field(PROJECTOR_GROUP, min_length=1)
    kafka_feed_group: str = Field(FEED_GROUP, min_length=1)
    snapshot_page_size: int = Field(
        SNAPSHOT_PAGE_SIZE, ge=1, description="Entries kept in a PUBLIC playlist's Redis snapshot."
    )
    redis_breaker_failures: int = Field(
        3, ge=1, description="Redis errors in a row that open the circuit breaker."
    )
    redis_max_connections: int = Field(
        100,
        ge=1,
        le=10_000,
        description="Redis connections per process (per node on a cluster); a command "
        "waits for a free one (single Redis) rather than failing.",
    )
    redis_breaker_reset_s: float = Field(
        2.0,
        gt=0,
        le=86_400,
        description="Seconds the breaker stays open before one trial call (at most a day).",
    )

    @field_validator("kafka_bootstrap_servers")
    @classmethod
    def _host_ports(cls, value: str | None) -> str | None:
        if value is None:
            return None
        for server in value.split(","):
            host, _, port = server.strip().rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"expected host:port[,host:port], got {server.strip()!r}")
        return value

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("use redis://host:port/db, rediss:// or unix://")
        return value

    @model_validator(mode="after")
    def _cluster_url(self) -> ProfileSettings:
        if self.redis_cluster and (self.redis_url or "unix://").startswith("unix://"):
            raise ValueError(
                "CHORUS_REDIS_CLUSTER=true needs CHORUS_REDIS_URL=redis://host:port "
                "(a node of the cluster)"
            )
        return self

    @property
    def full_profile(self) -> bool:
        """Kafka and Redis carry events and snapshots (docs/architecture.md)."""
        return self.kafka_bootstrap_servers is not None

    def require_full_profile(self, what: str) -> tuple[str, str]:
        """``(Kafka bootstrap servers, Redis URL)`` of the full profile.

        Args:
            what: who needs them, for the message (``"chorus relay"``).

        Raises:
            ValueError: the embedded profile: "<what> needs the full profile: set …".
        """
        if self.kafka_bootstrap_servers is None or self.redis_url is None:
            raise ValueError(f"{what} needs the full profile: {FULL_PROFILE_SETTINGS}")
        return self.kafka_bootstrap_servers, self.redis_url
