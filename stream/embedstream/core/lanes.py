"""Buckets of buffered items: one per (lane, model, encoding format, dimensions, and the
provider-specific request fields user, input_type and task).

A batch is always cut from one bucket, so a call never mixes any of them; inside a bucket the
sources (input topics) share its calls by weight. Pure data structures; the batcher shell
decides when to cut.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Mapping
from enum import IntEnum, StrEnum
from itertools import islice
from operator import itemgetter
from typing import Generic, NamedTuple, TypeVar

from embedstream.core.shares import joining_level, levels_after, share_order, trickle_sources

T = TypeVar("T")


class Priority(IntEnum):
    """The request lanes; the lower value is served first. ONLINE is the HTTP callers' lane
    (`embedstream.online`), HIGH and LOW the request topics', BACKFILL a migration's re-embed
    of the documents topic into a new index generation (`kafka/backfill/feed.py`): it takes what
    the others leave."""

    ONLINE = 0
    HIGH = 1
    LOW = 2
    BACKFILL = 3

    @property
    def label(self) -> str:
        """The lane's name in metrics labels, headers and the CLI: "online", "high", "low",
        "backfill"."""
        return self.name.lower()


class InputLane(StrEnum):
    """What an input topic feeds: a request lane, or the retry topic. The value is the ``lane``
    label of the consumer-lag metrics."""

    HIGH = "high"
    LOW = "low"
    RETRY = "retry"
    BACKFILL = "backfill"  # the documents topic as a migration's backfill reads it

    @property
    def priority(self) -> Priority:
        """The lane whose backlog this topic's lag adds to (retries count as bulk work)."""
        if self is InputLane.BACKFILL:
            return Priority.BACKFILL
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


# A source of items: the input topic its request came in on (None: one unnamed source, as in
# the in-process client). Calls are shared between the sources of a bucket by weight.
Source = str | None


