"""Whether the online lane can answer a request within its deadline, judged before it is
queued: a caller the lane cannot serve in time hears so at once (429 with Retry-After, or 503
while the provider is unusable) instead of waiting out its deadline. Pure: the lane's load and
the learned call cost come in.

The estimate is the time until the gate opens (a 429's cooldown, the RPM/TPM buckets), plus
one call latency per wave of calls: the calls the items ahead and the request's own need,
spread over the lane's slots, one more wave while every slot is busy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from embedstream.core.costmodel import CallCost

MIN_RETRY_AFTER_S = 1  # Retry-After is whole seconds; never 0 (an SDK would retry at once)


@dataclass(frozen=True, slots=True)
class LaneLoad:
    """What the online lane faces when a request arrives."""

    queued_items: int  # online items waiting for a call
    in_flight_calls: int  # online calls out now
    slots: int  # calls the lane may have out at once
    max_items: int  # inputs per call
    blocked_s: float  # until any call may start (429 cooldown, rate buckets)
    provider_usable: bool
    max_queued_items: int  # the lane's bound on waiting items (memory)


@dataclass(frozen=True, slots=True)
class Shed:
    """Answer now instead of queueing: the status, Retry-After and why."""

    status: int  # 429 or 503
    retry_after_s: int
    message: str


def expected_wait_s(load: LaneLoad, items: int, tokens: int, cost: CallCost) -> float:
    """Seconds until a request of ``items`` inputs (``tokens`` estimated) would be answered."""
    total = load.queued_items + items
    calls = max(1, math.ceil(total / load.max_items))
    slots = max(1, load.slots)
    waves = math.ceil(calls / slots) + (1 if load.in_flight_calls >= slots else 0)
    per_call = cost.latency(tokens * total / max(items, 1) / calls, total / calls)
    return load.blocked_s + waves * per_call


def judge(
    load: LaneLoad, items: int, tokens: int, cost: CallCost, deadline_s: float
) -> Shed | None:
    """None to queue the request, or the answer to give now."""
    if not load.provider_usable:
        retry = max(MIN_RETRY_AFTER_S, math.ceil(load.blocked_s))
        return Shed(503, retry, "the embedding provider is unavailable; try again later")
    if load.queued_items + items > load.max_queued_items:
        return Shed(
            429,
            MIN_RETRY_AFTER_S,
            f"the online lane is full ({load.queued_items} inputs waiting); try again shortly",
        )
    wait = expected_wait_s(load, items, tokens, cost)
    if wait <= deadline_s:
        return None
    retry = max(MIN_RETRY_AFTER_S, math.ceil(min(wait, load.blocked_s or wait)))
    return Shed(
        429,
        retry,
        f"the online lane cannot answer within {deadline_s:g}s now (about {wait:.1f}s); "
        f"try again in {retry}s",
    )
