"""One provider budget for a fleet (issue 40's benchmark): online callers and a Kafka backlog on
one provider of 8 slots, served by one process or by a fleet of processes, with and without the
shared budget, arms interleaved in each round.

    python bench/bench_fleet_budget.py --bootstrap 127.0.0.1:39092 [--rounds 3]
        [--variants default,slow,tpm] [--arms one,fleet,fleet-shared] [--items 150000]

Arms (every process given the org's limits, as a user copies them into each replica):
- ``one``: one `embedstream run` with the online lane on (`http_port`), serving both lanes;
- ``fleet``: three `embedstream run` in one group and one `embedstream serve` for the callers,
  each with its own budget (today's fleet);
- ``fleet-shared``: the same fleet with ``--budget-url`` on one `redis-server`.

Variants of the provider (`embedstream simulate`, 8 calls at once, the rest queue):
``default`` (L(b) = 40 ms + 0.02 ms/token), ``slow`` (0.2 ms/token: the provider, not the CPU,
limits the drain; ``--slow-items`` of backlog, since it drains ten times slower) and ``tpm``
(the default speed with a tokens-per-minute limit it enforces with 429s, ``--tpm``, a minute's
burst; the processes get the same figure as `rate_limit_tpm`).

In each arm the processes start on empty topics and join; then the backlog is published (as
fast as the producer goes) while online callers (``--rate`` requests/s at Poisson times, one
in ten a list of 16, from a process of their own) call until the last result. Drain: first
event published to last result (items/s). Online: each answer's latency from its scheduled
time (P50/P99), and the others by status with how long they took (a 429 at once, a 504 after
`online_timeout_s`). Provider: its calls, 429s, the most calls it had received at once and
the time spent with more than its 8 slots' worth. Prints a table per variant and one JSON
object with every row and the medians per arm.
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
from embedstream.errors import env_var
from embedstream.kafka.client.admin import load_topic_specs
from embedstream.settings import Settings, load_settings
from embedstream.testing.redis import RedisServer
from embedstream.tools.bench import BenchError
from embedstream.tools.bench.figures import LatencyModel
from embedstream.tools.bench.kafka_scenarios import publish, scenario_topics, unique_prefix
from embedstream.tools.bench.processes import (
    Child,
    ProcessorProcess,
    SimulatorProcess,
    child_environment,
)
from embedstream.tools.bench.remote_callers import CallerFigures, CallersChild
from embedstream.tools.bench.workload import make_texts
from embedstream.tools.embedded import free_port
from embedstream.tools.top.readings import Snapshot, parse_exposition

MODEL = "text-embedding-3-small"
SLOTS = 8
PARTITIONS = 12  # 1 and 3 members share them evenly
PROCESSORS = 3
SETTLE_TIMEOUT_S = 120.0
DRAIN_TIMEOUT_S = 600.0
POLL_S = 0.2
VARIANTS = {
    "default": LatencyModel(base_ms=40.0, per_token_ms=0.02, capacity=SLOTS),
    "slow": LatencyModel(base_ms=40.0, per_token_ms=0.2, capacity=SLOTS),
    "tpm": LatencyModel(base_ms=40.0, per_token_ms=0.02, capacity=SLOTS),
}
ARMS = ("one", "fleet", "fleet-shared")


def quantile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def member_env(settings: Settings, **more: object) -> dict[str, str]:
    env = {"EMBEDSTREAM_LOG_LEVEL": "WARNING"}
    names = (
        "bootstrap_servers", "topic_prefix", "group_id", "base_url", "model",
        "max_batch_size", "max_concurrency", "rate_limit_tpm", "cache", "fetch_max_wait_ms",
        "session_timeout_ms", "heartbeat_interval_ms", "budget_url", "http_port",
    )  # fmt: skip
    for name in names:
        value = more.get(name, getattr(settings, name))
        if value is not None:
            env[env_var(name)] = str(value)
    return env


@dataclasses.dataclass
class Row:
    variant: str
    arm: str
    round: int
    items: int
    drain_s: float
    online_sent: int
    online_p50_ms: float | None
    online_p99_ms: float | None
    refused: dict[str, int]
    refused_slowest_ms: dict[str, float]
    provider_calls: int
    provider_429: int
    peak_received: int
    over_capacity_s: float
    longest_over_capacity_s: float

    @property
    def items_per_s(self) -> float:
        return self.items / self.drain_s

    @property
    def share_429(self) -> float:
        return self.provider_429 / self.provider_calls if self.provider_calls else 0.0


class Gateway:
    """`embedstream serve` for the fleet's online callers."""

    def __init__(self, env: dict[str, str], log_dir: Path, name: str) -> None:
        self.port = free_port()
        self.metrics_port = free_port()
        env = child_environment(
            {**env, "EMBEDSTREAM_HTTP_PORT": str(self.port),
             "EMBEDSTREAM_METRICS_PORT": str(self.metrics_port)}
        )  # fmt: skip
        self._child = Child(["serve"], log_dir / f"{name}.log", env)

    async def start(self) -> None:
        self._child.start()
        await self._child.wait_for_http(f"http://127.0.0.1:{self.metrics_port}/healthz")

    def stop(self) -> None:
        self._child.stop()


