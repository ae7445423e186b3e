"""A vector store in PostgreSQL with pgvector, through psycopg 3 (async) and the pgvector
adapter: the only module that imports either. The layout is :mod:`embedstream.stores.pgschema`.

How each results-topic record changes the store (one transaction per ``apply``):

| record | chunk rows of document d | d's ``_documents`` row |
|---|---|---|
| chunk (d, v, seq) | upsert (d, v, seq) | ``latest_version = v`` |
| complete (d, v, n) | delete other versions and ``chunk_seq >= n`` | complete: v, n; mark cleared |
| incomplete (d, v, n, missing) | unchanged | mark: v, n, ``missing`` |
| tombstone d | all deleted (every version) | deleted |
| plain result (id) | none (upsert ``id`` in ``_requests``) | none |

Which rows a search sees (``searchable``, recomputed for every document a batch touches):

| d's state | searchable rows of d |
|---|---|
| complete version c (count n) | c's, ``chunk_seq < n``; a newer version's wait for its complete |
| no complete version yet | the latest version's rows (partial, possibly incomplete) |
| c, and marked incomplete | still c's: the last complete version stays searchable |

Replays converge: every write above is an upsert or a delete whose effect depends only on the
record and on fields the last such record wrote, so re-applying any suffix of the records
already applied (a crash between the transaction and the offset commit) ends in the same rows.
A chunk or plain result of another model or dimension than the table's is not written: it is
returned as :class:`Rejected` and the rest of the batch is applied.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import orjson
import psycopg
from pgvector import Vector
from pgvector.psycopg import register_vector_async
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.json import Jsonb, set_json_dumps

from embedstream.errors import Reason, StoreError
from embedstream.settings import scrub_url
from embedstream.stores import pgschema as sql
from embedstream.stores.base import Rejected, SearchHit
from embedstream.stores.pgschema import PgStoreConfig
from embedstream.stores.plan import BatchPlan, plan_batch
from embedstream.wire.documents import ChunkResult, OutputRecord, PlainResult
from embedstream.wire.vectors import Vector as Vector_
from embedstream.wire.vectors import base64_dimensions, decode_base64

__all__ = ["PgStoreConfig", "PgVectorStore", "masked_dsn"]

# SQLSTATE classes worth a retry: connection, transaction rollback (serialization, deadlock),
# insufficient resources, operator intervention (shutdown).
_RETRIABLE_CLASSES = ("08", "40", "53", "57")


def masked_dsn(dsn: str) -> str:
    """The DSN as it may be shown: ``postgresql://u:***@host/db`` or ``host=h password=***``."""
    if "://" in dsn:
        return scrub_url(dsn)
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "***"
    return " ".join(
        f"{name}={'***' if name == 'password' else value}" for name, value in params.items()
    )


