"""Readiness follows the broker: not ready while it is down, ready again once it is back."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from embedstream.kafka.admin import topic_names
from embedstream.tools.embedded import free_port
from embedstream.tools.simulator.server import SimulatorServer

from tests.integration.broker import PrivateBroker
from tests.integration.helpers import (
    create_all_topics,
    publish,
    request,
    running_processor,
    settings_for,
    wait_for_ids,
)

pytestmark = pytest.mark.integration


async def _readyz(port: int) -> tuple[int, str]:
    url = f"http://127.0.0.1:{port}/readyz"
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, await response.text()


async def _until(port: int, status: int, limit_s: float) -> str:
    body = ""
    for _ in range(int(limit_s / 0.25)):
        code, body = await _readyz(port)
        if code == status:
            return body
        await asyncio.sleep(0.25)
    raise AssertionError(f"/readyz never answered {status}; last: {body}")


async def test_readyz_flips_while_the_broker_is_down(private_broker: PrivateBroker) -> None:
    bootstrap = private_broker.bootstrap
    async with SimulatorServer() as simulator:
        settings = settings_for(bootstrap, "ready.", simulator.url, metrics_port=free_port())
        names = topic_names("ready.")
        await create_all_topics(settings)
        async with running_processor(settings) as processor:
            await _until(settings.metrics_port, 200, 30)
            await private_broker.stop()
            body = await _until(settings.metrics_port, 503, 30)
            assert "broker_reachable" in body
            await private_broker.start()
            await _until(settings.metrics_port, 200, 60)
            # And it still works: the outage cost nothing.
            ids = [f"a{i}" for i in range(50)]
            await publish(bootstrap, names.requests_high, [request(i, i) for i in ids])
            seen = await wait_for_ids(bootstrap, names.results, set(ids), timeout_s=60)
            assert set(seen) == set(ids)
            assert processor.joined
