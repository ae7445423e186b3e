"""The cache's codec, its memory tier's evictions, and how the cache behaves when its shared
tier fails, is slow or holds something unreadable (the memory tier's policy:
test_cache_policy.py)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest
from embedstream.core.cachekeys import cache_key
from embedstream.core.lanes import BucketKey, Priority
from embedstream.engine import cache as cache_module
from embedstream.engine.cache import REDIS_PAUSE_S, WARN_INTERVAL_S, EmbeddingCache
from embedstream.engine.cache_tiers import SIZING_ENTRY_BYTES, MemoryTier
from embedstream.engine.jobs import Job
from embedstream.ops.metrics import Metrics
from embedstream.testing import FakeClock
from embedstream.wire import decode_base64, encode_base64, float32_bytes, vector_from_float32
from prometheus_client import CollectorRegistry

KEY = BucketKey(Priority.LOW, "m", "float", None)
B64 = KEY._replace(encoding_format="base64")

# --------------------------------------------------------------------------- codec


@pytest.mark.parametrize("vector", [[0.5, -1.25, 3.0], encode_base64([0.5, -1.25, 3.0])])
def test_vectors_are_stored_as_float32_and_served_in_either_encoding(
    vector: list[float] | str,
) -> None:
    data = float32_bytes(vector)
    assert len(data) == 12
    assert vector_from_float32(data, "float") == [0.5, -1.25, 3.0]
    encoded = vector_from_float32(data, "base64")
    assert isinstance(encoded, str) and decode_base64(encoded) == [0.5, -1.25, 3.0]


def test_floats_are_rounded_to_float32() -> None:
    served = vector_from_float32(float32_bytes([0.1]), "float")
    assert isinstance(served, list) and served != [0.1] and served[0] == pytest.approx(0.1)


@pytest.mark.parametrize("data", [b"", b"\x00\x00\x80"])
def test_bytes_that_are_not_a_float32_array_are_refused(data: bytes) -> None:
    with pytest.raises(ValueError, match="float32"):
        vector_from_float32(data, "float")


# --------------------------------------------------------------------------- the cache


@dataclass
class FakeShared:
    """A shared tier that may fail, hang, or hold any bytes."""

    name: str = "redis"
    entries: dict[str, bytes] = field(default_factory=dict)
    fail: Exception | None = None
    hang: bool = False
    gets: list[int] = field(default_factory=list)  # keys asked per round trip
    puts: int = 0
    gate: asyncio.Event | None = None  # writes wait for it

    async def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        self.gets.append(len(keys))
        await self._misbehave()
        return [self.entries.get(k) for k in keys]

    async def put_many(self, entries: Sequence[tuple[str, bytes]]) -> None:
        self.puts += 1
        if self.gate is not None:
            await self.gate.wait()
        await self._misbehave()
        self.entries.update(entries)

    async def close(self) -> None:
        return None

    async def _misbehave(self) -> None:
        if self.hang:
            await asyncio.Event().wait()  # never answers
        if self.fail is not None:
            raise self.fail


async def stored(
    cache: EmbeddingCache, key: BucketKey, texts: list[str], vectors: list[list[float]]
) -> None:
    """Store, and wait for the background write to Redis."""
    await cache.store(key, texts, vectors)
    await cache.flush()


def job(text: str) -> Job:
    return Job(id=text, text=text, tokens=len(text))


def key_of(_: Job) -> BucketKey:
    return KEY


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


def counted(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


@pytest.fixture
def metrics(registry: CollectorRegistry) -> Metrics:
    return Metrics(registry)


def make(
    metrics: Metrics, shared: FakeShared | None, clock: FakeClock, entries: int = 100
) -> EmbeddingCache:
    """A cache whose memory tier keeps ``entries`` vectors: the bytes of that many."""
    memory = MemoryTier(ttl_s=60, clock=clock, max_bytes=entries * SIZING_ENTRY_BYTES)
    return EmbeddingCache("p", memory, shared, timeout_s=0.05, observer=metrics, clock=clock)


async def test_hits_misses_and_tokens_saved_are_counted_per_tier(
    registry: CollectorRegistry, metrics: Metrics
) -> None:
    clock = FakeClock()
    shared = FakeShared()
    cache = make(metrics, shared, clock, entries=1)
    await stored(cache, KEY, ["aa", "bbbb"], [[1.0], [2.0]])  # memory keeps only "bbbb"
    hits, misses = await cache.look_up([job("aa"), job("bbbb"), job("new")], key_of)
    assert [(h.job.text, h.vector, h.dimensions) for h in hits] == [
        ("aa", [1.0], 1),
        ("bbbb", [2.0], 1),
    ]
    assert [m.text for m in misses] == ["new"]
    assert shared.gets == [2]  # one round trip, for what memory lacked: "aa" and "new"
    assert counted(registry, "embedstream_cache_hits_total", tier="memory") == 1
    assert counted(registry, "embedstream_cache_hits_total", tier="redis") == 1
    # A miss is counted when it is sent (it may yet be answered at its call's cut:
    # engine/shared_texts.py), not here.
    assert counted(registry, "embedstream_cache_misses_total") == 0
    assert counted(registry, "embedstream_cache_tokens_saved_total") == 6


async def test_each_job_gets_its_own_encoding_from_the_same_entry(
    registry: CollectorRegistry, metrics: Metrics
) -> None:
    cache = make(metrics, None, FakeClock())
    await stored(cache, KEY, ["t"], [[0.5, 2.0]])
    second = job("t")
    hits, _ = await cache.look_up([job("t"), second], lambda j: B64 if j is second else KEY)
    assert hits[0].vector == [0.5, 2.0]
    assert hits[1].vector == encode_base64([0.5, 2.0])


@pytest.mark.parametrize(
    "trouble",
    [{"fail": ConnectionError("refused")}, {"fail": OSError("reset")}, {"hang": True}],
    ids=["refused", "reset", "slow"],
)
async def test_a_failing_or_slow_shared_tier_means_misses_one_warning_and_a_pause(
    registry: CollectorRegistry,
    metrics: Metrics,
    caplog: pytest.LogCaptureFixture,
    trouble: dict[str, object],
) -> None:
    clock = FakeClock()
    shared = FakeShared(entries={})
    cache = make(metrics, shared, clock)
    await stored(cache, KEY, ["known"], [[1.0]])
    shared.fail = trouble.get("fail")  # type: ignore[assignment]
    shared.hang = bool(trouble.get("hang"))
    caplog.set_level(logging.WARNING)
    hits, misses = await cache.look_up([job("known"), job("other")], key_of)
    assert [h.job.text for h in hits] == ["known"]  # memory still answers
    assert [m.text for m in misses] == ["other"]
    assert counted(registry, "embedstream_cache_errors_total", operation="get") == 1
    # Within the pause Redis is not asked at all: misses, no errors, no more warnings.
    for _ in range(5):
        await cache.look_up([job("x")], key_of)
        await stored(cache, KEY, ["y"], [[1.0]])
    assert shared.gets == [1]
    # Writes fail on their own (once, then they pause too), whatever the look-ups did.
    assert shared.puts == 2
    assert counted(registry, "embedstream_cache_errors_total", operation="write") == 1
    clock.advance(REDIS_PAUSE_S)
    await cache.look_up([job("z")], key_of)
    assert shared.gets == [1, 1]
    assert counted(registry, "embedstream_cache_errors_total", operation="get") == 2
    warnings = [r for r in caplog.records if "embedding cache" in r.getMessage()]
    assert len(warnings) == 1  # once per interval, not per failure
    clock.advance(WARN_INTERVAL_S)
    await cache.look_up([job("w")], key_of)
    warnings = [r for r in caplog.records if "embedding cache" in r.getMessage()]
    assert len(warnings) == 2 and "3 failures since the last warning" in warnings[1].getMessage()


async def test_the_shared_tier_is_used_again_once_it_answers(
    registry: CollectorRegistry, metrics: Metrics
) -> None:
    clock = FakeClock()
    shared = FakeShared(fail=ConnectionError("down"))
    cache = make(metrics, shared, clock, entries=1)
    await stored(cache, KEY, ["a"], [[1.0]])  # the write fails: memory only
    assert counted(registry, "embedstream_cache_errors_total", operation="write") == 1
    shared.fail = None
    clock.advance(REDIS_PAUSE_S)
    await stored(cache, KEY, ["b", "c"], [[2.0], [3.0]])
    hits, _ = await cache.look_up([job("b")], key_of)
    assert [h.vector for h in hits] == [[2.0]]
    assert counted(registry, "embedstream_cache_hits_total", tier="redis") == 1


async def test_vectors_stored_while_redis_fails_or_pauses_are_written_once_it_answers(
    metrics: Metrics,
) -> None:
    """Redis restarted: the first write fails, and for the pause after it every store used to
    go to the memory tier only (other processors paid for those texts again)."""
    clock = FakeClock()
    shared = FakeShared(fail=ConnectionError("restarting"))
    cache = make(metrics, shared, clock, entries=1)
    await stored(cache, KEY, ["failed"], [[1.0]])  # the write fails: Redis is paused
    shared.fail = None  # Redis is back, but the cache leaves it alone for the pause
    for text in ["paused-1", "paused-2"]:
        await stored(cache, KEY, [text], [[2.0]])
    assert shared.puts == 1 and cache.unwritten == 3
    clock.advance(REDIS_PAUSE_S)
    await stored(cache, KEY, ["after"], [[3.0]])
    assert sorted(shared.entries) == sorted(
        cache_key("p", KEY, t) for t in ["failed", "paused-1", "paused-2", "after"]
    )
    assert shared.puts == 2 and cache.unwritten == 0  # the backlog in one command


async def test_the_backlog_for_redis_keeps_the_newest_entries_up_to_its_bound(
    metrics: Metrics, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cache_module, "MAX_UNWRITTEN", 3)
    clock = FakeClock()
    shared = FakeShared(fail=ConnectionError("down"))
    cache = make(metrics, shared, clock)
    for i in range(6):
        await stored(cache, KEY, [f"t{i}"], [[float(i)]])
    assert cache.unwritten == 3
    shared.fail = None
    clock.advance(REDIS_PAUSE_S)
    await cache.store(KEY, [], [])
    await cache.flush()
    assert sorted(shared.entries) == sorted(cache_key("p", KEY, f"t{i}") for i in (3, 4, 5))


async def test_writes_go_to_redis_in_the_background_and_coalesce(metrics: Metrics) -> None:
    shared = FakeShared(gate=asyncio.Event())
    cache = EmbeddingCache("p", MemoryTier(60), shared, timeout_s=5.0, observer=metrics)
    await cache.store(KEY, ["first"], [[1.0]])  # returns at once: its write waits meanwhile
    await asyncio.sleep(0)
    for i in range(10):
        await cache.store(KEY, [f"t{i}"], [[float(i)]])
    assert shared.puts == 1  # one write in flight; the ten stores wait for it together
    assert shared.gate is not None
    shared.gate.set()
    await cache.flush()
    assert shared.puts == 2 and len(shared.entries) == 11


async def test_an_unreadable_entry_is_a_miss_never_a_wrong_vector(
    registry: CollectorRegistry, metrics: Metrics
) -> None:
    clock = FakeClock()
    shared = FakeShared()
    cache = make(metrics, shared, clock)
    await stored(cache, KEY, ["a"], [[1.0]])
    sized = KEY._replace(dimensions=2)
    await stored(cache, sized, ["b"], [[1.0, 2.0]])
    memoryless = make(metrics, shared, clock)  # a new process: only Redis knows them
    for name in list(shared.entries):
        shared.entries[name] = shared.entries[name][:-1]  # truncated in Redis
    _, misses = await memoryless.look_up([job("a")], key_of)
    assert [m.text for m in misses] == ["a"]
    _, misses = await memoryless.look_up([job("b")], lambda j: sized)
    assert [m.text for m in misses] == ["b"]
    assert counted(registry, "embedstream_cache_errors_total", operation="corrupt") == 2


async def test_a_large_look_up_is_cut_into_rounds_of_a_thousand_keys(
    registry: CollectorRegistry, metrics: Metrics
) -> None:
    shared = FakeShared()
    cache = make(metrics, shared, FakeClock())
    _, misses = await cache.look_up([job(f"t{i}") for i in range(2500)], key_of)
    assert len(misses) == 2500
    assert shared.gets == [1000, 1000, 500]


async def test_evictions_are_counted_and_the_first_one_is_logged_once(
    registry: CollectorRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    room = 2 * SIZING_ENTRY_BYTES  # two entries
    memory = MemoryTier(ttl_s=60, clock=clock, observer=Metrics(registry), max_bytes=room)
    evictions = ("embedstream_cache_evictions_total", {"tier": "memory"})
    await memory.put_many([("a", b"1"), ("b", b"2")])  # fits: nothing dropped, nothing said
    assert not registry.get_sample_value(*evictions)
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]
    await memory.put_many([("c", b"3"), ("d", b"4"), ("e", b"5")])
    await memory.put_many([("f", b"6")])
    assert registry.get_sample_value(*evictions) == 4
    # "a" holds the main area (no newcomer was asked for more often), "f" the window.
    assert await memory.get_many(["a", "b", "c", "d", "e", "f"]) == [b"1"] + [None] * 4 + [b"6"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        f"in-process embedding cache full (cache_max_bytes={room}): from now on a vector stays "
        "only if its text is asked for more often than the one it would replace"
    ]
