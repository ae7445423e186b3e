"""`embedstream produce` and `embedstream consume`: publish requests, read outcomes."""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterable
from typing import IO, Any

import orjson

from embedstream.config import Settings
from embedstream.kafka.admin import topic_names
from embedstream.kafka.clients import connection_for, make_producer, make_reader, partitions_of
from embedstream.wire import headers_dict


def parse_line(line: str, *, plain: bool) -> tuple[bytes, bytes | None]:
    """One input line as (value, key). JSON lines are sent as-is (even if invalid, so the
    processor dead-letters them with a reason); plain lines become requests with a new id."""
    if plain:
        request_id = str(uuid.uuid4())
        return orjson.dumps({"id": request_id, "text": line}), request_id.encode()
    try:
        doc = orjson.loads(line)
    except orjson.JSONDecodeError:
        return line.encode("utf-8", "surrogateescape"), None
    key = doc.get("id") if isinstance(doc, dict) else None
    return line.encode("utf-8"), key.encode() if isinstance(key, str) else None


class Progress:
    """A one-line progress bar on stderr, drawn at most 10 times a second."""

    def __init__(self, stream: IO[str], total: int | None) -> None:
        self._stream = stream
        self._total = total
        self._last = 0.0
        self._started = time.monotonic()
        self.done = 0

    def advance(self, n: int = 1, *, force: bool = False) -> None:
        self.done += n
        now = time.monotonic()
        if not force and now - self._last < 0.1:
            return
        self._last = now
        rate = self.done / max(now - self._started, 1e-9)
        if self._total:
            filled = int(30 * self.done / self._total)
            bar = "#" * filled + "-" * (30 - filled)
            line = f"\r[{bar}] {self.done}/{self._total} ({rate:,.0f}/s)"
        else:
            line = f"\r{self.done} sent ({rate:,.0f}/s)"
        self._stream.write(line)
        self._stream.flush()

    def finish(self) -> None:
        self.advance(0, force=True)
        self._stream.write("\n")


async def produce_lines(
    settings: Settings,
    lines: Iterable[str],
    *,
    priority: str,
    plain: bool,
    progress: Progress | None = None,
) -> int:
    names = topic_names(settings.topic_prefix)
    topic = names.requests_high if priority == "high" else names.requests_low
    producer = make_producer(settings)
    await producer.start()
    sent = 0
    try:
        pending = []
        for raw_line in lines:
            line = raw_line.rstrip("\n")
            if not line.strip():
                continue
            value, key = parse_line(line, plain=plain)
            pending.append(await producer.send(topic, value, key=key))
            sent += 1
            if len(pending) >= 1000:
                await asyncio.gather(*pending)
                pending.clear()
            if progress:
                progress.advance()
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    if progress:
        progress.finish()
    return sent


async def consume_records(
    settings: Settings,
    *,
    dead_letters: bool,
    from_beginning: bool,
    limit: int | None,
    idle_timeout_s: float | None,
) -> AsyncIterator[dict[str, Any]]:
    """Outcomes as dicts: results parsed, dead letters with their headers and original value."""
    names = topic_names(settings.topic_prefix)
    topic = names.dead_letters if dead_letters else names.results
    consumer = make_reader(
        connection_for(settings),
        client_id=f"{settings.client_id}-consume",
        fetch_max_wait_ms=settings.fetch_max_wait_ms,
    )
    await consumer.start()
    try:
        tps = await partitions_of(consumer, topic)
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
                    yield _outcome(record, dead_letters)
                    count += 1
                    if limit is not None and count >= limit:
                        return
    finally:
        await consumer.stop()


def _outcome(record: Any, dead_letter: bool) -> dict[str, Any]:
    if not dead_letter:
        doc: dict[str, Any] = orjson.loads(record.value)
        return doc
    return {
        "key": record.key.decode("utf-8", "replace") if record.key else None,
        "value": (record.value or b"").decode("utf-8", "replace"),
        "headers": headers_dict(record.headers),
        "partition": record.partition,
        "offset": record.offset,
    }


def write_json_line(doc: dict[str, Any], out: IO[bytes] = sys.stdout.buffer) -> None:
    out.write(orjson.dumps(doc) + b"\n")
    out.flush()
