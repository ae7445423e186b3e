"""The pgvector store against a real PostgreSQL with pgvector (pgserver's, started once per
module, about 1-6 s): upserts, replays, document versions, tombstones, marks, rejections,
search and a large batch in one transaction, read through the stable names (the views of the
active generation), as searchers read them."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any, Literal

import psycopg
import pytest
from embedstream.errors import Reason, StoreError
from embedstream.stores.pgvector import PgStoreConfig, PgVectorStore, masked_dsn
from embedstream.testing.postgres import PostgresServer
from embedstream.wire import (
    ChunkResult,
    DocumentComplete,
    DocumentDeleted,
    DocumentIncomplete,
    OutputRecord,
    PlainResult,
    encode_base64,
)

pytestmark = pytest.mark.integration

DIMS = 4


@pytest.fixture
async def store(postgres: PostgresServer) -> AsyncIterator[PgVectorStore]:
    config = PgStoreConfig(dsn=postgres.dsn, table=f"t_{uuid.uuid4().hex[:12]}", model="m")
    async with PgVectorStore(config) as opened:
        yield opened


def vec(seed: int, dims: int = DIMS) -> list[float]:
    return [float((seed * 7 + i * 3) % 11) + 1.0 for i in range(dims)]


def chunk(
    doc: str,
    version: str,
    seq: int,
    count: int,
    *,
    model: str = "m",
    dims: int = DIMS,
    text: str | None = None,
) -> ChunkResult:
    return ChunkResult(
        doc_id=doc,
        version=version,
        chunk_seq=seq,
        chunk_count=count,
        span=(seq * 10, seq * 10 + 9),
        embedding=vec(hash((doc, version, seq)) % 97, dims),
        model=model,
        dimensions=dims,
        tokens=5,
        cached=False,
        metadata={"v": version},
        attempts=1,
        latency_ms=1.0,
        text=text,
    )


def version(doc: str, name: str, count: int) -> list[OutputRecord]:
    return [
        *(chunk(doc, name, seq, count) for seq in range(count)),
        DocumentComplete(doc, name, count, {"final": name}),
    ]


def plain(rid: str, *, model: str = "m", dims: int = DIMS) -> PlainResult:
    return PlainResult(rid, model, vec(len(rid), dims), dims, 2, {"r": rid}, 1, 1.0)


async def rows(store: PgVectorStore, postgres: PostgresServer) -> dict[str, Any]:
    """The whole state of the store's tables, comparable across runs."""
    names = store.names
    async with await psycopg.AsyncConnection.connect(postgres.dsn) as conn:
        chunks = await (
            await conn.execute(
                f"SELECT doc_id, version, chunk_seq, chunk_count, span_start, span_end, text, "
                f"metadata, embedding::text, searchable FROM {names.chunks} ORDER BY 1, 2, 3"
            )
        ).fetchall()
        docs = await (
            await conn.execute(
                f"SELECT doc_id, complete_version, complete_count, latest_version, "
                f"incomplete_version,"
                f" incomplete_count, missing, metadata FROM {names.documents} ORDER BY 1"
            )
        ).fetchall()
        requests = await (
            await conn.execute(
                f"SELECT id, model, embedding::text, metadata FROM {names.requests} ORDER BY 1"
            )
        ).fetchall()
    return {"chunks": chunks, "documents": docs, "requests": requests}


def searchable(state: dict[str, Any]) -> set[tuple[str, str, int]]:
    return {(r[0], r[1], r[2]) for r in state["chunks"] if r[9]}


def present(state: dict[str, Any]) -> set[tuple[str, str, int]]:
    return {(r[0], r[1], r[2]) for r in state["chunks"]}


async def test_upsert_chunks_and_plain_results(
    store: PgVectorStore, postgres: PostgresServer
) -> None:
    assert await store.apply([*version("a", "v1", 2), plain("a"), plain("r2")]) == []
    assert await store.apply([plain("a")]) == []  # upsert by request id: still one row
    state = await rows(store, postgres)
    assert searchable(state) == {("a", "v1", 0), ("a", "v1", 1)}
    assert [r[0] for r in state["requests"]] == ["a", "r2"]
    assert state["chunks"][0][4:8] == (0, 9, None, {"v": "v1"})
    # A tombstone of document "a" leaves request "a" alone: separate name spaces.
    await store.apply([DocumentDeleted("a")])
    state = await rows(store, postgres)
    assert state["chunks"] == [] and [r[0] for r in state["requests"]] == ["a", "r2"]


