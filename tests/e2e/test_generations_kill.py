"""A cutover under fire, as processes: the store writer (`embedstream sink`) writes two index
generations from the results topic while `embedstream migrate cutover` runs; a reader holding
the stable name keeps the cutover mid-way (it holds the store alone and has swapped the states,
uncommitted) long enough to SIGKILL, first the cutover itself, then the store writer, which
waits for the cutover's lock with a batch in hand. Each time exactly one generation is active
(the old one after the killed cutover, the new one after the cutover the writer's death did
not stop), and once the writer is started again both generations' tables equal the state the
published records imply, row for row, vector for vector."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from embedstream.core import configured
from embedstream.core.generations import IndexGeneration
from embedstream.core.intake import chunking_rules
from embedstream.kafka.client.admin import topic_names
from embedstream.kafka.client.clients import producer_for
from embedstream.testing.postgres import PostgresServer
from embedstream.testing.stores import MemoryStore
from embedstream.wire import (
    ChunkResult,
    DocumentComplete,
    DocumentDeleted,
    DocumentIncomplete,
    OutputRecord,
    PlainResult,
)

from tests.integration.helpers import create_all_topics, settings_for

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

ROOT = Path(__file__).parents[2]
DIMS = 8


def workload(generation: IndexGeneration, seed: int, docs: range) -> list[OutputRecord]:
    """What a processor of ``generation`` writes: versions that grow and shrink, incomplete
    versions, tombstones and plain results; the same shape for any generation (the same
    ``seed``), its own vectors."""
    shape, values = random.Random(seed), random.Random(f"{generation.id}-{seed}")
    gen, model = generation.id, generation.model

    def vector() -> list[float]:
        return [values.randint(-64, 64) / 8 for _ in range(DIMS)]  # exact in float4

    records: list[OutputRecord] = []
    for d in docs:
        doc = f"doc-{d}"
        for v in range(shape.randint(1, 3)):
            version, count = f"{seed}.{v}", shape.randint(1, 5)
            for seq in range(count):
                records.append(ChunkResult(doc, version, seq, count, (seq, seq + 1), vector(),
                                           model, DIMS, 1, False, None, 1, 1.0, f"{doc} {seq}",
                                           gen))  # fmt: skip
            if shape.random() < 0.1:
                records.append(DocumentIncomplete(doc, version, count, (count - 1,), None, gen))
            else:
                records.append(DocumentComplete(doc, version, count, None, gen))
        if shape.random() < 0.1:
            records.append(DocumentDeleted(doc, gen))
    for r in range(len(docs)):
        records.append(PlainResult(f"req-{seed}-{r}", model, vector(), DIMS, 1, None, 1, 1.0,
                                   False, gen))  # fmt: skip
    return records


async def publish(bootstrap: str, topic: str, records: list[OutputRecord]) -> None:
    producer = producer_for(bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        sent = []
        for r in records:
            key = r.id.encode() if isinstance(r, PlainResult) else r.key
            headers = r.headers() if isinstance(r, DocumentDeleted) else []
            sent.append(await producer.send(topic, r.encode(), key=key, headers=headers))
        await asyncio.gather(*sent)
    finally:
        await producer.stop()


async def expected(generation: IndexGeneration, records: list[OutputRecord]) -> Any:
    store = MemoryStore(model=generation.model, dimensions=DIMS)
    assert await store.apply(records) == []
    chunks = sorted((c.doc_id, c.version, c.chunk_seq, as_text(c.embedding))
                    for c in store.chunks.values())  # fmt: skip
    return chunks, sorted((r.id, as_text(r.embedding)) for r in store.requests.values())


def as_text(values: Any) -> str:
    return "[" + ",".join(f"{v:g}" for v in values) + "]"


async def query(dsn: str, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        return [tuple(r) for r in await (await conn.execute(statement, params)).fetchall()]


async def tables(dsn: str, table: str, generation: IndexGeneration) -> Any:
    base = f"{table}_{generation.id}"
    if (await query(dsn, "SELECT to_regclass(%s)", (base,)))[0][0] is None:
        return [], []
    chunks = await query(dsn, f"SELECT doc_id, version, chunk_seq, embedding::text FROM {base} "
                              "ORDER BY 1, 2, 3")  # fmt: skip
    requests = await query(dsn, f"SELECT id, embedding::text FROM {base}_reqs ORDER BY 1")
    return chunks, requests


async def states(dsn: str, table: str) -> dict[str, str]:
    return dict(await query(dsn, f"SELECT id, state FROM {table}_generations"))


async def until(check: Callable[[], Awaitable[bool]], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, f"waited {timeout_s:g}s for {what}"
        await asyncio.sleep(0.05)


async def waiting_for(dsn: str, locktype: str) -> bool:
    """Whether some backend waits for a lock of this type (relation: the view; advisory)."""
    rows = await query(dsn, "SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype = %s",
                       (locktype,))  # fmt: skip
    return bool(rows[0][0])


async def test_a_cutover_killed_or_outliving_a_killed_writer_leaves_one_active_generation(
    bootstrap: str, unique_prefix: str, postgres: PostgresServer
) -> None:
    settings = settings_for(bootstrap, unique_prefix, "http://127.0.0.1:9/v1")
    await create_all_topics(settings)
    results = topic_names(unique_prefix).results
    rules = chunking_rules(settings, configured.provider_limits(settings))
    old, new = IndexGeneration("m", None, rules), IndexGeneration("m2", DIMS, rules)
    dsn, table = postgres.dsn, f"c_{uuid.uuid4().hex[:10]}"
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'stream'}:{ROOT}"}
    store = ["--store-dsn", dsn, "--store-table", table]
    sink = [sys.executable, "-m", "embedstream.cli", "sink", *store, "--store-model", "m",
            "--bootstrap-servers", bootstrap, "--topic-prefix", unique_prefix,
            "--store-group-id", unique_prefix + "sink", "--store-batch-max", "200",
            "--metrics-port", "0"]  # fmt: skip
    migrate = [sys.executable, "-m", "embedstream.cli", "migrate", *store]

    async def run(*args: str) -> int:
        done = await asyncio.create_subprocess_exec(*migrate, *args, env=env)
        return await asyncio.wait_for(done.wait(), 60)

    tail: dict[str, list[OutputRecord]] = {}
    published = {old.id: workload(old, 1, range(200)), new.id: []}
    writer = await asyncio.create_subprocess_exec(*sink, env=env)
    try:
        await publish(bootstrap, results, published[old.id])
        want_old = await expected(old, published[old.id])
        await until(lambda: _equal(tables(dsn, table, old), want_old), 90, "the old generation")
        assert await run("start", "--model", "m2", "--dimensions", str(DIMS)) == 0
        published[new.id] = workload(new, 1, range(200))  # the same documents, re-embedded
        await publish(bootstrap, results, published[new.id])
        want_new = await expected(new, published[new.id])
        await until(lambda: _equal(tables(dsn, table, new), want_new), 90, "the new generation")

        # 1. The cutover itself killed mid-way: its transaction is undone, nothing changed.
        async with await psycopg.AsyncConnection.connect(dsn) as reader:
            await reader.execute(f"SELECT count(*) FROM {table}")  # holds the stable name
            cutover = await asyncio.create_subprocess_exec(*migrate, "cutover", env=env)
            await until(lambda: waiting_for(dsn, "relation"), 30, "the cutover's view lock")
            cutover.send_signal(signal.SIGKILL)
            assert await asyncio.wait_for(cutover.wait(), 30) == -signal.SIGKILL
        await until(lambda: _not(waiting_for(dsn, "relation")), 30, "the killed cutover's end")
        assert await states(dsn, table) == {old.id: "active", new.id: "new"}

        # 2. The store writer killed while it waits for the cutover with a batch in hand.
        tail.update({g.id: workload(g, 2, range(0, 200, 7)) for g in (old, new)})
        async with await psycopg.AsyncConnection.connect(dsn) as reader:
            await reader.execute(f"SELECT count(*) FROM {table}")
            cutover = await asyncio.create_subprocess_exec(*migrate, "cutover", env=env)
            await until(lambda: waiting_for(dsn, "relation"), 30, "the cutover's view lock")
            await publish(bootstrap, results, [*tail[old.id], *tail[new.id]])
            await until(lambda: waiting_for(dsn, "advisory"), 30, "the writer's batch")
            writer.send_signal(signal.SIGKILL)
            await writer.wait()
            await reader.rollback()  # the reader lets go: the cutover goes on
            assert await asyncio.wait_for(cutover.wait(), 60) == 0
        assert await states(dsn, table) == {old.id: "old", new.id: "active"}
    finally:
        if writer.returncode is None:
            writer.send_signal(signal.SIGKILL)
            await writer.wait()

    restarted = await asyncio.create_subprocess_exec(*sink, env=env)
    try:
        for g in (old, new):
            want = await expected(g, [*published[g.id], *tail[g.id]])
            await until(_same_as(dsn, table, g, want), 90, f"generation {g.id} after the restart")
        got = await query(dsn, f"SELECT DISTINCT model FROM {table}")  # the stable name
        assert got == [("m2",)]
    finally:
        restarted.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(restarted.wait(), 60) == 0


def _same_as(
    dsn: str, table: str, generation: IndexGeneration, want: Any
) -> Callable[[], Awaitable[bool]]:
    return lambda: _equal(tables(dsn, table, generation), want)


async def _equal(found: Awaitable[Any], want: Any) -> bool:
    return tuple(await found) == tuple(want)


async def _not(check: Awaitable[bool]) -> bool:
    return not await check
