"""Every setting, typed and frozen, validated once at start.

Sources, lowest precedence first: defaults, a TOML file, the environment (``EMBEDSTREAM_<NAME>``),
then explicit overrides (the CLI). A bad value raises :class:`ConfigError` naming the setting and
its environment variable, before anything touches Kafka or the provider.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from embedstream.errors import ConfigError, env_var

EncodingFormat = Literal["float", "base64"]
LogFormat = Literal["plain", "json"]
ProviderProfile = Literal["openai", "dashscope", "generic"]
ConcurrencyMode = Literal["fixed", "adaptive"]
OversizePolicy = Literal["dead_letter", "truncate"]
Delivery = Literal["at_least_once", "exactly_once"]


def _setting(default: Any, help: str, *, secret: bool = False, env: str | None = None) -> Any:
    return field(default=default, metadata={"help": help, "secret": secret, "alt_env": env})


@dataclass(frozen=True)
class Settings:
    """The processor's configuration. Field order is the order of the README reference."""

    # Kafka
    bootstrap_servers: str = _setting("127.0.0.1:9092", "Kafka bootstrap servers, comma separated.")
    topic_prefix: str = _setting("embed.", "Prefix shared by every embedstream topic.")
    group_id: str = _setting("embedstream", "Consumer group; scale out by running more members.")
    client_id: str = _setting("embedstream", "Kafka client id prefix (shows up in broker logs).")
    session_timeout_ms: int = _setting(10_000, "Consumer group session timeout.")
    heartbeat_interval_ms: int = _setting(3_000, "Consumer heartbeat interval.")
    fetch_max_wait_ms: int = _setting(100, "Longest a fetch waits for data on the broker.")
    max_poll_records: int = _setting(1_000, "Most records one poll hands over.")
    commit_interval_ms: int = _setting(500, "How often completed offsets are committed.")
    connect_timeout_s: float = _setting(15.0, "How long start-up waits for the broker.")
    # Provider
    base_url: str | None = _setting(
        None,
        "OpenAI-compatible base URL (ends in /v1). Falls back to OPENAI_BASE_URL.",
        env="OPENAI_BASE_URL",
    )
    api_key: str | None = _setting(
        None,
        "Provider API key. Falls back to OPENAI_API_KEY. Never logged.",
        secret=True,
        env="OPENAI_API_KEY",
    )
    model: str = _setting("text-embedding-3-small", "Model used when a request names none.")
    encoding_format: EncodingFormat = _setting(
        "float", "Encoding used when a request names none: float or base64."
    )
    request_timeout_s: float = _setting(30.0, "Timeout of one embeddings call.")
    provider_profile: ProviderProfile = _setting(
        "openai", "Provider limits: openai, dashscope or generic (see Provider limits)."
    )
    allowed_models: str = _setting(
        "", "Comma-separated models requests may name; empty allows any."
    )
    # Batching
    max_batch_size: int = _setting(256, "Most inputs in one call.")
    max_batch_tokens: int = _setting(100_000, "Most estimated tokens in one call.")
    max_input_tokens: int = _setting(8_192, "Most estimated tokens in one input.")
    max_wait_ms: float = _setting(50.0, "Longest an item waits for batch-mates under backlog.")
    scale_factor: float = _setting(
        64.0, "Backlog depth at which the wait reaches half of max_wait_ms."
    )
    max_concurrency: int = _setting(4, "Most embeddings calls in flight.")
    concurrency_mode: ConcurrencyMode = _setting(
        "fixed", "fixed, or adaptive (AIMD: halve on 429/503 or slow calls, grow by one)."
    )
    target_latency_ms: float = _setting(
        0.0, "Adaptive mode: a call slower than this counts as overload; 0 disables."
    )
    rate_limit_rpm: float = _setting(0.0, "Most calls per minute (token bucket); 0 is unlimited.")
    rate_limit_tpm: float = _setting(
        0.0, "Most estimated tokens per minute (token bucket); 0 is unlimited."
    )
    min_low_share: float = _setting(
        0.1, "Share of calls the low lane keeps while both lanes are backlogged."
    )
    max_buffered_items: int = _setting(
        5_000, "Most items held in memory; above it fetching pauses."
    )
    max_buffered_bytes: int = _setting(
        64 * 1024 * 1024, "Most request bytes held in memory; above it fetching pauses."
    )
    # Delivery and failures
    delivery: Delivery = _setting(
        "at_least_once",
        "at_least_once, or exactly_once (Kafka transactions; consumers read_committed).",
    )
    drain_timeout_s: float = _setting(
        30.0, "On a rebalance, how long to finish work of revoked partitions before handing off."
    )
    max_attempts: int = _setting(5, "Attempts before an item is dead-lettered.")
    retry_backoff_base_ms: float = _setting(
        500.0, "First retry delay; doubles per attempt, with jitter."
    )
    retry_backoff_cap_ms: float = _setting(30_000.0, "Longest retry delay.")
    oversize_policy: OversizePolicy = _setting(
        "dead_letter", "Input over max_input_tokens: dead_letter, or truncate (header notes it)."
    )
    max_event_bytes: int = _setting(1_048_576, "Largest request event accepted.")
    # Operations
    metrics_host: str = _setting("127.0.0.1", "Address of the /metrics, /healthz, /readyz server.")
    metrics_port: int = _setting(9464, "Port of the metrics server; 0 disables it.")
    log_level: str = _setting("INFO", "Python log level.")
    log_format: LogFormat = _setting("plain", "plain or json log lines.")

    @property
    def allowed_model_set(self) -> frozenset[str]:
        return frozenset(m.strip() for m in self.allowed_models.split(",") if m.strip())

    def describe(self) -> dict[str, str]:
        """Settings as strings for logs, secrets masked."""
        shown: dict[str, str] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            shown[f.name] = "***" if f.metadata["secret"] and value else str(value)
        return shown

    def __repr__(self) -> str:  # keep secrets out of tracebacks and debug prints
        inner = ", ".join(f"{k}={v!r}" for k, v in self.describe().items())
        return f"Settings({inner})"