async def _scrape(session: aiohttp.ClientSession, url: str) -> Snapshot | None:
    try:
        async with session.get(url) as response:
            return parse_exposition(await response.text())
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None


async def run_arm(
    args: argparse.Namespace, variant: str, arm: str, round_: int, redis: RedisServer | None
) -> Row:
    log_dir = Path(args.log_dir) / f"r{round_}-{variant}-{arm}"
    log_dir.mkdir(parents=True, exist_ok=True)
    simulator = SimulatorProcess(VARIANTS[variant], dimensions=64, burst_s=60.0, log_dir=log_dir)
    if variant == "tpm":
        simulator = _with_tpm(simulator, args.tpm, log_dir)
    await simulator.start()
    items = args.slow_items if variant == "slow" else args.items
    texts = make_texts(items, seed=round_)
    prefix = unique_prefix(f"fleet{round_}{arm.replace('-', '')}")
    settings = load_settings(
        env={
            "EMBEDSTREAM_BOOTSTRAP_SERVERS": args.bootstrap,
            "EMBEDSTREAM_TOPIC_PREFIX": prefix,
            "EMBEDSTREAM_GROUP_ID": prefix + "group",
            "EMBEDSTREAM_BASE_URL": simulator.base_url,
            "EMBEDSTREAM_MODEL": MODEL,
            "EMBEDSTREAM_MAX_BATCH_SIZE": "2048",
            "EMBEDSTREAM_MAX_CONCURRENCY": str(SLOTS),
            "EMBEDSTREAM_RATE_LIMIT_TPM": str(args.tpm if variant == "tpm" else 0),
            "EMBEDSTREAM_CACHE": "off",
            "EMBEDSTREAM_FETCH_MAX_WAIT_MS": "100",
            "EMBEDSTREAM_HEARTBEAT_INTERVAL_MS": "1000",
        }
    )
    budget_url = redis.url if arm == "fleet-shared" and redis is not None else None
    specs = [
        dataclasses.replace(s, partitions=PARTITIONS) if s.key == "requests_low" else s
        for s in load_topic_specs(prefix)
    ]
    processors: list[ProcessorProcess] = []
    gateway: Gateway | None = None
    try:
        async with scenario_topics(settings, specs) as names, _stopping(processors):
            if arm == "one":
                port = free_port()
                env = member_env(settings, http_port=port)
                processors.append(ProcessorProcess("one", env, log_dir))
                online_url = f"http://127.0.0.1:{port}/v1/embeddings"
            else:
                env = member_env(settings, budget_url=budget_url)
                processors += [ProcessorProcess(f"p{k}", env, log_dir) for k in range(PROCESSORS)]
                gateway = Gateway(member_env(settings, budget_url=budget_url), log_dir, "serve")
                online_url = f"http://127.0.0.1:{gateway.port}/v1/embeddings"
            for p in processors:
                p.start_nowait()
            await asyncio.gather(*(p.wait_started() for p in processors))
            if gateway is not None:
                await gateway.start()
            timeout = aiohttp.ClientTimeout(total=2.0)
            async with aiohttp.ClientSession(timeout=timeout) as session:
                await _settle(session, processors, names.requests_low)
                await simulator.reset_stats()
                callers = CallersChild(online_url, MODEL, args.rate, args.call_s)
                async with callers:
                    callers.begin(time.monotonic())
                    started = time.perf_counter()
                    publisher = asyncio.create_task(
                        publish(settings, names.requests_low, texts, f"f{round_}-")
                    )
                    drain_s = await _drain(session, processors, items, started, publisher)
                    figures = await callers.finish()
                stats = await simulator.stats()
    finally:
        if gateway is not None:
            gateway.stop()
        simulator.stop()
    return _row(variant, arm, round_, items, drain_s, figures, stats)


@contextlib.asynccontextmanager
async def _stopping(processors: list[ProcessorProcess]) -> Any:
    """Stop the processors (filled in by then) before their topics are deleted."""
    try:
        yield
    finally:
        for p in processors:
            p.terminate()
        for p in processors:
            await asyncio.to_thread(p.stop)


def _with_tpm(simulator: SimulatorProcess, tpm: float, log_dir: Path) -> SimulatorProcess:
    model = dataclasses.replace(VARIANTS["tpm"], tpm=tpm)
    return SimulatorProcess(model, dimensions=64, burst_s=60.0, log_dir=log_dir)


async def _settle(
    session: aiohttp.ClientSession, processors: list[ProcessorProcess], topic: str
) -> None:
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while time.monotonic() < deadline:
        snaps = await asyncio.gather(*(_scrape(session, p.metrics_url) for p in processors))
        held = [
            part.partition
            for s in snaps
            if s is not None and s.ready
            for part in s.partitions
            if part.topic == topic
        ]
        if all(s is not None and s.ready for s in snaps) and sorted(held) == list(
            range(PARTITIONS)
        ):
            return
        await asyncio.sleep(POLL_S)
    raise BenchError("the processors did not settle into one group")


