"""Shutdown is bounded whatever the provider does, and loses nothing.

Found from outside: with the provider unreachable, SIGTERM and SIGINT were ignored for more than
two minutes (the drain waited for the batcher without a deadline); only SIGKILL ended it. Real
`embedstream run` processes on Apache Kafka: 200 requests are held while the provider refuses
connections (or accepts and never answers), SIGTERM ends the process within `drain_timeout_s`
plus a few seconds with exit status 0 and nothing committed, and a restart with a working
provider gives every request its result and dead-letters none.

Exit status 0 is right: the stop is orderly. Nothing unfinished is committed, so nothing is
lost; an orchestrator must not take a stop it asked for as a crash (Kubernetes restarts a pod
that exits non-zero and counts it against the deployment).
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from embedsim.model import SimulatorConfig
from embedsim.server import SimulatorServer
from embedstream.kafka.client.admin import create_topics, load_topic_specs, topic_names
from embedstream.tools.embedded import free_port

from tests.e2e.chaos import Fleet, ProcessorOptions, ProcessorProcess
from tests.e2e.chaos_watch import scrape_metrics
from tests.integration.helpers import committed_lag, publish, read_topic, request, wait_for_ids

pytestmark = pytest.mark.integration

REQUESTS = 200
DRAIN_TIMEOUT_S = 5.0
# A stop may take the drain timeout, the grace given to calls then (2 s), the last commit and
# leaving the group; more than this is a hang.
STOP_SLACK_S = 8.0


@asynccontextmanager
async def unreachable_provider(kind: str) -> AsyncIterator[str]:
    """The base URL of a provider that refuses connections, or accepts and never answers."""
    if kind == "refusing":
        yield f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
        return
    async with SimulatorServer(SimulatorConfig(hang_rate=1.0, hang_s=3600)) as hanging:
        yield hanging.url


def _options(
    bootstrap: str, prefix: str, base_url: str, drain_timeout_s: float,
    more_args: tuple[str, ...] = (),
) -> ProcessorOptions:  # fmt: skip
    return ProcessorOptions(
        bootstrap, prefix, prefix + "group", base_url,
        extra_args=("--drain-timeout-s", str(drain_timeout_s), "--max-attempts", "2", *more_args),
    )  # fmt: skip


async def _held(proc: ProcessorProcess, count: int, timeout_s: float = 60.0) -> None:
    """Until the processor holds `count` records (read, unfinished), by its /metrics."""
    deadline = time.monotonic() + timeout_s
    held = 0.0
    while time.monotonic() < deadline:
        try:
            held = (await scrape_metrics(proc.metrics_port)).get("embedstream_buffered_items", 0)
        except OSError:
            held = 0.0
        if held == count:
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"{proc.name} holds {held}, not {count}\n{proc.log_tail()}")


async def _restart_and_finish(
    fleet: Fleet, bootstrap: str, prefix: str, ids: list[str], drain_timeout_s: float
) -> None:
    """A new run with a working provider: every request gets its result, none is
    dead-lettered, and the group commits to the end."""
    names = topic_names(prefix)
    async with SimulatorServer(SimulatorConfig(base_ms=2)) as working:
        fleet.options = _options(bootstrap, prefix, working.url, drain_timeout_s)
        again = fleet.add("restarted")
        await again.start()
        seen = await wait_for_ids(bootstrap, names.results, set(ids), timeout_s=90)
        assert set(seen) == set(ids)
        assert all(len(docs) == 1 for docs in seen.values())
        assert await again.sigterm(timeout_s=60) == 0
    assert await read_topic(bootstrap, names.dead_letters, idle_s=0.5) == []
    lag = await committed_lag(bootstrap, prefix + "group", [names.requests_low])
    assert lag == {names.requests_low: 0}


@pytest.mark.timeout(240)
@pytest.mark.parametrize("kind", ["refusing", "hanging"])
async def test_sigterm_with_the_provider_unreachable_exits_within_the_drain_timeout(
    bootstrap: str, unique_prefix: str, tmp_path: Path, kind: str
) -> None:
    await create_topics(bootstrap, load_topic_specs(unique_prefix))
    names = topic_names(unique_prefix)
    ids = [f"s{i}" for i in range(REQUESTS)]
    await publish(bootstrap, names.requests_low, [request(i, f"text {i}") for i in ids])
    async with unreachable_provider(kind) as base_url:
        options = _options(bootstrap, unique_prefix, base_url, DRAIN_TIMEOUT_S)
        async with Fleet(options, tmp_path) as fleet:
            proc = fleet.add("stuck", metrics_port=free_port())
            await proc.start()
            await proc.wait_assigned(nonempty=True)
            await _held(proc, REQUESTS)
            stopping = time.monotonic()
            code = await proc.sigterm(timeout_s=DRAIN_TIMEOUT_S + 60)
            took = time.monotonic() - stopping
            log = proc.log_text()
            assert code == 0, proc.log_tail()
            assert took <= DRAIN_TIMEOUT_S + STOP_SLACK_S, (took, proc.log_tail())
            assert "stopped cleanly" in log
            lag = await committed_lag(bootstrap, options.group, [names.requests_low])
            assert lag == {names.requests_low: REQUESTS}  # nothing unfinished committed
            await _restart_and_finish(fleet, bootstrap, unique_prefix, ids, DRAIN_TIMEOUT_S)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("lanes", [False, True], ids=["one-process", "lane-processes"])
async def test_a_second_sigint_stops_the_drain_at_once(
    bootstrap: str, unique_prefix: str, tmp_path: Path, lanes: bool
) -> None:
    """SIGTERM starts a drain that could last a minute (drain_timeout_s=60); a SIGINT then
    ends it at once, still with exit status 0 and nothing lost. With the online lane on
    (lane processes: `run` supervising `serve` and a processor), the supervisor passes each
    signal on once: the second ends its children's drains too."""
    more_args = ("--http-port", str(free_port())) if lanes else ()
    await create_topics(bootstrap, load_topic_specs(unique_prefix))
    names = topic_names(unique_prefix)
    ids = [f"i{i}" for i in range(REQUESTS)]
    await publish(bootstrap, names.requests_low, [request(i, f"text {i}") for i in ids])
    async with unreachable_provider("refusing") as base_url:
        options = _options(bootstrap, unique_prefix, base_url, 60.0, more_args)
        async with Fleet(options, tmp_path) as fleet:
            proc = fleet.add("stuck", metrics_port=free_port())
            await proc.start()
            await proc.wait_assigned(nonempty=True)
            await _held(proc, REQUESTS)
            proc.send_signal(signal.SIGTERM)
            await _until_logged(proc, "received SIGTERM")
            await asyncio.sleep(1.0)
            assert proc.alive  # draining, for up to a minute
            interrupted = time.monotonic()
            code = await proc.stop_with(signal.SIGINT, timeout_s=60)
            took = time.monotonic() - interrupted
            assert code == 0, proc.log_tail()
            assert took <= STOP_SLACK_S, (took, proc.log_tail())
            assert "received SIGINT" in proc.log_text()
            await _restart_and_finish(fleet, bootstrap, unique_prefix, ids, 60.0)


async def test_sigusr1_logs_where_every_task_waits_and_the_processor_goes_on(
    bootstrap: str, unique_prefix: str, tmp_path: Path
) -> None:
    await create_topics(bootstrap, load_topic_specs(unique_prefix))
    async with SimulatorServer(SimulatorConfig(base_ms=2)) as working:
        options = _options(bootstrap, unique_prefix, working.url, DRAIN_TIMEOUT_S)
        async with Fleet(options, tmp_path) as fleet:
            proc = fleet.add("dumped", metrics_port=free_port())
            await proc.start()
            await proc.wait_assigned(nonempty=True)
            proc.send_signal(signal.SIGUSR1)
            await _until_logged(proc, "asyncio tasks (SIGUSR1)")
            await _until_logged(proc, "in _fetch_until_stopped")  # the processor's own loop
            assert proc.alive
            assert await proc.sigterm(timeout_s=60) == 0, proc.log_tail()


async def _until_logged(proc: ProcessorProcess, text: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in proc.log_text():
        if time.monotonic() > deadline:
            raise AssertionError(f"{proc.name} never logged {text!r}\n{proc.log_tail()}")
        await asyncio.sleep(0.05)
