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
- cache hits, look-ups and tokens saved: the registry (``embedstream_cache_*``);
- lost, duplicates, dead letters, wrong vectors: the verify report of the topics read back.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from embedstream.tools.top.model import Snapshot
from embedstream.tools.top.rates import compute_rates
from embedstream.tools.verify.report import ResultRecord, VerificationReport

LANES = ("high", "low")
HIGH_EVERY = 5  # one request in five is interactive (high priority); the rest is bulk


@dataclass(frozen=True, slots=True)
class Phase:
    """One phase as planned: ``items`` requests, ``rate`` per second or all at once (None)."""

    name: str
    items: int
    rate: float | None = None
    first: int = 0  # number of the phase's first request among all the demo's requests

    def __post_init__(self) -> None:
        if self.items < 0:
            raise ValueError(f"items must be >= 0, got {self.items}")
        if self.rate is not None and not (self.rate > 0 and math.isfinite(self.rate)):
            raise ValueError(f"rate must be positive and finite, got {self.rate}")

    def describe(self) -> str:
        pace = f"at {self.rate:g}/s" if self.rate is not None else "at once"
        return f"{self.name}: {self.items:,} requests {pace}"

    def requests(self) -> list[tuple[str, str]]:
        """(id, lane) of each request, in publishing order."""
        return [
            (f"{self.name}-{n}", "high" if n % HIGH_EVERY == 0 else "low")
            for n in range(self.first, self.first + self.items)
        ]

    def send_at(self, index: int) -> float:
        """Seconds after the phase starts at which its ``index``-th request is published."""
        return 0.0 if self.rate is None else index / self.rate


def plan(sparse_items: int, sparse_rate: float, burst_items: int) -> list[Phase]:
    """A sparse phase (requests one by one, so each call carries about one), then a burst (all
    at once, so a backlog forms and batches grow with it). An empty phase is left out."""
    phases = [
        Phase("sparse", sparse_items, sparse_rate),
        Phase("burst", burst_items, None, first=sparse_items),
    ]
    return [phase for phase in phases if phase.items]


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
    phase: Phase
    seconds: float  # first request published to last outcome acknowledged
    lanes: Mapping[str, LaneFigures]
    total: LaneFigures
    calls: int
    mean_batch: float | None  # inputs per call; None when no call was made
    dead_letters: int
    cache: CacheFigures | None = None  # None when no text was looked up (cache off)

    def per_second(self, items: int) -> float:
        return items / self.seconds if self.seconds > 0 else 0.0


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
    phase: Phase,
    before: Snapshot,
    after: Snapshot,
    seconds: float,
    latencies_ms: Mapping[str, Sequence[float]],
) -> PhaseFigures:
    """One phase's figures: the registry's increase from ``before`` to ``after`` (taken
    ``seconds`` apart) and the end-to-end latencies of its results by lane."""
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
    )


def _cache(hits: float, misses: float, tokens_saved: float) -> CacheFigures | None:
    if hits + misses <= 0:
        return None
    return CacheFigures(round(hits), round(hits + misses), round(tokens_saved))


def latencies_by_phase(
    results: Iterable[ResultRecord], phases: Sequence[Phase]
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


def phase_table(figures: PhaseFigures) -> Table:
    table = Table(
        title=f"{figures.phase.describe()}, done in {figures.seconds:.1f} s",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
    )
    table.add_column("lane")
    for title in ("items", "items/s", "calls", "mean batch", "P50 ms", "P99 ms"):
        table.add_column(title, justify="right")

    def row(name: str, lane: LaneFigures, calls: str = "", batch: str = "") -> None:
        rate = f"{figures.per_second(lane.items):,.0f}"
        table.add_row(
            name, f"{lane.items:,}", rate, calls, batch, _ms(lane.p50_ms), _ms(lane.p99_ms)
        )

    for name in LANES:
        row(name, figures.lanes[name])
    mean = "-" if figures.mean_batch is None else f"{figures.mean_batch:,.1f}"
    row("all", figures.total, f"{figures.calls:,}", mean)
    return table


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
