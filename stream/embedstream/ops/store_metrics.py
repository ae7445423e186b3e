"""Prometheus metrics of one store writer (`embedstream sink`), on an injected registry.

The names a processor also exposes (``embedstream_consumer_lag``, ``embedstream_ready``,
``embedstream_dead_letters_total``) mean the same here, so `embedstream top` and the dashboards
read a store writer like a processor; its lag carries ``lane="results"`` (the topic it reads).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import suppress

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from embedstream.wire.result_records import (
    ChunkResult,
    DocumentComplete,
    DocumentDeleted,
    DocumentIncomplete,
    OutputRecord,
)

RESULTS_LANE = "results"
ROW_KINDS = ("chunk", "request")
TRANSACTION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

STORE_METRIC_NAMES: frozenset[str] = frozenset(
    {
        "embedstream_store_rows_upserted_total",
        "embedstream_store_documents_deleted_total",
        "embedstream_store_documents_completed_total",
        "embedstream_store_transactions_total",
        "embedstream_store_transaction_seconds",
        "embedstream_store_rejected_total",
        "embedstream_store_writable",
    }
)


class StoreMetrics:
    """Every metric the store writer updates, one small method per update."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self._upserted = Counter(
            "embedstream_store_rows_upserted",
            "Rows written to the store (chunks by (doc_id, chunk_seq), requests by id).",
            ["kind"],
            registry=r,
        )
        self._deleted = Counter(
            "embedstream_store_documents_deleted",
            "Tombstones applied: every row of the document deleted.",
            registry=r,
        )
        self._completed = Counter(
            "embedstream_store_documents_completed",
            "Final records applied: complete (stale rows deleted) or incomplete (marked).",
            ["outcome"],
            registry=r,
        )
        self._transactions = Counter(
            "embedstream_store_transactions",
            "Store transactions, by outcome (committed, failed).",
            ["outcome"],
            registry=r,
        )
        self._transaction_seconds = Histogram(
            "embedstream_store_transaction_seconds",
            "Seconds per store transaction (one fetched batch).",
            buckets=TRANSACTION_BUCKETS,
            registry=r,
        )
        self._rejected = Counter(
            "embedstream_store_rejected",
            "Result records not written (dead-lettered), by reason code.",
            ["reason"],
            registry=r,
        )
        self._dead_letters = Counter(
            "embedstream_dead_letters",
            "Items sent to the dead-letter topic, by reason code.",
            ["reason"],
            registry=r,
        )
        self._writable = Gauge(
            "embedstream_store_writable", "1 while the store takes writes, else 0.", registry=r
        )
        self._lag = Gauge(
            "embedstream_consumer_lag",
            "Consumer lag in offsets: high watermark minus the next offset to write.",
            ["topic", "partition", "lane"],
            registry=r,
        )
        self._ready = Gauge("embedstream_ready", "1 when ready to serve, else 0.", registry=r)
        self._writable.set(1)
        for kind in ROW_KINDS:
            self._upserted.labels(kind=kind)
        for outcome in ("committed", "failed"):
            self._transactions.labels(outcome=outcome)

    def transaction(self, seconds: float, committed: bool) -> None:
        self._transactions.labels(outcome="committed" if committed else "failed").inc()
        self._transaction_seconds.observe(max(seconds, 0.0))
        self._writable.set(1 if committed else 0)

    def written(self, records: Sequence[OutputRecord]) -> None:
        for record in records:
            if isinstance(record, ChunkResult):
                self._upserted.labels(kind="chunk").inc()
            elif isinstance(record, DocumentComplete):
                self._completed.labels(outcome="complete").inc()
            elif isinstance(record, DocumentIncomplete):
                self._completed.labels(outcome="incomplete").inc()
            elif isinstance(record, DocumentDeleted):
                self._deleted.inc()
            else:
                self._upserted.labels(kind="request").inc()

    def rejected(self, reason: str) -> None:
        self._rejected.labels(reason=reason).inc()
        self._dead_letters.labels(reason=reason).inc()

    def set_lag(self, topic: str, partition: int, offsets: int) -> None:
        self._lag.labels(topic=topic, partition=str(partition), lane=RESULTS_LANE).set(offsets)

    def forget_partition(self, topic: str, partition: int) -> None:
        with suppress(KeyError):
            self._lag.remove(topic, str(partition), RESULTS_LANE)

    def set_ready(self, ready: bool) -> None:
        self._ready.set(1 if ready else 0)
