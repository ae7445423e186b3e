"""An input the provider always fails with a 5xx, beside healthy traffic on a slow provider:
its repeat failures may look like an outage for a moment (no call sent since its first
failure has been answered yet), but that must hold only its own call, never everyone's.

Holding everyone (the governor's gate) on such a failure stopped all calls for 0.25-5 s at
every repeat of every such input while healthy calls were being answered: a stream with
a few bad inputs a second would have spent most of its time held.

Both run on an event loop in virtual time (`VirtualLoop`): the slow provider, the feeder's pace
and the outage's length are timers that take no real time, and the client reads the same clock.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable

import pytest
from embedstream.core.clock import Clock
from embedstream.engine.backend import BatchCall, BatchOutcome
from embedstream.engine.client import BatchingClient
from embedstream.errors import EmbedStreamError, Reason, TransientError, http_reason
from embedstream.testing import eventually, vector_for
from embedstream.testing.virtual_loop import LoopClock, VirtualLoop

ANSWER_S = 0.3  # a loaded provider: healthy calls take this long


def in_virtual_time(test: Callable[[Clock], Awaitable[None]]) -> None:
    loop = VirtualLoop()
    try:
        loop.run_until_complete(test(LoopClock(loop)))
    finally:
        loop.close()


class PoisonBesideSlowAnswers:
    def __init__(self) -> None:
        self.poison_calls = 0
        self.started: list[float] = []  # when each healthy call reached the provider

    async def embed(self, call: BatchCall) -> BatchOutcome:
        texts = list(call.texts)
        if "poison" in texts:
            self.poison_calls += 1
            raise TransientError(http_reason(500), "internal server error")
        self.started.append(asyncio.get_running_loop().time())
        await asyncio.sleep(ANSWER_S)
        return BatchOutcome([vector_for(t) for t in texts], 1, len(texts), ANSWER_S)

    async def close(self) -> None:
        return None


def test_a_poison_input_beside_healthy_traffic_never_holds_the_healthy_calls(
    caplog: pytest.LogCaptureFixture,
) -> None:
    in_virtual_time(lambda clock: poison_beside_healthy_traffic(clock, caplog))


async def poison_beside_healthy_traffic(clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    provider = PoisonBesideSlowAnswers()
    async with BatchingClient(
        provider, max_attempts=3, max_batch_size=1, max_concurrency=8, max_wait_ms=1,
        retry_backoff_base_ms=50, retry_backoff_cap_ms=100, clock=clock,
    ) as client:  # fmt: skip
        stop = asyncio.Event()
        requests: list[asyncio.Future[object]] = []
        gate_closed = 0  # samples that found the gate closed for everyone

        async def healthy() -> None:
            n = 0
            while not stop.is_set():
                requests.append(asyncio.ensure_future(client.embed(f"healthy {n}")))
                n += 1
                await asyncio.sleep(0.05)

        async def watch_the_gate() -> None:
            nonlocal gate_closed
            while not stop.is_set():
                gate_closed += client.governor.blocked_for() > 0
                await asyncio.sleep(0.005)

        feeder = asyncio.create_task(healthy())
        watcher = asyncio.create_task(watch_the_gate())
        await eventually(lambda: len(provider.started) >= 10)  # healthy calls being answered
        with caplog.at_level(logging.INFO, logger="embedstream"), pytest.raises(EmbedStreamError):
            await asyncio.wait_for(client.embed("poison"), 30)
        stop.set()
        await asyncio.gather(feeder, watcher)
        await asyncio.gather(*requests)  # every healthy request answered
    assert provider.poison_calls == 3  # one call an attempt: none sent again unspent
    assert gate_closed == 0  # nobody else was held
    downs = [r for r in caplog.records if r.getMessage().startswith("provider down")]
    assert downs == []  # and the provider never looked down


class PoisonsBesideSlowAnswers:
    """Any call with a poison text fails at once (500); the others take ANSWER_S."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    async def embed(self, call: BatchCall) -> BatchOutcome:
        texts = list(call.texts)
        names = [t for t in texts if isinstance(t, str)]
        self.calls.update(names)
        if any(t.startswith("poison") for t in names):
            raise TransientError(http_reason(500), "internal server error")
        await asyncio.sleep(ANSWER_S)
        return BatchOutcome([vector_for(t) for t in texts], 1, len(texts), ANSWER_S)

    async def close(self) -> None:
        return None


