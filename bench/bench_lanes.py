"""The latency lanes as processes (issue 41's benchmark): online callers beside a backlog, and
high requests beside a low flood, each lane run as users run it (`embedstream run`, its lanes
as processes) against `embedstream simulate` in a process of its own, arms interleaved in
each round.

    python bench/bench_lanes.py --bootstrap 127.0.0.1:39092 [--rounds 3]
        [--scenarios online,flood] [--online-items 150000] [--flood-items 120000]

**online** (callers at ``--rate`` requests/s at Poisson times, one in ten a list of 16, from
a process of their own; each latency from its scheduled time to its answer):
- ``alone``: `run` draining the backlog, no callers (the drain's rate alone);
- ``lane``: `run --http-port` (the online lane `serve` and the processor as processes, on
  one budget) draining the backlog, the callers through the lane;
- ``idle``: the same command with no backlog, the same callers (the lane's own P99);
- ``direct``: `run` draining the backlog, the callers straight to the provider;
- ``lane-redis``: as ``lane``, the budget in a `redis-server` (``budget_url``) instead of the
  supervisor's ledger: the one-host budget measured against Redis.
Goals: lane P99 <= 1.25 x idle P99 and <= 0.5 x direct P99; lane drain >= 85% of alone.

An arm may carry settings of its own after ``@`` (``lane@online_target_ms=0``, several as
``@k=v@k2=v2``): a trade-off measured beside the defaults in the same rounds.

**flood** (high events at ``--high-rate`` per second, published by a process of their own;
each latency from its scheduled publication to its result's record timestamp, read back
after the arm):
- ``alone``: one processor draining the low flood, no high traffic;
- ``one``: one processor, the flood and the high traffic;
- ``split``: `run --high-process` (a high and a bulk processor), the same;
- ``split-nice``: the same with the bulk process at nice 10;
- ``quiet``: one processor, the high traffic and no flood (the high lane's own P99).
Goals: high P99 <= 150 ms (or <= 1.5 x quiet on a slower machine); drain >= 85% of alone.

Every arm: `--max-concurrency 8 --max-batch-size 2048`, the cache off (every text is new),
a low topic of 12 partitions, the provider L(b) = 40 ms + 0.02 ms/token with 8 calls at once.
CPU per process tree from /proc. Prints each row as JSON, tables, and the medians per arm.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent.parent))
import aiohttp
from embedstream.kafka.client.admin import load_topic_specs
from embedstream.settings import Settings, load_settings
from embedstream.testing.redis import RedisServer
from embedstream.tools.bench.figures import LatencyModel
from embedstream.tools.bench.hosts import (
    renice_children,
    settings_environment,
    settle,
    tree_cpu_s,
    until_results,
)
from embedstream.tools.bench.kafka_scenarios import publish, scenario_topics, unique_prefix
from embedstream.tools.bench.lane_stages import (
    lane_stages,
    ms,
    quantile,
    record_stages,
    record_times,
)
from embedstream.tools.bench.processes import ProcessorProcess, SimulatorProcess
from embedstream.tools.bench.remote_callers import CallersChild
from embedstream.tools.bench.remote_publisher import PublisherChild
from embedstream.tools.bench.workload import make_texts
from embedstream.tools.embedded import free_port

MODEL = "text-embedding-3-small"
PARTITIONS = 12
DRAIN_TIMEOUT_S = 900.0
IDLE_S = 30.0  # the online lane's own P99: this long with no backlog
QUIET_S = 30.0  # the high lane's own P99: this long with no flood
PROVIDER = LatencyModel(base_ms=40.0, per_token_ms=0.02, capacity=8)
ONLINE_ARMS = ("alone", "lane", "idle", "direct", "lane-redis")
FLOOD_ARMS = ("alone", "one", "split", "split-nice", "quiet")


@dataclasses.dataclass
class Row:
    scenario: str
    arm: str
    round: int
    items: int
    seconds: float
    p50_ms: float | None = None
    p99_ms: float | None = None
    answered: int = 0
    refused: dict[str, int] = dataclasses.field(default_factory=dict)
    cpu_s: float = 0.0
    stages: dict[str, float | None] = dataclasses.field(default_factory=dict)

    @property
    def items_per_s(self) -> float:
        return self.items / self.seconds if self.items else 0.0


def base_settings(args: argparse.Namespace, prefix: str, simulator: SimulatorProcess) -> Settings:
    return load_settings(
        env={
            "EMBEDSTREAM_BOOTSTRAP_SERVERS": args.bootstrap,
            "EMBEDSTREAM_TOPIC_PREFIX": prefix,
            "EMBEDSTREAM_GROUP_ID": prefix + "group",
            "EMBEDSTREAM_BASE_URL": simulator.base_url,
            "EMBEDSTREAM_MODEL": MODEL,
        }
    )


def run_values(settings: Settings, **more: object) -> dict[str, object]:
    values: dict[str, object] = {
        "bootstrap_servers": settings.bootstrap_servers,
        "topic_prefix": settings.topic_prefix,
        "group_id": settings.group_id,
        "base_url": settings.base_url,
        "model": MODEL,
        "max_batch_size": 2048,
        "max_concurrency": 8,
        "cache": "off",
        "heartbeat_interval_ms": 1000,
    }
    values.update(more)
    return values


@contextlib.asynccontextmanager
async def host(name: str, values: dict[str, object], log_dir: Path) -> Any:
    """`embedstream run` with these settings, stopped (drained) at the end."""
    proc = ProcessorProcess(name, settings_environment(values), log_dir)
    proc.start_nowait()
    try:
        await proc.wait_started()
        yield proc
    finally:
        proc.terminate()
        await asyncio.to_thread(proc.stop)


def arm_settings(arm: str) -> tuple[str, dict[str, object]]:
    """An arm's name and the settings it carries after ``@`` (``lane@online_target_ms=0``)."""
    name, *pairs = arm.split("@")
    extra: dict[str, object] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"arm {arm!r}: a setting after @ is key=value, got {pair!r}")
        extra[key] = value
    return name, extra


