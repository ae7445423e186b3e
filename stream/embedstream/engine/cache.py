"""The embedding cache: never pay the provider twice for the same vector.

Looked up before a text joins a batch, one batched round trip per fetched batch (or per
`BatchingClient.embed` call), so a hit takes no call slot and no token budget; written after a
successful call: to the memory tier at once, to Redis by one background writer that sends
whatever has accumulated in one command, so a write never holds a call slot. Two tiers: an
in-process W-TinyLFU map (`cache=memory`, and in front of Redis with `cache=redis`) and Redis,
shared by every processor and client (`engine/cache_tiers.py`, the only module that imports
``redis``).

Redis is never a single point of failure: a look-up that fails or takes longer than
`cache_timeout_ms` counts as a miss (the text goes to the provider as if there were no cache);
a write that fails (or takes `WRITE_TIMEOUT_FACTOR` times as long: it delays nobody) is
kept for later. Either is counted in `embedstream_cache_errors_total` and logged once per
interval, not per call; that operation then leaves Redis alone for a second before trying
again, so an outage costs one timeout per second rather than one per fetch. Vectors computed
meanwhile (during an outage, and in the pause just after Redis came back) wait in a bounded
backlog and are written once Redis answers, so other processors do not pay for them again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from embedstream.core import configured
from embedstream.core.cachekeys import CacheKeys, provider_identity
from embedstream.core.lanes import BucketKey
from embedstream.core.observer import CacheObserver, NullObserver
from embedstream.engine.cache_tiers import (
    SIZING_ENTRY_BYTES,
    WRITE_TIMEOUT_FACTOR,
    ClaimingTier,
    MemoryTier,
    RedisTier,
    Tier,
    TierFailed,
    memory_tier_entries,
)
from embedstream.engine.inflight import TextsInFlight
from embedstream.engine.jobs import Hit, Job
from embedstream.settings import Settings
from embedstream.wire import Vector, float32_bytes, vector_from_float32
from embedstream.wire.openai import Input

log = logging.getLogger(__name__)

J = TypeVar("J", bound=Job)

WARN_INTERVAL_S = 10.0  # at most one "cache unavailable" warning per this many seconds
REDIS_PAUSE_S = 1.0  # after a failure, Redis is not asked again for this long
# Keys per MGET: a fetch (max_poll_records, 1000 by default) is one round trip, while a client's
# `embed()` of 100,000 texts does not ask Redis for hundreds of megabytes in one reply.
MGET_CHUNK = 1000
WRITE_CHUNK = 1000  # entries per Redis write command
# The backlog of entries waiting for Redis (slow, down, or in the pause after a failure) keeps
# the newest this many, and this many bytes (a minute of a busy processor at 1536 dimensions);
# older ones are dropped, so memory stays bounded through an outage of any length.
MAX_UNWRITTEN = 20_000
MAX_UNWRITTEN_BYTES = 64 * 1024 * 1024
CLOSE_WRITE_S = 2.0  # on close, how long the last writes may take
CLAIM_TTL_MIN_S = 30.0  # a text claimed in Redis while its call runs (engine/inflight.py)


class EmbeddingCache:
    def __init__(
        self,
        provider: str,
        memory: MemoryTier,
        shared: Tier | None = None,
        *,
        timeout_s: float = 0.25,
        observer: CacheObserver | None = None,
        clock: Callable[[], float] = time.monotonic,
        claims: ClaimingTier | None = None,
        claim_ttl_s: float = 30.0,
    ) -> None:
        """``claims``: the shared tier, when texts in flight are claimed there across
        processes (`engine/inflight.py`), each claim for ``claim_ttl_s`` at most."""
        self._provider = provider
        self._keys = CacheKeys(provider)
        self._memory = memory
        self._shared = shared
        self._timeout_s = timeout_s
        self._observer = observer or NullObserver()
        self._clock = clock
        self._paused_until = {"get": 0.0, "write": 0.0}  # per operation, after a failure
        self._last_warning: float | None = None
        self._failures_since_warning = 0
        self._unwritten: deque[tuple[str, bytes]] = deque()  # stored in memory, not in Redis
        self._unwritten_bytes = 0
        self._writer: asyncio.Task[None] | None = None
        self._retry: asyncio.TimerHandle | None = None  # the backlog's next try after a pause
        # Texts being embedded now, by their names here: each is paid once (shared_texts.py).
        self.in_flight = TextsInFlight(
            claims, claim_ttl_s=claim_ttl_s, timeout_s=timeout_s,
            failed=lambda exc: self._shared_failed("get", exc),
        )  # fmt: skip

    @property
    def tiers(self) -> tuple[str, ...]:
        return tuple(t.name for t in (self._memory, self._shared) if t is not None)

    async def look_up(
        self, jobs: Sequence[J], key_of: Callable[[J], BucketKey]
    ) -> tuple[list[Hit[J]], list[J]]:
        """Split `jobs` into those the cache answers and those that must go to the provider
        (in their original order). One memory look-up, and at most one Redis round trip."""
        if not jobs:
            return [], []
        keys = [key_of(job) for job in jobs]
        names = [self._keys.of(key, job.input) for key, job in zip(keys, jobs, strict=True)]
        found = await self._memory.get_many(names)
        tier_of: list[str | None] = [self._memory.name if f else None for f in found]
        missing = sorted({n for n, f in zip(names, found, strict=True) if f is None})
        if missing and self._shared is not None:
            shared = await self._shared_get(missing)
            by_name = {n: v for n, v in zip(missing, shared, strict=True) if v}
            if by_name:
                await self._memory.put_many(list(by_name.items()))
            for i, name in enumerate(names):
                if found[i] is None and name in by_name:
                    found[i], tier_of[i] = by_name[name], self._shared.name
        hits: list[Hit[J]] = []
        misses: list[J] = []
        hits_by_tier: dict[str, int] = {}
        saved = 0
        for job, key, data, tier in zip(jobs, keys, found, tier_of, strict=True):
            hit = self._decode(job, key, data) if data is not None else None
            if hit is None or tier is None:
                misses.append(job)
                continue
            hits.append(hit)
            hits_by_tier[tier] = hits_by_tier.get(tier, 0) + 1
            saved += job.tokens
        # Misses are counted when sent: one may yet be answered at its call's cut.
        self._observer.count_cache_lookups(hits_by_tier, 0, saved)
        return hits, misses

    def name_of(self, key: BucketKey, text: Input) -> str:
        """What a text's vector is filed under (`core/cachekeys.py`)."""
        return self._keys.of(key, text)

    def peek(self, names: Sequence[str]) -> list[bytes | None]:
        """What the in-process tier holds of these, counted as no access: a text looked up
        again at its call's cut was counted when it arrived."""
        return self._memory.peek_many(names)

    @property
    def shared_usable(self) -> bool:
        """Redis may be asked now (not in the pause after a failure)."""
        return self._shared is not None and self._shared_usable("get")

    def count(self, hits_by_tier: dict[str, int], misses: int, tokens_saved: int) -> None:
        """Hits and misses decided after the look-up (at a call's cut: shared_texts.py)."""
        self._observer.count_cache_lookups(hits_by_tier, misses, tokens_saved)

    def answer(self, job: J, key: BucketKey, data: bytes) -> Hit[J] | None:
        """``job`` answered with a stored vector, in its encoding; None if unreadable."""
        return self._decode(job, key, data)

    async def store(
        self, key: BucketKey, texts: Sequence[Input], vectors: Sequence[Vector]
    ) -> None:
        """Keep the vectors a call returned (one per distinct text of the batch); whoever
        waits for them in this process gets them now."""
        entries = [
            (self._keys.of(key, text), float32_bytes(vector))
            for text, vector in zip(texts, vectors, strict=True)
        ]
        await self._memory.put_many(entries)
        self.in_flight.settle(entries)
        if self._shared is None:
            return
        self._keep_unwritten(entries, at_front=False)
        self._start_writer()

    async def flush(self) -> None:
        """Wait until what was stored so far has been written to Redis, or is waiting for the
        pause after a failure to end."""
        while self._writer is not None and not self._writer.done():
            await asyncio.shield(self._writer)

    @property
    def unwritten(self) -> int:
        """Entries stored in memory that Redis has not got yet."""
        return len(self._unwritten)

    async def close(self) -> None:
        await self.in_flight.close()
        if self._retry is not None:
            self._retry.cancel()
        if self._writer is not None:
            try:
                await asyncio.wait_for(self.flush(), CLOSE_WRITE_S)
            except TimeoutError:
                self._writer.cancel()
        await self._memory.close()
        if self._shared is not None:
            await self._shared.close()

    def _keep_unwritten(self, entries: Sequence[tuple[str, bytes]], *, at_front: bool) -> None:
        """Add to the backlog (a chunk that failed goes back in front, in order), then drop
        the oldest beyond MAX_UNWRITTEN entries or MAX_UNWRITTEN_BYTES."""
        if at_front:
            self._unwritten.extendleft(reversed(entries))
        else:
            self._unwritten.extend(entries)
        self._unwritten_bytes += _size(entries)
        while len(self._unwritten) > MAX_UNWRITTEN or (
            self._unwritten_bytes > MAX_UNWRITTEN_BYTES and len(self._unwritten) > 1
        ):
            self._unwritten_bytes -= _size([self._unwritten.popleft()])

    def _start_writer(self) -> None:
        """Write the backlog now, or once the pause after a failure is over."""
        if not self._unwritten or (self._writer is not None and not self._writer.done()):
            return
        if self._shared_usable("write"):
            self._writer = asyncio.create_task(self._write_unwritten())
        else:
            self._start_writer_later()

    def _retry_writer(self) -> None:
        self._retry = None
        self._start_writer()

    async def _write_unwritten(self) -> None:
        """The one Redis writer: sends what accumulated meanwhile, a chunk per command. A
        failed chunk goes back to the backlog, tried again after the pause."""
        assert self._shared is not None
        while self._unwritten:
            if not self._shared_usable("write"):
                self._start_writer_later()
                return
            chunk = [
                self._unwritten.popleft() for _ in range(min(WRITE_CHUNK, len(self._unwritten)))
            ]
            self._unwritten_bytes -= _size(chunk)
            try:
                async with asyncio.timeout(self._timeout_s * WRITE_TIMEOUT_FACTOR):
                    await self._shared.put_many(chunk)
            except (OSError, TimeoutError) as exc:
                self._shared_failed("write", exc)
                self._keep_unwritten(chunk, at_front=True)

    def _start_writer_later(self) -> None:
        """Not only on the next store: with no traffic, Redis still gets what it missed."""
        if self._retry is None:
            delay = max(0.01, self._paused_until["write"] - self._clock())
            self._retry = asyncio.get_running_loop().call_later(delay, self._retry_writer)

    def _decode(self, job: J, key: BucketKey, data: bytes) -> Hit[J] | None:
        dimensions = len(data) // 4
        if key.dimensions is not None and dimensions != key.dimensions:
            # Cannot come from a key that digests the dimensions; never serve it anyway.
            self._observer.count_cache_error("corrupt")
            return None
        try:
            vector = vector_from_float32(data, key.encoding_format)
        except ValueError:
            self._observer.count_cache_error("corrupt")
            return None
        return Hit(job, key, vector, dimensions)

    async def _shared_get(self, names: list[str]) -> list[bytes | None]:
        assert self._shared is not None
        if not self._shared_usable("get"):
            return [None] * len(names)
        found: list[bytes | None] = []
        for start in range(0, len(names), MGET_CHUNK):
            chunk = names[start : start + MGET_CHUNK]
            try:
                async with asyncio.timeout(self._timeout_s):
                    found.extend(await self._shared.get_many(chunk))
            except (OSError, TimeoutError) as exc:
                self._shared_failed("get", exc)
                return found + [None] * (len(names) - len(found))
        return found

    def _shared_usable(self, operation: str) -> bool:
        return self._clock() >= self._paused_until[operation]

    def _shared_failed(self, operation: str, exc: BaseException) -> None:
        now = self._clock()
        self._paused_until[operation] = now + REDIS_PAUSE_S
        self._observer.count_cache_error(operation)
        self._failures_since_warning += 1
        if self._last_warning is None or now - self._last_warning >= WARN_INTERVAL_S:
            log.warning(
                "embedding cache: Redis %s failed (%s); texts go to the provider until it "
                "answers again (%d failures since the last warning)",
                operation, _describe(exc), self._failures_since_warning,
            )  # fmt: skip
            self._last_warning = now
            self._failures_since_warning = 0


