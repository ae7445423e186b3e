"""Pure model of ``embedstream top``: parse /metrics text, derive rates.

No I/O here. :func:`parse_exposition` turns one scrape into a :class:`Snapshot`;
:mod:`embedstream.tools.top.rates` compares two of them.
Rows and layout live in :mod:`embedstream.tools.top.rows` and
:mod:`embedstream.tools.top.layout`.

Lag belongs to a lane (high, low, retry): the ``lane`` label processors put on
``embedstream_consumer_lag`` says which, whatever the topics are called. Only the metrics of
processors older than that label are read by the topic name's suffix
(``<prefix>requests.high``), which holds for the default topic names alone.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from embedstream.core.lanes import InputLane, Priority
from embedstream.core.policy import FlushReason
from embedstream.tools.top.histogram import Histogram, merge_histograms

LAG_LANES = tuple(lane.value for lane in InputLane)
LANES = tuple(lane.label for lane in Priority)
QUEUE_LANES = ("high", "low", "delayed")
FLUSH_REASONS = tuple(str(reason) for reason in FlushReason)
# The error class of failures that stop calls for everyone (see errors.ProviderWideError).
PROVIDER_WIDE = "ProviderWideError"

# Topic name suffix -> lag lane, for metrics without a lane label (older processors).
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
        "cache_hits_total",
        "cache_misses_total",
        "cache_errors_total",
        "cache_tokens_saved_total",
        "chunks_total",
    }
)
DOCUMENT_OUTCOMES = ("complete", "incomplete", "deleted")  # embedstream_documents_total

__all__ = [
    "Histogram",
    "PartitionLag",
    "Snapshot",
    "lag_lane",
    "merge_histograms",
    "parse_exposition",
    "snapshot_of",
]


def frozen_mapping(values: Mapping[str, float] | None = None) -> Mapping[str, float]:
    return MappingProxyType(dict(values or {}))


def lag_lane(topic: str, label: str | None = None) -> str | None:
    """The lane of a consumer-lag series: its ``lane`` label, else guessed from the topic name;
    None for a topic top does not show."""
    if label:
        return label if label in LAG_LANES else None
    for suffix, lane in _LAG_TOPIC_SUFFIXES:
        if topic.endswith(suffix):
            return lane
    return None


def increase(current: float, earlier: float) -> float:
    """Counter increase; a drop means the process restarted, so all of ``current`` is new."""
    return current - earlier if current >= earlier else current


# --------------------------------------------------------------------------- snapshots


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """One consumed partition: offsets behind and the age of its oldest unfinished record."""

    topic: str
    partition: int
    lane: str
    lag: float = 0.0
    lag_seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The metrics of one processor at one scrape, as top uses them."""

    lag: Mapping[str, float] = field(default_factory=frozen_mapping)  # offsets by LAG_LANES
    lag_seconds_max: float = 0.0
    partitions: tuple[PartitionLag, ...] = ()  # sorted by topic, partition
    queue_depth: Mapping[str, float] = field(default_factory=frozen_mapping)  # by QUEUE_LANES
    results: Mapping[str, float] = field(default_factory=frozen_mapping)  # results_total by lane
    flushes: Mapping[str, float] = field(default_factory=frozen_mapping)  # flushes_total by reason
    batch_size: Histogram = field(default_factory=Histogram)
    item_wait: Mapping[str, Histogram] = field(default_factory=lambda: MappingProxyType({}))
    api_calls: Mapping[str, float] = field(default_factory=frozen_mapping)  # by outcome: ok, error
    api_errors_by_class: Mapping[str, float] = field(default_factory=frozen_mapping)
    api_errors: float = 0.0
    dead_letters: float = 0.0
    retries: float = 0.0
    in_flight: float = 0.0
    concurrency_limit: float = 0.0
    paused_partitions: float = 0.0
    ready: bool | None = None  # None when the series is absent
    cache_hits: float = 0.0  # over every tier
    cache_misses: float = 0.0
    cache_errors: float = 0.0
    cache_tokens_saved: float = 0.0
    documents: Mapping[str, float] = field(default_factory=frozen_mapping)  # by DOCUMENT_OUTCOMES
    chunks: float = 0.0  # chunks documents were cut into

    @property
    def documents_seen(self) -> bool:
        """The processor has ended or deleted a document, or cut one into chunks."""
        return self.chunks > 0 or any(self.documents.values())

    source_tokens: Mapping[str, float] = field(default_factory=frozen_mapping)  # by source topic
    # The online lane's requests by HTTP status (over every key), and their latency.
    online_requests: Mapping[str, float] = field(default_factory=frozen_mapping)
    online_latency: Histogram = field(default_factory=Histogram)
    backfill: BackfillProgress | None = None  # None while no generation is being filled
    # The provider budget as this target last saw the fleet (`ops/budget_metrics.py`): its
    # members, the fleet's calls in flight by lane, this target's own leases by lane.
    budget_members: float = 1.0
    budget_fleet: Mapping[str, float] = field(default_factory=frozen_mapping)
    budget_leases: Mapping[str, float] = field(default_factory=frozen_mapping)
    budget_on_own_share: bool = False

    @property
    def budget_shared(self) -> bool:
        """The target draws on a fleet's budget (`budget_url`), alone in it or not."""
        return self.budget_members > 1 or sum(self.budget_fleet.values()) > 0

    # The money (`ops/batch_metrics.py`): provider tokens and their cost by price tier (sync,
    # batch), batch jobs by state and the oldest one's age at the provider.
    tier_tokens: Mapping[str, float] = field(default_factory=frozen_mapping)
    tier_cost: Mapping[str, float] = field(default_factory=frozen_mapping)
    batch_jobs: Mapping[str, float] = field(default_factory=frozen_mapping)
    batch_oldest_s: float = 0.0

    @property
    def online_used(self) -> bool:
        """The processor serves the online lane and has answered a request."""
        return sum(self.online_requests.values()) > 0

    @property
    def cache_used(self) -> bool:
        """The processor has looked texts up in an embedding cache (cache is not off)."""
        return self.cache_hits + self.cache_misses > 0

    @property
    def results_total(self) -> float:
        return sum(self.results.values())


