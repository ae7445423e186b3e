"""Samples the processor's state into gauges and answers readiness, once a second.

Kept apart from the consumer loop so that loop stays about records; this module only reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from embedstream.core.lanes import Priority
from embedstream.core.policy import BatchLimits, wait_budget
from embedstream.ops.metrics import Metrics
from embedstream.ops.server import Readiness

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 3.0


class OldestTracked(Protocol):
    """A partition's unfinished work, as far as its lag in seconds goes."""

    def oldest_timestamp_ms(self) -> int | None: ...


class Observed(Protocol):
    """What the health loop reads from the processor."""

    @property
    def joined(self) -> bool: ...
    @property
    def provider_ok(self) -> bool: ...
    @property
    def limits(self) -> BatchLimits: ...

    def partitions(self) -> Mapping[Any, OldestTracked]: ...
    def lag_by_partition(self) -> dict[Any, int]: ...
    def lane_by_partition(self) -> dict[Any, str]: ...
    def paused_count(self) -> int: ...
    def buffered_in(self, priority: Priority) -> int: ...
    def delayed_count(self) -> int: ...
    def held_items(self) -> int: ...
    def in_flight(self) -> int: ...
    def concurrency_limit(self) -> int: ...
    def depth(self, lane: Priority) -> int: ...
    async def refresh_lag(self) -> None: ...


class Health:
    def __init__(
        self,
        observed: Observed,
        metrics: Metrics,
        probe_broker: Callable[[], Awaitable[object]],
        registry_outage: Callable[[], Exception | None] = lambda: None,
    ) -> None:
        self._observed = observed
        # The schema registry's current failure to answer, None while it answers (or unused).
        self._registry_outage = registry_outage
        self._metrics = metrics
        self._probe = probe_broker
        self.broker_reachable = True
        self._known_partitions: dict[Any, str] = {}  # partition -> its lane label

    def readiness(self) -> Readiness:
        outage = self._registry_outage()
        return Readiness(
            joined_group=self._observed.joined,
            broker_reachable=self.broker_reachable,
            provider_usable=self._observed.provider_ok,
            registry_usable=outage is None,
            registry_problem=None if outage is None else str(outage),
        )

    async def run(self, interval_s: float = 1.0) -> None:
        while True:
            # Best effort: with the broker down this fails, and the probe below reports it.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._observed.refresh_lag(), PROBE_TIMEOUT_S)
            self.sample()
            await self._probe_broker()
            await asyncio.sleep(interval_s)

    async def _probe_broker(self) -> None:
        reachable = False
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._probe(), PROBE_TIMEOUT_S)
            reachable = True
        if reachable != self.broker_reachable:
            log.warning("broker %s", "reachable again" if reachable else "unreachable")
        self.broker_reachable = reachable

    def sample(self) -> None:
        o, m = self._observed, self._metrics
        m.set_queue_depth("high", o.buffered_in(Priority.HIGH))
        m.set_queue_depth("low", o.buffered_in(Priority.LOW))
        m.set_queue_depth("backfill", o.buffered_in(Priority.BACKFILL))
        m.set_queue_depth("delayed", o.delayed_count())
        m.set_buffered_items(o.held_items())
        m.set_in_flight_calls(o.in_flight())
        m.set_concurrency_limit(o.concurrency_limit())
        m.set_paused_partitions(o.paused_count())
        lag = o.lag_by_partition()
        lanes = o.lane_by_partition()
        m.set_adaptive_wait(wait_budget(o.limits, o.depth(Priority.LOW)))
        now_ms = time.time() * 1000
        partitions = o.partitions()
        known: dict[Any, str] = {}
        for tp, tracker in partitions.items():
            lane = known[tp] = lanes.get(tp, "low")
            m.set_lag(tp.topic, tp.partition, lane, lag.get(tp, 0))
            oldest = tracker.oldest_timestamp_ms()
            m.set_lag_seconds(
                tp.topic, tp.partition, lane, 0.0 if oldest is None else (now_ms - oldest) / 1000
            )
        for tp, lane in self._known_partitions.items():
            if known.get(tp) != lane:
                m.forget_partition(tp.topic, tp.partition, lane)
        self._known_partitions = known
        m.set_ready(self.readiness().ready)
