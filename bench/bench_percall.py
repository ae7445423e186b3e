"""Where the client's CPU goes: per call, over a backlog's calls, and with no provider at all.

    python bench/bench_percall.py                 # client CPU per call: SDK vs lean path
    python bench/bench_percall.py --timeline      # a 100,000-text backlog, call by call
    python bench/bench_percall.py --overhead      # zero-latency embed_many vs a bare asyncio loop
    python bench/bench_percall.py --profile       # any of them under cProfile (top 25 lines)

A benchmark, not a test: it asserts nothing. The simulator runs in a child process, so this
process's CPU time is the client's alone. These are the measurements behind "What limits each
remaining gap" in docs/benchmarks/bound.md.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

from embedstream.engine.backend import BatchCall, BatchOutcome, EmbeddingBackend
from embedstream.engine.client import BatchingClient
from embedstream.engine.embedder import OpenAIEmbedder
from embedstream.settings import load_settings
from embedstream.testing import RecordingBackend
from embedstream.tools.bench.workload import make_texts


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def simulator(base_ms: float, per_token_ms: float) -> Iterator[str]:
    port = free_port()
    command = [sys.executable, "-m", "embedstream", "simulate", "--port", str(port)]
    command += ["--base-ms", str(base_ms), "--per-token-ms", str(per_token_ms), "--capacity", "8"]
    # This checkout's simulator, whatever `embedstream` is installed from.
    env = {**os.environ, "PYTHONPATH": os.path.join(os.path.dirname(__file__), "..", "stream")}
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        child.terminate()
        child.wait(10)


class TimedBackend:
    """Records (start, end) of every call of the backend it wraps."""

    def __init__(self, inner: EmbeddingBackend) -> None:
        self.inner = inner
        self.calls: list[tuple[float, float]] = []

    async def embed(self, call: BatchCall) -> BatchOutcome:
        started = time.monotonic()
        outcome = await self.inner.embed(call)
        self.calls.append((started, time.monotonic()))
        return outcome

    async def close(self) -> None:
        await self.inner.close()


PATHS = {"sdk": True, "lean": False}  # OpenAIEmbedder(sdk=...)


async def per_call(calls: int, rounds: int) -> None:
    """Client CPU per call of each request path, A/B in one run: the paths take turns in
    rounds, so a neighbour's load falls on both alike. Directly on the embedder (the request
    path alone), and through BatchingClient (the whole engine, one text per call)."""
    texts = make_texts(256)
    per_round = max(calls // rounds, 1)
    cpu: dict[tuple[str, str], float] = {}
    with simulator(0.0, 0.0) as url:
        embedders = {
            name: OpenAIEmbedder(base_url=url, api_key="x", timeout_s=30, sdk=sdk)
            for name, sdk in PATHS.items()
        }
        clients = {
            name: BatchingClient(embedder, base_url=url, api_key="x", max_wait_ms=0)
            for name, embedder in embedders.items()
        }
        for client in clients.values():
            client.start()
        try:
            for name, embedder in embedders.items():  # connections open, caches warm
                for i in range(50):
                    await embedder.embed(BatchCall("m", [f"warm-up {i}"], "base64", None))
                    await clients[name].embed(f"warm-up {i}")
            for _ in range(rounds):
                for name, embedder in embedders.items():
                    for size, sent in (("1 text", 1), ("256 texts", 256)):
                        n = per_round if sent == 1 else max(per_round // 8, 1)
                        start = time.process_time()
                        for i in range(n):
                            batch = [f"{i} {t}" for t in texts[:sent]]
                            await embedder.embed(BatchCall("m", batch, "base64", None))
                        spent = (time.process_time() - start) / n
                        cpu[name, size] = cpu.get((name, size), 0.0) + spent / rounds
                    start = time.process_time()
                    for i in range(per_round):
                        await clients[name].embed(f"text number {i} with a few words")
                    spent = (time.process_time() - start) / per_round
                    key = (name, "BatchingClient.embed, 1 text")
                    cpu[key] = cpu.get(key, 0.0) + spent / rounds
        finally:
            for client in clients.values():
                await client.close()
    print(f"client CPU per call, zero-latency simulator in another process, {rounds} rounds:")
    print(f"  {'':34} {'sdk µs':>9} {'lean µs':>9} {'lean/sdk':>9}")
    for what in ("1 text", "256 texts", "BatchingClient.embed, 1 text"):
        sdk, lean = cpu["sdk", what] * 1e6, cpu["lean", what] * 1e6
        print(f"  {what:34} {sdk:9.0f} {lean:9.0f} {lean / sdk:9.2f}")


async def timeline(items: int, encoding_format: str) -> None:
    settings: dict[str, Any] = {
        "api_key": "x",
        "max_batch_size": 2048,
        "max_batch_tokens": 300_000,
        "max_concurrency": 8,
        "encoding_format": encoding_format,
    }
    with simulator(40.0, 0.02) as url:
        settings["base_url"] = url
        backend = TimedBackend(
            OpenAIEmbedder.from_settings(load_settings(env={}, overrides=settings))
        )
        async with BatchingClient(backend, **settings) as client:
            texts = make_texts(items)
            await client.embed_many(texts[:64])
            backend.calls.clear()
            start, cpu = time.monotonic(), time.process_time()
            futures = [client.submit(text, priority="low") for text in texts]
            submitted = time.monotonic()
            await asyncio.gather(*futures)
            end, cpu = time.monotonic(), time.process_time() - cpu
    latencies = [e - s for s, e in backend.calls]
    mean, low, high = sum(latencies) / len(latencies), min(latencies), max(latencies)
    first = min(s for s, _ in backend.calls) - start
    edges = sorted([(s, 1) for s, _ in backend.calls] + [(e, -1) for _, e in backend.calls])
    busy, last, area = 0, start, 0.0
    for at, step in edges:
        area += busy * (at - last)
        busy, last = busy + step, at
    print(f"backlog of {items:,} ({encoding_format}), L(1,269 ms) per full call in the model:")
    elapsed = end - start
    print(f"  submit loop {submitted - start:.2f} s; first call at +{first:.2f} s")
    print(f"  {items / elapsed:,.0f} items/s over {elapsed:.2f} s; client CPU {cpu:.2f} s")
    print(f"  {len(latencies)} calls; latency mean {mean:.3f} s (min {low:.3f}, max {high:.3f})")
    print(f"  calls in flight on average {area / elapsed:.2f} of 8")


async def overhead(items: int) -> None:
    texts = [f"short text number {i}" for i in range(items)]
    async with BatchingClient(
        RecordingBackend(), max_batch_size=2048, max_batch_tokens=100_000_000, max_concurrency=8
    ) as client:
        await client.embed_many(texts[:100])
        cpu = time.process_time()
        await client.embed_many(texts)
        engine = items / (time.process_time() - cpu)

    async def one(future: asyncio.Future[int]) -> int:
        return await future

    loop = asyncio.get_running_loop()
    cpu = time.process_time()
    futures = [loop.create_future() for _ in range(items)]
    tasks = [asyncio.ensure_future(one(f)) for f in futures]
    for i, future in enumerate(futures):
        future.set_result(i)
    await asyncio.gather(*tasks)
    bare = items / (time.process_time() - cpu)
    print(f"{items:,} texts, zero-latency backend, items per CPU second:")
    print(f"  embed_many through BatchingClient: {engine:,.0f}")
    print(f"  a bare asyncio loop, one task and one future per item: {bare:,.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--timeline", action="store_true", help="a backlog, call by call")
    parser.add_argument("--overhead", action="store_true", help="zero-latency engine cost")
    parser.add_argument("--profile", action="store_true", help="under cProfile")
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--encoding-format", choices=["float", "base64"], default="base64")
    ns = parser.parse_args()
    run: Callable[[], Awaitable[None]]
    if ns.timeline:
        run = lambda: timeline(ns.items, ns.encoding_format)  # noqa: E731
    elif ns.overhead:
        run = lambda: overhead(ns.items)  # noqa: E731
    else:
        run = lambda: per_call(ns.calls, ns.rounds)  # noqa: E731
    profile = cProfile.Profile()
    if ns.profile:
        profile.enable()
    asyncio.run(run())
    if ns.profile:
        profile.disable()
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
