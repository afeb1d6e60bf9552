"""Settings of what an operator sees: the log format and where traces go.

Part of :class:`chorus.settings.Settings` (docs/observability.md).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class ObservabilitySettings(BaseModel):
    """Logs and OpenTelemetry traces."""

    model_config = ConfigDict(frozen=True)

    log_format: Literal["text", "json"] = Field(
        "text",
        description="Server log lines: text (time, level, logger, request id, message) or "
        "json (one object a line; HTTP requests get one access line each with request_id, "
        "user, operation, duration_ms and status).",
    )
    otlp_endpoint: str | None = Field(
        None,
        description="Base URL of an OTLP/HTTP collector (e.g. http://127.0.0.1:4318); traces "
        "go to <it>/v1/traces as protobuf. Unset: no tracing (spans are no-ops). The "
        "exporter's standard OTEL_EXPORTER_OTLP_HEADERS / _TIMEOUT variables apply.",
    )

    @field_validator("log_format", mode="before")
    @classmethod
    def _log_format(cls, value: object) -> object:
        if isinstance(value, str) and value.strip().lower() in ("text", "json"):
            return value.strip().lower()
        if isinstance(value, str):
            raise ValueError(f"use text or json, not {value!r}")
        return value

    @field_validator("otlp_endpoint")
    @classmethod
    def _otlp_endpoint(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        scheme, _, rest = value.strip().partition("://")
        if scheme.lower() not in ("http", "https") or not rest.split("/", 1)[0]:
            raise ValueError(
                "use http://host:port or https://host (an OTLP/HTTP collector's base URL)"
            )
        return value.strip().rstrip("/")

    @property
    def otlp_traces_url(self) -> str | None:
        """Where spans are exported (``<otlp_endpoint>/v1/traces``); ``None``: tracing is off."""
        return f"{self.otlp_endpoint}/v1/traces" if self.otlp_endpoint else None
