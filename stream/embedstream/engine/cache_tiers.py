"""The embedding cache's two tiers behind one small interface: the in-process map and Redis.
Redis is reached through `engine/redis_link.py` (imported only when a Redis tier is built: a
processor without one never pays for it)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from embedstream.core.cachekeys import KEY_PREFIX
from embedstream.core.observer import CacheObserver, NullObserver
from embedstream.core.tinylfu import TinyLfuCache

log = logging.getLogger(__name__)

# Writes run in the background and hold nothing, so a busy event loop (which makes any await
# look slow) must not make them fail: they get this many times the look-up timeout.
WRITE_TIMEOUT_FACTOR = 4

# What an in-process entry costs beyond its key's characters and its vector's bytes: the key
# and bytes objects, the entry and its places in two dicts (measured with tracemalloc: about
# 357 bytes with a 79-character key, CPython 3.12).
ENTRY_OVERHEAD_BYTES = 280

# The entry the in-process tier's count is sized by (its bound in entries, its frequency
# sketch and the sketch's samples: cache_max_bytes over this): a vector of the default
# model's 1536 dimensions, a key (the prefix and a blake2b-256 digest in hex) and the
# bookkeeping. Sized by vectors of 256 instead (4.7x the count), its window grew so much
# slower that re-sends of 1536-dimension vectors 2,000 texts apart hit 4% rather than 100%
# over the second half of a 200,000-text stream (bench/cache_policy.py's resend).
SIZING_ENTRY_BYTES = 4 * 1536 + len(KEY_PREFIX) + 64 + ENTRY_OVERHEAD_BYTES


def memory_tier_entries(max_bytes: int) -> int:
    """How many entries an in-process tier of ``max_bytes`` keeps at most (fewer when its
    entries are larger than SIZING_ENTRY_BYTES: the bytes bind first)."""
    return max(1, max_bytes // SIZING_ENTRY_BYTES)


# One command stores a whole batch, each key with the TTL (ARGV[1], ms; 0: none), and ends the
# claims on them (a vector stored is what the processes watching a claim wait for).
_SET_MANY = """
local ttl = tonumber(ARGV[1])
for i, key in ipairs(KEYS) do
  if ttl > 0 then
    redis.call('SET', key, ARGV[i + 1], 'PX', ttl)
  else
    redis.call('SET', key, ARGV[i + 1])
  end
  redis.call('DEL', key .. CLAIM)
end
return #KEYS
"""
# A text in flight: the process sending it claims it (ARGV[1], its token) for ARGV[2] ms. Per
# key: its vector when stored; 1 when claimed now; 0 when another process holds the claim.
_CLAIM_MANY = """
local found = {}
for i, key in ipairs(KEYS) do
  local vector = redis.call('GET', key)
  if vector then
    found[i] = vector
  elseif redis.call('SET', key .. CLAIM, ARGV[1], 'NX', 'PX', tonumber(ARGV[2])) then
    found[i] = 1
  else
    found[i] = 0
  end
end
return found
"""
# Per key: its vector when stored; 1 while another's claim holds; 0 when neither is there.
_WATCH_MANY = """
local found = {}
for i, key in ipairs(KEYS) do
  local vector = redis.call('GET', key)
  if vector then
    found[i] = vector
  else
    found[i] = redis.call('EXISTS', key .. CLAIM)
  end
end
return found
"""
# Ends this process's claims (ARGV[1], its token) on texts it did not store (a failed call).
_RELEASE_MANY = """
for _, key in ipairs(KEYS) do
  if redis.call('GET', key .. CLAIM) == ARGV[1] then
    redis.call('DEL', key .. CLAIM)
  end
end
return #KEYS
"""
CLAIM_SUFFIX = ":claim"  # a claim's key: the vector's key and this


def _with_suffix(script: str) -> str:
    return f"local CLAIM = '{CLAIM_SUFFIX}'" + script


class Tier(Protocol):
    name: str

    async def get_many(self, keys: Sequence[str]) -> list[bytes | None]: ...

    async def put_many(self, entries: Sequence[tuple[str, bytes]]) -> None: ...

    async def close(self) -> None: ...


class ClaimingTier(Protocol):
    """A shared tier where processes claim the texts they are sending (Redis): per key, its
    vector when stored, else whether the claim is this process's (``claim_many``) or still
    another's (``watch_many``)."""

    async def claim_many(
        self, keys: Sequence[str], token: str, ttl_ms: int
    ) -> list[bytes | bool]: ...

    async def watch_many(self, keys: Sequence[str]) -> list[bytes | bool]: ...

    async def release_many(self, keys: Sequence[str], token: str) -> None: ...


