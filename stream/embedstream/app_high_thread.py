"""The high lane as a processor of its own, on a thread and event loop of its own (``high_thread``).

Under a low backlog the processor's event loop runs in turns of tens of milliseconds (a poll's
admission, a call's results, a batch's encoding), and a high request waits for one at every
step of its way: its fetch, its batch, its call, its result's write and acknowledgement. The
per-stage profile of the kafka-flood benchmark puts a tail of 100-400 ms on each of them, and
a second consumer on the same loop (measured: no gain) does not help. Here the high topics are
read by a second member of the processor's consumer group, built as a whole processor (its own
consumer, batcher, provider connections, results producer, commits and exactly-once
transactions) whose loop holds nothing else: the interpreter switches to it within its switch
interval, whatever the low lanes' loop is doing. As a group member it is exactly what a second
process would be: its rebalances, commits and hand-offs are a processor's own.

The budget stays one, as with the online lane's thread (`app_online_thread`): the high engine
has the slots of ``HIGH_THREAD_SLOTS`` and echoes every item seen, call started and ended and
token spent to the processor's governor (`LoopEcho`), which keeps its reservations for the high
lane, steers the low lane's calls by ``high_target_ms`` and counts the calls in its RPM/TPM
buckets; a 429 met by either engine holds both. Its state reaches the health loop (lag, depth,
readiness) as a snapshot taken on its own loop (`HighSnapshot`): no object is read across
threads while its loop may change it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from embedstream.app_online_thread import KeptOpenTracer, LoopEcho
from embedstream.core.flow import high_reserve
from embedstream.core.governor import Governor
from embedstream.core.lanes import Priority
from embedstream.core.policy import BatchLimits
from embedstream.core.tracing import Tracer
from embedstream.engine.backend import EmbeddingBackend
from embedstream.engine.bounded import bounded
from embedstream.kafka.processor import Processor
from embedstream.kafka.protocols import Consumer, Producer
from embedstream.ops.health import OldestTracked
from embedstream.ops.metrics import Metrics
from embedstream.settings import Settings

log = logging.getLogger(__name__)

THREAD_NAME = "embedstream-high"
# The high engine's calls at once (the processor's governor keeps 1 for them while high is active).
HIGH_THREAD_SLOTS = 2
SNAPSHOT_EVERY_S = 0.5
LANES = (Priority.HIGH, Priority.LOW, Priority.BACKFILL)


class HighProcessor(Protocol):
    """What the thread runs: a processor (the high topics' only) and its service's `run`."""

    @property
    def processor(self) -> Processor: ...

    async def run(self) -> None: ...


# Builds the high lane's service on its thread (its clients bind to that thread's loop).
BuildHigh = Callable[[Settings], HighProcessor]


def high_thread_settings(settings: Settings) -> Settings:
    """The high lane's processor: its slots, the high lane's reserve of the memory bound (the
    main processor's low input stops at the rest: one bound for both), no buckets of its own
    (the processor's count its tokens), no ops port, no online lane (the processor serves
    both)."""
    slots = max(1, min(HIGH_THREAD_SLOTS, settings.max_concurrency - 1))
    items = settings.buffered_items_limit
    reserve = high_reserve(items)
    return dataclasses.replace(
        settings,
        max_concurrency=slots,
        max_buffered_items=max(1, reserve),
        max_buffered_bytes=max(1, settings.max_buffered_bytes * reserve // items),
        rate_limit_rpm=0.0,
        rate_limit_tpm=0.0,
        metrics_port=0,
        http_port=0,
        high_thread=False,
        client_id=f"{settings.client_id}-high",
    )


@dataclass(frozen=True)
class Oldest:
    """One partition's oldest unfinished record's timestamp, as the health loop reads it."""

    timestamp_ms: int | None

    def oldest_timestamp_ms(self) -> int | None:
        return self.timestamp_ms


@dataclass(frozen=True)
class HighSnapshot:
    """The high processor's state, taken on its own loop for the health loop to read."""

    joined: bool = False
    provider_ok: bool = True
    oldest: dict[Any, Oldest] = field(default_factory=dict)
    lag: dict[Any, int] = field(default_factory=dict)
    lanes: dict[Any, str] = field(default_factory=dict)
    paused: int = 0
    buffered: dict[Priority, int] = field(default_factory=dict)
    depth: dict[Priority, int] = field(default_factory=dict)
    delayed: int = 0
    held: int = 0
    in_flight: int = 0

    @classmethod
    def of(cls, p: Processor) -> HighSnapshot:
        return cls(
            joined=p.joined,
            provider_ok=p.provider_ok,
            oldest={tp: Oldest(t.oldest_timestamp_ms()) for tp, t in p.partitions().items()},
            lag=p.lag_by_partition(),
            lanes=p.lane_by_partition(),
            paused=p.paused_count(),
            buffered={lane: p.buffered_in(lane) for lane in LANES},
            depth={lane: p.depth(lane) for lane in LANES},
            delayed=p.delayed_count(),
            held=p.held_items(),
            in_flight=p.in_flight(),
        )


@dataclass(frozen=True)
class HighParts:
    """The clients of the high lane's own processor (`high_thread`), made on its thread so
    that they bind to its loop; the bench and tests wrap them."""

    backend: EmbeddingBackend
    consumer: Consumer | None = None
    producer: Producer | None = None


class _HighService:
    """The high lane's service, closing its own provider client once stopped."""

    def __init__(self, service: HighProcessor, backend: EmbeddingBackend) -> None:
        self._service = service
        self._backend = backend

    @property
    def processor(self) -> Processor:
        return self._service.processor

    async def run(self) -> None:
        try:
            await self._service.run()
        finally:
            closing_s = self.processor.closing.step_s()
            await bounded(self._backend.close(), closing_s, "the high lane's provider client")


class BuildService(Protocol):
    """`embedstream.app.build_service`, as the high lane's builder calls it."""

    def __call__(
        self, settings: Settings, backend: EmbeddingBackend, *, metrics: Metrics,
        consumer: Consumer | None, producer: Producer | None, tracer: Tracer, high_only: bool,
    ) -> HighProcessor: ...  # fmt: skip


def high_builder(
    build_service: BuildService,
    metrics: Metrics,
    tracer: Tracer,
    parts_of: Callable[[Settings], HighParts],
) -> BuildHigh:
    """Builds the high lane's processor on its thread: the process's metrics, its tracer."""

    def build(settings: Settings) -> HighProcessor:
        parts = parts_of(settings)
        service = build_service(
            settings, parts.backend, metrics=metrics, consumer=parts.consumer,
            producer=parts.producer, tracer=KeptOpenTracer(tracer), high_only=True,
        )  # fmt: skip
        return _HighService(service, parts.backend)

    return build


class HighThread:
    """The high lane's processor on its thread: started, stopped and joined from the main
    processor's loop."""

    def __init__(self, settings: Settings, governor: Governor, build: BuildHigh) -> None:
        self._settings = high_thread_settings(settings)
        self._governor = governor
        self._build = build
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._processor: Processor | None = None
        self._built = threading.Event()
        self._assigned = asyncio.Event()  # (the main loop's) set once it holds partitions
        self.snapshot = HighSnapshot()
        self.failure: BaseException | None = None
        self._stops = 0
        self._stop_early = False  # told to stop before its processor was built

    async def start(self, on_failure: Callable[[], None]) -> None:
        """Built and running on its thread once this returns; a failure to build (a bad
        setting) is raised here; a failure later calls ``on_failure`` on this loop."""
        main = asyncio.get_running_loop()
        echo = LoopEcho(self._governor, main.call_soon_threadsafe, main.time)

        def failed() -> None:
            with contextlib.suppress(RuntimeError):  # the main loop already ended
                main.call_soon_threadsafe(on_failure)

        self._thread = threading.Thread(
            target=self._run, args=(echo, failed, main), name=THREAD_NAME, daemon=True
        )
        self._thread.start()
        await asyncio.to_thread(self._built.wait)
        if self._processor is None and self.failure is not None:
            raise self.failure

    def stop(self) -> None:
        """As `Processor.stop`: the first call drains, a second stops draining."""
        loop, processor = self._loop, self._processor
        if loop is None or processor is None:
            self._stop_early = True
            return
        if self._stops >= 2:
            return
        self._stops += 1
        with contextlib.suppress(RuntimeError):  # its loop already ended
            loop.call_soon_threadsafe(processor.stop)

    def stopping(self) -> None:
        """Stop it unless already told to (a no-op then, not a second stop)."""
        if self._stops == 0:
            self.stop()

    async def join(self) -> None:
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)

    def _run(
        self, echo: LoopEcho, failed: Callable[[], None], main: asyncio.AbstractEventLoop
    ) -> None:
        try:
            asyncio.run(self._serve(echo, main))
        except BaseException as exc:
            self.failure = exc
            log.error("the high lane's processor stopped on an error: %r", exc)
            failed()
        finally:
            self._built.set()

    async def _serve(self, echo: LoopEcho, main: asyncio.AbstractEventLoop) -> None:
        service = self._build(self._settings)
        processor = service.processor
        processor.parts.governor.echo = echo
        self._loop, self._processor = asyncio.get_running_loop(), processor
        self._built.set()
        if self._stop_early:
            processor.stop()
        tasks = [asyncio.create_task(self._sample(processor)),
                 asyncio.create_task(self._note_assigned(processor, main))]  # fmt: skip
        try:
            await service.run()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self.snapshot = HighSnapshot()

    async def _note_assigned(self, processor: Processor, main: asyncio.AbstractEventLoop) -> None:
        await processor.assigned.wait()
        with contextlib.suppress(RuntimeError):  # the main loop already ended
            main.call_soon_threadsafe(self._assigned.set)

    async def wait_assigned(self) -> None:
        """(On the main loop, once started) until it holds partitions."""
        await self._assigned.wait()

    async def _sample(self, processor: Processor) -> None:
        while True:
            with contextlib.suppress(Exception):  # best effort, as the health loop's own
                await asyncio.wait_for(processor.refresh_lag(), SNAPSHOT_EVERY_S * 4)
            self.snapshot = HighSnapshot.of(processor)
            await asyncio.sleep(SNAPSHOT_EVERY_S)


class WithHighThread:
    """What the health loop observes: the main processor and the high thread's snapshot."""

    def __init__(self, main: Processor, high: HighThread) -> None:
        self._main = main
        self._high = high

    @property
    def joined(self) -> bool:
        return self._main.joined and self._high.snapshot.joined

    @property
    def provider_ok(self) -> bool:
        return self._main.provider_ok

    @property
    def limits(self) -> BatchLimits:
        return self._main.limits

    def partitions(self) -> dict[Any, OldestTracked]:
        return {**self._main.partitions(), **self._high.snapshot.oldest}

    def lag_by_partition(self) -> dict[Any, int]:
        return {**self._main.lag_by_partition(), **self._high.snapshot.lag}

    def lane_by_partition(self) -> dict[Any, str]:
        return {**self._main.lane_by_partition(), **self._high.snapshot.lanes}

    def paused_count(self) -> int:
        return self._main.paused_count() + self._high.snapshot.paused

    def buffered_in(self, priority: Priority) -> int:
        return self._main.buffered_in(priority) + self._high.snapshot.buffered.get(priority, 0)

    def delayed_count(self) -> int:
        return self._main.delayed_count() + self._high.snapshot.delayed

    def held_items(self) -> int:
        return self._main.held_items() + self._high.snapshot.held

    def in_flight(self) -> int:
        return self._main.in_flight() + self._high.snapshot.in_flight

    def concurrency_limit(self) -> int:
        return self._main.concurrency_limit()

    def depth(self, lane: Priority) -> int:
        return self._main.depth(lane) + self._high.snapshot.depth.get(lane, 0)

    async def refresh_lag(self) -> None:
        await self._main.refresh_lag()
