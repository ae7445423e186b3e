"""The value types settings take, and how a raw value (environment or flag text, a TOML scalar)
becomes one. Literal types list their allowed values once; help, validation and docs read them.
:class:`SettingSpec` is what each setting declares besides its type (help, group, range).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal, get_args

from embedstream.errors import ConfigError

EncodingFormat = Literal["float", "base64"]
LogFormat = Literal["plain", "json"]
LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
ProviderProfile = Literal["openai", "azure", "vllm", "tei", "ollama", "dashscope", "generic"]
OversizePolicy = Literal["dead_letter", "truncate"]
Delivery = Literal["at_least_once", "exactly_once"]
CacheMode = Literal["off", "memory", "redis"]
InputLanes = Literal["all", "high", "bulk"]
TracingMode = Literal["off", "otlp_http", "otlp_grpc"]
SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
CompressionType = Literal["none", "gzip", "snappy", "lz4", "zstd"]
InputFormat = Literal["json", "avro", "json_schema", "protobuf"]
OutputFormat = Literal["json", "avro", "json_schema"]
StoreIndex = Literal["none", "hnsw", "ivfflat"]
MigrateVia = Literal["sync", "batch"]

TLS_PROTOCOLS = frozenset({"SSL", "SASL_SSL"})
SASL_PROTOCOLS = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})

# By the name a field's annotation gives (annotations are strings under `from __future__`).
_LITERALS: dict[str, Any] = {
    "EncodingFormat": EncodingFormat,
    "LogFormat": LogFormat,
    "LogLevel": LogLevel,
    "ProviderProfile": ProviderProfile,
    "OversizePolicy": OversizePolicy,
    "Delivery": Delivery,
    "CacheMode": CacheMode,
    "InputLanes": InputLanes,
    "TracingMode": TracingMode,
    "SecurityProtocol": SecurityProtocol,
    "SaslMechanism": SaslMechanism,
    "CompressionType": CompressionType,
    "InputFormat": InputFormat,
    "OutputFormat": OutputFormat,
    "StoreIndex": StoreIndex,
    "MigrateVia": MigrateVia,
}
_CASE_INSENSITIVE = frozenset({"LogLevel"})  # `debug` is as clear as `DEBUG`


def literal_choices(kind: str) -> tuple[str, ...] | None:
    literal = _LITERALS.get(kind)
    return None if literal is None else tuple(str(v) for v in get_args(literal))


def parse_value(name: str, kind: str, value: Any, *, secret: bool = False) -> Any:
    """``value`` as the type named ``kind``; ConfigError naming setting ``name`` if it is not
    one (never echoing a secret)."""
    if kind in ("int | None", "float | None"):  # optional numbers: unset stays None
        if value is None or value == "":
            return None
        kind = kind.removesuffix(" | None")
    try:
        if kind in ("int | None", "float | None"):  # optional numbers: unset is None
            if value is None:
                return None
            kind = kind.removesuffix(" | None")
        if kind in ("int", "float"):
            if isinstance(value, bool):  # an int subclass, but `max_wait_ms = true` is a mistake
                raise ValueError(value)
            return int(value) if kind == "int" else float(value)
        if kind == "bool":
            return _bool(value)
        allowed = literal_choices(kind)
        if allowed is not None:
            text = str(value).upper() if kind in _CASE_INSENSITIVE else str(value)
            if text not in allowed:
                raise ConfigError(name, f"must be one of {', '.join(allowed)}; got {value!r}")
            return text
        return None if value is None else str(value)
    except (TypeError, ValueError) as exc:
        shown = "***" if secret else repr(value)
        raise ConfigError(name, f"expected {kind}, got {shown}") from exc


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise ValueError(value)


class Group(StrEnum):
    """Where a setting is shown: a heading of ``run --help`` and of the configuration reference."""

    KAFKA = "Kafka"
    TOPICS = "Topics"
    SECURITY = "Kafka security"
    PROVIDER = "Provider"
    BATCHING = "Batching"
    LIMITS = "Limits"
    DELIVERY = "Delivery"
    CACHE = "Cache"
    OPERATIONS = "Operations"
    DOCUMENTS = "Documents"
    FORMATS = "Formats and Schema Registry"
    STORE = "Vector store (embedstream sink)"
    TRACING = "Tracing"
    SOURCES = "Sources"
    ONLINE = "Online lane"
    BATCH_JOBS = "Batch jobs"


@dataclass(frozen=True)
class SettingSpec:
    """What a setting's field declares besides its type and default."""

    help: str
    group: Group
    secret: bool = False
    alt_env: str | None = None  # a variable other tools already use (OPENAI_API_KEY)
    gt: float | None = None  # bounds: value > gt, >= ge, < lt, <= le
    ge: float | None = None
    lt: float | None = None
    le: float | None = None

    def range_problem(self, value: float) -> str | None:
        """Why ``value`` is out of range, or None. NaN compares false with everything, so
        finiteness is checked first: a NaN wait would never fire."""
        if isinstance(value, float) and not math.isfinite(value):
            return f"must be a finite number, got {value}"
        bounds = [
            (self.gt, ">", value > (self.gt or 0)),
            (self.ge, ">=", value >= (self.ge or 0)),
            (self.lt, "<", value < (self.lt or 0)),
            (self.le, "<=", value <= (self.le or 0)),
        ]
        broken = [f"{op} {limit:g}" for limit, op, ok in bounds if limit is not None and not ok]
        if not broken:
            return None
        wanted = " and ".join(f"{op} {limit:g}" for limit, op, _ in bounds if limit is not None)
        return f"must be {wanted}, got {value:g}"


def setting(default: Any, help: str, group: Group, **spec: Any) -> Any:
    """A settings field: its default, and its spec (help, group, range, secrecy) as metadata."""
    return field(default=default, metadata={"spec": SettingSpec(help, group, **spec)})
