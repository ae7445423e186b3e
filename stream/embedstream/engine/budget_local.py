"""The provider budget of a process alone: the governor's rule, decided at once.

Every call is admitted by the batcher's plan (`Governor.pick`), so the lease is given at the
cut, with the RPM/TPM pace as its ``go_in_s``; but a call of a lane below an active one,
when the buckets are short of it, reserves nothing and waits for them to hold it whole
(:meth:`Governor.room_wait`), so the upper lane's calls never queue behind its tokens.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

from embedstream.core.budget import Lease, LeaseWait
from embedstream.core.governor import Governor
from embedstream.core.lanes import Priority
from embedstream.errors import EmbedStreamError


class LocalBudget:
    def __init__(self, governor: Governor) -> None:
        self._governor = governor

    @property
    def plan(self) -> Governor:
        return self._governor

    def admit(self, lane: Priority, inputs: int, tokens: int) -> Lease | None:
        self._governor.started(lane)
        if self._governor.room_wait(lane, tokens) > 0:
            return None  # below an active lane, the pace short: asked again until it fits
        return Lease(lane, go_in_s=self._governor.reserve(tokens))

    async def ask(self, lane: Priority, inputs: int, tokens: int) -> Lease | LeaseWait:
        wait = self._governor.room_wait(lane, tokens)
        if wait > 0:
            return LeaseWait(wait, "rates")
        return Lease(lane, go_in_s=self._governor.reserve(tokens))

    async def woken(self, wait: LeaseWait) -> None:
        await asyncio.sleep(wait.seconds)

    def release(self, lane: Priority, lease: Lease | None, oldest_s: float | None) -> None:
        self._governor.finished(lane, oldest_s)

    def succeeded(self, latency_s: float, headers: Mapping[str, str]) -> None:
        self._governor.on_success(latency_s, headers)

    def failed(self, error: EmbedStreamError) -> None:
        self._governor.on_failure(error)

    def counted(self, estimated_tokens: int, reported_tokens: int) -> None:
        self._governor.calibration.observe(estimated_tokens, reported_tokens)

    def hold(self, seconds: float) -> None:
        self._governor.hold(seconds)

    def on_change(self, wake: Callable[[], None]) -> None:
        return None  # only this process's own calls move this budget: the batcher sees them

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None
