"""The numbers ``embedstream top`` shows, row by row, and how each is written; pure.

A :class:`Row` per target plus a total, a :class:`PartitionRow` per consumed partition, and a
:class:`State` per target: the one word its row shows, from worst to best.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from urllib.parse import urlsplit

from embedstream.tools.top.rates import TargetView
from embedstream.tools.top.readings import DOCUMENT_OUTCOMES, merge_histograms


class State(IntEnum):
    """A target's condition, worst first; the row shows the worst that applies."""

    DOWN = 0  # /metrics did not answer
    PROVIDER = 1  # the provider refused everyone, or every call failed, in the last interval
    NOT_READY = 2  # /readyz would answer 503
    PAUSED = 3  # partitions paused for backpressure
    READY = 4
    UNKNOWN = 5  # no embedstream_ready series (an older processor)


@dataclass(frozen=True, slots=True)
class Row:
    """The numbers of one table row; None shows as "-"; ``down`` set means the target is down."""

    name: str
    state: State = State.UNKNOWN
    down: str | None = None
    lag_high: float | None = None
    lag_low: float | None = None
    lag_retry: float | None = None
    lag_seconds: float | None = None
    items_per_s: float | None = None
    errors_per_s: float | None = None
    dead_letters_per_s: float | None = None
    retries_per_s: float | None = None
    batch_mean: float | None = None
    wait_p50_ms: float | None = None
    wait_p99_ms: float | None = None
    paused: float | None = None
    in_flight: float | None = None
    limit: float | None = None
    ready: tuple[int, int] | None = None  # total row: targets ready, targets


@dataclass(frozen=True, slots=True)
class PartitionRow:
    target: str
    topic: str
    partition: int
    lane: str
    lag: float
    lag_seconds: float


def display_name(url: str) -> str:
    """``http://host:port/metrics`` -> ``host:port``; other paths are kept."""
    parts = urlsplit(url)
    if not parts.netloc:
        return url
    path = "" if parts.path in ("", "/", "/metrics") else parts.path
    return parts.netloc + path


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


def target_state(view: TargetView) -> State:
    snap = view.snapshot
    if snap is None:
        return State.DOWN
    if view.rates is not None and view.rates.provider_failing:
        return State.PROVIDER
    if snap.ready is False:
        return State.NOT_READY
    if snap.paused_partitions > 0:
        return State.PAUSED
    return State.UNKNOWN if snap.ready is None else State.READY


def target_row(view: TargetView) -> Row:
    name = display_name(view.url)
    snap = view.snapshot
    if snap is None:
        return Row(name=name, state=State.DOWN, down=view.error or "no data")
    rates = view.rates
    return Row(
        name=name,
        state=target_state(view),
        lag_high=snap.lag.get("high", 0.0),
        lag_low=snap.lag.get("low", 0.0),
        lag_retry=snap.lag.get("retry", 0.0),
        lag_seconds=snap.lag_seconds_max,
        items_per_s=None if rates is None else rates.items_per_s(),
        errors_per_s=None if rates is None else rates.errors_per_s,
        dead_letters_per_s=None if rates is None else rates.dead_letters_per_s,
        retries_per_s=None if rates is None else rates.retries_per_s,
        batch_mean=None if rates is None else rates.batch_mean,
        wait_p50_ms=None if rates is None else _ms(rates.item_wait_quantile(0.5)),
        wait_p99_ms=None if rates is None else _ms(rates.item_wait_quantile(0.99)),
        paused=snap.paused_partitions,
        in_flight=snap.in_flight,
        limit=snap.concurrency_limit,
    )


def _sum(values: Sequence[float]) -> float | None:
    return sum(values) if values else None


def total_row(views: Sequence[TargetView]) -> Row:
    """All up targets together: sums, the worst lag age, quantiles over the merged histograms."""
    snaps = [v.snapshot for v in views if v.snapshot is not None]
    ready = (sum(1 for s in snaps if s.ready), len(views))
    state = min((target_state(v) for v in views), default=State.UNKNOWN)
    if not snaps:
        return Row(name="TOTAL", state=state, ready=ready)
    rates = [v.rates for v in views if v.snapshot is not None and v.rates is not None]
    batches = merge_histograms(r.batch_size for r in rates)
    waits = merge_histograms(r.item_wait_histogram() for r in rates)
    return Row(
        name="TOTAL",
        state=state,
        lag_high=sum(s.lag.get("high", 0.0) for s in snaps),
        lag_low=sum(s.lag.get("low", 0.0) for s in snaps),
        lag_retry=sum(s.lag.get("retry", 0.0) for s in snaps),
        lag_seconds=max(s.lag_seconds_max for s in snaps),
        items_per_s=_sum([r.items_per_s() for r in rates]),
        errors_per_s=_sum([r.errors_per_s for r in rates]),
        dead_letters_per_s=_sum([r.dead_letters_per_s for r in rates]),
        retries_per_s=_sum([r.retries_per_s for r in rates]),
        batch_mean=batches.sum / batches.count if batches.count > 0 else None,
        wait_p50_ms=_ms(waits.quantile(0.5)),
        wait_p99_ms=_ms(waits.quantile(0.99)),
        paused=sum(s.paused_partitions for s in snaps),
        in_flight=sum(s.in_flight for s in snaps),
        limit=sum(s.concurrency_limit for s in snaps),
        ready=ready,
    )


