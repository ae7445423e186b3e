"""Rules between settings that a range cannot state: Kafka security, topic names, the provider.

:func:`embedstream.settings.loading.validate` calls these after the range checks. Each failure is a
:class:`ConfigError` naming exactly one setting, raised before anything touches Kafka or the
provider. The parsers they share with the settings' accessors are in
:mod:`embedstream.settings.parsing`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from embedstream.errors import ConfigError
from embedstream.settings.fields import Settings
from embedstream.settings.parsing import (
    AZURE_SETTINGS,
    CHANGELOG_STATE_SUFFIX,
    OWN_BODY_FIELDS,
    OWN_TOPIC_SETTINGS,
    TOPIC_SETTINGS,
    caller_keys,
    header_map,
    json_object,
    key_limits,
    name_paths,
    topic_list,
    topic_name_problem,
    weight_map,
)
from embedstream.settings.secrets import CACHE_URL_SCHEMES, scrub_url
from embedstream.settings.types import SASL_PROTOCOLS, TLS_PROTOCOLS

# --------------------------------------------------------------------------- Kafka security


def validate_security(s: Settings) -> None:
    """The Kafka security settings agree with security_protocol, and their files exist."""
    protocol = s.security_protocol
    if protocol in SASL_PROTOCOLS:
        if s.sasl_mechanism == "OAUTHBEARER":
            if not s.sasl_oauth_token_file:
                raise ConfigError("sasl_oauth_token_file", "OAUTHBEARER needs a token file")
        else:
            for name in ("sasl_username", "sasl_password"):
                if not getattr(s, name):
                    raise ConfigError(name, f"{protocol} with {s.sasl_mechanism} needs it set")
    else:
        for name in ("sasl_username", "sasl_password", "sasl_oauth_token_file"):
            if getattr(s, name):
                raise ConfigError(
                    "security_protocol", f"is {protocol} but {name} is set; use SASL_SSL"
                )
    tls_files = ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_keyfile_password")
    if protocol not in TLS_PROTOCOLS:
        for name in tls_files:
            if getattr(s, name):
                raise ConfigError(
                    "security_protocol", f"is {protocol} but {name} is set; use SSL or SASL_SSL"
                )
    if s.ssl_keyfile and not s.ssl_certfile:
        raise ConfigError("ssl_certfile", "must be set when ssl_keyfile is")
    if s.ssl_keyfile_password and not s.ssl_certfile:
        raise ConfigError("ssl_keyfile_password", "is set but ssl_certfile is not")
    for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "sasl_oauth_token_file"):
        path = getattr(s, name)
        if path and not Path(path).is_file():
            raise ConfigError(name, f"no such file: {path}")
        if path and not os.access(path, os.R_OK):
            raise ConfigError(name, f"cannot read {path} (permissions)")


def validate_topics(s: Settings) -> None:
    """Every topic set is a legal name, listed once, and embedstream's own are one each.
    Whether an unset one's default collides is checked where defaults are known
    (:func:`embedstream.kafka.client.admin.configured_topics`)."""
    seen: dict[str, str] = {}
    for name in TOPIC_SETTINGS:
        topics = topic_list(getattr(s, name))
        if name in OWN_TOPIC_SETTINGS and len(topics) > 1:
            raise ConfigError(name, f"names one topic, got {len(topics)}: {getattr(s, name)!r}")
        for topic in topics:
            if not topic:
                raise ConfigError(name, f"has an empty entry: {getattr(s, name)!r}")
            problem = topic_name_problem(topic)
            if problem:
                raise ConfigError(name, problem)
            if topic in seen:
                where = "twice" if seen[topic] == name else f"also in {seen[topic]}"
                raise ConfigError(name, f"lists {topic} {where}; a topic has one role")
            seen[topic] = name
    if s.topic_changelog:  # its state topic's name must be legal and free too
        state = s.topic_changelog + CHANGELOG_STATE_SUFFIX
        problem = topic_name_problem(state)
        if problem or state in seen:
            raise ConfigError(
                "topic_changelog", problem or f"its state topic {state} is also in {seen[state]}"
            )


def validate_provider(s: Settings) -> None:
    """The provider settings agree with provider_profile; extra_headers/extra_body parse."""
    if s.provider_profile == "azure":
        if not s.azure_endpoint:
            raise ConfigError(
                "azure_endpoint",
                "provider_profile azure needs the resource endpoint, "
                "e.g. https://my-resource.openai.azure.com",
            )
        if s.base_url:
            raise ConfigError(
                "base_url", "is not used with provider_profile azure; set azure_endpoint instead"
            )
        if not s.api_key:
            raise ConfigError(
                "api_key", "provider_profile azure needs the resource's key (sent as api-key)"
            )
    else:
        for name in AZURE_SETTINGS:
            if getattr(s, name):
                raise ConfigError(
                    name, f"is set but provider_profile is {s.provider_profile}; set it to azure"
                )
    if s.azure_endpoint and not s.azure_endpoint.startswith(("http://", "https://")):
        raise ConfigError("azure_endpoint", "must start with https:// (or http://)")
    if not s.azure_api_version.strip():
        raise ConfigError("azure_api_version", "must not be empty")
    header_map(s.extra_headers)
    body = json_object("extra_body", s.extra_body)
    clashes = sorted(OWN_BODY_FIELDS & set(body))
    if clashes:
        raise ConfigError(
            "extra_body",
            f"must not set {', '.join(clashes)}: embedstream sets them per request "
            "(see the request fields and the settings model and encoding_format)",
        )


# --------------------------------------------------------------------------- cache


def validate_cache(s: Settings) -> None:
    """cache=redis has a Redis URL to go to; the URL is one redis-py understands."""
    if s.cache == "redis" and not s.cache_url:
        raise ConfigError("cache_url", "cache=redis needs a Redis URL, e.g. redis://host:6379/0")
    if s.cache_url and not s.cache_url.startswith(CACHE_URL_SCHEMES):
        raise ConfigError(
            "cache_url",
            f"must start with redis://, rediss:// or unix://, got {scrub_url(s.cache_url)!r}",
        )


def validate_budget(s: Settings) -> None:
    """A shared budget's store is a URL redis-py understands, or the ledger of the
    `embedstream run` supervising this process (``ledger+unix://<socket>``)."""
    schemes = (*CACHE_URL_SCHEMES, "ledger+unix://")
    if s.budget_url and not s.budget_url.startswith(schemes):
        raise ConfigError(
            "budget_url",
            f"must start with redis://, rediss:// or unix://, got {scrub_url(s.budget_url)!r}",
        )


def validate_documents(s: Settings) -> None:
    """The overlap leaves room for new text, and small chunks stay under big ones. (A document
    over max_buffered_bytes is still admitted, whole: the bound is then exceeded by at most
    max_document_bytes, never by more.)"""
    if s.chunk_overlap_tokens >= s.chunk_max_tokens:
        raise ConfigError("chunk_overlap_tokens", "must be below chunk_max_tokens")
    if s.chunk_min_tokens > s.chunk_max_tokens:
        raise ConfigError("chunk_min_tokens", "must not exceed chunk_max_tokens")


# --------------------------------------------------------------------------- formats

_REGISTRY_FILES = (
    "schema_registry_ssl_cafile",
    "schema_registry_ssl_certfile",
    "schema_registry_ssl_keyfile",
)


def validate_formats(s: Settings) -> None:
    """A registry format has a registry to ask; its credentials are one kind; its TLS files
    exist; the field mapping's paths are paths."""
    if not s.schema_registry_url:
        for name in ("input_format", "output_format"):
            if getattr(s, name) != "json":
                raise ConfigError(
                    "schema_registry_url",
                    f"{name}={getattr(s, name)} needs a Schema Registry, e.g. http://registry:8081",
                )
    elif not s.schema_registry_url.startswith(("http://", "https://")):
        raise ConfigError(
            "schema_registry_url",
            f"must start with http:// or https://, got {scrub_url(s.schema_registry_url)!r}",
        )
    if s.schema_registry_bearer_token and (
        s.schema_registry_username or s.schema_registry_password
    ):
        raise ConfigError("schema_registry_bearer_token", "basic auth or a bearer token, not both")
    if s.schema_registry_password and not s.schema_registry_username:
        raise ConfigError("schema_registry_username", "must be set when the password is")
    if s.schema_registry_ssl_keyfile and not s.schema_registry_ssl_certfile:
        raise ConfigError("schema_registry_ssl_certfile", "must be set when the keyfile is")
    if s.schema_registry_ssl_keyfile_password and not s.schema_registry_ssl_certfile:
        raise ConfigError("schema_registry_ssl_keyfile_password", "is set but no certfile is")
    for name in _REGISTRY_FILES:
        path = getattr(s, name)
        if path and not Path(path).is_file():
            raise ConfigError(name, f"no such file: {path}")
    name_paths("field_map", s.field_map)


# --------------------------------------------------------------------------- vector store

# As stores/pgschema.IDENTIFIER (a test keeps them equal): lower case, so no quoting surprises,
# and short enough that the longest companion suffix ("_documents") fits PostgreSQL's 63 bytes.
STORE_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]{0,47}")
MAX_INDEXED_DIMENSIONS = 2_000  # pgvector's HNSW and IVFFlat on the vector type
DSN_SCHEMES = ("postgresql://", "postgres://")


