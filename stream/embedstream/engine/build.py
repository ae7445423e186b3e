"""The one way to assemble the engine: governor, cost model, batch-call path and batcher.

The processor (`embedstream.app`) and the in-process `BatchingClient` both build their engine
here, so a part added to the engine (a limit, a cache, an observer) reaches both.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from embedstream.core import configured
from embedstream.core.clock import Clock
from embedstream.core.costmodel import CostModels
from embedstream.core.governor import Governor
from embedstream.core.lanes import BucketKey, Pending, Priority
from embedstream.core.observer import EngineObserver
from embedstream.core.policy import FlushReason
from embedstream.core.tracing import NULL_TRACER, Tracer
from embedstream.engine.backend import EmbeddingBackend
from embedstream.engine.batcher import Batcher
from embedstream.engine.cache import EmbeddingCache
from embedstream.engine.calls import BatchCaller
from embedstream.engine.jobs import Job, Outcomes
from embedstream.engine.shared_texts import SharedTexts
from embedstream.settings import Settings

J = TypeVar("J", bound=Job)


@dataclass(frozen=True)
class Engine(Generic[J]):
    governor: Governor
    cost: CostModels
    caller: BatchCaller[J]
    batcher: Batcher[J]


class _Dispatch(Generic[J]):
    """The batcher's dispatch: the batch-call path, for the jobs still worth sending."""

    def __init__(self, caller: BatchCaller[J], keep: Callable[[J], bool] | None) -> None:
        self._caller = caller
        self._keep = keep

    async def __call__(
        self, key: BucketKey, batch: Sequence[Pending[J]], reason: FlushReason
    ) -> None:
        if self._keep is not None:
            batch = [pending for pending in batch if self._keep(pending.payload)]
            if not batch:
                return
        await self._caller.dispatch(key, batch, reason)


def build_engine(
    settings: Settings,
    backend: EmbeddingBackend,
    outcomes: Outcomes[J],
    *,
    clock: Clock,
    observer: EngineObserver | None = None,
    cache: EmbeddingCache | None = None,
    backlog: Callable[[Priority], int] | None = None,
    keep: Callable[[J], bool] | None = None,
    tracer: Tracer = NULL_TRACER,
) -> Engine[J]:
    """`backlog` is the consumer lag per lane (the processor's), `keep` drops jobs nobody
    waits for any more (the client's callers that gave up)."""
    governor = configured.governor(settings, clock.monotonic)
    cost = CostModels()  # learned from calls, shared by the caller and the batcher
    texts = None if cache is None else SharedTexts(cache, outcomes)
    caller: BatchCaller[J] = BatchCaller(
        backend,
        outcomes,
        governor,
        max_attempts=settings.max_attempts,
        backoff=configured.backoff(settings),
        observer=observer,
        cost=cost,
        texts=texts,
        clock_ms=clock.wall_ms,
        monotonic=clock.monotonic,
        tracer=tracer,
    )
    batcher: Batcher[J] = Batcher(
        configured.batch_limits(settings),
        _Dispatch(caller, keep),
        governor=governor,
        clock=clock.monotonic,
        backlog=backlog or _no_backlog,
        observer=observer,
        cost=cost,
        observe_dispatch=False,  # the batch-call path reports real call latencies
        source_weights=settings.source_weight_map,
    )
    if texts is not None:
        texts.attach(batcher)
    return Engine(governor, cost, caller, batcher)


def _no_backlog(lane: Priority) -> int:
    return 0
