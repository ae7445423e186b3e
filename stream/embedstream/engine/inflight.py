"""Texts being embedded now, by cache key, so that a text wanted by many calls at the same time
is paid once: a call cut with a text another call is sending waits for that call's vector
(`engine/shared_texts.py`).

Within a process, one map of futures, held by the process's cache (which each engine of the
process shares). Across processes, with ``cache=redis``, a claim beside the vector's key
(`engine/cache_tiers.py`): a process that claims a text sends it, and the vector's write
ends the claim; one that finds another's claim watches Redis (one round trip every
``WATCH_INTERVAL_S`` for all it waits for) until the vector is there, or the claim is gone
without one (a failed call, a process killed: claims expire), and then sends the text itself.
Redis failing or slow means no claim: the text is sent, as without them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Coroutine, Sequence
from enum import Enum
from typing import Any

from embedstream.engine.cache_tiers import ClaimingTier

log = logging.getLogger(__name__)

WATCH_INTERVAL_S = 0.05  # how often a process asks Redis about texts another one is sending


class NotSent(Enum):
    """How a call ended for a text it claimed and did not embed."""

    RETRY = "retry"  # failed (or was never sent): whoever waited sends it
    ABANDONED = "abandoned"  # shutdown gave up on it: so do whoever waited


Answer = bytes | NotSent  # a claimed text's vector (float32 bytes), or why there is none


class Mine:
    """A text the calling call sends: it must `settle` (its call's vectors) or `release` it."""

    __slots__ = ("future", "name")

    def __init__(self, name: str, future: asyncio.Future[Answer]) -> None:
        self.name = name
        self.future = future  # what the other calls of the process wait on


Claimed = Mine | bytes | asyncio.Future[Answer]  # to send, stored meanwhile, or sent elsewhere


class TextsInFlight:
    """The texts this process's calls are sending, and those it waits for from others."""

    def __init__(
        self,
        shared: ClaimingTier | None = None,
        *,
        claim_ttl_s: float = 30.0,
        timeout_s: float = 0.25,
        failed: Callable[[BaseException], None] = lambda exc: None,
    ) -> None:
        """``shared``: Redis, for claims across processes; ``failed``: a round trip to it
        failed or timed out (the cache counts it and pauses Redis)."""
        self._shared = shared
        self._ttl_ms = max(1, int(claim_ttl_s * 1000))
        self._timeout_s = timeout_s
        self._failed = failed
        self._token = uuid.uuid4().hex  # this process's claims
        self._local: dict[str, asyncio.Future[Answer]] = {}  # sent by this process's calls
        self._remote: dict[str, asyncio.Future[Answer]] = {}  # sent by another process
        self._claimed: set[str] = set()  # claims of ours in Redis not yet ended
        self._watcher: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._local) + len(self._remote)

    async def claim(self, names: Sequence[str], *, shared: bool = True) -> list[Claimed]:
        """For each of these distinct names: `Mine` (the calling call sends it), its vector
        (stored by another process meanwhile), or the future of the call sending it.
        ``shared``: claim in Redis and wait for other processes too (False: only for calls
        of this process)."""
        loop = asyncio.get_running_loop()
        found: dict[str, Claimed] = {}
        fresh: list[str] = []
        for name in names:
            waiting = self._local.get(name)
            if waiting is None and shared:
                waiting = self._remote.get(name)
            if waiting is not None:
                found[name] = waiting
            elif name in self._remote:  # another process sends it, but this call will not wait
                found[name] = Mine(name, loop.create_future())  # (nobody waits on this one)
            else:
                future = self._local[name] = loop.create_future()  # others here wait on it
                fresh.append(name)
                found[name] = Mine(name, future)
        if fresh and shared and self._shared is not None:
            await self._claim_shared(fresh, found)
        return [found[name] for name in names]

    async def _claim_shared(self, fresh: list[str], found: dict[str, Claimed]) -> None:
        assert self._shared is not None
        try:
            async with asyncio.timeout(self._timeout_s):
                answers = await self._shared.claim_many(fresh, self._token, self._ttl_ms)
        except (OSError, TimeoutError) as exc:
            self._failed(exc)
            return  # no claims: this process sends them all
        for name, answer in zip(fresh, answers, strict=True):
            if answer is True:
                self._claimed.add(name)
            elif isinstance(answer, bytes):
                self.settle([(name, answer)])  # stored meanwhile; who joined here gets it too
                found[name] = answer
            else:  # another process sends it: watch for its vector
                future = self._local.pop(name)
                self._remote[name] = future
                found[name] = future
        if self._remote and (self._watcher is None or self._watcher.done()):
            self._watcher = asyncio.create_task(self._watch())

    def settle(self, entries: Sequence[tuple[str, bytes]]) -> None:
        """Vectors embedded (or found): whoever waits for them gets them; the claims end
        when the cache's writer stores them in Redis."""
        for name, data in entries:
            self._claimed.discard(name)
            future = self._local.pop(name, None)
            if future is not None and not future.done():
                future.set_result(data)

    def release(self, mine: Sequence[Mine], why: NotSent) -> None:
        """A call ended without these of its texts' vectors (`settle` took the others)."""
        ended = []
        for claim in mine:
            if self._local.get(claim.name) is not claim.future:
                continue  # settled already (and maybe claimed anew by another call)
            del self._local[claim.name]
            claim.future.set_result(why)
            if claim.name in self._claimed:
                self._claimed.discard(claim.name)
                ended.append(claim.name)
        if ended and self._shared is not None:
            self._in_background(self._release_shared(ended))

    def abandon_waits(self) -> None:
        """Shutdown gives up: what waits for another process's vector waits no more."""
        for future in self._remote.values():
            if not future.done():
                future.set_result(NotSent.ABANDONED)
        self._remote.clear()

    async def close(self) -> None:
        self.abandon_waits()
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
        if self._background:
            await asyncio.wait(self._background, timeout=self._timeout_s)

    async def _watch(self) -> None:
        """Until no text is awaited from another process: one round trip a turn for all."""
        assert self._shared is not None
        while self._remote:
            await asyncio.sleep(WATCH_INTERVAL_S)
            names = list(self._remote)
            try:
                async with asyncio.timeout(self._timeout_s):
                    answers = await self._shared.watch_many(names)
            except (OSError, TimeoutError) as exc:
                self._failed(exc)
                answers = [False] * len(names)  # cannot tell: send them here
            for name, answer in zip(names, answers, strict=True):
                if answer is True:
                    continue  # still being sent there
                future = self._remote.pop(name, None)
                if future is not None and not future.done():
                    future.set_result(answer if isinstance(answer, bytes) else NotSent.RETRY)

    async def _release_shared(self, names: list[str]) -> None:
        assert self._shared is not None
        try:
            async with asyncio.timeout(self._timeout_s):
                await self._shared.release_many(names, self._token)
        except (OSError, TimeoutError) as exc:
            log.debug("claims not released (%r): they expire", exc)

    def _in_background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
