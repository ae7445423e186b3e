"""The demo's request phases as a pure plan: which requests, in which lane, sent when.

The sparse phase sends requests one by one at a steady rate (one in five of high priority),
so each call carries about one input. The lanes phase publishes a backlog of low requests at
once, then high requests at a steady rate for as long as the backlog drains: the processor
takes high requests first and keeps call slots free for them (``core/reservations.py``,
``engine/batcher.py``), so they wait for no backlog. How many high requests that makes, the
run decides: :meth:`LanesPhase.sent` records it, and :func:`backlog_drained` says when to stop.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

HIGH_EVERY = 5  # one request in five of the sparse phase is interactive (high priority)


def _check_rate(rate: float) -> None:
    if not (rate > 0 and math.isfinite(rate)):
        raise ValueError(f"rate must be positive and finite, got {rate}")


def _check_count(name: str, count: int) -> None:
    if count < 0:
        raise ValueError(f"{name} must be >= 0, got {count}")


@dataclass(frozen=True, slots=True)
class Phase:
    """Requests one by one: ``items`` of them, ``rate`` a second, one in five high."""

    name: str
    items: int
    rate: float
    first: int = 0  # number of the phase's first request among all the demo's requests

    def __post_init__(self) -> None:
        _check_count("items", self.items)
        _check_rate(self.rate)

    def describe(self) -> str:
        return f"{self.name}: {self.items:,} requests at {self.rate:g}/s"

    def requests(self) -> list[tuple[str, str]]:
        """(id, lane) of each request, in publishing order."""
        return [
            (f"{self.name}-{n}", "high" if n % HIGH_EVERY == 0 else "low")
            for n in range(self.first, self.first + self.items)
        ]

    def send_at(self, index: int) -> float:
        """Seconds after the phase starts at which its ``index``-th request is published."""
        return index / self.rate


@dataclass(frozen=True, slots=True)
class LanesPhase:
    """A backlog of ``backlog`` low requests published at once, then high requests at
    ``high_rate`` a second until the backlog has drained; ``high`` of them were sent (0 until
    the phase has run)."""

    backlog: int
    high_rate: float
    first: int = 0  # number of the phase's first request among all the demo's requests
    high: int = 0
    name: str = "lanes"

    def __post_init__(self) -> None:
        _check_count("backlog", self.backlog)
        _check_count("high", self.high)
        _check_rate(self.high_rate)

    @property
    def items(self) -> int:
        return self.backlog + self.high

    def describe(self) -> str:
        return (
            f"{self.name}: {self.backlog:,} low requests at once, "
            f"then high ones at {self.high_rate:g}/s"
        )

    def backlog_requests(self) -> list[tuple[str, str]]:
        """(id, lane) of the backlog's requests, in publishing order."""
        return [(f"{self.name}-{n}", "low") for n in range(self.first, self.first + self.backlog)]

    def high_request(self, index: int) -> tuple[str, str]:
        """(id, lane) of the ``index``-th high request: numbered after the backlog."""
        return f"{self.name}-{self.first + self.backlog + index}", "high"

    def requests(self) -> list[tuple[str, str]]:
        """(id, lane) of each request, in publishing order: the backlog, then the ``high``
        requests sent."""
        return self.backlog_requests() + [self.high_request(i) for i in range(self.high)]

    def high_due(self, elapsed_s: float) -> int:
        """How many high requests are due ``elapsed_s`` seconds after the first was sent:
        one at once, then one every ``1/high_rate`` seconds."""
        if elapsed_s < 0:
            return 0
        # The epsilon keeps a request that is exactly due from slipping to the next poll
        # (0.29 s at 100/s is 28.999999999999996 intervals in floats).
        return math.floor(elapsed_s * self.high_rate + 1e-9) + 1

    def next_high_in(self, sent: int, elapsed_s: float) -> float:
        """Seconds from ``elapsed_s`` until the high request after the ``sent`` ones is due."""
        return max(0.0, sent / self.high_rate - elapsed_s)

    def sent(self, high: int) -> LanesPhase:
        """The phase as it ran: ``high`` high requests sent while the backlog drained."""
        return dataclasses.replace(self, high=high)


RequestPhase = Phase | LanesPhase


def backlog_drained(backlog: int, low_results: float, dead_letters: float) -> bool:
    """The lanes phase's backlog has drained once each of its ``backlog`` requests has an
    outcome: ``low_results`` and ``dead_letters`` counted since the phase began (a dead
    letter is counted in no lane: take it for the backlog's, and stop rather than wait)."""
    return low_results + dead_letters >= backlog


def plan(
    sparse_items: int, sparse_rate: float, backlog: int, high_rate: float
) -> list[RequestPhase]:
    """A sparse phase (requests one by one, so each call carries about one), then the lanes
    phase (a backlog of low requests, so batches grow with it, and high requests served first
    meanwhile). An empty sparse phase is left out; request numbers run on across phases, so
    every request has an id and a text of its own."""
    phases: list[RequestPhase] = []
    if sparse_items:
        phases.append(Phase("sparse", sparse_items, sparse_rate))
    phases.append(LanesPhase(backlog, high_rate, first=sparse_items))
    return phases
