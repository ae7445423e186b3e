"""Pure model of ``embedstream top``: parse /metrics text, derive rates, render a text frame.

No I/O here. :func:`parse_exposition` turns one scrape into a :class:`Snapshot`;
:func:`compute_rates` compares two snapshots of the same target taken ``elapsed_s`` apart;
:func:`render_frame` lays out one fixed-width frame (a list of lines) for any number of
targets plus a total row.

Quantiles follow Prometheus ``histogram_quantile``: find the bucket holding the rank and
interpolate linearly inside it; a rank in the ``+Inf`` bucket answers the largest finite
bound. They are computed over bucket *increases* between two snapshots, so they describe
the last interval, not the whole life of the process.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from urllib.parse import urlsplit

from prometheus_client.parser import text_string_to_metric_families

from embedstream.core.lanes import Priority
from embedstream.core.policy import FlushReason

LAG_LANES = ("high", "low", "retry")
LANES = tuple(lane.label for lane in Priority)
QUEUE_LANES = ("high", "low", "delayed")
FLUSH_REASONS = tuple(str(reason) for reason in FlushReason)

# Topic name suffix -> lag lane; topics carry a deployment prefix such as "embed.".
_LAG_TOPIC_SUFFIXES = (("requests.high", "high"), ("requests.low", "low"), ("retry", "retry"))

_PREFIX = "embedstream_"
# Series summed over all their labels (error class/reason, retry and dead-letter reasons).
_SCALARS = frozenset(
    {
        "api_errors_total",
        "dead_letters_total",
        "retries_total",
        "in_flight_calls",
        "concurrency_limit",
        "paused_partitions",
    }
)


def _frozen(values: Mapping[str, float] | None = None) -> Mapping[str, float]:
    return MappingProxyType(dict(values or {}))


def lag_lane(topic: str) -> str | None:
    """The lane a consumer-lag topic belongs to, or None for a topic top does not show."""
    for suffix, lane in _LAG_TOPIC_SUFFIXES:
        if topic.endswith(suffix):
            return lane
    return None


def _increase(current: float, earlier: float) -> float:
    """Counter increase; a drop means the process restarted, so all of ``current`` is new."""
    return current - earlier if current >= earlier else current


# --------------------------------------------------------------------------- histograms


@dataclass(frozen=True, slots=True)
class Histogram:
    """A cumulative histogram: ``buckets`` are (upper bound, cumulative count), ascending."""

    buckets: tuple[tuple[float, float], ...] = ()
    sum: float = 0.0
    count: float = 0.0

    @property
    def bounds(self) -> tuple[float, ...]:
        return tuple(le for le, _ in self.buckets)

    def cumulative_at(self, le: float) -> float:
        """Cumulative count of the largest bound not above ``le`` (0 below the first)."""
        total = 0.0
        for bound, cumulative in self.buckets:
            if bound > le:
                break
            total = cumulative
        return total

    def increase_since(self, earlier: Histogram) -> Histogram:
        """Observations made after ``earlier``; all of ``self`` if the process restarted."""
        if not earlier.buckets and earlier.count == 0:
            return self
        if self.bounds != earlier.bounds or self.count < earlier.count:
            return self
        deltas = tuple(
            (le, now - then)
            for (le, now), (_, then) in zip(self.buckets, earlier.buckets, strict=True)
        )
        if any(delta < 0 for _, delta in deltas):
            return self
        return Histogram(deltas, self.sum - earlier.sum, self.count - earlier.count)

    def merge(self, other: Histogram) -> Histogram:
        """Both histograms' observations together (different layouts: union of bounds)."""
        if not other.buckets and other.count == 0:
            return self
        if not self.buckets and self.count == 0:
            return other
        bounds = sorted(set(self.bounds) | set(other.bounds))
        buckets = tuple((le, self.cumulative_at(le) + other.cumulative_at(le)) for le in bounds)
        return Histogram(buckets, self.sum + other.sum, self.count + other.count)

    def quantile(self, q: float) -> float | None:
        """Prometheus ``histogram_quantile(q)``; None without observations or a +Inf bucket."""
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"quantile must be within [0, 1], got {q}")
        if len(self.buckets) < 2 or not math.isinf(self.buckets[-1][0]):
            return None
        # Scrapes are not atomic, so cumulative counts may dip; Prometheus smooths that too.
        bounds: list[float] = []
        counts: list[float] = []
        running = 0.0
        for le, cumulative in self.buckets:
            running = max(running, cumulative)
            bounds.append(le)
            counts.append(running)
        total = counts[-1]
        if total <= 0:
            return None
        rank = q * total
        b = next(i for i, cumulative in enumerate(counts) if cumulative >= rank)
        if b == len(bounds) - 1:
            return bounds[-2]
        if b == 0 and bounds[0] <= 0:
            return bounds[0]
        start = 0.0 if b == 0 else bounds[b - 1]
        end = bounds[b]
        in_bucket = counts[b] - (0.0 if b == 0 else counts[b - 1])
        rank -= 0.0 if b == 0 else counts[b - 1]
        if in_bucket <= 0:
            return end
        return start + (end - start) * (rank / in_bucket)


