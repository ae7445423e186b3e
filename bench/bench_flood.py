"""High priority under a low flood: the issue's flood scenario, in process, A/B in one run.

    python bench/bench_flood.py                    # 60,000 low at once, high at 50/s
    python bench/bench_flood.py --low 20000 --rate 50
    PYTHONHASHSEED=0 python bench/bench_flood.py --virtual [--provider-cpu-us 60]

``--virtual`` runs the same engine on a virtual clock (bench_spread.py's loop) against a
provider model of 8 slots and ``40 ms + 0.02 ms/token`` per call, plus, with
``--provider-cpu-us``, that many µs of provider work per vector done one call at a time (the
simulator builds its answers on one event loop, so a small call queues behind the answers
of big ones). CPU costs nothing there: the figures do not depend on the machine's load.

The simulated provider runs in a child process (capacity 8, 40 ms + 0.02 ms/token, texts of
30 tokens: L(1) = 40.6 ms, L(2048) = 1.27 s); the engine runs with the reference settings of
docs/benchmarks/bound.md (max_batch_size 2048, max_batch_tokens 300,000, max_concurrency 8). Each
variant drains the backlog twice, alone and with high traffic: the high P50/P99 (from each
request's scheduled arrival) and the low drain rate with high traffic as a share of the rate
without. A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent.parent))
from embedstream.core.lanes import Priority
from embedstream.core.reservations import LaneTerms, Reservations
from embedstream.engine.backend import BatchCall, BatchOutcome
from embedstream.engine.client import BatchingClient
from embedstream.testing.virtual_loop import VirtualLoop
from embedstream.tools.bench.scenarios import FloodFigures, flood_on
from embedstream.tools.bench.workload import make_texts

from bench.bench_percall import simulator

SETTINGS: dict[str, Any] = {
    "api_key": "x",
    "max_batch_size": 2048,
    "max_batch_tokens": 300_000,
    "max_concurrency": 8,
    "encoding_format": "base64",
}
# What high keeps from low: one slot always; while high traffic is recent, a second slot and
# low calls of at most 512 (or 256) inputs.
VARIANTS: dict[str, LaneTerms] = {
    "before": LaneTerms(idle_slots=1, reserved_slots=1, min_share=0.1),
    "after": LaneTerms(idle_slots=1, reserved_slots=2, lower_call_items=512, min_share=0.1),
    "256": LaneTerms(idle_slots=1, reserved_slots=2, lower_call_items=256, min_share=0.1),
    "slot": LaneTerms(idle_slots=1, reserved_slots=2, min_share=0.1),  # only the second slot
}


class ModelProvider:
    """8 calls at once, each ``40 ms + 0.02 ms/token``, then ``cpu_s`` per vector of answer
    building on one shared worker."""

    def __init__(self, cpu_s: float) -> None:
        self._slots = asyncio.Semaphore(8)
        self._worker = asyncio.Lock()
        self._cpu_s = cpu_s

    async def embed(self, call: BatchCall) -> BatchOutcome:
        loop = asyncio.get_running_loop()
        started = loop.time()
        async with self._slots:
            await asyncio.sleep(0.040 + 0.00002 * 30 * len(call.texts))
            if self._cpu_s > 0:
                async with self._worker:
                    await asyncio.sleep(self._cpu_s * len(call.texts))
        return BatchOutcome([[0.0]] * len(call.texts), 1, 0, loop.time() - started)

    async def close(self) -> None:
        return None


async def run(
    url: str | None, variant: str, low: list[str], rate: float, cpu_s: float = 0.0
) -> tuple[FloodFigures, float]:
    backend = ModelProvider(cpu_s) if url is None else None
    async with BatchingClient(backend, base_url=url, **SETTINGS) as client:
        if url is None:  # the client takes no clock: its batcher and governor read the loop's
            loop = asyncio.get_running_loop()
            client._batcher._clock = loop.time
            client.governor._clock = loop.time
        lanes = {Priority.HIGH: VARIANTS[variant], Priority.LOW: LaneTerms(min_share=0.1)}
        client.governor.reservations = Reservations(lanes)
        await client.embed_many([f"warm-up {i}" for i in range(64)])
        cpu = time.process_time()
        figures = await flood_on(client, low, rate)
        return figures, time.process_time() - cpu


async def main(low_items: int, rate: float, virtual: bool, cpu_s: float) -> None:
    low = make_texts(low_items)
    rows = []
    with contextlib.ExitStack() as stack:
        url = None if virtual else stack.enter_context(simulator(40.0, 0.02))
        for variant in VARIANTS:
            alone, cpu_alone = await run(url, variant, low, 0.0, cpu_s)
            flooded, cpu_flooded = await run(url, variant, low, rate, cpu_s)
            rows.append((variant, alone, flooded, cpu_alone, cpu_flooded))
    where = f"virtual time, provider work {cpu_s * 1e6:g} µs/vector" if virtual else "simulator"
    print(f"{low_items:,} low at once, high at {rate:g}/s during the drain ({where}):")
    print(
        f"  {'':7} {'low/s alone':>11} {'low/s flooded':>13} {'share':>6} "
        f"{'high P50':>9} {'high P99':>9} {'high n':>7} {'failed':>6} {'CPU s':>11}"
    )
    for variant, alone, flooded, cpu_alone, cpu_flooded in rows:
        high = flooded.high
        p50, p99 = (high.p50_ms, high.p99_ms) if high else (float("nan"),) * 2
        share = flooded.low_per_s / alone.low_per_s
        print(
            f"  {variant:7} {alone.low_per_s:11,.0f} {flooded.low_per_s:13,.0f} {share:6.0%} "
            f"{p50:7.0f}ms {p99:7.0f}ms {flooded.high_items:7} "
            f"{alone.failed + flooded.failed:6} {cpu_alone:5.1f}/{cpu_flooded:5.1f}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--low", type=int, default=60_000)
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--virtual", action="store_true", help="virtual clock, provider model")
    parser.add_argument("--provider-cpu-us", type=float, default=0.0)
    ns = parser.parse_args()
    if ns.virtual:
        loop = VirtualLoop()
        try:
            loop.run_until_complete(main(ns.low, ns.rate, True, ns.provider_cpu_us / 1e6))
        finally:
            loop.close()
    else:
        asyncio.run(main(ns.low, ns.rate, False, 0.0))
