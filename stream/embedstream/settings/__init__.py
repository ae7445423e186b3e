"""Typed settings, their sources, secrets and rules: the layer every other one reads.

Upper layers import from here, never from the modules inside: ``fields`` (the table),
``types`` (value types and specs), ``sources`` (defaults, TOML, environment, overrides),
``secrets`` (masking), ``parsing`` (topic lists, JSON objects), ``rules`` (checks between
settings), ``loading`` (merge and validate), ``reference`` (each setting as the documentation
shows it) and ``flags`` (the command-line flags).
"""

from __future__ import annotations

from embedstream.settings.fields import FIELDS, SECRETS, Settings, spec
from embedstream.settings.loading import choices, coerce, load_settings, validate
from embedstream.settings.origins import TOOL_VARIABLES
from embedstream.settings.parsing import (
    CHANGELOG_STATE_SUFFIX,
    KEY_LIMIT_FIELDS,
    OWN_TOPIC_SETTINGS,
    REQUEST_TOPIC_SETTINGS,
    TOPIC_SETTINGS,
    caller_keys,
    header_map,
    header_secrets,
    key_limits,
    topic_list,
    topic_name_problem,
)
from embedstream.settings.reference import ReferenceRow, reference_rows, shown_default
from embedstream.settings.rules import LOOPBACK_HOSTS, online_keys, validate_online
from embedstream.settings.secrets import CACHE_URL_SCHEMES, masked_secret, scrub_url, url_password
from embedstream.settings.types import (
    SASL_PROTOCOLS,
    TLS_PROTOCOLS,
    Group,
    ProviderProfile,
    SettingSpec,
)

__all__ = [
    "CACHE_URL_SCHEMES",
    "CHANGELOG_STATE_SUFFIX",
    "FIELDS",
    "KEY_LIMIT_FIELDS",
    "LOOPBACK_HOSTS",
    "OWN_TOPIC_SETTINGS",
    "REQUEST_TOPIC_SETTINGS",
    "SASL_PROTOCOLS",
    "SECRETS",
    "TLS_PROTOCOLS",
    "TOOL_VARIABLES",
    "TOPIC_SETTINGS",
    "Group",
    "ProviderProfile",
    "ReferenceRow",
    "SettingSpec",
    "Settings",
    "caller_keys",
    "choices",
    "coerce",
    "header_map",
    "header_secrets",
    "key_limits",
    "load_settings",
    "masked_secret",
    "online_keys",
    "reference_rows",
    "scrub_url",
    "shown_default",
    "spec",
    "topic_list",
    "topic_name_problem",
    "url_password",
    "validate",
    "validate_online",
]
