"""The rows of the kafka-fairness scenario (issue 21), pure.

Two sources of one low lane: A's backlog drained at once, B's trickle at a steady rate. The
scenario (``kafka_fairness``) measures B alone, A alone, and both together once with calls
shared by weight and once with each bucket one FIFO (the baseline); these functions turn that
into rows whose names carry the two ratios of the issue's goals: B's P99 with A's flood over
its P99 alone (goal at most 2x) and A's drain rate with B as a share of A alone (goal at
least 85%).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from embedstream.tools.bench.figures import Row, latency_percentiles, percentile
from embedstream.tools.bench.kafka_figures import Drain, drain_row, stage_durations

DRAIN_KIND = "kafka-fairness-drain"

B_P99_GOAL = 2.0  # B's P99 with A's flood, at most this many times its P99 alone
A_DRAIN_GOAL = 0.85  # A's drain rate with B, at least this share of its rate alone


@dataclass(frozen=True, slots=True)
class Trickle:
    """B's events, published at a steady rate, measured."""

    latencies_s: Sequence[float]  # from each event's scheduled publication to its result acked
    published: int
    seconds: float  # how long B published
    # Each event's moments (bench/timeline.py): where B's latency goes, stage by stage.
    moments: Mapping[str, Mapping[str, float]] = field(default_factory=dict)

    @property
    def p99_s(self) -> float | None:
        ordered = sorted(self.latencies_s)
        return percentile(ordered, 99) if ordered else None


@dataclass(frozen=True, slots=True)
class Arm:
    """A and B together, one way of sharing calls."""

    label: str  # e.g. "shares", "calls FIFO"
    drain: Drain
    trickle: Trickle


@dataclass(frozen=True, slots=True)
class Ratios:
    b_p99: float | None  # B's P99 with A over alone; None when either has no latency
    a_drain: float | None  # A's rate with B over alone; None when A alone drained nothing

    @property
    def goals_met(self) -> bool:
        return (
            self.b_p99 is not None
            and self.a_drain is not None
            and self.b_p99 <= B_P99_GOAL
            and self.a_drain >= A_DRAIN_GOAL
        )


def ratios(a_alone: Drain, b_alone: Trickle, arm: Arm) -> Ratios:
    alone_p99, with_p99 = b_alone.p99_s, arm.trickle.p99_s
    b_p99 = with_p99 / alone_p99 if alone_p99 and with_p99 is not None else None
    a_drain = arm.drain.per_s / a_alone.per_s if a_alone.per_s > 0 else None
    return Ratios(b_p99, a_drain)


def fairness_rows(
    a_alone: Drain, b_alone: Trickle, arms: Sequence[Arm], b_rate: float, broker: str
) -> list[Row]:
    """B alone, A alone, then per arm A's drain with B and B's latency with A's flood, the
    ratios to alone in their names, and B's latency stage by stage (where it waits)."""
    name = f"kafka fairness {a_alone.expected:,} on A, {b_rate:g}/s on B"
    drain_note = f"{broker}; one processor, A and B two low topics of one lane"
    rows = [
        _trickle_row(f"{name}: B alone", b_alone, a_alone.seconds, broker),
        drain_row(f"{name}: A alone", a_alone, drain_note, DRAIN_KIND),
    ]
    for arm in arms:
        r = ratios(a_alone, b_alone, arm)
        share = "n/a" if r.a_drain is None else f"{100 * r.a_drain:.0f}% of alone"
        times = "n/a" if r.b_p99 is None else f"{r.b_p99:.1f}x alone"
        rows.append(
            drain_row(f"{name}: A with B, {arm.label} ({share})", arm.drain, drain_note, DRAIN_KIND)
        )
        rows.append(
            _trickle_row(
                f"{name}: B with A, {arm.label} (P99 {times})", arm.trickle, arm.drain.seconds,
                broker,
            )
        )  # fmt: skip
        rows += trickle_stage_rows(arm.trickle, f"{name}: B with A, {arm.label}")
    return rows


def trickle_stage_rows(trickle: Trickle, label: str) -> list[Row]:
    """A row per stage B's events went through (those with moments at both ends)."""
    rows = []
    for (begin, end), spans in stage_durations(trickle.moments).items():
        if not spans:
            continue
        rows.append(
            Row(
                scenario=f"{label}: {begin} -> {end}",
                kind="kafka-stage",
                items=len(spans),
                seconds=trickle.seconds,
                bound_per_s=None,
                latency=latency_percentiles(spans),
                calls=0,
                inputs=0,
                client_cpu_s=0.0,
                provider_cpu_s=None,
                note="per-request timeline through Kafka (debug timestamps of the bench)",
            )
        )
    return rows


def _trickle_row(scenario: str, trickle: Trickle, seconds: float, broker: str) -> Row:
    return Row(
        scenario=scenario,
        kind="kafka-fairness-trickle",
        items=len(trickle.latencies_s),
        seconds=trickle.seconds or seconds,
        bound_per_s=None,
        latency=latency_percentiles(trickle.latencies_s),
        calls=0,
        inputs=0,
        client_cpu_s=0.0,
        provider_cpu_s=None,
        failed=trickle.published - len(trickle.latencies_s),
        note=f"{broker}; latency from the scheduled publication to the result acknowledged",
    )
