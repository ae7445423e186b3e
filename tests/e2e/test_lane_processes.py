"""`embedstream run` with the online lane on: its lanes as processes of their own (`serve` and a
processor) under one supervising command. Each child SIGKILLed while requests flow is started
again and nothing is lost (no duplicate under exactly-once); the host serves one /metrics and
one /readyz; a child failing at start with a mistake stops the whole command with its line.
With `high_process` the Kafka lanes are two processors (high, and bulk), each SIGKILLed in
turn under exactly-once: the same verdict."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import openai
import orjson
import pytest
from embedsim.server import SimulatorServer
from embedstream.kafka.client.admin import create_topics, load_topic_specs
from embedstream.testing import eventually
from embedstream.tools.embedded import free_port

from tests.e2e.chaos import Fleet, ProcessorOptions, ProcessorProcess, figures
from tests.e2e.chaos_feed import Feeder, run_until_drained
from tests.e2e.chaos_watch import scrape_metrics

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

STREAM = Path(__file__).resolve().parents[2] / "stream"


def children_of(parent: int) -> Iterator[tuple[int, list[bytes]]]:
    """Each process whose parent is ``parent``, with its command line, from /proc."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = (entry / "stat").read_text()
            if int(stat[stat.rindex(")") + 2 :].split()[1]) == parent:
                yield int(entry.name), (entry / "cmdline").read_bytes().split(b"\0")


def lane_children(parent: int) -> dict[str, int]:
    """The supervisor's children by lane command (`serve`, `run`)."""
    found: dict[str, int] = {}
    for pid, argv in children_of(parent):
        for command in ("serve", "run"):
            if command.encode() in argv:
                found[command] = pid
    return found


def processors_by_lanes(parent: int) -> dict[str, int]:
    """The supervisor's processor children by their `--input-lanes` (high, bulk)."""
    return {
        argv[argv.index(b"--input-lanes") + 1].decode(): pid
        for pid, argv in children_of(parent)
        if b"--input-lanes" in argv
    }


async def restarts(proc: ProcessorProcess, lane: str) -> float:
    text = await _get(proc.metrics_port, "/metrics")
    for line in text.splitlines():
        if line.startswith(f'embedstream_lane_process_restarts_total{{process="{lane}"}}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def _get(port: int, path: str) -> str:
    timeout = aiohttp.ClientTimeout(total=3)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(f"http://127.0.0.1:{port}{path}") as answer,
    ):
        return await answer.text()


async def ask_online(port: int, statuses: Counter[str], stop: asyncio.Event) -> None:
    client = openai.AsyncOpenAI(
        base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0, timeout=10
    )
    n = 0
    while not stop.is_set():
        try:
            await client.embeddings.create(model="m", input=f"online {n}")
            statuses["200"] += 1
        except openai.APIStatusError as exc:
            statuses[str(exc.status_code)] += 1
        except openai.APIConnectionError:
            statuses["no answer"] += 1
        n += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.1)
    await client.close()


@pytest.mark.timeout(240)
@pytest.mark.parametrize("delivery", ["at_least_once", "exactly_once"])
async def test_each_lane_process_killed_is_started_again_and_nothing_is_lost(
    bootstrap: str, unique_prefix: str, simulator: SimulatorServer, tmp_path: Path, delivery: str
) -> None:
    online_port = free_port()
    options = ProcessorOptions(
        bootstrap, unique_prefix, unique_prefix + "group", simulator.url,
        extra_args=("--http-port", str(online_port), "--delivery", delivery),
    )  # fmt: skip
    await create_topics(bootstrap, load_topic_specs(unique_prefix))
    statuses: Counter[str] = Counter()
    stop = asyncio.Event()
    async with Fleet(options, tmp_path) as fleet:
        host = fleet.add("host", metrics_port=free_port())
        await host.start()
        await host.wait_assigned(nonempty=True)
        assert host.pid is not None
        first = lane_children(host.pid)
        assert first.keys() == {"serve", "run"}
        await eventually(lambda: _ready(host), timeout_s=30, poll_s=0.2)  # serve is up too
        ready = orjson.loads(await _get(host.metrics_port, "/readyz"))
        assert ready == {"ready": True, "checks": {"online": True, "processor": True}}
        online = asyncio.create_task(ask_online(online_port, statuses, stop))
        feeder = Feeder(bootstrap, unique_prefix, count=3000, rate_per_s=400, id_prefix="l")
        async with feeder:
            await asyncio.sleep(1.5)
            os.kill(first["run"], signal.SIGKILL)  # the processor, mid-work
            await eventually(lambda: _restarted(host, "processor"), timeout_s=20, poll_s=0.2)
            await host.wait_assigned(count=2, nonempty=True)
            os.kill(first["serve"], signal.SIGKILL)  # the online lane
            await eventually(lambda: _restarted(host, "online"), timeout_s=20, poll_s=0.2)
            answered = statuses["200"]
            await eventually(lambda: statuses["200"] > answered, timeout_s=20)  # back again
            drained = await run_until_drained(
                bootstrap, unique_prefix, options.group, feeder, timeout_s=150,
                max_duplicates=0 if delivery == "exactly_once" else 10**9,
                describe=fleet.log_tails, logs=fleet.log_paths(),
            )  # fmt: skip
        stop.set()
        await online
        again = lane_children(host.pid)
        metrics = await scrape_metrics(host.metrics_port)
        status = await host.sigterm(timeout_s=90)
    report = drained.report
    figures(
        f"lane processes killed ({delivery})", lost=len(report.lost),
        duplicates=len(report.duplicates), online=dict(statuses), exit=status,
    )  # fmt: skip
    assert report.lost == (), drained.explain()
    assert report.misattributed == () and report.in_both == (), report.summary()
    if delivery == "exactly_once":
        assert report.duplicates == {}, report.summary()
    assert again.keys() == {"serve", "run"} and set(again.values()).isdisjoint(first.values())
    assert metrics["embedstream_lane_process_restarts_total"] == 2
    assert metrics.get("embedstream_results_total", 0) > 0  # the children's, through the host
    assert status == 0, host.log_tail()
    assert statuses["200"] > 0 and not {s for s in statuses if s.startswith("5")}, statuses