def _dir_name(arm: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in arm)


async def online_arm(
    args: argparse.Namespace, arm_label: str, round_: int, redis: RedisServer | None = None
) -> Row:
    arm, extra = arm_settings(arm_label)
    log_dir = Path(args.log_dir) / f"online-r{round_}-{_dir_name(arm_label)}"
    log_dir.mkdir(parents=True, exist_ok=True)
    simulator = SimulatorProcess(PROVIDER, dimensions=256, burst_s=60.0, log_dir=log_dir)
    await simulator.start()
    prefix = unique_prefix(f"lanes{round_}{arm.replace('-', '')}")
    settings = base_settings(args, prefix, simulator)
    items = 0 if arm == "idle" else args.online_items
    texts = make_texts(items, seed=round_)
    http_port = free_port() if arm in ("lane", "idle", "lane-redis") else 0
    budget_url = redis.url if arm == "lane-redis" and redis is not None else None
    values = run_values(settings, http_port=http_port or None, budget_url=budget_url, **extra)
    specs = _specs(prefix)
    try:
        async with scenario_topics(settings, specs) as names, host(arm, values, log_dir) as proc:
            timeout = aiohttp.ClientTimeout(total=2.0)
            async with aiohttp.ClientSession(timeout=timeout) as session:
                await settle(session, [proc.metrics_url], names.requests_low, PARTITIONS)
                url = (
                    f"http://127.0.0.1:{http_port}/v1/embeddings"
                    if http_port
                    else f"{simulator.base_url}/embeddings"
                )
                rate = 0.0 if arm == "alone" else args.rate
                callers = CallersChild(url, MODEL, rate, args.call_s)
                async with callers:
                    cpu_before = tree_cpu_s(proc.pid)
                    callers.begin(time.monotonic() + 0.05)
                    started = time.perf_counter()
                    if items:
                        await publish(settings, names.requests_low, texts, f"r{round_}-")
                        await until_results(
                            session, [proc.metrics_url], "low", items, timeout_s=DRAIN_TIMEOUT_S
                        )
                    else:
                        await asyncio.sleep(IDLE_S)
                    seconds = time.perf_counter() - started
                    cpu = tree_cpu_s(proc.pid) - cpu_before
                    figures = await callers.finish()
    finally:
        simulator.stop()
    latencies = figures.latencies_s
    return Row(
        "online", arm_label, round_, items, round(seconds, 2),
        ms(quantile(latencies, 0.5)), ms(quantile(latencies, 0.99)), len(latencies),
        {status: len(took) for status, took in figures.refused.items()}, round(cpu, 1),
    )  # fmt: skip


