"""What the format settings build: the registry client, the decoders of the input format (with
its field mapping); `engine/result_schema.py` registers the results' schema at start.

A missing format library or a field mapping that names no request field is a bad setting:
:class:`ConfigError` naming it, at start, before anything is consumed.
"""

from __future__ import annotations

import importlib.util

from embedstream.engine.registry import RegistryClient, RegistryConfig
from embedstream.engine.schema_decoders import FramedOutputs, SchemaDecoders
from embedstream.errors import ConfigError
from embedstream.settings import Settings
from embedstream.wire.field_mapping import FieldMapping

# The library each registry format needs (the `registry` extra).
_LIBRARIES = {"avro": "fastavro", "json_schema": "jsonschema", "protobuf": "grpc_tools"}
# Schemas kept by id: an id's schema never changes, and a deployment reads a handful of them.
SCHEMAS_KEPT = 1_000


def uses_registry(settings: Settings) -> bool:
    return settings.input_format != "json" or settings.output_format != "json"


def registry_client(settings: Settings) -> RegistryClient:
    for name in ("input_format", "output_format"):
        library = _LIBRARIES.get(getattr(settings, name))
        if library is not None and importlib.util.find_spec(library) is None:
            raise ConfigError(name, f"needs {library}: pip install 'embedstream[registry]'")
    if settings.schema_registry_url is None:  # the settings' rules make this unreachable
        raise ConfigError("schema_registry_url", "must be set for a registry format")
    return RegistryClient(
        RegistryConfig(
            url=settings.schema_registry_url,
            username=settings.schema_registry_username,
            password=settings.schema_registry_password,
            bearer_token=settings.schema_registry_bearer_token,
            ssl_cafile=settings.schema_registry_ssl_cafile,
            ssl_certfile=settings.schema_registry_ssl_certfile,
            ssl_keyfile=settings.schema_registry_ssl_keyfile,
            ssl_keyfile_password=settings.schema_registry_ssl_keyfile_password,
            timeout_s=settings.schema_registry_timeout_s,
            cache_size=SCHEMAS_KEPT,
        )
    )


def field_mapping(settings: Settings) -> FieldMapping:
    """Where each request field is in a registry record: field_map's paths, and for the id,
    the text and a document's id their own names by default."""
    paths = dict(settings.field_map_paths)
    try:
        return FieldMapping(
            id_field=paths.pop("id", "id"),
            text_field=paths.pop("text", "text"),
            doc_id_field=paths.pop("doc_id", "doc_id"),
            priority_field=paths.pop("priority", None),
            optional=paths,
        )
    except ValueError as exc:
        raise ConfigError("field_map", str(exc)) from None


def schema_decoders(settings: Settings, client: RegistryClient) -> SchemaDecoders | None:
    """The decoders of a registry input format; None for JSON."""
    if settings.input_format == "json":
        return None
    return SchemaDecoders(
        client,
        settings.input_format,
        field_mapping(settings),
        max_schemas=SCHEMAS_KEPT,
    )


def framed_outputs(settings: Settings, client: RegistryClient) -> FramedOutputs:
    """The store writer's reader of results written in a registry output_format."""
    decoders = SchemaDecoders(
        client, settings.output_format, FieldMapping(),
        max_schemas=SCHEMAS_KEPT,
    )  # fmt: skip
    return FramedOutputs(decoders)
