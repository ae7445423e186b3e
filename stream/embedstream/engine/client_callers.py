"""The callers' side of `BatchingClient`: each request's future, and the outcomes that settle it.

Results and dead letters resolve the awaiting caller's future; a retry waits in memory for
its delay and then rejoins the batcher; closing fails whatever is still waiting.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from embedstream.core.lanes import BucketKey
from embedstream.engine.batcher import Batcher
from embedstream.engine.jobs import Embedded, Job, Outcomes
from embedstream.errors import EmbedStreamError, Reason, TransientError
from embedstream.wire import Vector


@dataclass(slots=True, eq=False, kw_only=True)
class CallerRequest(Job):
    key: BucketKey
    future: asyncio.Future[Vector]


class Callers(Outcomes[CallerRequest]):
    """Outcomes delivered to the awaiting callers; retries wait in memory, then rejoin."""

    def __init__(self) -> None:
        self._batcher: Batcher[CallerRequest] | None = None
        self._waiting: dict[CallerRequest, asyncio.TimerHandle] = {}

    def attach(self, batcher: Batcher[CallerRequest]) -> None:
        """The batcher retries rejoin: built after these outcomes, which its caller needs."""
        self._batcher = batcher

    @property
    def batcher(self) -> Batcher[CallerRequest]:
        if self._batcher is None:
            raise RuntimeError("Callers.attach() was never called")
        return self._batcher

    async def succeeded(
        self, key: BucketKey, done: Sequence[Embedded[CallerRequest]], dimensions: int
    ) -> None:
        for embedded in done:
            if not embedded.job.future.done():  # the caller may have given up
                embedded.job.future.set_result(embedded.vector)

    async def retry_later(
        self, job: CallerRequest, error: EmbedStreamError, delay_s: float
    ) -> None:
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

    def give_up_waiting(self) -> None:
        """Closing: retries still waiting for their delay fail now."""
        for job, handle in list(self._waiting.items()):
            handle.cancel()
            del self._waiting[job]
            self.batcher.forget_expected()
            self.abandoned([job])


def client_closed() -> TransientError:
    return TransientError(Reason.TIMEOUT, "client closed before the provider answered")