def _size(entries: Iterable[tuple[str, bytes]]) -> int:
    return sum(len(key) + len(value) for key, value in entries)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, TierFailed):
        return str(exc)[:200]
    return f"{type(exc).__name__}: {exc}"[:200]


def build_cache(
    settings: Settings,
    observer: CacheObserver | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> EmbeddingCache | None:
    """The cache the settings ask for, or None with `cache=off`."""
    if settings.cache == "off":
        return None
    provider = provider_identity(
        configured.provider_endpoint(settings), settings.provider_profile, settings.extra_body_map
    )
    memory = MemoryTier(settings.cache_ttl_s, clock, observer, max_bytes=settings.cache_max_bytes)
    shared: RedisTier | None = None
    timeout_s = settings.cache_timeout_ms / 1000.0
    if settings.cache == "redis":
        assert settings.cache_url is not None  # validated
        shared = RedisTier(settings.cache_url, settings.cache_ttl_s, timeout_s)
    # A claim outlives any call but one held back by rate limits; then it expires and the
    # processes waiting for it send the text themselves.
    claim_ttl_s = max(CLAIM_TTL_MIN_S, 2 * settings.request_timeout_s)
    return EmbeddingCache(
        provider, memory, shared, timeout_s=timeout_s, observer=observer, clock=clock,
        claims=shared, claim_ttl_s=claim_ttl_s,
    )  # fmt: skip


def undersized_warning(settings: Settings) -> str | None:
    """What to tell a processor whose in-process tier holds less than its work in hand (a full
    buffer plus one document admitted whole): vectors of that work may be evicted before the
    same texts come back (a document's next version, a retried batch). None when it holds it."""
    if settings.cache == "off":
        return None
    in_hand = settings.buffered_items_limit + settings.max_document_chunks
    entries = memory_tier_entries(settings.cache_max_bytes)
    if entries >= in_hand:
        return None
    return (
        f"cache_max_bytes ({settings.cache_max_bytes}) keeps at most {entries} vectors, fewer "
        f"than the buffer's item bound ({settings.buffered_items_limit}) plus "
        f"max_document_chunks ({settings.max_document_chunks}): the in-process cache may drop "
        f"vectors of the work in hand before their texts come back; raise it to at least "
        f"{in_hand * SIZING_ENTRY_BYTES}"
    )
