"""The chunk changelog through the Kafka shell, on the in-memory cluster: complete versions
upsert their chunks and tombstone the ones gone, deletes tombstone everything, an incomplete
version changes nothing, chunk counts survive a restart (either delivery), and the held
chunk values count against the byte bound."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from embedstream.engine.backend import BatchCall, BatchOutcome
from embedstream.errors import PermanentItemError, Reason
from embedstream.testing import eventually, vector_for
from embedstream.testing.backends import texts_of
from embedstream.testing.kafka import FakeCluster, FakeTransactionalProducer
from embedstream.wire.changelog import chunk_id, decode_state

from tests.unit.harness import LOW, NAMES, GatedBackend, Harness, running

CHANGELOG = "t.changelog"
STATE = CHANGELOG + ".state"
SMALL: dict[str, Any] = {
    "chunk_max_tokens": 40, "chunk_overlap_tokens": 0, "chunk_min_tokens": 0,
    "topic_changelog": CHANGELOG,
}  # fmt: skip


def paragraphs(*words: str) -> str:
    """One paragraph per word, one chunk each at SMALL."""
    return "\n\n".join(f"{w:_<5} " * 12 for w in words)


def cluster() -> FakeCluster:
    return FakeCluster(
        {NAMES.requests_high: 1, NAMES.requests_low: 1, NAMES.retry: 1, NAMES.results: 2,
         NAMES.dead_letters: 1, CHANGELOG: 3, STATE: 2}
    )  # fmt: skip


def publish(h: Harness, doc_id: str, text: str | None, **fields: Any) -> int:
    value = None if text is None else orjson.dumps({"doc_id": doc_id, "text": text, **fields})
    return h.cluster.produce(LOW.topic, value, doc_id.encode(), partition=LOW.partition).offset


def index(c: FakeCluster) -> dict[bytes, dict[str, Any]]:
    """The changelog as compaction leaves it: the last value of each key, tombstones removed."""
    latest: dict[bytes, bytes | None] = {}
    for record in c.records(CHANGELOG):
        assert record.key is not None
        latest[record.key] = record.value
    return {k: orjson.loads(v)["payload"] for k, v in latest.items() if v is not None}


def rows(c: FakeCluster) -> set[tuple[str, str, int]]:
    found = set()
    for key, payload in index(c).items():
        assert key == chunk_id(payload["index_generation"], payload["doc_id"],
                               payload["chunk_seq"]).encode()  # fmt: skip
        found.add((payload["doc_id"], payload["version"], payload["chunk_seq"]))
    return found


async def done(h: Harness, offset: int) -> None:
    await eventually(lambda: h.committed(LOW) == offset + 1)


async def test_versions_upsert_their_chunks_and_tombstone_the_ones_gone() -> None:
    async with running(GatedBackend(), cluster=cluster(), **SMALL) as h:
        await done(h, publish(h, "d", paragraphs("alpha", "beta", "gamma"), version=1))
        await done(h, publish(h, "e", paragraphs("delta"), version=1))
        assert rows(h.cluster) == {("d", "1", 0), ("d", "1", 1), ("d", "1", 2), ("e", "1", 0)}
        payload = next(p for p in index(h.cluster).values() if p["doc_id"] == "e")
        start, end = payload["span_start"], payload["span_end"]
        assert payload["embedding"] == pytest.approx(vector_for(paragraphs("delta")[start:end]))

        await done(h, publish(h, "d", paragraphs("alpha"), version=2))  # shrinks
        assert rows(h.cluster) == {("d", "2", 0), ("e", "1", 0)}
        tombstones = {r.key for r in h.cluster.records(CHANGELOG) if r.value is None}
        generation = next(iter(index(h.cluster).values()))["index_generation"]
        assert tombstones == {chunk_id(generation, "d", s).encode() for s in (1, 2)}
        # The changelog's generation is the one every output of the version names.
        outputs = [orjson.loads(r.value) for r in h.results() if r.key == b"d" and r.value]
        assert {o["index_generation"] for o in outputs} == {generation}

        await done(h, publish(h, "d", paragraphs("alpha", "beta", "eta", "iota"), version=3))
        assert rows(h.cluster) == {("d", "3", s) for s in range(4)} | {("e", "1", 0)}

        await done(h, publish(h, "d", None))  # deleted: every chunk of it
        assert rows(h.cluster) == {("e", "1", 0)}
        state = h.cluster.records(STATE)
        assert state[-1].key == f"{LOW.topic}/0/d".encode() and state[-1].value is None
        assert {r.partition for r in state} == {0}  # input partition 0 -> state partition 0
        assert decode_state(state[0].value or b"") == {generation: 3}


class PoisonBackend:
    async def embed(self, call: BatchCall) -> BatchOutcome:
        if any("poison" in t for t in call.texts):
            raise PermanentItemError(Reason.REJECTED, "provider rejected the input (400)")
        return BatchOutcome([vector_for(t) for t in texts_of(call)], 2, len(call.texts), 0.0)

    async def close(self) -> None:
        return None


async def test_an_incomplete_version_changes_nothing() -> None:
    async with running(PoisonBackend(), cluster=cluster(), max_attempts=1, **SMALL) as h:
        await done(h, publish(h, "d", paragraphs("alpha", "beta", "gamma"), version=1))
        before = len(h.cluster.records(CHANGELOG)), len(h.cluster.records(STATE))
        await done(h, publish(h, "d", paragraphs("alpha", "poison"), version=2))
        after = len(h.cluster.records(CHANGELOG)), len(h.cluster.records(STATE))
        assert after == before  # the store keeps version 1 whole
        assert rows(h.cluster) == {("d", "1", s) for s in range(3)}
        await done(h, publish(h, "d", paragraphs("alpha"), version=3))  # still knows 3 chunks
        assert rows(h.cluster) == {("d", "3", 0)}


@pytest.mark.parametrize("exactly_once", [False, True])
async def test_chunk_counts_survive_a_restart(exactly_once: bool) -> None:
    c = cluster()
    options: dict[str, Any] = dict(SMALL)
    if exactly_once:
        options["transactional"] = lambda txn_id: FakeTransactionalProducer(c, txn_id)
    async with running(GatedBackend(), cluster=c, **options) as h:
        await done(h, publish(h, "d", paragraphs("alpha", "beta", "gamma"), version=1))
    async with running(GatedBackend(), cluster=c, **options) as h:  # a new member
        await done(h, publish(h, "d", paragraphs("alpha"), version=2))
        assert rows(h.cluster) == {("d", "2", 0)}  # 1 and 2 tombstoned: it knew there were 3
        await done(h, publish(h, "d", None))
        assert rows(h.cluster) == set()


async def test_held_chunk_values_count_against_the_byte_bound_until_complete() -> None:
    backend = GatedBackend()
    async with running(backend, cluster=cluster(), **SMALL) as h:
        offset = publish(h, "d", paragraphs("alpha", "SLOW"), version=1)
        state = next(s for s in h.service.processor.parts.assignment if s.tp == LOW)
        run: Any = None

        def first_chunk_kept() -> bool:
            nonlocal run
            run = state.documents.running("d")
            return run is not None and len(run.changelog_values) == 1

        await eventually(first_chunk_kept)
        held = len(run.changelog_values[0])
        document = len(h.cluster.records(LOW.topic)[offset].value or b"")
        # Beside the document's own bytes, once its first chunk's result is acknowledged.
        await eventually(lambda: state.offsets.pending_bytes == document + held)
        assert h.cluster.records(CHANGELOG) == []  # nothing out before the version is whole
        backend.gate.set()
        await done(h, offset)
        assert run.changelog_values == {} and state.offsets.pending_bytes == 0
        assert len(h.cluster.records(CHANGELOG)) == 2
