"""``embedstream top`` in a real terminal: a tmux pane of 80x24 and of 200x50, watching a fake
processor's /metrics. What a person sees is what ``capture-pane`` returns."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from embedstream.ops.metrics import Metrics
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from tests.tmux import Pane

pytestmark = pytest.mark.skipif(
    shutil.which("tmux") is None and os.environ.get("EMBEDSTREAM_REQUIRE_TOOLS") != "1",
    reason="needs tmux (ops/test.sh installs it)",
)


@pytest.fixture
async def metrics_url() -> AsyncIterator[str]:
    """A processor's /metrics: traffic on every scrape, two partitions paused, not ready."""
    metrics = Metrics(CollectorRegistry())

    async def handle(request: web.Request) -> web.Response:
        for lane in ("high", "low"):
            for _ in range(25):
                metrics.observe_result(lane, 0.2)
            metrics.observe_flush(lane, "size", 25, 250, [0.015] * 25)
        metrics.count_dead_letter("too_long")
        for partition in range(4):
            metrics.set_lag("embed.requests.low", partition, "low", 1000 * (partition + 1))
        metrics.set_lag("embed.requests.high", 0, "high", 12)
        metrics.set_paused_partitions(2)
        metrics.set_ready(False)
        return web.Response(
            body=generate_latest(metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    app = web.Application()
    app.router.add_get("/metrics", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


@pytest.mark.parametrize(("width", "height"), [(80, 24), (200, 50)])
async def test_top_fits_the_terminal_refreshes_in_place_and_quits_on_q(
    metrics_url: str, width: int, height: int
) -> None:
    command = [sys.executable, "-m", "embedstream", "top", metrics_url, "--interval", "0.3"]
    pane = Pane(width, height, command)
    try:
        target = metrics_url + " "  # its table row, not the lines that name its problems
        # Rates arrive with the second scrape: until then the row shows "-".
        text = await pane.wait_for(
            lambda t: any(ln.startswith(target) and "-" not in ln for ln in t.splitlines())
        )
        lines = text.splitlines()
        assert len(lines) <= height
        assert max(len(line) for line in lines) <= width, text
        assert "q quit" in lines[0]
        [row] = [line for line in lines if line.startswith(target)]
        assert row.rstrip().endswith("provider") or row.rstrip().endswith("not ready"), row
        assert "WAIT" in text and "item wait" in text
        if width >= 200:
            assert "WAIT P50" in text and "RETRY/S" in text, text
        # In place: one frame on the screen, not a scrolling log of frames.
        assert text.count("embedstream top") == 1
        coloured = await asyncio.to_thread(pane.capture, colours=True)
        assert "\x1b[31m" in coloured or "\x1b[1;31m" in coloured  # not ready in red
        assert "\x1b[33m" in coloured  # partitions paused, in yellow

        pane.keys("p")
        text = await pane.wait_for(lambda t: "lag per partition" in t, timeout_s=5)
        assert max(len(line) for line in text.splitlines()) <= width
        assert "embed.requests.low" in text

        pane.keys("q")
        text = await pane.wait_for(lambda t: "EXITED" in t, timeout_s=10)
        assert "EXITED 0" in text
        assert "Traceback" not in text
    finally:
        pane.close()
