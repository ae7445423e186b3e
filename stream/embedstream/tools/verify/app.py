"""`embedstream verify`: read the request, result and dead-letter topics once and report.

Run it once the processors have drained their input (lag 0, retry topic empty): requests still
in flight or waiting in the retry topic are reported as lost. Exit status 0 when the report is
ok, 1 when it is not; connection problems raise :class:`~embedstream.kafka.client.reader.ReadError`.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

import orjson

from embedstream.core.document_versions import default_version
from embedstream.errors import InvalidEvent
from embedstream.kafka.client.admin import require_topics
from embedstream.kafka.client.clients import KafkaTarget, check_broker, connection_for
from embedstream.kafka.client.reader import TopicRecord, read_topics
from embedstream.kafka.client.topics import (
    TopicNames,
    configured_topics,
    topic_names,
    topic_settings,
)
from embedstream.settings.flags import CONNECTION_SETTINGS, add_settings_flags, settings_from_args
from embedstream.tools.verify.document_checks import (
    ChunkLetter,
    DocumentReport,
    PublishedEvent,
    check_documents,
    chunk_letter,
)
from embedstream.tools.verify.report import (
    DeadLetter,
    ExpectedVector,
    Location,
    RequestInfo,
    ResultRecord,
    VerificationReport,
    build_report,
    source_location,
)
from embedstream.wire import TRUNCATED_FROM, EmbedResult, decode_output, headers_dict
from embedstream.wire.result_records import DocumentRecord


@dataclass
class Readback:
    """What the request, result and dead-letter topics held, as :func:`build_report` takes it."""

    requests: dict[str, RequestInfo] = field(default_factory=dict)  # first occurrence per id
    request_counts: Counter[str] = field(default_factory=Counter)
    unparseable_requests: list[Location] = field(default_factory=list)
    results: list[ResultRecord] = field(default_factory=list)
    unparseable_results: int = 0
    dead_letters: list[DeadLetter] = field(default_factory=list)
    # Documents: events and tombstones as published, their records as written (each in its
    # partition's order), the chunks dead-lettered for good.
    documents: list[PublishedEvent] = field(default_factory=list)
    document_records: list[DocumentRecord] = field(default_factory=list)
    chunk_letters: list[ChunkLetter] = field(default_factory=list)

    def document_report(self) -> DocumentReport | None:
        """None when no document went in or came out: nothing of documents to report."""
        if not (self.documents or self.document_records or self.chunk_letters):
            return None
        located = (source_location(letter.headers) for letter in self.dead_letters)
        return check_documents(
            self.documents,
            self.document_records,
            chunk_letters=self.chunk_letters,
            dead_lettered=[location for location in located if location is not None],
        )

    def report(
        self, *, check_vectors: bool, default_model: str, max_duplicates: int = 0
    ) -> VerificationReport:
        """With ``check_vectors`` every result vector must be the simulator's vector for its
        request's text (model: the request's, else ``default_model``)."""
        expected: ExpectedVector | None = None
        if check_vectors:
            from embedsim.model import expected_vector

            expected = expected_vector
        return build_report(
            self.requests,
            self.results,
            self.dead_letters,
            expected=expected,
            default_model=default_model,
            max_duplicates=max_duplicates,
            unparseable_requests=self.unparseable_requests,
            unparseable_results=self.unparseable_results,
            repeated_requests={rid: n for rid, n in self.request_counts.items() if n > 1},
            documents=self.document_report(),
        )


async def read_back(
    kafka: KafkaTarget, topics: TopicNames | str, *, timeout_s: float = 120
) -> Readback:
    """Read every request topic, the results and the dead letters up to their current ends.
    ``topics`` are the deployment's topics, or a prefix for the default names."""
    names = topic_names(topics) if isinstance(topics, str) else topics
    request_topics = set(names.requests)
    found = Readback()
    everything = [*names.requests, names.results, names.dead_letters]
    async with aclosing(read_topics(kafka, everything, timeout_s=timeout_s)) as records:
        async for record in records:
            if record.topic in request_topics and (event := parse_document(record)):
                found.documents.append(event)
            elif record.topic in request_topics:
                rid, info = parse_request(record)
                if rid is None:
                    found.unparseable_requests.append(
                        Location(record.topic, record.partition, record.offset)
                    )
                else:
                    found.request_counts[rid] += 1
                    found.requests.setdefault(rid, info)  # the first occurrence is checked
            elif record.topic == names.results and is_document_output(record):
                try:
                    output = decode_output(record.key, record.value)
                except InvalidEvent:
                    found.unparseable_results += 1
                else:
                    assert not isinstance(output, EmbedResult)  # it has a "type"
                    found.document_records.append(output)
            elif record.topic == names.results:
                result = parse_result(record)
                if result is None:
                    found.unparseable_results += 1
                else:
                    found.results.append(result)
            elif letter := chunk_letter(headers_dict(record.headers)):
                found.chunk_letters.append(letter)
            else:
                found.dead_letters.append(
                    DeadLetter(_request_id(_json(record.value)), headers_dict(record.headers))
                )
    return found