async def test_chunk_text_stored_when_present(
    store: PgVectorStore, postgres: PostgresServer
) -> None:
    await store.apply([chunk("a", "v1", 0, 1, text="hello there")])
    assert (await rows(store, postgres))["chunks"][0][6] == "hello there"


SEQUENCE: list[OutputRecord] = [
    *version("a", "v1", 3),
    plain("r1"),
    *version("b", "v1", 2),
    *version("a", "v2", 2),  # shrinks
    chunk("c", "v1", 0, 2),
    DocumentIncomplete("c", "v1", 2, (1,), None),
    *version("b", "v2", 4),  # grows
    DocumentDeleted("b"),
    chunk("a", "v3", 0, 2),  # a newer version in flight
    plain("r1"),
    *version("d", "v1", 1),
]


@pytest.mark.parametrize("batch_size", [1, 4, len(SEQUENCE)])
async def test_replayed_suffixes_converge(
    store: PgVectorStore, postgres: PostgresServer, batch_size: int
) -> None:
    async def apply(records: Sequence[OutputRecord]) -> None:
        for start in range(0, len(records), batch_size):
            assert await store.apply(records[start : start + batch_size]) == []

    await apply(SEQUENCE)
    expected = await rows(store, postgres)
    assert searchable(expected) == {("a", "v2", 0), ("a", "v2", 1), ("c", "v1", 0), ("d", "v1", 0)}
    assert ("a", "v3", 0) in present(expected)  # written, hidden until its complete
    for start in range(len(SEQUENCE)):
        await apply(SEQUENCE[start:])  # a crash after the transaction, before the commit
        assert await rows(store, postgres) == expected, f"replay from record {start}"


async def row_versions(store: PgVectorStore, postgres: PostgresServer) -> dict[str, Any]:
    """Each row's xmin: the transaction that wrote its current version (an update makes one);
    a table's, not a view's: the active generation's tables."""
    assert store.active is not None
    names = store.names.of(store.active.id)
    async with await psycopg.AsyncConnection.connect(postgres.dsn) as conn:
        chunks = await (
            await conn.execute(f"SELECT doc_id, version, chunk_seq, xmin::text FROM {names.chunks}")
        ).fetchall()
        requests = await (
            await conn.execute(f"SELECT id, xmin::text FROM {names.requests}")
        ).fetchall()
    return {
        **{(d, v, seq): xmin for d, v, seq, xmin in chunks},
        **{rid: xmin for rid, xmin in requests},
    }


@pytest.mark.parametrize("insert_method", ["copy", "executemany"])
async def test_a_replay_leaves_rows_already_there_untouched(
    postgres: PostgresServer, insert_method: Literal["copy", "executemany"]
) -> None:
    config = PgStoreConfig(
        dsn=postgres.dsn, table=f"t_{uuid.uuid4().hex[:12]}", model="m",
        insert_method=insert_method,
    )  # fmt: skip
    async with PgVectorStore(config) as store:
        records: list[OutputRecord] = [*version("a", "v1", 3), plain("r1"), plain("r22")]
        assert await store.apply(records) == []
        before = await row_versions(store, postgres)
        assert await store.apply(records) == []  # the same batch again: a replay
        assert await row_versions(store, postgres) == before
        changed = chunk("a", "v1", 1, 3)
        changed = ChunkResult(**{**{f: getattr(changed, f) for f in changed.__slots__},
                                 "embedding": [9.5] * DIMS})  # fmt: skip
        assert (
            await store.apply(
                [changed, PlainResult("r1", "m", [8.5] * DIMS, DIMS, 2, None, 1, 1.0)]
            )
            == []
        )
        after = await row_versions(store, postgres)
    rewritten = {key for key in before if after[key] != before[key]}
    assert rewritten == {("a", "v1", 1), "r1"}  # only the rows whose content changed


async def test_complete_deletes_chunks_beyond_count(
    store: PgVectorStore, postgres: PostgresServer
) -> None:
    await store.apply(version("a", "v1", 4))
    await store.apply([*version("a", "v1", 4)[:2], DocumentComplete("a", "v1", 2, None)])
    assert present(await rows(store, postgres)) == {("a", "v1", 0), ("a", "v1", 1)}


async def test_new_version_replaces_old_only_on_complete(
    store: PgVectorStore, postgres: PostgresServer
) -> None:
    await store.apply(version("a", "v1", 2))
    await store.apply([chunk("a", "v2", 0, 3), chunk("a", "v2", 1, 3)])
    state = await rows(store, postgres)
    assert searchable(state) == {("a", "v1", 0), ("a", "v1", 1)}  # v2 not complete yet
    await store.apply([chunk("a", "v2", 2, 3), DocumentComplete("a", "v2", 3, None)])
    state = await rows(store, postgres)
    assert present(state) == searchable(state) == {("a", "v2", s) for s in range(3)}
    assert state["documents"][0][1:4] == ("v2", 3, "v2")


