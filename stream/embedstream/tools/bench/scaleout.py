"""The scale-out figure: 1, 2, 3... `embedstream run` processes in one consumer group, on the
same simulated provider, draining one Kafka backlog.

N processors start on empty topics and the bench waits until the group has settled (every
member ready, holding its share of the partitions); only then is the backlog published, as
fast as the producer goes, and the window runs from its first event to its last result:
items/s and CPU seconds per 1,000 items (from /proc of each member). Publishing first would
put rebalances in the window: a member hands a revoked partition over only after finishing
what it had read from it (up to `drain_timeout_s`), which with a full buffer takes longer than
the whole drain. The low-priority topic gets 12 partitions, which 1, 2, 3, 4 and 6 members
share evenly (with the default 4, three members would split them 2/1/1 and the tail would be
one member's).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Coroutine, Sequence
from typing import Any

import aiohttp

from embedstream.errors import env_var
from embedstream.kafka.client.admin import load_topic_specs
from embedstream.settings import Settings
from embedstream.tools.bench import BenchError
from embedstream.tools.bench.context import BenchContext, reporting
from embedstream.tools.bench.figures import ScaleOutRow
from embedstream.tools.bench.kafka_scenarios import (
    KafkaBroker,
    publish,
    scenario_topics,
    unique_prefix,
)
from embedstream.tools.bench.options import BENCH_SETTINGS
from embedstream.tools.bench.processes import ProcessorProcess
from embedstream.tools.bench.workload import make_texts
from embedstream.tools.top.readings import Snapshot, parse_exposition

PARTITIONS = 12
SETTLE_TIMEOUT_S = 90.0
POLL_S = 0.25
DRAIN_GRACE_S = 120.0
# Settings a member needs beyond the engine's: where to connect and how to join.
MEMBER_SETTINGS = (
    "bootstrap_servers",
    "topic_prefix",
    "group_id",
    "base_url",
    "fetch_max_wait_ms",
    "session_timeout_ms",
    "heartbeat_interval_ms",
)


def member_environment(settings: Settings) -> dict[str, str]:
    """EMBEDSTREAM_* variables giving an `embedstream run` process these settings."""
    env = {"EMBEDSTREAM_LOG_LEVEL": "WARNING"}
    for name in (*BENCH_SETTINGS, *MEMBER_SETTINGS):
        value = getattr(settings, name)
        if value is not None:
            env[env_var(name)] = str(value)
    return env


def settled(snapshots: Sequence[Snapshot | None], topic: str, partitions: int) -> bool:
    """Every member ready, holding at least one of ``topic``'s partitions, all of them held
    and none twice (a member keeps reporting a revoked partition until its next refresh)."""
    held: list[int] = []
    for snapshot in snapshots:
        if snapshot is None or not snapshot.ready:
            return False
        mine = [p.partition for p in snapshot.partitions if p.topic == topic]
        if not mine:
            return False
        held += mine
    return sorted(held) == list(range(partitions))


async def _scrape(session: aiohttp.ClientSession, member: ProcessorProcess) -> Snapshot | None:
    try:
        async with session.get(member.metrics_url) as response:
            return parse_exposition(await response.text())
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None


async def scale_out(
    ctx: BenchContext, broker: KafkaBroker, counts: Sequence[int], items: int
) -> list[ScaleOutRow]:
    if ctx.provider is None:
        raise BenchError("--scale-out needs the simulated provider")
    return [await _one_group(ctx, broker, n, items) for n in counts]


async def _one_group(ctx: BenchContext, broker: KafkaBroker, n: int, items: int) -> ScaleOutRow:
    settings = broker.settings(ctx.settings, unique_prefix(f"scale{n}"))
    specs = [
        dataclasses.replace(spec, partitions=PARTITIONS) if spec.key == "requests_low" else spec
        for spec in load_topic_specs(settings.topic_prefix)
    ]
    texts = make_texts(items, tokens=ctx.tokens, seed=ctx.seed)
    async with scenario_topics(settings, specs) as names:
        env = member_environment(settings)
        members = [ProcessorProcess(f"scale{n}-member{k}", env, ctx.log_dir) for k in range(n)]
        try:
            for member in members:
                member.start_nowait()
            await asyncio.gather(*(member.wait_started() for member in members))
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2.0)) as session:
                group = _Group(session, members)
                settle_s = await _settle(ctx, group, names.requests_low)
                return await _measure(
                    ctx, broker, group, settle_s, items,
                    publish(settings, names.requests_low, texts, f"scale{n}-"),
                )  # fmt: skip
        finally:
            for member in members:
                member.terminate()
            for member in members:
                member.stop()


class _Group:
    """The members' latest metrics; a failed scrape keeps a member's previous snapshot (a
    busy member may miss one), so the counts never go backwards."""

    def __init__(self, session: aiohttp.ClientSession, members: list[ProcessorProcess]):
        self._session = session
        self.members = members
        self.snapshots: list[Snapshot | None] = [None] * len(members)

    async def poll(self) -> None:
        fresh = await asyncio.gather(*(_scrape(self._session, m) for m in self.members))
        self.snapshots = [new or old for new, old in zip(fresh, self.snapshots, strict=True)]
        for member in self.members:
            if member.exited():
                raise BenchError(f"a processor exited: {member.log_tail()}")

    @property
    def results(self) -> float:
        return sum(s.results_total for s in self.snapshots if s is not None)

    def batches(self) -> tuple[float, float]:
        """Calls cut and inputs they carried, over all members so far."""
        histograms = [s.batch_size for s in self.snapshots if s is not None]
        return sum(h.count for h in histograms), sum(h.sum for h in histograms)

    def cpu_s(self) -> float:
        return sum(m.cpu_s() or 0.0 for m in self.members)


async def _settle(ctx: BenchContext, group: _Group, topic: str) -> float:
    """Seconds until every member is ready and holds its share of ``topic``."""
    n = len(group.members)
    ctx.progress.begin(f"scale-out {n} join", None, "s")
    started = time.perf_counter()
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    await group.poll()
    while not settled(group.snapshots, topic, PARTITIONS):
        if time.monotonic() > deadline:
            raise BenchError(
                f"{n} processors did not settle into one group in {SETTLE_TIMEOUT_S:g} s"
            )
        await asyncio.sleep(POLL_S)
        await group.poll()
    settle_s = time.perf_counter() - started
    ctx.progress.end(f"settled in {settle_s:.1f} s")
    return settle_s


async def _measure(
    ctx: BenchContext,
    broker: KafkaBroker,
    group: _Group,
    settle_s: float,
    items: int,
    publishing: Coroutine[Any, Any, None],
) -> ScaleOutRow:
    """From the first event published to the last result: the group drains as the backlog
    arrives (publishing is much faster than draining), with no rebalance in the window."""
    assert ctx.provider is not None
    n = len(group.members)
    async with reporting(ctx.progress, f"scale-out {n}", items, "items", lambda: group.results):
        before, cpu_before, batches_before = group.results, group.cpu_s(), group.batches()
        provider_before = ctx.provider.cpu_s()
        published: list[float] = []
        start = time.perf_counter()
        publisher = asyncio.create_task(publishing)
        publisher.add_done_callback(lambda _: published.append(time.perf_counter() - start))
        deadline = time.monotonic() + DRAIN_GRACE_S + items / 500.0
        while group.results - before < items:
            if publisher.done():
                publisher.result()  # a failed publication: say why
            if time.monotonic() > deadline:
                raise BenchError(f"{n} processors did not drain {items:,} items in time")
            await asyncio.sleep(POLL_S / 5)
            await group.poll()
        seconds = time.perf_counter() - start
        await publisher
        cpu_after, batches_after = group.cpu_s(), group.batches()
        provider_after = ctx.provider.cpu_s()
    provider_cpu = (
        provider_after - provider_before
        if provider_after is not None and provider_before is not None
        else None
    )
    row = ScaleOutRow(
        processors=n,
        items=items,
        seconds=seconds,
        processor_cpu_s=cpu_after - cpu_before,
        provider_cpu_s=provider_cpu,
        calls=int(batches_after[0] - batches_before[0]),
        inputs=int(batches_after[1] - batches_before[1]),
        bound_per_s=ctx.model.physical_bound(ctx.tokens) if ctx.model else None,
        settle_s=settle_s,
        publish_s=published[0] if published else seconds,
        note=f"{broker.name}, {PARTITIONS} partitions; first event published to last result",
    )
    per_1000 = f"{row.cpu_s_per_1000:.2f}" if row.cpu_s_per_1000 is not None else "-"
    ctx.progress.end(f"{row.items_per_s:,.0f} items/s, {per_1000} CPU s per 1,000 items")
    return row
