"""The JSON Schemas in topics/schemas accept the documents they promise and reject others."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

SCHEMA_DIR = Path(__file__).parents[2] / "topics" / "schemas"
SCHEMA_NAMES = ["request", "result", "dead_letter_headers", "document", "document_output"]


@cache
def validator(name: str) -> Any:
    schema = json.loads((SCHEMA_DIR / f"{name}.schema.json").read_text(encoding="utf-8"))
    # format_checker: "format" is only an annotation in 2020-12 unless asserted.
    return Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_schema_is_valid_draft_2020_12(name: str) -> None:
    Draft202012Validator.check_schema(validator(name).schema)


REQUEST = {"id": "r-1", "text": "hello"}
RESULT = {
    "id": "r-1",
    "model": "text-embedding-3-small",
    "embedding": [0.1, -0.2, 3],
    "dimensions": 3,
    "usage": {"tokens": 1},
    "metadata": None,
    "attempts": 1,
    "latency_ms": 12.5,
    "cached": False,
}
DEAD_LETTER_HEADERS = {
    "embedstream.error.class": "BadRequestError",
    "embedstream.error.message": "input too long",
    "embedstream.error.attempts": "3",
    "embedstream.source.topic": "embed.requests.high",
    "embedstream.source.partition": "0",
    "embedstream.source.offset": "42",
    "embedstream.failure.first": "2025-01-01T12:00:00.123Z",
    "embedstream.failure.last": "2025-01-01T12:00:05+00:00",
}


def changed(document: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """A copy of document with changes applied; a value of ... removes the key."""
    result = {**document, **changes}
    return {key: value for key, value in result.items() if value is not ...}


VALID = [
    ("request", REQUEST),
    (
        "request",
        changed(
            REQUEST,
            model="m",
            encoding_format="base64",
            dimensions=256,
            metadata={"tenant": "a", "n": [1]},
            deadline="2025-06-01T10:00:00Z",
        ),
    ),
    ("request", changed(REQUEST, deadline=1_750_000_000_000)),
    ("request", changed(REQUEST, deadline="2025-06-01T10:00:00.5+02:00")),
    ("request", changed(REQUEST, future_field=True)),
    ("result", RESULT),
    ("result", changed(RESULT, embedding="AACAPwAAAEA=", metadata={"tenant": "a"})),
    ("result", changed(RESULT, usage={"tokens": 0}, latency_ms=0)),
    ("result", changed(RESULT, cached=True, usage={"tokens": 0}, attempts=0)),
    ("dead_letter_headers", DEAD_LETTER_HEADERS),
    ("dead_letter_headers", {**DEAD_LETTER_HEADERS, "traceparent": "00-abc-def-01"}),
]

INVALID = [
    ("request", changed(REQUEST, id=...)),
    ("request", changed(REQUEST, id="")),
    ("request", changed(REQUEST, text="")),
    ("request", changed(REQUEST, text=5)),
    ("request", changed(REQUEST, encoding_format="int8")),
    ("request", changed(REQUEST, dimensions=0)),
    ("request", changed(REQUEST, dimensions=1.5)),
    ("request", changed(REQUEST, metadata="tenant=a")),
    ("request", changed(REQUEST, deadline="tomorrow")),
    ("request", changed(REQUEST, deadline="2025-06-01")),
    ("request", changed(REQUEST, deadline=-1)),
    ("request", ["not", "an", "object"]),
    ("result", changed(RESULT, embedding=[])),
    ("result", changed(RESULT, embedding=["0.1"])),
    ("result", changed(RESULT, embedding="not base64!")),
    ("result", changed(RESULT, metadata=...)),
    ("result", changed(RESULT, usage={})),
    ("result", changed(RESULT, attempts=-1)),
    ("result", changed(RESULT, cached="yes")),
    ("result", changed(RESULT, cached=...)),
    ("result", changed(RESULT, latency_ms=-1)),
    ("result", changed(RESULT, dimensions=0)),
    ("dead_letter_headers", changed(DEAD_LETTER_HEADERS, **{"embedstream.error.class": ...})),
    ("dead_letter_headers", changed(DEAD_LETTER_HEADERS, **{"embedstream.error.attempts": "-1"})),
    ("dead_letter_headers", changed(DEAD_LETTER_HEADERS, **{"embedstream.source.offset": 42})),
    ("dead_letter_headers", changed(DEAD_LETTER_HEADERS, **{"embedstream.source.partition": "-1"})),
    (
        "dead_letter_headers",
        changed(DEAD_LETTER_HEADERS, **{"embedstream.failure.last": "1735732805000"}),
    ),
    ("dead_letter_headers", {**DEAD_LETTER_HEADERS, "other": b"bytes"}),
]


@pytest.mark.parametrize(("name", "document"), VALID)
def test_valid_documents_pass(name: str, document: Any) -> None:
    validator(name).validate(document)


@pytest.mark.parametrize(("name", "document"), INVALID)
def test_invalid_documents_fail(name: str, document: Any) -> None:
    assert not validator(name).is_valid(document)


def test_what_the_code_writes_matches_the_schemas() -> None:
    """The schemas document the real formats: encode with the code, validate with the schema."""
    import orjson
    from embedstream.wire import (
        EmbedRequest,
        EmbedResult,
        Failure,
        dead_letter_headers,
        encode_request,
        headers_dict,
    )

    request = EmbedRequest(
        "r1", "text", "m", "base64", 8, {"a": 1}, 1_767_225_600_000, "u", "query", "t"
    )
    validator("request").validate(orjson.loads(encode_request(request)))
    too_long = EmbedRequest("r1", "text", user="u" * 513)
    assert not validator("request").is_valid(orjson.loads(encode_request(too_long)))
    result = EmbedResult("r1", "m", "AAAA", 1, 3, None, 1, 4.5)
    validator("result").validate(orjson.loads(result.encode()))
    cached = EmbedResult("r1", "m", [0.5], 1, 0, None, 0, 1.0, cached=True)
    assert orjson.loads(cached.encode())["cached"] is True
    validator("result").validate(orjson.loads(cached.encode()))
    failure = Failure(
        "InvalidEvent", "invalid_json", "bad", 0, "t", 0, 7, 1_767_225_600_000, 1_767_225_600_001
    )
    validator("dead_letter_headers").validate(headers_dict(dead_letter_headers(failure)))


def test_what_the_code_writes_for_documents_matches_the_schemas() -> None:
    """Document events the parser takes, and every document record the processor writes."""
    import orjson
    from embedstream.wire.document_events import document_from_doc
    from embedstream.wire.result_records import ChunkResult, DocumentComplete, DocumentIncomplete

    event = {"doc_id": "d", "text": "", "version": 3, "metadata": {"k": 1}, "dimensions": 8}
    document_from_doc(event)  # the parser takes it ...
    validator("document").validate(event)  # ... and so does the schema
    records: list[ChunkResult | DocumentComplete | DocumentIncomplete] = [
        ChunkResult("d", "3", 0, 2, (0, 5), [0.5], "m", 1, 2, False, None, 1, 3.0),
        ChunkResult("d", "3", 1, 2, (4, 9), "AAAA", "m", 1, 2, True, {"k": 1}, 0, 3.0, "text"),
        DocumentComplete("d", "3", 2, {"k": 1}),
        DocumentComplete("e", "x", 0, None),
        DocumentIncomplete("d", "3", 2, (1,), None),
    ]
    for record in records:
        validator("document_output").validate(orjson.loads(record.encode()))
    assert not validator("document_output").is_valid({"type": "complete", "doc_id": "d"})
