"""The cache in the processor (on the in-memory Kafka fakes) and in `BatchingClient`: hits
become results without a call, misses are batched and stored, look-ups are batched."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

import orjson
from embedstream.engine.cache import EmbeddingCache, build_cache
from embedstream.engine.cache_tiers import SIZING_ENTRY_BYTES, MemoryTier, memory_tier_entries
from embedstream.engine.client import BatchingClient
from embedstream.settings import load_settings
from embedstream.testing import RecordingBackend, eventually, vector_for
from embedstream.wire import decode_base64

from tests.unit.harness import LOW, NAMES, running


def results_by_id(records: Sequence[object]) -> dict[str, dict[str, object]]:
    out = {}
    for record in records:
        doc = orjson.loads(record.value or b"")  # type: ignore[attr-defined]
        out[doc["id"]] = doc
    return out


def test_the_defaults_build_a_memory_cache_bounded_in_bytes_and_the_entries_they_size() -> None:
    settings = load_settings(env={})
    cache = build_cache(settings)
    assert cache is not None and cache.tiers == ("memory",)
    assert settings.cache_max_bytes == 64 * 1024 * 1024
    assert memory_tier_entries(settings.cache_max_bytes) == 10_319  # at 1536 dimensions
    assert build_cache(load_settings(env={"EMBEDSTREAM_CACHE": "off"})) is None


async def test_the_processor_answers_a_repeated_text_from_the_cache_without_a_call() -> None:
    backend = RecordingBackend()
    async with running(backend, cache="memory", max_batch_size=8) as h:
        h.request(LOW, "first", "the same text")
        await eventually(lambda: len(h.results()) == 1)
        h.request(LOW, "again", "the same text")
        h.request(LOW, "other", "a new text")
        await eventually(lambda: len(h.results()) == 3)
        await eventually(lambda: h.committed(LOW) == 3)
    found = results_by_id(h.results())
    assert found["first"]["cached"] is False
    assert found["again"]["cached"] is True and found["again"]["usage"] == {"tokens": 0}
    assert found["again"]["embedding"] == found["first"]["embedding"] == vector_for("the same text")
    assert found["other"]["cached"] is False
    sent = [text for call in backend.calls for text in call.texts]
    assert sorted(sent) == ["a new text", "the same text"]  # the repeat never reached it


async def test_one_fetch_is_looked_up_at_once_and_only_its_misses_are_batched() -> None:
    backend = RecordingBackend()
    async with running(backend, cache="memory", max_batch_size=100, max_wait_ms=50) as h:
        for i in range(3):
            h.request(LOW, f"warm-{i}", f"text {i}")
        await eventually(lambda: len(h.results()) == 3)
        calls_before = len(backend.calls)
        cache = h.service.processor.parts.cache
        assert cache is not None
        looked_up: list[int] = []
        original = cache.look_up

        async def recording(jobs, key_of):  # type: ignore[no-untyped-def]
            looked_up.append(len(jobs))
            return await original(jobs, key_of)

        cache.look_up = recording  # type: ignore[method-assign]
        h.consumer.pause(LOW)  # let the next records pile up into one fetch
        for i in range(6):
            h.request(LOW, f"mix-{i}", f"text {i}")  # 0-2 known, 3-5 new
        h.consumer.resume(LOW)
        await eventually(lambda: len(h.results()) == 9)
    assert looked_up == [6]
    new_calls = backend.calls[calls_before:]
    assert [sorted(c.texts) for c in new_calls] == [["text 3", "text 4", "text 5"]]
    found = results_by_id(h.results())
    assert [found[f"mix-{i}"]["cached"] for i in range(6)] == [True] * 3 + [False] * 3


async def test_a_new_dimensions_or_model_is_a_miss() -> None:
    backend = RecordingBackend()
    async with running(backend, cache="memory") as h:
        variants: list[tuple[str, dict[str, object]]] = [
            ("a", {}),
            ("b", {"dimensions": 2}),
            ("c", {"model": "other"}),
        ]
        for done, (request_id, extra) in enumerate(variants, start=1):
            value = orjson.dumps({"id": request_id, "text": "same", **extra})
            h.cluster.produce(NAMES.requests_low, value, request_id.encode(), [], partition=0)
            await eventually(lambda: len(h.results()) == done)  # noqa: B023 (awaited here)
    assert [d["cached"] for d in results_by_id(h.results()).values()] == [False, False, False]
    assert len(backend.calls) == 3


@dataclass
class CountingTier:
    """A shared tier that counts its round trips."""

    name: str = "redis"
    entries: dict[str, bytes] = field(default_factory=dict)
    gets: list[int] = field(default_factory=list)

    async def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        self.gets.append(len(keys))
        return [self.entries.get(k) for k in keys]

    async def put_many(self, entries: Sequence[tuple[str, bytes]]) -> None:
        self.entries.update(entries)

    async def close(self) -> None:
        return None


def shared_cache(tier: CountingTier) -> EmbeddingCache:
    return EmbeddingCache("p", MemoryTier(60, max_bytes=SIZING_ENTRY_BYTES), tier)  # one entry


async def test_the_client_serves_repeats_from_the_cache_in_either_encoding() -> None:
    backend = RecordingBackend()
    tier = CountingTier()
    async with BatchingClient(backend, embedding_cache=shared_cache(tier), model="m") as client:
        first = await client.embed(["a", "bb", "a"])
        assert first == [vector_for("a"), vector_for("bb"), vector_for("a")]
        assert tier.gets == [2]  # one round trip for the list; "a" asked once
        again = await client.embed(["bb", "a"], encoding_format="base64")
        assert [decode_base64(v) for v in again if isinstance(v, str)] == [
            vector_for("bb"),
            vector_for("a"),
        ]
    assert [sorted(call.texts) for call in backend.calls] == [["a", "bb"]]


async def test_concurrent_single_text_calls_share_one_look_up() -> None:
    backend = RecordingBackend()
    tier = CountingTier()
    async with BatchingClient(backend, embedding_cache=shared_cache(tier), model="m") as client:
        await client.embed(["x", "y", "z"])
        tier.gets.clear()
        vectors = await asyncio.gather(*(client.embed(t) for t in ["x", "y", "z", "new"]))
    assert vectors == [vector_for(t) for t in ["x", "y", "z", "new"]]
    assert len(tier.gets) == 1  # one round trip for the four callers of this loop turn
    assert sum(len(call.texts) for call in backend.calls) == 4  # x, y, z once, then "new"


async def test_close_waits_for_texts_still_being_looked_up() -> None:
    backend = RecordingBackend()
    client = BatchingClient(backend, embedding_cache=shared_cache(CountingTier()), model="m")
    client.start()
    future = client.submit("late")
    await client.close()
    assert future.result() == vector_for("late")
