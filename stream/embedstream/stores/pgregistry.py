"""The SQL of a store's generations: its registry, the stable names (views) and what the
migration commands ask of the tables. Pure: :mod:`embedstream.stores.pgvector` and
:mod:`embedstream.stores.pgmigrate` run these.

The registry ``S.T_generations`` has a row per generation: ``id``, ``model``, ``dimensions``
(asked; null: the model's own), ``size`` (the tables' vector size; null until the first
vector), ``chunking`` (jsonb), ``state`` (active, new or old: one row each at most, a unique
index says so), ``plan`` (the re-embed plan's figures, jsonb) and when it was made and last
made active.

The stable names are views. The chunk view reads the active generation's table; a cutover
replaces it in the transaction that changes the states. ``embedding::vector`` gives its column
no size, so a view of another size replaces it in place (``CREATE OR REPLACE``: views built on
it stay valid), and the planner still uses the table's vector index through it. The documents
and requests views have a branch per generation that reads only while the registry names it
active: a cutover changes them by changing the states alone. Only one view is replaced per
transaction, so a reader joining two of them (in either order) never deadlocks with a cutover;
the branches are added before a cutover and removed before a drop, in transactions of their
own (an inactive branch reads nothing, so adding or removing one changes no answer).
"""

from __future__ import annotations

from collections.abc import Sequence

from embedstream.stores.pgschema import CHUNK_COLUMNS, REQUEST_COLUMNS, GenerationTables, Names

_GENERATION_COLUMNS = "id, model, dimensions, size, chunking, state, plan"


def create_registry(names: Names) -> list[str]:
    return [
        f"CREATE SCHEMA IF NOT EXISTS {names.schema}",
        f"""CREATE TABLE IF NOT EXISTS {names.registry} (
            id text PRIMARY KEY, model text NOT NULL, dimensions int, size int,
            chunking jsonb NOT NULL,
            state text NOT NULL CHECK (state IN ('active', 'new', 'old')), plan jsonb,
            created_at timestamptz NOT NULL DEFAULT now(), activated_at timestamptz)""",
        f"CREATE UNIQUE INDEX IF NOT EXISTS {names.registry_state} ON {names.registry} (state)",
    ]


def find_layout(names: Names) -> str:
    """Which of the registry, the stable chunk name (and its kind) and a store from before
    generations (its ``_meta`` table) exist."""
    return f"""SELECT to_regclass('{names.registry}'), to_regclass('{names.legacy_meta}'),
        (SELECT relkind FROM pg_class WHERE oid = to_regclass('{names.chunks}'))"""


def read_generations(names: Names) -> str:
    return f"SELECT {_GENERATION_COLUMNS} FROM {names.registry} ORDER BY created_at, id"


def insert_generation(names: Names) -> str:
    return f"""INSERT INTO {names.registry} ({_GENERATION_COLUMNS}, activated_at)
        VALUES (%s, %s, %s, %s, %s, %s, %s, CASE WHEN %s::boolean THEN now() END)
        ON CONFLICT DO NOTHING"""


def set_size(names: Names) -> str:
    """A generation's first vector gives its size (if no other writer did first)."""
    return f"UPDATE {names.registry} SET size = %s WHERE id = %s AND size IS NULL"


def set_state(names: Names) -> str:
    """Parameters: the state, whether it is made active now, the id."""
    return f"""UPDATE {names.registry} SET state = %s,
        activated_at = CASE WHEN %s::boolean THEN now() ELSE activated_at END WHERE id = %s"""


def forget_generation(names: Names) -> str:
    return f"DELETE FROM {names.registry} WHERE id = %s"


def point_chunks(names: Names, tables: GenerationTables) -> str:
    """The stable chunk name onto ``tables``: the active generation's, its vector index used
    through the view (a cutover or rollback replaces it in the transaction that changes the
    states)."""
    columns = ", ".join(
        "embedding::vector AS embedding" if c == "embedding" else c for c in CHUNK_COLUMNS
    )
    return f"""CREATE OR REPLACE VIEW {names.chunks} AS
        SELECT {columns}, searchable, written_at FROM {tables.chunks}"""


def branch_views(names: Names, generations: Sequence[GenerationTables]) -> list[str]:
    """The stable documents and requests names: a branch per generation with tables, each read
    only while the registry says that generation is active. The registry is read in the
    reader's own snapshot, so a statement sees the states before a cutover or after it (the
    same as the chunk view's), and a cutover changes these views not at all."""

    def branches(columns: str, table: str) -> str:
        return "\n        UNION ALL\n        ".join(
            f"SELECT {columns} FROM {getattr(g, table)} WHERE (SELECT id FROM {names.registry} "
            f"WHERE state = 'active') = '{g.generation_id}'"
            for g in generations
        )

    documents = ("doc_id, complete_version, complete_count, latest_version, incomplete_version, "
                 "incomplete_count, missing, metadata, updated_at")  # fmt: skip
    requests = ", ".join(
        "embedding::vector AS embedding" if c == "embedding" else c for c in REQUEST_COLUMNS
    )
    return [
        f"CREATE OR REPLACE VIEW {names.documents} AS {branches(documents, 'documents')}",
        f"CREATE OR REPLACE VIEW {names.requests} AS "
        f"{branches(requests + ', written_at', 'requests')}",
    ]


