"""A job's file: one ``/v1/embeddings`` request a line, written from the job's records.

Each input a record asks for (a request's text, a document version's chunks) has a custom id
made of its record's offset (and chunk number): ``1042`` or ``1042.3``. Identical inputs (same
text and everything else that makes the vector) are asked once, by the first of them in offset
order, and the answer serves all: the same rule when the file is written and when its outputs
are read, from the records alone. Inputs the embedding cache answers are not asked at all.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import BinaryIO

import orjson

from embedstream.core.cachekeys import cache_key
from embedstream.core.lanes import BucketKey
from embedstream.engine.batch_api import ENDPOINT
from embedstream.kafka.client.protocols import Record
from embedstream.kafka.outputs.document_runs import DocumentStart
from embedstream.kafka.outputs.work import WorkItem
from embedstream.wire import Failure
from embedstream.wire.document_events import DocumentTombstone

LINE_KEY_SPACE = "embedstream-batch-line"

Verdict = WorkItem | DocumentStart | DocumentTombstone | Failure


def custom_id_of(offset: int, seq: int | None = None) -> str:
    return str(offset) if seq is None else f"{offset}.{seq}"


def line_key(key: BucketKey, text: str) -> str:
    """What makes an input's vector (not its lane, nor its encoding): equal keys, one line."""
    return cache_key(LINE_KEY_SPACE, key, text)


@dataclass(frozen=True, slots=True)
class Wanted:
    """One input a record asks for."""

    custom_id: str
    key: BucketKey
    text: str
    tokens: int


def wanted_of(verdict: Verdict, offset: int) -> list[Wanted]:
    """The inputs of a record, as admitted."""
    if isinstance(verdict, WorkItem):
        return [Wanted(custom_id_of(offset), verdict.key, verdict.text, verdict.tokens)]
    if isinstance(verdict, DocumentStart):
        admitted, event = verdict.admitted, verdict.admitted.event
        key = BucketKey(
            verdict.priority, admitted.model, admitted.encoding_format, event.dimensions,
            event.user, event.input_type, event.task,
        )  # fmt: skip
        return [Wanted(custom_id_of(offset, c.seq), key, c.text, c.tokens) for c in admitted.chunks]
    return []


class LineBodies:
    """The request a line sends: the sync call's body for one input."""

    def __init__(
        self, wire_format: str, extra_body: Mapping[str, object], deployment: str | None = None
    ) -> None:
        """``deployment``: Azure's batch deployment, named as every line's model."""
        self._wire_format = wire_format
        self._extra_body = dict(extra_body)
        self._deployment = deployment

    def line(self, custom_id: str, key: BucketKey, text: str) -> bytes:
        body: dict[str, object] = {"model": self._deployment or key.model,
                                   "encoding_format": self._wire_format}  # fmt: skip
        if key.dimensions is not None:
            body["dimensions"] = key.dimensions
        body.update(self._extra_body)
        for name in ("user", "input_type", "task"):
            value = getattr(key, name)
            if value is not None:
                body[name] = value
        body["input"] = text
        line = {"custom_id": custom_id, "method": "POST", "url": ENDPOINT, "body": body}
        return orjson.dumps(line) + b"\n"


@dataclass(slots=True)
class FileFacts:
    """What a job's file came to."""

    records: int = 0  # read again (of the job's offsets)
    lines: int = 0
    inputs: int = 0  # asked for by the records
    cached: int = 0  # of them answered by the cache
    tokens: int = 0  # estimated, of the lines
    firsts: dict[str, str] = field(default_factory=dict)  # line key -> custom id


async def write_job_file(
    slices: AsyncIterator[list[Record]],
    admit: Callable[[Record], Awaitable[Verdict]],
    bodies: LineBodies,
    cached: Callable[[Sequence[Wanted]], Awaitable[set[str]]],
    out: BinaryIO,
) -> FileFacts:
    """Write the lines of a job's records to ``out``. ``cached``: the custom ids of inputs the
    embedding cache answers."""
    facts = FileFacts()
    async for records in slices:
        wanted: list[Wanted] = []
        for record in records:
            facts.records += 1
            wanted += wanted_of(await admit(record), record.offset)
        facts.inputs += len(wanted)
        firsts = []
        for want in wanted:
            line = line_key(want.key, want.text)
            if line not in facts.firsts:
                facts.firsts[line] = want.custom_id
                firsts.append(want)
        answered = await cached(firsts) if firsts else set()
        for want in firsts:
            if want.custom_id in answered:
                facts.cached += 1
                continue
            out.write(bodies.line(want.custom_id, want.key, want.text))
            facts.lines += 1
            facts.tokens += want.tokens
    return facts