def load_settings(
    env: Mapping[str, str] | None = None,
    file: Path | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Settings:
    """Merge all sources and validate; raises ConfigError naming the first bad setting."""
    raw: dict[str, Any] = {}
    fields = {f.name: f for f in dataclasses.fields(Settings)}
    if file is not None:
        try:
            with file.open("rb") as fh:
                data = tomllib.load(fh)
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError("config_file", f"cannot read {file}: {exc}") from exc
        for key, value in data.items():
            if key not in fields:
                raise ConfigError(key, f"unknown setting in {file}")
            raw[key] = value
    for name, f in fields.items():
        alt = f.metadata["alt_env"]
        if env is not None and env.get(env_var(name)) not in (None, ""):
            raw[name] = env[env_var(name)]
        elif env is not None and alt and env.get(alt) and name not in raw:
            raw[name] = env[alt]
    for key, value in (overrides or {}).items():
        if key not in fields:
            raise ConfigError(key, "unknown setting")
        if value is not None:
            raw[key] = value
    values = {name: _coerce(name, fields[name].type, value) for name, value in raw.items()}
    settings = Settings(**values)
    validate(settings)
    return settings


def _coerce(name: str, annotation: Any, value: Any) -> Any:
    kind = str(annotation)
    try:
        if kind == "int":
            if isinstance(value, bool):
                raise ValueError(value)
            return int(value)
        if kind == "float":
            return float(value)
        if kind in _LITERALS:
            allowed = tuple(str(v) for v in get_args(_LITERALS[kind]))
            text = str(value)
            if text not in allowed:
                raise ConfigError(name, f"must be one of {', '.join(allowed)}; got {text!r}")
            return text
        return None if value is None else str(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(name, f"expected {kind}, got {value!r}") from exc


_LITERALS: dict[str, Any] = {
    "EncodingFormat": EncodingFormat,
    "LogFormat": LogFormat,
    "ProviderProfile": ProviderProfile,
    "ConcurrencyMode": ConcurrencyMode,
    "OversizePolicy": OversizePolicy,
    "Delivery": Delivery,
}


def validate(s: Settings) -> None:
    """Cross-field and range checks. Each failure names exactly one setting."""
    positive_ints = (
        "session_timeout_ms",
        "heartbeat_interval_ms",
        "max_poll_records",
        "commit_interval_ms",
        "max_batch_size",
        "max_batch_tokens",
        "max_input_tokens",
        "max_concurrency",
        "max_buffered_items",
        "max_attempts",
        "max_event_bytes",
    )
    for name in positive_ints:
        if getattr(s, name) <= 0:
            raise ConfigError(name, f"must be > 0, got {getattr(s, name)}")
    for name in ("max_wait_ms", "fetch_max_wait_ms"):
        if getattr(s, name) < 0:
            raise ConfigError(name, f"must be >= 0, got {getattr(s, name)}")
    for name in ("rate_limit_rpm", "rate_limit_tpm", "target_latency_ms"):
        if getattr(s, name) < 0:
            raise ConfigError(name, f"must be >= 0, got {getattr(s, name)}")
    if not 0 <= s.min_low_share < 1:
        raise ConfigError("min_low_share", f"must be in [0, 1), got {s.min_low_share}")
    if s.retry_backoff_cap_ms < s.retry_backoff_base_ms:
        raise ConfigError("retry_backoff_cap_ms", "must be at least retry_backoff_base_ms")
    for name in (
        "scale_factor", "request_timeout_s", "connect_timeout_s", "retry_backoff_base_ms",
        "drain_timeout_s",
    ):  # fmt: skip
        if getattr(s, name) <= 0:
            raise ConfigError(name, f"must be > 0, got {getattr(s, name)}")
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
    if s.max_buffered_items < s.max_batch_size:
        raise ConfigError("max_buffered_items", "must be at least max_batch_size")
    if s.max_buffered_bytes < s.max_event_bytes:
        raise ConfigError("max_buffered_bytes", "must be at least max_event_bytes")
    if s.max_input_tokens > s.max_batch_tokens:
        raise ConfigError("max_input_tokens", "must not exceed max_batch_tokens")
    if not 0 <= s.metrics_port <= 65535:
        raise ConfigError("metrics_port", f"must be 0..65535, got {s.metrics_port}")
    if s.base_url is not None and not s.base_url.startswith(("http://", "https://")):
        raise ConfigError("base_url", f"must start with http:// or https://, got {s.base_url!r}")


def reference_rows() -> list[tuple[str, str, str, str]]:
    """(name, env var, default, meaning) for every setting: the README reference table."""
    rows = []
    for f in dataclasses.fields(Settings):
        default = "unset" if f.default is None else str(f.default)
        env = env_var(f.name)
        if f.metadata["alt_env"]:
            env += f" (or {f.metadata['alt_env']})"
        rows.append((f.name, env, default, str(f.metadata["help"])))
    return rows