def test_every_call_of_a_failing_text_spends_an_attempt() -> None:
    """Its repeat failure comes before the healthy calls sent since its first one are answered:
    held and sent again on a timer, it was called up to 8 times for 3 attempts. The answers of
    the calls in flight decide instead, so each of its calls is one of its attempts."""
    provider = PoisonsBesideSlowAnswers()
    failed: list[object] = []
    in_virtual_time(lambda clock: poisons_beside_healthy_traffic(clock, provider, failed))
    assert len(failed) == 3 and all(isinstance(f, EmbedStreamError) for f in failed)
    assert {t: n for t, n in provider.calls.items() if t.startswith("poison")} == {
        f"poison {n}": 3 for n in range(3)
    }


async def poisons_beside_healthy_traffic(
    clock: Clock, provider: PoisonsBesideSlowAnswers, failed: list[object]
) -> None:
    async with BatchingClient(
        provider, max_attempts=3, max_batch_size=1, max_concurrency=8, max_wait_ms=1,
        retry_backoff_base_ms=50, retry_backoff_cap_ms=100, clock=clock,
    ) as client:  # fmt: skip
        stop = asyncio.Event()

        async def healthy() -> None:
            requests: list[asyncio.Future[object]] = []
            while not stop.is_set():
                requests.append(asyncio.ensure_future(client.embed(f"healthy {len(requests)}")))
                await asyncio.sleep(0.05)
            await asyncio.gather(*requests)

        feeder = asyncio.create_task(healthy())
        await asyncio.sleep(0.5)  # healthy calls are being answered
        poisons = [client.embed(f"poison {n}") for n in range(3)]
        failed += await asyncio.gather(*poisons, return_exceptions=True)
        stop.set()
        await feeder


class GoesDown:
    """Answers until `down` is set, then refuses every call (connection) until `up` is set."""

    def __init__(self) -> None:
        self.down = asyncio.Event()
        self.up = asyncio.Event()
        self.refused = 0

    async def embed(self, call: BatchCall) -> BatchOutcome:
        if self.down.is_set() and not self.up.is_set():
            self.refused += 1
            raise TransientError(Reason.CONNECTION, "cannot reach the provider: refused")
        texts = list(call.texts)
        return BatchOutcome([vector_for(t) for t in texts], 1, len(texts), 0.001)

    async def close(self) -> None:
        return None


def test_an_outage_still_closes_the_gate_for_everyone_and_spends_no_last_attempt(
    caplog: pytest.LogCaptureFixture,
) -> None:
    in_virtual_time(lambda clock: an_outage(clock, caplog))


async def an_outage(clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    provider = GoesDown()
    async with BatchingClient(
        provider, max_attempts=2, max_batch_size=1, max_concurrency=4, max_wait_ms=1,
        retry_backoff_base_ms=50, retry_backoff_cap_ms=200, clock=clock,
    ) as client:  # fmt: skip
        await client.embed("warm")
        provider.down.set()
        # No call succeeds from now on; the last success grows older on the client's clock,
        # so a first failure after it spends no attempt.
        await asyncio.sleep(1.1)
        with caplog.at_level(logging.ERROR, logger="embedstream"):
            pending = [asyncio.ensure_future(client.embed(f"during {n}")) for n in range(6)]
            await eventually(lambda: client.governor.provider_down, timeout_s=10)
            await eventually(lambda: client.governor.blocked_for() > 0, timeout_s=10)
        assert any(r.getMessage().startswith("provider down") for r in caplog.records)
        assert not any(p.done() for p in pending)  # held, none dead-lettered
        provider.up.set()
        vectors = await asyncio.wait_for(asyncio.gather(*pending), 30)
    assert vectors == [vector_for(f"during {n}") for n in range(6)]
    assert provider.refused >= 3
