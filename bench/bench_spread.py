"""How a backlog is cut over idle call slots, in virtual time: the cost model vs the old floor.

    PYTHONHASHSEED=0 python bench/bench_spread.py [--seconds 5] [--rate 200 1000 3000] [--seeds 5]

A benchmark, not a test: it asserts nothing. It isolates the batching decisions from the
machine: the event loop runs on a virtual clock that jumps to the next timer whenever
nothing is ready, and the provider is a backend that sleeps ``40 ms + 0.02 ms/token`` (the
simulator's tokens) with 8 calls served at once. CPU costs nothing here, so with a fixed
PYTHONHASHSEED the figures are the same on every run and every machine (hash order still
moves a P99 by a few ms between seeds); ``bench_batching.py`` measures the real thing.

Every scenario runs with the cost-model spreading of ``core/policy.spread_length`` and with
the rule it replaced (even rounds over the lane's slots, never a piece under 32 items), on
one ``BatchingClient`` (8 slots, the library's defaults otherwise):

- ``closed``: 50 callers, each awaiting its own vector before sending the next; the bound is
  ``50 / L(1)``.
- ``poisson R/s``: open-loop arrivals; latency from the scheduled arrival to the vector.
- ``burst``: 3000 items at t=0, then 20/s.

``--static`` adds bench_tails.py's static batchers (N items or T ms after the previous flush,
8 slots) on the same provider, so the policy's tail is seen beside theirs with CPU left out.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import random
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import embedstream.engine.batcher as batcher_module
from embedsim.model import count_tokens
from embedstream.core.costmodel import CallCost
from embedstream.core.policy import BatchLimits, batch_length, spread_length
from embedstream.engine.backend import BatchCall, BatchOutcome
from embedstream.engine.client import BatchingClient
from embedstream.tools.bench.baselines import without_fill_rule

sys.path.insert(0, str(Path(__file__).parent.parent))
from embedstream.testing.virtual_loop import VirtualLoop

from bench.bench_batching import StaticBatcher

BASE_S = 0.040
PER_TOKEN_S = 0.00002
SLOTS = 8
WORDS = ["stream", "batch", "token", "vector", "kafka", "offset", "latency", "backlog"]


class SleepingProvider:
    """Serves SLOTS calls at once, each taking the latency model's time."""

    def __init__(self) -> None:
        self._capacity = asyncio.Semaphore(SLOTS)
        self.calls = 0

    async def embed(self, call: BatchCall) -> BatchOutcome:
        self.calls += 1
        loop = asyncio.get_running_loop()
        async with self._capacity:
            started = loop.time()
            await asyncio.sleep(
                BASE_S + PER_TOKEN_S * sum(count_tokens(str(t)) for t in call.texts)
            )
        return BatchOutcome([[0.0]] * len(call.texts), 1, 0, loop.time() - started)

    async def close(self) -> None:
        return None


