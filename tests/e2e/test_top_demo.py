"""`embedstream demo` end to end as a user runs it, and `embedstream top` watching one
(embedded broker, simulator, processor)."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import sys
from pathlib import Path

import aiohttp
import pytest
from embedstream.tools.embedded import free_port

from tests.tmux import Pane

pytestmark = pytest.mark.integration

# A line of the demo's log handler (ops/logs.py): "2026-12-02 06:20:22,068 WARNING name: ...".
LOG_LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (WARNING|ERROR) ")


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
        sys.executable, "-m", "embedstream.cli", "demo", "--items", "20000",
        "--sparse-items", "2000", "--sparse-rate", "500", "--metrics-port", str(port),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    try:
        await _metrics_up(port, 60)
        top = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "embedstream.cli", "top", f"127.0.0.1:{port}",
            # Scrapes time out after the interval (at least 1 s): the demo's processor, its
            # broker and provider share two loaded cores, and may answer late now and then.
            "--iterations", "4", "--interval", "2", "--no-clear",
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


def _demo_env() -> dict[str, str]:
    """The simulator, whatever the caller's environment says about a real endpoint."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "EMBEDSTREAM_"))}


async def _run_demo(tmp_path: Path, *args: str) -> tuple[int, str, str]:
    """Run `embedstream demo` with stderr to a file, as in a CI log; (status, stdout, stderr)."""
    err_path = tmp_path / "demo.stderr"
    with err_path.open("wb") as err_file:
        demo = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "embedstream", "demo", *args,
            stdout=asyncio.subprocess.PIPE, stderr=err_file, env=_demo_env(),
        )  # fmt: skip
        out, _ = await asyncio.wait_for(demo.communicate(), 240)
    assert demo.returncode is not None
    return demo.returncode, out.decode(), err_path.read_bytes().decode()


def _row(text: str, title: str, lane: str) -> list[str]:
    """The row of ``lane`` in the table whose title starts with ``title``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    row = next(line for line in lines[start:] if line.split()[:1] == [lane])
    return row.split()


def _number(cell: str) -> float:
    return float(cell.replace(",", ""))


async def test_the_demo_shows_batches_growing_with_the_backlog_and_high_served_first(
    bootstrap: str, tmp_path: Path
) -> None:
    del bootstrap  # the demo brings its own embedded broker; this only marks it integration
    code, out, err = await _run_demo(
        tmp_path, "--items", "4000", "--sparse-items", "60", "--sparse-rate", "30"
    )
    assert code == 0, out + err
    assert "Traceback" not in err and "\r" not in err
    # The progress lines, in order; a library warning between them (a broker probe that timed
    # out on a loaded machine, say) is the demo showing what happened, not a wrong step.
    assert [line for line in err.splitlines()[1:] if not LOG_LINE.match(line)] == [
        "sparse: 60 requests at 30/s ...",
        "lanes: 4,000 low requests at once, then high ones at 50/s ...",
        "documents: 36 document events ...",
        "edits and a delete: 7 document events ...",
        "reading back requests, results and dead letters ...",
    ], err
    # lane  items  items/s  calls  mean-batch  P50  P99
    sparse = _row(out, "sparse: 60 requests at 30/s", "all")
    lanes_title = "lanes: 4,000 low requests at once, then high ones at 50/s, done in"
    lanes = _row(out, lanes_title, "all")
    low, high = _row(out, lanes_title, "low"), _row(out, lanes_title, "high")
    assert sparse[1] == "60" and low[1] == "4,000"
    sent = int(_number(high[1]))
    assert sent >= 1 and _number(lanes[1]) == 4000 + sent  # high requests while it drained
    sparse_batch, backlog_batch = float(sparse[4]), float(lanes[4])
    assert sparse_batch < 3 and backlog_batch > 10 * sparse_batch, (sparse, lanes)
    # The processor takes high requests first: they wait for no backlog.
    assert _number(high[-2]) < _number(low[-2]), (high, low)
    drained = re.search(rf"the low backlog drained in [\d.]+ s; {sent:,} high requests", out)
    assert drained, out
    for lane in ("high", "low"):
        assert sum(line.split()[:1] == [lane] for line in out.splitlines()) == 2  # per phase
    requests = 60 + 4000 + sent
    assert f"read back from the topics: {requests:,} requests, {requests:,} results" in out
    assert "lost 0, duplicates 0, dead letters 0, wrong vectors 0" in out
    assert "every request has exactly one result" in out
    # The cache is on by default: the edit pass takes its unchanged chunks from it.
    [edit] = [line.split() for line in out.splitlines() if line.split()[:1] == ["edit"]]
    assert int(edit[3]) > 0, edit


async def test_demo_live_shows_the_top_view_then_the_summary(
    bootstrap: str, tmp_path: Path
) -> None:
    del bootstrap
    code, out, err = await _run_demo(
        tmp_path, "--live", "--items", "3000", "--sparse-items", "90", "--sparse-rate", "30"
    )
    assert code == 0, out + err
    assert "Traceback" not in err
    frames, _, summary = out.partition("sparse: 90 requests at 30/s, done in")
    # Not a terminal: the view prints its frames one after another, each with a total row.
    assert frames.count("TOTAL") >= 2, frames
    assert "127.0.0.1:" in frames and "down" not in frames
    assert "lanes: 3,000 low requests at once, then high ones at 50/s" in summary
    assert "lost 0, duplicates 0, dead letters 0, wrong vectors 0" in summary


@pytest.mark.skipif(
    shutil.which("tmux") is None and os.environ.get("EMBEDSTREAM_REQUIRE_TOOLS") != "1",
    reason="needs tmux (ops/test.sh installs it)",
)
async def test_demo_live_in_an_80_column_terminal(bootstrap: str) -> None:
    """In a terminal, --live draws the top view in place while the phases run; when they are
    done the screen is given back and the summary printed."""
    del bootstrap
    pane = Pane(80, 24, [
        "env", "-u", "OPENAI_API_KEY", "-u", "OPENAI_BASE_URL", sys.executable, "-m",
        "embedstream", "demo", "--live", "--items", "3000", "--sparse-items", "150",
    ])  # fmt: skip
    try:
        view = await pane.wait_for(lambda t: "TOTAL" in t and "q quit" in t, timeout_s=90)
        assert view.count("embedstream top") == 1  # one frame, redrawn in place
        assert max(len(line) for line in view.splitlines()) <= 80, view
        text = await pane.wait_for(lambda t: "EXITED" in t, timeout_s=180)
        assert "EXITED 0" in text and "Traceback" not in text
        assert "embedstream top" not in text  # the full-screen view is gone
        assert "every request has exactly one result" in text
        assert "lanes: 3,000 low requests at once, then high ones at 50/s, done in" in text
    finally:
        pane.close()


async def _listening(port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    writer.close()
    return True


async def test_a_killed_demo_takes_its_broker_with_it(bootstrap: str) -> None:
    del bootstrap
    demo = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "embedstream", "demo", "--sparse-items", "1000",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, env=_demo_env(),
    )  # fmt: skip
    assert demo.stderr is not None
    try:
        first = (await asyncio.wait_for(demo.stderr.readline(), 60)).decode()
        found = re.search(r"embedded broker at 127\.0\.0\.1:(\d+)", first)
        assert found, first
        port = int(found.group(1))
        assert await _listening(port)
    finally:
        demo.kill()  # no clean-up code of its own runs
        await demo.wait()
    for _ in range(100):  # the broker gets SIGTERM as its parent dies; give it 10 s
        if not await _listening(port):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"the demo's broker still listens on {port} after the demo died")
