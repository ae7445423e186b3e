"""What happens to one batch: deadline check, the call, and one outcome per item.

Outcomes: a result, a retry-topic record (transient failure), or a dead letter (permanent
failure or attempts exhausted). A batch the provider rejects as a whole is split in halves until
the bad items are isolated, so one bad item never fails its batch-mates. Provider-wide failures
(bad key, unknown model) keep the batch and retry it after a backoff: they never dead-letter.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from embedstream.core.backoff import Backoff
from embedstream.core.dedup import unique_texts
from embedstream.core.governor import Governor
from embedstream.core.lanes import BucketKey, Pending
from embedstream.core.policy import FlushReason
from embedstream.engine.embedder import BatchCall, BatchOutcome, EmbeddingBackend
from embedstream.errors import (
    SPLITTABLE_REASONS,
    EmbedStreamError,
    PermanentItemError,
    ProviderWideError,
    Reason,
    TransientError,
)
from embedstream.kafka.sink import Sink, now_ms
from embedstream.kafka.work import WorkItem
from embedstream.ops.metrics import Metrics
from embedstream.wire import EmbedResult, Failure

log = logging.getLogger(__name__)


def _refused_for_everyone(exc: EmbedStreamError) -> bool:
    return isinstance(exc, ProviderWideError) or exc.reason == Reason.RATE_LIMITED


@dataclass
class PipelineStats:
    calls: int = 0
    items_sent: int = 0
    results: int = 0
    retries: int = 0
    dead_letters: int = 0
    deduplicated: int = 0
    provider_ok: bool = True
    batch_sizes: list[int] = field(default_factory=list)


class Pipeline:
    def __init__(
        self,
        backend: EmbeddingBackend,
        sink: Sink,
        on_done: Callable[[WorkItem], None],
        *,
        max_attempts: int,
        backoff: Backoff | None = None,
        rng: random.Random | None = None,
        clock_ms: Callable[[], int] = now_ms,
        metrics: Metrics | None = None,
        governor: Governor | None = None,
    ) -> None:
        self._backend = backend
        self._sink = sink
        self._on_done = on_done
        self._max_attempts = max_attempts
        self._backoff = backoff or Backoff()
        self._rng = rng or random.Random()
        self._clock_ms = clock_ms
        self.stats = PipelineStats()
        self._metrics = metrics or Metrics()
        self._governor = governor

    async def dispatch(
        self, key: BucketKey, batch: list[Pending[WorkItem]], reason: FlushReason
    ) -> None:
        del reason  # recorded by the batcher's flush hook
        live: list[Pending[WorkItem]] = []
        for pending in batch:
            deadline = pending.payload.request.deadline_ms
            if deadline is not None and self._clock_ms() > deadline:
                err = PermanentItemError(Reason.DEADLINE_EXCEEDED, "deadline passed before sending")
                await self.dead_letter(pending.payload, err)
            else:
                pending.payload.attempts += 1
                live.append(pending)
        if live:
            await self._call(key, live)

    async def _call(self, key: BucketKey, batch: list[Pending[WorkItem]]) -> None:
        # Identical texts in one bucket are sent once; the vector is fanned out below.
        distinct, mapping = unique_texts([p.payload.request.text for p in batch])
        self.stats.deduplicated += len(batch) - len(distinct)
        call = BatchCall(
            model=key.model,
            texts=distinct,
            encoding_format=key.encoding_format,
            dimensions=key.dimensions,
        )
        held_back = 0  # consecutive rate-limit / provider-wide refusals of this batch
        while True:
            self.stats.calls += 1
            self.stats.items_sent += len(distinct)
            started = time.perf_counter()
            try:
                outcome = await self._backend.embed(call)
            except EmbedStreamError as exc:
                self._metrics.observe_call(time.perf_counter() - started, ok=False)
                self._metrics.observe_error(type(exc).__name__, exc.reason)
                if self._governor is not None:
                    self._governor.on_failure(exc)
                if not isinstance(exc, ProviderWideError | PermanentItemError | TransientError):
                    raise
                outage = self._governor is not None and self._governor.provider_down
                if not (_refused_for_everyone(exc) or (outage and exc.retriable)):
                    self.stats.provider_ok = True
                    await self._failed(key, batch, exc)
                    return
                # A rate limit or a refused key says nothing about these items: keep the batch,
                # spend none of its attempts, and try again once the provider lets us.
                held_back += 1
                self.stats.provider_ok = not (isinstance(exc, ProviderWideError) or outage)
                await self._hold_back(exc, held_back, outage)
                continue
            self._metrics.observe_call(outcome.latency_s, ok=True)
            if self._governor is not None:
                self._governor.on_success(outcome.latency_s, outcome.headers)
            self.stats.provider_ok = True
            self.stats.batch_sizes.append(len(batch))
            vectors = [outcome.vectors[i] for i in mapping]
            await self._succeeded(key, batch, vectors, outcome)
            return

    async def _hold_back(self, exc: EmbedStreamError, times: int, outage: bool) -> None:
        delay = self._backoff.delay(times, self._rng, exc.retry_after)
        if isinstance(exc, ProviderWideError) or outage:
            what = "provider down" if outage else "provider unusable"
            log.error("%s (%s): %s; retrying in %.1fs", what, exc.reason, exc, delay)
            if self._governor is not None:
                self._governor.hold(delay)  # nobody else calls meanwhile either
        elif self._governor is not None:
            # The gate already holds everyone until retry-after; wait for it, not longer.
            delay = max(self._governor.blocked_for(), exc.retry_after or 0.0)
        await asyncio.sleep(delay)

    async def _failed(
        self, key: BucketKey, batch: list[Pending[WorkItem]], exc: EmbedStreamError
    ) -> None:
        if len(batch) > 1 and exc.reason in SPLITTABLE_REASONS:
            middle = len(batch) // 2
            await asyncio.gather(self._call(key, batch[:middle]), self._call(key, batch[middle:]))
            return
        await asyncio.gather(*(self._item_failed(p.payload, exc) for p in batch))

    async def _item_failed(self, item: WorkItem, exc: EmbedStreamError) -> None:
        if not exc.retriable or item.attempts >= self._max_attempts:
            await self.dead_letter(item, exc)
            return
        now = self._clock_ms()
        if item.first_failure_ms is None:
            item.first_failure_ms = now
            item.first_error = f"{exc.reason}: {exc.message}"
        delay = self._backoff.delay(item.attempts, self._rng, exc.retry_after)
        await self._sink.retry(item, now + int(delay * 1000), f"{exc.reason}: {exc.message}")
        log.info("retry %s after attempt %d in %.1fs (%s)", item.request.id, item.attempts,
                 delay, exc.reason)  # fmt: skip
        self.stats.retries += 1
        self._metrics.count_retry(exc.reason)
        self._on_done(item)

    async def dead_letter(self, item: WorkItem, exc: EmbedStreamError) -> None:
        now = self._clock_ms()
        failure = Failure(
            error_class=type(exc).__name__,
            reason=exc.reason,
            message=exc.message,
            attempts=item.attempts,
            source_topic=item.origin.topic,
            source_partition=item.origin.partition,
            source_offset=item.origin.offset,
            first_failure_ms=item.first_failure_ms or now,
            last_failure_ms=now,
        )
        await self._sink.dead_letter(item.raw, item.request.id.encode(), failure)
        log.warning("dead-lettered %s after %d attempts (%s)", item.request.id, item.attempts,
                    exc.reason)  # fmt: skip
        self.stats.dead_letters += 1
        self._metrics.count_dead_letter(exc.reason)
        self._on_done(item)

    async def _succeeded(
        self,
        key: BucketKey,
        batch: list[Pending[WorkItem]],
        vectors: list[list[float] | str],
        outcome: BatchOutcome,
    ) -> None:
        estimated = sum(p.tokens for p in batch) or 1
        now = self._clock_ms()
        sends = []
        for pending, vector in zip(batch, vectors, strict=True):
            item = pending.payload
            result = EmbedResult(
                id=item.request.id,
                model=key.model,
                embedding=vector,
                dimensions=outcome.dimensions,
                # The provider reports usage per call; each item gets its estimated share.
                tokens=round(outcome.total_tokens * pending.tokens / estimated),
                metadata=item.request.metadata,
                attempts=item.attempts,
                latency_ms=float(now - item.timestamp_ms),
            )
            sends.append(self._sink.result(item, result))
        await asyncio.gather(*sends)
        self.stats.results += len(batch)
        lane = key.priority.label
        for pending in batch:
            self._metrics.observe_result(lane, (now - pending.payload.timestamp_ms) / 1000.0)
            self._on_done(pending.payload)