@pytest.mark.timeout(240)
async def test_the_high_and_bulk_processes_killed_are_started_again_exactly_once(
    bootstrap: str, unique_prefix: str, simulator: SimulatorServer, tmp_path: Path
) -> None:
    options = ProcessorOptions(
        bootstrap, unique_prefix, unique_prefix + "group", simulator.url,
        extra_args=("--high-process", "--delivery", "exactly_once"),
    )  # fmt: skip
    await create_topics(bootstrap, load_topic_specs(unique_prefix))
    async with Fleet(options, tmp_path) as fleet:
        host = fleet.add("host", metrics_port=free_port())
        await host.start()
        await host.wait_assigned(count=2, nonempty=True)  # the high and the bulk processor
        assert host.pid is not None
        first = processors_by_lanes(host.pid)
        assert first.keys() == {"high", "bulk"}
        await eventually(lambda: _ready(host), timeout_s=30, poll_s=0.2)
        ready = orjson.loads(await _get(host.metrics_port, "/readyz"))
        assert ready == {"ready": True, "checks": {"high": True, "bulk": True}}
        feeder = Feeder(bootstrap, unique_prefix, count=3000, rate_per_s=400, id_prefix="h")
        async with feeder:
            await asyncio.sleep(1.5)
            os.kill(first["high"], signal.SIGKILL)  # mid-work, each in turn
            await eventually(lambda: _restarted(host, "high"), timeout_s=20, poll_s=0.2)
            await eventually(lambda: _ready(host), timeout_s=60, poll_s=0.2)
            os.kill(processors_by_lanes(host.pid)["bulk"], signal.SIGKILL)
            await eventually(lambda: _restarted(host, "bulk"), timeout_s=20, poll_s=0.2)
            drained = await run_until_drained(
                bootstrap, unique_prefix, options.group, feeder, timeout_s=150,
                max_duplicates=0, describe=fleet.log_tails, logs=fleet.log_paths(),
            )  # fmt: skip
        again = processors_by_lanes(host.pid)
        metrics = await scrape_metrics(host.metrics_port)
        status = await host.sigterm(timeout_s=90)
    report = drained.report
    figures(
        "high and bulk processes killed (exactly_once)", lost=len(report.lost),
        duplicates=len(report.duplicates), exit=status,
    )  # fmt: skip
    assert report.lost == (), drained.explain()
    assert report.duplicates == {} and report.misattributed == (), report.summary()
    assert again.keys() == {"high", "bulk"} and set(again.values()).isdisjoint(first.values())
    assert metrics["embedstream_lane_process_restarts_total"] == 2
    assert status == 0, host.log_tail()


async def _ready(host: ProcessorProcess) -> bool:
    with contextlib.suppress(OSError, aiohttp.ClientError, TimeoutError, ValueError):
        return bool(orjson.loads(await _get(host.metrics_port, "/readyz"))["ready"])
    return False


async def _restarted(host: ProcessorProcess, lane: str) -> bool:
    with contextlib.suppress(OSError, aiohttp.ClientError, TimeoutError):
        return await restarts(host, lane) >= 1
    return False


async def test_a_lane_process_failing_at_start_stops_run_with_its_one_line(
    bootstrap: str, unique_prefix: str, simulator: SimulatorServer
) -> None:
    """The online lane's port is taken: `serve` ends with its one line and status 2, which
    no restart would cure: `run` stops its processor and ends with status 2 too."""
    await create_topics(bootstrap, load_topic_specs(unique_prefix))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if not k.startswith("EMBEDSTREAM_")}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(STREAM), env.get("PYTHONPATH")]))
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "embedstream.cli", "run", "--bootstrap-servers", bootstrap,
            "--topic-prefix", unique_prefix, "--base-url", simulator.url,
            "--http-port", str(port), "--metrics-port", "0",
            env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        _, err = await asyncio.wait_for(proc.communicate(), 60)
    text = err.decode()
    assert proc.returncode == 2, text
    assert "[online] embedstream: error: setting http_port" in text, text
    assert "failed for good" in text
    assert "Traceback" not in text
