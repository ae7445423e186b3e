"""Parsers of setting values (topic lists, topic names, JSON objects, headers).

The settings' own accessors (:mod:`embedstream.settings.fields`) and their rules
(:mod:`embedstream.settings.rules`) both read values through these, so a value that validated is
one the rest of the code can read.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import orjson

from embedstream.errors import ConfigError

# --------------------------------------------------------------------------- topics

# The request lanes may read several topics; embedstream's own topics are one each.
REQUEST_TOPIC_SETTINGS = ("topic_requests_high", "topic_requests_low")
OWN_TOPIC_SETTINGS = (
    "topic_retry", "topic_results", "topic_dlq", "topic_documents", "topic_changelog",
    "topic_batch_jobs",
)  # fmt: skip
# The chunk changelog's state topic: its name with this suffix (kafka/outputs/changelog_writer.py).
CHANGELOG_STATE_SUFFIX = ".state"
TOPIC_SETTINGS = (*REQUEST_TOPIC_SETTINGS, *OWN_TOPIC_SETTINGS)

_LEGAL_TOPIC = re.compile(r"[A-Za-z0-9._-]+")
MAX_TOPIC_NAME = 249  # Kafka's limit on a topic name


def topic_name_problem(name: str) -> str | None:
    """Why Kafka would refuse ``name`` as a topic name, or None."""
    if not _LEGAL_TOPIC.fullmatch(name) or name in (".", ".."):
        return f"{name!r} is not a legal Kafka topic name (letters, digits, '.', '_', '-')"
    if len(name) > MAX_TOPIC_NAME:
        return f"{name[:40]!r}... is longer than Kafka's {MAX_TOPIC_NAME} characters"
    return None


def topic_list(value: str | None) -> tuple[str, ...]:
    """The topics a topic setting names (comma separated, spaces around names ignored)."""
    if value is None or not value.strip():
        return ()
    return tuple(part.strip() for part in value.split(","))


def weight_map(text: str | None) -> dict[str, float]:
    """source_weights as topic -> weight (each positive and finite); {} when unset."""
    weights: dict[str, float] = {}
    for pair in topic_list(text):
        topic, sep, number = (part.strip() for part in pair.partition("="))
        if not sep or not topic:
            raise ConfigError("source_weights", f"expected topic=weight, got {pair!r}")
        try:
            weight = float(number)
        except ValueError:
            raise ConfigError("source_weights", f"weight of {topic!r} is not a number") from None
        if not 0 < weight < float("inf"):
            raise ConfigError("source_weights", f"weight of {topic!r} must be > 0, got {number}")
        if topic in weights:
            raise ConfigError("source_weights", f"{topic!r} is named twice")
        weights[topic] = weight
    return weights


# --------------------------------------------------------------------------- provider

AZURE_SETTINGS = ("azure_endpoint", "azure_deployment")
# What embedstream itself puts in every request body; extra_body must not change it.
OWN_BODY_FIELDS = frozenset({"input", "model", "encoding_format", "dimensions"})


def json_object(name: str, text: str | None, *, secret: bool = False) -> dict[str, Any]:
    """A setting holding a JSON object, parsed; {} when unset."""
    if text is None or not text.strip():
        return {}
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        detail = "" if secret else f": {exc}"
        raise ConfigError(name, f"must be a JSON object{detail}") from None
    if not isinstance(value, dict):
        raise ConfigError(name, f"must be a JSON object, got a JSON {type(value).__name__}")
    return value


def header_map(text: str | None, name: str = "extra_headers") -> dict[str, str]:
    """A JSON object of HTTP headers (setting `name`: extra_headers, tracing_headers) as a
    header -> value mapping; values are never echoed in errors."""
    headers = json_object(name, text, secret=True)
    for header, value in headers.items():
        if not isinstance(value, str):
            raise ConfigError(name, f"the value of {header!r} must be a string")
        if not header or any(c in header for c in " :\r\n"):
            raise ConfigError(name, f"{header!r} is not a header name")
        if "\r" in value or "\n" in value:
            raise ConfigError(name, f"the value of {header!r} holds a line break")
    return headers


def header_secrets(headers: Mapping[str, str]) -> list[str]:
    """What of extra_headers must never be shown: each value, and the credential of a value
    like ``Bearer <token>`` on its own (a provider quoting the token back drops the scheme)."""
    found: list[str] = []
    for value in headers.values():
        scheme, _, credential = value.partition(" ")
        found += [value, credential.strip()] if credential.strip() and scheme else [value]
    return [secret for secret in found if secret]


# --------------------------------------------------------------------------- formats


def path_problem(path: str) -> str | None:
    """Why ``path`` is not a dotted field path (``body.content``), or None."""
    if not path.strip() or any(not part.strip() for part in path.split(".")):
        return f"field path {path!r} has an empty part"
    return None


def name_paths(name: str, text: str) -> dict[str, str]:
    """``metadata=attrs,version=rev`` as {request field: dotted path}; ConfigError naming
    setting ``name`` for a malformed entry or a field named twice."""
    pairs: dict[str, str] = {}
    for entry in text.split(","):
        if not entry.strip():
            continue
        field, sep, path = (part.strip() for part in entry.partition("="))
        if not sep or not field:
            raise ConfigError(name, f"expected name=path entries, got {entry.strip()!r}")
        problem = path_problem(path)
        if problem:
            raise ConfigError(name, f"{field}: {problem}")
        if field in pairs:
            raise ConfigError(name, f"names {field} twice")
        pairs[field] = path
    return pairs


# --------------------------------------------------------------------------- online lane

KEY_LIMIT_FIELDS = ("requests_per_s", "inputs_per_s")


def caller_keys(text: str | None, name: str = "http_api_keys") -> dict[str, str]:
    """``rag:sk-1,indexer:sk-2`` as {key: name}; keys are never echoed in errors."""
    keys: dict[str, str] = {}
    names: set[str] = set()
    for index, entry in enumerate((text or "").replace("\n", ",").split(",")):
        if not entry.strip():
            continue
        who, sep, key = (part.strip() for part in entry.partition(":"))
        if not sep or not who or not key:
            raise ConfigError(name, f"entry {index + 1} is not name:key")
        if who in names:
            raise ConfigError(name, f"names {who!r} twice")
        if key in keys:
            raise ConfigError(name, f"{who!r} has the key of {keys[key]!r}")
        names.add(who)
        keys[key] = who
    return keys


def key_limits(text: str | None) -> dict[str, dict[str, float]]:
    """http_key_limits as {key name: {requests_per_s / inputs_per_s: positive number}}."""
    limits: dict[str, dict[str, float]] = {}
    for who, value in json_object("http_key_limits", text).items():
        if not isinstance(value, dict) or not value:
            raise ConfigError("http_key_limits", f"{who!r} needs an object of limits")
        for field, number in value.items():
            if field not in KEY_LIMIT_FIELDS:
                raise ConfigError(
                    "http_key_limits",
                    f"{who!r}: unknown limit {field!r}; use {' or '.join(KEY_LIMIT_FIELDS)}",
                )
            if isinstance(number, bool) or not isinstance(number, int | float) or number <= 0:
                raise ConfigError("http_key_limits", f"{who!r}: {field} must be a number > 0")
        limits[who] = {field: float(number) for field, number in value.items()}
    return limits