def partition_rows(views: Sequence[TargetView]) -> list[PartitionRow]:
    """Every consumed partition of every up target, most behind first."""
    rows = [
        PartitionRow(display_name(v.url), p.topic, p.partition, p.lane, p.lag, p.lag_seconds)
        for v in views
        if v.snapshot is not None
        for p in v.snapshot.partitions
    ]
    return sorted(rows, key=lambda r: (-r.lag, -r.lag_seconds, r.target, r.topic, r.partition))


def problems(views: Sequence[TargetView]) -> list[tuple[State, str]]:
    """One sentence per target that is not fine, worst first: what an operator looks at."""
    found: list[tuple[State, str]] = []
    for view in views:
        name, state, snap = display_name(view.url), target_state(view), view.snapshot
        if snap is None:
            found.append((state, f"{name}: down ({view.error or 'no data'})"))
            continue
        rates = view.rates
        if rates is not None and rates.provider_failing:
            failed = f"{rates.calls_failed:.0f} of {rates.calls_ok + rates.calls_failed:.0f}"
            found.append((State.PROVIDER, f"{name}: provider failing ({failed} calls failed)"))
        if snap.ready is False:
            found.append((State.NOT_READY, f"{name}: not ready (see its /readyz)"))
        if snap.paused_partitions > 0:
            paused = f"{snap.paused_partitions:.0f} partition(s) paused for backpressure"
            found.append((State.PAUSED, f"{name}: {paused}"))
    return sorted(found, key=lambda item: item[0])


def cache_line(views: Sequence[TargetView]) -> str | None:
    """The embedding cache over every target that uses one, over the last refresh (totals
    before the second); None when no target looks texts up in a cache."""
    using = [v for v in views if v.snapshot is not None and v.snapshot.cache_used]
    if not using:
        return None
    rated = [v.rates for v in using if v.rates is not None]
    if len(rated) < len(using):
        snaps = [v.snapshot for v in using if v.snapshot is not None]
        hits = sum(s.cache_hits for s in snaps)
        misses = sum(s.cache_misses for s in snaps)
        saved = sum(s.cache_tokens_saved for s in snaps)
        errors = sum(s.cache_errors for s in snaps)
        ratio = hits / (hits + misses) if hits + misses else 0.0
        return (f"cache: {ratio:.0%} hits since start ({_compact(hits)} hits, "
                f"{_compact(misses)} misses), {_compact(saved)} tokens saved, "
                f"{_compact(errors)} errors")  # fmt: skip
    elapsed = rated[0].elapsed_s
    hits = sum(r.cache_hits for r in rated)
    misses = sum(r.cache_misses for r in rated)
    ratio = hits / (hits + misses) if hits + misses else 0.0
    return (f"cache: {ratio:.0%} hits ({_compact(hits / elapsed)} hits/s, "
            f"{_compact(misses / elapsed)} misses/s), "
            f"{_compact(sum(r.cache_tokens_saved for r in rated) / elapsed)} tokens saved/s, "
            f"{_per_s(sum(r.cache_errors for r in rated) / elapsed)} errors/s")  # fmt: skip


def documents_line(views: Sequence[TargetView]) -> str | None:
    """Documents over every target that has seen one: versions ended by outcome and chunks, per
    second over the last refresh (totals since start before the second); None without any."""
    seen = [v for v in views if v.snapshot is not None and v.snapshot.documents_seen]
    if not seen:
        return None
    rated = [v.rates for v in seen if v.rates is not None]
    if len(rated) < len(seen):
        snaps = [v.snapshot for v in seen if v.snapshot is not None]
        ended = ", ".join(
            f"{_compact(sum(s.documents.get(o, 0.0) for s in snaps))} {o}"
            for o in DOCUMENT_OUTCOMES
        )
        return f"documents since start: {ended}; {_compact(sum(s.chunks for s in snaps))} chunks"
    elapsed = rated[0].elapsed_s
    ended = ", ".join(
        f"{_per_s(sum(r.documents.get(o, 0.0) for r in rated) / elapsed)} {o}"
        for o in DOCUMENT_OUTCOMES
    )
    return f"documents/s: {ended}; {_compact(sum(r.chunks for r in rated) / elapsed)} chunks/s"


def _per_s(value: float) -> str:
    """A rate that must not round a rare event away: 0.5/s stays 0.5, not 0."""
    return f"{value:.1f}" if 0 < value < 10 else _compact(value)


# --------------------------------------------------------------------------- formatting


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
    """Per second: 0, 0.05, 12.5, 850, 12.3k."""
    if value is None:
        return "-"
    if value == 0:
        return "0"
    if abs(value) < 1:
        return f"{value:.2f}"
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


def fmt_in_flight(row: Row) -> str:
    if row.in_flight is None or row.limit is None:
        return "-"
    return f"{_compact(row.in_flight)}/{_compact(row.limit)}"


def fmt_state(row: Row) -> str:
    """The word of the STATE column; the total row counts ready targets instead."""
    if row.ready is not None:
        return f"{row.ready[0]}/{row.ready[1]} ready"
    if row.state is State.PAUSED:
        return f"paused {fmt_count(row.paused)}"
    words = {
        State.DOWN: "down",
        State.PROVIDER: "provider",
        State.NOT_READY: "not ready",
        State.READY: "ready",
        State.UNKNOWN: "-",
    }
    return words[row.state]
