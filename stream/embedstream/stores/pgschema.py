"""The PostgreSQL layout of a pgvector store and the statements that write and search it,
as SQL text.

Pure: no driver here (:mod:`embedstream.stores.pgvector` runs these). A store named ``T`` in
schema ``S`` keeps one table set per index generation ``G`` (8 hex digits,
:mod:`embedstream.stores.generations`), and stable names that searchers read: views of the
active generation's tables (:mod:`embedstream.stores.pgregistry` keeps them and the registry).

| stable name (a view) | the active generation's table | what it holds |
|---|---|---|
| ``S.T`` | ``S.T_G`` | chunks |
| ``S.T_documents`` | ``S.T_G_docs`` | one row per document |
| ``S.T_requests`` | ``S.T_G_reqs`` | plain results |

``S.T_generations`` is the registry. Every name fits PostgreSQL's 63 bytes: ``T`` has at most
48 characters, ``_G_docs`` adds 14. A generation's tables:

- ``S.T_G`` (chunks), primary key ``(doc_id, version, chunk_seq)``: ``chunk_count``,
  ``span_start``, ``span_end``, ``model``, ``text`` (null unless the processor includes it),
  ``metadata jsonb``, ``tokens``, ``embedding vector(D)``, ``searchable``, ``written_at``.
- ``S.T_G_docs``, one row per document: ``complete_version``, ``complete_count``,
  ``latest_version``, the incomplete mark (``incomplete_version``, ``incomplete_count``,
  ``missing int[]``), the final record's ``metadata``, ``updated_at``.
- ``S.T_G_reqs``, plain results by request ``id``: ``model``, ``embedding``, ``tokens``,
  ``metadata``, ``written_at``. A table of their own: request ids and doc_ids are separate
  name spaces on the results topic, so a tombstone of document ``x`` must not delete request
  ``x``, and a plain result has no version or chunk_seq to key by.

A chunk row is searchable when its version is the document's complete version (and its
``chunk_seq`` below that version's count), or, while the document has no complete version
yet, when its version is the document's latest. Searches read ``WHERE searchable``; the
optional HNSW / IVFFlat index (cosine) is partial on that predicate.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from embedstream.core.chunker import ChunkingRules

INDEX_KINDS = ("none", "hnsw", "ivfflat")
IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]{0,47}")  # room for the longest suffix in 63 bytes
MAX_NAME_BYTES = 63  # PostgreSQL's identifiers (NAMEDATALEN - 1)
MAX_DIMENSIONS = 16_000  # pgvector's vector type
MAX_INDEXED_DIMENSIONS = 2_000  # pgvector's HNSW and IVFFlat on vector

CHUNK_COLUMNS = (
    "doc_id", "version", "chunk_seq", "chunk_count", "span_start", "span_end", "model", "text",
    "metadata", "tokens", "embedding",
)  # fmt: skip
CHUNK_TYPES = ("text", "text", "int4", "int4", "int4", "int4", "text", "text", "jsonb", "int4")
REQUEST_COLUMNS = ("id", "model", "metadata", "tokens", "embedding")
REQUEST_TYPES = ("text", "text", "jsonb", "int4")

# Whether a chunk row of document d is searchable (see the module docstring).
SEARCHABLE = """CASE WHEN d.complete_version IS NOT NULL
    THEN {row}.version = d.complete_version AND {row}.chunk_seq < d.complete_count
    ELSE {row}.version IS NOT DISTINCT FROM d.latest_version END"""


@dataclass(frozen=True, slots=True)
class PgStoreConfig:
    dsn: str = field(repr=False)  # a secret: never shown unmasked
    schema: str = "public"
    table: str = "embeddings"
    # The store's first generation, made when the store has none: its model (required then),
    # its vector size (None: the first vector's) and the chunking its results were cut with.
    model: str | None = None
    dimensions: int | None = None
    chunking: ChunkingRules = field(default_factory=ChunkingRules)
    index: Literal["none", "hnsw", "ivfflat"] = "hnsw"
    ivfflat_lists: int = 100
    insert_method: Literal["copy", "executemany"] = "copy"
    connect_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        Names(self.schema, self.table)  # raises ValueError for unusable names
        if self.index not in INDEX_KINDS:
            raise ValueError(f"index must be one of {', '.join(INDEX_KINDS)}")
        if self.dimensions is not None and not 1 <= self.dimensions <= MAX_DIMENSIONS:
            raise ValueError(f"dimensions must be in [1, {MAX_DIMENSIONS}]")
        if self.ivfflat_lists < 1:
            raise ValueError("ivfflat_lists must be >= 1")


class Names:
    """The quoted names of one store: its stable views, its registry, its locks."""

    def __init__(self, schema: str, table: str) -> None:
        for name in (schema, table):
            if not IDENTIFIER.fullmatch(name):
                raise ValueError(f"{name!r} is not a lower-case SQL identifier of <= 48 chars")
        self.schema_name, self.table = schema, table
        self.schema = f'"{schema}"'
        self.chunks = f'"{schema}"."{table}"'
        self.documents = f'"{schema}"."{table}_documents"'
        self.requests = f'"{schema}"."{table}_requests"'
        self.registry = f'"{schema}"."{table}_generations"'
        self.registry_state = f'"{table}_gen_state"'
        self.legacy_meta = f'"{schema}"."{table}_meta"'  # the layout before generations
        # Writers hold it shared for a batch; migrations hold it alone to change generations.
        self.lock_key = f"embedstream.store:{schema}.{table}"
        self.create_key = f"embedstream.store.create:{schema}.{table}"

    def of(self, generation_id: str) -> GenerationTables:
        return GenerationTables(self.schema_name, self.table, generation_id)


class GenerationTables:
    """The quoted names of one generation's tables (same attribute names as the views)."""

    def __init__(self, schema: str, table: str, generation_id: str) -> None:
        base = f"{table}_{generation_id}"
        assert len(base) + len("_docs") <= MAX_NAME_BYTES, base
        self.generation_id = generation_id
        self.chunks = f'"{schema}"."{base}"'
        self.documents = f'"{schema}"."{base}_docs"'
        self.requests = f'"{schema}"."{base}_reqs"'
        # While it is being filled: the documents the live stream wrote (stores/plan.py).
        self.live = f'"{schema}"."{base}_live"'
        self.index = f'"{base}_idx"'
        self.qualified_index = f'"{schema}"."{base}_idx"'
        self.index_name = f"{base}_idx"
        self.schema_name = schema
        self.staged_chunks = f"es_{generation_id}_chunks"  # temporary: per connection
        self.staged_requests = f"es_{generation_id}_reqs"


