"""Index generations in a real PostgreSQL with pgvector: two generations written side by side,
each to its own tables; the plan against what the store holds; a cutover that waits for every
document and builds the vector index first; searchers polling the stable names through
cutover, rollback, cutover, drop and cancel while a writer keeps writing both generations,
never getting an error, an empty answer or rows of two generations; a cutover that cannot get
its lock in time changing nothing."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from embedstream.core.chunker import ChunkingRules, chunk_document
from embedstream.core.generations import IndexGeneration
from embedstream.core.reembed import CallLimits
from embedstream.errors import Reason, StoreError
from embedstream.stores.pgmigrate import MigrationRefused, Migrations
from embedstream.stores.pgvector import PgStoreConfig, PgVectorStore
from embedstream.testing.postgres import PostgresServer
from embedstream.wire import (
    ChunkResult,
    DocumentComplete,
    DocumentDeleted,
    DocumentIncomplete,
    OutputRecord,
    PlainResult,
)

pytestmark = pytest.mark.integration

RULES = ChunkingRules(40, 0, 0)
A = IndexGeneration("model-a", None, RULES)  # the store's first generation
B = IndexGeneration("model-b", 8, RULES)  # the one it migrates to
LIMITS = CallLimits(inputs_per_call=16, tokens_per_call=100_000, rpm=0, tpm=0)


@pytest.fixture
async def store(postgres: PostgresServer) -> AsyncIterator[PgVectorStore]:
    config = PgStoreConfig(
        dsn=postgres.dsn, table=f"g_{uuid.uuid4().hex[:10]}", model=A.model, chunking=RULES,
        index="hnsw",
    )  # fmt: skip
    async with PgVectorStore(config) as opened:
        yield opened


def paragraphs(doc: int, words: int) -> str:
    return "\n\n".join(f"doc{doc:03d} word{w} " * 6 for w in range(words))


def texts(count: int = 30) -> dict[str, str]:
    return {f"d{d:03d}": paragraphs(d, 1 + d % 4) for d in range(count)}


def records(
    generation: IndexGeneration, docs: dict[str, str], version: str = "v1", dims: int = 8
) -> list[OutputRecord]:
    """What a processor of ``generation`` writes for ``docs``: chunk records then complete."""
    out: list[OutputRecord] = []
    for doc_id, text in docs.items():
        chunks = chunk_document(text, generation.chunking)
        for c in chunks:
            vector = [float((hash((generation.model, doc_id, c.seq)) >> k) % 7 + 1)
                      for k in range(dims)]  # fmt: skip
            out.append(ChunkResult(
                doc_id, version, c.seq, len(chunks), (c.start, c.end), vector, generation.model,
                dims, c.tokens, False, None, 1, 1.0, c.text, generation.id,
            ))  # fmt: skip
        out.append(DocumentComplete(doc_id, version, len(chunks), None, generation.id))
    return out


def plain(generation: IndexGeneration, request_id: str, dims: int = 8) -> PlainResult:
    return PlainResult(request_id, generation.model, [1.0] * dims, dims, 3, None, 1, 1.0, False,
                       generation.id)  # fmt: skip


async def table_rows(dsn: str, table: str) -> list[tuple[Any, ...]]:
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        cur = await conn.execute(
            f"SELECT doc_id, version, chunk_seq, model FROM {table} ORDER BY 1, 2, 3"
        )
        return [tuple(r) for r in await cur.fetchall()]


async def test_two_generations_are_written_side_by_side_each_to_its_own_tables(
    store: PgVectorStore, postgres: PostgresServer
) -> None:
    docs = texts(6)
    assert await store.apply([*records(A, docs), plain(A, "r1")]) == []
    migrations = Migrations(store, "hnsw")
    started, _ = await migrations.start(B, LIMITS)
    assert (started.id, started.state, started.size) == (B.id, "new", 8)
    unknown = IndexGeneration("model-c", None, RULES)
    batch = [*records(B, docs), plain(B, "r1"), *records(unknown, {"x": "some text"})]
    rejected = await store.apply(batch)
    assert {r.reason for r in rejected} == {Reason.UNKNOWN_GENERATION}
    assert len(rejected) == len(records(unknown, {"x": "some text"}))
    names = store.names
    a_rows = await table_rows(postgres.dsn, names.of(A.id).chunks)
    b_rows = await table_rows(postgres.dsn, names.of(B.id).chunks)
    assert {r[3] for r in a_rows} == {"model-a"} and {r[3] for r in b_rows} == {"model-b"}
    assert [r[:3] for r in a_rows] == [r[:3] for r in b_rows]
    assert await table_rows(postgres.dsn, names.chunks) == a_rows  # the stable name: A's
    # A tombstone names its generation: it deletes there only.
    await store.apply([DocumentDeleted("d000", B.id)])
    assert ("d000", "v1", 0, "model-a") in await table_rows(postgres.dsn, names.of(A.id).chunks)
    assert "d000" not in {r[0] for r in await table_rows(postgres.dsn, names.of(B.id).chunks)}
    # A record written before generations (no id) goes to the active one.
    await store.apply([DocumentDeleted("d001")])
    assert "d001" not in {r[0] for r in await table_rows(postgres.dsn, names.of(A.id).chunks)}
    assert "d001" in {r[0] for r in await table_rows(postgres.dsn, names.of(B.id).chunks)}


async def test_the_plan_counts_what_the_store_holds(
    store: PgVectorStore, postgres: PostgresServer
) -> None:
    docs = texts(30)
    await store.apply([*records(A, docs), plain(A, "r1"), plain(A, "r2")])
    migrations = Migrations(store, "none")
    _, same = await migrations.plan(B, LIMITS)
    async with await psycopg.AsyncConnection.connect(postgres.dsn) as conn:
        cur = await conn.execute(
            f"SELECT count(DISTINCT doc_id), count(*), sum(ceil(octet_length(text) / 3.0) + 1) "
            f"FROM {store.names.chunks}"
        )
        counted = await cur.fetchone()
    assert counted is not None
    assert (same.documents, same.chunks, same.tokens) == tuple(int(v) for v in counted)
    assert (same.basis, same.requests, same.calls) == ("chunks", 2, -(-same.chunks // 16))
    # Other chunking: the kept texts cut again give the chunks a processor would make.
    smaller = IndexGeneration("model-b", 8, ChunkingRules(20, 4, 0))
    _, cut = await migrations.plan(smaller, LIMITS)
    made = [c for text in docs.values() for c in chunk_document(text, smaller.chunking)]
    assert (cut.basis, cut.chunks, cut.tokens) == ("texts", len(made), sum(c.tokens for c in made))


async def test_a_cutover_waits_for_every_document_and_builds_the_index_first(
    store: PgVectorStore, postgres: PostgresServer
) -> None:
    docs = texts(12)
    await store.apply(records(A, docs))
    migrations = Migrations(store, "hnsw")
    await migrations.start(B, LIMITS)
    behind = dict(list(docs.items())[:-3])
    await store.apply(records(B, behind))
    with pytest.raises(MigrationRefused) as caught:
        await migrations.cutover(allow_missing=False)
    assert "lacks 3 not caught up with the active generation (d009, d010, d011)" in str(
        caught.value
    )
    [_, new] = await migrations.status()
    assert (new.generation.id, new.lacking, new.index) == (B.id, 3, "absent")
    # A newer version in the active generation: the new one lacks it too, until it has it.
    await store.apply([*records(B, docs), *records(A, {"d000": docs["d000"]}, "v2")])
    with pytest.raises(MigrationRefused, match=r"lacks 1 .*\(d000\)"):
        await migrations.cutover(allow_missing=False)
    await store.apply(records(B, {"d000": docs["d000"]}, "v2"))
    # Incomplete in the new generation where the active one is complete: not caught up; a
    # version whose chunks failed in both: caught up (the cutover cannot wait for it).
    await store.apply([*records(A, {"e1": "one"}),
                       DocumentIncomplete("e1", "v1", 1, (0,), None, B.id),
                       DocumentIncomplete("e2", "v1", 1, (0,), None, A.id),
                       DocumentIncomplete("e2", "v1", 1, (0,), None, B.id)])  # fmt: skip
    with pytest.raises(MigrationRefused, match=r"lacks 1 .*\(e1\)"):
        await migrations.cutover(allow_missing=False)
    await store.apply(records(B, {"e1": "one"}))
    cut, lacking = await migrations.cutover(allow_missing=False)
    assert cut.id == B.id and not lacking
    states = {s.generation.id: (s.generation.state, s.index) for s in await migrations.status()}
    assert states == {A.id: ("old", "valid"), B.id: ("active", "valid")}
    assert {r[3] for r in await table_rows(postgres.dsn, store.names.chunks)} == {"model-b"}
    # With documents lacking and --allow-missing: done, and they are named.
    await migrations.rollback()
    await store.apply([*records(A, {"new-doc": "a new document"})])
    cut, lacking = await migrations.cutover(allow_missing=True)
    assert cut.id == B.id and lacking.lacking_ids == ["new-doc"]


async def test_migration_commands_refuse_what_does_not_apply(
    store: PgVectorStore, postgres: PostgresServer
) -> None:
    migrations = Migrations(store, "none")
    with pytest.raises(MigrationRefused, match="no vectors yet"):
        await migrations.plan(B, LIMITS)
    await store.apply(records(A, texts(2)))
    with pytest.raises(MigrationRefused, match="is that one already"):
        await migrations.start(A, LIMITS)
    same_vectors = IndexGeneration(A.model, 8, RULES)  # A's own size asked by number
    with pytest.raises(MigrationRefused, match="is that one already"):
        await migrations.start(same_vectors, LIMITS)
    for command, says in [
        (migrations.rollback, "no generation kept to roll back to"),
        (migrations.drop, "no generation kept from a cutover to drop"),
        (migrations.cancel, "no new generation to cancel"),
    ]:
        with pytest.raises(MigrationRefused, match=says):
            await command()
    with pytest.raises(MigrationRefused, match="no generation to cut over to"):
        await migrations.cutover(allow_missing=False)
    unsized = IndexGeneration("model-b", None, RULES)
    await migrations.start(unsized, LIMITS)
    with pytest.raises(MigrationRefused, match="is being filled already"):
        await migrations.start(B, LIMITS)
    with pytest.raises(MigrationRefused, match="has no vectors yet"):
        await migrations.cutover(allow_missing=False)
    assert (await migrations.cancel()).id == unsized.id
    await migrations.start(B, LIMITS)
    await store.apply(records(B, texts(2)))
    await migrations.cutover(allow_missing=False)
    with pytest.raises(MigrationRefused, match="kept from the last cutover"):
        await migrations.start(unsized, LIMITS)
    assert (await migrations.drop()).id == A.id
    assert [s.generation.id for s in await migrations.status()] == [B.id]
    gone = store.names.of(A.id).chunks
    async with await psycopg.AsyncConnection.connect(postgres.dsn) as conn:
        row = await (await conn.execute("SELECT to_regclass(%s)", (gone,))).fetchone()
    assert row == (None,)


async def test_a_cutover_held_up_by_a_reader_changes_nothing(
    store: PgVectorStore, postgres: PostgresServer
) -> None:
    docs = texts(3)
    await store.apply(records(A, docs))
    migrations = Migrations(store, "none", lock_timeout_s=0.5)
    await migrations.start(B, LIMITS)
    await store.apply(records(B, docs))
    async with await psycopg.AsyncConnection.connect(postgres.dsn) as reader:
        await reader.execute(f"SELECT count(*) FROM {store.names.chunks}")  # holds the view
        with pytest.raises(StoreError) as caught:
            await migrations.cutover(allow_missing=False)
    assert caught.value.reason == Reason.STORE_LOCKED
    assert "held the store for more than 0.5 s; nothing changed" in str(caught.value)
    states = {s.generation.id: s.generation.state for s in await migrations.status()}
    assert states == {A.id: "active", B.id: "new"}
    assert (await migrations.cutover(allow_missing=False))[0].id == B.id  # once it is gone


class Searcher:
    """Polls the stable names on a connection of its own as fast as it can."""

    def __init__(self, dsn: str, names: Any) -> None:
        self._dsn, self._names = dsn, names
        self.answers: list[frozenset[str]] = []
        self.errors: list[BaseException] = []
        self.stop = asyncio.Event()
        self.answered = asyncio.Event()  # set at each answer

    async def run(self) -> None:
        names = self._names
        async with await psycopg.AsyncConnection.connect(self._dsn, autocommit=True) as conn:
            while not self.stop.is_set():
                try:
                    cur = await conn.execute(
                        f"SELECT doc_id, model FROM {names.chunks} WHERE searchable "
                        "ORDER BY embedding <=> '[1,2,3,4,5,6,7,1]' LIMIT 20"
                    )
                    near = await cur.fetchall()
                    cur = await conn.execute(
                        f"SELECT count(*) FROM {names.documents} d "
                        f"JOIN {names.chunks} c USING (doc_id) WHERE c.searchable"
                    )
                    joined = await cur.fetchone()
                except psycopg.Error as exc:
                    self.errors.append(exc)
                    continue
                self.answers.append(frozenset(model for _, model in near))
                if not joined or not joined[0]:
                    self.answers.append(frozenset())
                self.answered.set()
                await asyncio.sleep(0)


async def test_searchers_see_one_generation_through_cutover_rollback_and_drop(
    store: PgVectorStore, postgres: PostgresServer
) -> None:
    docs = texts(40)
    await store.apply(records(A, docs))
    migrations = Migrations(store, "hnsw")
    await migrations.start(B, LIMITS)
    await store.apply(records(B, docs))
    config = PgStoreConfig(dsn=postgres.dsn, table=store.names.table, model=A.model,
                           chunking=RULES)  # fmt: skip
    searchers = [Searcher(postgres.dsn, store.names) for _ in range(2)]
    tasks = [asyncio.create_task(s.run()) for s in searchers]

    async def keep_writing(writer: PgVectorStore, stop: asyncio.Event) -> int:
        rounds = 0
        while not stop.is_set():  # both generations' documents edited, batch after batch
            version = f"v{rounds + 2}"
            doc = f"d{rounds % 40:03d}"
            edited = {doc: docs[doc] + f" edit {rounds}"}
            await writer.apply([*records(A, edited, version), *records(B, edited, version)])
            rounds += 1
        return rounds

    async def answered(more: int) -> None:
        """Until the searchers have answered ``more`` times since (waiting on their answers)."""
        target = sum(len(s.answers) for s in searchers) + more
        while sum(len(s.answers) for s in searchers) < target:
            searchers[0].answered.clear()
            await searchers[0].answered.wait()

    stop_writing = asyncio.Event()
    async with PgVectorStore(config) as writer:
        writing = asyncio.create_task(keep_writing(writer, stop_writing))
        try:
            await answered(20)
            for step in (
                lambda: migrations.cutover(allow_missing=True),
                migrations.rollback,
                lambda: migrations.cutover(allow_missing=True),
                migrations.drop,
            ):
                await step()
                await answered(20)
        finally:
            stop_writing.set()
            rounds = await writing
    for s in searchers:
        s.stop.set()
    await asyncio.gather(*tasks)
    seen = [answer for s in searchers for answer in s.answers]
    assert [e for s in searchers for e in s.errors] == []
    assert frozenset() not in seen  # never an empty answer
    assert all(len(answer) == 1 for answer in seen)  # never two generations in one answer
    assert {next(iter(a)) for a in seen} == {"model-a", "model-b"}  # both, one after the other
    assert rounds > 0
    with contextlib.suppress(MigrationRefused):
        await migrations.cancel()
