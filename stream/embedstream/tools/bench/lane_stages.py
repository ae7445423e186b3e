"""Where a lane's requests spent their time, from what its process counted: read after a bench
arm from the /metrics of `embedstream run` (each lane process's families carry a ``process``
label there), so a lane run as a process of its own is profiled without a tracer in it.

The batcher's wait and the provider calls are histograms (their P99 interpolated inside a
bucket, as Prometheus' ``histogram_quantile`` does; their means exact); the budget's waits
are counts by reason. The records' own timestamps tell the stages around the processor:
scheduled -> published (the publisher's) and published -> written (the processor's).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from prometheus_client.parser import text_string_to_metric_families

from embedstream.kafka.client.clients import connection_for, make_reader, partitions_of
from embedstream.settings import Settings
from embedstream.tools.top.histogram import Histogram


def histogram_of(text: str, name: str, labels: Mapping[str, str]) -> Histogram:
    """The histogram ``name`` over every series matching ``labels``, merged."""
    buckets: dict[float, float] = {}
    total = count = 0.0
    for family in text_string_to_metric_families(text):
        if family.name != name:
            continue
        for sample in family.samples:
            if any(sample.labels.get(key) != value for key, value in labels.items()):
                continue
            if sample.name == f"{name}_bucket":
                bound = float(sample.labels["le"])
                buckets[bound] = buckets.get(bound, 0.0) + sample.value
            elif sample.name == f"{name}_sum":
                total += sample.value
            elif sample.name == f"{name}_count":
                count += sample.value
    return Histogram(tuple(sorted(buckets.items())), total, count)


def counts_by(text: str, name: str, label: str, labels: Mapping[str, str]) -> dict[str, float]:
    """A counter's series matching ``labels``, summed by the value of ``label``."""
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != name:
            continue
        for sample in family.samples:
            if sample.name != f"{name}_total":
                continue
            if any(sample.labels.get(key) != value for key, value in labels.items()):
                continue
            key = sample.labels.get(label, "")
            found[key] = found.get(key, 0.0) + sample.value
    return found


def lane_stages(text: str, lane: str, process: str | None) -> dict[str, float | None]:
    """The stages of ``lane``'s requests in ``process`` (None: a process alone, unlabelled):
    the batcher's wait and the provider calls (P99 and mean, ms), the calls it made and how
    often the budget told it to wait, by reason."""
    where = {"process": process} if process else {}
    waited = histogram_of(text, "embedstream_item_wait_seconds", {"lane": lane, **where})
    calls = histogram_of(text, "embedstream_api_latency_seconds", where)
    stages: dict[str, float | None] = {
        "batcher_wait_p99_ms": ms(waited.quantile(0.99)),
        "batcher_wait_mean_ms": ms(waited.sum / waited.count if waited.count else None),
        "call_p99_ms": ms(calls.quantile(0.99)),
        "call_mean_ms": ms(calls.sum / calls.count if calls.count else None),
        "calls": calls.count,
    }
    waits = counts_by(text, "embedstream_budget_waits", "reason", {"lane": lane, **where})
    for reason, times in sorted(waits.items()):
        stages[f"budget_waits_{reason}"] = times
    return stages


async def record_times(settings: Settings, topic: str, prefix: str) -> dict[str, int]:
    """The timestamp (ms) of each record of ``topic`` whose key starts with ``prefix``."""
    reader = make_reader(connection_for(settings), fetch_max_bytes=64 * 1024 * 1024)
    await reader.start()
    found: dict[str, int] = {}
    try:
        partitions = await partitions_of(reader, topic)
        reader.assign(partitions)
        ends = await reader.end_offsets(partitions)
        await reader.seek_to_beginning(*partitions)
        while [p for p in partitions if await reader.position(p) < ends[p]]:
            batches = await reader.getmany(timeout_ms=500, max_records=10_000)
            for records in batches.values():
                for record in records:
                    key = (record.key or b"").decode()
                    if key.startswith(prefix):
                        found.setdefault(key, record.timestamp)
    finally:
        await reader.stop()
    return found


def record_stages(
    scheduled: dict[str, float], requested: dict[str, int], written: dict[str, int],
    wall_offset: float,
) -> dict[str, float | None]:  # fmt: skip
    """P99 of the two stages the records' own timestamps tell: scheduled -> published (the
    publisher's process) and published -> written (the processor: fetch, batcher, budget,
    call, write)."""
    published_s = [
        requested[rid] / 1000.0 - (due + wall_offset)
        for rid, due in scheduled.items()
        if rid in requested
    ]
    processed_s = [
        (written[rid] - requested[rid]) / 1000.0
        for rid in scheduled
        if rid in requested and rid in written
    ]
    return {
        "published_p99_ms": ms(quantile(published_s, 0.99)),
        "processed_p50_ms": ms(quantile(processed_s, 0.5)),
        "processed_p99_ms": ms(quantile(processed_s, 0.99)),
    }


def quantile(values: Sequence[float], q: float) -> float | None:
    """The sample at rank ``q`` (no interpolation: a P99 of a few hundred is a real answer)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)
