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
    field_map: str = setting(
        "",
        "Registry records: where each request field is, as name=dotted.path pairs, comma "
        "separated, e.g. id=event_id,text=body.content,doc_id=doc.key,priority=meta.prio,"
        "metadata=attrs (a field not named is read from the top-level field of its own name; "
        "a record with a doc_id is a document; priority unset: the topic decides).",
        _F,
    )
