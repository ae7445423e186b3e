"""Prometheus metrics of a migration, on the processor's registry: the provider tokens of
every index generation it writes (by lane), and the backfill's progress against the plan that
`embedstream migrate start` made (documents done, documents it found already held, records of
the documents topic left, the time left at the rate of the last minute)."""

from __future__ import annotations

from collections import deque

from prometheus_client import CollectorRegistry, Counter, Gauge

from embedstream.core.backfill_skips import SkipReason

MIGRATION_METRIC_NAMES: frozenset[str] = frozenset(
    {
        "embedstream_generation_tokens_total",
        "embedstream_backfill_documents_total",
        "embedstream_backfill_skipped_total",
        "embedstream_backfill_planned",
        "embedstream_backfill_records_left",
        "embedstream_backfill_seconds_left",
    }
)
RATE_WINDOW_S = 60.0  # the time left is at the backfill's rate over this long


class MigrationMetrics:
    """What the dual-writes, the backfill lane and the store watch report."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._tokens = Counter(
            "embedstream_generation_tokens",
            "Provider tokens of the vectors made, by index generation and lane (the estimate "
            "where the provider reports no usage; none for cache hits).",
            ["index_generation", "lane"],
            registry=registry,
        )
        self._documents = Counter(
            "embedstream_backfill_documents",
            "Document versions the backfill ended (complete, incomplete) or deleted.",
            ["outcome"],
            registry=registry,
        )
        self._skipped = Counter(
            "embedstream_backfill_skipped",
            "Document versions the backfill did not embed: the new generation held them "
            "complete at that version, the live stream wrote the document, or a later record "
            "of the document in the topic supersedes them.",
            ["reason"],
            registry=registry,
        )
        self._planned = Gauge(
            "embedstream_backfill_planned",
            "The plan of the generation being filled (`migrate start`): documents, tokens; "
            "0 when none is.",
            ["what"],
            registry=registry,
        )
        self._left = Gauge(
            "embedstream_backfill_records_left",
            "Records of the documents topic the backfill has not read (this processor's "
            "partitions).",
            registry=registry,
        )
        self._seconds_left = Gauge(
            "embedstream_backfill_seconds_left",
            "Time left at the backfill's rate of the last minute: records left / records read "
            "per second (-1 while it reads none, 0 when done).",
            registry=registry,
        )
        for what in ("documents", "tokens"):
            self._planned.labels(what)
        for outcome in ("complete", "incomplete", "deleted"):
            self._documents.labels(outcome)
        for reason in SkipReason:
            self._skipped.labels(reason.value)
        self._samples: deque[tuple[float, int]] = deque()  # (time, records read) of the window
        self._read = 0

    def count_tokens(self, generation: str, lane: str, tokens: int) -> None:
        self._tokens.labels(generation, lane).inc(tokens)

    def count_document(self, outcome: str) -> None:
        self._documents.labels(outcome).inc()

    def count_skipped(self, reason: SkipReason) -> None:
        self._skipped.labels(reason.value).inc()

    def set_plan(self, documents: int, tokens: int) -> None:
        self._planned.labels("documents").set(documents)
        self._planned.labels("tokens").set(tokens)

    def sample(self, records_left: int, records_read: int, now: float) -> None:
        """The backfill's records left and read so far (monotonic ``now``)."""
        self._left.set(records_left)
        self._samples.append((now, records_read))
        while self._samples and now - self._samples[0][0] > RATE_WINDOW_S:
            self._samples.popleft()
        first_t, first_read = self._samples[0]
        rate = (records_read - first_read) / (now - first_t) if now > first_t else 0.0
        if records_left == 0:
            self._seconds_left.set(0)
        else:
            self._seconds_left.set(records_left / rate if rate > 0 else -1)
