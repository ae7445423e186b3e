"""The one way to assemble the engine: governor, cost model, batch-call path and batcher.

The processor (`embedstream.app.processor`) and the in-process `BatchingClient` both build
their engine here, so a part added to the engine (a limit, a cache, an observer) reaches both.
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from embedstream.core import configured
from embedstream.core.budget import ProviderBudget
from embedstream.core.clock import Clock
from embedstream.core.costmodel import CostModels
from embedstream.core.governor import Governor
from embedstream.core.lanes import BucketKey, Pending, Priority
from embedstream.core.observer import BudgetObserver, EngineObserver
from embedstream.core.policy import FlushReason
from embedstream.core.tracing import NULL_TRACER, Tracer
from embedstream.engine.backend import EmbeddingBackend
from embedstream.engine.batcher import Batcher
from embedstream.engine.budget_local import LocalBudget
from embedstream.engine.cache import EmbeddingCache
from embedstream.engine.calls import BatchCaller
from embedstream.engine.jobs import Job, Outcomes
from embedstream.engine.probe import OutageProbe
from embedstream.engine.shared_texts import SharedTexts
from embedstream.settings import Settings

J = TypeVar("J", bound=Job)


@dataclass(frozen=True)
class Engine(Generic[J]):
    budget: ProviderBudget
    cost: CostModels
    caller: BatchCaller[J]
    batcher: Batcher[J]

    @property
    def governor(self) -> Governor:
        """The budget's plan: this process's view of the budget."""
        return self.budget.plan


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


def build_budget(
    settings: Settings,
    clock: Clock,
    *,
    role: str = "client",
    observer: BudgetObserver | None = None,
) -> ProviderBudget:
    """The provider budget the settings ask for: the process's own, or with ``budget_url``
    the fleet's in Redis, this process a member of it as ``role`` (processor, gateway)."""
    governor = configured.governor(settings, clock.monotonic)
    if observer is not None:
        observer.watch_token_ratio(lambda: governor.calibration.ratio)
    if not settings.budget_url:
        return LocalBudget(governor)
    from embedstream.core.ledger import BudgetStore
    from embedstream.engine.budget_shared import STORE_TIMEOUT_S, SharedBudget
    from embedstream.engine.budget_socket import SCHEME, SocketBudgetStore

    store: BudgetStore
    if settings.budget_url.startswith(SCHEME):  # the ledger of `embedstream run`'s parent
        store = SocketBudgetStore(settings.budget_url)
    else:
        from embedstream.engine.budget_redis import RedisBudgetStore
        from embedstream.engine.redis_link import RedisLink

        link = RedisLink(settings.budget_url, timeout_s=STORE_TIMEOUT_S * 4)
        store = RedisBudgetStore(link, configured.budget_namespace(settings))
    return SharedBudget(
        store,
        governor,
        member=member_name(),
        role=role,
        monotonic=clock.monotonic,
        rpm=settings.rate_limit_rpm or None,
        tpm=settings.rate_limit_tpm or None,
        observer=observer,
    )


def member_name() -> str:
    """This process in a fleet's roster: host, pid and a random tag (a pid is reused)."""
    host = socket.gethostname().replace("|", "_")
    return f"{host}:{os.getpid()}:{secrets.token_hex(3)}"


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
    budget: ProviderBudget | None = None,
) -> Engine[J]:
    """`backlog` is the consumer lag per lane (the processor's), `keep` drops jobs nobody
    waits for any more (the client's callers that gave up), `budget` the provider budget to
    draw on (default: the process's own, from the settings)."""
    if budget is None:
        budget = build_budget(settings, clock)
    cost = CostModels()  # learned from calls, shared by the caller and the batcher
    texts = None if cache is None else SharedTexts(cache, outcomes)
    caller: BatchCaller[J] = BatchCaller(
        backend,
        outcomes,
        budget,
        max_attempts=settings.max_attempts,
        backoff=configured.backoff(settings),
        observer=observer,
        cost=cost,
        texts=texts,
        clock_ms=clock.wall_ms,
        monotonic=clock.monotonic,
        tracer=tracer,
        keep=keep,
    )
    batcher: Batcher[J] = Batcher(
        configured.batch_limits(settings),
        _Dispatch(caller, keep),
        budget=budget,
        clock=clock.monotonic,
        backlog=backlog or _no_backlog,
        observer=observer,
        cost=cost,
        observe_dispatch=False,  # the batch-call path reports real call latencies
        source_weights=settings.source_weight_map,
    )
    default_key = BucketKey(
        Priority.ONLINE, settings.model, configured.provider_limits(settings).wire_format, None
    )
    probe = OutageProbe(
        caller.probe, budget, lambda: caller.probe_key or default_key,
        clock=clock.monotonic, wake=batcher.poke, observer=observer,
    )  # fmt: skip
    batcher.companion = probe.run
    batcher.paused = caller.paused

    def requeue(key: BucketKey, items: Sequence[Pending[J]]) -> None:
        for pending in items:
            batcher.add(key, pending.tokens, pending.payload)

    caller.requeue = requeue
    if texts is not None:
        texts.attach(batcher)
    return Engine(budget, cost, caller, batcher)


def _no_backlog(lane: Priority) -> int:
    return 0
