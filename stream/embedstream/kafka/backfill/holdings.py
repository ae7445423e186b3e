"""The store's answer to the backfill's question, before each poll's documents, of what the
generation being filled already holds of them (`kafka/backfill/feed.py`; the question itself is
`stores/pgholdings.py`'s, reached through :class:`StoreHoldings` since this layer knows no store).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Protocol

from embedstream.core.backfill_skips import Held
from embedstream.errors import EmbedStreamError

log = logging.getLogger(__name__)

HOLDINGS_TIMEOUT_S = 5.0  # the store's answer of what it holds: embed everything without it


class StoreHoldings(Protocol):
    """What the generation being filled holds of some documents (`stores/pgholdings.py`)."""

    async def held(self, doc_ids: Sequence[str]) -> Held: ...

    async def close(self) -> None: ...


class StoreAnswers:
    """What the store says it holds; nothing when it cannot say within ``timeout_s`` (the
    backfill then embeds all it reads, as without the question: never held up by the store)."""

    def __init__(
        self,
        holdings: StoreHoldings | None,
        generation_id: str,
        timeout_s: float = HOLDINGS_TIMEOUT_S,
    ) -> None:
        self._holdings = holdings
        self._generation_id = generation_id
        self._timeout_s = timeout_s
        self.failing = False  # said once, until it answers again

    async def held(self, doc_ids: Sequence[str]) -> Held:
        if self._holdings is None or not doc_ids:
            return Held()
        try:
            held = await asyncio.wait_for(self._holdings.held(doc_ids), self._timeout_s)
        except (EmbedStreamError, OSError, TimeoutError) as exc:
            if not self.failing:
                log.warning("cannot ask the store what generation %s holds (%r); the backfill "
                            "embeds every document it reads", self._generation_id, exc)  # fmt: skip
            self.failing = True
            return Held()
        if self.failing:
            log.info("the store says again what generation %s holds", self._generation_id)
        self.failing = False
        return held

    async def close(self) -> None:
        if self._holdings is not None:
            await self._holdings.close()
