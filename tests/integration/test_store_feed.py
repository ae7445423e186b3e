"""The store writer on Apache Kafka and a real PostgreSQL with pgvector, beside a real
processor (simulated provider): documents published upstream end up as rows, an edit or a
delete upstream ends up exactly reflected (a document that grows, one that shrinks, a
tombstone), an incomplete version leaves the last complete one searchable, and a result of
another model is dead-lettered, never mixed in."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import psycopg
import pytest
from embedsim.server import SimulatorServer
from embedstream.app.store_writer import StoreWriter, build_store_writer
from embedstream.kafka.client.admin import topic_names
from embedstream.settings import Settings
from embedstream.testing import eventually
from embedstream.testing.postgres import PostgresServer
from embedstream.tools.embedded import free_port
from embedstream.wire import ChunkResult, DocumentComplete, DocumentIncomplete, headers_dict
from embedstream.wire.headers import ERROR_REASON

from tests.integration.helpers import (
    create_all_topics,
    publish,
    read_topic,
    running_service,
    settings_for,
)

pytestmark = pytest.mark.integration

SMALL = {"chunk_max_tokens": 40, "chunk_overlap_tokens": 0, "chunk_min_tokens": 0}


def paragraphs(*words: str) -> str:
    """One chunk per word at SMALL (about 25 estimated tokens each)."""
    return "\n\n".join(f"{w:_<5} " * 12 for w in words)


def document(doc_id: str, text: str | None, version: str | None = None) -> tuple[bytes, Any]:
    if text is None:
        return doc_id.encode(), None
    return doc_id.encode(), orjson.dumps({"doc_id": doc_id, "text": text, "version": version})


@contextlib.asynccontextmanager
async def running_writer(settings: Settings) -> AsyncIterator[StoreWriter]:
    # Its own ops port: the processor beside it has one too.
    writer = build_store_writer(dataclasses.replace(settings, metrics_port=free_port()))
    task = asyncio.create_task(writer.run())
    try:
        await asyncio.wait_for(writer.feed.joined.wait(), 60)
        yield writer
    finally:
        writer.stop()
        await asyncio.wait_for(task, 60)


async def rows(settings: Settings, searchable_only: bool = True) -> list[tuple[str, str, int]]:
    where = "WHERE searchable" if searchable_only else ""
    async with await psycopg.AsyncConnection.connect(settings.store_dsn or "") as conn:
        if not await exists(conn, settings.store_table):  # the first vector creates it
            return []
        cur = await conn.execute(
            f"SELECT doc_id, version, chunk_seq FROM {settings.store_table} {where} "
            "ORDER BY doc_id, version, chunk_seq"
        )
        return [tuple(r) for r in await cur.fetchall()]


async def exists(conn: psycopg.AsyncConnection[Any], table: str) -> bool:
    row = await (await conn.execute("SELECT to_regclass(%s)", (table,))).fetchone()
    return row is not None and row[0] is not None


async def marks(settings: Settings) -> dict[str, Any]:
    async with await psycopg.AsyncConnection.connect(settings.store_dsn or "") as conn:
        if not await exists(conn, settings.store_table + "_documents"):
            return {}
        cur = await conn.execute(
            f"SELECT doc_id, complete_version, incomplete_version, missing "
            f"FROM {settings.store_table}_documents"
        )
        return {r[0]: r[1:] for r in await cur.fetchall()}


@pytest.fixture
def settings(
    bootstrap: str, unique_prefix: str, simulator: SimulatorServer, postgres: PostgresServer
) -> Settings:
    return settings_for(
        bootstrap,
        unique_prefix,
        simulator.url,
        include_chunk_text=True,
        store_dsn=postgres.dsn,
        store_table=f"t_{uuid.uuid4().hex[:12]}",
        store_group_id=unique_prefix + "sink",
        store_model="text-embedding-3-small",  # the processor's: its generation is the first
        **SMALL,
    )


async def test_documents_upstream_become_rows_and_edits_and_deletes_are_reflected(
    settings: Settings,
) -> None:
    await create_all_topics(settings)
    topic = topic_names(settings.topic_prefix).requests_low
    async with running_service(settings), running_writer(settings) as writer:
        await publish(
            settings.bootstrap_servers,
            topic,
            [
                document("grow", paragraphs("a", "b"), "1"),
                document("shrink", paragraphs("a", "b", "c", "d"), "1"),
                document("gone", paragraphs("a", "b"), "1"),
            ],
        )

        async def first_round() -> bool:
            return len(await rows(settings)) == 8

        await eventually(first_round, 60, 0.2)
        await publish(
            settings.bootstrap_servers,
            topic,
            [
                document("grow", paragraphs("a", "b", "c", "d"), "2"),
                document("shrink", paragraphs("a"), "2"),
                document("gone", None),
            ],
        )
        expected = [("grow", "2", i) for i in range(4)] + [("shrink", "2", 0)]

        async def second_round() -> bool:
            return await rows(settings, searchable_only=False) == expected

        await eventually(second_round, 60, 0.2)
        assert "gone" not in await marks(settings)
        async with aiohttp.ClientSession() as session:
            base = f"http://127.0.0.1:{writer.metrics_port}"
            async with session.get(base + "/readyz") as response:
                assert response.status == 200
            async with session.get(base + "/metrics") as response:
                text = await response.text()
        assert 'embedstream_store_rows_upserted_total{kind="chunk"} 13.0' in text
        assert "embedstream_store_documents_deleted_total 1.0" in text


def chunk_record(doc: str, version: str, seq: int, count: int, model: str) -> tuple[bytes, bytes]:
    value = ChunkResult(
        doc, version, seq, count, (seq, seq + 1), [0.5, float(seq + 1), 1.0], model, 3, 1,
        False, None, 1, 1.0, text=f"chunk {seq}",
    ).encode()  # fmt: skip
    return doc.encode(), value


async def test_incomplete_keeps_the_complete_version_and_another_model_is_dead_lettered(
    settings: Settings,
) -> None:
    # The store's first generation is of model "m"; these records, written as an embedstream
    # before index generations wrote them (no index_generation), go to the active one.
    settings = dataclasses.replace(settings, store_model="m")
    await create_all_topics(settings)
    names = topic_names(settings.topic_prefix)
    async with running_writer(settings):
        await publish(
            settings.bootstrap_servers,
            names.results,
            [
                chunk_record("inc", "1", 0, 2, "m"),
                chunk_record("inc", "1", 1, 2, "m"),
                (b"inc", DocumentComplete("inc", "1", 2, None).encode()),
                chunk_record("inc", "2", 0, 2, "m"),
                (b"inc", DocumentIncomplete("inc", "2", 2, (1,), None).encode()),
                chunk_record("odd", "1", 0, 1, "another-model"),
                (b"junk", b"{not json"),
            ],
        )

        async def marked() -> bool:
            return (await marks(settings)).get("inc") == ("1", "2", [1])

        await eventually(marked, 60, 0.2)
        assert await rows(settings) == [("inc", "1", 0), ("inc", "1", 1)]
        assert ("inc", "2", 0) in await rows(settings, searchable_only=False)
        letters = await read_topic(settings.bootstrap_servers, names.dead_letters)
        reasons = sorted(headers_dict(r.headers)[ERROR_REASON] for r in letters)
        assert reasons == ["invalid_json", "model_mismatch"]
        assert "odd" not in {d for d, _, _ in await rows(settings, searchable_only=False)}