def create_tables(names: GenerationTables, dimensions: int) -> list[str]:
    """DDL of a generation's tables; ``IF NOT EXISTS`` throughout, under an advisory lock."""
    return [
        f"""CREATE TABLE IF NOT EXISTS {names.chunks} (
            doc_id text NOT NULL, version text NOT NULL, chunk_seq int NOT NULL,
            chunk_count int NOT NULL, span_start int NOT NULL, span_end int NOT NULL,
            model text NOT NULL, text text, metadata jsonb, tokens int NOT NULL,
            embedding vector({dimensions}) NOT NULL, searchable boolean NOT NULL,
            written_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (doc_id, version, chunk_seq))""",
        f"""CREATE TABLE IF NOT EXISTS {names.documents} (
            doc_id text PRIMARY KEY, complete_version text, complete_count int,
            latest_version text, incomplete_version text, incomplete_count int, missing int[],
            metadata jsonb, updated_at timestamptz NOT NULL DEFAULT now())""",
        f"""CREATE TABLE IF NOT EXISTS {names.requests} (
            id text PRIMARY KEY, model text NOT NULL, metadata jsonb, tokens int NOT NULL,
            embedding vector({dimensions}) NOT NULL,
            written_at timestamptz NOT NULL DEFAULT now())""",
        f"CREATE TABLE IF NOT EXISTS {names.live} (doc_id text PRIMARY KEY)",
    ]