async def test_tombstone_deletes_every_version_and_mark(
    store: PgVectorStore, postgres: PostgresServer
) -> None:
    await store.apply(
        [
            *version("a", "v1", 2),
            chunk("a", "v2", 0, 2),
            DocumentIncomplete("a", "v2", 2, (1,), None),
            *version("b", "v1", 1),
        ]
    )
    await store.apply([DocumentDeleted("a")])
    state = await rows(store, postgres)
    assert present(state) == {("b", "v1", 0)}
    assert [d[0] for d in state["documents"]] == ["b"]


async def test_incomplete_keeps_previous_complete_version_searchable(
    store: PgVectorStore, postgres: PostgresServer
) -> None:
    await store.apply(version("a", "v1", 2))
    await store.apply([chunk("a", "v2", 0, 2), DocumentIncomplete("a", "v2", 2, (1,), {"x": 1})])
    state = await rows(store, postgres)
    assert searchable(state) == {("a", "v1", 0), ("a", "v1", 1)}
    assert state["documents"][0][4:7] == ("v2", 2, [1])
    hits = await store.search(vec(3), k=10)
    assert {(h.doc_id, h.version) for h in hits} == {("a", "v1")}
    # A document with no complete version: its partial rows are what there is to find.
    await store.apply([chunk("n", "v1", 0, 2), DocumentIncomplete("n", "v1", 2, (1,), None)])
    assert ("n", "v1", 0) in searchable(await rows(store, postgres))
    # The next complete clears the mark.
    await store.apply(version("a", "v3", 1))
    state = await rows(store, postgres)
    assert state["documents"][0][4:7] == (None, None, None)
    assert searchable(state) >= {("a", "v3", 0)} and ("a", "v1", 0) not in present(state)


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        (chunk("a", "v1", 0, 1, model="other"), Reason.MODEL_MISMATCH),
        (chunk("a", "v1", 0, 1, dims=DIMS + 1), Reason.DIMENSION_MISMATCH),
        (plain("r", model="other"), Reason.MODEL_MISMATCH),
        (plain("r", dims=2), Reason.DIMENSION_MISMATCH),
    ],
)
async def test_mismatches_rejected_rest_applied(
    store: PgVectorStore, postgres: PostgresServer, record: OutputRecord, reason: str
) -> None:
    rejected = await store.apply([plain("ok"), record, chunk("b", "v1", 0, 1)])
    assert [(r.record_index, r.reason) for r in rejected] == [(1, reason)]
    state = await rows(store, postgres)
    assert present(state) == {("b", "v1", 0)}
    assert [r[0] for r in state["requests"]] == ["ok"]


async def test_base64_embedding_written(store: PgVectorStore, postgres: PostgresServer) -> None:
    floats = vec(5)
    await store.apply([PlainResult("b64", "m", encode_base64(floats), DIMS, 1, None, 1, 1.0)])
    stored = (await rows(store, postgres))["requests"][0][2]
    assert [float(x) for x in stored[1:-1].split(",")] == floats


async def test_search_returns_nearest_searchable_chunks(store: PgVectorStore) -> None:
    near = ChunkResult(
        "near",
        "v1",
        0,
        1,
        (0, 5),
        [1.0, 0.0, 0.0, 0.0],
        "m",
        DIMS,
        1,
        False,
        None,
        1,
        1.0,
        "the near one",
    )
    far = ChunkResult(
        "far", "v1", 0, 1, (0, 5), [0.0, 0.0, 0.0, 1.0], "m", DIMS, 1, False, None, 1, 1.0
    )
    hidden = ChunkResult(
        "near", "v2", 0, 1, (0, 5), [1.0, 0.01, 0.0, 0.0], "m", DIMS, 1, False, None, 1, 1.0
    )
    await store.apply(
        [
            near,
            DocumentComplete("near", "v1", 1, None),
            far,
            DocumentComplete("far", "v1", 1, None),
            hidden,
        ]
    )
    hits = await store.search([1.0, 0.0, 0.0, 0.0], k=2)
    assert [(h.doc_id, h.version) for h in hits] == [("near", "v1"), ("far", "v1")]
    assert hits[0].distance == pytest.approx(0.0, abs=1e-6) and hits[0].text == "the near one"


