"""A provider outage dead-letters nothing, whatever `max_attempts` is, and readiness says so.

Found from outside: with `max_attempts=2` and the provider unreachable, items went to the
dead-letter topic within 0.3 s while `/readyz` still said ready. Attempts are now spent only on
failures the provider's other calls do not share, and the provider counts as down after three
outage-like failures in a row over a second (core/outage.py). A real `embedstream run` process
with `--max-attempts 2` rides out a provider outage (10 s; 20 s in the long form of
chaos_scale.py) under steady input, either with the simulator stopped (connection refused)
or answering 500 to everything.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import aiohttp
import orjson
import pytest
from embedsim.server import SimulatorServer
from embedstream.kafka.client.admin import create_topics, load_topic_specs
from embedstream.settings.derived import ITEM_RESIDENT_BYTES
from embedstream.tools.embedded import free_port

from tests.e2e.chaos import Fleet, ProcessorOptions
from tests.e2e.chaos_feed import Feeder, report_figures, run_until_drained
from tests.e2e.chaos_scale import SCALE
from tests.e2e.chaos_watch import Sampling

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

OUTAGE_S = SCALE.outage_s
# Seen down within this long of the outage's start (thresholds: 1 to 2 s, plus a scrape).
DOWN_WITHIN_S = 4.0
# Ready again within this long of the provider's return (a held batch asks again at least
# every 5 s, held.HOLD_PROBE_MAX_S, and needs two successes).
UP_WITHIN_S = 12.0


class ReadyzSampler(Sampling):
    """GET /readyz every `interval_s`: (monotonic time, status, body); status 0 when no
    answer."""

    def __init__(self, port: int, interval_s: float = 0.2) -> None:
        self._url = f"http://127.0.0.1:{port}/readyz"
        self._interval_s = interval_s
        self.samples: list[tuple[float, int, str]] = []

    async def _run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=2.0)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while True:
                status, body = 0, ""
                with contextlib.suppress(aiohttp.ClientError, TimeoutError, OSError):
                    async with session.get(self._url) as response:
                        status, body = response.status, await response.text()
                self.samples.append((time.monotonic(), status, body))
                await asyncio.sleep(self._interval_s)

    def between(self, since: float, until: float) -> list[int]:
        return [status for t, status, _ in self.samples if since <= t <= until]

    def bodies_between(self, since: float, until: float) -> list[str]:
        return [body for t, _, body in self.samples if since <= t <= until]

    def first(self, status: int, since: float) -> float | None:
        return next((t for t, s, _ in self.samples if t >= since and s == status), None)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("kind", ["stopped", "all_500"])
async def test_an_outage_with_max_attempts_2_dead_letters_nothing_and_readyz_follows(
    bootstrap: str, unique_prefix: str, tmp_path: Path, kind: str
) -> None:
    port = free_port()
    provider = SimulatorServer()
    await provider.start(port=port)
    options = ProcessorOptions(
        bootstrap, unique_prefix, unique_prefix + "group", provider.url,
        max_buffered_bytes=1000 * ITEM_RESIDENT_BYTES, extra_args=("--max-attempts", "2"),
    )  # fmt: skip
    await create_topics(bootstrap, load_topic_specs(unique_prefix))
    try:
        async with Fleet(options, tmp_path) as fleet:
            member = fleet.add(metrics_port=free_port())
            await member.start()
            await member.wait_assigned(timeout_s=60)
            feeder = Feeder(
                bootstrap, unique_prefix, count=SCALE.outage_events, rate_per_s=200, id_prefix="o"
            )
            async with ReadyzSampler(member.metrics_port) as readyz, feeder:
                await asyncio.sleep(5.0)
                outage_start = time.monotonic()
                if kind == "stopped":
                    await provider.stop()
                else:
                    provider.set_faults(error_rate=1.0)
                await asyncio.sleep(OUTAGE_S)
                if kind == "stopped":
                    provider = SimulatorServer()
                    await provider.start(port=port)
                else:
                    provider.set_faults(error_rate=0.0)
                outage_end = time.monotonic()
                drained = await run_until_drained(
                    bootstrap, unique_prefix, options.group, feeder, timeout_s=150,
                    describe=fleet.log_tails, logs=fleet.log_paths(),
                )  # fmt: skip
            report = drained.report
            down_at = readyz.first(503, outage_start)
            up_at = readyz.first(200, outage_end)
            report_figures(
                f"outage {kind}", feeder, drained, outage_s=round(outage_end - outage_start, 1),
                seen_down_after_s=round(down_at - outage_start, 1) if down_at else None,
                ready_again_after_s=round(up_at - outage_end, 1) if up_at else None,
            )  # fmt: skip
            assert report.dead_letters == 0, report.summary()
            assert report.lost == (), drained.explain()
            assert report.misattributed == () and report.in_both == (), report.summary()
            assert 200 in readyz.between(0.0, outage_start)  # ready before
            assert down_at is not None and down_at - outage_start <= DOWN_WITHIN_S, down_at
            during = readyz.between(down_at, outage_end)
            assert set(during) == {503}, during  # no flapping while down
            bodies = readyz.bodies_between(down_at, outage_end)
            assert all(not orjson.loads(b)["checks"]["provider_usable"] for b in bodies), bodies[:3]
            assert up_at is not None and up_at - outage_end <= UP_WITHIN_S, up_at
            assert member.alive
            assert await member.sigterm() == 0
    finally:
        await provider.stop()
