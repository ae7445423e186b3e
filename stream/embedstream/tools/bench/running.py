"""A processor running in the bench's process for the length of a scenario, its clients and
backend wrapped to note each request's moments when a timeline is asked for."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from embedstream.app.processor import build_service
from embedstream.app.service import Service
from embedstream.core.tracing import Tracer
from embedstream.engine.backend import EmbeddingBackend
from embedstream.kafka.client.clients import make_consumer, make_producer
from embedstream.ops.collector import collector_for_throughput
from embedstream.ops.metrics import Metrics
from embedstream.settings import Settings
from embedstream.tools.bench import BenchError
from embedstream.tools.bench.recorder import TimedBackend
from embedstream.tools.bench.timeline import (
    Timeline,
    TimelineBackend,
    TimelineConsumer,
    TimelineProducer,
)

JOIN_TIMEOUT_S = 60.0


@contextlib.asynccontextmanager
async def running_processor(
    settings: Settings,
    backend: TimedBackend,
    metrics: Metrics,
    *,
    timeline: Timeline | None = None,
    result_linger_ms: int | None = None,
    tracer: Tracer | None = None,
) -> AsyncIterator[Service]:
    """A processor running until the block ends, entered once it holds its partitions.
    ``timeline``: its clients and backend note each request's moments (bench/timeline.py);
    ``result_linger_ms``: its results producer's linger instead of the library's; ``tracer``:
    its tracer instead of the settings'."""
    overrides = {} if result_linger_ms is None else {"linger_ms": result_linger_ms}
    consumer: Any = make_consumer(settings)
    producer: Any = make_producer(settings, **overrides)
    engine: EmbeddingBackend = backend
    if timeline is not None:
        consumer = TimelineConsumer(consumer, timeline)
        producer = TimelineProducer(producer, timeline)
        engine = TimelineBackend(backend, timeline)

    service = build_service(
        settings, engine, metrics=metrics, consumer=consumer, producer=producer, tracer=tracer
    )
    with collector_for_throughput():  # as `embedstream run` has it (app.run_service)
        task = asyncio.create_task(service.run())
        try:
            assigned = asyncio.create_task(service.wait_assigned())
            await asyncio.wait(
                [assigned, task], timeout=JOIN_TIMEOUT_S, return_when="FIRST_COMPLETED"
            )
            if task.done():
                task.result()  # the processor failed: say why
            if not assigned.done():
                assigned.cancel()
                raise BenchError(f"the processor got no partitions within {JOIN_TIMEOUT_S:g} s")
            yield service
        finally:
            service.stop()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, 60)
            await backend.close()
