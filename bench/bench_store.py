"""The vector store beside the processor (issue 19): rows/s into PostgreSQL and the store
writer's CPU per 1,000 rows, next to the processor's results/s and CPU per 1,000 items, in
one run on Apache Kafka.

    python bench/bench_store.py --bootstrap 127.0.0.1:39092 [--docs 500] [--paragraphs 20]

A benchmark, not a test: it asserts nothing. The simulator (`embedstream simulate`) runs in a
process of its own, so this process's CPU is the processor's or the store writer's alone; a
throwaway PostgreSQL with pgvector (pgserver) runs in its own processes too, its CPU not
counted. Phase 1 publishes ``docs`` documents of ``paragraphs`` paragraphs (one chunk each at
the default chunking rules) before anything reads them, then runs one processor
(`build_service`) until every document has ended: results/s and CPU per 1,000 results. Phase
2, after the processor stopped, runs one store writer (`build_store_writer`) over the same
results topic until every document's final record is applied: rows/s and CPU per 1,000 rows.
Each phase is timed from its member joining the group to its last output, so neither waits
for the other; the smaller rate is what limits a pipeline of one of each on this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from embedstream.app.processor import build_service, default_backend
from embedstream.app.store_writer import build_store_writer
from embedstream.kafka.client.admin import (
    create_topics,
    delete_topics,
    list_topics,
    load_topic_specs,
)
from embedstream.kafka.client.clients import connection_for
from embedstream.ops.metrics import Metrics
from embedstream.ops.store_metrics import StoreMetrics
from embedstream.settings import Settings, load_settings
from embedstream.tools.bench.documents_figures import make_documents
from embedstream.tools.bench.documents_scenario import document_records, publish_records
from embedstream.tools.bench.figures import LatencyModel
from embedstream.tools.bench.processes import SimulatorProcess
from embedstream.tools.local_postgres import start_postgres
from prometheus_client import CollectorRegistry

DIMENSIONS = 256
POLL_S = 0.02


@dataclass(frozen=True)
class PhaseFigures:
    """One phase: how many outputs it made, in how long, for how much of this process's CPU."""

    name: str
    unit: str
    count: int
    seconds: float
    cpu_s: float

    @property
    def per_s(self) -> float:
        return self.count / self.seconds if self.seconds else 0.0

    @property
    def cpu_ms_per_1000(self) -> float:
        return self.cpu_s / self.count * 1e6 if self.count else 0.0


def total(registry: CollectorRegistry, name: str) -> float:
    """The sum of every sample of counter ``name`` (all label values)."""
    return sum(s.value for m in registry.collect() for s in m.samples if s.name == name)


async def measured(
    name: str,
    unit: str,
    joined: Awaitable[object],
    done: Callable[[], bool],
    count: Callable[[], float],
) -> PhaseFigures:
    """Wall and process CPU from ``joined`` until ``done()``; ``count()`` outputs made."""
    await asyncio.wait_for(joined, 60)
    wall, cpu = time.perf_counter(), time.process_time()
    before = count()
    while not done():  # noqa: ASYNC110 (a metric to poll, no event to wait on)
        await asyncio.sleep(POLL_S)
    return PhaseFigures(
        name,
        unit,
        int(count() - before),
        time.perf_counter() - wall,
        time.process_time() - cpu,
    )


async def processor_phase(settings: Settings, documents: int) -> PhaseFigures:
    metrics = Metrics()
    backend = default_backend(settings)
    service = build_service(settings, backend, metrics=metrics)
    task = asyncio.create_task(service.run())

    def ended() -> bool:
        return total(metrics.registry, "embedstream_documents_total") >= documents

    try:
        return await measured(
            "processor",
            "results",
            service.processor.assigned.wait(),
            ended,
            lambda: total(metrics.registry, "embedstream_chunks_total"),
        )
    finally:
        service.stop()
        await asyncio.wait_for(task, 60)
        await backend.close()


async def store_phase(settings: Settings, documents: int) -> PhaseFigures:
    metrics = StoreMetrics()
    writer = build_store_writer(settings, metrics=metrics)
    task = asyncio.create_task(writer.run())

    def ended() -> bool:
        return total(metrics.registry, "embedstream_store_documents_completed_total") >= documents

    try:
        return await measured(
            "store writer",
            "rows",
            writer.feed.joined.wait(),
            ended,
            lambda: total(metrics.registry, "embedstream_store_rows_upserted_total"),
        )
    finally:
        writer.stop()
        await asyncio.wait_for(task, 60)


def render(rows: Sequence[PhaseFigures]) -> str:
    lines = [f"{'phase':<14}{'outputs':>9}{'seconds':>9}{'per s':>10}{'CPU ms / 1,000':>16}"]
    for row in rows:
        lines.append(
            f"{row.name:<14}{row.count:>9,}{row.seconds:>9.2f}{row.per_s:>10,.0f}"
            f"{row.cpu_ms_per_1000:>16,.0f}  ({row.unit})"
        )
    processor, store = rows
    ratio = store.per_s / processor.per_s if processor.per_s else 0.0
    limit = "the processor" if ratio >= 1 else "the store writer"
    lines.append(
        f"store rows/s vs processor results/s: {ratio:.2f}x; CPU per 1,000: store "
        f"{store.cpu_ms_per_1000 / processor.cpu_ms_per_1000:.2f}x the processor's; "
        f"{limit} limits a pipeline of one of each here"
    )
    return "\n".join(lines)


async def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:39092")
    parser.add_argument("--docs", type=int, default=500)
    parser.add_argument("--paragraphs", type=int, default=20)
    parser.add_argument("--seed", type=int, default=7)
    ns = parser.parse_args(argv)
    texts, _ = make_documents(ns.docs, ns.paragraphs, 0.0, ns.seed)
    prefix = f"bench.store.{uuid.uuid4().hex[:8]}."
    with tempfile.TemporaryDirectory(prefix="bench-store-") as tmp:
        simulator = SimulatorProcess(
            LatencyModel(base_ms=5.0, per_token_ms=0.0, capacity=8),
            dimensions=DIMENSIONS,
            burst_s=0.0,
            log_dir=Path(tmp),
        )
        await simulator.start()
        postgres = await asyncio.to_thread(start_postgres)
        try:
            settings = load_settings(
                env={},
                overrides={
                    "bootstrap_servers": ns.bootstrap, "topic_prefix": prefix,
                    "group_id": prefix + "processor", "store_group_id": prefix + "sink",
                    "base_url": simulator.base_url, "metrics_port": 0, "log_level": "WARNING",
                    "encoding_format": "base64", "max_concurrency": 8,
                    "store_dsn": postgres.dsn, "store_table": "bench_store",
                },
            )  # fmt: skip
            await create_topics(connection_for(settings), load_topic_specs(prefix))
            await publish_records(settings, prefix + "requests.low", document_records(texts))
            rows = [
                await processor_phase(settings, ns.docs),
                await store_phase(settings, ns.docs),
            ]
        finally:
            await delete_topics(ns.bootstrap, await list_topics(ns.bootstrap, prefix))
            postgres.stop()
            simulator.stop()
    print(
        f"{ns.docs} documents x {ns.paragraphs} paragraphs on Kafka {ns.bootstrap}; one "
        f"processor, then one store writer into PostgreSQL 16 + pgvector ({DIMENSIONS} dims, "
        f"no index); simulator in its own process; {os.cpu_count()} cores"
    )
    print(render(rows))


if __name__ == "__main__":
    asyncio.run(main())
