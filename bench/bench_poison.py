"""Healthy traffic beside inputs the provider always fails (500), on a slow provider.

    python bench/bench_poison.py                          # this checkout
    PYTHONPATH=<other checkout>/stream python bench/bench_poison.py    # another one

A `BatchingClient` (8 call slots, `max_attempts` 3, retry backoff 100-400 ms) against the
simulator in this process (every call 300 ms: a loaded provider, 16 calls at once). Healthy
requests arrive at `--rate` a second for `--seconds`; beside them, `--poison-rate` requests a
second whose text the simulator always answers with 500, under another model (their own
bucket, so they never share a call with healthy ones). Each poison request ends with an error
after its attempts. Reported: the healthy requests' P50 / P99 latency and how many finished,
and the share of the run the governor's gate was closed for everyone (sampled every 5 ms).
A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent))
from embedsim.config import SimulatorConfig
from embedsim.server import SimulatorServer
from embedstream.engine.client import BatchingClient
from embedstream.errors import EmbedStreamError


async def run(rate: float, poison_rate: float, seconds: float) -> None:
    config = SimulatorConfig(
        base_ms=300, capacity=16, fail_texts_containing="POISON", fail_times=10**9
    )
    async with (
        SimulatorServer(config) as simulator,
        BatchingClient(
            base_url=simulator.url, api_key="bench", max_attempts=3, max_concurrency=8,
            max_batch_size=64, retry_backoff_base_ms=100, retry_backoff_cap_ms=400,
        ) as client,
    ):  # fmt: skip
        latencies: list[float] = []
        poisoned = 0
        closed = samples = 0
        stop = asyncio.Event()

        async def healthy(n: int) -> None:
            started = time.perf_counter()
            await client.embed(f"healthy text {n}")
            latencies.append(time.perf_counter() - started)

        async def poison(n: int) -> None:
            nonlocal poisoned
            try:
                await client.embed(f"POISON {n}", model="text-embedding-3-large")
            except EmbedStreamError:
                poisoned += 1

        async def watch() -> None:
            nonlocal closed, samples
            while not stop.is_set():
                samples += 1
                closed += client.governor.blocked_for() > 0
                await asyncio.sleep(0.005)

        async def arrivals(every_s: float, make: object, count: int) -> list[asyncio.Task[None]]:
            tasks = []
            start = time.perf_counter()
            for n in range(count):
                delay = start + n * every_s - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.create_task(make(n)))  # type: ignore[operator]
            return tasks

        watcher = asyncio.create_task(watch())
        healthy_tasks, poison_tasks = await asyncio.gather(
            arrivals(1 / rate, healthy, int(rate * seconds)),
            arrivals(1 / poison_rate, poison, int(poison_rate * seconds)) if poison_rate else
            asyncio.sleep(0, result=[]),
        )  # fmt: skip
        await asyncio.gather(*healthy_tasks, *poison_tasks)
        stop.set()
        await watcher
    latencies.sort()
    p50 = statistics.median(latencies) * 1000
    p99 = latencies[int(len(latencies) * 0.99) - 1] * 1000
    print(f"healthy {len(latencies)} at {rate:g}/s, poison {poisoned} at {poison_rate:g}/s: "
          f"P50 {p50:.0f} ms, P99 {p99:.0f} ms, gate closed {100 * closed / samples:.1f}% "
          f"of the run")  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=200)
    parser.add_argument("--poison-rate", type=float, default=2)
    parser.add_argument("--seconds", type=float, default=10)
    options = parser.parse_args()
    asyncio.run(run(options.rate, options.poison_rate, options.seconds))
