"""The engine's outage probe: while the provider counts as down, one small call on the
schedule of `core/probe.py`, its answer reported to the provider budget like any call's.

Without it nothing asks a provider that is down whether it is back once no work is held: the
online lane sheds every request with 503 while the provider is down, so `serve` stayed down
for ever after an outage. It runs beside the batcher (`Batcher.companion`) for as long as the
engine does, and sends the shape of the last call the provider served (its model, format and
dimensions) with one short text, so a probe asks nothing the provider was not serving.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from embedstream.core.budget import ProviderBudget
from embedstream.core.governor import OUTAGE_REASONS
from embedstream.core.lanes import BucketKey
from embedstream.core.observer import EngineObserver, NullObserver
from embedstream.core.probe import PROBE_EVERY_S, ProbeSchedule
from embedstream.engine.backend import BatchCall, BatchOutcome
from embedstream.errors import EmbedStreamError, ProviderWideError, Reason

log = logging.getLogger(__name__)

PROBE_TEXT = "embedstream probe"


class OutageProbe:
    def __init__(
        self,
        send: Callable[[BatchCall], Awaitable[BatchOutcome]],
        budget: ProviderBudget,
        key: Callable[[], BucketKey],
        *,
        clock: Callable[[], float],
        wake: Callable[[], None],
        observer: EngineObserver | None = None,
        every_s: float = PROBE_EVERY_S,
    ) -> None:
        """`send`: one call (`BatchCaller.probe`); `key`: the shape to probe with; `wake`:
        told when the provider serves again (the batcher looks at its buckets at once)."""
        self._send = send
        self._budget = budget
        self._governor = budget.plan
        self._key = key
        self._clock = clock
        self._wake = wake
        self._observer = observer or NullObserver()
        self._schedule = ProbeSchedule(every_s)
        self._every_s = every_s

    async def run(self) -> None:
        """Until cancelled: looks every `every_s` whether the provider is down, probes then."""
        while True:
            wait = self._schedule.due_in(self._clock(), down=self._governor.provider_down)
            if wait > 0:
                await asyncio.sleep(min(wait, self._every_s))
                continue
            await self.probe_once()

    async def probe_once(self) -> None:
        """One probe and its answer; the provider counts as answering when the call succeeds,
        or fails for these inputs rather than for everyone (a 400 about the probe's text)."""
        self._schedule.started()
        call = BatchCall.for_bucket(self._key(), [PROBE_TEXT])
        started = time.perf_counter()
        try:
            outcome = await self._send(call)
        except EmbedStreamError as exc:
            latency = time.perf_counter() - started
            self._observer.observe_call(latency, ok=False)
            self._observer.observe_error(type(exc).__name__, exc.reason)
            self._budget.failed(exc)
            answered = not (
                isinstance(exc, ProviderWideError)
                or exc.reason in OUTAGE_REASONS
                or exc.reason == Reason.RATE_LIMITED
            )
            if answered:  # the provider is there, whatever it thinks of the probe's text
                self._budget.succeeded(latency, {})
            self._schedule.answered(self._clock(), ok=answered, retry_after_s=exc.retry_after)
            log.info("probe of a provider that is down: %s (%s)", exc.reason, exc.message)
        else:
            self._observer.observe_call(outcome.latency_s, ok=True)
            self._budget.succeeded(outcome.latency_s, outcome.headers)
            self._schedule.answered(self._clock(), ok=True)
        if not self._governor.provider_down:
            log.info("the provider answers again: calls resume")
            self._wake()
