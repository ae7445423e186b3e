"""The chunk changelog through real Kafka Connect: documents with edits that grow and shrink
them, deletes and an incomplete version go through a processor (exactly-once) to the
changelog, then through a standalone Connect worker running the stock Debezium JDBC sink into
PostgreSQL with pgvector. The table equals, row for row and vector for vector, the state the
results topic implies, though Connect is SIGKILLed mid-way and started again; a second,
empty table filled from the changelog alone (no provider call) equals the first.

The worker and connector configuration here is the one docs/guides/kafka-connect.md gives.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest
from embedsim import SimulatorConfig, SimulatorServer
from embedstream.kafka.client.admin import list_topics, topic_names
from embedstream.testing.connect import (
    CHUNK_TABLE,
    ConnectWorker,
    fetch_connect,
    jdbc_sink,
    worker_properties,
)
from embedstream.testing.postgres import PostgresServer, PostgresUnavailable, start_postgres
from embedstream.tools.produce_documents import Message, each, produce_messages, tombstone
from embedstream.wire import ChunkResult, DocumentComplete, DocumentDeleted, decode_output
from embedstream.wire.changelog import chunk_id

from tests.integration.helpers import create_all_topics, read_topic, running_service, settings_for

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

DIMS = 8
SMALL: dict[str, Any] = {"chunk_max_tokens": 40, "chunk_overlap_tokens": 0, "chunk_min_tokens": 0}

# chunk_id, doc_id, version, chunk_seq, span, model, dimensions, generation, metadata, text;
# then the vector (compared approximately: the table holds float4).
Row = tuple[str, str, str, int, int, int, str, int, str, Any, str | None, tuple[float, ...]]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    try:
        server = start_postgres(tcp_port=free_port())  # the JDBC driver speaks TCP only
    except PostgresUnavailable as exc:
        pytest.skip(str(exc))
    with server:
        yield server


@pytest.fixture(scope="module")
def connect_jars() -> None:
    missing = [tool for tool in ("java", "mvn") if shutil.which(tool) is None]
    if missing:
        if os.environ.get("EMBEDSTREAM_REQUIRE_TOOLS") == "1":
            pytest.fail(f"EMBEDSTREAM_REQUIRE_TOOLS=1 but {', '.join(missing)} is missing")
        pytest.skip(f"Kafka Connect needs {', '.join(missing)}")
    fetch_connect()


def paragraphs(*words: str) -> str:
    return "\n\n".join(f"{w:_<7} " * 10 for w in words)


def document(doc_id: str, text: str, **fields: Any) -> Message:
    value = {"doc_id": doc_id, "text": text, "dimensions": DIMS, **fields}
    return Message(doc_id.encode(), orjson.dumps(value))


WORDS = [f"w{i}" for i in range(12)]


def phase_a() -> list[Message]:
    return [document(f"d{i}", paragraphs(*WORDS[: 1 + i % 4]), version=1,
                     metadata={"n": i}) for i in range(12)]  # fmt: skip


def phase_b() -> list[Message]:
    """Edits while Connect runs (it is killed after the first of them reaches the table)."""
    return [
        document("d1", paragraphs(*WORDS[:4]), version=2),  # grows 2 -> 4
        document("d3", paragraphs(*WORDS[:1]), version=2),  # shrinks 4 -> 1
        tombstone("d2"),
        document("d5", paragraphs("w0", "POISON", "w2"), version=2),  # incomplete: d5 v1 stays
        document("d7", "", version=2),  # emptied: 0 chunks
        *[document(f"e{i}", paragraphs(*WORDS[: 1 + i % 3]), version=1) for i in range(20)],
    ]


def phase_c() -> list[Message]:
    """While Connect is down."""
    return [
        document("d3", paragraphs(*WORDS[:3]), version=3),  # grows again 1 -> 3
        document("d8", paragraphs(*WORDS[:1]), version=2),  # shrinks 1 -> 1, new vectors
        tombstone("e4"),
        tombstone("d2"),  # deleted twice: nothing left to delete
        document("d2", paragraphs(*WORDS[:2]), version=4),  # back after its delete
    ]


def finals(records: list[Any]) -> int:
    """Final records and tombstones: one per document event the processor has finished."""
    return sum(1 for r in records if r.value is None or b'"type":"c' in r.value
               or b'"type":"incomplete"' in r.value)  # fmt: skip


def expected_rows(records: list[Any], generation: str) -> dict[str, Row]:
    """What the results topic implies: per document, the chunks of its last complete version,
    unless deleted since; keyed by chunk id."""
    chunks: dict[tuple[str, str], dict[int, ChunkResult]] = {}
    current: dict[str, list[ChunkResult]] = {}
    for record in records:
        output = decode_output(record.key, record.value)
        if isinstance(output, ChunkResult):
            chunks.setdefault((output.doc_id, output.version), {})[output.chunk_seq] = output
        elif isinstance(output, DocumentComplete):
            version = chunks.get((output.doc_id, output.version), {})
            current[output.doc_id] = [version[s] for s in range(output.chunk_count)]
        elif isinstance(output, DocumentDeleted):
            current.pop(output.doc_id, None)
    rows = {}
    for doc in current.values():
        for c in doc:
            key = chunk_id(generation, c.doc_id, c.chunk_seq)
            rows[key] = (key, c.doc_id, c.version, c.chunk_seq, c.span[0], c.span[1], c.model,
                         c.dimensions, generation, c.metadata, c.text,
                         tuple(float(x) for x in c.embedding))  # fmt: skip
    return rows


def table_rows(dsn: str, table: str) -> dict[str, Row]:
    with psycopg.connect(dsn) as conn:
        found = conn.execute(
            f"SELECT chunk_id::text, doc_id, version, chunk_seq, span_start, span_end, model, "
            f"dimensions, index_generation, metadata, text, embedding::text FROM {table}"
        ).fetchall()
    return {
        row[0]: (*row[:11], tuple(float(x) for x in row[11].strip("[]").split(",")))
        for row in found
    }


def same(table: dict[str, Row], expected: dict[str, Row]) -> bool:
    if table.keys() != expected.keys():
        return False
    for key, row in expected.items():
        got = table[key]
        if got[:11] != row[:11] or got[11] != pytest.approx(row[11], rel=1e-6, abs=1e-7):
            return False
    return True


async def until(check: Any, what: str, worker: ConnectWorker, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} not reached in {timeout_s:.0f}s; Connect's log:\n"
                        f"{worker.log_tail()}")  # fmt: skip
        await asyncio.sleep(0.25)


async def test_the_changelog_through_kafka_connect_into_pgvector(
    bootstrap: str, unique_prefix: str, postgres: PostgresServer, connect_jars: None,
    tmp_path: Path,
) -> None:  # fmt: skip
    changelog = unique_prefix + "changelog"
    dlq = unique_prefix + "connect.dlq"
    with psycopg.connect(postgres.dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        for table in ("chunks", "chunks_rebuilt"):
            conn.execute(f"DROP TABLE IF EXISTS {table}")
            conn.execute(CHUNK_TABLE.format(name=table, dimensions=DIMS))
    assert postgres.tcp_port is not None
    rest_port = free_port()
    worker_file = worker_properties(tmp_path / "worker.properties", bootstrap, rest_port)
    sink = jdbc_sink(unique_prefix + "jdbc", changelog, postgres.tcp_port, "chunks", dlq)
    connector_file = tmp_path / "jdbc.json"
    connector_file.write_text(orjson.dumps(sink).decode())
    worker = ConnectWorker(worker_file, connector_file, tmp_path / "connect.log", rest_port)
    config = SimulatorConfig(base_ms=2, reject_texts_containing="POISON")
    results = topic_names(unique_prefix).results
    try:
        async with SimulatorServer(config) as simulator:
            settings = settings_for(bootstrap, unique_prefix, simulator.url,
                                    delivery="exactly_once", topic_changelog=changelog,
                                    include_chunk_text=True, **SMALL)  # fmt: skip
            await create_all_topics(settings)
            worker.start()
            async with running_service(settings):
                sent = await produce_messages(settings, each(phase_a()), priority="low")
                await until_finished(bootstrap, results, sent)
                first = await read_topic(bootstrap, changelog, idle_s=0.3)
                generation = orjson.loads(first[0].value)["payload"]["index_generation"]

                async def implied() -> dict[str, Row]:
                    return expected_rows(await read_topic(bootstrap, results), generation)

                expected = await implied()
                await until(lambda: same(table_rows(postgres.dsn, "chunks"), expected),
                            "phase A in the table", worker)  # fmt: skip

                before = table_rows(postgres.dsn, "chunks")
                sent += await produce_messages(settings, each(phase_b()), priority="low")
                await until(lambda: table_rows(postgres.dsn, "chunks") != before,
                            "a phase B change in the table", worker)  # fmt: skip
                worker.kill()  # mid-way: offsets of what it wrote may be uncommitted
                sent += await produce_messages(settings, each(phase_c()), priority="low")
                await until_finished(bootstrap, results, sent)
                expected = await implied()
                worker.start()
                # A new JVM, and the killed member's session to end (10 s): longer under load.
                await until(lambda: same(table_rows(postgres.dsn, "chunks"), expected),
                            "the final state in the table after the restart", worker,
                            timeout_s=120)  # fmt: skip
            calls_before = simulator.stats.calls
            # A second, empty table from the changelog alone: no processor runs now.
            rebuild = jdbc_sink(unique_prefix + "rebuild", changelog, postgres.tcp_port,
                                "chunks_rebuilt", dlq)  # fmt: skip
            started = time.monotonic()
            worker.put_connector(rebuild)
            await until(lambda: same(table_rows(postgres.dsn, "chunks_rebuilt"), expected),
                        "the rebuilt table", worker)  # fmt: skip
            took = time.monotonic() - started
            assert simulator.stats.calls == calls_before  # provider calls: 0
            assert same(table_rows(postgres.dsn, "chunks_rebuilt"),
                        table_rows(postgres.dsn, "chunks"))  # fmt: skip
            print(f"rebuilt {len(expected)} rows in {took:.1f}s (with the connector's start)")
        # The workload's kinds are all there; nothing went to Connect's dead-letter topic.
        versions = {(row[1], row[2]) for row in expected.values()}
        assert {("d1", "2"), ("d3", "3"), ("d5", "1"), ("d2", "4")} <= versions
        assert not {doc for doc, _ in versions} & {"e4", "d7"}
        if dlq in await list_topics(bootstrap, dlq):
            assert await read_topic(bootstrap, dlq, idle_s=0.3) == []
    finally:
        worker.stop()


async def until_finished(bootstrap: str, results: str, events: int) -> None:
    """Until the processor has written the final record (or tombstone) of every document
    event sent: the results topic then implies their state."""
    deadline = time.monotonic() + 60
    while (done := finals(await read_topic(bootstrap, results, idle_s=0.2))) < events:
        assert time.monotonic() < deadline, f"{done} of {events} documents finished"
        await asyncio.sleep(0.2)
