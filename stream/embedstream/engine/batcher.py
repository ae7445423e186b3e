"""The asyncio shell around the pure policy: buffers items, asks the policy, launches calls.

It owns no I/O of its own: ``dispatch`` (the batch-call path) is injected, and so are the
clock, the backlog source (consumer lag), the observer of cut batches and the provider budget
(`core/budget.py`): its plan says whether, and for which lane, another call may start, and
each call holds a lease of it. That keeps every timing rule testable.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from operator import attrgetter
from typing import Any, Generic, TypeVar

from embedstream.core.arrivals import ArrivalRate
from embedstream.core.budget import Lease, LeaseWait, ProviderBudget
from embedstream.core.costmodel import CostModels, cost_key
from embedstream.core.governor import Governor
from embedstream.core.lanes import Bucket, BucketKey, Pending, Priority, Source
from embedstream.core.observer import EngineObserver, NullObserver
from embedstream.core.policy import (
    BatchLimits,
    Flush,
    FlushReason,
    Wait,
    batch_length,
    decide,
    fill_target,
    fill_wait,
    spread_length,
)
from embedstream.engine.budget_local import LocalBudget

T = TypeVar("T")
Dispatch = Callable[[BucketKey, list[Pending[T]], FlushReason], Awaitable[None]]

log = logging.getLogger(__name__)


class Batcher(Generic[T]):
    def __init__(
        self,
        limits: BatchLimits,
        dispatch: Dispatch[T],
        *,
        budget: ProviderBudget | None = None,
        max_concurrency: int = 4,
        clock: Callable[[], float] = time.monotonic,
        backlog: Callable[[Priority], int] = lambda lane: 0,
        observer: EngineObserver | None = None,
        cost: CostModels | None = None,
        observe_dispatch: bool = True,
        source_weights: Mapping[str, float] | None = None,
    ) -> None:
        self._limits = limits
        self._dispatch = dispatch
        self._clock = clock
        self.budget = budget or LocalBudget(Governor(max_concurrency=max_concurrency, clock=clock))
        self.governor = self.budget.plan  # what the cuts are planned with
        self.budget.on_change(self.poke)  # a slot freed elsewhere in a fleet: plan again
        self._backlog = backlog
        self._observer = observer or NullObserver()
        self._awaited = 0  # jobs that will be added again later (retries waiting in memory)
        # Call latencies per (model, format, dimensions), learned online; they decide how a
        # backlog is cut over idle slots. Unless the caller reports real call latencies to
        # `cost` itself, each dispatch's duration (how long it held its slot) is observed.
        self.cost = cost or CostModels()
        self._observe_dispatch = observe_dispatch
        self._buckets: dict[BucketKey, Bucket[T]] = {}
        # The sources (input topics) of a bucket share its calls by these weights.
        self._source_weights = dict(source_weights or {})
        # How fast each lane's items come, and the call size that keeps its slots from all
        # being busy at that rate (core/policy.fill_target).
        self._arrivals = {lane: ArrivalRate() for lane in Priority}
        self._fill_targets: dict[BucketKey, int | None] = {}
        self._buffered = 0
        self._buffered_by_priority: dict[Priority, int] = dict.fromkeys(Priority, 0)
        self._in_flight: dict[asyncio.Task[None], list[Pending[T]]] = {}  # calls and their items
        self._wake = asyncio.Event()
        self._draining = False
        self._abandoned = False
        self._hurrying = False  # flush everything buffered now, then go back to the policy
        # Buckets cut into several pieces in the current launch_due pass: the remaining
        # pieces of that plan go out in the same pass, whatever their own wait budget says.
        self._spreading: dict[BucketKey, FlushReason] = {}
        # Observes every cut batch (metrics): key, items, reason, and the clock reading.
        self.on_flush: Callable[[BucketKey, list[Pending[T]], FlushReason, float], None] | None = (
            None
        )
        # Runs beside `run`, cancelled when it ends (the outage probe: engine/probe.py).
        self.companion: Callable[[], Coroutine[Any, Any, None]] | None = None
        # Buckets whose items wait (a model the provider does not serve: core/model_pauses.py).
        self.paused: Callable[[BucketKey], bool] = lambda key: False

    @property
    def limits(self) -> BatchLimits:
        return self._limits

    @property
    def buffered(self) -> int:
        return self._buffered

    def buffered_in(self, priority: Priority) -> int:
        return self._buffered_by_priority[priority]

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def add(self, key: BucketKey, tokens: int, payload: T, source: Source = None) -> None:
        """Buffer one item; `source` is the input topic it came in on (None: the only one)."""
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = Bucket(key, self._source_weights)
        bucket.add(Pending(tokens, self._clock(), payload), source)
        self._buffered += 1
        self._buffered_by_priority[key.priority] += 1
        self._arrivals[key.priority].add(self._clock())
        self._wake.set()

    def add_all(self, key: BucketKey, source: Source, entries: Sequence[tuple[int, T]]) -> None:
        """Buffer items of one bucket and source, in order, arriving now: `add` for each of
        (tokens, payload), with one clock reading and one update of the counts for all."""
        if not entries:
            return
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = Bucket(key, self._source_weights)
        now = self._clock()
        # Pending(tokens, now, payload), without the call of its generated __new__ (the
        # largest part of building one, for every item buffered).
        pending = [_tuple_new(Pending, (tokens, now, payload)) for tokens, payload in entries]
        bucket.add_all(pending, source)
        self._buffered += len(entries)
        self._buffered_by_priority[key.priority] += len(entries)
        self._arrivals[key.priority].add(now, len(entries))
        self._wake.set()

    def drop_where(self, predicate: Callable[[T], bool]) -> list[T]:
        """Remove buffered (not yet sent) items, e.g. those of revoked partitions."""
        dropped: list[T] = []
        for bucket in self._buckets.values():
            gone = bucket.drop_where(predicate)
            self._buffered_by_priority[bucket.key.priority] -= len(gone)
            dropped.extend(p.payload for p in gone)
        self._buffered -= len(dropped)
        return dropped

    def expect(self) -> None:
        """A job will be added later (an in-memory retry): `run` keeps going until it is."""
        self._awaited += 1

    def add_expected(self, key: BucketKey, tokens: int, payload: T) -> None:
        """Add a job announced with :meth:`expect`."""
        self._awaited -= 1
        self.add(key, tokens, payload)

    def forget_expected(self) -> None:
        """A job announced with :meth:`expect` will not come after all."""
        self._awaited -= 1
        self._wake.set()

    def drain(self) -> None:
        """Flush everything now, ignoring wait budgets; `run` returns once all calls finish."""
        self._draining = True
        self._wake.set()

    def hurry(self) -> None:
        """Send everything buffered now, ignoring wait budgets (e.g. before a handoff)."""
        self._hurrying = True
        self._wake.set()

    def abandon(self) -> list[T]:
        """Give up (a bounded shutdown): cancel running calls, drop what is buffered and let
        `run` return. Their items stay unfinished; all of them, buffered or in a cancelled
        call, are returned."""
        self._abandoned = True
        cancelled = [p.payload for items in self._in_flight.values() for p in items]
        for task in self._in_flight:
            task.cancel()
        self._wake.set()
        return cancelled + self.drop_where(lambda payload: True)

    def poke(self) -> None:
        """Re-evaluate now (e.g. the governor's gate or limits changed from outside)."""
        self._wake.set()

    async def run(self) -> None:
        await self.budget.open()
        companion = asyncio.create_task(self.companion()) if self.companion else None
        try:
            while not self._abandoned and not (
                self._draining and self._buffered == 0 and not self._in_flight and not self._awaited
            ):
                timeout = self.launch_due()
                # Safe: nothing can add items between deciding and clearing (no await).
                self._wake.clear()
                await self._woken(timeout)
        finally:
            if companion is not None:
                companion.cancel()
                await asyncio.gather(companion, return_exceptions=True)
            if self._in_flight:
                await asyncio.gather(*list(self._in_flight), return_exceptions=True)
            await self.budget.close()

    async def _woken(self, wake_in_s: float | None) -> None:
        """Until the next event, or `wake_in_s` seconds. A timer that sets the event, not
        `asyncio.wait_for`, which makes a task of every wait."""
        if wake_in_s is None:
            await self._wake.wait()
            return
        timer = asyncio.get_running_loop().call_later(wake_in_s, self._wake.set)
        try:
            await self._wake.wait()
        finally:
            timer.cancel()

    def launch_due(self) -> float | None:
        """Launch every due batch the governor admits; return when to look again (None: on
        the next event, i.e. an added item or a finished call)."""
        self._spreading.clear()
        for lane, count in self._buffered_by_priority.items():
            if count:  # a lane with items waiting keeps its reservations (core/reservations)
                self.governor.saw(lane)
        while True:
            if self._buffered == 0:
                self._hurrying = False
            blocked = self.governor.blocked_for()
            if blocked > 0:
                self._spreading.clear()
                return blocked
            ready, soonest = self._ready_by_lane(self._clock())
            picked = self.governor.pick(ready) if ready else None
            if picked is None:
                self._spreading.clear()
                return soonest
            self._launch(*ready[picked])

    def depth(self, lane: Priority) -> int:
        """The backlog behind a lane's oldest item: the buffered items that the lane's free
        call slots could not take at once, plus the consumer lag feeding it.

        Items the free slots can all take now are no backlog: waiting for batch-mates would
        only leave a slot idle (with 50 callers each awaiting its vector, nobody else comes
        until they are answered). Per lane, so a bulk backlog never delays a high item."""
        capacity = self.governor.free_slots(lane) * self._limits.max_items
        behind = self._buffered_by_priority[lane] - 1 - capacity
        return max(behind, 0) + self._backlog(lane)

    def _ready_by_lane(
        self, now: float
    ) -> tuple[dict[Priority, tuple[Bucket[T], FlushReason]], float | None]:
        """The most urgent due bucket of each lane, and the soonest time another falls due."""
        ready: dict[Priority, tuple[Bucket[T], FlushReason]] = {}
        soonest: float | None = None
        depths: dict[Priority, int] = {}
        for bucket in sorted(self._buckets.values(), key=_bucket_order):
            lane = bucket.key.priority
            if not bucket or lane in ready or self.paused(bucket.key):
                continue
            if bucket.key in self._spreading:  # the rest of a plan goes now, under its reason
                ready[lane] = (bucket, self._spreading[bucket.key])
                continue
            counts = bucket.token_counts(self._limits.max_items + 1)
            depth = depths.get(lane)
            if depth is None:
                depth = depths[lane] = self.depth(lane)
            filling = self._fill_wait(bucket, counts, now)
            decision = decide(self._limits, counts, bucket.oldest_arrival, now, depth, filling)
            if isinstance(decision, Flush):
                ready[lane] = (bucket, decision.reason)
            elif self._draining or self._hurrying:
                ready[lane] = (bucket, FlushReason.DRAIN)
            elif isinstance(decision, Wait):
                soonest = decision.seconds if soonest is None else min(soonest, decision.seconds)
        if ready:
            # An upper lane's item never waits for batch-mates while a lower lane's work takes
            # call slots: it goes now, overtaken by at most the calls the shares allow. Not low
            # behind the backfill: bulk work, its calls fill while the backfill has one slot.
            lowest = max(ready)
            for bucket in sorted(self._buckets.values(), key=_bucket_order):
                lane = bucket.key.priority
                if (
                    bucket and lane < lowest and lane not in ready and lane < Priority.LOW
                    and not self.paused(bucket.key)
                ):  # fmt: skip
                    ready[lane] = (bucket, FlushReason.PRIORITY)
        if soonest is not None:
            soonest = max(soonest, 0.0005)  # never spin on a sub-millisecond remainder
        return ready, soonest

    def _fill_wait(self, bucket: Bucket[T], counts: list[int], now: float) -> float:
        """How long the bucket's oldest item may wait for its call to fill (0: no rule)."""
        if self._draining or self._hurrying:
            return 0.0
        lane = bucket.key.priority
        rate = self._arrivals[lane].per_s(now)
        cost = self.cost.cost(cost_key(bucket.key))
        slots = self.governor.lane_slots(lane)
        target = fill_target(rate, slots, cost, sum(counts) / len(counts), self._limits)
        self._fill_targets[bucket.key] = target
        in_flight = self.governor.lane_in_flight(lane)
        return fill_wait(len(bucket), target, rate, in_flight, self._limits)

    def _launch(self, bucket: Bucket[T], reason: FlushReason) -> None:
        counts = bucket.token_counts(self._limits.max_items + 1)
        lane = bucket.key.priority
        slots = self.governor.idle_slots(lane)
        cost = self.cost.cost(cost_key(bucket.key))
        least = self._fill_targets.get(bucket.key)
        size = spread_length(counts, len(bucket), slots, self._limits, cost, least=least or 1)
        # Smaller calls while an upper lane is active (core/reservations.py).
        size = min(size, self.governor.call_cap(lane, self._limits.max_items))
        # A trickle beside a flood gets a call of its own: seated in a flood-sized call it
        # would wait as long as the flood's calls take.
        trickle = bucket.trickle_count()
        items = bucket.take_trickle(min(size, trickle)) if trickle else bucket.take(size)
        if bucket and size < batch_length(counts, self._limits):
            self._spreading[bucket.key] = reason  # a piece of a plan: the rest follow now
        else:
            self._spreading.pop(bucket.key, None)
        self._buffered -= len(items)
        self._buffered_by_priority[bucket.key.priority] -= len(items)
        now = self._clock()
        tokens = sum(map(_tokens, items))
        waits = [now - arrival for arrival in map(_arrival, items)]
        self._observer.observe_flush(lane.label, reason, len(items), tokens, waits)
        if self.on_flush is not None:
            self.on_flush(bucket.key, items, reason, now)
        lease = self.budget.admit(lane, len(items), tokens)
        task = asyncio.create_task(self._call(bucket.key, items, reason, lease, tokens))
        self._in_flight[task] = items

    async def _call(
        self,
        key: BucketKey,
        items: list[Pending[T]],
        reason: FlushReason,
        lease: Lease | None,
        tokens: int,
    ) -> None:
        try:
            if lease is None:  # the fleet decides: ask, and wait for a slot if need be
                lease = await self._ask(key.priority, len(items), tokens)
            if lease.go_in_s > 0:
                await asyncio.sleep(lease.go_in_s)  # RPM/TPM budget: hold the slot, not the loop
            started = self._clock()
            await self._dispatch(key, items, reason)
            if self._observe_dispatch:
                now = self._clock()
                self.cost.observe(cost_key(key), tokens, len(items), now - started, now)
        except Exception:
            # The items stay unfinished, so their offsets are not committed: redone later.
            log.exception("dispatch of a batch of %d failed", len(items))
        finally:
            oldest = self._clock() - min(map(_arrival, items)) if items else None
            self.budget.release(key.priority, lease, oldest)
            task = asyncio.current_task()
            if task is not None:
                self._in_flight.pop(task, None)
            self._wake.set()

    async def _ask(self, lane: Priority, inputs: int, tokens: int) -> Lease:
        while True:
            answer = await self.budget.ask(lane, inputs, tokens)
            if not isinstance(answer, LeaseWait):
                return answer
            await self.budget.woken(answer)


_tokens = attrgetter("tokens")  # of a Pending, read in C over a whole batch
_tuple_new = tuple.__new__
_arrival = attrgetter("arrival")


def _bucket_order(bucket: Bucket[T]) -> tuple[int, float]:
    return (int(bucket.key.priority), bucket.oldest_arrival if bucket else math.inf)