def merge_histograms(histograms: Iterable[Histogram]) -> Histogram:
    merged = Histogram()
    for histogram in histograms:
        merged = merged.merge(histogram)
    return merged


# --------------------------------------------------------------------------- snapshots


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The metrics of one processor at one scrape, as top uses them."""

    lag: Mapping[str, float] = field(default_factory=_frozen)  # offsets by LAG_LANES
    lag_seconds_max: float = 0.0
    queue_depth: Mapping[str, float] = field(default_factory=_frozen)  # by QUEUE_LANES
    results: Mapping[str, float] = field(default_factory=_frozen)  # results_total by lane
    flushes: Mapping[str, float] = field(default_factory=_frozen)  # flushes_total by reason
    batch_size: Histogram = field(default_factory=Histogram)
    item_wait: Mapping[str, Histogram] = field(default_factory=lambda: MappingProxyType({}))
    api_errors: float = 0.0
    dead_letters: float = 0.0
    retries: float = 0.0
    in_flight: float = 0.0
    concurrency_limit: float = 0.0
    paused_partitions: float = 0.0
    ready: bool | None = None  # None when the series is absent

    @property
    def results_total(self) -> float:
        return sum(self.results.values())


class _HistogramParts:
    def __init__(self) -> None:
        self.buckets: dict[float, float] = {}
        self.sum = 0.0
        self.count = 0.0

    def build(self) -> Histogram:
        return Histogram(tuple(sorted(self.buckets.items())), self.sum, self.count)


class _Collector:
    """Accumulates samples (by sample name) into the parts of a :class:`Snapshot`."""

    def __init__(self) -> None:
        self.lag: dict[str, float] = dict.fromkeys(LAG_LANES, 0.0)
        self.lag_seconds_max = 0.0
        self.queue_depth: dict[str, float] = dict.fromkeys(QUEUE_LANES, 0.0)
        self.results: dict[str, float] = dict.fromkeys(LANES, 0.0)
        self.flushes: dict[str, float] = dict.fromkeys(FLUSH_REASONS, 0.0)
        self.batch_size = _HistogramParts()
        self.item_wait: dict[str, _HistogramParts] = {lane: _HistogramParts() for lane in LANES}
        self.scalars: dict[str, float] = defaultdict(float)
        self.ready: bool | None = None

    def add(self, name: str, labels: Mapping[str, str], value: float) -> None:
        if not name.startswith(_PREFIX):
            return
        short = name[len(_PREFIX) :]
        if short == "consumer_lag":
            lane = lag_lane(labels.get("topic", ""))
            if lane is not None:
                self.lag[lane] += value
        elif short == "consumer_lag_seconds":
            self.lag_seconds_max = max(self.lag_seconds_max, value)
        elif short == "queue_depth":
            lane = labels.get("lane", "")
            self.queue_depth[lane] = self.queue_depth.get(lane, 0.0) + value
        elif short == "results_total":
            lane = labels.get("lane", "")
            self.results[lane] = self.results.get(lane, 0.0) + value
        elif short == "flushes_total":
            reason = labels.get("reason", "")
            self.flushes[reason] = self.flushes.get(reason, 0.0) + value
        elif short.startswith("batch_size_"):
            self._histogram_part(self.batch_size, short[len("batch_size_") :], labels, value)
        elif short.startswith("item_wait_seconds_"):
            parts = self.item_wait.setdefault(labels.get("lane", ""), _HistogramParts())
            self._histogram_part(parts, short[len("item_wait_seconds_") :], labels, value)
        elif short in _SCALARS:
            self.scalars[short] += value
        elif short == "ready":
            self.ready = value >= 1.0

    @staticmethod
    def _histogram_part(
        parts: _HistogramParts, suffix: str, labels: Mapping[str, str], value: float
    ) -> None:
        if suffix == "bucket":
            le = float(labels["le"])
            parts.buckets[le] = parts.buckets.get(le, 0.0) + value
        elif suffix == "sum":
            parts.sum += value
        elif suffix == "count":
            parts.count += value

    def snapshot(self) -> Snapshot:
        return Snapshot(
            lag=_frozen(self.lag),
            lag_seconds_max=self.lag_seconds_max,
            queue_depth=_frozen(self.queue_depth),
            results=_frozen(self.results),
            flushes=_frozen(self.flushes),
            batch_size=self.batch_size.build(),
            item_wait=MappingProxyType({k: v.build() for k, v in self.item_wait.items()}),
            api_errors=self.scalars["api_errors_total"],
            dead_letters=self.scalars["dead_letters_total"],
            retries=self.scalars["retries_total"],
            in_flight=self.scalars["in_flight_calls"],
            concurrency_limit=self.scalars["concurrency_limit"],
            paused_partitions=self.scalars["paused_partitions"],
            ready=self.ready,
        )


def parse_exposition(text: str) -> Snapshot:
    """Parse Prometheus text exposition; ValueError if it is not valid exposition."""
    collector = _Collector()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            collector.add(sample.name, sample.labels, float(sample.value))
    return collector.snapshot()


# --------------------------------------------------------------------------- rates


@dataclass(frozen=True, slots=True)
class Rates:
    """What changed on one target between two snapshots taken ``elapsed_s`` apart."""

    elapsed_s: float
    results: Mapping[str, float]  # increase by lane
    flushes: Mapping[str, float]  # increase by reason
    batch_size: Histogram  # increase
    item_wait: Mapping[str, Histogram]  # increase by lane
    api_errors: float
    dead_letters: float
    retries: float

    def items_per_s(self, lane: str | None = None) -> float:
        items = sum(self.results.values()) if lane is None else self.results.get(lane, 0.0)
        return items / self.elapsed_s

    @property
    def batch_mean(self) -> float | None:
        """Mean inputs per call over the interval; None when no batch was flushed."""
        if self.batch_size.count <= 0:
            return None
        return self.batch_size.sum / self.batch_size.count

    def item_wait_histogram(self, lane: str | None = None) -> Histogram:
        if lane is not None:
            return self.item_wait.get(lane, Histogram())
        return merge_histograms(self.item_wait.values())

    def item_wait_quantile(self, q: float, lane: str | None = None) -> float | None:
        """Seconds; None when no item was flushed in the interval."""
        return self.item_wait_histogram(lane).quantile(q)


def _increases(current: Mapping[str, float], earlier: Mapping[str, float]) -> Mapping[str, float]:
    return _frozen({k: _increase(v, earlier.get(k, 0.0)) for k, v in current.items()})


def compute_rates(earlier: Snapshot, current: Snapshot, elapsed_s: float) -> Rates:
    """Rates of ``current`` relative to ``earlier``; ``elapsed_s`` must be positive."""
    if not elapsed_s > 0:
        raise ValueError(f"elapsed_s must be positive, got {elapsed_s}")
    empty = Histogram()
    return Rates(
        elapsed_s=elapsed_s,
        results=_increases(current.results, earlier.results),
        flushes=_increases(current.flushes, earlier.flushes),
        batch_size=current.batch_size.increase_since(earlier.batch_size),
        item_wait=MappingProxyType(
            {
                lane: hist.increase_since(earlier.item_wait.get(lane, empty))
                for lane, hist in current.item_wait.items()
            }
        ),
        api_errors=_increase(current.api_errors, earlier.api_errors),
        dead_letters=_increase(current.dead_letters, earlier.dead_letters),
        retries=_increase(current.retries, earlier.retries),
    )


# --------------------------------------------------------------------------- rows


@dataclass(frozen=True, slots=True)
class TargetView:
    """One target at one refresh: a snapshot (and rates once there are two), or why it is down."""

    url: str
    snapshot: Snapshot | None = None
    rates: Rates | None = None
    error: str | None = None

    @property
    def up(self) -> bool:
        return self.snapshot is not None


@dataclass(frozen=True, slots=True)
class Row:
    """The numbers of one table row; None shows as "-"; ``down`` set means the target is down."""

    name: str
    down: str | None = None
    lag_high: float | None = None
    lag_low: float | None = None
    lag_seconds: float | None = None
    items_per_s: float | None = None
    batch_mean: float | None = None
    wait_p50_ms: float | None = None
    wait_p99_ms: float | None = None
    errors: float | None = None
    dead_letters: float | None = None
    paused: float | None = None
    in_flight: float | None = None
    limit: float | None = None
    ready: str = "-"


def display_name(url: str) -> str:
    """``http://host:port/metrics`` -> ``host:port``; other paths are kept."""
    parts = urlsplit(url)
    if not parts.netloc:
        return url
    path = "" if parts.path in ("", "/", "/metrics") else parts.path
    return parts.netloc + path


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


