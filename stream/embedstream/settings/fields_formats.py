"""Settings of the record formats: what the input topics carry (JSON, or Avro / JSON Schema /
Protobuf through a Schema Registry), what results are written as, how to reach the registry,
and where the request fields are in a registry record (the field mapping)."""

from __future__ import annotations

from dataclasses import dataclass

from embedstream.settings.types import Group, InputFormat, OutputFormat, setting

_F = Group.FORMATS
_HOUR_S = 3600.0


@dataclass(frozen=True)
class FormatFields:
    input_format: InputFormat = setting(
        "json",
        "What request values are: json, or avro, json_schema or protobuf in the Schema "
        "Registry wire format (magic byte, schema id, payload).",
        _F,
    )
    output_format: OutputFormat = setting(
        "json",
        "What the results topic's records (results, chunks, final records) are written as: "
        "json, or avro / json_schema in the registry wire format (each shape's schema "
        "registered at start under <topic>-<record name>, TopicRecordNameStrategy).",
        _F,
    )
    schema_registry_url: str | None = setting(
        None,
        "Confluent-compatible Schema Registry, e.g. http://registry:8081 (Apicurio: "
        ".../apis/ccompat/v7); needed by every format but json.",
        _F,
    )
    schema_registry_username: str | None = setting(None, "Registry basic-auth user.", _F)
    schema_registry_password: str | None = setting(
        None,
        "Registry basic-auth password (or EMBEDSTREAM_SCHEMA_REGISTRY_PASSWORD_FILE). Never "
        "logged.",
        _F,
        secret=True,
    )
    schema_registry_bearer_token: str | None = setting(
        None,
        "Registry bearer token, instead of basic auth (or "
        "EMBEDSTREAM_SCHEMA_REGISTRY_BEARER_TOKEN_FILE). Never logged.",
        _F,
        secret=True,
    )
    schema_registry_ssl_cafile: str | None = setting(
        None, "PEM file of the CAs signing the registry's certificate; unset: the system's.", _F
    )
    schema_registry_ssl_certfile: str | None = setting(
        None, "PEM client certificate for the registry (mutual TLS).", _F
    )
    schema_registry_ssl_keyfile: str | None = setting(
        None, "PEM private key of schema_registry_ssl_certfile.", _F
    )
    schema_registry_ssl_keyfile_password: str | None = setting(
        None,
        "Password of that key (or EMBEDSTREAM_SCHEMA_REGISTRY_SSL_KEYFILE_PASSWORD_FILE). "
        "Never logged.",
        _F,
        secret=True,
    )
    schema_registry_timeout_s: float = setting(
        10.0, "Longest one registry request may take before it counts as an outage.", _F,
        gt=0, le=_HOUR_S,
    )  # fmt: skip
    schema_registry_cache_size: int = setting(
        1_000, "Schemas kept by id (an id's schema never changes, so no expiry).", _F, ge=1
    )
    id_field: str = setting(
        "id", "Registry records: dotted path of the request id (a string or an integer).", _F
    )
    text_field: str = setting(
        "text", "Registry records: dotted path of the text, e.g. body.content.", _F
    )
    doc_id_field: str = setting(
        "doc_id",
        "Registry records: dotted path of a document's id; a record that has it is a document "
        "(cut into chunks), one that has none a plain request.",
        _F,
    )
    priority_field: str | None = setting(
        None,
        "Registry records: dotted path of the priority (high/low, true/false); unset or "
        "absent: the topic decides.",
        _F,
    )
    field_map: str = setting(
        "",
        "Registry records: other request fields as name=path, comma separated, e.g. "
        "metadata=attrs,version=rev,model=m (fields not named are read from the top-level "
        "field of their own name).",
        _F,
    )