def validate_store(s: Settings) -> None:
    """The store's names are identifiers, the DSN is one libpq reads, and an index fits the
    dimension. Whether a DSN is needed at all is the command's business (require_store)."""
    for name in ("store_schema", "store_table"):
        value = getattr(s, name)
        if not STORE_IDENTIFIER.fullmatch(value):
            raise ConfigError(
                name,
                f"{value!r} is not a lower-case SQL identifier ([a-z_][a-z0-9_]*, <= 48 chars)",
            )
    if s.store_dsn is not None:
        dsn = s.store_dsn.strip()
        if not dsn.startswith(DSN_SCHEMES) and "=" not in dsn:
            raise ConfigError(
                "store_dsn",
                "expected postgresql://user:password@host:5432/db or key=value conninfo",
            )
    if s.store_model is not None and not s.store_model.strip():
        raise ConfigError("store_model", "must not be empty when set")
    if not s.store_group_id.strip():
        raise ConfigError("store_group_id", "must not be empty")
    if s.store_group_id == s.group_id:
        raise ConfigError(
            "store_group_id", "must differ from group_id: the processors' group reads requests"
        )
    dims = s.store_dimensions
    if s.store_index != "none" and dims is not None and dims > MAX_INDEXED_DIMENSIONS:
        raise ConfigError(
            "store_index",
            f"pgvector indexes at most {MAX_INDEXED_DIMENSIONS} dimensions; "
            f"store_dimensions is {dims}: use none",
        )


