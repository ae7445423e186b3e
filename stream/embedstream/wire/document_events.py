"""Document events in: a whole text to cut into chunks, or a tombstone that deletes one.

A document event is a JSON object with a ``doc_id`` (producers key it by that id, so all of one
document's versions land on one partition, in order) and a ``text``; ``version`` is optional
(the processor then takes a digest of the text) and ``metadata`` is passed through untouched to
every output. The request fields of plain requests (model, encoding_format, dimensions, user,
input_type, task, deadline) mean the same here and apply to every chunk. A record with a key
and no value on a request topic is a tombstone: the document of that key is deleted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from embedstream.errors import InvalidEvent, Reason
from embedstream.wire.events import (
    MAX_ID_CHARS,
    REQUEST_PARAMETERS,
    deadline_field,
    dimensions_field,
    encoding_format_field,
    metadata_field,
    optional_str_field,
    parameter_field,
)

MAX_VERSION_CHARS = 256


@dataclass(frozen=True, slots=True)
class DocumentEvent:
    doc_id: str
    text: str  # may be empty: the document then has no chunks (and ends `complete`, 0 chunks)
    version: str | None = None  # None: the processor uses a digest of the text
    metadata: dict[str, Any] | None = None
    model: str | None = None
    encoding_format: str | None = None
    dimensions: int | None = None
    deadline_ms: int | None = None
    user: str | None = None
    input_type: str | None = None
    task: str | None = None

    def parameters(self) -> tuple[str, ...]:
        """The provider-specific fields this document sets (for all of its chunks)."""
        return tuple(name for name in REQUEST_PARAMETERS if getattr(self, name) is not None)


@dataclass(frozen=True, slots=True)
class DocumentTombstone:
    """A keyed record without a value: delete the document of that id."""

    doc_id: str


def is_document(doc: dict[str, Any]) -> bool:
    """A request event carries `id`; a document event carries `doc_id`."""
    return "doc_id" in doc


def document_from_doc(doc: dict[str, Any]) -> DocumentEvent:
    """Validate one document given as a JSON-equivalent dict."""
    return DocumentEvent(
        doc_id=_doc_id(doc.get("doc_id")),
        text=_text(doc),
        version=_version(doc),
        metadata=metadata_field(doc),
        model=optional_str_field(doc, "model"),
        encoding_format=encoding_format_field(doc),
        dimensions=dimensions_field(doc),
        deadline_ms=deadline_field(doc),
        user=parameter_field(doc, "user"),
        input_type=parameter_field(doc, "input_type"),
        task=parameter_field(doc, "task"),
    )


def tombstone_for(key: bytes | None) -> DocumentTombstone:
    """The tombstone a value-less record stands for; a record with neither is malformed."""
    if key is None:
        raise InvalidEvent(Reason.EMPTY_VALUE, "record has no value (and no key to delete)")
    try:
        doc_id = key.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidEvent(Reason.INVALID_DOC_ID, "the tombstone's key is not UTF-8") from None
    return DocumentTombstone(_doc_id(doc_id))


def _doc_id(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidEvent(Reason.INVALID_DOC_ID, "field 'doc_id' must be a non-empty string")
    if len(value) > MAX_ID_CHARS:
        raise InvalidEvent(
            Reason.INVALID_DOC_ID, f"field 'doc_id' is longer than {MAX_ID_CHARS} characters"
        )
    return value


def _text(doc: dict[str, Any]) -> str:
    if "text" not in doc:
        raise InvalidEvent(Reason.MISSING_TEXT, "field 'text' is required")
    value = doc["text"]
    if not isinstance(value, str):
        raise InvalidEvent(Reason.INVALID_TEXT, "field 'text' must be a string")
    return value


def _version(doc: dict[str, Any]) -> str | None:
    """A string, or an integer written as its decimal string (so a consumer compares like
    with like); absent or null: the processor's digest of the text."""
    value = doc.get("version")
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str) or not value or len(value) > MAX_VERSION_CHARS:
        raise InvalidEvent(
            Reason.INVALID_VERSION,
            f"field 'version' must be a non-empty string (at most {MAX_VERSION_CHARS} "
            "characters) or an integer",
        )
    return value
