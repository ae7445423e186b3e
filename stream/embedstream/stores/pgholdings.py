"""What a generation being filled already holds, as a processor's backfill asks it: one query
per poll of the documents topic (`core/backfill_skips.py` decides from the answer which
versions need no embedding).

A connection of its own per backfill (the processor's registry reads run beside it). The
generation's tables are made at its first vector: until then it holds nothing, and the
question is not asked of tables that do not exist.
"""

from __future__ import annotations

from collections.abc import Sequence

from embedstream.core.backfill_skips import Held
from embedstream.stores import pgschema as sql
from embedstream.stores.pgdriver import PgSession
from embedstream.stores.pgschema import PgStoreConfig


class GenerationHoldings:
    """Asks one generation which of some documents it holds complete, or the live stream wrote."""

    def __init__(self, config: PgStoreConfig, generation_id: str) -> None:
        self._tables = sql.Names(config.schema, config.table).of(generation_id)
        self._session = PgSession(config.dsn, config.connect_timeout_s)
        self._made = False  # its tables exist (they are never dropped while it is filled)

    async def held(self, doc_ids: Sequence[str]) -> Held:
        """The store's answer for ``doc_ids``; a :class:`StoreError` if it cannot be read."""
        if not doc_ids:
            return Held()
        async with self._session.transaction("read what the new generation holds"):
            if not self._made:
                found = await self._session.fetchone(
                    "SELECT to_regclass(%s) IS NOT NULL", (self._tables.live,)
                )
                self._made = found is not None and bool(found[0])
                if not self._made:
                    return Held()
            rows = await self._session.fetchall(
                sql.documents_in_generation(self._tables), (list(doc_ids),)
            )
        complete = {row[0]: row[1] for row in rows if row[1] is not None}
        return Held(complete, frozenset(row[0] for row in rows if row[2]))

    async def close(self) -> None:
        await self._session.close()