async def flood_arm(args: argparse.Namespace, arm_label: str, round_: int) -> Row:
    arm, extra = arm_settings(arm_label)
    log_dir = Path(args.log_dir) / f"flood-r{round_}-{_dir_name(arm_label)}"
    log_dir.mkdir(parents=True, exist_ok=True)
    simulator = SimulatorProcess(PROVIDER, dimensions=256, burst_s=60.0, log_dir=log_dir)
    await simulator.start()
    prefix = unique_prefix(f"flood{round_}{arm.replace('-', '')}")
    settings = base_settings(args, prefix, simulator)
    items = 0 if arm == "quiet" else args.flood_items
    texts = make_texts(items, seed=round_)
    values = run_values(settings, high_process=arm.startswith("split") or None, **extra)
    high_rate = 0.0 if arm == "alone" else args.high_rate
    wall_offset = time.time() - time.monotonic()
    try:
        async with (
            scenario_topics(settings, _specs(prefix)) as names,
            host(arm, values, log_dir) as proc,
        ):
            if arm == "split-nice":
                await asyncio.sleep(1.0)  # the children are up
                reniced = renice_children(proc.pid, "bulk", 10)
                if not reniced:
                    raise RuntimeError("no bulk lane process to renice")
            timeout = aiohttp.ClientTimeout(total=2.0)
            async with aiohttp.ClientSession(timeout=timeout) as session:
                await settle(session, [proc.metrics_url], names.requests_low, PARTITIONS)
                bound_s = QUIET_S if not items else args.call_s
                publisher = PublisherChild(settings, names.requests_high, high_rate, bound_s)
                async with publisher:
                    cpu_before = tree_cpu_s(proc.pid)
                    start = time.monotonic() + 0.05
                    publisher.begin(start)
                    started = time.perf_counter()
                    if items:
                        await publish(settings, names.requests_low, texts, f"r{round_}-")
                        await until_results(
                            session, [proc.metrics_url], "low", items, timeout_s=DRAIN_TIMEOUT_S
                        )
                    else:
                        await asyncio.sleep(QUIET_S)
                    seconds = time.perf_counter() - started
                    cpu = tree_cpu_s(proc.pid) - cpu_before
                    published = await publisher.finish()
                if published:
                    await until_results(
                        session, [proc.metrics_url], "high", len(published), timeout_s=60
                    )
                async with session.get(proc.metrics_url) as answer:
                    metrics_text = await answer.text()
            written = await record_times(settings, names.results, "high-")
            requested = await record_times(settings, names.requests_high, "high-")
    finally:
        simulator.stop()
    scheduled = {rid: start + offset for offset, rid, _ in publisher.plan if rid in published}
    latencies = [
        written[rid] / 1000.0 - (due + wall_offset)
        for rid, due in scheduled.items()
        if rid in written
    ]
    stages = record_stages(scheduled, requested, written, wall_offset)
    if arm.startswith("split"):  # the high lane's own process: its calls are high's alone
        stages.update(lane_stages(metrics_text, "high", "high"))
    return Row(
        "flood", arm_label, round_, items, round(seconds, 2), ms(quantile(latencies, 0.5)),
        ms(quantile(latencies, 0.99)), len(latencies), {}, round(cpu, 1), stages,
    )  # fmt: skip


def _specs(prefix: str) -> list[Any]:
    return [
        dataclasses.replace(s, partitions=PARTITIONS) if s.key == "requests_low" else s
        for s in load_topic_specs(prefix)
    ]


def _median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return round(statistics.median(known), 1) if known else None


def _summary(rows: list[Row], scenario: str, arms: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for arm in arms:
        of = [r for r in rows if r.scenario == scenario and r.arm == arm]
        if not of:
            continue
        out[arm] = {
            "items_per_s": _median([r.items_per_s for r in of if r.items]),
            "items_per_s_range": [
                round(min(r.items_per_s for r in of)),
                round(max(r.items_per_s for r in of)),
            ],
            "p50_ms": _median([r.p50_ms for r in of]),
            "p99_ms": _median([r.p99_ms for r in of]),
            "p99_ms_range": [min(r.p99_ms or 0 for r in of), max(r.p99_ms or 0 for r in of)],
            "cpu_s": _median([r.cpu_s for r in of]),
        }
    return out


async def main_async(args: argparse.Namespace) -> int:
    scenarios = args.scenarios.split(",")
    rows: list[Row] = []
    redis = RedisServer().start() if "lane-redis" in args.online_arms else None
    try:
        await _rounds(args, scenarios, rows, redis)
    finally:
        if redis is not None:
            redis.remove()
    summary = {
        "online": _summary(rows, "online", args.online_arms.split(",")),
        "flood": _summary(rows, "flood", args.flood_arms.split(",")),
    }
    for name, arms_of in summary.items():
        for arm, figures in arms_of.items():
            print(f"{name:<7} {arm:<11} {json.dumps(figures)}")
    print(json.dumps({"rows": [dataclasses.asdict(r) for r in rows], "medians": summary}))
    return 0


async def _rounds(
    args: argparse.Namespace, scenarios: list[str], rows: list[Row], redis: RedisServer | None
) -> None:
    for round_ in range(1, args.rounds + 1):
        if "online" in scenarios:
            arms = args.online_arms.split(",")
            for arm in arms if round_ % 2 else list(reversed(arms)):
                rows.append(await online_arm(args, arm, round_, redis))
                print(json.dumps(dataclasses.asdict(rows[-1])), flush=True)
        if "flood" in scenarios:
            arms = args.flood_arms.split(",")
            for arm in arms if round_ % 2 else list(reversed(arms)):
                rows.append(await flood_arm(args, arm, round_))
                print(json.dumps(dataclasses.asdict(rows[-1])), flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scenarios", default="online,flood")
    parser.add_argument("--online-arms", default=",".join(ONLINE_ARMS))
    parser.add_argument("--flood-arms", default=",".join(FLOOD_ARMS))
    parser.add_argument("--online-items", type=int, default=150_000)
    parser.add_argument("--flood-items", type=int, default=120_000)
    parser.add_argument("--rate", type=float, default=20.0, help="online requests per second")
    parser.add_argument("--high-rate", type=float, default=50.0, help="high events per second")
    parser.add_argument("--call-s", type=float, default=300.0, help="longest traffic plan")
    parser.add_argument("--log-dir", default="/tmp/bench-lanes")
    args = parser.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(main_async(args))
    return 130


if __name__ == "__main__":
    sys.exit(main())
