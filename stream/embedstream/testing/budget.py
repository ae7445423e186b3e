"""A fleet budget store in memory, for tests of the shared budget (`engine/budget_shared.py`):
`core/ledger.FleetLedger` behind the store's interface, on a clock the test controls, with an
outage (``down``) and slowness (``delay_s``) to switch on. Every member of the test's fleet
holds a :meth:`MemoryBudgetStore.link` to one ledger, as processes hold connections to one
Redis."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Collection, Mapping

from embedstream.core.ledger import AskTerms, Denied, FleetLedger, Granted, Roster, Snapshot


class MemoryBudgetStore:
    def __init__(self, clock_ms: Callable[[], int]) -> None:
        self.ledger = FleetLedger()
        self._clock_ms = clock_ms
        self.down = False  # every operation fails at once (Redis stopped)
        self.delay_s = 0.0  # every operation answers this late (Redis slow)
        self.round_trips = 0
        self._released = asyncio.Condition()
        self._published: list[str] = []  # every lease released, in order

    def link(self) -> MemoryBudgetLink:
        """One member's connection to this store."""
        return MemoryBudgetLink(self)

    async def _enter(self) -> int:
        self.round_trips += 1
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.down:
            raise ConnectionRefusedError("the budget store is down")
        return self._clock_ms()

    async def _publish(self, lease: str) -> None:
        async with self._released:
            self._published.append(lease)
            self._released.notify_all()


class MemoryBudgetLink:
    def __init__(self, store: MemoryBudgetStore) -> None:
        self._store = store
        self.closed = False

    async def ask(self, member: str, lease: str, tokens: int, terms: AskTerms) -> Granted | Denied:
        now = await self._store._enter()
        return self._store.ledger.ask(now, member, lease, tokens, terms)

    async def release(self, lease: str) -> Snapshot:
        now = await self._store._enter()
        snapshot = self._store.ledger.release(now, lease)
        await self._store._publish(lease)
        return snapshot

    async def block(self, for_ms: int) -> None:
        now = await self._store._enter()
        self._store.ledger.block(now, for_ms)
        await self._store._publish(f"gate|{for_ms}")

    async def heartbeat(
        self,
        member: str,
        role: str,
        ttl_ms: int,
        leases: Collection[str],
        active: Collection[int],
        caps: Mapping[int, int],
    ) -> Roster:
        now = await self._store._enter()
        return self._store.ledger.heartbeat(now, member, role, ttl_ms, leases, active, caps)

    async def leave(self, member: str) -> None:
        await self._store._enter()
        self._store.ledger.leave(member)

    async def releases(self) -> AsyncIterator[str]:
        store = self._store
        if store.down:
            raise ConnectionRefusedError("the budget store is down")
        seen = len(store._published)
        while True:
            async with store._released:
                while len(store._published) <= seen:
                    await store._released.wait()
                fresh, seen = store._published[seen:], len(store._published)
            for lease in fresh:
                yield lease

    async def close(self) -> None:
        self.closed = True
