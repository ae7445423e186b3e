"""The rows of the online scenario, pure: the drain alone, and with online callers through the
online lane and straight to the provider, each arm's callers' latency, and the HTTP front's
CPU per request beside an in-process call. The scenario (``kafka_online``) measures; these
turn what it measured into rows, so every figure's arithmetic is checked by unit tests."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from embedstream.tools.bench.figures import Row, latency_percentiles
from embedstream.tools.bench.kafka_figures import Drain, drain_row


@dataclass(frozen=True, slots=True)
class Callers:
    """The online callers of one arm: each request's latency, from its scheduled time to its
    answer, and how many of those sent got no 200."""

    latencies_s: Sequence[float]
    sent: int
    failed: int
    seconds: float


@dataclass(frozen=True, slots=True)
class FrontCpu:
    """CPU per request of the HTTP front (client and server in one process) and of an
    in-process `BatchingClient` call, on a provider that answers at once."""

    requests: int
    http_cpu_s: float
    in_process_cpu_s: float

    @property
    def http_us(self) -> float:
        return 1e6 * self.http_cpu_s / self.requests if self.requests else 0.0

    @property
    def in_process_us(self) -> float:
        return 1e6 * self.in_process_cpu_s / self.requests if self.requests else 0.0


def online_rows(
    alone: Drain,
    through_lane: tuple[Drain, Callers],
    direct: tuple[Drain, Callers],
    rate: float,
    broker: str,
) -> list[Row]:
    """Five rows: the drain alone; the drain with the callers through the online lane and its
    share of the drain alone, the callers' latency; the same with the callers straight to the
    provider."""
    name = f"online {rate:g}/s beside {alone.expected:,} low"
    note = f"{broker}; one processor, assignment to the last low result"
    rows = [drain_row(f"{name}: drain alone", alone, note, "online-drain")]
    for arm, (drain, callers) in (("through the online lane", through_lane),
                                  ("straight to the provider", direct)):  # fmt: skip
        share = 100.0 * drain.per_s / alone.per_s if alone.per_s > 0 else 0.0
        rows.append(drain_row(f"{name}: drain, callers {arm} ({share:.0f}% of alone)", drain,
                              note, "online-drain"))  # fmt: skip
        rows.append(caller_row(f"{name}: callers {arm}", callers, rate, broker))
    return rows


def caller_row(scenario: str, callers: Callers, rate: float, broker: str) -> Row:
    return Row(
        scenario=scenario,
        kind="online-callers",
        items=len(callers.latencies_s),
        seconds=callers.seconds,
        bound_per_s=None,
        latency=latency_percentiles(callers.latencies_s),
        calls=0,
        inputs=0,
        client_cpu_s=0.0,
        provider_cpu_s=None,
        failed=callers.failed,
        offered_per_s=rate,
        note=f"{broker}; from each request's scheduled time to its answer (one in ten of 16)",
    )


def front_cpu_row(front: FrontCpu) -> Row:
    ratio = front.http_us / front.in_process_us if front.in_process_us > 0 else 0.0
    name = (
        f"online front: {front.http_us:.0f} µs CPU/request over HTTP, "
        f"{front.in_process_us:.0f} in process ({ratio:.1f}x)"
    )
    return Row(
        scenario=name,
        kind="online-front",
        items=front.requests,
        seconds=0.0,
        bound_per_s=None,
        latency=None,
        calls=0,
        inputs=0,
        client_cpu_s=front.http_cpu_s,
        provider_cpu_s=None,
        note="sequential single-text requests, an instant provider; client and server here",
    )