class PgVectorStore:
    """:class:`embedstream.stores.base.VectorStore` in PostgreSQL; see the module docstring."""

    def __init__(self, config: PgStoreConfig) -> None:
        self._config = config
        self._names = sql.Names(config.schema, config.table)
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._shape: tuple[str, int] | None = None  # the table's (model, dimensions)
        self._staged = False  # this connection's COPY staging tables exist

    @property
    def model(self) -> str | None:
        return self._shape[0] if self._shape else None

    @property
    def dimensions(self) -> int | None:
        return self._shape[1] if self._shape else None

    async def __aenter__(self) -> PgVectorStore:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def open(self) -> None:
        """Connect, check an existing table's model and dimensions against the settings, and
        create the table if both are known (else the first vector written creates it)."""
        await self._connection()

    async def init(self, model: str, dimensions: int) -> None:
        """Create the table now (``embedstream store init``), for the given shape."""
        conn = await self._connection()
        async with self._errors("create the table"), conn.transaction():
            await self._create(conn, model, dimensions)

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

    async def apply(self, records: Sequence[OutputRecord]) -> list[Rejected]:
        """Write one fetched batch in one transaction; the records refused come back."""
        conn = await self._connection()
        async with self._errors("write a batch"), conn.transaction():
            if self._shape is None:
                first = next((r for r in records if isinstance(r, PlainResult | ChunkResult)), None)
                if first is None:
                    return []  # no table yet and no vector to shape it: nothing to delete
                await self._create(
                    conn,
                    self._config.model or first.model,
                    self._config.dimensions or _size(first.embedding),
                )
            accepted, rejected = self._check(records)
            await self._write(conn, plan_batch(accepted))
        return rejected

    async def search(self, query: Sequence[float], k: int = 10) -> list[SearchHit]:
        """The ``k`` searchable chunks nearest to ``query`` (cosine distance), nearest first."""
        if self._shape is None:
            return []
        conn = await self._connection()
        async with self._errors("search"), conn.cursor() as cur:
            await cur.execute(sql.search(self._names), {"query": Vector(list(query)), "k": k})
            rows = await cur.fetchall()
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

    # -- checks --------------------------------------------------------------------------

    def _check(self, records: Sequence[OutputRecord]) -> tuple[list[OutputRecord], list[Rejected]]:
        assert self._shape is not None
        model, dimensions = self._shape
        accepted: list[OutputRecord] = []
        rejected: list[Rejected] = []
        for index, record in enumerate(records):
            if isinstance(record, PlainResult | ChunkResult):
                if record.model != model:
                    rejected.append(
                        Rejected(
                            index,
                            Reason.MODEL_MISMATCH,
                            f"model {record.model!r}, but the table holds {model!r} vectors",
                        )
                    )
                    continue
                if _size(record.embedding) != dimensions:
                    rejected.append(
                        Rejected(
                            index,
                            Reason.DIMENSION_MISMATCH,
                            f"{_size(record.embedding)} dimensions, the table holds {dimensions}",
                        )
                    )
                    continue
            accepted.append(record)
        return accepted, rejected

    # -- writes --------------------------------------------------------------------------

    async def _write(self, conn: psycopg.AsyncConnection[Any], plan: BatchPlan) -> None:
        names = self._names
        async with conn.cursor() as cur:
            if plan.resets:
                for statement in sql.reset_documents(names):
                    await cur.execute(statement, (list(plan.resets),))
            if plan.completes:
                doc_ids = [c.doc_id for c in plan.completes]
                versions = [c.version for c in plan.completes]
                counts = [c.chunk_count for c in plan.completes]
                metadata = [_jsonb(c.metadata) for c in plan.completes]
                await cur.execute(sql.delete_stale_chunks(names), (doc_ids, versions, counts))
                await cur.execute(
                    sql.upsert_completes(names), (doc_ids, versions, counts, metadata)
                )
            if plan.latest:
                await cur.execute(
                    sql.upsert_latest(names), (list(plan.latest), list(plan.latest.values()))
                )
            if plan.incompletes:
                await cur.executemany(
                    sql.mark_incomplete(names),
                    [
                        (m.version, m.chunk_count, list(m.missing), _jsonb(m.metadata), m.doc_id)
                        for m in plan.incompletes
                    ],
                )
            if plan.chunks:
                await self._upsert_chunks(cur, plan.chunks)
            if plan.latest:
                await cur.execute(sql.recompute_searchable(names), (list(plan.latest),))
            if plan.requests:
                await self._upsert_requests(cur, plan.requests)

    async def _upsert_chunks(
        self, cur: psycopg.AsyncCursor[Any], chunks: Iterable[ChunkResult]
    ) -> None:
        rows = (
            (
                c.doc_id,
                c.version,
                c.chunk_seq,
                c.chunk_count,
                c.span[0],
                c.span[1],
                c.model,
                c.text,
                _jsonb(c.metadata),
                c.tokens,
                Vector(_floats(c.embedding)),
            )
            for c in chunks
        )
        if self._config.insert_method == "executemany":
            await cur.executemany(sql.insert_chunk_row(self._names), list(rows))
            return
        await self._stage(cur)
        columns = ", ".join(sql.CHUNK_COLUMNS)
        async with cur.copy(f"COPY es_chunks_in ({columns}) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types([*sql.CHUNK_TYPES, "vector"])
            for row in rows:
                await copy.write_row(row)
        await cur.execute(sql.merge_chunks(self._names))

    async def _upsert_requests(
        self, cur: psycopg.AsyncCursor[Any], requests: Iterable[PlainResult]
    ) -> None:
        rows = (
            (r.id, r.model, _jsonb(r.metadata), r.tokens, Vector(_floats(r.embedding)))
            for r in requests
        )
        if self._config.insert_method == "executemany":
            await cur.executemany(sql.insert_request_row(self._names), list(rows))
            return
        await self._stage(cur)
        columns = ", ".join(sql.REQUEST_COLUMNS)
        async with cur.copy(f"COPY es_requests_in ({columns}) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types([*sql.REQUEST_TYPES, "vector"])
            for row in rows:
                await copy.write_row(row)
        await cur.execute(sql.merge_requests(self._names))

    async def _stage(self, cur: psycopg.AsyncCursor[Any]) -> None:
        if not self._staged:
            for statement in sql.temp_tables(self._names):
                await cur.execute(statement)
            self._staged = True

    # -- the connection and the table ----------------------------------------------------

    async def _connection(self) -> psycopg.AsyncConnection[Any]:
        if self._conn is not None and not self._conn.closed and not self._conn.broken:
            return self._conn
        self._conn, self._staged = None, False
        async with self._errors("connect"):
            conn = await psycopg.AsyncConnection.connect(
                self._config.dsn,
                autocommit=True,
                connect_timeout=max(1, round(self._config.connect_timeout_s)),
            )
            try:
                await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
                await register_vector_async(conn)
                set_json_dumps(orjson.dumps, conn)
                await self._load_shape(conn)
            except BaseException:
                await conn.close()
                raise
        self._conn = conn
        return conn

    async def _load_shape(self, conn: psycopg.AsyncConnection[Any]) -> None:
        config = self._config
        cur = await conn.execute(
            "SELECT to_regclass(%s), to_regclass(%s)",
            (self._names.meta, self._names.chunks),
        )
        meta, chunks = await cur.fetchone() or (None, None)
        if meta is None:
            if chunks is not None:
                raise StoreError(
                    Reason.STORE_SCHEMA,
                    f"table {self._names.chunks} exists without {self._names.meta}: not ours",
                )
            if config.model and config.dimensions:
                async with conn.transaction():
                    await self._create(conn, config.model, config.dimensions)
            return
        row = await (await conn.execute(sql.read_meta(self._names))).fetchone()
        if row is None:
            raise StoreError(Reason.STORE_SCHEMA, f"{self._names.meta} is empty")
        model, dimensions = row
        if config.model and config.model != model:
            raise StoreError(
                Reason.MODEL_MISMATCH,
                f"{self._names.chunks} holds vectors of model {model!r}, not {config.model!r}",
            )
        if config.dimensions and config.dimensions != dimensions:
            raise StoreError(
                Reason.DIMENSION_MISMATCH,
                f"{self._names.chunks} holds {dimensions} dimensions, not {config.dimensions}",
            )
        self._shape = (model, dimensions)

    async def _create(self, conn: psycopg.AsyncConnection[Any], model: str, dims: int) -> None:
        """Create the tables (inside the caller's transaction) unless another writer just did:
        an advisory lock makes concurrent first starts take turns."""
        if self._config.index != "none" and dims > sql.MAX_INDEXED_DIMENSIONS:
            raise StoreError(
                Reason.STORE_SCHEMA,
                f"pgvector indexes at most {sql.MAX_INDEXED_DIMENSIONS} dimensions; "
                f"{dims} needs index 'none'",
            )
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self._names.lock_key,))
        for statement in sql.create_tables(self._names, dims):
            await conn.execute(statement)
        await conn.execute(sql.write_meta(self._names), (model, dims))
        index = sql.create_index(self._names, self._config.index, self._config.ivfflat_lists)
        if index is not None:
            await conn.execute(index)
        row = await (await conn.execute(sql.read_meta(self._names))).fetchone()
        assert row is not None
        if tuple(row) != (model, dims):
            raise StoreError(
                Reason.MODEL_MISMATCH,
                f"{self._names.chunks} was just created for {row[0]!r} with {row[1]} dimensions",
            )
        self._shape = (model, dims)

    def _errors(self, doing: str) -> _DriverErrors:
        return _DriverErrors(doing, self._config.dsn)