async def test_large_batch_in_one_transaction(
    store: PgVectorStore, postgres: PostgresServer
) -> None:
    records: list[OutputRecord] = []
    for doc in range(1_000):
        records.extend(version(f"doc-{doc}", "v1", 5))
    records.append(chunk("bad", "v1", 0, 1, dims=3))
    started = time.monotonic()
    rejected = await store.apply(records)
    elapsed = time.monotonic() - started
    assert [r.record_index for r in rejected] == [len(records) - 1]
    assert store.active is not None
    table = store.names.of(store.active.id).chunks  # xmin is a table's, not a view's
    async with await psycopg.AsyncConnection.connect(postgres.dsn) as conn:
        row = await (
            await conn.execute(
                f"SELECT count(*), count(DISTINCT xmin::text) FROM {table} WHERE searchable"
            )
        ).fetchone()
    assert row == (5_000, 1)  # every row written by the same transaction
    assert elapsed < 30


async def test_the_first_generation_is_the_model_given_and_sized_by_its_first_vector(
    postgres: PostgresServer,
) -> None:
    table = f"t_{uuid.uuid4().hex[:12]}"
    async with PgVectorStore(PgStoreConfig(dsn=postgres.dsn, table=table, model="mx")) as first:
        assert (first.model, first.dimensions) == ("mx", None)  # no vector yet
        assert await first.apply([chunk("a", "v1", 0, 1, model="mx", dims=3)]) == []
        assert (first.model, first.dimensions) == ("mx", 3)
    # Reopened with other settings: the store's generations stand, the settings make only
    # the first generation of an empty store.
    other = PgStoreConfig(dsn=postgres.dsn, table=table, model="other", dimensions=8)
    async with PgVectorStore(other) as again:
        assert (again.model, again.dimensions) == ("mx", 3)
        [refused] = await again.apply([chunk("b", "v1", 0, 1, model="other", dims=8)])
        assert refused.reason == Reason.MODEL_MISMATCH


async def test_an_empty_store_needs_a_model_and_a_table_of_another_layout_is_refused(
    postgres: PostgresServer,
) -> None:
    table = f"t_{uuid.uuid4().hex[:12]}"
    with pytest.raises(StoreError) as caught:
        await PgVectorStore(PgStoreConfig(dsn=postgres.dsn, table=table)).open()
    assert caught.value.reason == Reason.STORE_SCHEMA and "no model" in str(caught.value)
    async with await psycopg.AsyncConnection.connect(postgres.dsn, autocommit=True) as conn:
        await conn.execute(f"CREATE TABLE {table} (id int)")
    with pytest.raises(StoreError) as caught:
        await PgVectorStore(PgStoreConfig(dsn=postgres.dsn, table=table, model="m")).open()
    assert caught.value.reason == Reason.STORE_SCHEMA and "not a store" in str(caught.value)


@pytest.mark.parametrize("index", ["hnsw", "ivfflat"])
async def test_index_created_partial_on_searchable(
    postgres: PostgresServer, index: Literal["hnsw", "ivfflat"]
) -> None:
    config = PgStoreConfig(
        dsn=postgres.dsn,
        table=f"t_{uuid.uuid4().hex[:12]}",
        model="m",
        dimensions=DIMS,
        index=index,
    )
    async with PgVectorStore(config) as store:
        await store.apply(version("a", "v1", 1))
        assert store.active is not None
        async with await psycopg.AsyncConnection.connect(postgres.dsn) as conn:
            name = f"{config.table}_{store.active.id}_idx"
            row = await (
                await conn.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", (name,))
            ).fetchone()
        assert row is not None and f"USING {index}" in row[0] and "WHERE searchable" in row[0]
        # (IVFFlat's lists are trained on the empty table: only an exact query is sure to hit.)
        own = chunk("a", "v1", 0, 1).embedding
        assert isinstance(own, list)
        assert [h.doc_id for h in await store.search(own, 1)] == ["a"]


async def test_dsn_password_never_shown() -> None:
    secret = "s3cr3t-pw"
    dsn = f"postgresql://writer:{secret}@127.0.0.1:1/db"
    with pytest.raises(StoreError) as caught:
        await PgVectorStore(PgStoreConfig(dsn=dsn, connect_timeout_s=1)).open()
    assert caught.value.retriable and caught.value.reason == Reason.STORE_UNAVAILABLE
    assert secret not in str(caught.value) and "writer:***@127.0.0.1" in str(caught.value)
    assert secret not in repr(PgStoreConfig(dsn=dsn))
    assert secret not in masked_dsn(f"host=127.0.0.1 password={secret} dbname=db")
