"""Changing the model end to end, on Apache Kafka with real processors and a real PostgreSQL
with pgvector: the RAG demo's documents embedded by the simulator's hash model into the store,
then a second processor (a consumer group of its own, reading the topic from its start)
re-embedding them with WordLlama, a real model, into a new generation beside the first; the
plan made before it against what the new generation then holds; a cutover; and a question
answered through the stable name, embedded by the active generation's model."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib.util
import os
import uuid
from collections.abc import AsyncIterator

import orjson
import pytest
from embedsim.model import SimulatorConfig
from embedsim.server import SimulatorServer
from embedstream.app.migrate import run_migration
from embedstream.app.store_writer import StoreWriter, build_store_writer, search_store
from embedstream.kafka.client.admin import topic_names
from embedstream.settings import Settings
from embedstream.stores.configured import store_config
from embedstream.stores.pgmigrate import GenerationStatus, Migrations
from embedstream.stores.pgvector import PgVectorStore
from embedstream.testing import eventually
from embedstream.testing.postgres import PostgresServer
from embedstream.tools.demo.rag import RAG_MODEL, corpus
from embedstream.tools.embedded import free_port

from tests.integration.helpers import create_all_topics, publish, running_service, settings_for

pytestmark = pytest.mark.integration


@pytest.fixture
async def wordllama() -> AsyncIterator[SimulatorServer]:
    if importlib.util.find_spec("wordllama") is None:
        if os.environ.get("EMBEDSTREAM_REQUIRE_TOOLS") == "1":
            pytest.fail("wordllama is not installed")
        pytest.skip("wordllama is not installed (the local-model extra)")
    async with SimulatorServer(SimulatorConfig(model_backend="wordllama", base_ms=0)) as server:
        yield server


@contextlib.asynccontextmanager
async def running_writer(settings: Settings) -> AsyncIterator[StoreWriter]:
    writer = build_store_writer(dataclasses.replace(settings, metrics_port=free_port()))
    task = asyncio.create_task(writer.run())
    try:
        await asyncio.wait_for(writer.feed.joined.wait(), 60)
        yield writer
    finally:
        writer.stop()
        await asyncio.wait_for(task, 60)


async def statuses(settings: Settings) -> list[GenerationStatus]:
    async with PgVectorStore(store_config(settings), create=False) as store:
        return await Migrations(store, settings.store_index).status()


async def test_a_store_moves_from_one_model_to_another(
    bootstrap: str,
    unique_prefix: str,
    simulator: SimulatorServer,
    wordllama: SimulatorServer,
    postgres: PostgresServer,
) -> None:
    docs = corpus()
    first = settings_for(
        bootstrap, unique_prefix, simulator.url, store_dsn=postgres.dsn,
        store_table=f"mc_{uuid.uuid4().hex[:10]}", store_group_id=unique_prefix + "sink",
        store_model="text-embedding-3-small", include_chunk_text=True, chunk_max_tokens=128,
        chunk_min_tokens=32, chunk_overlap_tokens=0,
    )  # fmt: skip
    # The processors of the new model: a group of their own, the model served by WordLlama.
    second = dataclasses.replace(
        first, group_id=unique_prefix + "wordllama", model=RAG_MODEL, base_url=wordllama.url
    )
    await create_all_topics(first)
    topic = topic_names(unique_prefix).requests_low
    events = [(d.doc_id.encode(), orjson.dumps({"doc_id": d.doc_id, "text": d.text})) for d in docs]

    async def generations() -> list[GenerationStatus]:
        return await statuses(first)

    async with running_service(first), running_writer(first):
        await publish(bootstrap, topic, events)

        async def stored() -> bool:
            found = await generations()
            return len(found) == 1 and found[0].complete == len(docs)

        await eventually(stored, 60, 0.2)
        planned = await run_migration(first, "plan", model=RAG_MODEL)
        assert planned[1] == f"  documents  {len(docs)}"
        await run_migration(first, "start", model=RAG_MODEL)
        [active, new] = await generations()
        assert new.generation.state == "new" and new.generation.size is None  # no vector yet
        plan = new.generation.plan
        assert plan is not None and plan["documents"] == len(docs)

        async with running_service(second):

            async def caught_up() -> bool:
                [_, filling] = await generations()
                return filling.documents == len(docs) and filling.lacking == 0

            await eventually(caught_up, 120, 0.2)
            [active, new] = await generations()
            # Two generations side by side: the same documents, in tables of their own.
            assert (active.documents, active.chunks) == (new.documents, new.chunks)
            assert new.generation.size == 256 and new.generation.model == RAG_MODEL
            # The plan counted the chunks exactly (same chunking), and the tokens no lower than
            # the provider reported them.
            assert plan["chunks"] == new.chunks
            assert 0 < new.tokens <= plan["tokens"]
            said = await run_migration(first, "cutover")
            assert said[0].startswith(f"cut over: public.{first.store_table} reads generation")

        [old, now] = await generations()
        assert (old.generation.state, now.generation.state) == ("old", "active")
        # The question is embedded with the active generation's model: WordLlama's vectors
        # against WordLlama's vectors.
        hits = await search_store(
            second, "How do honeybees tell each other where the flowers are?", 3
        )
        assert hits[0].doc_id == "honeybees.md"