async def verify(
    kafka: KafkaTarget,
    topics: TopicNames | str,
    *,
    check_vectors: bool,
    default_model: str,
    max_duplicates: int = 0,
    timeout_s: float = 120,
) -> VerificationReport:
    """Read the topics once (see :func:`read_back`) and compare requests with outcomes."""
    found = await read_back(kafka, topics, timeout_s=timeout_s)
    return found.report(
        check_vectors=check_vectors, default_model=default_model, max_duplicates=max_duplicates
    )


def parse_request(record: TopicRecord) -> tuple[str | None, RequestInfo]:
    """A request record's id (None when it has no usable one) and what it asked for.

    Lenient on purpose: anything with a string id is matched, even if the processor rejects it
    (it will then be dead-lettered under that id)."""
    doc = _json(record.value)
    rid = _request_id(doc)
    fields = doc if isinstance(doc, dict) else {}
    text = fields.get("text")
    model = fields.get("model")
    dimensions = fields.get("dimensions")
    info = RequestInfo(
        text=text if isinstance(text, str) else None,
        model=model if isinstance(model, str) and model else None,
        dimensions=(
            dimensions
            if isinstance(dimensions, int) and not isinstance(dimensions, bool) and dimensions > 0
            else None
        ),
        topic=record.topic,
    )
    return rid, info


def parse_document(record: TopicRecord) -> PublishedEvent | None:
    """A document event or tombstone on a request topic (None: a plain request, or junk).

    Lenient like :func:`parse_request`: a document the processor will reject is still a
    published version, which must then end in a dead letter."""
    location = (record.topic, record.partition, record.offset)
    if record.value is None:
        if not record.key:
            return None
        return PublishedEvent(record.key.decode("utf-8", "replace"), None, location)
    doc = _json(record.value)
    if not isinstance(doc, dict) or "id" in doc or not isinstance(doc.get("doc_id"), str):
        return None
    version = doc.get("version")
    if version is None and isinstance(doc.get("text"), str):
        version = default_version(doc["text"])
    return PublishedEvent(doc["doc_id"], str(version), location)


def is_document_output(record: TopicRecord) -> bool:
    """A results record of a document: a tombstone, or a value with a ``type``."""
    if record.value is None:
        return True
    doc = _json(record.value)
    return isinstance(doc, dict) and "type" in doc


def parse_result(record: TopicRecord) -> ResultRecord | None:
    """A result record, identified by its ``id`` field or failing that its key."""
    doc = _json(record.value)
    if not isinstance(doc, dict):
        return None
    rid = _request_id(doc)
    if rid is None and record.key:
        rid = record.key.decode("utf-8", "replace")
    if rid is None:
        return None
    truncated = any(name == TRUNCATED_FROM for name, _ in record.headers)
    return ResultRecord(rid, doc, truncated)


def _json(value: bytes | None) -> Any:
    if value is None:
        return None
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError:
        return None


def _request_id(doc: Any) -> str | None:
    if isinstance(doc, dict):
        value = doc.get("id")
        if isinstance(value, str) and value:
            return value
    return None


# --------------------------------------------------------------------------- command line


# --model names the model of requests naming none, for --check-vectors.
VERIFY_SETTINGS = (*CONNECTION_SETTINGS, "model")


def add_cli_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``embedstream verify``; pair with :func:`main_from_args`."""
    add_settings_flags(parser, VERIFY_SETTINGS)
    add = parser.add_argument
    add(
        "--check-vectors",
        action="store_true",
        help="require every vector to be the simulator's vector for its text",
    )
    add(
        "--max-duplicates",
        type=_non_negative_int,
        default=0,
        help="duplicate result records tolerated (at-least-once may redeliver)",
    )
    add("--timeout", type=float, default=120.0, help="give up reading after S seconds")
    add("--json", action="store_true", help="print the report as one JSON object")


async def main_from_args(ns: argparse.Namespace) -> int:
    """Run the check the parsed options describe; print the report; 0 if ok, else 1."""
    settings = settings_from_args(ns, VERIFY_SETTINGS)
    names = configured_topics(settings)
    await check_broker(settings)
    roles = ("requests_high", "requests_low", "results", "dead_letters")
    await require_topics(connection_for(settings), topic_settings(settings, roles), wait_s=0)
    report = await verify(
        connection_for(settings),
        names,
        check_vectors=ns.check_vectors,
        default_model=settings.model,
        max_duplicates=ns.max_duplicates,
        timeout_s=ns.timeout,
    )
    if ns.json:
        sys.stdout.write(orjson.dumps(report.to_json()).decode() + "\n")
    else:
        print(report.summary())
    sys.stdout.flush()
    return 0 if report.ok else 1


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value
