"""Fetching under backpressure: how much to ask for, which partitions to pause, lag.

Memory is bounded by pausing partitions (low priority first), never by dropping records: the
pure rules are in `embedstream.core.flow`; this module applies them to the consumer. Within a
lane, the topics feeding it share its buffer by weight (`embedstream.core.shares`): a topic
over its share pauses while another topic of its lane has work.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from embedstream.core.flow import fetch_budget, low_ceiling, partitions_to_pause
from embedstream.core.holdback import HoldBacks
from embedstream.core.lanes import InputLane, Priority
from embedstream.core.shares import sources_to_pause, sources_under_share
from embedstream.kafka.client.protocols import Consumer, Record
from embedstream.kafka.outputs.partitions import Assignment, PartitionState
from embedstream.settings import Settings
from embedstream.settings.derived import ITEM_RESIDENT_BYTES

log = logging.getLogger(__name__)

FETCH_TIMEOUT_MS = 100
# How fast the record-size estimate follows recent records (an exponential average).
RECORD_SIZE_SMOOTHING = 1 / 8
# A fetch takes its records in slices of about budget / (this x partitions), oldest first.
SLICES_PER_PARTITION = 4

Fetched = list[tuple[PartitionState, Sequence[Record]]]


class Fetcher:
    def __init__(
        self,
        consumer: Consumer,
        assignment: Assignment,
        settings: Settings,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._consumer = consumer
        self._clock = clock
        # Partitions paused because the schema registry could not be asked (hold_back).
        self._holds: HoldBacks[TopicPartition] = HoldBacks()
        self._waits: dict[TopicPartition, float] = {}  # (wait_at) paused until, monotonic
        self._assignment = assignment
        self._limit = settings.buffered_items_limit
        self._byte_limit = settings.max_buffered_bytes
        self._max_poll = settings.max_poll_records
        # Until records are seen, assume large ones: the first fetch must not overshoot.
        self._avg_record_bytes = settings.max_event_bytes / 4
        self._weights = settings.source_weight_map
        # Paused last round for being over their share: not a sign that the lane is paused
        # (its hysteresis would otherwise hold every topic of the lane paused).
        self._over_share_paused: set[TopicPartition] = set()
        # Low partitions of topics under their share of a lane shared with a flood: fetched
        # first, like high ones (see fetch).
        self._under_share: set[TopicPartition] = set()
        # The timestamp of the last record each partition handed over (_take_oldest_first).
        self._last_timestamps: dict[TopicPartition, int] = {}

    @property
    def pressure(self) -> int:
        """Held items, or the bytes held expressed as items if that is the tighter bound (each
        item's Python objects counted besides its value: see settings/derived.py)."""
        return self._pressure_of(list(self._assignment))

    @property
    def high_pressure(self) -> int:
        """The part of `pressure` held by high-priority input: what its reserve is measured by."""
        return self._pressure_of([s for s in self._assignment if s.lane is Priority.HIGH])

    def _pressure_of(self, states: Sequence[PartitionState]) -> int:
        items = sum(s.offsets.pending + s.chunks_held for s in states)
        held_bytes = sum(s.offsets.pending_bytes for s in states) + items * ITEM_RESIDENT_BYTES
        by_bytes = -(-held_bytes * self._limit // self._byte_limit)
        return max(items, by_bytes)

    def budget(self) -> int:
        """How many records the next fetch may bring without breaking the memory bounds."""
        low_fetching = any(not s.paused and s.lane is Priority.LOW for s in self._assignment)
        records = fetch_budget(
            held=self.pressure,
            high_held=self.high_pressure,
            limit=self._limit,
            low_fetching=low_fetching,
            max_poll=self._max_poll,
        )
        # Weigh each record by the byte limit too, given the size of recent records.
        cost = max(1.0, self._avg_record_bytes * self._limit / self._byte_limit)
        return int(records / cost)

    async def fetch(self, budget: int, stopping: asyncio.Event) -> Fetched | None:
        """One fetch, high-priority partitions first; None as soon as a stop is requested.

        The consumer hands over what it has buffered in the order its fetches completed, so
        under a low backlog a high record fetched later waits behind every low record fetched
        before it (seconds of them, in a flood on Apache Kafka): the high partitions, and
        those of a topic under its share of a lane another topic floods, are asked first,
        then the rest of the budget goes to every partition oldest first (`_take_oldest_first`)."""
        first_tps = [
            s.tp
            for s in self._assignment
            if not s.paused and (s.lane is Priority.HIGH or s.tp in self._under_share)
        ]
        got: dict[TopicPartition, list[Record]] = {}
        if first_tps:  # only what is already buffered: no wait
            ask = self._consumer.getmany(*first_tps, max_records=budget)
            first = await self._take(ask, stopping)
            if first is None:
                return None
            got = first
        left = budget - sum(len(records) for records in got.values())
        if left > 0 and not await self._take_oldest_first(got, left, stopping):
            return None
        fetched: Fetched = []
        for tp, records in got.items():
            if not records:
                continue
            state = self._assignment.get(tp)
            if state is None:
                self._rewind_if_assigned(tp, records[0].offset)
            elif state.floor is None:  # exactly-once, fence not up yet: read these later
                self._consumer.seek(tp, records[0].offset)
            elif not state.handing_off:  # the next owner reads those from the commit
                fetched.append((state, records))
        fetched.sort(key=lambda pair: pair[0].lane)
        return fetched

    async def _take_oldest_first(
        self, got: dict[TopicPartition, list[Record]], left: int, stopping: asyncio.Event
    ) -> bool:
        """Add up to ``left`` records to ``got``, a slice at a time from the unpaused partition
        whose last record handed over is the oldest (by its timestamp), so the partitions of a
        backlog are read in step, in about the order their records were written. aiokafka's
        own order hands over one partition's whole buffer before the next's, in whatever
        order their fetches completed: a corpus re-ingested reached the cache in another
        order than the first time, and the cache kept 23-27% of it where its policy keeps
        49% in the same order. Waits (at most FETCH_TIMEOUT_MS) only with nothing in hand.
        False: a stop was requested."""
        tps = [s.tp for s in self._assignment if not s.paused]
        piece = max(1, -(-left // (SLICES_PER_PARTITION * max(1, len(tps)))))
        self._last_timestamps = {
            tp: stamp for tp, stamp in self._last_timestamps.items() if tp in self._assignment
        }
        taken = await self._slices(got, tps, left, piece, stopping)
        if taken is None:
            return False
        if got:
            return True
        # Nothing buffered: wait for a partition's records (not for every one's), then go on.
        ask = self._consumer.getmany(timeout_ms=FETCH_TIMEOUT_MS, max_records=piece)
        first = await self._take(ask, stopping)
        if first is None:
            return False
        for tp, records in first.items():
            left -= self._hand_over(got, tp, records)
        return await self._slices(got, tps, left, piece, stopping) is not None

    async def _slices(
        self,
        got: dict[TopicPartition, list[Record]],
        tps: list[TopicPartition],
        left: int,
        piece: int,
        stopping: asyncio.Event,
    ) -> int | None:
        """Slices of ``piece`` records, oldest partition first, up to ``left`` or until none
        has more buffered; how many. None: a stop was requested."""
        last, taken = self._last_timestamps, 0
        open_ = dict.fromkeys(tps)
        while taken < left and open_:
            tp = min(open_, key=lambda tp: last.get(tp, -1))
            want = min(piece, left - taken)
            more = await self._take(self._consumer.getmany(tp, max_records=want), stopping)
            if more is None:
                return None
            found = self._hand_over(got, tp, more.get(tp, []))
            taken += found
            if found < want:
                del open_[tp]  # nothing more buffered: the others take the rest
        return taken

    def _hand_over(
        self, got: dict[TopicPartition, list[Record]], tp: TopicPartition, records: list[Record]
    ) -> int:
        if records:
            got.setdefault(tp, []).extend(records)
            self._last_timestamps[tp] = records[-1].timestamp
        return len(records)

    async def _take(
        self, getmany: Awaitable[Mapping[TopicPartition, Sequence[Record]]], stopping: asyncio.Event
    ) -> dict[TopicPartition, list[Record]] | None:
        """One consumer call's records, or None as soon as a stop is requested."""
        fetch = asyncio.ensure_future(getmany)
        stop_wait = asyncio.ensure_future(stopping.wait())
        done, _ = await asyncio.wait({fetch, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
        stop_wait.cancel()
        if fetch not in done:
            fetch.cancel()
            with contextlib.suppress(asyncio.CancelledError, KafkaError):
                await fetch
            return None
        return {tp: list(records) for tp, records in fetch.result().items()}

    def observe(self, record: Record) -> None:
        size = len(record.value or b"")
        self._avg_record_bytes += (size - self._avg_record_bytes) * RECORD_SIZE_SMOOTHING

    def _rewind_if_assigned(self, tp: TopicPartition, offset: int) -> None:
        """Records of a partition not tracked yet were skipped: if it is ours, read them again
        later rather than let the fetch position move past them."""
        if tp in self._consumer.assignment():
            self._consumer.seek(tp, offset)
            log.debug("rewound %s to %d: records arrived while it was not tracked", tp, offset)

    def update_lag(self, state: PartitionState, position: int) -> None:
        highwater = self._consumer.highwater(state.tp)
        if highwater is not None:
            state.lag = max(0, highwater - position)

    async def refresh_lag(self) -> None:
        """Lag of paused partitions, asked of the broker: they fetch nothing, so the high
        watermark that fetches carry would go stale exactly while backpressure holds."""
        stale = [s for s in self._assignment if s.paused]
        if not stale:
            return
        ends = await self._consumer.end_offsets([s.tp for s in stale])
        for state in stale:
            if state.live and state.tp in ends:
                position = await self._consumer.position(state.tp)
                state.lag = max(0, ends[state.tp] - position)

    def hold_back(self, state: PartitionState, offset: int, retry_after_s: float | None) -> None:
        """Read the partition again from ``offset`` after a hold (the registry is out): paused
        now, resumed by `apply_backpressure` once the hold ends."""
        wait = self._holds.hold(state.tp, self._clock(), retry_after_s)
        self._pause_at(state, offset)
        log.warning("schema registry unavailable: %s paused at offset %d for %.1fs",
                    state.tp, offset, wait)  # fmt: skip

    def wait_at(self, state: PartitionState, offset: int, seconds: float) -> None:
        """Read the partition again from ``offset`` in ``seconds`` (the batch lane measuring
        the sync path's pace): the same hold, without a backoff."""
        self._waits[state.tp] = self._clock() + seconds
        self._pause_at(state, offset)

    def _pause_at(self, state: PartitionState, offset: int) -> None:
        self._consumer.seek(state.tp, offset)
        if not state.paused:
            self._consumer.pause(state.tp)
            state.paused = True

    def apply_backpressure(self, *, provider_blocked: bool) -> None:
        states = {s.tp: s for s in self._assignment}
        paused = {tp for tp, s in states.items() if s.paused}
        # Paused until fenced (exactly-once): fetching them would only be read again later.
        # Held back after a registry outage: until the hold ends.
        now = self._clock()
        self._waits = {tp: until for tp, until in self._waits.items() if until > now}
        held = self._holds.held(now) | set(self._waits)
        forced = self._assignment.fencing() | (held & set(states))
        wanted = forced | partitions_to_pause(
            held=self.pressure,
            high_held=self.high_pressure,
            limit=self._limit,
            provider_blocked=provider_blocked,
            assigned=set(states) - forced,
            paused=paused - forced - self._over_share_paused,
            is_high=lambda tp: states[tp].lane is Priority.HIGH,
        )
        self._over_share_paused = self._over_share(set(states) - forced, paused)
        wanted |= self._over_share_paused
        to_pause, to_resume = wanted - paused, paused - wanted
        if to_pause:
            self._consumer.pause(*to_pause)
            log.info("paused %d partitions (held %d)", len(to_pause), self._assignment.held)
        if to_resume:
            self._consumer.resume(*to_resume)
            log.info("resumed %d partitions (held %d)", len(to_resume), self._assignment.held)
        for tp, state in states.items():
            state.paused = tp in wanted

    def _over_share(
        self, assigned: set[TopicPartition], paused: set[TopicPartition]
    ) -> set[TopicPartition]:
        """The partitions of topics holding more than their share of their lane's buffer
        while another topic of the lane has work (the retry topic is a lane of its own)."""
        found: set[TopicPartition] = set()
        self._under_share = set()
        for lane in (InputLane.HIGH, InputLane.LOW):
            states = [s for s in self._assignment if s.tp in assigned and s.input_lane is lane]
            held: dict[str, int] = {}
            active: set[str] = set()
            topics_paused: set[str] = set()
            for s in states:
                items = s.offsets.pending + s.chunks_held
                held[s.tp.topic] = held.get(s.tp.topic, 0) + items
                if items or s.lag:
                    active.add(s.tp.topic)
                if s.tp in paused:
                    topics_paused.add(s.tp.topic)
            if len(held) < 2 or not active:
                continue  # alone (or idle): only the lane's own limits apply
            under = sources_under_share(held, self._weights)
            self._under_share |= {s.tp for s in states if s.tp.topic in under}
            capacity = low_ceiling(self._limit) if lane is InputLane.LOW else self._limit
            # An idle topic keeps room for one poll of its records (see sources_to_pause).
            over = sources_to_pause(
                held, active, self._weights, capacity, topics_paused, reserve=self._max_poll
            )
            found |= {s.tp for s in states if s.tp.topic in over}
        return found
