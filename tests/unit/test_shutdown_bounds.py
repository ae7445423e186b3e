"""A stop ends within `drain_timeout_s` and a few seconds, whatever it waits for.

Once, an exactly-once member logged "received SIGTERM" and then nothing for a minute: after
the drain, something waited without a bound. Each await of the shutdown is tried here with a
fake that never answers, on the in-memory fakes in virtual time (the event loop's clock jumps
to its next timer when nothing is ready), so a bound of seconds costs none.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from embedstream.core.tracing import NullTracer
from embedstream.engine.bounded import CANCEL_GRACE_S
from embedstream.kafka.consumption.processor_loop import (
    ABANDON_GRACE_S,
    CLOSE_BUDGET_S,
    CLOSE_STEP_MIN_S,
)
from embedstream.testing import eventually
from embedstream.testing.kafka import FakeCluster, FakeTransactionalProducer
from embedstream.testing.virtual_loop import LoopClock, VirtualLoop
from embedstream.wire import RetryState

from tests.unit.harness import LOW, RETRY, GatedBackend, Harness, fake_cluster, running

DRAIN_S = 3.0
# The drain's grace and its cancelled ends, the closing budget, and the grace of the one step
# given up: each case has one thing that never answers.
MARGIN_S = ABANDON_GRACE_S + 3 * CANCEL_GRACE_S + CLOSE_BUDGET_S + CLOSE_STEP_MIN_S


async def never(*args: Any, **kwargs: Any) -> Any:
    """An answer that never comes."""
    await asyncio.Event().wait()


@dataclass
class BlockingTracer(NullTracer):
    """Its close (the last spans' export, on a thread) blocks until `release`."""

    release: threading.Event = field(default_factory=threading.Event)

    def close(self) -> None:
        self.release.wait()


def held_retry(h: Harness) -> None:
    """A retry record not due for an hour: held in memory, written back at the stop."""
    due = LoopClock(asyncio.get_running_loop()).wall_ms() + 3_600_000
    h.request(RETRY, "later", "retried text", **dict(RetryState(1, due).headers()))


class StuckTransactions:
    """Transactional producers whose transactions never commit and who never stop."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster
        self.made: list[FakeTransactionalProducer] = []

    def __call__(self, txn_id: str) -> FakeTransactionalProducer:
        producer = FakeTransactionalProducer(self.cluster, txn_id)
        producer.commit_transaction = never  # type: ignore[method-assign]
        producer.stop = never  # type: ignore[method-assign]
        self.made.append(producer)
        return producer


@dataclass
class Case:
    """`prepare` runs once the service is up, then the stop; `logged` names what was given up
    (None: the step has a bound of its own below the budget)."""

    name: str
    prepare: Callable[[Harness, StuckTransactions | None], Awaitable[None]]
    logged: str | None
    options: dict[str, Any] = field(default_factory=dict)


async def retries_the_broker_never_takes(h: Harness, stuck: StuckTransactions | None) -> None:
    held_retry(h)
    await eventually(lambda: len(h.service.processor.parts.waiting) == 1)
    h.producer.send_batch = never  # type: ignore[method-assign]


async def results_never_acknowledged(h: Harness, stuck: StuckTransactions | None) -> None:
    h.producer.send_batch = never  # type: ignore[method-assign]
    h.request(LOW, "r", "text")
    await eventually(lambda: h.service.processor.parts.outcomes.writing == 1)


async def commits_never_answered(h: Harness, stuck: StuckTransactions | None) -> None:
    h.consumer.commit = never  # type: ignore[method-assign]
    h.request(LOW, "r", "text")
    await eventually(lambda: h.result_ids() == ["r"])
    await eventually(lambda: h.service.processor.parts.committer.rounds == 0)


async def consumer_never_closes(h: Harness, stuck: StuckTransactions | None) -> None:
    h.consumer.stop = never  # type: ignore[method-assign]


async def producer_never_closes(h: Harness, stuck: StuckTransactions | None) -> None:
    h.producer.stop = never  # type: ignore[method-assign]


async def cache_never_closes(h: Harness, stuck: StuckTransactions | None) -> None:
    cache = h.service.processor.parts.cache
    assert cache is not None
    cache.close = never  # type: ignore[method-assign]


async def nothing(h: Harness, stuck: StuckTransactions | None) -> None:
    return None


async def transaction_under_way(h: Harness, stuck: StuckTransactions | None) -> None:
    assert stuck is not None
    h.request(LOW, "r", "text")
    await eventually(lambda: any(p.transaction_state == "IN_TRANSACTION" for p in stuck.made))


CASES = [
    Case("held retries the broker never takes", retries_the_broker_never_takes,
         "writing held retries back did not finish"),
    Case("results the broker never acknowledges", results_never_acknowledged,
         "drain deadline passed"),
    Case("commits never answered", commits_never_answered, "the final commit did not finish"),
    Case("the consumer's stop", consumer_never_closes, "the consumer's stop did not finish"),
    Case("the producer's stop", producer_never_closes, "the producer's stop did not finish"),
    Case("the cache's close", cache_never_closes, "the cache's close did not finish",
         {"cache": "memory"}),
    Case("the last spans' export", nothing, "exporting the last spans did not finish",
         {"tracer": True}),
    Case("a transaction that never commits, producers that never stop", transaction_under_way,
         "the final commit did not finish", {"stuck_transactions": True}),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_a_stop_ends_within_the_drain_and_a_margin(
    case: Case, caplog: pytest.LogCaptureFixture
) -> None:
    elapsed = in_virtual_time(stopped(case))
    assert elapsed <= DRAIN_S + MARGIN_S
    if case.logged is not None:
        assert any(case.logged in r.getMessage() for r in caplog.records), case.logged


async def stopped(case: Case) -> float:
    """Virtual seconds from the stop to the service's end."""
    cluster = fake_cluster()
    options = dict(case.options)
    tracer = BlockingTracer() if options.pop("tracer", False) else None
    stuck = StuckTransactions(cluster) if options.pop("stuck_transactions", False) else None
    try:
        clock = LoopClock(asyncio.get_running_loop())
        async with running(
            GatedBackend(gate=_open()), cluster=cluster, clock=clock, tracer=tracer,
            transactional=stuck, drain_timeout_s=DRAIN_S, **options,
        ) as h:  # fmt: skip
            await case.prepare(h, stuck)
            loop = asyncio.get_running_loop()
            stopped_at = loop.time()
            h.service.stop()  # once: the drain runs its course
            await asyncio.wait_for(asyncio.shield(h.task), 3600)
            return loop.time() - stopped_at
    finally:
        if tracer is not None:
            tracer.release.set()


def _open() -> asyncio.Event:
    gate = asyncio.Event()
    gate.set()
    return gate


def in_virtual_time(work: Awaitable[float]) -> float:
    loop = VirtualLoop()
    try:
        with caught_in(logging.getLogger("embedstream")):
            return loop.run_until_complete(work)
    finally:
        loop.close()


class caught_in:
    """Keeps the logger's level low enough for caplog while the loop runs."""

    def __init__(self, logger: logging.Logger) -> None:
        self._logger = logger
        self._level = logger.level

    def __enter__(self) -> None:
        self._logger.setLevel(logging.INFO)

    def __exit__(self, *exc: object) -> None:
        self._logger.setLevel(self._level)


def test_a_revoke_writes_held_retries_back_within_the_drain() -> None:
    """The same write in a revoke: the rebalance listener (aiokafka's coordination, and the
    consumer's close behind it) waited for it without a bound."""

    async def revoked() -> float:
        async with running(GatedBackend(gate=_open()), clock=LoopClock(asyncio.get_running_loop()),
                           drain_timeout_s=DRAIN_S) as h:  # fmt: skip
            held_retry(h)
            await eventually(lambda: len(h.service.processor.parts.waiting) == 1)
            h.producer.send_batch = never  # type: ignore[method-assign]
            loop = asyncio.get_running_loop()
            began = loop.time()
            await asyncio.wait_for(h.consumer.revoke({RETRY}), 3600)
            return loop.time() - began

    assert in_virtual_time(revoked()) <= DRAIN_S + CANCEL_GRACE_S
