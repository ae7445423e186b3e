"""Batches the batch-call path holds back (`engine/calls.py`): how long one waits before it
is sent again and who else waits meanwhile (`Holds`), what it sends then (a probe half, the
other pieces waiting for its answer) and which of its jobs are still wanted at all."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable, Sequence

from embedstream.core.backoff import Backoff
from embedstream.core.budget import ProviderBudget
from embedstream.core.lanes import BucketKey, Pending, Priority
from embedstream.core.model_pauses import ModelPauses
from embedstream.engine.jobs import J
from embedstream.errors import SERVER_ERROR_REASONS, EmbedStreamError, ProviderWideError, Reason

log = logging.getLogger(__name__)

# A held batch asks the provider again at least this often (one call), whatever the retry
# backoff cap: work resumes within seconds of the provider's return, not half a minute.
HOLD_PROBE_MAX_S = 5.0


class Holds:
    def __init__(
        self,
        budget: ProviderBudget,
        backoff: Backoff,
        rng: random.Random,
        clock: Callable[[], float],
    ) -> None:
        self._budget = budget
        self._governor = budget.plan  # what the budget looks like here
        self._backoff = backoff
        self._rng = rng
        self._clock = clock
        self._abandon = asyncio.Event()
        self._paused = ModelPauses()  # models the provider does not serve: their work waits

    @property
    def abandoned(self) -> bool:
        """`abandon` was called: a call ending now is given up with the rest."""
        return self._abandon.is_set()

    def abandon(self) -> None:
        """Stop waiting: every hold ends now, and `wait` answers False."""
        self._abandon.set()

    def paused(self, key: BucketKey) -> bool:
        """Whether the batcher keeps a bucket's items: its model waits for the provider to
        serve it (`core/model_pauses.py`); online callers are answered instead."""
        paused = self._paused
        return (
            bool(paused)
            and key.priority is not Priority.ONLINE
            and paused.paused(key.model, self._clock())
        )

    def asked_by_another(self, exc: EmbedStreamError, key: BucketKey, times: int) -> bool:
        """The provider does not serve the key's model and, this batch being refused for the
        first time (``times``), another held batch of it already asks again: this one need
        not take a call slot too."""
        return exc.reason == Reason.UNKNOWN_MODEL and times == 1 and self.paused(key)

    def served(self, model: str) -> None:
        """A call of ``model`` succeeded."""
        if self._paused:
            self._paused.resume(model)

    async def wait(self, exc: EmbedStreamError, times: int, size: int, model: str) -> bool:
        """Wait until the provider may be called again after the ``times``-th shared failure
        of a batch of ``size`` inputs of ``model``; False if abandoned meanwhile."""
        delay = self._backoff.delay(times, self._rng, exc.retry_after)
        if exc.reason == Reason.UNKNOWN_MODEL:  # this model's work waits, no one else's
            delay = min(delay, HOLD_PROBE_MAX_S)
            self._paused.pause(model, self._clock(), delay)
            log.error("%s; its %d inputs wait (other models' go on), asked again in %.1fs",
                      exc, size, delay)  # fmt: skip
        elif exc.reason == Reason.RATE_LIMITED:
            # The gate already holds everyone until retry-after: wait for it, not longer.
            delay = max(self._governor.blocked_for(), exc.retry_after or 0.0)
        else:
            delay = max(min(delay, HOLD_PROBE_MAX_S), exc.retry_after or 0.0)
            if isinstance(exc, ProviderWideError) or self._governor.provider_down:
                refused = isinstance(exc, ProviderWideError)
                what = "provider refuses calls" if refused else "provider down"
                log.error("%s (%s): %s; retrying in %.1fs", what, exc.reason, exc, delay)
                self._budget.hold(delay)  # nobody else calls meanwhile either
            else:
                # Not known to be down (core/outage.py): the calls sent since this batch first
                # failed are unanswered yet, on a slow provider, or they were served. Only this
                # batch waits: closing the gate here held everyone at each repeat of an input
                # the provider always fails.
                log.info("held a call of %d inputs (%s): no call sent since its first failure "
                         "is answered yet; sent again in %.1fs, no attempt spent", size,
                         exc.reason, delay)  # fmt: skip
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._abandon.wait(), delay)
        return not self._abandon.is_set()


def probe_piece(
    held: list[Pending[J]], waiting: list[list[Pending[J]]], exc: EmbedStreamError
) -> tuple[list[Pending[J]], list[list[Pending[J]]]]:
    """What a held batch sends after its hold, and the pieces that wait for it. After a server
    error, half of what just failed: while every call fails (an outage, or a burst whose every
    call holds an input the provider fails), a poison-free half answers, which a whole batch
    never does; a lone input that failed again waits behind the other pieces, which are not
    held back by it. One call a hold either way: a provider that is down gets no more."""
    if exc.reason not in SERVER_ERROR_REASONS:
        return joined([held, *waiting]), []
    if len(held) > 1:
        middle = len(held) // 2
        return held[:middle], [held[middle:], *waiting]
    pieces = [*waiting, held]
    return pieces[0], pieces[1:]


def still_wanted(
    batch: list[Pending[J]], waiting: list[list[Pending[J]]], keep: Callable[[J], bool]
) -> tuple[list[Pending[J]], list[list[Pending[J]]]]:
    """The held pieces without the jobs nobody wants any more; the first non-empty one next."""
    pieces = [[p for p in piece if keep(p.payload)] for piece in [batch, *waiting]]
    pieces = [piece for piece in pieces if piece]
    return (pieces[0], pieces[1:]) if pieces else ([], [])


def joined(pieces: Sequence[Sequence[Pending[J]]]) -> list[Pending[J]]:
    return [p for piece in pieces for p in piece]
