"""A per-request timeline through Kafka, noted from outside the hot path (bench only).

The processor is built with wrapped clients and a wrapped backend: the consumer notes when
each request record was fetched, the backend when the call carrying its text started and
ended, the producer when its result joined a record batch and when the broker acknowledged
that batch. The publisher and the result reader note the rest. Every moment is read from
``time.monotonic`` (asyncio's loop clock; one clock for every process on the machine), so
one request's moments compare directly. The online lane's requests are noted by a tracer
(``TimelineTracer``, the processor's tracing seam), their callers' moments by the callers'
process. None of this runs unless the bench asks for a timeline: the processor's own code is
unchanged.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

from embedstream.engine.backend import BatchCall, BatchOutcome, EmbeddingBackend


class Timeline:
    """Moments by request id: id -> {moment name -> monotonic seconds}; first note wins (a
    redelivered record or a retried call must not move a moment later)."""

    def __init__(self) -> None:
        self.moments: dict[str, dict[str, float]] = {}
        self.ids_by_text: dict[str, str] = {}

    def note(self, request_id: str, moment: str, at: float | None = None) -> None:
        times = self.moments.setdefault(request_id, {})
        times.setdefault(moment, time.monotonic() if at is None else at)

    def note_key(self, key: bytes | None, moment: str, at: float) -> None:
        if key is not None:
            self.note(key.decode(errors="replace"), moment, at)

    def only(self, ids: Sequence[str]) -> dict[str, dict[str, float]]:
        """The moments of these ids (the measured requests, not the warm-up)."""
        return {i: self.moments[i] for i in ids if i in self.moments}


class TimelineConsumer:
    """The group consumer, noting 'fetched' for every record a poll hands over."""

    def __init__(self, inner: Any, timeline: Timeline) -> None:
        self._inner = inner
        self._timeline = timeline

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def getmany(self, *partitions: Any, **options: Any) -> Mapping[Any, Any]:
        batches: Mapping[Any, Any] = await self._inner.getmany(*partitions, **options)
        now = time.monotonic()
        for records in batches.values():
            for record in records:
                self._timeline.note_key(record.key, "fetched", now)
        return batches


class _NotingBatch:
    """A producer record batch that remembers the keys appended to it."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.keys: list[bytes | None] = []

    def append(self, *, timestamp: int | None, key: bytes | None, value: bytes | None,
               headers: Any) -> object | None:  # fmt: skip
        added: object | None = self.inner.append(
            timestamp=timestamp, key=key, value=value, headers=headers
        )
        if added is not None:
            self.keys.append(key)
        return added

    def record_count(self) -> int:
        return int(self.inner.record_count())


class TimelineProducer:
    """The results producer, noting 'written' when a result joins a batch (or is sent on its
    own) and 'acked' when the broker acknowledged it."""

    def __init__(self, inner: Any, timeline: Timeline) -> None:
        self._inner = inner
        self._timeline = timeline

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def create_batch(self) -> _NotingBatch:
        return _NotingBatch(self._inner.create_batch())

    async def send_batch(self, batch: _NotingBatch, topic: str, *, partition: int) -> Any:
        now = time.monotonic()
        for key in batch.keys:
            self._timeline.note_key(key, "written", now)
        delivered: asyncio.Future[Any] = await self._inner.send_batch(
            batch.inner, topic, partition=partition
        )
        delivered.add_done_callback(lambda _: self._acked(batch.keys))
        return delivered

    async def send_and_wait(self, topic: str, value: bytes | None = None,
                            key: bytes | None = None, **options: Any) -> Any:  # fmt: skip
        self._timeline.note_key(key, "written", time.monotonic())
        acked = await self._inner.send_and_wait(topic, value, key=key, **options)
        self._timeline.note_key(key, "acked", time.monotonic())
        return acked

    def _acked(self, keys: Sequence[bytes | None]) -> None:
        now = time.monotonic()
        for key in keys:
            self._timeline.note_key(key, "acked", now)


class TimelineBackend:
    """The embedder, noting 'call_start' and 'call_done' for each text's request."""

    def __init__(self, inner: EmbeddingBackend, timeline: Timeline) -> None:
        self._inner = inner
        self._timeline = timeline

    async def embed(self, call: BatchCall) -> BatchOutcome:
        ids = [self._timeline.ids_by_text.get(t) for t in call.texts if isinstance(t, str)]
        started = time.monotonic()
        try:
            return await self._inner.embed(call)
        finally:
            done = time.monotonic()
            for request_id in ids:
                if request_id is not None:
                    self._timeline.note(request_id, "call_start", started)
                    self._timeline.note(request_id, "call_done", done)

    async def close(self) -> None:
        await self._inner.close()


def traceparent_for(request_id: int) -> str:
    """The W3C ``traceparent`` an online caller sends so that the processor's tracer can tell
    its request apart: the request's number as the trace id."""
    return f"00-{request_id + 1:032x}-{1:016x}-01"