def live_marked(names: GenerationTables) -> str:
    """Which of these documents the live stream has written since the generation started."""
    return f"SELECT doc_id FROM {names.live} WHERE doc_id = ANY(%s)"


def documents_in_generation(names: GenerationTables) -> str:
    """Of these documents, those the generation holds complete (and at which version) or the
    live stream marked: what a backfill need not embed again (`core/backfill_skips.py`)."""
    return f"""SELECT f.doc_id, d.complete_version, l.doc_id IS NOT NULL
        FROM unnest(%s::text[]) AS f(doc_id)
        LEFT JOIN {names.documents} d ON d.doc_id = f.doc_id
        LEFT JOIN {names.live} l ON l.doc_id = f.doc_id
        WHERE d.complete_version IS NOT NULL OR l.doc_id IS NOT NULL"""


def mark_live(names: GenerationTables) -> str:
    return f"INSERT INTO {names.live} SELECT unnest(%s::text[]) ON CONFLICT DO NOTHING"


def clear_live(names: GenerationTables) -> str:
    """At the cutover: the marks are needed only while the backfill writes the generation."""
    return f"DELETE FROM {names.live}"


def create_index(
    names: GenerationTables, kind: str, ivfflat_lists: int, *, concurrently: bool = False
) -> str | None:
    """The vector index (cosine, partial on ``searchable``); ``concurrently`` builds it beside
    the writes (outside a transaction), as a cutover does for a filled generation."""
    if kind == "none":
        return None
    using = "hnsw" if kind == "hnsw" else "ivfflat"
    options = f" WITH (lists = {int(ivfflat_lists)})" if kind == "ivfflat" else ""
    how = "CONCURRENTLY " if concurrently else ""
    return (
        f"CREATE INDEX {how}IF NOT EXISTS {names.index} ON {names.chunks} "
        f"USING {using} (embedding vector_cosine_ops){options} WHERE searchable"
    )


def temp_tables(names: GenerationTables) -> list[str]:
    """Per-connection staging tables for COPY (the columns COPY fills), emptied at commit."""
    return [
        f"""CREATE TEMP TABLE IF NOT EXISTS {names.staged_chunks} ON COMMIT DELETE ROWS AS
            SELECT {", ".join(CHUNK_COLUMNS)} FROM {names.chunks} WITH NO DATA""",
        f"""CREATE TEMP TABLE IF NOT EXISTS {names.staged_requests} ON COMMIT DELETE ROWS AS
            SELECT {", ".join(REQUEST_COLUMNS)} FROM {names.requests} WITH NO DATA""",
    ]


def reset_documents(names: GenerationTables) -> list[str]:
    return [
        f"DELETE FROM {names.chunks} WHERE doc_id = ANY(%s)",
        f"DELETE FROM {names.documents} WHERE doc_id = ANY(%s)",
    ]


def delete_stale_chunks(names: GenerationTables) -> str:
    """For each complete (doc_id, version, chunk_count): rows of other versions, or beyond."""
    return f"""DELETE FROM {names.chunks} c
        USING unnest(%s::text[], %s::text[], %s::int[]) AS f(doc_id, version, chunk_count)
        WHERE c.doc_id = f.doc_id AND (c.version <> f.version OR c.chunk_seq >= f.chunk_count)"""


def upsert_completes(names: GenerationTables) -> str:
    return f"""INSERT INTO {names.documents} AS d
        (doc_id, complete_version, complete_count, latest_version, metadata)
        SELECT f.doc_id, f.version, f.chunk_count, f.version, f.metadata
        FROM unnest(%s::text[], %s::text[], %s::int[], %s::jsonb[])
            AS f(doc_id, version, chunk_count, metadata)
        ON CONFLICT (doc_id) DO UPDATE SET complete_version = excluded.complete_version,
            complete_count = excluded.complete_count, latest_version = excluded.latest_version,
            metadata = excluded.metadata, incomplete_version = NULL, incomplete_count = NULL,
            missing = NULL, updated_at = now()"""