def target_row(view: TargetView) -> Row:
    name = display_name(view.url)
    snap = view.snapshot
    if snap is None:
        return Row(name=name, down=view.error or "no data")
    rates = view.rates
    return Row(
        name=name,
        lag_high=snap.lag.get("high", 0.0),
        lag_low=snap.lag.get("low", 0.0),
        lag_seconds=snap.lag_seconds_max,
        items_per_s=None if rates is None else rates.items_per_s(),
        batch_mean=None if rates is None else rates.batch_mean,
        wait_p50_ms=None if rates is None else _ms(rates.item_wait_quantile(0.5)),
        wait_p99_ms=None if rates is None else _ms(rates.item_wait_quantile(0.99)),
        errors=snap.api_errors,
        dead_letters=snap.dead_letters,
        paused=snap.paused_partitions,
        in_flight=snap.in_flight,
        limit=snap.concurrency_limit,
        ready="-" if snap.ready is None else ("yes" if snap.ready else "no"),
    )


def total_row(views: Sequence[TargetView]) -> Row:
    """All up targets together: sums, the worst lag age, quantiles over the merged histograms."""
    snaps = [v.snapshot for v in views if v.snapshot is not None]
    ready = f"{sum(1 for s in snaps if s.ready)}/{len(views)}"
    if not snaps:
        return Row(name="TOTAL", ready=ready)
    rates = [v.rates for v in views if v.snapshot is not None and v.rates is not None]
    batches = merge_histograms(r.batch_size for r in rates)
    waits = merge_histograms(r.item_wait_histogram() for r in rates)
    return Row(
        name="TOTAL",
        lag_high=sum(s.lag.get("high", 0.0) for s in snaps),
        lag_low=sum(s.lag.get("low", 0.0) for s in snaps),
        lag_seconds=max(s.lag_seconds_max for s in snaps),
        items_per_s=sum(r.items_per_s() for r in rates) if rates else None,
        batch_mean=batches.sum / batches.count if batches.count > 0 else None,
        wait_p50_ms=_ms(waits.quantile(0.5)),
        wait_p99_ms=_ms(waits.quantile(0.99)),
        errors=sum(s.api_errors for s in snaps),
        dead_letters=sum(s.dead_letters for s in snaps),
        paused=sum(s.paused_partitions for s in snaps),
        in_flight=sum(s.in_flight for s in snaps),
        limit=sum(s.concurrency_limit for s in snaps),
        ready=ready,
    )


