"""JSON Schema payloads: JSON (orjson) validated against the registry's schema (jsonschema);
result records as JSON of a schema of ours."""

from __future__ import annotations

from typing import Any

import jsonschema
import orjson
from referencing import Registry, Resource

from embedstream.errors import InvalidEvent, Reason
from embedstream.wire.formats import RegistrySchema, invalid_schema, undecodable


def _validator(schema: dict[str, Any], references: Registry | None = None) -> Any:
    # The schema's own $schema picks the draft (Draft 7 when absent, as the serializers do).
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    cls.check_schema(schema)
    if references is None:
        return cls(schema)
    return cls(schema, registry=references)


class JsonSchemaDecoder:
    def __init__(self, schema: RegistrySchema) -> None:
        self._schema_id = schema.schema_id
        try:
            document = orjson.loads(schema.schema)
            references: Registry = Registry()
            for reference in schema.references:
                # A $ref names the referenced schema by the reference's name.
                resource = Resource.from_contents(orjson.loads(reference.schema))
                references = references.with_resource(reference.name, resource)
            self._validator = _validator(document, references)
        except (orjson.JSONDecodeError, jsonschema.SchemaError, TypeError) as exc:
            raise invalid_schema(schema, exc) from None

    def decode(self, payload: bytes) -> dict[str, Any]:
        try:
            doc = orjson.loads(payload)
        except orjson.JSONDecodeError as exc:
            raise undecodable(self._schema_id, f"not JSON: {exc}") from None
        error = jsonschema.exceptions.best_match(self._validator.iter_errors(doc))
        if error is not None:
            where = "/".join(str(part) for part in error.absolute_path) or "(root)"
            raise InvalidEvent(
                Reason.SCHEMA_VIOLATION,
                f"value fails schema {self._schema_id} at {where}: {error.message}",
            )
        if not isinstance(doc, dict):
            raise InvalidEvent(
                Reason.NOT_AN_OBJECT, f"expected a JSON object, got {type(doc).__name__}"
            )
        return doc


class JsonSchemaEncoder:
    """Encodes records of one schema of ours as JSON. The schema is checked once here; the
    records are not validated one by one (a 1,536-float embedding would cost more to validate
    than to embed): the tests validate what the encoder writes."""

    def __init__(self, schema: dict[str, Any]) -> None:
        _validator(schema)

    def encode(self, record: dict[str, Any]) -> bytes:
        return orjson.dumps(record)
