"""Which failures cost an item one of its `max_attempts`: an outage's must not.

Found by the outage e2e test (`--max-attempts 2`, the provider stopped): one item was
dead-lettered. Its first failure counted (the provider had served a call within the second),
and then a call sent *before* that failure was answered *after* it (a stopping server
finishes what it accepted). Taken for "the provider served someone meanwhile", that answer
made the item's second failure count too, its last attempt spent on the outage.
"""

from __future__ import annotations

import asyncio

from embedstream.engine.backend import BatchCall, BatchOutcome
from embedstream.engine.client import BatchingClient
from embedstream.errors import Reason, TransientError
from embedstream.testing import eventually, vector_for


class StoppingProvider:
    """`warm` answers; `slow` is accepted and answered only once let go; `victim` is refused
    (connection) until `back` is set, as everything new is while the provider stops."""

    def __init__(self) -> None:
        self.let_slow_go = asyncio.Event()
        self.back = asyncio.Event()
        self.refused: list[str] = []

    async def embed(self, call: BatchCall) -> BatchOutcome:
        texts = list(call.texts)
        if texts == ["slow"]:
            await self.let_slow_go.wait()
        elif "victim" in texts and not self.back.is_set():
            self.refused.append("victim")
            raise TransientError(Reason.CONNECTION, "cannot reach the provider: refused")
        return BatchOutcome([vector_for(t) for t in texts], 1, len(texts), 0.001)

    async def close(self) -> None:
        return None


async def test_an_answer_to_a_call_sent_before_the_failure_spends_no_attempt() -> None:
    provider = StoppingProvider()
    async with BatchingClient(
        provider, max_attempts=2, max_batch_size=1, max_concurrency=4, max_wait_ms=1,
        retry_backoff_base_ms=200,
    ) as client:  # fmt: skip
        await client.embed("warm")  # the provider served a call just now
        slow = asyncio.ensure_future(client.embed("slow"))
        victim = asyncio.ensure_future(client.embed("victim"))
        await eventually(lambda: len(provider.refused) >= 1)  # attempt 1: counted
        provider.let_slow_go.set()  # sent before that failure, answered after it
        assert await slow == vector_for("slow")
        await eventually(lambda: len(provider.refused) >= 2)  # the retry: still refused
        provider.back.set()
        assert await asyncio.wait_for(victim, 30) == vector_for("victim")
