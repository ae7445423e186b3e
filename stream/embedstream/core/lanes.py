"""Buckets of buffered items: one per (priority, model, encoding format, dimensions, and the
provider-specific request fields user, input_type and task).

A batch is always cut from one bucket, so a call never mixes any of them. Pure data structures;
the batcher shell decides when to cut.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from enum import IntEnum, StrEnum
from typing import Generic, NamedTuple, TypeVar

T = TypeVar("T")


class Priority(IntEnum):
    """The two request lanes; the lower value is served first."""

    HIGH = 0
    LOW = 1

    @property
    def label(self) -> str:
        """The lane's name in metrics labels, headers and the CLI: "high" or "low"."""
        return self.name.lower()


class InputLane(StrEnum):
    """What an input topic feeds: a request lane, or the retry topic. The value is the ``lane``
    label of the consumer-lag metrics."""

    HIGH = "high"
    LOW = "low"
    RETRY = "retry"

    @property
    def priority(self) -> Priority:
        """The lane whose backlog this topic's lag adds to (retries count as bulk work)."""
        return Priority.HIGH if self is InputLane.HIGH else Priority.LOW


class BucketKey(NamedTuple):
    # A NamedTuple rather than a frozen dataclass: built and hashed once per item, so its
    # construction cost shows up directly in the engine's items/s.
    priority: Priority
    model: str
    encoding_format: str
    dimensions: int | None
    # Provider-specific fields a call sends once for all its inputs (see wire.REQUEST_PARAMETERS).
    user: str | None = None
    input_type: str | None = None
    task: str | None = None


class Pending(NamedTuple, Generic[T]):
    """One buffered item: its token estimate, arrival time (injected clock) and payload."""

    tokens: int
    arrival: float
    payload: T


class Bucket(Generic[T]):
    def __init__(self, key: BucketKey) -> None:
        self.key = key
        self._items: deque[Pending[T]] = deque()

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Pending[T]]:
        return iter(self._items)

    def add(self, item: Pending[T]) -> None:
        self._items.append(item)

    @property
    def oldest_arrival(self) -> float:
        return self._items[0].arrival

    def token_counts(self, limit: int) -> list[int]:
        """Token estimates of the first ``limit`` items (enough to size one batch)."""
        out: list[int] = []
        for item in self._items:
            if len(out) == limit:
                break
            out.append(item.tokens)
        return out

    def take(self, n: int) -> list[Pending[T]]:
        return [self._items.popleft() for _ in range(min(n, len(self._items)))]

    def drop_where(self, predicate: Callable[[T], bool]) -> list[Pending[T]]:
        kept: deque[Pending[T]] = deque()
        dropped: list[Pending[T]] = []
        for item in self._items:
            (dropped if predicate(item.payload) else kept).append(item)
        self._items = kept
        return dropped
