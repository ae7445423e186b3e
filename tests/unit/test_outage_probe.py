"""A provider that counts as down is asked again, one small call a second, so the engine
serves again within about a second of its return, with or without work held.

Found from outside: after a 3 s outage `embedstream serve` answered 503 for ever. While the
provider counted as down the online lane shed every request at once and the outage needed two
successes to end, so once the callers held during the outage had gone, nothing ever called.

The engine tests run on an event loop in virtual time (`VirtualLoop`): the outage's length and
the probe's pace are timers that take no real time, and the engine reads the same clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
from collections.abc import Awaitable, Callable

import pytest
from embedstream.core.clock import Clock
from embedstream.core.governor import Governor
from embedstream.core.probe import PROBE_EVERY_S, ProbeSchedule
from embedstream.engine.backend import BatchCall, BatchOutcome
from embedstream.engine.client import BatchingClient
from embedstream.engine.probe import PROBE_TEXT
from embedstream.errors import Reason, TransientError, http_reason
from embedstream.testing import eventually, vector_for
from embedstream.testing.virtual_loop import LoopClock, VirtualLoop

# --------------------------------------------------------------------------- the rule


def test_no_probe_while_the_provider_is_up() -> None:
    schedule = ProbeSchedule()
    assert schedule.due_in(0.0, down=False) == math.inf


def test_the_first_probe_comes_one_interval_after_the_provider_went_down() -> None:
    schedule = ProbeSchedule()
    assert schedule.due_in(10.0, down=True) == PROBE_EVERY_S
    assert schedule.due_in(10.4, down=True) == pytest.approx(PROBE_EVERY_S - 0.4)
    assert schedule.due_in(11.0, down=True) == 0.0


def test_one_probe_at_a_time() -> None:
    schedule = ProbeSchedule()
    schedule.due_in(0.0, down=True)
    schedule.started()
    assert schedule.due_in(5.0, down=True) == math.inf  # its answer has not come


@pytest.mark.parametrize(
    ("retry_after_s", "next_in"),
    [(None, PROBE_EVERY_S), (0.2, PROBE_EVERY_S), (7.0, 7.0)],
)
def test_a_failed_probe_waits_an_interval_or_the_providers_retry_after(
    retry_after_s: float | None, next_in: float
) -> None:
    schedule = ProbeSchedule()
    schedule.due_in(0.0, down=True)
    schedule.started()
    schedule.answered(3.0, ok=False, retry_after_s=retry_after_s)
    assert schedule.due_in(3.0, down=True) == pytest.approx(next_in)


def test_a_probe_that_succeeded_while_still_down_is_followed_at_once() -> None:
    schedule = ProbeSchedule()
    schedule.due_in(0.0, down=True)
    schedule.started()
    schedule.answered(2.0, ok=True)  # the outage needs a second success in a row
    assert schedule.due_in(2.0, down=True) == 0.0


def test_an_outage_after_the_provider_came_back_starts_a_schedule_of_its_own() -> None:
    schedule = ProbeSchedule()
    schedule.due_in(0.0, down=True)
    schedule.started()
    schedule.answered(1.0, ok=True)
    assert schedule.due_in(1.1, down=False) == math.inf  # up again
    assert schedule.due_in(50.0, down=True) == PROBE_EVERY_S  # not due from long ago


def test_a_hold_ends_when_the_provider_serves_again() -> None:
    now = [0.0]
    governor = Governor(max_concurrency=4, clock=lambda: now[0])
    for _ in range(3):
        governor.on_failure(TransientError(Reason.CONNECTION, "refused"))
        now[0] += 0.6
    assert governor.provider_down
    governor.hold(5.0)  # a held batch: nobody calls meanwhile
    governor.on_success(0.01, {})
    assert governor.blocked_for() == pytest.approx(5.0)  # one success: still down, still held
    governor.on_success(0.01, {})
    assert not governor.provider_down
    assert governor.blocked_for() == 0.0


# --------------------------------------------------------------------------- the engine


def in_virtual_time(test: Callable[[Clock], Awaitable[None]]) -> None:
    loop = VirtualLoop()
    try:
        loop.run_until_complete(test(LoopClock(loop)))
    finally:
        loop.close()


class ProviderDownUntil:
    """Refuses connections before `back_at` (loop time), answers after."""

    def __init__(self, back_at: float, failure: TransientError) -> None:
        self.back_at = back_at
        self.failure = failure
        self.calls: list[tuple[float, list[object]]] = []

    async def embed(self, call: BatchCall) -> BatchOutcome:
        now = asyncio.get_running_loop().time()
        self.calls.append((now, list(call.texts)))
        await asyncio.sleep(0.01)
        if now < self.back_at:
            raise self.failure
        return BatchOutcome([vector_for(t) for t in call.texts], 1, len(call.texts), 0.01)

    async def close(self) -> None:
        return None


OUTAGES = {
    "connection": TransientError(Reason.CONNECTION, "cannot reach the provider: refused"),
    "503 retry-after 3": TransientError(http_reason(503), "unavailable", retry_after=3.0),
}


@pytest.mark.parametrize("outage", list(OUTAGES), ids=list(OUTAGES))
def test_an_outage_with_nobody_waiting_ends_soon_after_the_provider_is_back(outage: str) -> None:
    in_virtual_time(lambda clock: _outage_then_return(clock, OUTAGES[outage]))


async def _outage_then_return(clock: Clock, failure: TransientError) -> None:
    back_at = 20.0
    provider = ProviderDownUntil(back_at, failure)
    async with BatchingClient(
        provider, max_batch_size=8, max_wait_ms=1, retry_backoff_base_ms=250, clock=clock
    ) as client:  # fmt: skip
        callers = [asyncio.ensure_future(client.embed(f"caller {i}")) for i in range(3)]
        loop = asyncio.get_running_loop()
        await eventually(lambda: client.governor.provider_down, timeout_s=60, poll_s=0.05)
        await asyncio.sleep(3.0)
        for caller in callers:  # they give up: their held call is never sent again
            caller.cancel()
        gone_at = loop.time()
        await asyncio.sleep(1.0)
        await eventually(lambda: client.governor.provider_usable, timeout_s=60, poll_s=0.01)
        usable_at = loop.time()
        assert await client.embed("after") == vector_for("after")
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*callers)
    assert back_at <= usable_at <= back_at + PROBE_EVERY_S + 0.2
    later = [(at, texts) for at, texts in provider.calls if gone_at + 0.5 < at < back_at]
    assert later, "nothing asked the provider during the outage"
    assert all(texts == [PROBE_TEXT] for _, texts in later)  # the gone callers' texts: never
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(later)]
    least_gap = 3.0 if failure.retry_after else PROBE_EVERY_S
    assert min(gaps) >= least_gap - 0.05  # one call a second, or at the Retry-After
