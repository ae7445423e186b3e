"""PostgreSQL through psycopg 3 (async) and the pgvector adapter: the only module that imports
either. :class:`PgSession` is one autocommit connection with the vector and JSON adapters
registered, reconnected when it breaks; every driver error leaves it as a
:class:`StoreError` whose message names what was being done and never the password."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

import orjson
import psycopg
from pgvector import Vector
from pgvector.psycopg import register_vector_async
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.json import Jsonb, set_json_dumps

from embedstream.errors import Reason, StoreError
from embedstream.settings import scrub_url
from embedstream.wire.vectors import Vector as WireVector
from embedstream.wire.vectors import base64_dimensions, decode_base64

Row = tuple[Any, ...]

# SQLSTATE classes worth a retry: connection, transaction rollback (serialization, deadlock),
# insufficient resources, operator intervention (shutdown).
_RETRIABLE_CLASSES = ("08", "40", "53", "57")
LOCK_NOT_AVAILABLE = "55P03"  # lock_timeout expired


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


def vector(embedding: WireVector) -> object:
    """A vector as the driver sends it (decoded records hold floats; base64 is decoded)."""
    return Vector(decode_base64(embedding) if isinstance(embedding, str) else embedding)


def vector_size(embedding: WireVector) -> int:
    return base64_dimensions(embedding) if isinstance(embedding, str) else len(embedding)


def jsonb(value: dict[str, Any] | None) -> object:
    return None if value is None else Jsonb(value)


class PgSession:
    """One connection; ``connections`` counts the ones made (per-connection state such as
    temporary tables is gone after a reconnect)."""

    def __init__(self, dsn: str, connect_timeout_s: float) -> None:
        self._dsn = dsn
        self._timeout = max(1, round(connect_timeout_s))
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self.connections = 0

    @property
    def dsn_shown(self) -> str:
        return masked_dsn(self._dsn)

    async def connect(self) -> None:
        if self._conn is not None and not self._conn.closed and not self._conn.broken:
            return
        self._conn = None
        async with self.errors("connect"):
            conn = await psycopg.AsyncConnection.connect(
                self._dsn, autocommit=True, connect_timeout=self._timeout
            )
            try:
                await _create_vector_extension(conn)
                await register_vector_async(conn)
                set_json_dumps(orjson.dumps, conn)
            except BaseException:
                await conn.close()
                raise
        self._conn = conn
        self.connections += 1

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

    def errors(self, doing: str) -> _DriverErrors:
        return _DriverErrors(doing, self._dsn)

    @contextlib.asynccontextmanager
    async def transaction(self, doing: str) -> AsyncIterator[None]:
        """One transaction; a driver error inside becomes a :class:`StoreError`."""
        await self.connect()
        assert self._conn is not None
        async with self.errors(doing), self._conn.transaction():
            yield

    async def execute(self, statement: str, params: Sequence[Any] | dict[str, Any] = ()) -> None:
        await self._connection().execute(statement, params or None)

    async def executemany(self, statement: str, rows: Iterable[Sequence[Any]]) -> None:
        async with self._connection().cursor() as cur:
            await cur.executemany(statement, list(rows))

    async def fetchall(
        self, statement: str, params: Sequence[Any] | dict[str, Any] = ()
    ) -> list[Row]:
        cur = await self._connection().execute(statement, params or None)
        return [tuple(row) for row in await cur.fetchall()]

    async def fetchone(
        self, statement: str, params: Sequence[Any] | dict[str, Any] = ()
    ) -> Row | None:
        cur = await self._connection().execute(statement, params or None)
        row = await cur.fetchone()
        return None if row is None else tuple(row)

    async def stream(
        self, statement: str, params: Sequence[Any] = (), size: int = 2_000
    ) -> AsyncIterator[Row]:
        """Rows of a large query a few thousand at a time (a server-side cursor; inside a
        transaction)."""
        async with self._connection().cursor(name="es_stream") as cur:
            await cur.execute(statement, params or None)
            while rows := await cur.fetchmany(size):
                for row in rows:
                    yield tuple(row)

    async def copy_rows(
        self, statement: str, types: Sequence[str], rows: Iterable[Sequence[Any]]
    ) -> None:
        """``COPY ... FROM STDIN (FORMAT BINARY)`` of ``rows``, typed by ``types``."""
        async with self._connection().cursor() as cur, cur.copy(statement) as copy:
            copy.set_types(list(types))
            for row in rows:
                await copy.write_row(row)

    def _connection(self) -> psycopg.AsyncConnection[Any]:
        if self._conn is None:
            raise StoreError(Reason.STORE_UNAVAILABLE, "not connected", retriable=True)
        return self._conn


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
        reason = Reason.STORE_UNAVAILABLE if retriable else Reason.STORE_FAILED
        if state == LOCK_NOT_AVAILABLE:  # someone holds on: the caller says what to do
            retriable, reason = False, Reason.STORE_LOCKED
        message = _scrub(str(exc).strip().splitlines()[0] if str(exc).strip() else "", self._dsn)
        raise StoreError(
            reason,
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


async def _create_vector_extension(conn: psycopg.AsyncConnection[Any]) -> None:
    """``CREATE EXTENSION IF NOT EXISTS`` is not safe against a second connection doing the
    same at once (PostgreSQL answers the loser with a unique violation): that one has it."""
    with contextlib.suppress(psycopg.errors.UniqueViolation):
        await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
