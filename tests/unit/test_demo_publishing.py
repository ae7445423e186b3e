"""The demo's request phases run (`tools/demo/publishing.py`) on a `VirtualLoop`: the in-memory
cluster, a real metrics registry, and a stand-in for the processor that drains the low topic
at a known pace and answers high requests at once; every sleep is a timer in virtual time."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson
from aiokafka import TopicPartition
from embedstream.kafka.client.admin import topic_names
from embedstream.ops.metrics import Metrics
from embedstream.testing.kafka import FakeCluster, FakeProducer
from embedstream.testing.virtual_loop import VirtualLoop
from embedstream.tools.demo.phases import LanesPhase, Phase
from embedstream.tools.demo.publishing import Measured, PhasePublisher
from embedstream.tools.demo.texts import text_stream

NAMES = topic_names("demo.")
T = TypeVar("T")


def virtually(work: Awaitable[T]) -> T:
    loop = VirtualLoop()
    try:
        return loop.run_until_complete(work)
    finally:
        loop.close()


@dataclass
class TimedProducer(FakeProducer):
    """The fake producer, noting the (virtual) time of each request sent one by one."""

    sends: list[tuple[float, str, str]] = field(default_factory=list)  # (time, topic, id)

    async def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        *,
        headers: Any = None,
        partition: int | None = None,
    ) -> asyncio.Future[Any]:
        rid = (key or b"").decode()
        self.sends.append((asyncio.get_running_loop().time(), topic, rid))
        return await super().send(topic, value, key, headers=headers, partition=partition)


class Processor:
    """Stands in for the processor: every ``tick_s`` it answers each new high request and up
    to ``low_per_tick`` low ones (dead-lettering the ids in ``dead``), counting them in the
    registry as the real one does."""

    def __init__(
        self,
        cluster: FakeCluster,
        metrics: Metrics,
        low_per_tick: int,
        tick_s: float = 0.01,
        dead: frozenset[str] = frozenset(),
    ):
        self.cluster, self.metrics = cluster, metrics
        self.low_per_tick, self.tick_s, self.dead = low_per_tick, tick_s, dead
        self.read: dict[TopicPartition, int] = dict.fromkeys(cluster.logs, 0)
        self.low_done_at: float | None = None

    def _take(self, topic: str, most: int) -> list[bytes | None]:
        keys: list[bytes | None] = []
        for tp in self.cluster.partitions_of(topic):
            log = self.cluster.logs[tp]
            while self.read[tp] < len(log) and len(keys) < most:
                keys.append(log[self.read[tp]].key)
                self.read[tp] += 1
        return keys

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.tick_s)
            for _ in self._take(NAMES.requests_high, 1 << 30):
                self.metrics.observe_result("high", 0.01)
            for key in self._take(NAMES.requests_low, self.low_per_tick):
                if (key or b"").decode() in self.dead:
                    self.metrics.count_dead_letter("too_long")
                else:
                    self.metrics.observe_result("low", 1.0)
                self.low_done_at = loop.time()


def _run(
    phase: Phase | LanesPhase, low_per_tick: int, dead: frozenset[str] = frozenset()
) -> tuple[Measured, TimedProducer, Processor]:
    cluster = FakeCluster({NAMES.requests_high: 2, NAMES.requests_low: 3})
    producer = TimedProducer(cluster)
    metrics = Metrics()
    processor = Processor(cluster, metrics, low_per_tick, dead=dead)

    async def scenario() -> Measured:
        running = asyncio.create_task(processor.run())
        try:
            publisher = PhasePublisher(producer, NAMES, metrics.registry)
            return await publisher.run(phase, text_stream())
        finally:
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await running

    return virtually(scenario()), producer, processor


def _results(measured: Measured) -> dict[str, float]:
    """Results counted by lane during the phase (lanes without any left out)."""
    return {lane: n for lane, n in measured.after.results.items() if n}


def _ids(cluster: FakeCluster, topic: str) -> list[str]:
    return [
        orjson.loads(record.value or b"")["id"]
        for tp in cluster.partitions_of(topic)
        for record in cluster.logs[tp]
    ]


def test_the_backlog_goes_first_then_high_requests_at_their_rate_until_it_drained() -> None:
    # 2,500 low requests drained 50 per 10 ms: 0.5 s; high requests at 40/s meanwhile.
    measured, producer, processor = _run(LanesPhase(2500, 40.0, first=7), low_per_tick=50)
    ran = measured.phase
    assert isinstance(ran, LanesPhase) and processor.low_done_at is not None
    cluster = producer.cluster
    # The backlog in batches over every low partition, no request of it sent one by one.
    low_ids = _ids(cluster, NAMES.requests_low)
    assert sorted(low_ids) == sorted(f"lanes-{n}" for n in range(7, 2507))
    assert all(cluster.logs[tp] for tp in cluster.partitions_of(NAMES.requests_low))
    assert all(topic == NAMES.requests_high for _, topic, _ in producer.sends)
    # High requests one by one, numbered after the backlog, every 25 ms from the first.
    assert [rid for _, _, rid in producer.sends] == [f"lanes-{2507 + n}" for n in range(ran.high)]
    times = [at for at, _, _ in producer.sends]
    assert [round(b - a, 6) for a, b in itertools.pairwise(times)] == [0.025] * (ran.high - 1)
    # ... for as long as the backlog drained, and no longer: the last one went before the
    # last low result was counted, the next would have gone after it.
    assert times[-1] <= processor.low_done_at < times[-1] + 0.025 + 0.02  # one poll late
    assert 0.5 * 40 - 1 <= ran.high <= 0.52 * 40 + 1
    assert sorted(_ids(cluster, NAMES.requests_high)) == sorted(rid for _, _, rid in producer.sends)
    # Every request sent had its outcome counted before the phase ended.
    assert _results(measured) == {"high": ran.high, "low": 2500}
    # The lanes' own spans: the backlog from the phase's start to its drain (one poll of
    # the registry late at most); the high requests from the first sent to the end.
    assert measured.lane_seconds["low"] - processor.low_done_at < 0.025
    assert 0.5 <= measured.lane_seconds["low"] <= measured.seconds
    assert measured.lane_seconds["high"] <= measured.seconds


def test_a_dead_letter_in_the_backlog_ends_the_phase_all_the_same() -> None:
    phase = LanesPhase(300, 50.0)
    measured, _, _ = _run(phase, low_per_tick=30, dead=frozenset({"lanes-5"}))
    assert _results(measured)["low"] == 299 and measured.after.dead_letters == 1
    assert isinstance(measured.phase, LanesPhase) and measured.phase.high >= 1


def test_a_sparse_phase_sends_each_request_at_its_time() -> None:
    phase = Phase("sparse", 10, 20.0)
    measured, producer, _ = _run(phase, low_per_tick=1000)
    assert [rid for _, _, rid in producer.sends] == [f"sparse-{n}" for n in range(10)]
    assert [topic == NAMES.requests_high for _, topic, _ in producer.sends] == [
        n % 5 == 0 for n in range(10)
    ]
    assert [round(at, 6) for at, _, _ in producer.sends] == [round(n * 0.05, 6) for n in range(10)]
    assert measured.phase == phase and measured.lane_seconds == {}
    assert _results(measured) == {"high": 2, "low": 8}
    assert 0.45 <= measured.seconds <= 0.5 + 0.05  # the last sent at 0.45 s, answered by a tick
