"""The rows of the Kafka flood, floor and timeline scenarios, pure.

No I/O and no clock: the scenarios in ``kafka_flood`` and ``kafka_scenarios`` measure, and
these functions turn what they measured into table rows, so the arithmetic behind each figure
(a drain rate as a share of another, CPU µs per item and its ratio to the floor, the P99 of
each stage of a request's way through Kafka) is checked by unit tests.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from embedstream.tools.bench.figures import Row, latency_percentiles

# The moments of one request's way through Kafka, in order. A request missing a later moment
# (its result never read) counts in none of the stages that end there.
MOMENTS = ("scheduled", "published", "fetched", "call_start", "call_done", "written", "acked",
           "read")  # fmt: skip
STAGES = tuple(itertools.pairwise(MOMENTS))


@dataclass(frozen=True, slots=True)
class Drain:
    """A backlog drained through Kafka by one processor, measured."""

    items: int  # low items whose results were written
    seconds: float  # from the assignment to the last low result
    calls: int
    inputs: int
    cpu_s: float
    provider_cpu_s: float | None
    expected: int  # items published

    @property
    def per_s(self) -> float:
        return self.items / self.seconds if self.seconds > 0 else 0.0


def flood_rows(
    alone: Drain,
    flooded: Drain,
    high_latencies_s: Sequence[float],
    high_expected: int,
    high_rate: float,
    broker: str,
) -> list[Row]:
    """Three rows: the drain alone, the drain with high traffic (its rate as a share of the
    drain alone in the name: the issue's goal is at least 85%), and the high requests'
    latency from their scheduled publication to their result acknowledged by the broker."""
    share = 100.0 * flooded.per_s / alone.per_s if alone.per_s > 0 else 0.0
    name = f"kafka flood {alone.expected:,} low"
    note = f"{broker}; one processor, assignment to the last low result"
    rows = [
        drain_row(f"{name}: drain alone", alone, note, "kafka-flood-low"),
        drain_row(
            f"{name}: drain with high {high_rate:g}/s ({share:.0f}% of alone)",
            flooded,
            note,
            "kafka-flood-low",
        ),
    ]
    rows.append(
        Row(
            scenario=f"{name}: high {high_rate:g}/s during the drain",
            kind="kafka-flood-high",
            items=len(high_latencies_s),
            seconds=flooded.seconds,
            bound_per_s=None,
            latency=latency_percentiles(high_latencies_s),
            calls=0,
            inputs=0,
            client_cpu_s=0.0,
            provider_cpu_s=None,
            failed=high_expected - len(high_latencies_s),
            note=f"{broker}; latency from the scheduled publication to the result acknowledged",
        )
    )
    return rows


def drain_row(scenario: str, drain: Drain, note: str, kind: str) -> Row:
    """The row of one drain: items, time, calls and CPU; `failed` what it never got."""
    return Row(
        scenario=scenario,
        kind=kind,
        items=drain.items,
        seconds=drain.seconds,
        bound_per_s=None,
        latency=None,
        calls=drain.calls,
        inputs=drain.inputs,
        client_cpu_s=drain.cpu_s,
        provider_cpu_s=drain.provider_cpu_s,
        failed=drain.expected - drain.items,
        note=note,
    )


def cpu_us_per_item(cpu_s: float, items: int) -> float:
    return 1e6 * cpu_s / items if items > 0 else 0.0


def floor_rows(floor: Drain, embedstream: Drain, broker: str) -> list[Row]:
    """Two rows on the same records: the bare loop (read, one result-sized ``send()`` each,
    commit; no embedding) and embedstream's drain, each with its CPU µs per item in the
    name, embedstream's as a ratio to the floor (the issue's goal: at most 1.0x)."""
    floor_us = cpu_us_per_item(floor.cpu_s, floor.items)
    ours_us = cpu_us_per_item(embedstream.cpu_s, embedstream.items)
    ratio = ours_us / floor_us if floor_us > 0 else 0.0
    name = f"kafka floor {floor.expected:,}"
    bare = f"{broker}; read, one send() per result-sized record, no embedding"
    ours = f"{broker}; one processor, embeddings and all"
    return [
        drain_row(f"{name}: bare aiokafka loop, {floor_us:.0f} µs CPU/item", floor, bare,
                  "kafka-floor"),
        drain_row(f"{name}: embedstream, {ours_us:.0f} µs CPU/item ({ratio:.2f}x floor)",
                  embedstream, ours, "kafka-floor"),
    ]  # fmt: skip


def stages_until(last: str, order: Sequence[str] = MOMENTS) -> tuple[tuple[str, str], ...]:
    """The stages from the first moment of ``order`` up to ``last``."""
    return tuple(itertools.pairwise(order[: order.index(last) + 1]))


def stage_durations(
    moments: Mapping[str, Mapping[str, float]], last: str = "read", order: Sequence[str] = MOMENTS
) -> dict[tuple[str, str], list[float]]:
    """Seconds each request spent in each stage up to ``last``, from its moments (name ->
    time, one clock). A stage counts only requests with both of its ends; a negative span (two
    clocks of one event ordered by different observers, e.g. a send noted after its fetch)
    counts as 0."""
    stages = stages_until(last, order)
    spans: dict[tuple[str, str], list[float]] = {stage: [] for stage in stages}
    for times in moments.values():
        for begin, end in stages:
            if begin in times and end in times:
                spans[(begin, end)].append(max(0.0, times[end] - times[begin]))
    return spans


def stage_rows(
    moments: Mapping[str, Mapping[str, float]],
    label: str,
    seconds: float,
    last: str = "read",
    order: Sequence[str] = MOMENTS,
    note: str = "per-request timeline through Kafka (debug timestamps of the bench)",
) -> list[Row]:
    """One row per stage of ``order`` up to ``last`` with its P50/P95/P99 (and the whole way,
    scheduled to ``last``)."""
    rows = []
    spans = stage_durations(moments, last, order)
    whole = [t[last] - t["scheduled"] for t in moments.values() if {last, "scheduled"} <= t.keys()]
    for (begin, end), durations in [*spans.items(), (("scheduled", last), whole)]:
        rows.append(
            Row(
                scenario=f"{label}: {begin} -> {end}",
                kind="kafka-stage",
                items=len(durations),
                seconds=seconds,
                bound_per_s=None,
                latency=latency_percentiles(durations),
                calls=0,
                inputs=0,
                client_cpu_s=0.0,
                provider_cpu_s=None,
                note=note,
            )
        )
    return rows


def spans(moments: Mapping[str, Mapping[str, float]], begin: str, end: str) -> list[float]:
    """Seconds from ``begin`` to ``end`` of each request that has both."""
    return [t[end] - t[begin] for t in moments.values() if {begin, end} <= t.keys()]


def latency_row(scenario: str, durations_s: Sequence[float], seconds: float, note: str) -> Row:
    """A row of durations' P50/P95/P99 (a stage's, the event loop's lateness)."""
    return Row(
        scenario=scenario,
        kind="kafka-stage",
        items=len(durations_s),
        seconds=seconds,
        bound_per_s=None,
        latency=latency_percentiles(durations_s),
        calls=0,
        inputs=0,
        client_cpu_s=0.0,
        provider_cpu_s=None,
        note=note,
    )


