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

    python bench/bench_poison.py --burst 2000 --poison-count 10

The burst mode: `--burst` good requests and `--poison-count` always-failing ones (500) in one
burst, under the same model, so they share calls; the engine with library defaults (the one a
`BatchingClient` builds), against the simulator (calls of 300 ms). Run once with the poison and
once without; reported: the calls of each and the extra calls the poison cost, the good
requests' attempts (mean, max) and how many failed, and the poison's calls and attempts.
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
from embedstream.core.lanes import BucketKey, Priority
from embedstream.engine.build import build_engine
from embedstream.engine.callers import CallerRequest, Callers
from embedstream.engine.client import BatchingClient
from embedstream.engine.clock import SYSTEM_CLOCK
from embedstream.engine.embedder import OpenAIEmbedder
from embedstream.errors import EmbedStreamError
from embedstream.settings import load_settings


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


async def burst(good: int, poison: int) -> tuple[int, list[CallerRequest], list[int]]:
    """One burst through the engine; its calls, the jobs, and each job's calls."""
    config = SimulatorConfig(
        base_ms=300, capacity=16, fail_texts_containing="POISON", fail_times=10**9,
        record_calls=True,
    )  # fmt: skip
    texts = [f"good text {n}" for n in range(good)]
    for n in range(poison):  # the same places in every run; some calls of the burst are clean
        texts.insert(n * 7919 % len(texts), f"POISON {n}")
    async with SimulatorServer(config) as simulator:
        settings = load_settings(env={"EMBEDSTREAM_BASE_URL": simulator.url,
                                      "EMBEDSTREAM_API_KEY": "bench"})  # fmt: skip
        backend = OpenAIEmbedder.from_settings(settings)
        callers = Callers()
        engine = build_engine(settings, backend, callers, clock=SYSTEM_CLOCK)
        callers.attach(engine.batcher)
        runner = asyncio.create_task(engine.batcher.run())
        key = BucketKey(Priority.LOW, settings.model, "float", None)
        loop = asyncio.get_running_loop()
        jobs = [CallerRequest(id=t, text=t, tokens=3, key=key, future=loop.create_future())
                for t in texts]  # fmt: skip
        for job in jobs:
            engine.batcher.add(key, job.tokens, job)
        await asyncio.gather(*(job.future for job in jobs), return_exceptions=True)
        engine.batcher.drain()
        await runner
        await backend.close()
        per_text: dict[str, int] = {}
        for call in simulator.calls:
            for text in call.inputs:
                per_text[text] = per_text.get(text, 0) + 1
    return len(simulator.calls), jobs, [per_text.get(job.text, 0) for job in jobs]


async def compare(good: int, poison: int) -> None:
    clean_calls, _, _ = await burst(good, 0)
    calls, jobs, per_job = await burst(good, poison)
    goods = [(j, n) for j, n in zip(jobs, per_job, strict=True) if not j.text.startswith("POISON")]
    bad = [(j, n) for j, n in zip(jobs, per_job, strict=True) if j.text.startswith("POISON")]
    attempts = [j.attempts for j, _ in goods]
    failed = sum(1 for j, _ in goods if j.future.exception() is not None)
    print(f"{good} good + {poison} poison in one burst: {calls} calls ({clean_calls} without the "
          f"poison: {calls - clean_calls} extra); good attempts mean "
          f"{statistics.mean(attempts):.2f}, max {max(attempts)}, {failed} good failed; "
          f"poison calls {sorted(n for _, n in bad)}, "
          f"attempts {sorted(j.attempts for j, _ in bad)}")  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=200)
    parser.add_argument("--poison-rate", type=float, default=2)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--burst", type=int, default=0, help="good requests in one burst")
    parser.add_argument("--poison-count", type=int, default=10, help="poison in the burst")
    options = parser.parse_args()
    if options.burst:
        asyncio.run(compare(options.burst, options.poison_count))
    else:
        asyncio.run(run(options.rate, options.poison_rate, options.seconds))
