from __future__ import annotations

import argparse
import asyncio
import socket
from collections.abc import AsyncIterator
from io import StringIO

import pytest
from aiohttp import web
from embedstream.ops.metrics import Metrics
from embedstream.tools.top.app import (
    DEFAULT_TARGET,
    add_cli_arguments,
    normalise_target,
    run_top,
    run_top_from_args,
)
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

ITEMS_PER_SCRAPE = 20


class Processor:
    """Serves a Metrics registry at /metrics; every scrape first advances the metrics."""

    def __init__(self) -> None:
        self.metrics = Metrics(CollectorRegistry())
        self.scrapes = 0
        self.status = 200
        self.body: bytes | None = None  # served instead of the registry when set

    def advance(self) -> None:
        self.scrapes += 1
        m = self.metrics
        m.set_lag("embed.requests.high", 0, "high", 100 * self.scrapes)
        m.set_lag("embed.requests.low", 3, "low", 7)
        m.set_concurrency_limit(8)
        m.set_in_flight_calls(2)
        m.set_ready(True)
        for _ in range(ITEMS_PER_SCRAPE):
            m.observe_result("high", 0.5)
        # every item waits 20 ms: P50 is 17.5 ms by interpolation in (10, 25] ms
        m.observe_flush("high", "size", ITEMS_PER_SCRAPE, 200, [0.02] * ITEMS_PER_SCRAPE)

    async def handle(self, request: web.Request) -> web.Response:
        self.advance()
        body = self.body if self.body is not None else generate_latest(self.metrics.registry)
        return web.Response(
            body=body, status=self.status, headers={"Content-Type": CONTENT_TYPE_LATEST}
        )


