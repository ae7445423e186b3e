"""`embedstream produce`: publish request events from a file or stdin as they are read.

Documents (files, JSON lines of document events) and tombstones are published by
:mod:`embedstream.tools.produce_documents` through the same :class:`Sender`.
"""

from __future__ import annotations

import asyncio
import io
import os
import stat
import threading
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Awaitable
from typing import Any, BinaryIO, NamedTuple, Protocol

import orjson

from embedstream.errors import EmbedStreamError, InvalidEvent
from embedstream.kafka.client.clients import make_producer
from embedstream.kafka.client.topics import configured_topics
from embedstream.kafka.client.user_errors import kafka_user_errors
from embedstream.settings import Settings
from embedstream.tools.produce_formats import LineFraming, line_framing
from embedstream.tools.progress import ProduceProgress


class Sender(Protocol):
    """What produce needs of a Kafka producer (aiokafka's, or a fake in tests)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def send(
        self, topic: str, value: bytes | None, key: bytes | None = None
    ) -> Awaitable[Any]: ...


class Request(NamedTuple):
    value: bytes
    key: bytes | None
    generated_id: str | None = None  # set for plain lines
    text: str | None = None  # the text of a plain line, as sent


def parse_line(line: bytes, *, plain: bool) -> Request:
    """One input line (without its line break) as the request to send.

    JSON lines are sent byte for byte (even if invalid, so the processor dead-letters them
    with a reason), keyed by their ``id``, or for a document event by its ``doc_id`` (all
    versions of one document then land on one partition, in order); plain lines become
    requests with a new id (bytes that are not UTF-8 read as U+FFFD).
    """
    if plain:
        request_id = str(uuid.uuid4())
        text = line.decode("utf-8", "replace")
        value = orjson.dumps({"id": request_id, "text": text})
        return Request(value, request_id.encode(), request_id, text)
    try:
        doc = orjson.loads(line)
    except orjson.JSONDecodeError:
        return Request(line, None)
    key = doc.get("id", doc.get("doc_id")) if isinstance(doc, dict) else None
    return Request(line, key.encode() if isinstance(key, str) else None)


def framed_line(framing: LineFraming, line: bytes, number: int) -> Request:
    """One JSON line as a record of the framing's schema; a line that is not one stops produce
    with its number (a record that does not fit the schema has no bytes in its format)."""
    try:
        doc = orjson.loads(line)
        if not isinstance(doc, dict):
            raise ValueError(f"expected a JSON object, got {type(doc).__name__}")
        return Request(framing.value(doc), framing.key(doc))
    except (ValueError, TypeError, KeyError, InvalidEvent) as exc:
        message = exc.message if isinstance(exc, InvalidEvent) else str(exc)
        raise EmbedStreamError(f"line {number}: not a record of the schema: {message}") from None


def input_size(stream: BinaryIO) -> int | None:
    """Bytes left in ``stream`` when it is a regular file (a bar can fill by them), else None."""
    try:
        info = os.fstat(stream.fileno())
    except (OSError, ValueError, io.UnsupportedOperation):
        return None
    if not stat.S_ISREG(info.st_mode):
        return None
    try:
        return max(info.st_size - stream.tell(), 0)
    except OSError:
        return info.st_size


# Sends in flight before waiting for their acknowledgements; bounds memory, not throughput.
_MAX_PENDING = 1000
# Bytes read per chunk: a read returns what is there (a pipe's lines as they come), at most this.
_READ_CHUNK = 64 * 1024


async def read_lines(stream: BinaryIO) -> AsyncIterator[bytes]:
    """The lines of ``stream`` (line breaks kept) as they arrive, a few chunks read ahead.

    A daemon thread does the blocking reads: on the event loop a pipe waiting for input would
    stall the producer's deliveries, and on asyncio's executor a Ctrl-C would wait for that
    read to return. A read returns what is there (a pipe's lines as they come), at most
    :data:`_READ_CHUNK` bytes; a bounded queue keeps memory bounded.
    """
    loop = asyncio.get_running_loop()
    chunks: asyncio.Queue[bytes | BaseException] = asyncio.Queue(maxsize=4)
    read = getattr(stream, "read1", stream.read)

    def pump() -> None:
        while True:
            try:
                chunk: bytes | BaseException = read(_READ_CHUNK)
            except Exception as exc:  # handed to the reader, raised there
                chunk = exc
            try:
                asyncio.run_coroutine_threadsafe(chunks.put(chunk), loop).result()
            except RuntimeError:  # the loop is gone: nobody reads any more
                return
            if not isinstance(chunk, bytes) or not chunk:
                return

    threading.Thread(target=pump, name="produce-input", daemon=True).start()
    tail = b""
    while True:
        chunk = await chunks.get()
        if isinstance(chunk, BaseException):
            raise chunk
        if not chunk:
            break
        lines = (tail + chunk).split(b"\n")
        tail = lines.pop()
        for line in lines:
            yield line + b"\n"
    if tail:
        yield tail


async def produce_lines(
    settings: Settings,
    lines: AsyncIterable[bytes],
    *,
    priority: str,
    plain: bool,
    progress: ProduceProgress | None = None,
    ids_out: BinaryIO | None = None,
    producer: Sender | None = None,
    record_format: str = "json",
    schema: str | None = None,
) -> int:
    """Publish every non-blank line of ``lines``, pulling them one at a time (see
    :func:`read_lines`: a file or a pipe is never read whole). With ``plain``, ``ids_out``
    receives ``id<TAB>text`` per request. A ``record_format`` other than json sends each line
    as a record of ``schema`` (its text) in the registry wire format."""
    names = configured_topics(settings)  # a lane of several topics: its first one
    topic = names.requests_high if priority == "high" else names.requests_low
    framing = None
    if record_format != "json":
        assert schema is not None, "a registry format needs its schema"
        framing = await line_framing(settings, record_format, schema, topic)
    number = 0
    sender: Sender = producer if producer is not None else make_producer(settings)
    with kafka_user_errors(settings):
        try:
            await sender.start()
        except BaseException:
            await sender.stop()  # a failed start leaves a client to close
            raise
        sent = 0
        try:
            pending: list[Awaitable[Any]] = []
            async for raw_line in lines:
                line = raw_line.rstrip(b"\r\n")
                number += 1
                if progress:
                    progress.advance(0, len(raw_line))
                if not line.strip():
                    continue
                if framing is None:
                    request = parse_line(line, plain=plain)
                else:
                    request = framed_line(framing, line, number)
                pending.append(await sender.send(topic, request.value, key=request.key))
                if ids_out is not None and request.generated_id is not None:
                    ids_out.write(f"{request.generated_id}\t{request.text}\n".encode())
                sent += 1
                if progress:
                    progress.advance(1, 0)
                if len(pending) >= _MAX_PENDING:
                    await asyncio.gather(*pending)
                    pending.clear()
            await asyncio.gather(*pending)
        finally:
            await sender.stop()
            if progress:
                progress.finish()
            if ids_out is not None:
                ids_out.flush()
    return sent
