"""Each text paid once, at the cut of a call: the jobs of a batch whose text the cache learned
since they were looked up, or another call is sending right now, are not sent again.

Jobs are looked up in the cache as they arrive (`engine/cache.py`), but a miss may wait in the
batcher while a call with the same text runs: another version of a document sharing the
chunk, a document's boilerplate, the live lanes and a migration's backfill embedding the same
chunks after a restart. When a call is cut, its jobs are looked up again (the in-process tier,
as no new access: each was counted when it arrived) and each remaining text is claimed while
its call runs (`engine/inflight.py`; across processes through Redis). A job whose text another
call holds waits for that call without a slot of its own (announced to the batcher, so a
drain waits for it): it gets the vector, or, if that call ends without one, joins the batcher
again and is cut anew. Only texts this call claimed are sent. A text is then embedded once per
model and dimensions (the cache key) however many calls, lanes or versions want it at once.

Counted once per job: a hit (by tier; ``in_flight``: another call's vector) or, when sent, a
miss.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from embedstream.core.lanes import BucketKey, Pending, Priority
from embedstream.engine.cache import EmbeddingCache
from embedstream.engine.callers import JobQueue
from embedstream.engine.inflight import Answer, Mine, NotSent
from embedstream.engine.jobs import Hit, Job, Outcomes
from embedstream.wire import Vector
from embedstream.wire.openai import Input

J = TypeVar("J", bound=Job)

IN_FLIGHT = "in_flight"  # the hits' tier label of a vector another call embedded


@dataclass(frozen=True, slots=True)
class Sending(Generic[J]):
    """What a call sends: its jobs, and the texts it claimed for them (`Mine`)."""

    jobs: list[Pending[J]]
    claims: Sequence[Mine] = ()


class TextSharing(Protocol[J]):
    """What the batch-call path asks at the cut of a call and after it."""

    async def to_send(self, key: BucketKey, batch: Sequence[Pending[J]]) -> Sending[J]: ...

    async def store(
        self, key: BucketKey, texts: Sequence[Input], vectors: Sequence[Vector]
    ) -> None: ...

    def ended(self, sending: Sending[J], *, abandoned: bool) -> None: ...

    def abandon(self) -> None: ...


class NoSharing:
    """Without a cache: every job is sent, nothing is kept."""

    async def to_send(self, key: BucketKey, batch: Sequence[Pending[J]]) -> Sending[J]:
        return Sending(list(batch))

    async def store(
        self, key: BucketKey, texts: Sequence[Input], vectors: Sequence[Vector]
    ) -> None:
        return None

    def ended(self, sending: Sending[J], *, abandoned: bool) -> None:
        return None

    def abandon(self) -> None:
        return None


NO_SHARING = NoSharing()


class SharedTexts(Generic[J]):
    """The batch-call path's look-up at the cut of each call (`engine/calls.py`)."""

    def __init__(
        self,
        cache: EmbeddingCache,
        outcomes: Outcomes[J],
    ) -> None:
        self._cache = cache
        self._outcomes = outcomes
        self._queue: JobQueue[J] | None = None

    def attach(self, queue: JobQueue[J]) -> None:
        """The batcher jobs wait in (built after the call path, which it needs)."""
        self._queue = queue

    async def to_send(self, key: BucketKey, batch: Sequence[Pending[J]]) -> Sending[J]:
        """The part of a cut batch this call sends (its texts claimed until `ended`); the
        others are answered now, or when the call sending their text ends."""
        cache = self._cache
        names = [cache.name_of(key, p.payload.input) for p in batch]
        stored = cache.peek(names)
        asked = list(dict.fromkeys(n for n, data in zip(names, stored, strict=True) if not data))
        # Online and high jobs wait only for calls of this process: another's claim may be a
        # process killed mid-call, whose claim holds until its time to live.
        shared = cache.shared_usable and key.priority >= Priority.LOW
        claimed = await cache.in_flight.claim(asked, shared=shared)
        claims = dict(zip(asked, claimed, strict=True))
        send: list[Pending[J]] = []
        hits: dict[str, list[Hit[J]]] = {}
        waiting: dict[asyncio.Future[Answer], list[Pending[J]]] = {}
        for pending, name, data in zip(batch, names, stored, strict=True):
            found = data if data is not None else claims[name]
            tier = "memory" if data is not None else "redis"
            if isinstance(found, Mine):
                send.append(pending)
            elif isinstance(found, bytes):
                hit = cache.answer(pending.payload, key, found)
                if hit is None:
                    send.append(pending)  # unreadable: never served (counted as corrupt)
                else:
                    hits.setdefault(tier, []).append(hit)
            elif isinstance(found, asyncio.Future):
                waiting.setdefault(found, []).append(pending)
        for found, pendings in waiting.items():
            self._wait(key, pendings, found)
        self._answer(hits, misses=len(send))
        return Sending(send, [c for c in claimed if isinstance(c, Mine)])

    async def store(
        self, key: BucketKey, texts: Sequence[Input], vectors: Sequence[Vector]
    ) -> None:
        """A call's vectors: into the cache, and to whoever waits for them."""
        await self._cache.store(key, texts, vectors)

    def ended(self, sending: Sending[J], *, abandoned: bool) -> None:
        """The call is over: the texts it claimed and did not embed go to whoever waits for
        them (sent by them, or abandoned with the call)."""
        why = NotSent.ABANDONED if abandoned else NotSent.RETRY
        self._cache.in_flight.release(sending.claims, why)

    def abandon(self) -> None:
        """Shutdown gives up on texts awaited from other processes."""
        self._cache.in_flight.abandon_waits()

    def _wait(
        self, key: BucketKey, pendings: list[Pending[J]], found: asyncio.Future[Answer]
    ) -> None:
        queue = self._queue
        assert queue is not None, "SharedTexts.attach() was never called"
        for _ in pendings:
            queue.expect()
        found.add_done_callback(functools.partial(self._joined, key, pendings))

    def _joined(
        self, key: BucketKey, pendings: list[Pending[J]], found: asyncio.Future[Answer]
    ) -> None:
        """The call these jobs waited for ended."""
        queue = self._queue
        assert queue is not None
        answer = found.result()
        hits: list[Hit[J]] = []
        again: list[Pending[J]] = []
        for pending in pendings:
            hit = None
            if isinstance(answer, bytes):
                hit = self._cache.answer(pending.payload, key, answer)
            if hit is None:
                again.append(pending)
            else:
                hits.append(hit)
        if answer is NotSent.ABANDONED:
            self._outcomes.abandoned([p.payload for p in again])
            for _ in again:
                queue.forget_expected()
            again = []
        for _ in hits:
            queue.forget_expected()
        for pending in again:  # cut anew: sent by one of them, or found then
            queue.add_expected(key, pending.tokens, pending.payload)
        self._answer({IN_FLIGHT: hits} if hits else {}, misses=0)

    def _answer(self, hits: dict[str, list[Hit[J]]], *, misses: int) -> None:
        answered = [hit for tier in hits.values() for hit in tier]
        if answered:
            self._outcomes.answered(answered)
        saved = sum(hit.job.tokens for hit in answered)
        counts = {tier: len(found) for tier, found in hits.items()}
        if counts or misses:
            self._cache.count(counts, misses, saved)
