"""`migrate status` against the backfill's source, on Apache Kafka and a real PostgreSQL with
pgvector: a store whose active generation holds documents the new generation lacks, and a
documents topic holding only some of them (one deleted by a tombstone): status names the
lacking documents the topic lacks, says when there is no source, and still shows the store
when no broker answers."""

from __future__ import annotations

import dataclasses
import uuid

import orjson
import pytest
from embedstream.app.migrate import run_migration, target_generation
from embedstream.settings import Settings
from embedstream.stores.configured import store_config
from embedstream.stores.pgvector import PgVectorStore
from embedstream.testing.postgres import PostgresServer
from embedstream.tools.embedded import free_port

from tests.integration.helpers import create_all_topics, publish, settings_for
from tests.integration.test_store_generations import records

pytestmark = pytest.mark.integration

DOCS = {f"doc-{n}": f"The text of document {n}. " * 4 for n in "abcde"}


async def migrating_store(settings: Settings) -> None:
    """Documents a..e in the active generation; a new generation holding doc-a only."""
    active = target_generation(settings, None, None, None)
    async with PgVectorStore(store_config(settings)) as store:
        assert await store.apply(records(active, DOCS)) == []
    await run_migration(settings, "start", model="model-b", dimensions=8)
    new = target_generation(settings, None, "model-b", 8)
    async with PgVectorStore(store_config(settings), create=False) as store:
        assert await store.apply(records(new, {"doc-a": DOCS["doc-a"]})) == []


def source_line(lines: list[str]) -> str:
    [line] = [line for line in lines if "backfill source" in line]
    return line.strip()


async def test_status_names_the_lacking_documents_the_documents_topic_lacks(
    bootstrap: str, unique_prefix: str, postgres: PostgresServer
) -> None:
    topic = unique_prefix + "documents"
    settings = settings_for(
        bootstrap, unique_prefix, "http://127.0.0.1:1", store_dsn=postgres.dsn,
        store_table=f"src_{uuid.uuid4().hex[:10]}", store_model="model-a", topic_documents=topic,
    )  # fmt: skip
    await create_all_topics(settings)
    await migrating_store(settings)

    def document(doc_id: str) -> tuple[bytes, bytes]:
        return doc_id.encode(), orjson.dumps({"doc_id": doc_id, "text": DOCS[doc_id]})

    # doc-c published then deleted, doc-e never published.
    await publish(bootstrap, topic, [document(d) for d in ("doc-a", "doc-b", "doc-c", "doc-d")])
    await publish(bootstrap, topic, [(b"doc-c", None)])
    lines = await run_migration(settings, "status")
    assert "lacking 4, extra 0" in lines[3]  # b, c, d and e
    assert source_line(lines) == (
        f"backfill source: the documents topic {topic} lacks 2 of the 4 lacking (doc-c, doc-e): "
        "never backfilled; publish them with `embedstream produce --documents`, or cut over "
        "with --allow-missing"
    )
    # Published again: the backfill reaches them.
    await publish(bootstrap, topic, [document("doc-c"), document("doc-e")])
    lines = await run_migration(settings, "status")
    assert source_line(lines) == (
        f"backfill source: the documents topic {topic} holds every lacking document"
    )

    # No documents topic: no source; no broker: the store's lines, and one line saying so.
    unset = dataclasses.replace(settings, topic_documents=None)
    assert source_line(await run_migration(unset, "status")).startswith(
        "backfill source: none (topic_documents is not set): its 4 lacking documents"
    )
    gone = dataclasses.replace(
        settings, bootstrap_servers=f"127.0.0.1:{free_port()}", connect_timeout_s=1.0
    )
    lines = await run_migration(gone, "status")
    assert "lacking 4, extra 0" in lines[3]
    assert source_line(lines).startswith(
        f"backfill source: could not read the documents topic {topic}: setting bootstrap_servers"
    )
