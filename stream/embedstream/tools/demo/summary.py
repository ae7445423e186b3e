"""The demo's summary as a pure model: what each phase did, and what the topics hold at the end.

No I/O here. The shell (:mod:`embedstream.tools.demo.app`) hands over snapshots of the
processor's own metrics registry taken at the start and end of each phase, the phase's duration
and the result records it read back; :func:`measure` turns them into :class:`PhaseFigures`,
:class:`Outcomes` counts lost, duplicate, dead-lettered and misattributed requests from the
verify report, and :func:`render` lays everything out as rich tables.

Where each figure comes from:

- items per lane, calls and mean batch: the registry (``embedstream_results_total{lane}``,
  ``embedstream_batch_size``), the increase between the phase's two snapshots;
- P50/P99: each result's ``latency_ms`` (request timestamp to result written), exact per
  request rather than estimated from histogram buckets;
- items/s: over the phase, or over a lane's own span where the shell measured one (the
  lanes phase: the low backlog from its first request published to its last result counted,
  the high requests from the first sent to the phase's end);
- cache hits, look-ups and tokens saved: the registry (``embedstream_cache_*``);
- lost, duplicates, dead letters, wrong vectors: the verify report of the topics read back.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from embedstream.tools.demo.phases import LanesPhase, RequestPhase
from embedstream.tools.top.rates import compute_rates
from embedstream.tools.top.readings import Snapshot
from embedstream.tools.verify.report import ResultRecord, VerificationReport

LANES = ("high", "low")


@dataclass(frozen=True, slots=True)
class LaneFigures:
    items: int  # results acknowledged, from the registry
    p50_ms: float | None  # None without results
    p99_ms: float | None


@dataclass(frozen=True, slots=True)
class CacheFigures:
    """The embedding cache during a phase, from the registry."""

    hits: int
    lookups: int
    tokens_saved: int

    def describe(self) -> str:
        return (
            f"cache: {self.hits:,} hits of {self.lookups:,} look-ups, "
            f"{self.tokens_saved:,} tokens saved"
        )


@dataclass(frozen=True, slots=True)
class PhaseFigures:
    phase: RequestPhase  # as it ran
    seconds: float  # first request published to last outcome acknowledged
    lanes: Mapping[str, LaneFigures]
    total: LaneFigures
    calls: int
    mean_batch: float | None  # inputs per call; None when no call was made
    dead_letters: int
    cache: CacheFigures | None = None  # None when no text was looked up (cache off)
    # A lane's own span where it differs from the phase's: in the lanes phase, the low
    # backlog's drain (first published to last result) and the high requests' stretch.
    lane_seconds: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))

    def per_second(self, items: int, lane: str | None = None) -> float:
        """``items`` over the phase's seconds, or over ``lane``'s own span if it has one."""
        seconds = self.lane_seconds.get(lane, self.seconds) if lane else self.seconds
        return items / seconds if seconds > 0 else 0.0


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (a value that occurred); None for no values."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must be within [0, 1], got {q}")
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def _lane(items: int, latencies_ms: Sequence[float]) -> LaneFigures:
    return LaneFigures(items, percentile(latencies_ms, 0.5), percentile(latencies_ms, 0.99))


def measure(
    phase: RequestPhase,
    before: Snapshot,
    after: Snapshot,
    seconds: float,
    latencies_ms: Mapping[str, Sequence[float]],
    lane_seconds: Mapping[str, float] | None = None,
) -> PhaseFigures:
    """One phase's figures: the registry's increase from ``before`` to ``after`` (taken
    ``seconds`` apart), the end-to-end latencies of its results by lane and the lanes' own
    spans, if any (see :attr:`PhaseFigures.lane_seconds`)."""
    rates = compute_rates(before, after, seconds)
    lanes = {
        lane: _lane(round(rates.results.get(lane, 0.0)), latencies_ms.get(lane, ()))
        for lane in LANES
    }
    everything = [ms for lane in LANES for ms in latencies_ms.get(lane, ())]
    return PhaseFigures(
        phase=phase,
        seconds=seconds,
        lanes=MappingProxyType(lanes),
        total=_lane(sum(figures.items for figures in lanes.values()), everything),
        calls=round(rates.batch_size.count),
        mean_batch=rates.batch_mean,
        dead_letters=round(rates.dead_letters),
        cache=_cache(rates.cache_hits, rates.cache_misses, rates.cache_tokens_saved),
        lane_seconds=MappingProxyType(dict(lane_seconds or {})),
    )


def _cache(hits: float, misses: float, tokens_saved: float) -> CacheFigures | None:
    if hits + misses <= 0:
        return None
    return CacheFigures(round(hits), round(hits + misses), round(tokens_saved))


def latencies_by_phase(
    results: Iterable[ResultRecord], phases: Sequence[RequestPhase]
) -> dict[str, dict[str, list[float]]]:
    """phase name -> lane -> ``latency_ms`` of every result record of the phase's requests
    (a duplicate counts each time: it is a result a consumer saw)."""
    where = {rid: (phase.name, lane) for phase in phases for rid, lane in phase.requests()}
    found: dict[str, dict[str, list[float]]] = {
        phase.name: {lane: [] for lane in LANES} for phase in phases
    }
    for record in results:
        place = where.get(record.id)
        latency = record.doc.get("latency_ms")
        if place is None or not isinstance(latency, int | float) or isinstance(latency, bool):
            continue
        name, lane = place
        found[name][lane].append(float(latency))
    return found


@dataclass(frozen=True, slots=True)
class Outcomes:
    """What the topics held at the end, counted by the verify report."""

    requests: int
    results: int
    lost: int
    duplicates: int  # result records beyond the first of their id
    dead_letters: int
    misattributed: int | None  # None when vectors were not checked (a real endpoint)

    @classmethod
    def from_report(cls, report: VerificationReport) -> Outcomes:
        return cls(
            requests=report.requests,
            results=report.results,
            lost=len(report.lost),
            duplicates=report.duplicate_results,
            dead_letters=report.dead_letters,
            misattributed=len(report.misattributed) if report.vectors_checked else None,
        )

    @property
    def ok(self) -> bool:
        """Every request has exactly one result: nothing lost, repeated or dead-lettered."""
        wrong = self.misattributed or 0
        return not (self.lost or self.duplicates or self.dead_letters or wrong)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def phase_table(figures: PhaseFigures) -> Group:
    """The phase's heading, a row per lane, then all of them with the calls and mean batch."""
    # The heading goes above the table, not in it: a table title wraps at the table's width.
    heading = Text(f"{figures.phase.describe()}, done in {figures.seconds:.1f} s", no_wrap=True)
    table = Table(box=box.SIMPLE_HEAD, show_edge=False)
    table.add_column("lane")
    for title in ("items", "items/s", "calls", "mean batch", "P50 ms", "P99 ms"):
        table.add_column(title, justify="right")

    def row(name: str, lane: LaneFigures, calls: str = "", batch: str = "") -> None:
        rate = f"{figures.per_second(lane.items, name):,.0f}"
        table.add_row(
            name, f"{lane.items:,}", rate, calls, batch, _ms(lane.p50_ms), _ms(lane.p99_ms)
        )

    for name in LANES:
        row(name, figures.lanes[name])
    mean = "-" if figures.mean_batch is None else f"{figures.mean_batch:,.1f}"
    row("all", figures.total, f"{figures.calls:,}", mean)
    return Group(heading, table)


