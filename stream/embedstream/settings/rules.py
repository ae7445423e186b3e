"""Rules between settings that a range cannot state: Kafka security, topic names, the provider.

:func:`embedstream.settings.loading.validate` calls these after the range checks. Each failure is a
:class:`ConfigError` naming exactly one setting, raised before anything touches Kafka or the
provider. The parsers they share with the settings' accessors are in
:mod:`embedstream.settings.parsing`.
"""

from __future__ import annotations

import os
from pathlib import Path

from embedstream.errors import ConfigError
from embedstream.settings.fields import Settings
from embedstream.settings.parsing import (
    AZURE_SETTINGS,
    OWN_BODY_FIELDS,
    OWN_TOPIC_SETTINGS,
    TOPIC_SETTINGS,
    header_map,
    json_object,
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
    (:func:`embedstream.kafka.admin.configured_topics`)."""
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


def validate_documents(s: Settings) -> None:
    """The overlap leaves room for new text, and one document's bytes fit
    the buffer (it is admitted whole, so a bigger one could never start)."""
    if s.chunk_overlap_tokens >= s.chunk_max_tokens:
        raise ConfigError("chunk_overlap_tokens", "must be below chunk_max_tokens")
    if s.chunk_min_tokens > s.chunk_max_tokens:
        raise ConfigError("chunk_min_tokens", "must not exceed chunk_max_tokens")
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
