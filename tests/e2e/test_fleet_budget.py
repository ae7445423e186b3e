"""One provider budget for a fleet of real processes: two `embedstream run` members of one group
and one `embedstream serve` replica, all with `--budget-url` on one `redis-server`, in front of
a provider of 4 slots. While requests flow, a processor is SIGKILLed and restarted, and Redis
is SIGKILLed and restarted. Nothing is lost, the online callers are answered, and the calls
the provider receives stay within its slots: without the shared budget the fleet would send
up to 12 calls at once (4 per process)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import openai
import pytest
from embedsim.model import SimulatorConfig
from embedsim.server import SimulatorServer
from embedstream.engine.budget_shared import LEASE_TTL_S
from embedstream.kafka.client.admin import create_topics, load_topic_specs
from embedstream.testing import eventually
from embedstream.testing.redis import RedisServer
from embedstream.tools.embedded import free_port

from tests.e2e.chaos import Fleet, ProcessorOptions, figures
from tests.e2e.chaos_feed import Feeder, run_until_drained
from tests.e2e.test_serve import _listening

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

STREAM = Path(__file__).resolve().parents[2] / "stream"
SLOTS = 4


@asynccontextmanager
async def gateway(base_url: str, budget_url: str, log: Path) -> AsyncIterator[int]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMBEDSTREAM_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(STREAM), env.get("PYTHONPATH")]))
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "embedstream.cli", "serve", "--base-url", base_url,
            "--http-port", str(port), "--metrics-port", "0", "--budget-url", budget_url,
            "--max-concurrency", str(SLOTS), "--cache", "off",
            env=env, stdout=out, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
    try:
        await eventually(lambda: _listening(port), timeout_s=30, poll_s=0.1)
        yield port
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def callers(port: int, stop: asyncio.Event, statuses: Counter[int]) -> None:
    """Online callers at about 10 requests a second, each a short question."""
    client = openai.AsyncOpenAI(
        base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0, timeout=20
    )
    tasks: set[asyncio.Task[None]] = set()

    async def one(n: int) -> None:
        try:
            await client.embeddings.create(model="m", input=f"online question {n}")
            statuses[200] += 1
        except openai.APIStatusError as exc:
            statuses[exc.status_code] += 1
        except openai.APIConnectionError:
            statuses[0] += 1

    n = 0
    while not stop.is_set():
        task = asyncio.create_task(one(n))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        n += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.1)
    await asyncio.gather(*tasks)
    await client.close()


@pytest.mark.timeout(180)
async def test_a_fleet_on_one_budget_stays_within_the_providers_slots_through_kills(
    bootstrap: str, unique_prefix: str, tmp_path: Path
) -> None:
    config = SimulatorConfig(capacity=SLOTS, base_ms=20.0, per_input_ms=0.3)
    redis = RedisServer().start()
    async with SimulatorServer(config) as simulator:
        options = ProcessorOptions(
            bootstrap, unique_prefix, unique_prefix + "group", simulator.url,
            max_concurrency=SLOTS, max_batch_size=32,
            extra_args=("--budget-url", redis.url, "--cache", "off"),
        )  # fmt: skip
        await create_topics(bootstrap, load_topic_specs(unique_prefix))
        statuses: Counter[int] = Counter()
        try:
            async with (
                Fleet(options, tmp_path) as fleet,
                gateway(simulator.url, redis.url, tmp_path / "serve.log") as port,
            ):
                members = await fleet.start(2)
                simulator.reset_stats()
                stop = asyncio.Event()
                online = asyncio.create_task(callers(port, stop, statuses))
                feeder = Feeder(bootstrap, unique_prefix, count=6000, rate_per_s=600, id_prefix="f")
                async with feeder:
                    await asyncio.sleep(2.0)
                    await members[0].sigkill()  # its leases come back within the lease time
                    await members[0].start()
                    await asyncio.sleep(2.0)
                    redis.kill()  # every member keeps to its share alone meanwhile
                    await asyncio.sleep(1.5)
                    redis.start()  # empty: the heartbeats put the leases back
                    drained = await run_until_drained(
                        bootstrap, unique_prefix, options.group, feeder, timeout_s=120,
                        describe=fleet.log_tails, logs=fleet.log_paths(),
                    )  # fmt: skip
                stop.set()
                await online
                stats = simulator.stats
                figures(
                    "fleet budget", events=feeder.count, lost=len(drained.report.lost),
                    peak_received=stats.peak_received, over_s=round(stats.over_capacity_s, 3),
                    longest_over_s=round(stats.longest_over_capacity_s, 3),
                    online=dict(statuses), drain_s=drained.drain_s,
                )  # fmt: skip
                report = drained.report
                assert report.lost == (), drained.explain()
                assert report.misattributed == () and report.in_both == (), report.summary()
                # Within the provider's slots but for a moment after Redis came back empty
                # (at most a heartbeat until every member's leases are registered again).
                assert stats.longest_over_capacity_s <= LEASE_TTL_S, stats
                assert stats.over_capacity_s <= 1.0, stats
                # The online callers were answered throughout: never a 5xx or a timeout.
                assert statuses[200] >= 0.95 * sum(statuses.values()), statuses
                assert not {s for s in statuses if s >= 500 or s == 0}, statuses
                assert not fleet.unhandled_errors(), fleet.unhandled_errors()
        finally:
            redis.remove()
