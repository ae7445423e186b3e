"""Bulk at half price (issue 44's goals, the counting ones): what batch jobs bill, and where the
adaptive rule sends a backlog. Counts only, no latency (the live lanes' tails during a batch
backfill are bench/bench_backfill_lanes.py's, with ``--via batch``).

    python bench/bench_batch_jobs.py migration --bootstrap 127.0.0.1:39092 [--docs 1000]
    python bench/bench_batch_jobs.py backlog --bootstrap 127.0.0.1:39092 [--requests 100000]

``migration``: a corpus in the documents topic embedded into PostgreSQL (pgserver) by one
model, then ``migrate start --via batch`` of another (``--edit-every N``: every Nth document
edited meanwhile, which the live stream dual-writes through sync calls, as it must); at the
end the new model's tokens by price tier, from the processor's metrics and the simulator's
own counts.

``backlog``: a backlog of requests in the low topic with ``batch_after_s`` set and a sync
budget of ``--rpm`` calls of ``--batch-size`` a minute: how many went sync and how many
through batch jobs (the rule: a request goes to a job when it would not be sent within
``batch_after_s`` of entering Kafka at the measured pace), the sync path's pace as the
simulator saw it, each route's end-to-end latency as its results say (``latency_ms``: the rule
holds if no sync result is much later than ``batch_after_s``), every request's outcomes counted
(exactly one each), and the cost at each tier.

The processor runs in this process (`build_service`), the simulator too (its batches done in
``--completion-s``). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent.parent))
import orjson
from embedsim.config import SimulatorConfig
from embedsim.server import SimulatorServer
from embedstream.app import store_watch
from embedstream.app.migrate import run_migration
from embedstream.app.processor import build_service, default_backend
from embedstream.app.service import Service
from embedstream.app.store_writer import build_store_writer
from embedstream.kafka.client.admin import configured_specs, create_topics
from embedstream.kafka.client.clients import connection_for, make_reader, partitions_of
from embedstream.kafka.client.topics import configured_topics
from embedstream.settings import Settings, load_settings
from embedstream.tools.bench.documents_scenario import publish_records
from embedstream.tools.local_postgres import start_postgres

from bench.bench_backfill import statuses, until
from bench.bench_backfill_lanes import text_of

OLD, NEW, NEW_DIMENSIONS = "text-embedding-3-small", "text-embedding-3-large", 64


def tier_tokens(service: Service, model: str) -> dict[str, float]:
    registry = service.metrics.registry
    return {tier: registry.get_sample_value("embedstream_provider_tokens_total",
                                            {"tier": tier, "model": model}) or 0.0
            for tier in ("sync", "batch")}  # fmt: skip


def cost(service: Service) -> dict[str, float]:
    registry = service.metrics.registry
    return {tier: round(registry.get_sample_value("embedstream_provider_cost_usd_total",
                                                  {"tier": tier}) or 0.0, 6)
            for tier in ("sync", "batch")}  # fmt: skip


@contextlib.asynccontextmanager
async def running(settings: Settings) -> AsyncIterator[Service]:
    """A processor in this process, as `embedstream run` builds it."""
    backend = default_backend(settings)
    service = build_service(settings, backend)
    task = asyncio.create_task(service.run())
    try:
        await asyncio.wait_for(service.wait_assigned(), 120)
        yield service
    finally:
        service.stop()
        await asyncio.wait_for(task, 120)
        await backend.close()


async def migration(args: argparse.Namespace) -> dict[str, object]:
    store_watch.WATCH_INTERVAL_S = 1.0
    prefix = f"bj{uuid.uuid4().hex[:8]}."
    config = SimulatorConfig(base_ms=5, batch_completion_s=args.completion_s)
    with start_postgres() as postgres:
        async with SimulatorServer(config) as simulator:
            settings = load_settings(env={}, overrides={
                "bootstrap_servers": args.bootstrap, "topic_prefix": prefix,
                "group_id": prefix + "group", "base_url": simulator.url, "metrics_port": 0,
                "store_dsn": postgres.dsn, "store_table": f"bj_{uuid.uuid4().hex[:8]}",
                "store_group_id": prefix + "sink", "store_model": OLD, "dimensions": 32,
                "topic_documents": prefix + "documents", "batch_form_s": 2.0,
                "batch_poll_s": 0.5,
            })  # fmt: skip
            await create_topics(connection_for(settings), configured_specs(settings))
            rng = random.Random(44)
            corpus = {f"doc-{d:05}": text_of(rng, f"doc {d}") for d in range(args.docs)}
            topic = prefix + "documents"

            def events(docs: dict[str, str]) -> list[tuple[bytes, bytes]]:
                return [(d.encode(), orjson.dumps({"doc_id": d, "text": t}))
                        for d, t in docs.items()]  # fmt: skip

            writer = build_store_writer(settings)
            writing = asyncio.create_task(writer.run())
            try:
                async with running(settings) as service:
                    await publish_records(settings, topic, events(corpus))

                    async def ingested() -> bool:
                        found = await statuses(settings)
                        return len(found) == 1 and found[0].complete == len(corpus)

                    await until(ingested, 1800, "the first generation")
                    simulator.batches.advance()
                    sync_before = simulator.stats.tokens
                    began = time.monotonic()
                    said = await run_migration(settings, "start", model=NEW,
                                               dimensions=NEW_DIMENSIONS, via="batch")  # fmt: skip
                    new_id = said[0].split()[2]

                    async def following() -> bool:  # the live stream dual-writes from now on
                        assert service.watch is not None
                        filling = service.watch.dual_writes.generations.filling
                        return filling is not None and filling.id == new_id

                    await until(following, 60, "the processor following the migration")
                    every = args.edit_every
                    edited = {d: text_of(rng, f"edit {d}") for d in list(corpus)[::every]
                              } if every else {}  # fmt: skip
                    await publish_records(settings, topic, events(edited))
                    corpus.update(edited)

                    async def filled() -> bool:
                        found = await statuses(settings)
                        return (len(found) == 2 and found[1].complete == len(corpus)
                                and found[1].lacking == 0)  # fmt: skip

                    await until(filled, 3600, "the new generation")
                    seconds = time.monotonic() - began
                    by_tier = tier_tokens(service, NEW)
                    spent = cost(service)
            finally:
                writer.stop()
                await writing
            simulator.batches.advance()
            stats = simulator.stats
    total = sum(by_tier.values())
    return {
        "scenario": "migration via batch jobs", "documents": args.docs,
        "edited_during_migration": len(edited), "generation": new_id,
        "new_model_tokens_by_tier": by_tier,
        "batch_share_of_new_model_tokens": round(by_tier["batch"] / total, 4) if total else None,
        "simulator": {"batch_tokens": stats.batch_tokens, "batches": stats.batches,
                      "sync_tokens_during_migration": stats.tokens - sync_before},
        "cost_usd_by_tier": spent, "seconds": round(seconds, 1),
    }  # fmt: skip


async def backlog(args: argparse.Namespace) -> dict[str, object]:
    prefix = f"bb{uuid.uuid4().hex[:8]}."
    config = SimulatorConfig(base_ms=20, batch_completion_s=args.completion_s, record_calls=True)
    async with SimulatorServer(config) as simulator:
        settings = load_settings(env={}, overrides={
            "bootstrap_servers": args.bootstrap, "topic_prefix": prefix,
            "group_id": prefix + "group", "base_url": simulator.url, "metrics_port": 0,
            "dimensions": 32, "batch_after_s": args.batch_after_s, "batch_form_s": 2.0,
            "batch_poll_s": 0.5, "rate_limit_rpm": args.rpm,
            "max_batch_size": args.batch_size,
        })  # fmt: skip
        names = configured_topics(settings)
        await create_topics(connection_for(settings), configured_specs(settings))
        texts = {f"q-{i}": f"backlog {i} " + "word " * (i % 13) for i in range(args.requests)}
        records = [(i.encode(), orjson.dumps({"id": i, "text": t})) for i, t in texts.items()]
        await publish_records(settings, names.requests_low, records)
        began = time.monotonic()
        async with running(settings) as service:
            outcomes, latency_ms = await count_outcomes(
                settings, names.results, names.dead_letters, args.requests
            )
            seconds = time.monotonic() - began
            registry = service.metrics.registry
            routed = {route: registry.get_sample_value("embedstream_batch_routed_total",
                                                       {"rule": "adaptive", "route": route})
                      for route in ("sync", "batch")}  # fmt: skip
            by_tier = tier_tokens(service, settings.model)
            spent = cost(service)
        simulator.batches.advance()
        stats = simulator.stats
    calls = [c for c in simulator.calls if c.status == 200]
    sync_texts = {text for c in calls for text in c.inputs}
    span_s = calls[-1].received_at - calls[0].received_at if len(calls) > 1 else 0.0
    by_route: dict[str, list[float]] = {"sync": [], "batch": []}
    for request_id, ms in latency_ms.items():
        by_route["sync" if texts[request_id] in sync_texts else "batch"].append(ms / 1000)
    return {
        "scenario": "low backlog with batch_after_s", "requests": args.requests,
        "batch_after_s": args.batch_after_s,
        "sent_sync": stats.inputs, "sent_in_batch_jobs": stats.batch_inputs,
        "sync_pace_items_per_s": round(stats.inputs / span_s, 1) if span_s else None,
        "end_to_end_s": {route: spread(values) for route, values in by_route.items()},
        "routed_adaptive": routed, "outcomes": outcomes, "tokens_by_tier": by_tier,
        "cost_usd_by_tier": spent, "batches": stats.batches, "seconds": round(seconds, 1),
    }  # fmt: skip


def spread(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    ordered = sorted(values)
    return {"min": round(ordered[0], 2), "median": round(ordered[len(ordered) // 2], 2),
            "max": round(ordered[-1], 2)}  # fmt: skip


async def count_outcomes(
    settings: Settings, results: str, dead_letters: str, expected: int
) -> tuple[dict[str, object], dict[str, float]]:
    """Read results and dead letters until every request has one; then how many each has,
    and each result's end-to-end latency (its ``latency_ms``: Kafka timestamp to result)."""
    consumer = make_reader(connection_for(settings))
    await consumer.start()
    try:
        tps = await partitions_of(consumer, results) + await partitions_of(consumer, dead_letters)
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        seen: Counter[str] = Counter()
        latency: dict[str, float] = {}
        quiet_since = time.monotonic()
        while len(seen) < expected or time.monotonic() - quiet_since < 3.0:
            got = await consumer.getmany(timeout_ms=500)
            for batch in got.values():
                for record in batch:
                    key = (record.key or b"").decode()
                    seen[key] += 1
                    if record.topic == results and record.value:
                        latency[key] = float(orjson.loads(record.value)["latency_ms"])
            if got:
                quiet_since = time.monotonic()
    finally:
        await consumer.stop()
    counts = Counter(seen.values())
    said = {"requests_with_an_outcome": len(seen), "outcomes_per_request": dict(counts)}
    return said, latency


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", choices=["migration", "backlog"])
    parser.add_argument("--bootstrap", default="127.0.0.1:39092")
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--edit-every", type=int, default=0, metavar="N",
                        help="migration: edit every Nth document while it runs (dual-written "
                        "by the live stream through sync calls); 0: none")  # fmt: skip
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--batch-after-s", type=float, default=30.0)
    parser.add_argument("--rpm", type=float, default=600.0, help="the sync budget: calls/min")
    parser.add_argument("--batch-size", type=int, default=100, help="inputs a sync call")
    parser.add_argument("--completion-s", type=float, default=5.0,
                        help="the simulator's time to do a batch")  # fmt: skip
    args = parser.parse_args()
    scenario: Any = migration if args.scenario == "migration" else backlog
    print(json.dumps(asyncio.run(scenario(args)), indent=2))


if __name__ == "__main__":
    main()
