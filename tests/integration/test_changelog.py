"""The chunk changelog on Apache Kafka: a member that restarts (either delivery) reads its
partitions' chunk counts back from the compacted state topic, so a shrunk version's old chunks
and a deleted document's are tombstoned by a member that never saw them written."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
import pytest
from embedsim import SimulatorConfig, SimulatorServer
from embedstream.tools.produce_documents import Message, each, produce_messages, tombstone
from embedstream.wire.changelog import chunk_id

from tests.integration.helpers import create_all_topics, read_topic, running_service, settings_for

pytestmark = pytest.mark.integration

SMALL: dict[str, Any] = {"chunk_max_tokens": 40, "chunk_overlap_tokens": 0, "chunk_min_tokens": 0}


def paragraphs(*words: str) -> str:
    return "\n\n".join(f"{w:_<7} " * 10 for w in words)


def document(doc_id: str, text: str, **fields: Any) -> Message:
    return Message(doc_id.encode(), orjson.dumps({"doc_id": doc_id, "text": text, **fields}))


async def index(bootstrap: str, topic: str, records: int) -> dict[bytes, Any]:
    """The changelog as compaction leaves it, once it holds `records` records (or more: a
    replay repeats some, which changes nothing compacted)."""
    deadline = time.monotonic() + 60
    while len(found := await read_topic(bootstrap, topic, idle_s=0.3)) < records:
        assert time.monotonic() < deadline, f"{len(found)} of {records} changelog records"
        await asyncio.sleep(0.2)
    latest = {r.key: r.value for r in found}
    return {k: orjson.loads(v)["payload"] for k, v in latest.items() if v is not None}


@pytest.mark.parametrize("delivery", ["at_least_once", "exactly_once"])
async def test_a_restarted_member_knows_what_each_document_had(
    bootstrap: str, unique_prefix: str, delivery: str
) -> None:
    changelog = unique_prefix + "changelog"
    async with SimulatorServer(SimulatorConfig(base_ms=2)) as simulator:
        settings = settings_for(bootstrap, unique_prefix, simulator.url, delivery=delivery,
                                topic_changelog=changelog, **SMALL)  # fmt: skip
        await create_all_topics(settings)
        first = [
            document("shrinks", paragraphs("a", "b", "c"), version=1),
            document("deleted", paragraphs("d", "e"), version=1),
            document("kept", paragraphs("f"), version=1),
        ]
        await produce_messages(settings, each(first), priority="low")
        async with running_service(settings):
            before = await index(bootstrap, changelog, 6)
        generation = next(iter(before.values()))["index_generation"]
        assert {(p["doc_id"], p["chunk_seq"]) for p in before.values()} == {
            ("shrinks", 0), ("shrinks", 1), ("shrinks", 2), ("deleted", 0), ("deleted", 1),
            ("kept", 0),
        }  # fmt: skip

        second = [document("shrinks", paragraphs("a"), version=2), tombstone("deleted")]
        await produce_messages(settings, each(second), priority="low")
        async with running_service(settings):  # a new member: counts from the state topic
            after = await index(bootstrap, changelog, 6 + 1 + 2 + 2)
    assert {(p["doc_id"], p["version"], p["chunk_seq"]) for p in after.values()} == {
        ("shrinks", "2", 0), ("kept", "1", 0),
    }  # fmt: skip
    assert set(after) == {chunk_id(generation, d, 0).encode() for d in ("shrinks", "kept")}
