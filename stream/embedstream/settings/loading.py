"""Loading settings: merge the sources, type each raw value, validate once.

A bad value raises :class:`ConfigError` naming the setting and its environment variable, before
anything touches Kafka or the provider.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from embedstream.errors import ConfigError
from embedstream.settings.fields import FIELDS, SECRETS, Settings, spec
from embedstream.settings.origins import collect_raw
from embedstream.settings.rules import (
    validate_budget,
    validate_cache,
    validate_documents,
    validate_formats,
    validate_online,
    validate_provider,
    validate_security,
    validate_store,
    validate_topics,
    validate_tracing,
)
from embedstream.settings.secrets import scrub_url
from embedstream.settings.types import literal_choices, parse_value


def coerce(name: str, value: Any) -> Any:
    """A raw value (text from the environment or a flag, or a TOML scalar) as the field's type."""
    return parse_value(name, str(FIELDS[name].type), value, secret=spec(name).secret)


def choices(name: str) -> tuple[str, ...] | None:
    """The values a Literal-typed setting accepts, or None for free-form settings."""
    return literal_choices(str(FIELDS[name].type))


def validate(s: Settings) -> None:
    """Range and cross-field checks. Each failure names exactly one setting."""
    for name in FIELDS:
        value = getattr(s, name)
        if isinstance(value, int | float) and not isinstance(value, bool):
            problem = spec(name).range_problem(value)
            if problem:
                raise ConfigError(name, problem)
    if s.retry_backoff_cap_ms < s.retry_backoff_base_ms:
        raise ConfigError("retry_backoff_cap_ms", "must be at least retry_backoff_base_ms")
    if not s.bootstrap_servers.strip():
        raise ConfigError("bootstrap_servers", "must name at least one host:port")
    for server in s.bootstrap_servers.split(","):
        host, _, port = server.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError("bootstrap_servers", f"expected host:port, got {server.strip()!r}")
    if not s.model.strip():
        raise ConfigError("model", "must not be empty")
    if s.allowed_models and s.model not in s.allowed_model_set:
        raise ConfigError("model", f"{s.model!r} is not in allowed_models")
    if not s.group_id.strip():
        raise ConfigError("group_id", "must not be empty")
    if s.heartbeat_interval_ms >= s.session_timeout_ms:
        raise ConfigError("heartbeat_interval_ms", "must be below session_timeout_ms")
    if s.max_buffered_bytes < s.max_event_bytes:
        raise ConfigError("max_buffered_bytes", "must be at least max_event_bytes")
    if s.max_input_tokens > s.max_batch_tokens:
        raise ConfigError("max_input_tokens", "must not exceed max_batch_tokens")
    if s.base_url is not None and not s.base_url.startswith(("http://", "https://")):
        raise ConfigError(
            "base_url", f"must start with http:// or https://, got {scrub_url(s.base_url)!r}"
        )
    validate_security(s)
    validate_topics(s)
    validate_provider(s)
    validate_cache(s)
    validate_budget(s)
    validate_documents(s)
    validate_formats(s)
    validate_store(s)
    validate_tracing(s)
    validate_online(s)


def load_settings(
    env: Mapping[str, str] | None = None,
    file: Path | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Settings:
    """Merge all sources and validate; raises ConfigError naming the first bad setting.

    ``env`` is checked strictly: an ``EMBEDSTREAM_*`` variable that names no setting (and is
    not one of the tools' own, see :data:`TOOL_VARIABLES`) is an error, like a typo in the file.
    """
    alt = {name: alt for name in FIELDS if (alt := spec(name).alt_env)}
    raw = collect_raw(
        list(FIELDS), secrets=SECRETS, alt_env=alt, env=env, file=file, overrides=overrides
    )
    settings = Settings(**{name: coerce(name, value) for name, value in raw.items()})
    validate(settings)
    return settings
