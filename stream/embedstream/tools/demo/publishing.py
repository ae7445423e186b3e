"""The request phases run: their requests published, their outcomes waited for.

The shell of :mod:`embedstream.tools.demo.phases`. :class:`PhasePublisher` sends a sparse
phase's requests each at its time, or the lanes phase's backlog in batches and then its high
requests at their rate until the backlog has drained, and waits until the processor's metrics
registry (in this process) counts an outcome for every request. Each phase comes back as
:class:`Measured`: the registry at both ends, the seconds between them and, for the lanes
phase, each lane's own span.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import orjson
from prometheus_client import CollectorRegistry

from embedstream.kafka.client.admin import TopicNames
from embedstream.kafka.client.protocols import Producer
from embedstream.tools.demo.phases import LanesPhase, Phase, RequestPhase, backlog_drained
from embedstream.tools.top.readings import Snapshot, snapshot_of

POLL_S = 0.02  # how often the registry is asked whether a phase is done
_YIELD_EVERY = 20  # sends between two turns of the event loop when none waits
_OUTCOME_COUNTERS = ("embedstream_results_total", "embedstream_dead_letters_total")


@dataclass(frozen=True, slots=True)
class Measured:
    """A phase as it ran, the registry's snapshots at its start and end, the seconds between
    them and the lanes' own spans, if any (see ``PhaseFigures.lane_seconds``)."""

    phase: RequestPhase
    before: Snapshot
    after: Snapshot
    seconds: float
    lane_seconds: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))


class PhasePublisher:
    """Runs request phases through ``producer`` into the topics ``names``, watching
    ``registry`` (the processor's) for their outcomes."""

    def __init__(self, producer: Producer, names: TopicNames, registry: CollectorRegistry):
        self.producer = producer
        self.names = names
        self.registry = registry
        # Asking only for the two counters costs a fraction of a millisecond; a whole
        # snapshot costs several, too much to take fifty times a second beside the processor.
        self.counters = registry.restricted_registry(_OUTCOME_COUNTERS)

    def snapshot(self) -> Snapshot:
        return snapshot_of(self.registry.collect())

    async def run(self, phase: RequestPhase, texts: Iterator[str]) -> Measured:
        """Publish ``phase`` (a text from ``texts`` for each request, in order) and wait until
        every request it sent has an outcome."""
        if isinstance(phase, LanesPhase):
            return await self._lanes(phase, texts)
        loop = asyncio.get_running_loop()
        before = self.snapshot()
        started = loop.time()
        await self._paced(phase, texts, started)
        after = await self._until_finished(_finished(before) + phase.items)
        return Measured(phase, before, after, loop.time() - started)

    async def _paced(self, phase: Phase, texts: Iterator[str], started: float) -> None:
        """Send the phase's requests, each at its time, then wait for the broker's
        acknowledgements."""
        loop = asyncio.get_running_loop()
        futures = []
        for index, (rid, lane) in enumerate(phase.requests()):
            delay = started + phase.send_at(index) - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            elif index % _YIELD_EVERY == 0:
                # A send rarely waits, so requests that are late would hold the loop that
                # also runs the processor (heartbeats, /metrics): let it in now and then.
                await asyncio.sleep(0)
            futures.append(await self._send(rid, lane, next(texts)))
        await asyncio.gather(*futures)

    async def _lanes(self, phase: LanesPhase, texts: Iterator[str]) -> Measured:
        """The backlog at once, then high requests at their rate until the registry counts an
        outcome for every backlog request; then until every request sent has its outcome."""
        loop = asyncio.get_running_loop()
        # Made before the clock starts: thousands of texts take a good part of a second.
        backlog_texts = list(itertools.islice(texts, phase.backlog))
        before = self.snapshot()
        started = loop.time()
        await self._backlog(phase, backlog_texts)
        futures = []
        high_started = loop.time()
        sent = 0
        while True:
            elapsed = loop.time() - high_started
            while sent < phase.high_due(elapsed):
                rid, lane = phase.high_request(sent)
                futures.append(await self._send(rid, lane, next(texts)))
                sent += 1
            now = snapshot_of(self.counters.collect())
            low = now.results.get("low", 0.0) - before.results.get("low", 0.0)
            if backlog_drained(phase.backlog, low, now.dead_letters - before.dead_letters):
                break
            await asyncio.sleep(min(POLL_S, phase.next_high_in(sent, elapsed)))
        drained_s = loop.time() - started
        await asyncio.gather(*futures)
        ran = phase.sent(sent)
        after = await self._until_finished(_finished(before) + ran.items)
        ended = loop.time()
        spans = {"low": drained_s, "high": ended - high_started}
        return Measured(ran, before, after, ended - started, MappingProxyType(spans))

    async def _backlog(self, phase: LanesPhase, texts: Sequence[str]) -> None:
        """Send the backlog in batches of many records, one partition after another, then
        wait for the broker's acknowledgements. Sent one by one, the requests would take this
        loop's time at about the pace the processor beside them drains them: no backlog
        would form."""
        producer, topic = self.producer, self.names.requests_low
        partitions = sorted(await producer.partitions_for(topic))
        futures: list[asyncio.Future[Any]] = []
        batch = producer.create_batch()
        for (rid, _), text in zip(phase.backlog_requests(), texts, strict=True):
            value = orjson.dumps({"id": rid, "text": text})
            if batch.append(timestamp=None, key=rid.encode(), value=value, headers=[]) is None:
                partition = partitions[len(futures) % len(partitions)]
                futures.append(await producer.send_batch(batch, topic, partition=partition))
                await asyncio.sleep(0)  # let the processor in between two batches
                batch = producer.create_batch()  # an empty batch takes any one request
                batch.append(timestamp=None, key=rid.encode(), value=value, headers=[])
        if batch.record_count():
            partition = partitions[len(futures) % len(partitions)]
            futures.append(await producer.send_batch(batch, topic, partition=partition))
        await asyncio.gather(*futures)

    async def _send(self, rid: str, lane: str, text: str) -> asyncio.Future[Any]:
        """Send one request to its lane's topic; the broker's acknowledgement to await."""
        names = self.names
        topic = names.requests_high if lane == "high" else names.requests_low
        value = orjson.dumps({"id": rid, "text": text})
        return await self.producer.send(topic, value, key=rid.encode())

    async def _until_finished(self, outcomes: float) -> Snapshot:
        """The registry's snapshot once it counts ``outcomes`` results and dead letters."""
        while True:
            if _finished(snapshot_of(self.counters.collect())) >= outcomes:
                return self.snapshot()
            await asyncio.sleep(POLL_S)


def _finished(snapshot: Snapshot) -> float:
    return snapshot.results_total + snapshot.dead_letters
