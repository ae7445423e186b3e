"""The store writer as a process (`embedstream sink`), SIGKILLed while it writes a few
thousand results and started again: the final table equals the state the published records
imply, row for row, vector for vector (offsets are committed only after the store's
transaction, and replays land on the same rows)."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from embedstream.kafka.client.admin import topic_names
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

from tests.integration.helpers import create_all_topics, publish, settings_for

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

ROOT = Path(__file__).parents[2]
DIMS = 8


def vector(rng: random.Random) -> list[float]:
    return [rng.randint(-64, 64) / 8 for _ in range(DIMS)]  # exact in float4


def workload(seed: int = 5) -> list[OutputRecord]:
    """Documents with versions that grow and shrink, incomplete versions, tombstones, and
    plain results: about 3,000 records."""
    rng = random.Random(seed)
    records: list[OutputRecord] = []
    for d in range(250):
        doc = f"doc-{d}"
        for v in range(rng.randint(1, 3)):
            count = rng.randint(1, 6)
            for seq in range(count):
                records.append(
                    ChunkResult(
                        doc,
                        str(v),
                        seq,
                        count,
                        (seq, seq + 1),
                        vector(rng),
                        "m",
                        DIMS,
                        1,
                        False,
                        {"v": v},
                        1,
                        1.0,
                        text=f"{doc} {v} {seq}",
                    )
                )
            if rng.random() < 0.1:
                records.append(DocumentIncomplete(doc, str(v), count, (count - 1,), None))
            else:
                records.append(DocumentComplete(doc, str(v), count, None))
        if rng.random() < 0.15:
            records.append(DocumentDeleted(doc))
    for r in range(600):
        records.append(PlainResult(f"req-{r % 450}", "m", vector(rng), DIMS, 1, None, 1, 1.0))
    return records


def sink_command(settings: Any, dsn: str, table: str) -> list[str]:
    return [
        sys.executable, "-m", "embedstream.cli", "sink",
        "--bootstrap-servers", settings.bootstrap_servers,
        "--topic-prefix", settings.topic_prefix,
        "--store-dsn", dsn, "--store-table", table, "--store-model", "m",
        "--store-group-id", settings.topic_prefix + "sink", "--store-batch-max", "50",
        "--metrics-port", "0",  # the default port is another test's too
    ]  # fmt: skip


async def table_rows(dsn: str, table: str) -> tuple[list[Any], list[Any]]:
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        found = await (await conn.execute("SELECT to_regclass(%s)", (table,))).fetchone()
        if found is None or found[0] is None:
            return [], []
        chunks = await (
            await conn.execute(
                f"SELECT doc_id, version, chunk_seq, embedding::text FROM {table} ORDER BY 1, 2, 3"
            )
        ).fetchall()
        requests = await (
            await conn.execute(f"SELECT id, embedding::text FROM {table}_requests ORDER BY 1")
        ).fetchall()
        return [tuple(r) for r in chunks], [tuple(r) for r in requests]


def encoded(record: OutputRecord) -> tuple[bytes, Any]:
    if isinstance(record, PlainResult):
        return record.id.encode(), record.encode()
    return record.key, record.encode()


def as_text(values: list[float] | str) -> str:
    assert isinstance(values, list)  # built in-process as floats
    return "[" + ",".join(f"{v:g}" for v in values) + "]"


async def test_a_killed_store_writer_restarts_into_exactly_the_published_state(
    bootstrap: str, unique_prefix: str, postgres: PostgresServer
) -> None:
    settings = settings_for(bootstrap, unique_prefix, "http://127.0.0.1:9/v1")
    await create_all_topics(settings)
    records = workload()
    results = topic_names(unique_prefix).results
    await publish(bootstrap, results, [encoded(r) for r in records])
    expected = MemoryStore(model="m", dimensions=DIMS)
    await expected.apply(records)
    want_chunks = sorted(
        (c.doc_id, c.version, c.chunk_seq, as_text(c.embedding)) for c in expected.chunks.values()
    )
    want_requests = sorted((r.id, as_text(r.embedding)) for r in expected.requests.values())
    table = f"k_{uuid.uuid4().hex[:10]}"
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'stream'}:{ROOT}"}
    command = sink_command(settings, postgres.dsn, table)

    first = await asyncio.create_subprocess_exec(*command, env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # kill it mid-load: some rows, not all
        chunks, requests = await table_rows(postgres.dsn, table)
        if chunks:
            break
        await asyncio.sleep(0.02)
    first.send_signal(signal.SIGKILL)
    await first.wait()
    killed_at = len(chunks) + len(requests)
    assert 0 < killed_at < len(want_chunks) + len(want_requests)

    second = await asyncio.create_subprocess_exec(*command, env=env)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            chunks, requests = await table_rows(postgres.dsn, table)
            if (chunks, requests) == (want_chunks, want_requests):
                break
            await asyncio.sleep(0.5)
        assert chunks == want_chunks
        assert requests == want_requests
    finally:
        second.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(second.wait(), 60)
    assert code == 0
