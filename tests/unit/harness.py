"""A processor on the in-memory Kafka fakes, for unit tests of the Kafka shell."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiokafka import TopicPartition
from embedstream.app.processor import build_service
from embedstream.app.service import Service
from embedstream.core.clock import Clock
from embedstream.core.tracing import Tracer
from embedstream.engine.backend import BatchCall, BatchOutcome, EmbeddingBackend
from embedstream.engine.clock import SYSTEM_CLOCK
from embedstream.kafka.client.admin import topic_names
from embedstream.ops.metrics import Metrics
from embedstream.settings import load_settings
from embedstream.settings.derived import ITEM_RESIDENT_BYTES
from embedstream.testing import eventually, vector_for
from embedstream.testing.backends import texts_of
from embedstream.testing.kafka import (
    FakeCluster,
    FakeConsumer,
    FakeProducer,
    FakeRecord,
    FakeTransactionalProducer,
)

NAMES = topic_names("t.")
HIGH = TopicPartition(NAMES.requests_high, 0)
LOW = TopicPartition(NAMES.requests_low, 0)
RETRY = TopicPartition(NAMES.retry, 0)
INPUTS = (HIGH, LOW, RETRY)


def item_bound(items: int) -> dict[str, Any]:
    """Settings under which the buffer's derived item bound is ``items`` (never under
    max_batch_size): the byte bound at ITEM_RESIDENT_BYTES an item, which ``items`` small
    requests fill, and events of at most 4 KiB (the fetcher assumes a quarter of the largest
    before it has seen any: larger, and a tiny bound would let too few be fetched to fill it)."""
    return {"max_buffered_bytes": items * ITEM_RESIDENT_BYTES, "max_event_bytes": 4096}


@dataclass
class GatedBackend:
    """A provider that answers at once, except for texts containing SLOW: those wait for
    `gate` (or forever if it is never set)."""

    gate: asyncio.Event = field(default_factory=asyncio.Event)
    calls: list[tuple[float, tuple[str, ...]]] = field(default_factory=list)

    async def embed(self, call: BatchCall) -> BatchOutcome:
        self.calls.append((time.time(), texts_of(call)))
        if any("SLOW" in text for text in call.texts):
            await self.gate.wait()
        vectors: list[list[float] | str] = [vector_for(t) for t in call.texts]
        return BatchOutcome(vectors, 2, len(call.texts), 0.0)

    async def close(self) -> None:
        return None


@dataclass
class Harness:
    cluster: FakeCluster
    consumer: FakeConsumer
    producer: FakeProducer
    service: Service
    task: asyncio.Task[None]

    def request(self, tp: TopicPartition, request_id: str, text: str, **headers: bytes) -> int:
        value = orjson.dumps({"id": request_id, "text": text})
        record = self.cluster.produce(
            tp.topic, value, request_id.encode(), list(headers.items()), partition=tp.partition
        )
        return record.offset

    def results(self) -> list[FakeRecord]:
        return self.cluster.records(NAMES.results)

    def result_ids(self) -> list[str]:
        return [orjson.loads(r.value or b"")["id"] for r in self.cluster.records(NAMES.results)]

    def committed(self, tp: TopicPartition) -> int:
        return self.cluster.group_offsets.get(tp, 0)

    # Waits on work the processor has done, never on time: an assertion that something did
    # not happen is made after the work that would have done it.

    async def commit_rounds(self, rounds: int = 2) -> None:
        """Until the commit loop has finished `rounds` more rounds; with two, a whole round
        began after this call, so what it leaves uncommitted was not safe to commit."""
        committer = self.service.processor.parts.committer
        target = committer.rounds + rounds
        await eventually(lambda: committer.rounds >= target)

    async def fetch_turns(self, turns: int = 1) -> None:
        """Until the fetch loop has begun `turns` more fetches: each begun one means every
        fetch before it (records produced so far included) was admitted and handed on."""
        target = self.consumer.fetches + turns
        await eventually(lambda: self.consumer.fetches >= target)

    async def engine_idle(self) -> None:
        """Until nothing is buffered or in a call, then every outcome write is finished."""
        batcher = self.service.processor.parts.batcher
        await eventually(lambda: batcher.buffered == 0 and batcher.in_flight == 0)
        await self.service.processor.parts.outcomes.flush()

    async def all_inputs_finished(self) -> None:
        """Until, at one moment, every input record is committed (its outcome written: a
        result, a dead letter, or a retry record itself read and finished), nothing is
        buffered, in a call or being written: no record can end a second time after it."""
        parts = self.service.processor.parts

        def finished() -> bool:
            quiet = parts.batcher.buffered == 0 and parts.batcher.in_flight == 0
            ends = all(self.committed(tp) == len(self.cluster.logs[tp]) for tp in INPUTS)
            return quiet and parts.outcomes.writing == 0 and ends

        await eventually(finished)
        await parts.outcomes.flush()


def fake_cluster() -> FakeCluster:
    return FakeCluster(
        {NAMES.requests_high: 1, NAMES.requests_low: 1, NAMES.retry: 1, NAMES.results: 2,
         NAMES.dead_letters: 1}
    )  # fmt: skip


@asynccontextmanager
async def running(
    backend: EmbeddingBackend,
    *,
    cluster: FakeCluster | None = None,
    transactional: Callable[[str], FakeTransactionalProducer] | None = None,
    tracer: Tracer | None = None,
    metrics: Metrics | None = None,
    clock: Clock = SYSTEM_CLOCK,
    **settings: Any,
) -> AsyncIterator[Harness]:
    """A processor on the fakes; with `transactional` (by transactional id), exactly-once."""
    cluster = cluster or fake_cluster()
    if transactional is not None:
        settings["delivery"] = "exactly_once"
    values: dict[str, Any] = {
        "topic_prefix": "t.", "metrics_port": 0, "commit_interval_ms": 10, "max_wait_ms": 0,
        "max_batch_size": 1, **settings,
    }  # fmt: skip
    consumer, producer = FakeConsumer(cluster), FakeProducer(cluster)
    service = build_service(
        load_settings(env={}, overrides=values),
        backend,
        consumer=consumer,
        producer=producer,
        transactional_producer=transactional,
        tracer=tracer,
        metrics=metrics,
        state_reader=cluster.read_to_end,  # the chunk changelog's state (topic_changelog)
        clock=clock,
    )
    task = asyncio.create_task(service.run())
    await asyncio.wait_for(service.processor.assigned.wait(), 5)
    try:
        yield Harness(cluster, consumer, producer, service, task)
    finally:
        service.stop()
        service.stop()  # a second stop ends the drain at once
        await asyncio.wait_for(task, 10)