def mixed_rows(
    alone_acked_s: Sequence[float],
    mixed_acked_s: Sequence[float],
    high_expected: int,
    mixed: Drain,
    joins_s: tuple[float, float],
    broker: str,
) -> list[Row]:
    """Three rows of kafka-mixed: the high backlog drained alone, the same high items in a
    backlog of both lanes (their P99 as a multiple of the alone drain's time in the name:
    the issue's goal is at most 1.3x), and the mixed backlog's whole drain. Every time runs
    from the processor's assignment, so the group join (``joins_s``, alone then mixed, in
    the notes) is left out of both sides of the ratio."""
    alone_s = max(alone_acked_s, default=0.0)
    mixed_latency = latency_percentiles(mixed_acked_s)
    ratio = 0.0
    if mixed_latency is not None and alone_s > 0:
        ratio = mixed_latency.p99_ms / 1000.0 / alone_s
    name = f"kafka mixed {high_expected:,} high"
    rows = []
    for scenario, acked, join_s in (
        (f"{name}: alone, drained in {alone_s:.2f} s", alone_acked_s, joins_s[0]),
        (f"{name} + {mixed.expected - high_expected:,} low: high P99 {ratio:.2f}x alone",
         mixed_acked_s, joins_s[1]),
    ):  # fmt: skip
        rows.append(
            Row(
                scenario=scenario,
                kind="kafka-mixed-high",
                items=len(acked),
                seconds=max(acked, default=0.0),
                bound_per_s=None,
                latency=latency_percentiles(acked),
                calls=0,
                inputs=0,
                client_cpu_s=0.0,
                provider_cpu_s=None,
                failed=high_expected - len(acked),
                note=f"{broker}; from the assignment to each result acknowledged; "
                f"join {join_s:.1f} s",
            )
        )
    note = f"{broker}; one processor, the assignment to the last result of either lane"
    rows.append(drain_row(f"{name} + low: the whole backlog", mixed, note, "kafka-mixed-drain"))
    return rows