def drop_tables(tables: GenerationTables) -> list[str]:
    return [
        f"DROP TABLE IF EXISTS {tables.chunks}",
        f"DROP TABLE IF EXISTS {tables.documents}",
        f"DROP TABLE IF EXISTS {tables.requests}",
        f"DROP TABLE IF EXISTS {tables.live}",
    ]


def index_state(tables: GenerationTables) -> str:
    """Whether the generation's vector index exists, and whether it is valid (a build
    ``CONCURRENTLY`` that was interrupted leaves an invalid one behind)."""
    return f"""SELECT i.indisvalid FROM pg_index i
        WHERE i.indexrelid = to_regclass('{tables.qualified_index}')"""


def drop_index(tables: GenerationTables) -> str:
    return f"DROP INDEX CONCURRENTLY IF EXISTS {tables.qualified_index}"


def lock_timeout(seconds: float) -> str:
    return f"SET LOCAL lock_timeout = '{int(seconds * 1000)}ms'"


def counts(tables: GenerationTables) -> str:
    """Documents, documents whose latest version is complete, chunk rows, plain results, the
    provider tokens of the vectors held (0 for those the cache answered), and the chunk rows'
    tokens estimated as a plan estimates them (`core/reembed.py`: a third of the text's UTF-8
    bytes, rounded up, plus one; the span's length without the text)."""
    size = "coalesce(octet_length(text), span_end - span_start)"
    return f"""SELECT
        (SELECT count(*) FROM {tables.documents}),
        (SELECT count(*) FROM {tables.documents}
            WHERE complete_version IS NOT DISTINCT FROM latest_version),
        (SELECT count(*) FROM {tables.chunks}),
        (SELECT count(*) FROM {tables.requests}),
        (SELECT coalesce(sum(tokens), 0) FROM {tables.chunks})
            + (SELECT coalesce(sum(tokens), 0) FROM {tables.requests}),
        (SELECT coalesce(sum(({size} + 2) / 3 + 1), 0) FROM {tables.chunks})"""


def missing_documents(active: GenerationTables, other: GenerationTables) -> str:
    """Documents ``other`` lacks: not at the active generation's latest version, or not
    complete there where the active generation is (a version whose chunks failed for good in
    both counts as caught up); then documents ``other`` has and the active one does not
    (deleted since). Their counts, and the first ``%s`` of each, in doc_id order."""
    lacking = lacking_documents(active, other)
    extra = f"""SELECT b.doc_id FROM {other.documents} b
        WHERE NOT EXISTS (SELECT 1 FROM {active.documents} a WHERE a.doc_id = b.doc_id)"""
    return f"""SELECT (SELECT count(*) FROM ({lacking}) l), (SELECT count(*) FROM ({extra}) e),
        ARRAY(SELECT doc_id FROM ({lacking}) l ORDER BY doc_id LIMIT %s),
        ARRAY(SELECT doc_id FROM ({extra}) e ORDER BY doc_id LIMIT %s)"""


def lacking_documents(active: GenerationTables, other: GenerationTables) -> str:
    """The doc_ids ``other`` lacks (see :func:`missing_documents`), in no order."""
    return f"""SELECT a.doc_id FROM {active.documents} a
        LEFT JOIN {other.documents} b ON b.doc_id = a.doc_id
        WHERE b.latest_version IS DISTINCT FROM a.latest_version
            OR (a.complete_version = a.latest_version
                AND b.complete_version IS DISTINCT FROM a.latest_version)"""


def current_chunks(tables: GenerationTables, *, with_text: bool) -> str:
    """Every document of a generation and the chunk rows of its latest version, in doc_id and
    chunk_seq order (a document without such rows comes once, with nulls): doc_id,
    chunk_count, span_start, span_end, the text's UTF-8 length, and the text if asked."""
    text = "c.text" if with_text else "NULL::text"
    return f"""SELECT d.doc_id, c.chunk_count, c.span_start, c.span_end, octet_length(c.text),
            {text}
        FROM {tables.documents} d
        LEFT JOIN {tables.chunks} c ON c.doc_id = d.doc_id AND c.version = d.latest_version
        ORDER BY d.doc_id, c.chunk_seq"""


def text_kept(tables: GenerationTables) -> str:
    """Whether every chunk row keeps its text (``include_chunk_text``)."""
    return f"SELECT NOT EXISTS (SELECT 1 FROM {tables.chunks} WHERE text IS NULL)"