def upsert_latest(names: GenerationTables) -> str:
    return f"""INSERT INTO {names.documents} AS d (doc_id, latest_version)
        SELECT * FROM unnest(%s::text[], %s::text[])
        ON CONFLICT (doc_id) DO UPDATE SET latest_version = excluded.latest_version,
            updated_at = now()"""


def mark_incomplete(names: GenerationTables) -> str:
    """One row per statement: ``missing`` arrays differ in length (no ragged arrays in SQL)."""
    return f"""UPDATE {names.documents} SET incomplete_version = %s, incomplete_count = %s,
        missing = %s, metadata = %s, updated_at = now() WHERE doc_id = %s"""


def merge_chunks(names: GenerationTables, source: str | None = None) -> str:
    """Staged chunks into the table, searchable computed from the document's row."""
    source = source or f"{names.staged_chunks} s"
    columns = ", ".join(CHUNK_COLUMNS)
    updates = ", ".join(f"{name} = excluded.{name}" for name in CHUNK_COLUMNS[3:])
    staged = ", ".join(f"s.{name}" for name in CHUNK_COLUMNS)
    return f"""INSERT INTO {names.chunks} AS c ({columns}, searchable)
        SELECT {staged}, {SEARCHABLE.format(row="s")}
        FROM {source} JOIN {names.documents} d ON d.doc_id = s.doc_id
        ON CONFLICT (doc_id, version, chunk_seq) DO UPDATE SET {updates},
            searchable = excluded.searchable, written_at = now()
        WHERE {_changed("c", (*CHUNK_COLUMNS[3:], "searchable"))}"""


def insert_chunk_row(names: GenerationTables) -> str:
    """One chunk per statement (for ``executemany``): the same merge from a VALUES row."""
    values = ", ".join(f"%s::{kind}" for kind in (*CHUNK_TYPES, "vector"))
    return merge_chunks(names, f"(VALUES ({values})) AS s({', '.join(CHUNK_COLUMNS)})")


def recompute_searchable(names: GenerationTables) -> str:
    """Flip the rows of these documents whose searchable flag no longer matches their row."""
    return f"""UPDATE {names.chunks} c SET searchable = NOT c.searchable
        FROM {names.documents} d
        WHERE c.doc_id = ANY(%s) AND d.doc_id = c.doc_id
            AND c.searchable IS DISTINCT FROM ({SEARCHABLE.format(row="c")})"""


def merge_requests(names: GenerationTables, source: str | None = None) -> str:
    source = source or names.staged_requests
    columns = ", ".join(REQUEST_COLUMNS)
    updates = ", ".join(f"{name} = excluded.{name}" for name in REQUEST_COLUMNS[1:])
    return f"""INSERT INTO {names.requests} AS r ({columns}) SELECT {columns} FROM {source}
        ON CONFLICT (id) DO UPDATE SET {updates}, written_at = now()
        WHERE {_changed("r", REQUEST_COLUMNS[1:])}"""


def _changed(row: str, columns: Sequence[str]) -> str:
    """A replayed row already in the table as it is (the same vector, span, text, metadata...)
    is left alone: no new row version, no index entry, no WAL for it; ``written_at`` keeps
    the time it was last changed."""
    mine = ", ".join(f"{row}.{name}" for name in columns)
    theirs = ", ".join(f"excluded.{name}" for name in columns)
    return f"({mine}) IS DISTINCT FROM ({theirs})"


def insert_request_row(names: GenerationTables) -> str:
    values = ", ".join(f"%s::{kind}" for kind in (*REQUEST_TYPES, "vector"))
    return merge_requests(names, f"(VALUES ({values})) AS v({', '.join(REQUEST_COLUMNS)})")


def search(names: Names) -> str:
    """The nearest searchable chunks, through the stable name (the active generation's)."""
    return f"""SELECT doc_id, version, chunk_seq, span_start, span_end, text, metadata,
            embedding <=> %(query)s AS distance
        FROM {names.chunks} WHERE searchable
        ORDER BY embedding <=> %(query)s LIMIT %(k)s"""
