"""How long the chaos runs are: the test command's short form, or the long form.

The short form (the default, what the README's test command runs) keeps every kind of fault
and every check, with fewer rounds of each and a feed about as long as the faults take. The
long form (`EMBEDSTREAM_CHAOS=long`) is the size these runs had when the guarantees were first
shown: five member kills, three broker kills, two rounds of rolling restarts, three cycles of
group churn and 20 s provider outages, over 20,000 requests. Run it before a release:

    EMBEDSTREAM_CHAOS=long python -m pytest -n 2 tests/e2e -m chaos
"""

from __future__ import annotations

import os
from dataclasses import dataclass

SCALE_ENV = "EMBEDSTREAM_CHAOS"


@dataclass(frozen=True, slots=True)
class ChaosScale:
    member_kills: int  # SIGKILLs of a member, each restarted (members taken in turn)
    broker_kills: int  # SIGKILLs of a private broker, each restarted with its data
    rolling_rounds: int  # rounds of SIGTERM-and-restart over every member
    churn_cycles: int  # cycles of the group growing 1 -> 3 and shrinking back
    steady_events: int  # requests a steady feeder publishes at 400-450/s
    broker_events: int  # requests published at 200/s while the broker is killed
    zombie_events: int  # requests published at 400/s around a paused member
    outage_s: float  # how long the provider is gone
    outage_events: int  # requests published at 200-300/s around an outage


SHORT = ChaosScale(
    member_kills=3, broker_kills=2, rolling_rounds=1, churn_cycles=2, steady_events=10_000,
    broker_events=6_000, zombie_events=8_000, outage_s=10.0, outage_events=5_000,
)  # fmt: skip
LONG = ChaosScale(
    member_kills=5, broker_kills=3, rolling_rounds=2, churn_cycles=3, steady_events=20_000,
    broker_events=10_000, zombie_events=12_000, outage_s=20.0, outage_events=9_000,
)  # fmt: skip


def chaos_scale(env: dict[str, str] | None = None) -> ChaosScale:
    value = (os.environ if env is None else env).get(SCALE_ENV, "short").strip().lower()
    if value not in ("short", "long"):
        raise ValueError(f"{SCALE_ENV} must be short or long, got {value!r}")
    return LONG if value == "long" else SHORT


SCALE = chaos_scale()
