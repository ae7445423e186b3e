"""`embedstream produce --documents` and `--delete`: publish documents and tombstones.

Every record is keyed by its doc_id. Kafka orders records only within a partition and picks
the partition from the key, so all versions and the delete of one document land on one
partition in the order they were sent; the processor then runs them one at a time in that
order, and a delete never overtakes the version it deletes.

Sources of documents: a file is one document (doc_id = the path as given, text = its content);
a file named ``*.jsonl`` or ``*.ndjson``, or stdin when no file is given, holds JSON lines of
document events (``{"doc_id", "text", "version"?, "metadata"?, ...}``), sent byte for byte as
:func:`~embedstream.tools.produce.parse_line` does, so a bad line is dead-lettered by the
processor with its reason.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Mapping,
    Sequence,
)
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

import orjson

from embedstream.errors import EmbedStreamError
from embedstream.kafka.client.clients import make_producer
from embedstream.kafka.client.topics import configured_topics
from embedstream.kafka.client.user_errors import kafka_user_errors
from embedstream.settings import Settings
from embedstream.tools.produce import Sender, parse_line, read_lines
from embedstream.wire.events import MAX_ID_CHARS

JSON_LINES_SUFFIXES = (".jsonl", ".ndjson")
# Sends in flight before waiting for their acknowledgements (documents can be large).
_MAX_PENDING = 200


class Message(NamedTuple):
    key: bytes | None
    value: bytes | None  # None: a tombstone


def document_from_file(path: Path) -> Message:
    """One document from one file: doc_id is the path as given, text its content."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise EmbedStreamError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise EmbedStreamError(
            f"{path}: not UTF-8 text at byte {exc.start} (a document is text)"
        ) from None
    doc_id = _checked_doc_id(str(path))
    return Message(doc_id.encode(), orjson.dumps({"doc_id": doc_id, "text": text}))


def tombstone(doc_id: str) -> Message:
    """A delete of every version of ``doc_id``: its key and no value."""
    return Message(_checked_doc_id(doc_id).encode(), None)


def _checked_doc_id(doc_id: str) -> str:
    # The processor would dead-letter these; refusing them here says which one at once.
    if not doc_id:
        raise EmbedStreamError("a doc_id must not be empty")
    if len(doc_id) > MAX_ID_CHARS:
        raise EmbedStreamError(f"doc_id {doc_id[:40]!r}... is over {MAX_ID_CHARS} characters")
    return doc_id


async def json_line_messages(stream: BinaryIO) -> AsyncIterator[Message]:
    """The non-blank JSON lines of ``stream``, each keyed by its doc_id (or id)."""
    async for raw in read_lines(stream):
        line = raw.rstrip(b"\r\n")
        if line.strip():
            request = parse_line(line, plain=False)
            yield Message(request.key, request.value)


def check_paths(paths: Sequence[Path]) -> None:
    for path in paths:
        if not path.is_file():
            raise EmbedStreamError(f"cannot read {path}: not a file")


async def document_messages(
    paths: Sequence[Path], stdin: BinaryIO | None = None
) -> AsyncIterator[Message]:
    """Documents from ``paths`` in order (JSON lines files line by line), else from stdin.

    Every file is checked before the first is sent, so a typo in the last name fails before
    anything was published."""
    check_paths(paths)
    if not paths:
        if stdin is None:
            raise EmbedStreamError("no documents: name files, or pipe JSON lines in")
        async for message in json_line_messages(stdin):
            yield message
        return
    for path in paths:
        if path.suffix in JSON_LINES_SUFFIXES:
            with path.open("rb") as fh:
                async for message in json_line_messages(fh):
                    yield message
        else:
            yield document_from_file(path)


async def each(messages: Iterable[Message]) -> AsyncIterator[Message]:
    for message in messages:
        yield message


async def produce_messages(
    settings: Settings,
    messages: AsyncIterable[Message],
    *,
    priority: str,
    producer: Sender | None = None,
) -> int:
    """Publish ``messages`` to the lane's first request topic (the documents topic, when
    ``topic_documents`` names one and the lane is low); the number sent."""
    names = configured_topics(settings)
    topic = names.requests_high if priority == "high" else names.documents or names.requests_low
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
            async for message in messages:
                pending.append(await sender.send(topic, message.value, key=message.key))
                sent += 1
                if len(pending) >= _MAX_PENDING:
                    await asyncio.gather(*pending)
                    pending.clear()
            await asyncio.gather(*pending)
        finally:
            await sender.stop()
    return sent


CheckKafka = Callable[[Settings, Mapping[str, str]], Awaitable[None]]


async def produce_from_args(ns: argparse.Namespace, settings: Settings, check: CheckKafka) -> int:
    """``produce --documents [FILE ...]`` or ``produce --delete DOC_ID ...`` (parsed ``ns``);
    ``check`` fails in one line when the broker or the lane's topic is not there."""
    from embedstream.kafka.client.topics import topic_settings

    role = "requests_high" if ns.priority == "high" else "requests_low"
    if ns.priority != "high" and settings.topic_documents:
        role = "documents"
    if ns.delete is not None:
        messages: AsyncIterable[Message] = each([tombstone(doc_id) for doc_id in ns.delete])
        what = "tombstones"
    else:
        check_paths(ns.files)  # local mistakes first, without waiting for a broker
        messages = document_messages(ns.files, sys.stdin.buffer)
        what = "documents"
    # The lane's first topic, where produce writes (a lane may list several).
    await check(settings, dict(list(topic_settings(settings, [role]).items())[:1]))
    sent = await produce_messages(settings, messages, priority=ns.priority)
    print(f"sent {sent} {what}", file=sys.stderr)
    return 0