class _DriverErrors:
    """Turns the driver's errors into :class:`StoreError` with the DSN's password masked."""

    def __init__(self, doing: str, dsn: str) -> None:
        self._doing, self._dsn = doing, dsn

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        if not isinstance(exc, psycopg.Error):
            return
        state = exc.sqlstate or ""
        retriable = isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError) or (
            state[:2] in _RETRIABLE_CLASSES
        )
        message = _scrub(str(exc).strip().splitlines()[0] if str(exc).strip() else "", self._dsn)
        raise StoreError(
            Reason.STORE_UNAVAILABLE if retriable else Reason.STORE_FAILED,
            f"cannot {self._doing} on {masked_dsn(self._dsn)}: {type(exc).__name__}: {message}",
            retriable=retriable,
        ) from None


def _scrub(text: str, dsn: str) -> str:
    try:
        password = conninfo_to_dict(dsn).get("password")
    except psycopg.ProgrammingError:
        password = None
    if password:
        text = text.replace(str(password), "***")
    return scrub_url(text)


def _jsonb(value: dict[str, Any] | None) -> Jsonb | None:
    return None if value is None else Jsonb(value)


def _floats(embedding: Vector_) -> list[float]:
    # Decoded records hold floats; a record built in-process may still hold base64.
    return decode_base64(embedding) if isinstance(embedding, str) else embedding


def _size(embedding: Vector_) -> int:
    return base64_dimensions(embedding) if isinstance(embedding, str) else len(embedding)
