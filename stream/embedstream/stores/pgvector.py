"""A vector store in PostgreSQL with pgvector: one table set per index generation, stable names
pointing at the active one (layout: :mod:`embedstream.stores.pgschema`, generations and
views: :mod:`embedstream.stores.pgregistry`; the driver: :mod:`embedstream.stores.pgdriver`).

How each results-topic record changes its generation's tables (one transaction per
``apply``, whatever generations the batch holds):

| record | chunk rows of document d | d's ``_docs`` row |
|---|---|---|
| chunk (d, v, seq) | upsert (d, v, seq) | ``latest_version = v`` |
| complete (d, v, n) | delete other versions and ``chunk_seq >= n`` | complete: v, n; mark cleared |
| incomplete (d, v, n, missing) | unchanged | mark: v, n, ``missing`` |
| tombstone d | all deleted (every version) | deleted |
| plain result (id) | none (upsert ``id`` in ``_reqs``) | none |

Which rows a search sees (``searchable``, recomputed for every document a batch touches):

| d's state | searchable rows of d |
|---|---|
| complete version c (count n) | c's, ``chunk_seq < n``; a newer version's wait for its complete |
| no complete version yet | the latest version's rows (partial, possibly incomplete) |
| c, and marked incomplete | still c's: the last complete version stays searchable |

Replays converge: every write above is an upsert or a delete whose effect depends only on the
record and on fields the last such record wrote, so re-applying any suffix of the records
already applied (a crash between the transaction and the offset commit) ends in the same rows.
A record of a generation the store was not told of, or of another model or size than its
generation's, is not written: it is returned as :class:`Rejected` and the rest of the batch is
applied. Each batch reads the registry afresh under a shared advisory lock that migrations take
alone, so a generation started, cut over or dropped meanwhile is seen by the next batch.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

from embedstream.core.generations import IndexGeneration
from embedstream.errors import Reason, StoreError
from embedstream.stores import pgregistry as reg
from embedstream.stores import pgschema as sql
from embedstream.stores.base import Rejected, SearchHit
from embedstream.stores.generations import (
    STATES,
    Refused,
    Registry,
    StoredGeneration,
    chunking_from_json,
    chunking_json,
)
from embedstream.stores.pgdriver import PgSession, jsonb, masked_dsn, vector, vector_size
from embedstream.stores.pgschema import GenerationTables, PgStoreConfig
from embedstream.stores.plan import BatchPlan, live_first, plan_batch
from embedstream.wire.result_records import ChunkResult, OutputRecord, PlainResult

__all__ = ["GenerationMoved", "PgStoreConfig", "PgVectorStore", "masked_dsn"]

log = logging.getLogger(__name__)


class GenerationMoved(StoreError):
    """A search's query was embedded for a generation that is no longer the active one."""

    def __init__(self, message: str) -> None:
        super().__init__(Reason.STORE_SCHEMA, message, retriable=True)


