"""`embedstream serve` as a user runs it: a process with no Kafka at all in front of the
simulator, the official `openai` SDK as its caller, SIGTERM answering what is in flight."""

from __future__ import annotations

import asyncio
import math
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import openai
import pytest
from embedsim.model import SimulatorConfig, expected_vector
from embedsim.server import SimulatorServer
from embedstream.testing import eventually
from embedstream.tools.embedded import free_port

STREAM = Path(__file__).resolve().parents[2] / "stream"


@asynccontextmanager
async def serving(
    base_url: str, *args: str
) -> AsyncIterator[tuple[asyncio.subprocess.Process, int]]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMBEDSTREAM_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(STREAM), env.get("PYTHONPATH")]))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "embedstream.cli", "serve", "--base-url", base_url,
        "--http-port", str(port), "--metrics-port", "0", *args,
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        await eventually(lambda: _listening(port), timeout_s=30, poll_s=0.1)
        yield proc, port
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def _listening(port: int) -> bool:
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{port}/healthz") as answer,
        ):
            return answer.status == 200
    except aiohttp.ClientError:
        return False


async def test_serve_alone_gives_the_providers_vectors_to_the_sdk() -> None:
    async with (
        SimulatorServer() as simulator,
        serving(simulator.url, "--cache", "memory") as (
            proc,
            port,
        ),
    ):
        client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x")
        texts = [f"question {i}" for i in range(40)]
        answers = await asyncio.gather(
            *(client.embeddings.create(model="m", input=t, dimensions=32) for t in texts)
        )
        again = await client.embeddings.create(model="m", input=texts[:5], dimensions=32)
        await client.close()
        calls = simulator.stats.calls
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    for text, answer in zip(texts, answers, strict=True):
        expected = expected_vector("m", text, 32)
        assert all(
            math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-6)
            for a, b in zip(answer.data[0].embedding, expected, strict=True)
        )
    assert calls < 40  # concurrent callers shared calls
    assert [d.embedding for d in again.data] == [a.data[0].embedding for a in answers[:5]]
    assert simulator.stats.calls == calls  # the repeat came from the cache


async def test_sigterm_answers_the_request_in_flight_then_exits() -> None:
    async with (
        SimulatorServer(SimulatorConfig(base_ms=1500)) as slow,
        serving(slow.url) as (
            proc,
            port,
        ),
    ):
        client = openai.AsyncOpenAI(
            base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0
        )
        in_flight = asyncio.create_task(client.embeddings.create(model="m", input="slow one"))
        await eventually(lambda: slow.stats.calls == 1, timeout_s=10)
        proc.send_signal(signal.SIGTERM)
        answer = await asyncio.wait_for(in_flight, 10)
        code = await asyncio.wait_for(proc.wait(), 30)
        with pytest.raises(openai.APIConnectionError):
            await client.embeddings.create(model="m", input="too late")
        await client.close()
        stderr = (await proc.stderr.read()).decode() if proc.stderr else ""
    assert len(answer.data) == 1
    assert code == 0
    assert "Traceback" not in stderr