# --------------------------------------------------------------------------- rendering


def _compact(value: float) -> str:
    """At most five characters for non-negative values: 9999, 12.3k, 123k, 1.2M, 45.6G."""
    if abs(value) < 10_000:
        return f"{value:.0f}"
    for factor, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        scaled = value / factor
        if abs(scaled) >= 1:
            return f"{scaled:.1f}{suffix}" if abs(scaled) < 100 else f"{scaled:.0f}{suffix}"
    raise AssertionError(value)  # pragma: no cover - 10_000 >= 1e3


def fmt_count(value: float | None) -> str:
    """Counts and offsets: 1234, 12.3k, 4.5M."""
    return "-" if value is None else _compact(value)


def fmt_rate(value: float | None) -> str:
    """Items per second: 12.5, 850, 12.3k."""
    if value is None:
        return "-"
    return f"{value:.1f}" if abs(value) < 100 else _compact(value)


def fmt_ms(value: float | None) -> str:
    """Milliseconds: 2.50, 37.5, 1200."""
    if value is None:
        return "-"
    if abs(value) < 10:
        return f"{value:.2f}"
    if abs(value) < 1000:
        return f"{value:.1f}"
    return _compact(value)


def fmt_seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}" if abs(value) < 100 else _compact(value)


def fmt_mean(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _fmt_in_flight(row: Row) -> str:
    if row.in_flight is None or row.limit is None:
        return "-"
    return f"{_compact(row.in_flight)}/{_compact(row.limit)}"


NAME_WIDTH = 21
# (title, width) of every column after the target name; values are right-aligned.
COLUMNS: tuple[tuple[str, int], ...] = (
    ("LAG HI", 7),
    ("LAG LO", 7),
    ("LAG S", 6),
    ("ITEMS/S", 8),
    ("BATCH", 6),
    ("P50 MS", 7),
    ("P99 MS", 7),
    ("ERRORS", 6),
    ("DLQ", 5),
    ("PAUSED", 6),
    ("INFL/LIM", 9),
    ("READY", 5),
)
FRAME_WIDTH = NAME_WIDTH + sum(width + 1 for _, width in COLUMNS)


def _fit(text: str, width: int) -> str:
    """Left-aligned in exactly ``width`` characters, cut with an ellipsis when too long."""
    return text.ljust(width) if len(text) <= width else text[: width - 1] + "…"


def _cells(row: Row) -> list[str]:
    return [
        fmt_count(row.lag_high),
        fmt_count(row.lag_low),
        fmt_seconds(row.lag_seconds),
        fmt_rate(row.items_per_s),
        fmt_mean(row.batch_mean),
        fmt_ms(row.wait_p50_ms),
        fmt_ms(row.wait_p99_ms),
        fmt_count(row.errors),
        fmt_count(row.dead_letters),
        fmt_count(row.paused),
        _fmt_in_flight(row),
        row.ready,
    ]


def format_row(row: Row) -> str:
    """One table line of exactly :data:`FRAME_WIDTH` characters."""
    name = _fit(row.name, NAME_WIDTH)
    if row.down is not None:
        return name + _fit(f" down ({row.down})", FRAME_WIDTH - NAME_WIDTH)
    # A value too wide for its column shows as #### (like a spreadsheet), keeping the width.
    cells = (
        value.rjust(width) if len(value) <= width else "#" * width
        for value, (_, width) in zip(_cells(row), COLUMNS, strict=True)
    )
    return name + "".join(" " + cell for cell in cells)


def _title_line() -> str:
    return _fit("TARGET", NAME_WIDTH) + "".join(" " + t.rjust(w) for t, w in COLUMNS)


def render_frame(
    views: Sequence[TargetView], now: datetime, interval_s: float | None = None
) -> list[str]:
    """One frame: header (time, targets up), column titles, one row per target, a total row.

    Every line after the first is exactly :data:`FRAME_WIDTH` wide.
    """
    up = sum(1 for v in views if v.up)
    header = f"embedstream top  {now:%Y-%m-%d %H:%M:%S}  targets {up}/{len(views)} up"
    if interval_s is not None:
        header += f"  every {interval_s:g}s"
    lines = [_fit(header, FRAME_WIDTH).rstrip(), _title_line()]
    lines.extend(format_row(target_row(view)) for view in views)
    lines.append("-" * FRAME_WIDTH)
    lines.append(format_row(total_row(views)))
    return lines
