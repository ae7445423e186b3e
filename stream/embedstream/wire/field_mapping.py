"""Field mapping: a decoded registry record (Avro, JSON Schema, Protobuf) into the
JSON-equivalent request dict that :func:`request_from_doc` validates. Pure.

Producers' records have their own shape (``{"event_id": 7, "body": {"content": ...}}``); the
mapping names, as dotted paths, the fields that carry the id, the text and the optional request
fields. What embedstream validates afterwards is the same as for a JSON event, so a mapped
record gets exactly the reasons a JSON event would (``invalid_dimensions``, ``empty_text``...);
only a mapped field that is absent or of the wrong type gets ``missing_field`` /
``invalid_field``, with the path in the message.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from embedstream.errors import InvalidEvent, Reason

# Request fields other than id and text, in the order of EmbedRequest.
OPTIONAL_REQUEST_FIELDS = (
    "model",
    "encoding_format",
    "dimensions",
    "metadata",
    "deadline",
    "user",
    "input_type",
    "task",
    "version",
)
_HIGH = frozenset({"high", "true", "1"})
_LOW = frozenset({"low", "false", "0"})


@dataclass(frozen=True, slots=True)
class FieldMapping:
    """Where each request field is in a record, as dotted paths (``body.content``).

    ``optional`` maps request field names (``OPTIONAL_REQUEST_FIELDS``) to paths; a request
    field not named there is read from the top-level field of the same name when the record has
    one, as in a JSON event. ``doc_id_field`` and ``priority_field`` are off unless set; with
    ``doc_id_field`` set, a record that has a doc_id there is a document (its id is then
    optional) and one without is a plain request, as ``doc_id`` decides for a JSON event."""

    id_field: str = "id"
    text_field: str = "text"
    doc_id_field: str | None = None
    priority_field: str | None = None
    optional: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        unknown = set(self.optional or ()) - set(OPTIONAL_REQUEST_FIELDS)
        if unknown:
            raise ValueError(
                f"no request field {sorted(unknown)}; one of {list(OPTIONAL_REQUEST_FIELDS)}"
            )
        paths = [self.id_field, self.text_field, self.doc_id_field, self.priority_field]
        for path in [*paths, *(self.optional or {}).values()]:
            if path is not None and (not path or "" in path.split(".")):
                raise ValueError(f"field path {path!r} has an empty part")


@dataclass(frozen=True, slots=True)
class MappedEvent:
    fields: dict[str, Any]  # {"id", "text", ...}: what request_from_doc takes
    doc_id: str | None = None
    high_priority: bool | None = None  # None: the topic decides, as for JSON events


def map_fields(record: dict[str, Any], mapping: FieldMapping) -> MappedEvent:
    """The request dict of one decoded record; raises InvalidEvent."""
    doc_id = None
    if mapping.doc_id_field is not None and lookup(record, mapping.doc_id_field) is not None:
        doc_id = _identifier(record, mapping.doc_id_field)
    fields: dict[str, Any] = {}
    if doc_id is None or lookup(record, mapping.id_field) is not None:
        # A document needs no request id (its chunks get theirs from the doc_id).
        fields["id"] = _identifier(record, mapping.id_field)
    fields["text"] = _text(record, mapping.text_field)
    paths = mapping.optional or {}
    for name in OPTIONAL_REQUEST_FIELDS:
        value = lookup(record, paths[name]) if name in paths else record.get(name)
        if value is not None:
            fields[name] = plain(value)
    high_priority = None
    if mapping.priority_field is not None:
        high_priority = _priority(record, mapping.priority_field)
    return MappedEvent(fields, doc_id, high_priority)


_MISSING = object()


def lookup(record: dict[str, Any], path: str) -> Any:
    """The value at a dotted path, or None if any part is absent (or null)."""
    value: Any = record
    for part in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part, _MISSING)
        if value is _MISSING:
            return None
    return value


def _required(record: dict[str, Any], path: str) -> Any:
    value = lookup(record, path)
    if value is None:
        raise InvalidEvent(Reason.MISSING_FIELD, f"mapped field {path!r} is missing or null")
    return value


def _text(record: dict[str, Any], path: str) -> str:
    value = _required(record, path)
    if not isinstance(value, str):
        raise InvalidEvent(
            Reason.INVALID_FIELD,
            f"mapped text field {path!r} must be a string, got {type(value).__name__}",
        )
    return value


def _identifier(record: dict[str, Any], path: str) -> str:
    """A string id; integer ids (Avro ``long``, Protobuf ``int32``) as their decimal text."""
    value = _required(record, path)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise InvalidEvent(
            Reason.INVALID_FIELD,
            f"mapped id field {path!r} must be a string or integer, got {type(value).__name__}",
        )
    return value


def _priority(record: dict[str, Any], path: str) -> bool | None:
    value = lookup(record, path)
    if value is None:
        return None
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in _HIGH | _LOW:
        return value.lower() in _HIGH
    raise InvalidEvent(
        Reason.INVALID_FIELD,
        f"mapped priority field {path!r} must be high/low or a boolean, got {value!r}",
    )


def plain(value: Any) -> Any:
    """A JSON value for what the format libraries return beyond JSON: Avro ``bytes`` (base64),
    logical types (ISO 8601 dates and times, decimals and UUIDs as text), tuples."""
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, dict):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return str(value)
    return str(value)