def require_store(s: Settings) -> None:
    """What `embedstream sink` needs beyond the settings every command takes."""
    if not s.store_dsn:
        raise ConfigError(
            "store_dsn",
            "embedstream sink needs the PostgreSQL to write to, "
            "e.g. postgresql://user@host:5432/db (or EMBEDSTREAM_STORE_DSN_FILE)",
        )

    if s.max_document_bytes > s.max_buffered_bytes:
        raise ConfigError("max_document_bytes", "must not exceed max_buffered_bytes")


# --------------------------------------------------------------------------- tracing


def validate_tracing(s: Settings) -> None:
    """The collector URL is an http(s) URL, the export headers a JSON object of strings, and
    the service has a name."""
    if s.tracing_endpoint is not None and not s.tracing_endpoint.startswith(
        ("http://", "https://")
    ):
        raise ConfigError(
            "tracing_endpoint",
            f"must start with http:// or https://, got {scrub_url(s.tracing_endpoint)!r}",
        )
    header_map(s.tracing_headers, "tracing_headers")
    weight_map(s.source_weights)  # (with tracing: both are operators' settings)
    if not s.tracing_service_name.strip():
        raise ConfigError("tracing_service_name", "must not be empty")


# --------------------------------------------------------------------------- online lane

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})


def online_keys(s: Settings) -> dict[str, str]:
    """The callers' keys as {key: name}: from http_api_keys_file when set (read now; the
    online lane reads it again when it changes), else from http_api_keys."""
    if s.http_api_keys_file:
        path = Path(s.http_api_keys_file)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
            raise ConfigError("http_api_keys_file", f"cannot read {path}: {reason}") from exc
        return caller_keys(text, "http_api_keys_file")
    return caller_keys(s.http_api_keys)


def validate_online(s: Settings, port: int | None = None) -> None:
    """The online lane's keys, limits and TLS files are usable; it listens beyond loopback
    only with keys. ``port``: the one `serve` listens on when http_port is unset."""
    keys = online_keys(s)
    limits = key_limits(s.http_key_limits)
    unknown = sorted(set(limits) - set(keys.values()))
    if keys and unknown:
        raise ConfigError("http_key_limits", f"names no key of http_api_keys: {unknown[0]!r}")
    listening = port if port is not None else s.http_port
    if listening and not keys and s.http_host not in LOOPBACK_HOSTS:
        raise ConfigError(
            "http_api_keys",
            f"the online lane listens on {s.http_host}, beyond loopback: set keys for its "
            "callers (name:key pairs), or http_host=127.0.0.1",
        )
    if bool(s.http_ssl_certfile) != bool(s.http_ssl_keyfile):
        missing = "http_ssl_keyfile" if s.http_ssl_certfile else "http_ssl_certfile"
        raise ConfigError(missing, "https needs both http_ssl_certfile and http_ssl_keyfile")
    for name in ("http_ssl_certfile", "http_ssl_keyfile"):
        path = getattr(s, name)
        if path and not Path(path).is_file():
            raise ConfigError(name, f"no such file: {path}")
