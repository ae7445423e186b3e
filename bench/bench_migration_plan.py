"""`embedstream migrate plan` against what a re-embed then put in the store (issue 30): the
documents, chunks, tokens and calls a plan gives for a corpus, from the store's first
generation, beside the counts of the generation a processor of the new settings filled.

    python bench/bench_migration_plan.py --bootstrap 127.0.0.1:39092 [--docs 1000]

Counts, not timings: a busy machine gives the same figures. One processor and the store
writer fill the first generation (the simulator's hash model, texts kept); then, for each
target, the plan is made, the generation started, a processor with the target's settings (a
consumer group of its own, reading the documents from the topic's start) fills it, and the
store's counts are read: its documents, its chunk rows, the tokens the processor's estimate
gives those rows (what the plan estimates) and the tokens the provider reported, and the
calls the processor made. The targets: another model (same chunking), and other chunking
(the texts the store keeps cut again). The generation is cancelled before the next one.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import uuid
from collections.abc import Awaitable, Callable

from embedsim.model import SimulatorConfig
from embedsim.server import SimulatorServer
from embedstream.app.migrate import call_limits, target_generation
from embedstream.app.processor import build_service, default_backend
from embedstream.app.store_writer import build_store_writer
from embedstream.kafka.client.admin import configured_specs, configured_topics, create_topics
from embedstream.kafka.client.clients import connection_for
from embedstream.ops.metrics import Metrics
from embedstream.settings import Settings, load_settings
from embedstream.stores.configured import store_config
from embedstream.stores.pgmigrate import GenerationStatus, Migrations
from embedstream.stores.pgvector import PgVectorStore
from embedstream.tools.bench.documents_figures import make_documents
from embedstream.tools.bench.documents_scenario import document_records, publish_records
from embedstream.tools.local_postgres import start_postgres


async def _until(check: Callable[[], Awaitable[bool]], timeout_s: float = 600.0) -> None:
    async with asyncio.timeout(timeout_s):
        while True:
            if await check():
                return
            await asyncio.sleep(0.2)


async def _statuses(settings: Settings) -> list[GenerationStatus]:
    async with PgVectorStore(store_config(settings), create=False) as store:
        return await Migrations(store, "none").status()


async def _estimated_tokens(settings: Settings, generation_id: str) -> int:
    """The processor's estimate of the chunk rows a generation holds (what a plan counts)."""
    async with PgVectorStore(store_config(settings), create=False) as store:
        table = store.names.of(generation_id).chunks
        async with store.session.transaction("count"):
            row = await store.session.fetchone(
                f"SELECT coalesce(sum(ceil(octet_length(text) / 3.0) + 1), 0) FROM {table}"
            )
    return int(row[0]) if row else 0


async def _run(settings: Settings, until: Callable[[], Awaitable[bool]]) -> int:
    """A processor of ``settings`` until ``until``; the calls it made."""
    metrics = Metrics()
    backend = default_backend(settings)
    service = build_service(settings, backend, metrics=metrics)
    task = asyncio.create_task(service.run())
    try:
        await _until(until)
    finally:
        service.stop()
        await task
        await backend.close()
    calls = metrics.registry.get_sample_value("embedstream_api_calls_total", {"outcome": "ok"})
    return int(calls or 0)


async def main(bootstrap: str, docs: int, paragraphs: int) -> None:
    prefix = f"bench-plan-{uuid.uuid4().hex[:8]}."
    postgres = await asyncio.to_thread(start_postgres)
    simulator = SimulatorServer(SimulatorConfig(base_ms=0))
    await simulator.start()
    try:
        first = load_settings(env={}, overrides={
            "bootstrap_servers": bootstrap, "topic_prefix": prefix, "group_id": prefix + "a",
            "base_url": simulator.url, "store_dsn": postgres.dsn, "store_model": "model-a",
            "model": "model-a", "store_group_id": prefix + "sink", "include_chunk_text": True,
            "chunk_max_tokens": 256, "metrics_port": 0, "max_wait_ms": 5,
        })  # fmt: skip
        await create_topics(connection_for(first), configured_specs(first))
        texts, _ = make_documents(docs, paragraphs, 0.0, seed=30)
        await publish_records(first, configured_topics(first).requests_low, document_records(texts))
        writer = build_store_writer(first)
        writing = asyncio.create_task(writer.run())

        async def first_filled() -> bool:
            found = await _statuses(first)
            return bool(found) and found[0].complete == docs

        await _run(first, first_filled)
        targets = [
            ("another model", dataclasses.replace(first, model="model-b")),
            ("other chunking", dataclasses.replace(first, chunk_max_tokens=128)),
        ]
        print(f"{docs} documents of {paragraphs} paragraphs; plan | store after the re-embed")
        for n, (name, target_settings) in enumerate(targets):
            async with PgVectorStore(store_config(first), create=False) as store:
                migrations = Migrations(store, "none")
                target = target_generation(target_settings, store.active,
                                           target_settings.model, None)  # fmt: skip
                started, plan = await migrations.start(target, call_limits(first))
            settings = dataclasses.replace(target_settings, group_id=f"{prefix}t{n}")

            async def caught_up(generation_id: str = started.id) -> bool:
                found = [s for s in await _statuses(first) if s.generation.id == generation_id]
                return bool(found) and found[0].documents == docs and found[0].lacking == 0

            calls = await _run(settings, caught_up)
            [filled] = [s for s in await _statuses(first) if s.generation.id == started.id]
            estimated = await _estimated_tokens(first, started.id)
            print(f"{name} ({plan.basis}): documents {plan.documents} | {filled.documents}; "
                  f"chunks {plan.chunks} | {filled.chunks}; tokens (estimate) {plan.tokens} | "
                  f"{estimated}; tokens (provider) - | {filled.tokens}; calls >= {plan.calls} | "
                  f"{calls}")  # fmt: skip
            async with PgVectorStore(store_config(first), create=False) as store:
                await Migrations(store, "none").cancel()
        writer.stop()
        await writing
    finally:
        await simulator.stop()
        postgres.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--docs", type=int, default=1_000)
    parser.add_argument("--paragraphs", type=int, default=6)
    ns = parser.parse_args()
    asyncio.run(main(ns.bootstrap, ns.docs, ns.paragraphs))
