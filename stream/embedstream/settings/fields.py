"""The field table: every setting, typed and frozen, with its group, help, range and secrecy.

Each setting declares those once, in its field metadata (the groups' tables are in
``fields_*.py``); the loader (:mod:`embedstream.settings.loading`), the validation,
``embedstream run --help`` and the configuration reference of the docs all derive from it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from embedstream.settings.derived import ITEM_RESIDENT_BYTES, buffered_items_bound
from embedstream.settings.fields_batch import BatchFields
from embedstream.settings.fields_core import CoreFields
from embedstream.settings.fields_documents import DocumentFields
from embedstream.settings.fields_formats import FormatFields
from embedstream.settings.fields_online import OnlineFields
from embedstream.settings.fields_sources import SourceFields
from embedstream.settings.fields_store import StoreFields
from embedstream.settings.fields_tracing import TracingFields
from embedstream.settings.parsing import (
    caller_keys,
    header_map,
    header_secrets,
    json_object,
    name_paths,
    topic_list,
    weight_map,
)
from embedstream.settings.secrets import masked_secret, scrub_url, url_password
from embedstream.settings.types import SettingSpec


@dataclass(frozen=True)
class Settings(
    BatchFields,
    OnlineFields,
    SourceFields,
    TracingFields,
    StoreFields,
    FormatFields,
    DocumentFields,
    CoreFields,
):
    """The processor's configuration. Field order (the bases' in reverse) is the order of the
    configuration reference."""

    @property
    def buffered_items_limit(self) -> int:
        """The most items held in memory, derived (no setting of its own: memory is bounded
        by max_buffered_bytes, the count follows from max_batch_size x max_concurrency)."""
        return buffered_items_bound(
            self.max_batch_size, self.max_concurrency, self.max_buffered_bytes, ITEM_RESIDENT_BYTES
        )

    @property
    def allowed_model_set(self) -> frozenset[str]:
        return frozenset(m.strip() for m in self.allowed_models.split(",") if m.strip())

    def topics(self, name: str) -> tuple[str, ...]:
        """The topics a ``topic_*`` setting lists; () when unset (its default applies)."""
        return topic_list(getattr(self, name))

    @property
    def source_weight_map(self) -> dict[str, float]:
        return weight_map(self.source_weights)

    @property
    def extra_header_map(self) -> dict[str, str]:
        return header_map(self.extra_headers)

    @property
    def field_map_paths(self) -> dict[str, str]:
        """The field_map setting as {request field: dotted path}."""
        return name_paths("field_map", self.field_map)

    @property
    def extra_body_map(self) -> dict[str, Any]:
        return json_object("extra_body", self.extra_body)

    def secret_values(self) -> list[str]:
        """The secrets set, for the log redactor: the password of a secret URL alone, and each
        header of extra_headers on its own (a message would quote one value, never the JSON)."""
        found = [value for name in SECRETS if (value := getattr(self, name))]
        found += [p for value in found if (p := url_password(value))]
        # A registry URL is not secret, but user:password@ in it is.
        found += [p for p in [url_password(self.schema_registry_url or "")] if p]
        found += header_secrets(header_map(self.tracing_headers, "tracing_headers"))
        found += list(caller_keys(self.http_api_keys))  # each caller's key on its own
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