class Bucket(Generic[T]):
    """The items of one bucket, in the order the next calls take them.

    With one source (the usual case, and the fast path: one deque, no bookkeeping) that is
    the order they came in. Once two sources have items, each has its queue and every call
    takes its inputs by weighted deficit between them (`core/shares.py`: `share_order`), so
    a trickle rides the next call beside a flood; order within a source is never changed.
    When only one source is left, the bucket is back on the fast path.
    """

    def __init__(self, key: BucketKey, weights: Mapping[str, float] | None = None) -> None:
        self.key = key
        self._weights: dict[Source, float] = {k: w for k, w in (weights or {}).items()}
        self._items: deque[Pending[T]] = deque()  # fast path: every item, of `_source`
        self._source: Source = None
        # Two or more sources with items: each one's queue, its level (inputs it was given
        # over its weight), and the order of the next picks, kept until the bucket changes.
        self._queues: dict[Source, deque[Pending[T]]] | None = None
        self._levels: dict[Source, float] = {}
        self._count = 0
        self._plan: list[Source] = []
        self._planned_for = 0  # the limit `_plan` was computed for (0: none)

    def __len__(self) -> int:
        return len(self._items) if self._queues is None else self._count

    def __iter__(self) -> Iterator[Pending[T]]:
        """The items in the order calls would take them (now, with no more arriving)."""
        if self._queues is None:
            return iter(self._items)
        heads = {s: iter(q) for s, q in self._queues.items()}
        return iter([next(heads[s]) for s in self._order(self._count)])

    def add(self, item: Pending[T], source: Source = None) -> None:
        queues = self._queues
        if queues is None:
            if source == self._source or not self._items:
                self._source = source
                self._items.append(item)
                return
            queues = self._queues = {self._source: self._items}
            self._levels = {self._source: 0.0}
            self._count = len(self._items)
            self._planned_for = 0
        queue = queues.get(source)
        if queue is None:
            queue = queues[source] = deque()
            self._levels[source] = joining_level(self._levels)
            self._planned_for = 0
        elif len(queue) < self._planned_for:  # (a longer queue's extra item is past the plan)
            self._planned_for = 0
        queue.append(item)
        self._count += 1

    def add_all(self, items: list[Pending[T]], source: Source = None) -> None:
        """`add` for each of ``items``, in order (one source's)."""
        if self._queues is None and (source == self._source or not self._items):
            self._source = source
            self._items.extend(items)  # the fast path, all at once
            return
        for item in items:
            self.add(item, source)

    @property
    def oldest_arrival(self) -> float:
        if self._queues is None:
            return self._items[0].arrival
        return min(q[0].arrival for q in self._queues.values())

    def token_counts(self, limit: int) -> list[int]:
        """Token estimates of the first ``limit`` items (enough to size one batch)."""
        if self._queues is None:
            return list(map(_tokens, islice(self._items, limit)))
        heads = {s: iter(q) for s, q in self._queues.items()}
        return [next(heads[s]).tokens for s in self._order(limit)]

    def take(self, n: int) -> list[Pending[T]]:
        if self._queues is None:
            return [self._items.popleft() for _ in range(min(n, len(self._items)))]
        return self._take_in(self._order(n))

    def trickle_count(self) -> int:
        """Items of the trickles beside a flood (`core/shares.py` trickle_sources): what
        `take_trickle` would take; 0 with one source, or none that small."""
        if self._queues is None:
            return 0
        counts = {s: len(q) for s, q in self._queues.items()}
        return sum(counts[s] for s in trickle_sources(counts, self._weights))

    def take_trickle(self, n: int) -> list[Pending[T]]:
        """Up to ``n`` items of the trickles only, oldest source first, each in its order: a
        call of their own, so a trickle never waits for a flood-sized call to finish."""
        if self._queues is None:
            return []
        queues = self._queues
        counts = {s: len(q) for s, q in queues.items()}
        trickles = trickle_sources(counts, self._weights)
        order_of_sources = sorted(trickles, key=lambda s: queues[s][0].arrival)
        order: list[Source] = []
        for source in order_of_sources:
            order += [source] * min(counts[source], n - len(order))
        return self._take_in(order)

    def _take_in(self, order: list[Source]) -> list[Pending[T]]:
        """The next item of each source of ``order`` in turn (two or more sources)."""
        assert self._queues is not None
        queues = self._queues
        taken = [queues[s].popleft() for s in order]
        self._count -= len(taken)
        self._levels = levels_after(self._levels, order, self._weights)
        self._planned_for = 0
        self._forget_empty()
        return taken

    def drop_where(self, predicate: Callable[[T], bool]) -> list[Pending[T]]:
        dropped: list[Pending[T]] = []
        queues = self._queues if self._queues is not None else {self._source: self._items}
        for source, queue in queues.items():
            kept: deque[Pending[T]] = deque()
            for item in queue:
                (dropped if predicate(item.payload) else kept).append(item)
            queues[source] = kept
        if self._queues is None:
            self._items = queues[self._source]
        else:
            self._count -= len(dropped)
            self._planned_for = 0
            self._forget_empty()
        return dropped

    def _order(self, limit: int) -> list[Source]:
        """The sources of the next ``limit`` picks (two or more sources with items)."""
        if self._planned_for < limit:
            assert self._queues is not None
            # Ties between levels go to the source with the oldest item.
            queued = sorted(self._queues.items(), key=_head_arrival)
            counts = [(s, len(q)) for s, q in queued]
            self._plan = share_order(counts, self._levels, self._weights, limit)
            self._planned_for = limit
        return self._plan[:limit]

    def _forget_empty(self) -> None:
        """Sources left with nothing lose their level (they rejoin at the lowest); with one
        source left, back to the fast path."""
        assert self._queues is not None
        for source in [s for s, q in self._queues.items() if not q]:
            del self._queues[source]
            del self._levels[source]
        if len(self._queues) <= 1:
            self._source, self._items = next(iter(self._queues.items()), (None, deque()))
            self._queues = None
            self._levels = {}


_tokens = itemgetter(0)  # a Pending's `tokens`, read in C over a whole bucket


def _head_arrival(entry: tuple[Source, deque[Pending[T]]]) -> float:
    return entry[1][0].arrival
