"""The field table: every setting, typed and frozen, with its group, help, range and secrecy.

Each setting declares those once, in its field metadata; the loader
(:mod:`embedstream.settings.loading`), the validation, ``embedstream run --help`` and the README
table all derive from it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from embedstream.settings.parsing import header_map, header_secrets, json_object, topic_list
from embedstream.settings.secrets import masked_secret, scrub_url, url_password
from embedstream.settings.types import (
    CacheMode,
    CompressionType,
    ConcurrencyMode,
    Delivery,
    EncodingFormat,
    Group,
    LogFormat,
    LogLevel,
    OversizePolicy,
    ProviderProfile,
    SaslMechanism,
    SecurityProtocol,
    SettingSpec,
)


def _setting(default: Any, help: str, group: Group, **spec: Any) -> Any:
    return field(default=default, metadata={"spec": SettingSpec(help, group, **spec)})


# Upper bounds of durations: beyond them a value is a typo (an extra zero or two), and some would
# break things later (a retry due centuries away has a not-before time no header can carry).
_HOUR_S = 3600.0
_DAY_MS = 86_400_000.0

_K, _T, _S, _P, _B = Group.KAFKA, Group.TOPICS, Group.SECURITY, Group.PROVIDER, Group.BATCHING
_L, _D, _C, _O = Group.LIMITS, Group.DELIVERY, Group.CACHE, Group.OPERATIONS


@dataclass(frozen=True)
class Settings:
    """The processor's configuration. Field order is the order of the README reference."""

    bootstrap_servers: str = _setting(
        "127.0.0.1:9092", "Kafka bootstrap servers, comma separated.", _K
    )
    group_id: str = _setting(
        "embedstream", "Consumer group; scale out by running more members.", _K
    )
    client_id: str = _setting(
        "embedstream", "Kafka client id prefix (shows up in broker logs).", _K
    )
    session_timeout_ms: int = _setting(10_000, "Consumer group session timeout.", _K, gt=0)
    heartbeat_interval_ms: int = _setting(3_000, "Consumer heartbeat interval.", _K, gt=0)
    fetch_max_wait_ms: int = _setting(
        100, "Longest a fetch waits for data on the broker.", _K, ge=0
    )
    max_poll_records: int = _setting(1_000, "Most records one poll hands over.", _K, gt=0)
    commit_interval_ms: int = _setting(500, "How often completed offsets are committed.", _K, gt=0)
    connect_timeout_s: float = _setting(
        15.0, "How long start-up waits for the broker.", _K, gt=0, le=_HOUR_S
    )
    compression_type: CompressionType = _setting(
        "none",
        "Compression of every record embedstream produces: none, gzip, snappy, lz4 or zstd.",
        _K,
    )

    topic_prefix: str = _setting(
        "embed.", "Prefix of the default topic names (embed.requests.high, ...).", _T
    )
    topic_requests_high: str | None = _setting(
        None,
        "High-priority request topics, comma separated; unset: topic_prefix + requests.high.",
        _T,
    )
    topic_requests_low: str | None = _setting(
        None,
        "Low-priority request topics, comma separated; unset: topic_prefix + requests.low.",
        _T,
    )
    topic_retry: str | None = _setting(
        None, "Retry topic (embedstream's own); unset: topic_prefix + retry.", _T
    )
    topic_results: str | None = _setting(
        None, "Results topic (embedstream's own); unset: topic_prefix + results.", _T
    )
    topic_dlq: str | None = _setting(
        None, "Dead-letter topic (embedstream's own); unset: topic_prefix + dlq.", _T
    )

    security_protocol: SecurityProtocol = _setting(
        "PLAINTEXT", "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.", _S
    )
    sasl_mechanism: SaslMechanism = _setting(
        "PLAIN", "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER.", _S
    )
    sasl_username: str | None = _setting(None, "SASL user (PLAIN, SCRAM).", _S)
    sasl_password: str | None = _setting(
        None, "SASL password (or EMBEDSTREAM_SASL_PASSWORD_FILE). Never logged.", _S, secret=True
    )
    sasl_oauth_token_file: str | None = _setting(
        None, "OAUTHBEARER: file holding the current token, re-read at each login.", _S
    )
    ssl_cafile: str | None = _setting(
        None,
        "PEM file of the CAs signing the broker certificates; unset: the system's.",
        _S,
    )
    ssl_certfile: str | None = _setting(None, "PEM client certificate (mutual TLS).", _S)
    ssl_keyfile: str | None = _setting(None, "PEM private key of ssl_certfile.", _S)
    ssl_keyfile_password: str | None = _setting(
        None,
        "Password of the key (or EMBEDSTREAM_SSL_KEYFILE_PASSWORD_FILE). Never logged.",
        _S,
        secret=True,
    )
    ssl_check_hostname: bool = _setting(
        True, "Check that the broker certificate names the host connected to.", _S
    )

    base_url: str | None = _setting(
        None,
        "OpenAI-compatible base URL (ends in /v1). Falls back to OPENAI_BASE_URL.",
        _P,
        alt_env="OPENAI_BASE_URL",
    )
    api_key: str | None = _setting(
        None,
        "Provider API key (or EMBEDSTREAM_API_KEY_FILE, OPENAI_API_KEY). Never logged.",
        _P,
        secret=True,
        alt_env="OPENAI_API_KEY",
    )
    model: str = _setting("text-embedding-3-small", "Model used when a request names none.", _P)
    encoding_format: EncodingFormat = _setting(
        "float", "Encoding used when a request names none: float or base64.", _P
    )
    request_timeout_s: float = _setting(
        30.0, "Timeout of one embeddings call.", _P, gt=0, le=_HOUR_S
    )
    provider_profile: ProviderProfile = _setting(
        "openai",
        "Provider preset: openai, azure, vllm, tei, ollama, dashscope or generic (see Providers).",
        _P,
    )
    allowed_models: str = _setting(
        "", "Comma-separated models requests may name; empty allows any.", _P
    )
    azure_endpoint: str | None = _setting(
        None, "provider_profile=azure: the resource, https://NAME.openai.azure.com.", _P
    )
    azure_deployment: str | None = _setting(
        None, "provider_profile=azure: deployment to call; unset: a request's model names it.", _P
    )
    azure_api_version: str = _setting(
        "2024-10-21", "provider_profile=azure: the api-version query parameter.", _P
    )
    extra_headers: str | None = _setting(
        None,
        "JSON object of HTTP headers for every call (or a _FILE variable). Never logged.",
        _P,
        secret=True,
    )
    extra_body: str | None = _setting(
        None, "JSON object of fields added to every request body (e.g. vLLM's options).", _P
    )

    max_batch_size: int = _setting(256, "Most inputs in one call.", _B, gt=0)
    max_batch_tokens: int = _setting(100_000, "Most estimated tokens in one call.", _B, gt=0)
    max_wait_ms: float = _setting(
        50.0, "Longest an item waits for batch-mates under backlog.", _B, ge=0, le=60_000
    )
    scale_factor: float = _setting(
        64.0,
        "Backlog depth at which the wait reaches half of max_wait_ms.",
        _B,
        gt=0,
        le=1e9,
    )
    min_low_share: float = _setting(
        0.1,
        "Share of calls the low lane keeps while both lanes are backlogged.",
        _B,
        ge=0,
        lt=1,
    )

    max_input_tokens: int = _setting(8_192, "Most estimated tokens in one input.", _L, gt=0)
    max_concurrency: int = _setting(4, "Most embeddings calls in flight.", _L, gt=0)
    concurrency_mode: ConcurrencyMode = _setting(
        "fixed", "fixed, or adaptive (AIMD: halve on 429/503 or slow calls, grow by one).", _L
    )
    target_latency_ms: float = _setting(
        0.0,
        "Adaptive mode: a call slower than this counts as overload; 0 disables.",
        _L,
        ge=0,
        le=_HOUR_S * 1000,
    )
    rate_limit_rpm: float = _setting(
        0.0, "Most calls per minute (token bucket); 0 is unlimited.", _L, ge=0
    )
    rate_limit_tpm: float = _setting(
        0.0, "Most estimated tokens per minute (token bucket); 0 is unlimited.", _L, ge=0
    )
    max_buffered_items: int = _setting(
        5_000, "Most items held in memory; above it fetching pauses.", _L, gt=0
    )
    max_buffered_bytes: int = _setting(
        64 * 1024 * 1024,
        "Most request bytes held in memory; above it fetching pauses.",
        _L,
        gt=0,
    )
    max_event_bytes: int = _setting(1_048_576, "Largest request event accepted.", _L, gt=0)

    delivery: Delivery = _setting(
        "at_least_once",
        "at_least_once, or exactly_once (Kafka transactions; consumers read_committed).",
        _D,
    )
    drain_timeout_s: float = _setting(
        30.0,
        "On a rebalance or stop, how long to finish work read before letting go of it.",
        _D,
        gt=0,
        le=_HOUR_S,
    )
    max_attempts: int = _setting(5, "Attempts before an item is dead-lettered.", _D, gt=0)
    retry_backoff_base_ms: float = _setting(
        500.0, "First retry delay; doubles per attempt, with jitter.", _D, gt=0, le=_DAY_MS
    )
    retry_backoff_cap_ms: float = _setting(30_000.0, "Longest retry delay.", _D, gt=0, le=_DAY_MS)
    oversize_policy: OversizePolicy = _setting(
        "dead_letter",
        "Input over max_input_tokens: dead_letter, or truncate (header notes it).",
        _D,
    )

    cache: CacheMode = _setting(
        "off", "Embedding cache: off, memory (in-process), or redis (shared; memory in front).", _C
    )
    cache_url: str | None = _setting(
        None,
        "cache=redis: redis://[:password@]host:port/db, or rediss:// for TLS "
        "(or EMBEDSTREAM_CACHE_URL_FILE). Password never logged.",
        _C,
        secret=True,
    )
    cache_ttl_s: float = _setting(
        7 * 24 * 3600.0, "Seconds a cached vector is kept; 0 keeps it until evicted.", _C, ge=0
    )
    cache_max_items: int = _setting(
        10_000, "Most vectors in the in-process tier (least recently used go first).", _C, gt=0
    )
    cache_timeout_ms: float = _setting(
        500.0,
        "cache=redis: longest a look-up may take before it counts as a miss (writes: 4x).",
        _C,
        gt=0,
    )

    metrics_host: str = _setting(
        "127.0.0.1", "Address of the /metrics, /healthz, /readyz server.", _O
    )
    metrics_port: int = _setting(
        9464, "Port of the metrics server; 0 disables it.", _O, ge=0, le=65535
    )
    log_level: LogLevel = _setting("INFO", "DEBUG, INFO, WARNING, ERROR or CRITICAL.", _O)
    log_format: LogFormat = _setting("plain", "plain or json log lines.", _O)

    @property
    def allowed_model_set(self) -> frozenset[str]:
        return frozenset(m.strip() for m in self.allowed_models.split(",") if m.strip())

    def topics(self, name: str) -> tuple[str, ...]:
        """The topics a ``topic_*`` setting lists; () when unset (its default applies)."""
        return topic_list(getattr(self, name))

    @property
    def extra_header_map(self) -> dict[str, str]:
        return header_map(self.extra_headers)

    @property
    def extra_body_map(self) -> dict[str, Any]:
        return json_object("extra_body", self.extra_body)

    def secret_values(self) -> list[str]:
        """The secrets set, for the log redactor: the password of a secret URL alone, and each
        header of extra_headers on its own (a message would quote one value, never the JSON)."""
        found = [value for name in SECRETS if (value := getattr(self, name))]
        found += [p for value in found if (p := url_password(value))]
        return found + header_secrets(self.extra_header_map)

    def describe(self) -> dict[str, str]:
        """Settings as strings for logs: secrets masked, credentials in URLs scrubbed (a secret
        URL shows its host, never its password)."""
        shown: dict[str, str] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if spec(f.name).secret and value:
                shown[f.name] = masked_secret(str(value))
            else:
                shown[f.name] = scrub_url(str(value))
        return shown

    def __repr__(self) -> str:  # keep secrets out of tracebacks and debug prints
        inner = ", ".join(f"{k}={v!r}" for k, v in self.describe().items())
        return f"Settings({inner})"


FIELDS: Mapping[str, dataclasses.Field[Any]] = {f.name: f for f in dataclasses.fields(Settings)}
SECRETS = tuple(name for name, f in FIELDS.items() if f.metadata["spec"].secret)


def spec(name: str) -> SettingSpec:
    found: SettingSpec = FIELDS[name].metadata["spec"]
    return found