class PgVectorStore:
    """:class:`embedstream.stores.base.VectorStore` in PostgreSQL; see the module docstring."""

    def __init__(self, config: PgStoreConfig, *, create: bool = True) -> None:
        """``create``: make the registry and the first generation of an empty store (the
        store writer); without, an empty store stays empty (searches, migrations)."""
        self._config = config
        self._create = create
        self._names = sql.Names(config.schema, config.table)
        self.session = PgSession(config.dsn, config.connect_timeout_s)
        self.registry = Registry([])
        self._staged: set[str] = set()  # generations whose staging tables this connection has
        self._staged_on = 0  # ... counted by the connection they were made on

    @property
    def names(self) -> sql.Names:
        return self._names

    @property
    def active(self) -> StoredGeneration | None:
        return self.registry.active

    @property
    def model(self) -> str | None:
        active = self.active
        return None if active is None else active.model

    @property
    def dimensions(self) -> int | None:
        active = self.active
        return None if active is None else active.size

    async def __aenter__(self) -> PgVectorStore:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def open(self) -> None:
        """Connect; a store without generations gets its first, from the config (its tables
        now if its size is known, else at the first vector)."""
        async with self.session.transaction("open the store"):
            await self._load_or_create()

    async def init(self, model: str, dimensions: int) -> StoredGeneration:
        """Make the first generation's tables now (``embedstream sink init``); a store that
        has generations already keeps them. Returns the active generation."""
        async with self.session.transaction("create the tables"):
            await self._load_or_create(model, dimensions)
            active = self.active
            assert active is not None
            if active.size is None:
                await self.make_tables(active, dimensions)
        assert self.active is not None
        return self.active

    async def close(self) -> None:
        await self.session.close()

    async def lock_shared(self) -> None:
        """In the caller's transaction: generations stay as they are until it ends."""
        await self.session.execute(
            "SELECT pg_advisory_xact_lock_shared(hashtext(%s))", (self._names.lock_key,)
        )

    async def lock_alone(self) -> None:
        """In the caller's transaction: no batch is written until it ends (migrations)."""
        await self.session.execute(
            "SELECT pg_advisory_xact_lock(hashtext(%s))", (self._names.lock_key,)
        )

    async def load(self) -> Registry:
        """The registry as it is now (in the caller's transaction); empty if there is none."""
        layout = await self.session.fetchone(reg.find_layout(self._names))
        if layout is None or layout[0] is None:
            self.registry = Registry([])
            return self.registry
        return await self._read_registry()

    async def _read_registry(self) -> Registry:
        rows = await self.session.fetchall(reg.read_generations(self._names))
        self.registry = Registry([_generation(row) for row in rows])
        return self.registry

    async def apply(self, records: Sequence[OutputRecord]) -> list[Rejected]:
        """Write one fetched batch in one transaction; the records refused come back."""
        try:
            async with self.session.transaction("write a batch"):
                await self.lock_shared()
                await self._load_or_create()
                without_tables = {g.id for g in self.registry.generations if g.size is None}
                by_generation, rejected = self._sort(records)
                for generation, accepted in by_generation:
                    if generation.id in without_tables:
                        if generation.size is None:
                            continue  # no vector yet to shape its tables: nothing to change
                        await self.make_tables(generation, generation.size)
                    tables = self._names.of(generation.id)
                    accepted = await self._live_first(generation, tables, accepted)
                    await self._write(tables, plan_batch(accepted))
        except BaseException:
            self._staged.clear()  # a rolled-back transaction took its staging tables along
            raise
        return rejected

    async def search(
        self, query: Sequence[float], k: int = 10, generation_id: str | None = None
    ) -> list[SearchHit]:
        """The ``k`` searchable chunks nearest to ``query`` (cosine distance), nearest first,
        read through the stable name. With ``generation_id``, the query's: if another
        generation became active since it was embedded, :class:`GenerationMoved`."""
        async with self.session.transaction("search"):
            await self.lock_shared()
            await self._load_or_create()
            active = self.active
            if generation_id is not None and (active is None or active.id != generation_id):
                shown = "none" if active is None else active.id
                raise GenerationMoved(f"generation {shown} became active")
            if active is None or active.size is None:
                return []
            rows = await self.session.fetchall(
                sql.search(self._names), {"query": vector(list(query)), "k": k}
            )
        return [
            SearchHit(
                doc_id=r[0],
                version=r[1],
                chunk_seq=r[2],
                span=(r[3], r[4]),
                text=r[5],
                metadata=r[6],
                distance=float(r[7]),
            )
            for r in rows
        ]

    # -- generations ---------------------------------------------------------------------

    def _sort(
        self, records: Sequence[OutputRecord]
    ) -> tuple[list[tuple[StoredGeneration, list[OutputRecord]]], list[Rejected]]:
        by_id: dict[str, tuple[StoredGeneration, list[OutputRecord]]] = {}
        rejected: list[Rejected] = []
        for index, record in enumerate(records):
            model: str | None = None
            size: int | None = None
            if isinstance(record, PlainResult | ChunkResult):
                model, size = record.model, vector_size(record.embedding)
            found = self.registry.resolve(record.index_generation, model, size)
            if isinstance(found, Refused):
                rejected.append(Rejected(index, found.reason, found.message))
                continue
            if found.size is None and size is not None:  # its first vector decides
                found = self.registry.size(found, size)
            by_id.setdefault(found.id, (found, []))[1].append(record)
        return list(by_id.values()), rejected

    async def _load_or_create(self, model: str | None = None, size: int | None = None) -> None:
        layout = await self.session.fetchone(reg.find_layout(self._names))
        registry, legacy, kind = layout or (None, None, None)
        if registry is not None:
            await self._read_registry()
            return
        names = self._names
        if not self._create and model is None:
            self.registry = Registry([])
            return
        if legacy is not None or kind not in (None, "v"):
            raise StoreError(
                Reason.STORE_SCHEMA,
                f"{names.chunks} exists and is not a store with index generations (made by an "
                "embedstream before them, or not ours): give store_table another name, or "
                "drop it and let the store be rebuilt from the results",
            )
        model = model or self._config.model
        if model is None:
            raise StoreError(
                Reason.STORE_SCHEMA,
                f"{names.chunks} has no generation yet and no model was given to make the first",
            )
        await self.session.execute(
            "SELECT pg_advisory_xact_lock(hashtext(%s))", (names.create_key,)
        )
        for statement in reg.create_registry(names):
            await self.session.execute(statement)
        chunking = self._config.chunking
        first = IndexGeneration(model, None, chunking)
        await self.session.execute(
            reg.insert_generation(names),
            (first.id, model, None, None, jsonb(chunking_json(chunking)), "active", None, True),
        )
        await self.load()
        size = size or self._config.dimensions
        active = self.active
        if size is not None and active is not None and active.size is None:
            await self.make_tables(active, size)
        log.info("store %s: first generation %s, %s", names.chunks, first.id, first.describe())

    async def make_tables(self, generation: StoredGeneration, size: int) -> StoredGeneration:
        """A generation's first vector (or a given size): its size recorded, its tables made
        (and the stable names pointed at them if it is the active one)."""
        names, tables = self._names, self._names.of(generation.id)
        if self._config.index != "none" and size > sql.MAX_INDEXED_DIMENSIONS:
            raise StoreError(
                Reason.STORE_SCHEMA,
                f"pgvector indexes at most {sql.MAX_INDEXED_DIMENSIONS} dimensions; "
                f"{size} needs index 'none'",
            )
        await self.session.execute(
            "SELECT pg_advisory_xact_lock(hashtext(%s))", (names.create_key,)
        )
        await self.session.execute(reg.set_size(names), (size, generation.id))
        row = await self.session.fetchone(
            f"SELECT size, state FROM {names.registry} WHERE id = %s", (generation.id,)
        )
        if row is None or row[0] != size:
            # Another writer sized it first, otherwise: this batch is read again with the
            # registry as it is now (its records then meet the size check).
            raise StoreError(
                Reason.STORE_UNAVAILABLE,
                f"generation {generation.id} was just sized by another writer",
                retriable=True,
            )
        for statement in sql.create_tables(tables, size):
            await self.session.execute(statement)
        if row[1] == "active":  # the first generation: indexed from the start
            index = sql.create_index(tables, self._config.index, self._config.ivfflat_lists)
            if index is not None:
                await self.session.execute(index)
            await self.session.execute(reg.point_chunks(names, tables))
            for statement in reg.branch_views(names, [tables]):
                await self.session.execute(statement)
        await self.load()
        sized = self.registry.get(generation.id)
        assert sized is not None
        return sized

    # -- writes --------------------------------------------------------------------------

    async def _live_first(
        self, generation: StoredGeneration, tables: GenerationTables, records: list[OutputRecord]
    ) -> list[OutputRecord]:
        """The backfill writes a generation only while it is being filled, and never over the
        live stream's writes (:func:`embedstream.stores.plan.live_first`)."""
        if generation.state != "new":
            return [r for r in records if isinstance(r, PlainResult) or not r.backfill]
        backfilled = [r.doc_id for r in records if not isinstance(r, PlainResult) and r.backfill]
        rows = await self.session.fetchall(sql.live_marked(tables), (backfilled,))
        kept, marks = live_first(records, {row[0] for row in rows})
        if marks:
            await self.session.execute(sql.mark_live(tables), (sorted(marks),))
        return kept

    async def _write(self, tables: GenerationTables, plan: BatchPlan) -> None:
        run = self.session.execute
        if plan.resets:
            for statement in sql.reset_documents(tables):
                await run(statement, (list(plan.resets),))
        if plan.completes:
            doc_ids = [c.doc_id for c in plan.completes]
            versions = [c.version for c in plan.completes]
            counts = [c.chunk_count for c in plan.completes]
            metadata = [jsonb(c.metadata) for c in plan.completes]
            await run(sql.delete_stale_chunks(tables), (doc_ids, versions, counts))
            await run(sql.upsert_completes(tables), (doc_ids, versions, counts, metadata))
        if plan.latest:
            await run(sql.upsert_latest(tables), (list(plan.latest), list(plan.latest.values())))
        if plan.incompletes:
            await self.session.executemany(
                sql.mark_incomplete(tables),
                [
                    (m.version, m.chunk_count, list(m.missing), jsonb(m.metadata), m.doc_id)
                    for m in plan.incompletes
                ],
            )
        if plan.chunks:
            await self._upsert_chunks(tables, plan.chunks)
        if plan.latest:
            await run(sql.recompute_searchable(tables), (list(plan.latest),))
        if plan.requests:
            await self._upsert_requests(tables, plan.requests)

    async def _upsert_chunks(self, tables: GenerationTables, chunks: Iterable[ChunkResult]) -> None:
        rows = (
            (c.doc_id, c.version, c.chunk_seq, c.chunk_count, c.span[0], c.span[1], c.model,
             c.text, jsonb(c.metadata), c.tokens, vector(c.embedding))
            for c in chunks
        )  # fmt: skip
        if self._config.insert_method == "executemany":
            await self.session.executemany(sql.insert_chunk_row(tables), rows)
            return
        await self._stage(tables)
        columns = ", ".join(sql.CHUNK_COLUMNS)
        await self.session.copy_rows(
            f"COPY {tables.staged_chunks} ({columns}) FROM STDIN (FORMAT BINARY)",
            [*sql.CHUNK_TYPES, "vector"],
            rows,
        )
        await self.session.execute(sql.merge_chunks(tables))

    async def _upsert_requests(
        self, tables: GenerationTables, requests: Iterable[PlainResult]
    ) -> None:
        rows = ((r.id, r.model, jsonb(r.metadata), r.tokens, vector(r.embedding)) for r in requests)
        if self._config.insert_method == "executemany":
            await self.session.executemany(sql.insert_request_row(tables), rows)
            return
        await self._stage(tables)
        columns = ", ".join(sql.REQUEST_COLUMNS)
        await self.session.copy_rows(
            f"COPY {tables.staged_requests} ({columns}) FROM STDIN (FORMAT BINARY)",
            [*sql.REQUEST_TYPES, "vector"],
            rows,
        )
        await self.session.execute(sql.merge_requests(tables))

    async def _stage(self, tables: GenerationTables) -> None:
        if self._staged_on != self.session.connections:  # a new connection: none yet
            self._staged, self._staged_on = set(), self.session.connections
        if tables.generation_id not in self._staged:
            for statement in sql.temp_tables(tables):
                await self.session.execute(statement)
            self._staged.add(tables.generation_id)


def _generation(row: tuple[Any, ...]) -> StoredGeneration:
    """A registry row (``reg.read_generations``) as a generation."""
    id_, model, dimensions, size, chunking, state, plan = row
    assert state in STATES
    generation = IndexGeneration(model, dimensions, chunking_from_json(chunking))
    return StoredGeneration(id_, generation, size, state, plan)
