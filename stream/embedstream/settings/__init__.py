"""Typed settings, their sources, secrets and rules: the layer every other one reads.

Upper layers import from here, never from the modules inside: ``fields`` (the table),
``types`` (value types and specs), ``sources`` (defaults, TOML, environment, overrides),
``secrets`` (masking), ``parsing`` (topic lists, JSON objects), ``rules`` (checks between
settings), ``loading`` (merge and validate) and ``flags`` (the command-line flags).
"""

from __future__ import annotations

from embedstream.settings.fields import FIELDS, SECRETS, Settings, spec
from embedstream.settings.loading import choices, coerce, load_settings, reference_rows, validate
from embedstream.settings.parsing import (
    OWN_TOPIC_SETTINGS,
    REQUEST_TOPIC_SETTINGS,
    TOPIC_SETTINGS,
    header_map,
    header_secrets,
    topic_list,
    topic_name_problem,
)
from embedstream.settings.secrets import CACHE_URL_SCHEMES, masked_secret, scrub_url, url_password
from embedstream.settings.sources import TOOL_VARIABLES
from embedstream.settings.types import (
    SASL_PROTOCOLS,
    TLS_PROTOCOLS,
    Group,
    ProviderProfile,
    SettingSpec,
)

__all__ = [
    "CACHE_URL_SCHEMES",
    "FIELDS",
    "OWN_TOPIC_SETTINGS",
    "REQUEST_TOPIC_SETTINGS",
    "SASL_PROTOCOLS",
    "SECRETS",
    "TLS_PROTOCOLS",
    "TOOL_VARIABLES",
    "TOPIC_SETTINGS",
    "Group",
    "ProviderProfile",
    "SettingSpec",
    "Settings",
    "choices",
    "coerce",
    "header_map",
    "header_secrets",
    "load_settings",
    "masked_secret",
    "reference_rows",
    "scrub_url",
    "spec",
    "topic_list",
    "topic_name_problem",
    "url_password",
    "validate",
]
