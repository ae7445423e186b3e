"""A bounded map that survives scans: W-TinyLFU, bounded in entries and in bytes, with a TTL.

The embedding cache's in-process tier. A least-recently-used map fails the cache's main case,
re-ingesting a corpus larger than it: each entry is evicted just before the second pass asks
for it, so nothing hits. Here a new entry waits in a small LRU window (1% of the bounds); when
it leaves the window it enters the main area only if a frequency sketch says it was looked up
more often than the main area's next victim. A second pass in the same order therefore finds
what the first pass left in the main area (about as many entries as fit), instead of nothing.
The main area is a segmented LRU: entries hit there are protected (80% of it) from entries
seen once (probation).

The sketch counts look-ups (not stores, nor peeks: a miss's store, or its text looked up
again before its call, would count it twice), four rows
of counters up to 15, each keeping the lowest count it can (conservative update); every
`SAMPLE_FACTOR` x `max_items` look-ups all counts are halved, so what was popular long ago
gives way. A small window loses texts asked for again soon but only once before (an upstream
retry); so, as Caffeine does, a hill climber resizes the window after each sample of
look-ups, in the direction that raised the hit ratio (`WindowClimber`). Pure: every call
takes the current time.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")

WINDOW_SHARE = 0.01  # of both bounds, for the admission window at first (Caffeine's start)
MAX_WINDOW_SHARE = 0.8
PROTECTED_SHARE = 0.8  # of the main area, for entries hit again there
SAMPLE_FACTOR = 10  # look-ups per entry of max_items between two halvings of the sketch
# The window's hill climber (Caffeine's constants): a step is this share of the bounds at
# first and after a jump of the hit ratio by RESTART_DELTA or more, and shrinks by
# STEP_DECAY each sample otherwise; a sample is max_items look-ups, at least MIN_SAMPLE.
STEP_SHARE = 0.0625
STEP_DECAY = 0.98
RESTART_DELTA = 0.05
MIN_SAMPLE = 1_000
_MAX_COUNT = 15
_ROWS = 4
_SEEDS = (0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93)
_MASK64 = (1 << 64) - 1
_HALVE = bytes(i >> 1 for i in range(256))  # bytes.translate table: every counter halved


class FrequencySketch(Generic[K]):
    """How often each key was looked up, approximately (a count-min sketch), in little memory:
    four bytes a slot, `width` slots per row, never fewer than the count."""

    def __init__(self, max_items: int) -> None:
        bits = max(4, (4 * max_items - 1).bit_length())
        self._width = 1 << bits
        self._shift = 64 - bits
        self._counts = bytearray(_ROWS * self._width)
        self._sample = SAMPLE_FACTOR * max_items
        self._additions = 0

    def _slots(self, key: K) -> list[int]:
        h = hash(key) & _MASK64
        width, shift = self._width, self._shift
        return [row * width + (((h * seed) & _MASK64) >> shift) for row, seed in enumerate(_SEEDS)]

    def frequency(self, key: K) -> int:
        counts = self._counts
        return min(counts[slot] for slot in self._slots(key))

    def increment(self, key: K) -> None:
        counts = self._counts
        slots = self._slots(key)
        low = min(counts[slot] for slot in slots)
        if low < _MAX_COUNT:
            for slot in slots:
                if counts[slot] == low:
                    counts[slot] = low + 1
        self._additions += 1
        if self._additions >= self._sample:
            self._counts = bytearray(self._counts.translate(_HALVE))
            self._additions //= 2


class WindowClimber:
    """Where the window's share should go: after each sample of look-ups, a step in the
    direction that last raised the hit ratio, reversed when it fell, none while it holds
    (a scan's first pass hits nothing: no reason to move)."""

    def __init__(self, sample: int) -> None:
        self._sample = sample
        self._hits = 0
        self._lookups = 0
        self._previous: float | None = None
        self._direction = 1
        self._step = STEP_SHARE

    def record(self, hit: bool) -> float:
        """Count a look-up; the change of the window's share it calls for (mostly 0)."""
        self._hits += hit
        self._lookups += 1
        if self._lookups < self._sample:
            return 0.0
        ratio = self._hits / self._lookups
        self._hits = self._lookups = 0
        previous, self._previous = self._previous, ratio
        if previous is None or ratio == previous:
            return 0.0
        if ratio < previous:
            self._direction = -self._direction
        change = self._direction * self._step
        self._step = (
            STEP_SHARE if abs(ratio - previous) >= RESTART_DELTA else self._step * STEP_DECAY
        )
        return change


class _Entry(Generic[V]):
    __slots__ = ("expires", "value", "weight")

    def __init__(self, value: V, weight: int, expires: float) -> None:
        self.value = value
        self.weight = weight
        self.expires = expires


class _Segment(Generic[K, V]):
    """One LRU list (oldest first) and the weight of what it holds."""

    __slots__ = ("entries", "weight")

    def __init__(self) -> None:
        self.entries: OrderedDict[K, _Entry[V]] = OrderedDict()
        self.weight = 0

    def __len__(self) -> int:
        return len(self.entries)

    def add(self, key: K, entry: _Entry[V]) -> None:
        self.entries[key] = entry
        self.weight += entry.weight

    def remove(self, key: K) -> _Entry[V]:
        entry = self.entries.pop(key)
        self.weight -= entry.weight
        return entry

    def oldest(self) -> K | None:
        return next(iter(self.entries), None)


class TinyLfuCache(Generic[K, V]):
    def __init__(
        self, max_items: int, max_weight: int, ttl_s: float, weigh: Callable[[K, V], int]
    ) -> None:
        """At most `max_items` entries whose `weigh` adds up to at most `max_weight`, each
        forgotten `ttl_s` after it was stored (0: never)."""
        if max_items < 1:
            raise ValueError(f"max_items must be at least 1, got {max_items}")
        if max_weight < 1:
            raise ValueError(f"max_weight must be at least 1, got {max_weight}")
        self._ttl_s = ttl_s
        self._weigh = weigh
        self._max_items = max_items
        self._max_weight = max_weight
        self._window: _Segment[K, V] = _Segment()
        self._probation: _Segment[K, V] = _Segment()
        self._protected: _Segment[K, V] = _Segment()
        self._where: dict[K, _Segment[K, V]] = {}
        self._sketch: FrequencySketch[K] = FrequencySketch(max_items)
        self._climber = WindowClimber(max(MIN_SAMPLE, max_items))
        self._resize(WINDOW_SHARE)

    @property
    def window_share(self) -> float:
        return self._window_share

    def __len__(self) -> int:
        return len(self._where)

    @property
    def weight(self) -> int:
        return self._window.weight + self._probation.weight + self._protected.weight

    def get(self, key: K, now: float) -> V | None:
        value = self._look_up(key, now)
        change = self._climber.record(value is not None)
        if change:
            self._resize(min(MAX_WINDOW_SHARE, max(WINDOW_SHARE, self._window_share + change)))
        return value

    def _look_up(self, key: K, now: float) -> V | None:
        self._sketch.increment(key)
        segment = self._where.get(key)
        if segment is None:
            return None
        entry = segment.entries[key]
        if entry.expires <= now:
            self._drop(key)
            return None
        if segment is self._probation:
            self._probation.remove(key)
            self._protected.add(key, entry)
            self._where[key] = self._protected
            self._demote_protected()
        else:
            segment.entries.move_to_end(key)
        return entry.value

    def get_many(self, keys: Sequence[K], now: float) -> list[V | None]:
        return [self.get(key, now) for key in keys]

    def peek(self, key: K, now: float) -> V | None:
        """The value, if held and not expired, as no access: the sketch, the window's
        climber and the segments stay as they were. For a text looked up again before its
        call (a second look-up of one request: counted, its text counted twice)."""
        segment = self._where.get(key)
        if segment is None:
            return None
        entry = segment.entries[key]
        return entry.value if entry.expires > now else None

    def put(self, key: K, value: V, now: float) -> int:
        """Store `value` (not at all if it alone outweighs the bound); how many entries were
        evicted to stay within the bounds (the new one included, when it loses admission)."""
        weight = self._weigh(key, value)
        if key in self._where:
            self._drop(key)
        if weight > self._max_weight:
            return 0
        expires = now + self._ttl_s if self._ttl_s > 0 else float("inf")
        self._window.add(key, _Entry(value, weight, expires))
        self._where[key] = self._window
        return self._admit_from_window(now)

    def put_many(self, entries: Iterable[tuple[K, V]], now: float) -> int:
        return sum(self.put(key, value, now) for key, value in entries)

    def _admit_from_window(self, now: float) -> int:
        evicted = 0
        window = self._window
        while len(window) > self._window_items or (
            len(window) > 1 and window.weight > self._window_weight
        ):
            candidate = window.oldest()
            assert candidate is not None
            entry = window.remove(candidate)
            admitted = True
            while not self._main_has_room(entry.weight):
                victim = self._probation.oldest()
                if victim is None:
                    victim = self._protected.oldest()
                if victim is None:
                    admitted = False
                    break
                victim_entry = self._where[victim].entries[victim]
                if victim_entry.expires <= now:
                    self._drop(victim)  # expired: no contest, and not an eviction
                elif self._sketch.frequency(candidate) > self._sketch.frequency(victim):
                    self._drop(victim)
                    evicted += 1
                else:
                    admitted = False
                    break
            if admitted:
                self._probation.add(candidate, entry)
                self._where[candidate] = self._probation
            else:
                del self._where[candidate]
                evicted += 1
        # A lone window entry heavier than the window's share takes room from the main area.
        while self.weight > self._max_weight:
            victim = self._probation.oldest()
            if victim is None:
                victim = self._protected.oldest()
            assert victim is not None  # the window alone never outweighs the bound
            self._drop(victim)
            evicted += 1
        return evicted

    def _resize(self, window_share: float) -> None:
        """Split both bounds between the window and the main area anew. A larger window takes
        the main area's oldest entries (nothing leaves the cache); a smaller one gives its
        oldest to admission at the next store."""
        self._window_share = window_share
        self._window_items = max(1, int(self._max_items * window_share))
        self._window_weight = int(self._max_weight * window_share)
        self._main_items = self._max_items - self._window_items
        self._main_weight = self._max_weight - self._window_weight
        self._protected_items = int(self._main_items * PROTECTED_SHARE)
        self._protected_weight = int(self._main_weight * PROTECTED_SHARE)
        main = (self._probation, self._protected)
        while sum(map(len, main)) > self._main_items or (
            sum(m.weight for m in main) > self._main_weight
        ):
            segment = self._probation if self._probation.entries else self._protected
            key = segment.oldest()
            assert key is not None
            self._window.add(key, segment.remove(key))
            self._window.entries.move_to_end(key, last=False)
            self._where[key] = self._window
        self._demote_protected()

    def _main_has_room(self, weight: int) -> bool:
        items = len(self._probation) + len(self._protected)
        held = self._probation.weight + self._protected.weight
        return items < self._main_items and held + weight <= self._main_weight

    def _demote_protected(self) -> None:
        protected = self._protected
        while len(protected) > 1 and (
            len(protected) > self._protected_items or protected.weight > self._protected_weight
        ):
            key = protected.oldest()
            assert key is not None
            self._probation.add(key, protected.remove(key))
            self._where[key] = self._probation

    def _drop(self, key: K) -> None:
        self._where.pop(key).remove(key)