@dataclass(frozen=True, slots=True)
class BackfillProgress:
    """A migration's backfill on one processor (`ops/migration_metrics.py`)."""

    planned_documents: float
    planned_tokens: float
    ended: float  # document versions it ended or deleted since this processor started
    skipped: float  # versions it found held already (not embedded)
    tokens: float  # provider tokens of its calls
    records_left: float
    seconds_left: float | None  # at the last minute's rate; -1 while it reads none
    superseded: float = 0.0  # older versions it passed over (a later record replaces them)


class _HistogramParts:
    def __init__(self) -> None:
        self.buckets: dict[float, float] = {}
        self.sum = 0.0
        self.count = 0.0

    def build(self) -> Histogram:
        return Histogram(tuple(sorted(self.buckets.items())), self.sum, self.count)


def _add(into: dict[str, float], key: str, value: float) -> None:
    into[key] = into.get(key, 0.0) + value


class _Collector:
    """Accumulates samples (by sample name) into the parts of a :class:`Snapshot`."""

    def __init__(self) -> None:
        self.lag: dict[str, float] = dict.fromkeys(LAG_LANES, 0.0)
        self.lag_seconds_max = 0.0
        self.partitions: dict[tuple[str, int], PartitionLag] = {}
        self.queue_depth: dict[str, float] = dict.fromkeys(QUEUE_LANES, 0.0)
        self.results: dict[str, float] = dict.fromkeys(LANES, 0.0)
        self.flushes: dict[str, float] = dict.fromkeys(FLUSH_REASONS, 0.0)
        self.batch_size = _HistogramParts()
        self.item_wait: dict[str, _HistogramParts] = {lane: _HistogramParts() for lane in LANES}
        self.api_calls: dict[str, float] = {"ok": 0.0, "error": 0.0}
        self.api_errors_by_class: dict[str, float] = {}
        self.documents: dict[str, float] = dict.fromkeys(DOCUMENT_OUTCOMES, 0.0)
        self.scalars: dict[str, float] = defaultdict(float)
        self.ready: bool | None = None
        self.source_tokens: dict[str, float] = {}
        self.online_requests: dict[str, float] = {}
        self.online_latency = _HistogramParts()
        self.backfill: dict[str, float] = {}
        self.budget: dict[str, float] = {"members": 1.0, "on_own_share": 0.0}
        self.budget_fleet: dict[str, float] = {}
        self.budget_leases: dict[str, float] = {}
        self.money: dict[str, dict[str, float]] = {"tokens": {}, "cost": {}, "jobs": {}}
        self.batch_oldest_s = 0.0

    def add(self, name: str, labels: Mapping[str, str], value: float) -> None:
        if not name.startswith(_PREFIX):
            return
        short = name[len(_PREFIX) :]
        if short in ("consumer_lag", "consumer_lag_seconds"):
            self._lag(short == "consumer_lag", labels, value)
        elif short == "queue_depth":
            _add(self.queue_depth, labels.get("lane", ""), value)
        elif short == "results_total":
            _add(self.results, labels.get("lane", ""), value)
        elif short == "flushes_total":
            _add(self.flushes, labels.get("reason", ""), value)
        elif short == "documents_total":
            _add(self.documents, labels.get("outcome", ""), value)
        elif short == "api_calls_total":
            _add(self.api_calls, labels.get("outcome", ""), value)
        elif short.startswith("batch_size_"):
            self._histogram_part(self.batch_size, short[len("batch_size_") :], labels, value)
        elif short.startswith("item_wait_seconds_"):
            parts = self.item_wait.setdefault(labels.get("lane", ""), _HistogramParts())
            self._histogram_part(parts, short[len("item_wait_seconds_") :], labels, value)
        elif short in _SCALARS:
            self.scalars[short] += value
            if short == "api_errors_total":
                _add(self.api_errors_by_class, labels.get("error_class", ""), value)
        elif short == "ready":
            self.ready = value >= 1.0
        elif short == "source_tokens_total":  # reported and estimated alike
            _add(self.source_tokens, labels.get("source", ""), value)
        elif short == "online_requests_total":
            _add(self.online_requests, labels.get("status", ""), value)
        elif short.startswith("online_request_seconds_"):
            suffix = short[len("online_request_seconds_") :]
            self._histogram_part(self.online_latency, suffix, labels, value)
        elif short.startswith("backfill_") or short == "generation_tokens_total":
            self._backfill(short, labels, value)
        elif short in ("budget_members", "budget_on_own_share"):
            self.budget[short.removeprefix("budget_")] = value
        elif short == "budget_fleet_in_flight":
            _add(self.budget_fleet, labels.get("lane", ""), value)
        elif short == "budget_leases":
            _add(self.budget_leases, labels.get("lane", ""), value)
        elif short == "provider_tokens_total":  # every model
            _add(self.money["tokens"], labels.get("tier", ""), value)
        elif short == "provider_cost_usd_total":
            _add(self.money["cost"], labels.get("tier", ""), value)
        elif short == "batch_jobs":
            _add(self.money["jobs"], labels.get("state", ""), value)
        elif short == "batch_job_oldest_seconds":
            self.batch_oldest_s = max(self.batch_oldest_s, value)

    def _backfill(self, short: str, labels: Mapping[str, str], value: float) -> None:
        if short == "backfill_planned":
            _add(self.backfill, "planned_" + labels.get("what", ""), value)
        elif short == "generation_tokens_total":
            if labels.get("lane") == "backfill":
                _add(self.backfill, "tokens", value)
        elif short == "backfill_skipped_total" and labels.get("reason") == "superseded":
            _add(self.backfill, "superseded", value)  # older versions: not the plan's documents
        elif short in ("backfill_documents_total", "backfill_skipped_total"):
            _add(self.backfill, short, value)
        elif short in ("backfill_records_left", "backfill_seconds_left"):
            self.backfill[short] = value

    def _backfill_progress(self) -> BackfillProgress | None:
        b = self.backfill
        planned = b.get("planned_documents", 0.0)
        if planned <= 0 and b.get("backfill_records_left", 0.0) <= 0:
            return None
        return BackfillProgress(
            planned_documents=planned,
            planned_tokens=b.get("planned_tokens", 0.0),
            ended=b.get("backfill_documents_total", 0.0),
            skipped=b.get("backfill_skipped_total", 0.0),
            tokens=b.get("tokens", 0.0),
            records_left=b.get("backfill_records_left", 0.0),
            seconds_left=b.get("backfill_seconds_left"),
            superseded=b.get("superseded", 0.0),
        )

    def _lag(self, offsets: bool, labels: Mapping[str, str], value: float) -> None:
        topic = labels.get("topic", "")
        lane = lag_lane(topic, labels.get("lane"))
        if lane is None:
            return
        try:
            partition = int(labels.get("partition", ""))
        except ValueError:
            partition = -1
        key = (topic, partition)
        known = self.partitions.get(key, PartitionLag(topic, partition, lane))
        if offsets:
            self.lag[lane] += value
            known = PartitionLag(topic, partition, lane, value, known.lag_seconds)
        else:
            self.lag_seconds_max = max(self.lag_seconds_max, value)
            known = PartitionLag(topic, partition, lane, known.lag, value)
        self.partitions[key] = known

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
            lag=frozen_mapping(self.lag),
            lag_seconds_max=self.lag_seconds_max,
            partitions=tuple(self.partitions[key] for key in sorted(self.partitions)),
            queue_depth=frozen_mapping(self.queue_depth),
            results=frozen_mapping(self.results),
            flushes=frozen_mapping(self.flushes),
            batch_size=self.batch_size.build(),
            item_wait=MappingProxyType({k: v.build() for k, v in self.item_wait.items()}),
            api_calls=frozen_mapping(self.api_calls),
            api_errors_by_class=frozen_mapping(self.api_errors_by_class),
            api_errors=self.scalars["api_errors_total"],
            dead_letters=self.scalars["dead_letters_total"],
            retries=self.scalars["retries_total"],
            in_flight=self.scalars["in_flight_calls"],
            concurrency_limit=self.scalars["concurrency_limit"],
            paused_partitions=self.scalars["paused_partitions"],
            ready=self.ready,
            cache_hits=self.scalars["cache_hits_total"],
            cache_misses=self.scalars["cache_misses_total"],
            cache_errors=self.scalars["cache_errors_total"],
            cache_tokens_saved=self.scalars["cache_tokens_saved_total"],
            documents=frozen_mapping(self.documents),
            chunks=self.scalars["chunks_total"],
            source_tokens=frozen_mapping(self.source_tokens),
            online_requests=frozen_mapping(self.online_requests),
            online_latency=self.online_latency.build(),
            backfill=self._backfill_progress(),
            budget_members=self.budget["members"],
            budget_fleet=frozen_mapping(self.budget_fleet),
            budget_leases=frozen_mapping(self.budget_leases),
            budget_on_own_share=self.budget["on_own_share"] >= 1.0,
            tier_tokens=frozen_mapping(self.money["tokens"]),
            tier_cost=frozen_mapping(self.money["cost"]),
            batch_jobs=frozen_mapping(self.money["jobs"]),
            batch_oldest_s=self.batch_oldest_s,
        )


def parse_exposition(text: str) -> Snapshot:
    """Parse Prometheus text exposition; ValueError if it is not valid exposition."""
    return snapshot_of(text_string_to_metric_families(text))


def snapshot_of(families: Iterable[Metric]) -> Snapshot:
    """A snapshot of metric families: parsed exposition, or ``registry.collect()`` of a
    processor in the same process (the demo reads its own processor's registry so)."""
    collector = _Collector()
    for family in families:
        for sample in family.samples:
            collector.add(sample.name, sample.labels, float(sample.value))
    return collector.snapshot()
