"""Readiness follows the broker (not ready while it is down, ready again once it is back) and
the group (liveness answers from the start, readiness only once the member has joined)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import Any

import aiohttp
import pytest
from embedsim.server import SimulatorServer
from embedstream.kafka.client.admin import topic_names
from embedstream.kafka.client.clients import ConsumerRebalanceListener, consumer_for
from embedstream.tools.embedded import free_port

from tests.integration.broker import PrivateBroker
from tests.integration.helpers import (
    create_all_topics,
    publish,
    request,
    running_processor,
    settings_for,
    wait_for_ids,
)

# Private brokers are heavy (a JVM each): their tests share one worker.
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("private-broker")]


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
            # SIGKILL: down at once. A graceful stop under load kept answering metadata
            # requests while it shut its coordinator down (a parallel CI run saw /readyz stay
            # ready for all of the wait).
            await private_broker.kill()
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


class _HoldsTheRebalance(ConsumerRebalanceListener):  # type: ignore[misc]  # aiokafka is untyped
    """A group member that does not rejoin while ``release`` is unset: a rebalance (a new
    member joining) cannot complete until it does, as with a slow member in production."""

    def __init__(self) -> None:
        self.revoking = asyncio.Event()
        self.release = asyncio.Event()

    async def on_partitions_revoked(self, revoked: Any) -> None:
        if self.revoking.is_set() or revoked:  # not the empty revoke of its own first join
            self.revoking.set()
            await self.release.wait()

    async def on_partitions_assigned(self, assigned: Any) -> None:
        pass


async def _get(port: int, path: str) -> tuple[int, str]:
    url = f"http://127.0.0.1:{port}{path}"
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, await response.text()


async def test_healthz_answers_before_the_group_join_completes(
    bootstrap: str, unique_prefix: str, simulator: SimulatorServer
) -> None:
    port = free_port()
    settings = settings_for(bootstrap, unique_prefix, simulator.url, metrics_port=port)
    await create_all_topics(settings)
    names = topic_names(unique_prefix)
    holder = _HoldsTheRebalance()
    member = consumer_for(
        bootstrap, group_id=settings.group_id, session_timeout_ms=30_000,
        heartbeat_interval_ms=1000, max_poll_interval_ms=120_000,
    )  # fmt: skip
    member.subscribe([names.requests_high, names.requests_low, names.retry], listener=holder)
    await member.start()
    proc = None
    try:
        async with asyncio.timeout(60):
            while not member.assignment():
                await member.getmany(timeout_ms=200)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "embedstream", "run", "--bootstrap-servers", bootstrap,
            "--topic-prefix", unique_prefix, "--group-id", settings.group_id,
            "--metrics-port", str(port), "--base-url", simulator.url,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
            env={k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")},
        )  # fmt: skip
        # The new member's join has begun a rebalance the holder will not finish.
        await asyncio.wait_for(holder.revoking.wait(), 60)
        for _ in range(3):  # and it stays so while the holder holds
            assert await _get(port, "/healthz") == (200, "ok")
            status, body = await _get(port, "/readyz")
            assert status == 503 and '"reasons":["joined_group"]' in body, body
            await asyncio.sleep(0.5)
        holder.release.set()
        await member.stop()  # leaves the group: the join completes
        await _until(port, 200, 60)
        assert await _get(port, "/healthz") == (200, "ok")
    finally:
        holder.release.set()
        await member.stop()
        if proc is not None and proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            _, err = await asyncio.wait_for(proc.communicate(), 60)
            assert proc.returncode == 0, err.decode()[-2000:]