@pytest.fixture
async def processor() -> AsyncIterator[tuple[Processor, str]]:
    proc = Processor()
    app = web.Application()
    app.router.add_get("/metrics", proc.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = int(runner.addresses[0][1])
    try:
        yield proc, f"127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


class FrameWatcher(StringIO):
    """Output that signals once ``frames`` frames (title lines) were written."""

    def __init__(self, frames: int) -> None:
        super().__init__()
        self.frames = frames
        self.reached = asyncio.Event()

    def write(self, s: str, /) -> int:
        written = super().write(s)
        if self.getvalue().count("embedstream top") >= self.frames:
            self.reached.set()
        return written


class Watched(StringIO):
    """Output a test can wait on: :meth:`shows` returns once ``text`` was written."""

    def __init__(self) -> None:
        super().__init__()
        self.changed = asyncio.Event()

    def write(self, s: str, /) -> int:
        written = super().write(s)
        self.changed.set()
        return written

    async def shows(self, text: str) -> None:
        while text not in self.getvalue():
            self.changed.clear()
            await self.changed.wait()


def cells(frame: str, name: str) -> list[str]:
    rows = [line.split() for line in frame.splitlines() if line.split()[:1] == [name]]
    assert len(rows) == 1, frame
    return rows[0]


async def test_draws_frames_with_rates_and_a_down_target(
    processor: tuple[Processor, str], closed_port: int
) -> None:
    proc, target = processor
    dead = f"127.0.0.1:{closed_port}"
    out = StringIO()

    code = await run_top(
        [f"http://{target}", dead], interval_s=0.05, iterations=3, out=out, clear=False, width=200
    )

    assert code == 0
    frames = out.getvalue().split("\n\n")
    assert len(frames) == 3
    assert proc.scrapes == 3
    first, last = frames[0], frames[-1]
    assert "1/2 up" in last
    # TARGET ITEMS/S ERR/S DLQ/S RETRY/S LAG HI LAG LO LAG RT LAG S BATCH P50 P99 CALLS STATE
    assert cells(first, target)[1:5] == ["-", "-", "-", "-"]  # no earlier snapshot: no rates
    row = cells(last, target)
    assert float(row[1]) > 0  # items/s
    assert row[2:5] == ["0", "0", "0"]  # errors, dead letters and retries per second
    assert row[5:9] == ["300", "7", "0", "0.0"]
    assert row[9:11] == ["20.0", "17.5"]
    assert row[12:] == ["2/8", "ready"]
    assert cells(last, dead) == [dead, "down"]
    assert f"{dead}: down (unreachable)" in last
    total = cells(last, "TOTAL")
    assert total[5:7] == ["300", "7"]
    assert total[-2:] == ["1/2", "ready"]


async def test_without_clear_frames_are_separated_by_a_blank_line(
    processor: tuple[Processor, str],
) -> None:
    _, target = processor
    out = StringIO()
    await run_top([target], interval_s=0.0, iterations=2, out=out, clear=False)
    text = out.getvalue()
    assert "\x1b" not in text and "\r" not in text
    frames = text.split("\n\n")
    assert len(frames) == 2
    assert all(frame.startswith("embedstream top") for frame in frames)
    assert all(len(line) <= 80 for line in text.splitlines())  # a file gets 80 columns


@pytest.mark.parametrize(
    ("status", "body", "reason"),
    [
        (500, None, "HTTP 500"),
        (200, b"this is { not exposition\n", "bad exposition"),
    ],
)
async def test_bad_responses_show_down(
    processor: tuple[Processor, str], status: int, body: bytes | None, reason: str
) -> None:
    proc, target = processor
    proc.status, proc.body = status, body
    out = StringIO()
    assert await run_top([target], interval_s=0.0, iterations=1, out=out, clear=False) == 0
    assert cells(out.getvalue(), target) == [target, "down"]
    assert f"{target}: down ({reason})" in out.getvalue()


async def test_runs_until_cancelled(processor: tuple[Processor, str]) -> None:
    proc, target = processor
    out = FrameWatcher(frames=2)
    task = asyncio.create_task(run_top([target], 0.01, None, out, clear=False))
    await out.reached.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert proc.scrapes >= 2


async def test_live_view_redraws_in_place_and_quits_on_q(processor: tuple[Processor, str]) -> None:
    proc, target = processor
    out = Watched()
    keys: asyncio.Queue[str] = asyncio.Queue()

    async def press() -> None:
        await out.shows("q quit")
        keys.put_nowait("p")  # the partitions appear at once, without waiting for a refresh
        await out.shows("lag per partition")
        keys.put_nowait("q")

    presser = asyncio.create_task(press())
    code = await asyncio.wait_for(
        run_top([target], 0.2, None, out, clear=True, keys=keys, width=100), 30
    )
    await presser
    assert code == 0
    text = out.getvalue()
    assert text.startswith("\x1b[?1049h")  # full screen, restored on exit
    assert text.rstrip().endswith("\x1b[?1049l")
    assert "q quit" in text and "lag per partition" in text
    assert proc.scrapes <= 2  # q ended it within the first interval; iterations were unlimited


@pytest.mark.parametrize(
    ("target", "url"),
    [
        ("127.0.0.1:9464", "http://127.0.0.1:9464/metrics"),
        ("proc-1:9000", "http://proc-1:9000/metrics"),
        (":9465", "http://127.0.0.1:9465/metrics"),
        ("9466", "http://127.0.0.1:9466/metrics"),
        ("http://h:1", "http://h:1/metrics"),
        ("http://h:1/", "http://h:1/metrics"),
        ("http://h:1/metrics", "http://h:1/metrics"),
        ("https://h/custom/path", "https://h/custom/path"),
        ("[::1]:9464", "http://[::1]:9464/metrics"),
    ],
)
def test_normalise_target(target: str, url: str) -> None:
    assert normalise_target(target) == url
    assert normalise_target(url) == url


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_cli_arguments(parser)
    return parser.parse_args(argv)


def test_cli_defaults() -> None:
    ns = parse([])
    assert ns.targets == [DEFAULT_TARGET]
    assert (ns.interval, ns.iterations, ns.no_clear) == (2.0, None, False)


def test_cli_options() -> None:
    ns = parse(
        ["h1:9464", "http://h2:9000", "--interval", "0.5", "--iterations", "4", "--no-clear"]
    )
    assert ns.targets == ["http://h1:9464/metrics", "http://h2:9000/metrics"]
    assert (ns.interval, ns.iterations, ns.no_clear) == (0.5, 4, True)


@pytest.mark.parametrize("argv", [["--interval", "0"], ["--iterations", "0"], ["http://"]])
def test_cli_rejects(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse(argv)


async def test_run_from_args_does_not_clear_a_non_tty(processor: tuple[Processor, str]) -> None:
    _, target = processor
    out = StringIO()
    ns = parse([target, "--interval", "0.01", "--iterations", "1"])
    assert await run_top_from_args(ns, out) == 0
    assert "\x1b" not in out.getvalue()
    assert cells(out.getvalue(), target)[4] == "100"  # LAG HI at 80 columns