class TierFailed(OSError):
    """The shared tier's own error, as the cache catches it: `<its class>: <message>`."""


class MemoryTier:
    """The in-process tier: W-TinyLFU (`core/tinylfu.py`), so a corpus re-ingested in the same
    order still finds what the tier kept of it; bounded by bytes (each entry's vector, key and
    bookkeeping) and by the count of entries those bytes size (`memory_tier_entries`), each
    kept for the TTL at most. Its first eviction is logged once (counted in
    `embedstream_cache_evictions_total` after that)."""

    name = "memory"

    def __init__(
        self,
        ttl_s: float,
        clock: Callable[[], float] = time.monotonic,
        observer: CacheObserver | None = None,
        *,
        max_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        self._entries: TinyLfuCache[str, bytes] = TinyLfuCache(
            memory_tier_entries(max_bytes), max_bytes, ttl_s, entry_bytes
        )
        self._max_bytes = max_bytes
        self._clock = clock
        self._observer = observer or NullObserver()
        self._evicted_before = False

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def bytes_held(self) -> int:
        return self._entries.weight

    async def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        return self._entries.get_many(keys, self._clock())

    def peek_many(self, keys: Sequence[str]) -> list[bytes | None]:
        """What it holds of ``keys``, counted as no access (a second look-up of a text)."""
        now = self._clock()
        return [self._entries.peek(key, now) for key in keys]

    async def put_many(self, entries: Sequence[tuple[str, bytes]]) -> None:
        evicted = self._entries.put_many(entries, self._clock())
        if not evicted:
            return
        self._observer.count_cache_evictions(self.name, evicted)
        if not self._evicted_before:
            self._evicted_before = True
            log.warning(
                "in-process embedding cache full (cache_max_bytes=%d): from now on a vector "
                "stays only if its text is asked for more often than the one it would replace",
                self._max_bytes,
            )

    async def close(self) -> None:
        return None


def entry_bytes(key: str, vector: bytes) -> int:
    """What an entry of the in-process tier costs, as its byte bound counts it."""
    return len(key) + len(vector) + ENTRY_OVERHEAD_BYTES


class RedisTier:
    """Redis: MGET for look-ups, one script of SET ... PX for writes (one command, however many
    entries: redis-py's per-command cost dominates otherwise). The connection is
    `engine/redis_link.py`'s: the cache's answer to a failure is a miss, not a wait."""

    name = "redis"

    def __init__(self, url: str, ttl_s: float, timeout_s: float) -> None:
        from embedstream.engine.redis_link import RedisLink

        self._ttl_ms = int(ttl_s * 1000) if ttl_s > 0 else 0
        # Look-ups are bounded by the cache's own timeout; the socket's must not cut a write
        # (which gets WRITE_TIMEOUT_FACTOR times as long) shorter.
        self._link = RedisLink(
            url, timeout_s=timeout_s * WRITE_TIMEOUT_FACTOR, connect_timeout_s=timeout_s
        )
        self._set_many = self._link.script(_with_suffix(_SET_MANY))
        self._claim_many = self._link.script(_with_suffix(_CLAIM_MANY))
        self._watch_many = self._link.script(_with_suffix(_WATCH_MANY))
        self._release_many = self._link.script(_with_suffix(_RELEASE_MANY))

    async def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        try:
            return await self._link.mget(keys)
        except OSError as exc:
            raise TierFailed(str(exc)) from exc

    async def put_many(self, entries: Sequence[tuple[str, bytes]]) -> None:
        keys = [key for key, _ in entries]
        try:
            await self._set_many(keys, [self._ttl_ms, *(v for _, v in entries)])
        except OSError as exc:
            raise TierFailed(str(exc)) from exc

    async def claim_many(self, keys: Sequence[str], token: str, ttl_ms: int) -> list[bytes | bool]:
        try:
            found = await self._claim_many(keys, [token, ttl_ms])
        except OSError as exc:
            raise TierFailed(str(exc)) from exc
        return [_answer(value) for value in found]

    async def watch_many(self, keys: Sequence[str]) -> list[bytes | bool]:
        try:
            found = await self._watch_many(keys, [])
        except OSError as exc:
            raise TierFailed(str(exc)) from exc
        return [_answer(value) for value in found]

    async def release_many(self, keys: Sequence[str], token: str) -> None:
        try:
            await self._release_many(keys, [token])
        except OSError as exc:
            raise TierFailed(str(exc)) from exc

    async def close(self) -> None:
        await self._link.close()


def _answer(value: object) -> bytes | bool:
    """A script's answer for one key: the vector's bytes, or a flag (1 or 0)."""
    return value if isinstance(value, bytes) else value == 1
