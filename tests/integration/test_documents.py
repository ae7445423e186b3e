"""Documents through a real processor on Apache Kafka: versions that grow and shrink, a delete,
a poison chunk among good ones, plain requests on the same topic; then `verify` and `consume`
read the real topics back."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
import pytest
from embedsim import SimulatorConfig, SimulatorServer
from embedsim.model import expected_vector
from embedstream.kafka.client.admin import topic_names
from embedstream.tools.consume import consume_records
from embedstream.tools.produce_documents import Message, each, produce_messages, tombstone
from embedstream.tools.verify.app import verify
from embedstream.wire import DOC_CHUNK_SEQ, DOC_ID, decode_output, headers_dict
from embedstream.wire.result_records import (
    ChunkResult,
    DocumentComplete,
    DocumentIncomplete,
)

from tests.integration.helpers import create_all_topics, read_topic, running_service, settings_for

pytestmark = pytest.mark.integration

# Small chunks: each paragraph below (about 25 estimated tokens) is one chunk.
SMALL: dict[str, Any] = {"chunk_max_tokens": 40, "chunk_overlap_tokens": 0, "chunk_min_tokens": 0}


def paragraphs(*words: str) -> str:
    return "\n\n".join(f"{w:_<7} " * 10 for w in words)


def document(doc_id: str, text: str, **fields: Any) -> Message:
    return Message(doc_id.encode(), orjson.dumps({"doc_id": doc_id, "text": text, **fields}))


def plain(rid: str) -> Message:
    return Message(rid.encode(), orjson.dumps({"id": rid, "text": f"plain request {rid}"}))


def runs(outputs: list[Any]) -> list[tuple[str, str | None, list[int], int | None]]:
    """Per final record or tombstone: (kind, version, the chunk seqs before it sorted,
    chunk_count). Chunks of one version may finish in any order (batches run concurrently)."""
    shown: list[tuple[str, str | None, list[int], int | None]] = []
    seqs: list[int] = []
    for o in outputs:
        if isinstance(o, ChunkResult):
            seqs.append(o.chunk_seq)
            continue
        if isinstance(o, DocumentComplete | DocumentIncomplete):
            shown.append((type(o).__name__, o.version, sorted(seqs), o.chunk_count))
        else:
            shown.append((type(o).__name__, None, sorted(seqs), None))
        seqs = []
    return shown


async def test_documents_end_as_the_contract_says(bootstrap: str, unique_prefix: str) -> None:
    config = SimulatorConfig(base_ms=2, reject_texts_containing="POISON")
    async with SimulatorServer(config) as simulator:
        settings = settings_for(bootstrap, unique_prefix, simulator.url, **SMALL)
        names = topic_names(unique_prefix)
        await create_all_topics(settings)
        messages = [
            document("grow", paragraphs("a", "b"), version=1),
            plain("r0"),
            document("shrink", paragraphs("c", "d", "e", "f"), version=1),
            document("gone", paragraphs("g", "h")),  # no version: the digest of the text
            plain("r1"),
            document("poison", paragraphs("good", "POISON", "fine")),
            document("grow", paragraphs("a", "b", "i", "j"), version=2),
            document("shrink", paragraphs("c"), version=2),
            tombstone("gone"),
            plain("r2"),
        ]
        sent = await produce_messages(settings, each(messages), priority="low")
        assert sent == len(messages)
        async with running_service(settings):
            records = await _until(bootstrap, names.results, finals=6, deletes=1, plain=3)
            dead = await _until_count(bootstrap, names.dead_letters, 1)

    by_doc: dict[str, list[Any]] = {}
    plain_ids = []
    for record in records:
        output = decode_output(record.key, record.value)
        doc_id = getattr(output, "doc_id", None)
        if doc_id is None:
            plain_ids.append(output.id)  # type: ignore[union-attr]
        else:
            by_doc.setdefault(doc_id, []).append(output)
    assert sorted(plain_ids) == ["r0", "r1", "r2"]
    # Grows from 2 to 4 chunks; each version's chunks whole before its complete.
    assert runs(by_doc["grow"]) == [
        ("DocumentComplete", "1", [0, 1], 2), ("DocumentComplete", "2", [0, 1, 2, 3], 4),
    ]  # fmt: skip
    # Shrinks from 4 to 1: the final record's chunk_count tells a store to drop chunks 1-3.
    assert runs(by_doc["shrink"]) == [
        ("DocumentComplete", "1", [0, 1, 2, 3], 4), ("DocumentComplete", "2", [0], 1),
    ]  # fmt: skip
    # The delete comes after the version before it, as a tombstone (a null value).
    [(_, digest, _, _), deleted] = runs(by_doc["gone"])
    assert deleted == ("DocumentDeleted", None, [], None) and digest and len(digest) == 16
    assert [r.value for r in records if r.key == b"gone"][-1] is None
    # The poison chunk is dead-lettered by name; its siblings still get results.
    [(kind, _, seqs, count)] = runs(by_doc["poison"])
    assert (kind, seqs, count, by_doc["poison"][-1].missing) == (
        "DocumentIncomplete",
        [0, 2],
        3,
        (1,),
    )
    [letter] = dead
    headers = headers_dict(letter.headers)
    assert (headers[DOC_ID], headers[DOC_CHUNK_SEQ]) == ("poison", "1")
    assert headers["embedstream.error.reason"] == "rejected"
    for o in by_doc["grow"][:2]:  # each chunk's vector is its own span's, from the provider
        start, end = o.span
        text = paragraphs("a", "b")[start:end]
        assert o.embedding == pytest.approx(
            expected_vector(settings.model, text, len(o.embedding)), abs=1e-6
        )

    report = await verify(
        bootstrap, unique_prefix, check_vectors=False, default_model=settings.model, timeout_s=60
    )
    assert report.ok, report.summary()
    assert report.documents is not None
    assert (report.documents.versions, report.documents.tombstones) == (6, 1)
    assert (report.documents.complete, report.documents.incomplete) == (5, 1)
    assert report.lost == () and report.requests == 3

    printed = [
        doc
        async for doc in consume_records(
            settings, dead_letters=False, from_beginning=True, limit=None,
            idle_timeout_s=1.0, documents_only=True,
        )
    ]  # fmt: skip
    assert {"type": "deleted", "doc_id": "gone"} in printed
    assert all("type" in doc for doc in printed)  # no plain result among them
    assert len(printed) == sum(len(outputs) for outputs in by_doc.values())


async def _until(
    bootstrap: str, topic: str, *, finals: int, deletes: int, plain: int, timeout_s: float = 60
) -> list[Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        records = await read_topic(bootstrap, topic, idle_s=0.3)
        values = [orjson.loads(r.value) if r.value else None for r in records]
        got_finals = sum(1 for v in values if v and v.get("type") in ("complete", "incomplete"))
        got_deletes = values.count(None)
        got_plain = sum(1 for v in values if v and "type" not in v)
        if (got_finals, got_deletes, got_plain) >= (finals, deletes, plain) and (
            got_finals == finals and got_plain == plain
        ):
            return records
        assert time.monotonic() < deadline, (got_finals, got_deletes, got_plain)
        await asyncio.sleep(0.2)


async def _until_count(bootstrap: str, topic: str, n: int, timeout_s: float = 30) -> list[Any]:
    deadline = time.monotonic() + timeout_s
    while (records := await read_topic(bootstrap, topic, idle_s=0.3)) and len(records) < n:
        assert time.monotonic() < deadline
    if len(records) < n:
        await asyncio.sleep(0.5)
        return await _until_count(bootstrap, topic, n, deadline - time.monotonic())
    return records
