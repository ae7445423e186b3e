"""In-process callers of the engine: the way in (a request's future, looked up in the cache,
then batched) and the way out (the outcomes that settle each future).

`BatchingClient` and the online lane (`embedstream.online`) both queue their callers' texts
here. Results and dead letters resolve the awaiting caller's future; a retry waits in memory
for its delay and then rejoins the batcher; closing fails whatever is still waiting. With an
embedding cache, the requests submitted in one event-loop turn (one `embed()` of a list, or
many concurrent single-text calls) are looked up together before they are batched.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar, cast

from embedstream.core.lanes import BucketKey, Source
from embedstream.engine.cache import EmbeddingCache
from embedstream.engine.jobs import Embedded, Hit, Job, Outcomes
from embedstream.errors import EmbedStreamError, Reason, TransientError
from embedstream.wire import Vector

log = logging.getLogger(__name__)

T_contra = TypeVar("T_contra", contravariant=True)
J = TypeVar("J", bound=Job)


@dataclass(slots=True, eq=False)
class RequestUsage:
    """What the provider counted for one online request's inputs, as the calls that carried
    them report it (each input its share of its call's usage)."""

    inputs: int = 0  # inputs embedded by a call (not the cache)
    tokens: int = 0  # their shares of those calls' counts
    shared: bool = False  # a call carried another request's inputs too

    def provider_count(self, inputs: int) -> int | None:
        """The provider's count when every one of the ``inputs`` went in calls that carried
        only this request's inputs; None when it is not known (shared calls, the cache)."""
        exact = self.inputs == inputs and not self.shared and self.tokens > 0
        return self.tokens if exact else None


@dataclass(slots=True, eq=False, kw_only=True)
class CallerRequest(Job):
    key: BucketKey
    future: asyncio.Future[Vector]
    usage: RequestUsage | None = None  # its request's, shared by the request's inputs


class JobQueue(Protocol[T_contra]):
    """What callers need of the batcher: a batcher of callers' requests only, or one that
    also takes other jobs (the processor's, where online callers ride beside Kafka work)."""

    def add(self, key: BucketKey, tokens: int, payload: T_contra, source: Source = None) -> None:
        """Buffer one job."""

    def expect(self) -> None:
        """A job will be added later: draining waits for it."""

    def add_expected(self, key: BucketKey, tokens: int, payload: T_contra) -> None:
        """Add a job announced with `expect`."""

    def forget_expected(self) -> None:
        """A job announced with `expect` will not come after all."""


class Callers(Outcomes[CallerRequest]):
    """Outcomes delivered to the awaiting callers; retries wait in memory, then rejoin."""

    def __init__(self) -> None:
        self._batcher: JobQueue[CallerRequest] | None = None
        self._waiting: dict[CallerRequest, asyncio.TimerHandle] = {}

    def attach(self, batcher: JobQueue[CallerRequest]) -> None:
        """The batcher retries rejoin: built after these outcomes, which its caller needs."""
        self._batcher = batcher

    @property
    def batcher(self) -> JobQueue[CallerRequest]:
        if self._batcher is None:
            raise RuntimeError("Callers.attach() was never called")
        return self._batcher

    async def succeeded(
        self, key: BucketKey, done: Sequence[Embedded[CallerRequest]], dimensions: int
    ) -> None:
        usages = {id(embedded.job.usage) for embedded in done}
        for embedded in done:
            job = embedded.job
            if job.usage is not None:
                job.usage.inputs += 1
                job.usage.tokens += embedded.tokens
                job.usage.shared |= len(usages) > 1
            if not job.future.done():  # the caller may have given up
                job.future.set_result(embedded.vector)

    def answered(self, hits: Sequence[Hit[CallerRequest]]) -> None:
        for hit in hits:
            if not hit.job.future.done():
                hit.job.future.set_result(hit.vector)

    async def retry_later(
        self, job: CallerRequest, error: EmbedStreamError, delay_s: float
    ) -> None:
        if job.future.done():  # the caller gave up: nothing to retry for
            return
        self.batcher.expect()
        loop = asyncio.get_running_loop()
        self._waiting[job] = loop.call_later(delay_s, self._rejoin, job)

    def _rejoin(self, job: CallerRequest) -> None:
        del self._waiting[job]
        if job.future.done():
            self.batcher.forget_expected()
        else:
            self.batcher.add_expected(job.key, job.tokens, job)

    async def dead_letter(self, job: CallerRequest, error: EmbedStreamError) -> None:
        if not job.future.done():
            job.future.set_exception(error)

    def abandoned(self, jobs: Sequence[CallerRequest]) -> None:
        for job in jobs:
            if not job.future.done():
                job.future.set_exception(client_closed())

    def waits_for_model(self, job: CallerRequest) -> bool:
        return False  # a caller hears the provider's 404 at once

    def give_up_waiting(self) -> None:
        """Closing: retries still waiting for their delay fail now."""
        for job, handle in list(self._waiting.items()):
            handle.cancel()
            del self._waiting[job]
            self.batcher.forget_expected()
            self.abandoned([job])


class CallerIntake:
    """Queues callers' requests: answered from the cache when it knows them, else batched."""

    def __init__(self, batcher: JobQueue[CallerRequest], cache: EmbeddingCache | None) -> None:
        self._batcher = batcher
        self._cache = cache
        self._to_look_up: list[CallerRequest] = []  # submitted in this loop turn
        self._look_ups: set[asyncio.Task[None]] = set()

    def submit(self, job: CallerRequest) -> None:
        """Queue one checked request; its future resolves to its vector."""
        if self._cache is None:
            self._batcher.add(job.key, job.tokens, job)
            return
        self._batcher.expect()  # draining waits for it: it joins the batcher after its look-up
        if not self._to_look_up:
            asyncio.get_running_loop().call_soon(self._start_look_up)
        self._to_look_up.append(job)

    def cancel_look_ups(self) -> None:
        """Closing gave up: look-ups under way end, their callers fail."""
        for task in self._look_ups:
            task.cancel()

    def _start_look_up(self) -> None:
        jobs, self._to_look_up = self._to_look_up, []
        task = asyncio.create_task(self._look_up(jobs))
        self._look_ups.add(task)
        task.add_done_callback(self._look_ups.discard)

    async def _look_up(self, jobs: list[CallerRequest]) -> None:
        """Answer the jobs the cache knows; the others join the batcher."""
        assert self._cache is not None
        misses = jobs
        try:
            live = [job for job in jobs if not job.future.done()]
            hits, misses = await self._cache.look_up(live, _key_of)
            for hit in hits:
                if not hit.job.future.done():
                    hit.job.future.set_result(hit.vector)
        except asyncio.CancelledError:  # closing gave up on them
            for job in jobs:
                self._batcher.forget_expected()
                if not job.future.done():
                    job.future.set_exception(client_closed())
            raise
        except Exception:  # never strand a caller: an unexpected error sends them all
            log.exception("embedding cache look-up failed; sending %d texts", len(jobs))
            misses = [job for job in jobs if not job.future.done()]
        waiting = set(map(id, misses))
        for job in jobs:
            if id(job) in waiting and not job.future.done():
                self._batcher.add_expected(job.key, job.tokens, job)
            else:
                self._batcher.forget_expected()


class CallersBeside(Outcomes[J | CallerRequest], Generic[J]):
    """The outcomes of an engine shared by other jobs and in-process callers (the processor
    with an online lane): a caller's request is settled by `callers`, any other job by
    `others`. A batch never mixes the two (the online lane has buckets of its own)."""

    def __init__(self, callers: Callers, others: Outcomes[J]) -> None:
        self.callers = callers
        self.others = others

    async def succeeded(
        self, key: BucketKey, done: Sequence[Embedded[J | CallerRequest]], dimensions: int
    ) -> None:
        if done and isinstance(done[0].job, CallerRequest):
            await self.callers.succeeded(
                key, cast(Sequence[Embedded[CallerRequest]], done), dimensions
            )
        else:
            await self.others.succeeded(key, cast(Sequence[Embedded[J]], done), dimensions)

    def answered(self, hits: Sequence[Hit[J | CallerRequest]]) -> None:
        callers = [h for h in hits if isinstance(h.job, CallerRequest)]
        others = [h for h in hits if not isinstance(h.job, CallerRequest)]
        self.callers.answered(cast(list[Hit[CallerRequest]], callers))
        self.others.answered(cast(list[Hit[J]], others))

    async def retry_later(
        self, job: J | CallerRequest, error: EmbedStreamError, delay_s: float
    ) -> None:
        if isinstance(job, CallerRequest):
            await self.callers.retry_later(job, error, delay_s)
        else:
            await self.others.retry_later(job, error, delay_s)

    async def dead_letter(self, job: J | CallerRequest, error: EmbedStreamError) -> None:
        if isinstance(job, CallerRequest):
            await self.callers.dead_letter(job, error)
        else:
            await self.others.dead_letter(job, error)

    def waits_for_model(self, job: J | CallerRequest) -> bool:
        if isinstance(job, CallerRequest):
            return self.callers.waits_for_model(job)
        return self.others.waits_for_model(job)

    def abandoned(self, jobs: Sequence[J | CallerRequest]) -> None:
        self.callers.abandoned([j for j in jobs if isinstance(j, CallerRequest)])
        self.others.abandoned([j for j in jobs if not isinstance(j, CallerRequest)])


def client_closed() -> TransientError:
    return TransientError(Reason.TIMEOUT, "client closed before the provider answered")


def _key_of(job: CallerRequest) -> BucketKey:
    return job.key
