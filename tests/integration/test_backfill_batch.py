"""A migration's backfill through batch jobs (`migrate start --via batch`), on Apache Kafka, the
simulator's Batch API and a real PostgreSQL with pgvector: the running processor re-embeds the
documents topic for the new generation in jobs (every version and delete of a partition in
order), the store writer fills the new generation's tables row for row and vector for vector,
and every token of the new model is billed at the batch price."""

from __future__ import annotations

import dataclasses
import random
import time
import uuid
from typing import cast

import orjson
import pytest
from embedsim.config import SimulatorConfig
from embedsim.server import SimulatorServer
from embedstream.app import store_watch
from embedstream.app.migrate import run_migration
from embedstream.testing import eventually
from embedstream.testing.postgres import PostgresServer

from tests.integration.helpers import create_all_topics, publish, running_service, settings_for
from tests.integration.test_backfill import (
    NEW_DIMENSIONS,
    NEW_MODEL,
    OLD_MODEL,
    expected_rows,
    sample,
    statuses,
    stored_rows,
    text_of,
    until_following,
)
from tests.integration.test_model_change import running_writer

pytestmark = pytest.mark.integration


async def test_a_backfill_via_batch_fills_the_new_generation_at_the_batch_price(
    bootstrap: str,
    unique_prefix: str,
    postgres: PostgresServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(store_watch, "WATCH_INTERVAL_S", 0.5)
    async with SimulatorServer(SimulatorConfig(base_ms=1, batch_completion_s=0.5)) as simulator:
        settings = settings_for(
            bootstrap, unique_prefix, simulator.url, store_dsn=postgres.dsn,
            store_table=f"bb_{uuid.uuid4().hex[:10]}", store_group_id=unique_prefix + "sink",
            store_model=OLD_MODEL, dimensions=16, topic_documents=unique_prefix + "documents",
            chunk_max_tokens=96, chunk_min_tokens=16, chunk_overlap_tokens=0,
            batch_form_s=0.5, batch_poll_s=0.2, batch_max_inputs=200,
        )  # fmt: skip
        new = dataclasses.replace(settings, chunk_max_tokens=48)
        await create_all_topics(settings)
        rng = random.Random(41)
        corpus = {f"doc-{d:03}": text_of(rng, d) for d in range(60)}
        topic = unique_prefix + "documents"
        events = [(d.encode(), orjson.dumps({"doc_id": d, "text": t})) for d, t in corpus.items()]
        async with running_service(settings) as service, running_writer(settings):
            await publish(bootstrap, topic, events)

            async def stored() -> bool:
                found = await statuses(settings)
                return len(found) == 1 and found[0].complete == len(corpus)

            await eventually(stored, 60, 0.2)
            simulator.batches.advance()
            sync_before = simulator.stats.tokens
            said = await run_migration(new, "start", model=NEW_MODEL, dimensions=NEW_DIMENSIONS,
                                       via="batch")  # fmt: skip
            assert "its backfill embeds through batch jobs" in said[0]
            new_id = said[0].split()[2]
            await until_following(service, new_id)

            async def filled() -> bool:
                [_, filling] = await statuses(settings)
                return filling.complete == len(corpus) and filling.lacking == 0

            await eventually(filled, 120, 0.3)
            batch_tokens = sample(service.metrics, "embedstream_provider_tokens_total",
                                  {"tier": "batch", "model": NEW_MODEL})  # fmt: skip
            status = await run_migration(settings, "status")
        rows, wanted = stored_rows(settings, new_id), expected_rows(new, corpus)
        assert [row[:6] for row in rows] == [row[:6] for row in wanted]
        for got, want in zip(rows, wanted, strict=True):
            assert got[6] == pytest.approx(want[6], rel=1e-6), got[:3]
        simulator.batches.advance()
        stats = simulator.stats
        assert stats.tokens == sync_before, "the new model was never called sync"
        assert stats.batch_tokens > 0 and batch_tokens == stats.batch_tokens
        assert any("(backfill through batch jobs)" in line for line in status)


async def test_a_cancelled_migrations_jobs_are_cancelled_at_the_provider(
    bootstrap: str,
    unique_prefix: str,
    postgres: PostgresServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(store_watch, "WATCH_INTERVAL_S", 0.5)
    config = SimulatorConfig(base_ms=1, batch_completion_s=600.0)  # not done before the cancel
    async with SimulatorServer(config) as simulator:
        settings = settings_for(
            bootstrap, unique_prefix, simulator.url, store_dsn=postgres.dsn,
            store_table=f"bc_{uuid.uuid4().hex[:10]}", store_group_id=unique_prefix + "sink",
            store_model=OLD_MODEL, dimensions=16, topic_documents=unique_prefix + "documents",
            batch_form_s=0.5, batch_poll_s=0.2,
        )  # fmt: skip
        await create_all_topics(settings)
        rng = random.Random(43)
        corpus = {f"doc-{d:03}": text_of(rng, d) for d in range(20)}
        events = [(d.encode(), orjson.dumps({"doc_id": d, "text": t})) for d, t in corpus.items()]
        async with running_service(settings) as service, running_writer(settings):
            await publish(bootstrap, unique_prefix + "documents", events)

            async def stored() -> bool:
                found = await statuses(settings)
                return len(found) == 1 and found[0].complete == len(corpus)

            await eventually(stored, 60, 0.2)
            await run_migration(settings, "start", model=NEW_MODEL, dimensions=NEW_DIMENSIONS,
                                via="batch")  # fmt: skip

            def submitted() -> list[str]:
                listed = simulator.batches.book.listed(None, 100, simulator.config, time.time())
                return [str(b["status"]) for b in cast(list[dict[str, object]], listed["data"])]

            await eventually(lambda: bool(submitted()), 60, 0.2)
            await run_migration(settings, "cancel")
            await eventually(lambda: set(submitted()) <= {"cancelling", "cancelled"}, 30, 0.2)
            abandoned = sample(service.metrics, "embedstream_batch_jobs_ended_total",
                               {"status": "abandoned"})  # fmt: skip
        assert abandoned >= len(submitted()) > 0
