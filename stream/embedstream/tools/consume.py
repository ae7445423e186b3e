"""`embedstream consume`: read results (or dead letters) and print them as JSON lines.

Results of documents print as they are on the topic (``"type"``: chunk, complete, incomplete);
a tombstone, which has no value, prints as ``{"type": "deleted", "doc_id": <its key>}``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import AsyncIterator
from typing import IO, Any

import orjson

from embedstream.errors import ConfigError
from embedstream.kafka.client.clients import connection_for, make_reader, partitions_of
from embedstream.kafka.client.topics import configured_topics
from embedstream.kafka.client.user_errors import kafka_user_errors
from embedstream.settings import Settings
from embedstream.wire import DOC_ID, headers_dict


async def consume_records(
    settings: Settings,
    *,
    dead_letters: bool,
    from_beginning: bool,
    limit: int | None,
    idle_timeout_s: float | None,
    documents_only: bool = False,
) -> AsyncIterator[dict[str, Any]]:
    """Outcomes as dicts: results parsed, dead letters with their headers and original value.
    With ``documents_only``, only documents' records (their results, or their chunks' dead
    letters); ``limit`` counts the records printed."""
    names = configured_topics(settings)
    topic = names.dead_letters if dead_letters else names.results
    naming = "topic_dlq" if dead_letters else "topic_results"
    if not getattr(settings, naming):
        naming = "topic_prefix"  # the default name was used: the prefix is what to check
    consumer = make_reader(
        connection_for(settings),
        client_id=f"{settings.client_id}-consume",
        fetch_max_wait_ms=settings.fetch_max_wait_ms,
    )
    with kafka_user_errors(settings):
        try:
            await consumer.start()
        except BaseException:
            await consumer.stop()  # a failed start leaves a client to close
            raise
    try:
        with kafka_user_errors(settings):
            tps = await partitions_of(consumer, topic)
        if not tps:
            raise ConfigError(
                naming,
                f"topic {topic} does not exist at {settings.bootstrap_servers}; "
                "create the topics with `embedstream topics create` (or check the "
                f"{'prefix' if naming == 'topic_prefix' else 'name'})",
            )
        consumer.assign(tps)
        if from_beginning:
            await consumer.seek_to_beginning(*tps)
        else:
            await consumer.seek_to_end(*tps)
        count = 0
        last_data = time.monotonic()
        while limit is None or count < limit:
            batch = await consumer.getmany(timeout_ms=200)
            if not batch:
                if idle_timeout_s is not None and time.monotonic() - last_data > idle_timeout_s:
                    return
                continue
            last_data = time.monotonic()
            for records in batch.values():
                for record in records:
                    if documents_only and not is_document_record(record, dead_letters):
                        continue
                    yield outcome(record, dead_letters)
                    count += 1
                    if limit is not None and count >= limit:
                        return
    finally:
        await consumer.stop()


DELETED = "deleted"


def outcome(record: Any, dead_letter: bool) -> dict[str, Any]:
    """One record as printed. A result that is not a JSON object (nothing the processor
    writes) prints as its key and raw value rather than stopping the command."""
    if not dead_letter:
        key = record.key.decode("utf-8", "replace") if record.key else None
        if record.value is None:
            return {"type": DELETED, "doc_id": key}
        try:
            doc = orjson.loads(record.value)
        except orjson.JSONDecodeError:
            doc = None
        if not isinstance(doc, dict):
            return {"key": key, "value": record.value.decode("utf-8", "replace")}
        return doc
    return {
        "key": record.key.decode("utf-8", "replace") if record.key else None,
        "value": (record.value or b"").decode("utf-8", "replace"),
        "headers": headers_dict(record.headers),
        "partition": record.partition,
        "offset": record.offset,
    }


def is_document_record(record: Any, dead_letter: bool) -> bool:
    """A document's output: a tombstone or a typed result; a dead letter naming a doc_id."""
    if dead_letter:
        return any(name == DOC_ID for name, _ in record.headers or ())
    if record.value is None:
        return True
    try:
        doc = orjson.loads(record.value)
    except orjson.JSONDecodeError:
        return False
    return isinstance(doc, dict) and "type" in doc and "doc_id" in doc


def write_json_line(doc: dict[str, Any], out: IO[bytes] = sys.stdout.buffer) -> None:
    out.write(orjson.dumps(doc) + b"\n")
    out.flush()
