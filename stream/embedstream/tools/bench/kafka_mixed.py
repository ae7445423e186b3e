"""kafka-mixed (issue 20): a backlog of both lanes at once, and how soon its high part drains.

Two drains by one processor each, on topics of their own, one after the other:

- **high alone**: H events waiting on the high topic;
- **mixed**: the same H high events and L low ones (published first, so every low record is
  older than every high one), drained together.

A high request's time runs from the processor's assignment to its result acknowledged by the
broker (noted by the processor's producer, bench/timeline.py). The issue's goal: in the mixed
backlog the high items drain first, their P99 at most 1.3x the time to drain them alone; both
sides start at the assignment, so the group join (reported beside) is in neither. The rows are
built by the pure ``kafka_figures.mixed_rows``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from embedstream.ops.metrics import Metrics
from embedstream.tools.bench.context import BenchContext, ScenarioResult, reporting
from embedstream.tools.bench.kafka_figures import Drain, mixed_rows, stage_rows
from embedstream.tools.bench.kafka_flood import POLL_S, lane_results
from embedstream.tools.bench.kafka_scenarios import (
    KafkaBroker,
    publish,
    running_processor,
    scenario_topics,
    unique_prefix,
)
from embedstream.tools.bench.recorder import CpuMeter, TimedBackend
from embedstream.tools.bench.scenarios import GRACE_S
from embedstream.tools.bench.timeline import Timeline
from embedstream.tools.bench.workload import make_texts

HIGH_SHARE = 0.1  # of the mixed backlog, as in the 100,000 (10% high)


@dataclass(frozen=True, slots=True)
class Drained:
    """One backlog drained: each high request's moments (its assignment as "scheduled" and
    "published"), when each high result was acknowledged, the whole drain and the join."""

    high_moments: dict[str, dict[str, float]]
    high_acked_s: list[float]  # seconds from the assignment
    drain: Drain
    join_s: float


async def _drain_backlog(
    ctx: BenchContext,
    broker: KafkaBroker,
    high_texts: Sequence[str],
    low_texts: Sequence[str],
    label: str,
) -> Drained:
    settings = broker.settings(ctx.settings, unique_prefix("mixed"))
    timeline = Timeline()
    high_ids = [f"high-{i}" for i in range(len(high_texts))]
    timeline.ids_by_text.update(zip(high_texts, high_ids, strict=True))
    total = len(high_texts) + len(low_texts)
    async with scenario_topics(settings) as names:
        if low_texts:
            await publish(settings, names.requests_low, low_texts, "low-")
        await publish(settings, names.requests_high, high_texts, "high-")
        backend = TimedBackend(ctx.embedder(settings))
        metrics = Metrics()
        cpu = CpuMeter(ctx.provider_cpu())
        await ctx.reset_provider_stats()

        def done() -> float:
            return lane_results(metrics, "high") + lane_results(metrics, "low")

        loop = asyncio.get_running_loop()
        joining = loop.time()
        async with (
            reporting(ctx.progress, label, total, "items", done),
            running_processor(settings, backend, metrics, timeline=timeline),
        ):
            backend.restart()
            cpu.start()
            start = loop.time()
            deadline = start + GRACE_S + total / 500.0
            while done() < total and loop.time() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(POLL_S)
            seconds = loop.time() - start
            cpu.stop()
    for request_id in high_ids:
        timeline.note(request_id, "scheduled", start)
        timeline.note(request_id, "published", start)
    moments = timeline.only(high_ids)
    acked = [t["acked"] - start for t in moments.values() if "acked" in t]
    drain = Drain(int(done()), seconds, backend.calls, backend.inputs, cpu.client_s,
                  cpu.provider_s, total)  # fmt: skip
    return Drained(moments, acked, drain, start - joining)


async def kafka_mixed(
    ctx: BenchContext, broker: KafkaBroker, items: int, *, stages: bool = False
) -> list[ScenarioResult]:
    """The high part of an ``items`` backlog alone, then the whole backlog; ``stages``: the
    mixed drain's high requests stage by stage (fetched, call, written, acked)."""
    high_count = max(1, round(items * HIGH_SHARE))
    high_texts = [f"high {text}" for text in make_texts(high_count, tokens=ctx.tokens, seed=11)]
    low_texts = make_texts(items - high_count, tokens=ctx.tokens, seed=ctx.seed)
    alone = await _drain_backlog(ctx, broker, high_texts, [], f"kafka mixed: {high_count:,} high")
    mixed = await _drain_backlog(
        ctx, broker, high_texts, low_texts, f"kafka mixed: {high_count:,} high + low"
    )
    rows = mixed_rows(alone.high_acked_s, mixed.high_acked_s, high_count, mixed.drain,
                      (alone.join_s, mixed.join_s), broker.name)  # fmt: skip
    ctx.progress.end(rows[1].scenario)
    if stages:
        rows += stage_rows(mixed.high_moments, f"  {rows[1].scenario}", mixed.drain.seconds,
                           last="acked")  # fmt: skip
    return [ScenarioResult(row) for row in rows]
