"""A bounded map that forgets the least recently used entry first and every entry after a TTL.

The Schema Registry client's schemas by id. Pure: every call takes the current time, so tests
drive expiry with a fake clock.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class TtlLru(Generic[K, V]):
    def __init__(self, max_items: int, ttl_s: float) -> None:
        """At most `max_items` entries, each forgotten `ttl_s` after it was stored (0: never)."""
        if max_items < 1:
            raise ValueError(f"max_items must be at least 1, got {max_items}")
        self._max_items = max_items
        self._ttl_s = ttl_s
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()  # key -> (expiry, value)

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: K, now: float) -> V | None:
        found = self._entries.get(key)
        if found is None:
            return None
        expires, value = found
        if expires <= now:
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return value

    def get_many(self, keys: Sequence[K], now: float) -> list[V | None]:
        return [self.get(key, now) for key in keys]

    def put(self, key: K, value: V, now: float) -> int:
        """Store `value`; how many entries it pushed out (the least recently used)."""
        expires = now + self._ttl_s if self._ttl_s > 0 else float("inf")
        self._entries[key] = (expires, value)
        self._entries.move_to_end(key)
        evicted = 0
        while len(self._entries) > self._max_items:
            self._entries.popitem(last=False)
            evicted += 1
        return evicted

    def put_many(self, entries: Iterable[tuple[K, V]], now: float) -> int:
        return sum(self.put(key, value, now) for key, value in entries)