async def _drain(
    session: aiohttp.ClientSession,
    processors: list[ProcessorProcess],
    items: int,
    started: float,
    publisher: asyncio.Task[None],
) -> float:
    latest: list[float] = [0.0] * len(processors)
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    while sum(latest) < items:
        if time.monotonic() > deadline:
            raise BenchError(f"not drained: {sum(latest):,.0f} of {items:,} results")
        if publisher.done():
            publisher.result()
        for p in processors:
            if p.exited():
                raise BenchError(f"a processor exited: {p.log_tail()}")
        await asyncio.sleep(POLL_S)
        snaps = await asyncio.gather(*(_scrape(session, p.metrics_url) for p in processors))
        latest = [
            s.results.get("low", 0.0) if s else old for s, old in zip(snaps, latest, strict=True)
        ]
    await publisher
    return time.perf_counter() - started


def _row(
    variant: str,
    arm: str,
    round_: int,
    items: int,
    drain_s: float,
    figures: CallerFigures,
    stats: dict[str, Any],
) -> Row:
    latencies = figures.latencies_s
    p50, p99 = quantile(latencies, 0.5), quantile(latencies, 0.99)
    return Row(
        variant=variant,
        arm=arm,
        round=round_,
        items=items,
        drain_s=round(drain_s, 2),
        online_sent=figures.sent,
        online_p50_ms=None if p50 is None else round(p50 * 1000, 1),
        online_p99_ms=None if p99 is None else round(p99 * 1000, 1),
        refused={status: len(took) for status, took in figures.refused.items()},
        refused_slowest_ms={s: round(max(t) * 1000, 1) for s, t in figures.refused.items()},
        provider_calls=int(stats["calls"]),
        provider_429=int(stats["rejected_429"]),
        peak_received=int(stats["peak_received"]),
        over_capacity_s=round(float(stats["over_capacity_s"]), 2),
        longest_over_capacity_s=round(float(stats["longest_over_capacity_s"]), 3),
    )


def _median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return round(statistics.median(known), 2) if known else None


def _table(rows: list[Row], variant: str) -> str:
    head = (f"{'arm':<13} {'items/s':>8} {'P50 ms':>7} {'P99 ms':>7} {'refused':>14} "
            f"{'calls':>6} {'429s':>6} {'peak':>5} {'over s':>7} {'longest':>8}")  # fmt: skip
    lines = [f"variant {variant}", head]
    for r in rows:
        refused = ",".join(f"{k}:{v}" for k, v in sorted(r.refused.items())) or "-"
        lines.append(
            f"{r.arm:<13} {r.items_per_s:>8,.0f} {r.online_p50_ms or 0:>7.0f} "
            f"{r.online_p99_ms or 0:>7.0f} {refused:>14} {r.provider_calls:>6} "
            f"{r.provider_429:>6} {r.peak_received:>5} {r.over_capacity_s:>7.2f} "
            f"{r.longest_over_capacity_s:>8.3f}"
        )
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> int:
    variants = args.variants.split(",")
    arms = args.arms.split(",")
    rows: list[Row] = []
    redis = RedisServer().start() if "fleet-shared" in arms else None
    try:
        for round_ in range(1, args.rounds + 1):
            for variant in variants:
                for arm in arms if round_ % 2 else list(reversed(arms)):
                    row = await run_arm(args, variant, arm, round_, redis)
                    rows.append(row)
                    print(json.dumps(dataclasses.asdict(row)), flush=True)
    finally:
        if redis is not None:
            redis.remove()
    summary: dict[str, Any] = {}
    for variant in variants:
        mine = [r for r in rows if r.variant == variant]
        print(_table(mine, variant))
        for arm in arms:
            of = [r for r in mine if r.arm == arm]
            summary[f"{variant}/{arm}"] = {
                "items_per_s": _median([r.items_per_s for r in of]),
                "items_per_s_range": [
                    min(r.items_per_s for r in of),
                    max(r.items_per_s for r in of),
                ],
                "online_p99_ms": _median([r.online_p99_ms for r in of]),
                "online_p99_ms_range": [
                    min((r.online_p99_ms or 0) for r in of),
                    max((r.online_p99_ms or 0) for r in of),
                ],
                "share_429": _median([r.share_429 for r in of]),
                "over_capacity_s": _median([r.over_capacity_s for r in of]),
                "longest_over_capacity_s": _median([r.longest_over_capacity_s for r in of]),
            }
    print(json.dumps({"rows": [dataclasses.asdict(r) for r in rows], "medians": summary}))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variants", default="default,slow,tpm")
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--items", type=int, default=150_000)
    parser.add_argument("--slow-items", type=int, default=50_000)
    parser.add_argument("--rate", type=float, default=20.0, help="online requests per second")
    parser.add_argument("--tpm", type=float, default=3_000_000.0)
    parser.add_argument("--log-dir", default="/tmp/bench-fleet")
    parser.add_argument(
        "--call-s",
        type=float,
        default=300.0,
        help="longest the callers call (they stop at the last result)",
    )
    args = parser.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(main_async(args))
    return 130


if __name__ == "__main__":
    sys.exit(main())
