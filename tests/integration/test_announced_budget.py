"""The engine under a provider's announced requests-per-minute budget, over real HTTP.

Integration tier: it paces load in real time against the simulator, whose rate limit counts
real one-second windows.

The simulator announces 3000 RPM in OpenAI's headers and enforces it over one-second buckets;
``BatchingClient`` is offered about 1000 items/s for two seconds, far more calls than the
budget allows if every free slot took one. It must learn the budget from the headers and
let batches grow instead: no 429 at all. Only counts are asserted, never times.
"""

from __future__ import annotations

import asyncio

from embedsim import SimulatorConfig, SimulatorServer, expected_vector
from embedstream.engine.client import BatchingClient

MODEL = "m"
RATE = 1000  # items/s offered
SECONDS = 2.0
CONFIG = SimulatorConfig(
    base_ms=40.0,
    per_token_ms=0.02,
    capacity=8,
    rate_limit_rpm=3000,
    rate_limit_burst_s=1.0,  # 50 calls at most at once, 50 more each second
)


async def test_an_announced_rpm_budget_is_never_exceeded() -> None:
    async with (
        SimulatorServer(CONFIG) as sim,
        BatchingClient(base_url=sim.url, api_key="k", model=MODEL, max_concurrency=8) as client,
    ):
        futures: list[asyncio.Future[list[float] | str]] = []
        texts: list[str] = []
        tick = 0.01
        for step in range(int(SECONDS / tick)):  # 10 items every 10 ms
            for i in range(int(RATE * tick)):
                texts.append(f"item {step}-{i}: an ordinary sentence of about thirty tokens")
                futures.append(client.submit(texts[-1]))
            await asyncio.sleep(tick)
        vectors = await asyncio.wait_for(asyncio.gather(*futures), timeout=60)
    assert sim.stats.rejected_429 == 0
    assert sim.stats.inputs == len(texts)  # every item sent once: nothing held back, no retry
    assert sim.stats.calls < len(texts) / 5  # batches grew: far fewer calls than items
    for index in (0, len(texts) // 2, len(texts) - 1):
        assert vectors[index] == expected_vector(MODEL, texts[index], 256)