def share(part: float, whole: float) -> str:
    """``part`` as a share of ``whole``: a fraction such as 1/45 when it is at most half,
    a percentage otherwise."""
    if whole <= 0:
        return "-"
    if part > 0 and whole / part >= 2:
        return f"1/{whole / part:,.0f}"
    return f"{part / whole:.0%}"


def lanes_lines(figures: PhaseFigures) -> Text | None:
    """What the lanes phase shows, in words: how long the low backlog took to drain, and the
    high requests' P50/P99 as a share of the low ones'; None for another phase."""
    phase = figures.phase
    if not isinstance(phase, LanesPhase):
        return None
    drained = figures.lane_seconds.get("low", figures.seconds)
    text = Text(f"the low backlog drained in {drained:.1f} s; ")
    high, low = figures.lanes["high"], figures.lanes["low"]
    if high.p50_ms is None or high.p99_ms is None or low.p50_ms is None or low.p99_ms is None:
        text.append("no high request had a result meanwhile")
        return text
    text.append(f"{phase.high:,} high requests sent meanwhile\n")
    text.append(
        f"waited {share(high.p50_ms, low.p50_ms)} of low's P50 "
        f"and {share(high.p99_ms, low.p99_ms)} of its P99"
    )
    if high.p50_ms < low.p50_ms and high.p99_ms < low.p99_ms:
        text.append(": high requests are served first")
    return text


def outcome_lines(outcomes: Outcomes) -> Text:
    vectors = (
        "not checked (a real endpoint)"
        if outcomes.misattributed is None
        else f"{outcomes.misattributed:,}"
    )
    text = Text(
        f"read back from the topics: {outcomes.requests:,} requests, "
        f"{outcomes.results:,} results\n"
        f"lost {outcomes.lost:,}, duplicates {outcomes.duplicates:,}, "
        f"dead letters {outcomes.dead_letters:,}, wrong vectors {vectors}"
    )
    if outcomes.ok:
        text.append("\nevery request has exactly one result", style="green")
    else:
        text.append("\nnot every request has exactly one result", style="bold red")
    return text


CACHE_OFF = "cache: off (EMBEDSTREAM_CACHE=memory or redis turns it on)"


def render(
    phases: Sequence[PhaseFigures], outcomes: Outcomes, *, cache_on: bool = False
) -> RenderableType:
    """The whole summary: a table per phase (and its cache line), then the outcomes."""
    parts: list[RenderableType] = []
    for figures in phases:
        parts.append(phase_table(figures))
        lanes = lanes_lines(figures)
        if lanes is not None:
            parts.append(lanes)
        if figures.cache is not None:
            parts.append(Text(figures.cache.describe()))
        parts.append(Text())
    if not cache_on:
        parts.append(Text(CACHE_OFF))
    parts.append(
        Text("items, calls, mean batch: the processor's metrics; P50/P99: results' latency_ms")
    )
    parts.append(outcome_lines(outcomes))
    return Group(*parts)
