"""`embedstream top` watching a running demo (embedded broker, simulator, processor)."""

from __future__ import annotations

import asyncio
import os
import re
import sys

import aiohttp
import pytest
from embedstream.tools.embedded import free_port

pytestmark = pytest.mark.integration


async def _metrics_up(port: int, limit_s: float) -> None:
    url = f"http://127.0.0.1:{port}/metrics"
    for _ in range(int(limit_s / 0.2)):
        try:
            async with aiohttp.ClientSession() as session, session.get(url) as response:
                if response.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.2)
    raise AssertionError("the demo never served /metrics")


async def test_top_shows_a_running_demo(bootstrap: str) -> None:
    del bootstrap  # the demo brings its own embedded broker; this only marks it integration
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    demo = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "embedstream.cli", "demo", "--items", "20000", "--rate", "1500",
        "--metrics-port", str(port),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    try:
        await _metrics_up(port, 60)
        top = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "embedstream.cli", "top", f"127.0.0.1:{port}",
            "--iterations", "4", "--interval", "0.5", "--no-clear",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(top.communicate(), 60)
        assert top.returncode == 0, err.decode()
    finally:
        demo.terminate()
        await asyncio.wait_for(demo.communicate(), 60)
    text = out.decode()
    frames = [f for f in text.split("\n\n") if "TOTAL" in f]
    assert len(frames) == 4
    last = frames[-1]
    assert f"127.0.0.1:{port}" in last
    assert "down" not in last
    row = next(line for line in last.splitlines() if line.startswith("TOTAL"))
    numbers = [float(n.replace(",", "")) for n in re.findall(r"\d[\d,]*\.?\d*", row)]
    assert any(n > 0 for n in numbers), row  # throughput or lag moved while we watched