def old_spread_length(
    token_counts: Sequence[int],
    buffered: int,
    slots: int,
    limits: BatchLimits,
    cost: CallCost,
    call_price: float = 0.0,
    least: int = 1,
) -> int:
    """The rule before the cost model: even rounds, no piece under 32 items."""
    del cost, call_price, least
    fits = batch_length(token_counts, limits)
    if slots <= 1 or buffered <= 32:
        return fits
    rounds = -(-buffered // (slots * max(fits, 1)))
    even = -(-buffered // (slots * rounds))
    return min(fits, max(32, even))


def text(rng: random.Random, index: int) -> str:
    """About 120 characters, distinct per index."""
    return f"{index} " + " ".join(rng.choice(WORDS) for _ in range(17))


def make_client(provider: SleepingProvider) -> BatchingClient:
    client = BatchingClient(provider, model="m", max_concurrency=SLOTS)
    # The client takes no clock; its batcher and governor must read the virtual one.
    loop = asyncio.get_running_loop()
    client._batcher._clock = loop.time
    client._batcher.governor._clock = loop.time
    return client


Factory = Callable[[SleepingProvider], Any]  # a started-on-entry client with `embed`


class Static:
    """bench_batching.py's static batcher as an async context manager, like BatchingClient."""

    def __init__(self, provider: SleepingProvider, max_items: int, interval_ms: float) -> None:
        self._batcher = StaticBatcher(
            provider,
            max_items=max_items,
            interval_s=interval_ms / 1e3,
            max_concurrency=SLOTS,
            make_call=lambda texts: BatchCall("m", texts, "float", None),
        )

    async def __aenter__(self) -> StaticBatcher:
        self._batcher.start()
        return self._batcher

    async def __aexit__(self, *exc: object) -> None:
        await self._batcher.close()


def static(max_items: int, interval_ms: float) -> Factory:
    return lambda provider: Static(provider, max_items, interval_ms)


async def closed(seconds: float, callers: int = 50, factory: Factory = make_client) -> str:
    provider = SleepingProvider()
    loop = asyncio.get_running_loop()
    done = 0
    latencies: list[float] = []
    async with factory(provider) as client:
        rng = random.Random(1)
        stop = loop.time() + seconds

        async def caller(n: int) -> None:
            nonlocal done
            i = 0
            while loop.time() < stop:
                asked = loop.time()
                await client.embed(text(rng, n * 1_000_000 + i))
                latencies.append(loop.time() - asked)
                done += 1
                i += 1

        started = loop.time()
        await asyncio.gather(*(caller(n) for n in range(callers)))
        rate = done / (loop.time() - started)
    bound = callers / (BASE_S + PER_TOKEN_S * count_tokens(text(random.Random(1), 0)))
    p99 = statistics.quantiles(latencies, n=100)[98]
    return (f"{rate:,.0f} items/s ({rate / bound:.0%} of C/L(1)), P99 {p99 * 1e3:.1f} ms, "
            f"{provider.calls} calls")  # fmt: skip


async def open_loop(
    seconds: float, rate: float, seeds: int, burst: int = 0, factory: Factory = make_client
) -> str:
    """P50 and P99 of each seed's run, averaged over ``seeds`` arrival sequences: one
    sequence's P99 moves by 10% with tiny timing changes (a queue at 90% load is chaotic)."""
    p50: list[float] = []
    p99: list[float] = []
    calls = 0
    for seed in range(seeds):
        provider = SleepingProvider()
        loop = asyncio.get_running_loop()
        latencies: list[float] = []
        async with factory(provider) as client:
            rng = random.Random(seed)
            start = loop.time()

            async def one(at: float, body: str, out: list[float] = latencies) -> None:
                await client.embed(body)
                out.append(asyncio.get_running_loop().time() - at)

            tasks = [asyncio.create_task(one(start, text(rng, i))) for i in range(burst)]
            t = 0.0
            while (t := t + rng.expovariate(rate)) < seconds:
                await asyncio.sleep(max(0.0, start + t - loop.time()))
                tasks.append(asyncio.create_task(one(start + t, text(rng, len(tasks)))))
            await asyncio.gather(*tasks)
        q = statistics.quantiles(latencies, n=100)
        p50.append(q[49])
        p99.append(q[98])
        calls += provider.calls
    return (
        f"P50 {statistics.mean(p50) * 1e3:.1f} ms, P99 {statistics.mean(p99) * 1e3:.1f} ms "
        f"(seeds {min(p99) * 1e3:.0f}-{max(p99) * 1e3:.0f}), {calls / seeds:.0f} calls"
    )


async def main(
    seconds: float, rates: list[float], seeds: int, statics: bool, prices: list[float]
) -> None:
    rules: list[tuple[str, Callable[..., int], bool]] = [
        ("fill + spread", spread_length, True), ("spread only", spread_length, False),
    ]  # fmt: skip
    for price in prices:  # the cost model with another price per extra call
        priced = functools.partial(spread_length, call_price=price)
        rules.append((f"price {price:g}", priced, False))
    rules.append(("floor of 32", old_spread_length, False))
    for name, rule, fill in rules:
        batcher_module.__dict__["spread_length"] = rule  # what the batcher calls
        with contextlib.nullcontext() if fill else without_fill_rule():
            print(f"{name:>12} | closed, 50 callers: {await closed(seconds)}")
            for rate in rates:
                result = await open_loop(seconds, rate, seeds)
                print(f"{name:>12} | poisson {rate:.0f}/s: {result}")
            result = await open_loop(4.0, 20.0, seeds, burst=3000)
            print(f"{name:>12} | burst 3000 + 20/s: {result}")
    batcher_module.__dict__["spread_length"] = spread_length
    for name, factory in (("static 200/5", static(200, 5.0)), ("static 64/50", static(64, 50.0))):
        if not statics:
            break
        print(f"{name:>12} | closed, 50 callers: {await closed(seconds, factory=factory)}")
        for rate in rates:
            result = await open_loop(seconds, rate, seeds, factory=factory)
            print(f"{name:>12} | poisson {rate:.0f}/s: {result}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="virtual seconds per run")
    parser.add_argument("--rate", type=float, nargs="*", default=[200.0, 1000.0, 3000.0])
    parser.add_argument("--seeds", type=int, default=5, help="arrival sequences per scenario")
    parser.add_argument("--static", action="store_true", help="the static batchers too")
    parser.add_argument("--call-price", type=float, nargs="*", default=[],
                        help="the cost model at these prices per extra call (x base)")  # fmt: skip
    args = parser.parse_args()
    loop = VirtualLoop()
    try:
        loop.run_until_complete(
            main(args.seconds, args.rate, args.seeds, args.static, args.call_price)
        )
    finally:
        loop.close()
