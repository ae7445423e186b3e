"""Retry items waiting for their not-before time, released in time order.

A retry record read early is held here (counted as held, so backpressure sees it) instead of
blocking its partition, so one slow retry never delays the records behind it.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(order=True)
class _Entry(Generic[T]):
    not_before_ms: int
    seq: int
    item: T = field(compare=False)


class DelayQueue(Generic[T]):
    def __init__(self) -> None:
        self._heap: list[_Entry[T]] = []
        self._seq = 0

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, not_before_ms: int, item: T) -> None:
        self._seq += 1
        heapq.heappush(self._heap, _Entry(not_before_ms, self._seq, item))

    def pop_due(self, now_ms: int) -> list[T]:
        due: list[T] = []
        while self._heap and self._heap[0].not_before_ms <= now_ms:
            due.append(heapq.heappop(self._heap).item)
        return due

    def next_due_ms(self) -> int | None:
        return self._heap[0].not_before_ms if self._heap else None

    def keep_where(self, predicate: Callable[[T], bool]) -> None:
        self._heap = [e for e in self._heap if predicate(e.item)]
        heapq.heapify(self._heap)

    def take_where(self, predicate: Callable[[T], bool]) -> list[T]:
        """Remove and return the items matching `predicate`, soonest first."""
        taken = sorted(e for e in self._heap if predicate(e.item))
        self.keep_where(lambda item: not predicate(item))
        return [e.item for e in taken]

    def clear(self) -> None:
        self._heap.clear()
