"""A process alone orders its lanes at the RPM/TPM pace as at the slots (engine/budget_local.py,
`Governor.room_wait`): a low call cut while high is active and the buckets are short of it
reserves nothing and waits for them, so the next high call goes at once instead of queuing
behind the low call's tokens."""

from __future__ import annotations

from embedstream.core.budget import Lease, LeaseWait
from embedstream.core.governor import Governor
from embedstream.core.lanes import Priority
from embedstream.engine.budget_local import LocalBudget


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _budget(clock: Clock) -> tuple[Governor, LocalBudget]:
    governor = Governor(max_concurrency=8, clock=clock, tpm=6000.0)  # 100 tokens a second
    return governor, LocalBudget(governor)


def test_with_no_lane_above_a_call_reserves_its_tokens_and_waits_in_the_queue() -> None:
    clock = Clock()
    governor, budget = _budget(clock)
    governor.saw(Priority.LOW)
    first = budget.admit(Priority.LOW, 100, 6000)  # the whole minute's burst
    assert isinstance(first, Lease) and first.go_in_s == 0
    second = budget.admit(Priority.LOW, 10, 500)
    assert isinstance(second, Lease) and second.go_in_s == 5.0  # behind the debt, FIFO


async def test_below_an_active_lane_a_call_waits_unreserved_and_the_upper_lane_goes_first() -> None:
    clock = Clock()
    governor, budget = _budget(clock)
    budget.admit(Priority.LOW, 100, 5800)  # leaves 200 tokens
    governor.saw(Priority.HIGH)  # a high item is waiting
    assert budget.admit(Priority.LOW, 100, 1000) is None  # short: asked again, nothing reserved
    wait = await budget.ask(Priority.LOW, 100, 1000)
    assert isinstance(wait, LeaseWait) and (wait.reason, wait.seconds) == ("rates", 8.0)
    high = budget.admit(Priority.HIGH, 4, 150)
    assert isinstance(high, Lease) and high.go_in_s == 0  # not behind the low call's tokens
    clock.now += 9.0
    governor.saw(Priority.HIGH)  # high still active: 950 tokens, short of the 1,000
    again = await budget.ask(Priority.LOW, 100, 1000)
    assert isinstance(again, LeaseWait) and round(again.seconds, 6) == 0.5
    clock.now += 0.5
    lease = await budget.ask(Priority.LOW, 100, 1000)  # whole now: it goes, owing nothing
    assert isinstance(lease, Lease) and lease.go_in_s == 0
    assert governor.in_flight == 3  # every admitted call holds its slot, waiting or not
    clock.now += 5.0  # high quiet past its recent window: low queues in the FIFO again
    queued = budget.admit(Priority.LOW, 100, 2000)
    assert isinstance(queued, Lease) and round(queued.go_in_s, 6) == 15.0


def test_the_pace_counts_tokens_as_the_provider_reports_them() -> None:
    """Our estimates run about twice the provider's count: once a call reports its usage,
    the pace reserves the calibrated count (`core/calibration.py`), so a TPM budget is spent
    as the provider counts it."""
    clock = Clock()
    governor, budget = _budget(clock)
    governor.saw(Priority.LOW)
    budget.counted(2000, 1000)  # a call estimated at 2,000 tokens, counted 1,000
    first = budget.admit(Priority.LOW, 100, 8000)  # counts 4,200: within the minute's burst
    assert isinstance(first, Lease) and first.go_in_s == 0
    second = budget.admit(Priority.LOW, 100, 4000)  # 2,100 more: 300 owed at 100 a second
    assert isinstance(second, Lease) and round(second.go_in_s, 6) == 3.0
