"""Rebuilding a store from the chunk changelog (issue 32): rows/s of Kafka Connect's Debezium
JDBC sink filling an empty pgvector table from the compacted changelog alone, and the provider
calls it costs (none).

    PYTHONPATH=stream:. python bench/bench_connect_rebuild.py --bootstrap 127.0.0.1:39092 \\
        [--docs 500] [--paragraphs 20] [--dimensions 1536]

A benchmark, not a test: it asserts nothing. Phase 1 publishes ``docs`` documents of
``paragraphs`` paragraphs (one chunk each at the default chunking rules) and runs one processor
(`build_service`, ``topic_changelog`` set) against the simulator, in a process of its own,
until every document has ended; then the processor stops. Phase 2 starts a standalone Connect
worker (``ops/kafka/connect.sh``) with the JDBC sink of the guide into an empty table created
ahead with ``vector(dimensions)``: rows/s from its first row to its last (the worker's JVM and
the task's start, a few seconds, apart). The simulator's call count is read before and after
phase 2.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import orjson
import psycopg
from embedstream.app.processor import build_service, default_backend
from embedstream.kafka.client.admin import (
    configured_specs,
    create_topics,
    delete_topics,
    list_topics,
)
from embedstream.kafka.client.clients import connection_for
from embedstream.ops.metrics import Metrics
from embedstream.settings import Settings, load_settings
from embedstream.testing.connect import (
    CHUNK_TABLE,
    ConnectWorker,
    fetch_connect,
    jdbc_sink,
    worker_properties,
)
from embedstream.tools.bench.documents_figures import make_documents
from embedstream.tools.bench.documents_scenario import document_records, publish_records
from embedstream.tools.bench.figures import LatencyModel
from embedstream.tools.bench.processes import SimulatorProcess
from embedstream.tools.local_postgres import start_postgres
from prometheus_client import CollectorRegistry

POLL_S = 0.05


def total(registry: CollectorRegistry, name: str) -> float:
    return sum(s.value for m in registry.collect() for s in m.samples if s.name == name)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def fill_changelog(settings: Settings, documents: int) -> tuple[int, float]:
    """Run one processor until every document ended: the chunks it wrote, and the seconds."""
    metrics = Metrics()
    backend = default_backend(settings)
    service = build_service(settings, backend, metrics=metrics)
    task = asyncio.create_task(service.run())
    try:
        await asyncio.wait_for(service.processor.assigned.wait(), 60)
        started = time.perf_counter()
        while total(metrics.registry, "embedstream_documents_total") < documents:  # noqa: ASYNC110
            await asyncio.sleep(POLL_S)
        return int(total(metrics.registry, "embedstream_chunks_total")), (
            time.perf_counter() - started
        )
    finally:
        service.stop()
        await asyncio.wait_for(task, 60)
        await backend.close()


def row_count(dsn: str, table: str) -> int:
    with psycopg.connect(dsn) as conn:
        found = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
    return int(found[0]) if found else 0


async def rebuild(worker: ConnectWorker, dsn: str, table: str, rows: int) -> tuple[float, float]:
    """Start the worker (with the sink) and wait for ``rows`` rows: seconds to the first row
    and to the last."""
    started = time.perf_counter()
    worker.start()
    first = 0.0
    while (count := await asyncio.to_thread(row_count, dsn, table)) < rows:
        if count and not first:
            first = time.perf_counter() - started
        if time.perf_counter() - started > 600:
            raise TimeoutError(f"{count} of {rows} rows after 600 s:\n{worker.log_tail()}")
        await asyncio.sleep(POLL_S)
    return first, time.perf_counter() - started


async def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:39092")
    parser.add_argument("--docs", type=int, default=500)
    parser.add_argument("--paragraphs", type=int, default=20)
    parser.add_argument("--dimensions", type=int, default=1536)
    parser.add_argument("--seed", type=int, default=7)
    ns = parser.parse_args(argv)
    texts, _ = make_documents(ns.docs, ns.paragraphs, 0.0, ns.seed)
    prefix = f"bench.rebuild.{uuid.uuid4().hex[:8]}."
    changelog = prefix + "changelog"
    await asyncio.to_thread(fetch_connect)
    with tempfile.TemporaryDirectory(prefix="bench-rebuild-") as tmp:
        simulator = SimulatorProcess(
            LatencyModel(base_ms=5.0, per_token_ms=0.0, capacity=8),
            dimensions=ns.dimensions, burst_s=0.0, log_dir=Path(tmp),
        )  # fmt: skip
        await simulator.start()
        postgres = await asyncio.to_thread(start_postgres, tcp_port=free_port())
        assert postgres.tcp_port is not None
        rest_port = free_port()
        worker_file = worker_properties(Path(tmp) / "worker.properties", ns.bootstrap, rest_port)
        sink = jdbc_sink(prefix + "rebuild", changelog, postgres.tcp_port, "rebuilt",
                         prefix + "connect.dlq")  # fmt: skip
        connector_file = Path(tmp) / "rebuild.json"
        connector_file.write_text(orjson.dumps(sink).decode())
        worker = ConnectWorker(worker_file, connector_file, Path(tmp) / "connect.log", rest_port)
        try:
            settings = load_settings(
                env={},
                overrides={
                    "bootstrap_servers": ns.bootstrap, "topic_prefix": prefix,
                    "group_id": prefix + "processor", "base_url": simulator.base_url,
                    "metrics_port": 0, "log_level": "WARNING", "max_concurrency": 8,
                    "topic_changelog": changelog, "delivery": "exactly_once",
                },
            )  # fmt: skip
            await create_topics(connection_for(settings), configured_specs(settings))
            await publish_records(settings, prefix + "requests.low", document_records(texts))
            chunks, fill_s = await fill_changelog(settings, ns.docs)
            with psycopg.connect(postgres.dsn, autocommit=True) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
                conn.execute(CHUNK_TABLE.format(name="rebuilt", dimensions=ns.dimensions))
            calls_before = (await simulator.stats())["calls"]
            first_s, last_s = await rebuild(worker, postgres.dsn, "rebuilt", chunks)
            calls_after = (await simulator.stats())["calls"]
        finally:
            worker.stop()
            await delete_topics(ns.bootstrap, await list_topics(ns.bootstrap, prefix))
            postgres.stop()
            simulator.stop()
    print(
        f"{ns.docs} documents x {ns.paragraphs} paragraphs, {ns.dimensions} dimensions, on "
        f"Kafka {ns.bootstrap}; {os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f}"
    )
    print(f"changelog filled by one processor: {chunks:,} chunks in {fill_s:.1f} s")
    steady = chunks / (last_s - first_s) if last_s > first_s else 0.0
    print(
        f"rebuild into an empty table: {chunks:,} rows in {last_s:.1f} s from the worker's "
        f"start ({first_s:.1f} s to the first row), {steady:,.0f} rows/s from the first row "
        f"to the last; provider calls during the rebuild: {calls_after - calls_before}"
    )


if __name__ == "__main__":
    asyncio.run(main())
