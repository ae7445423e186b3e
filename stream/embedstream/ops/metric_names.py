"""The names of every metric family embedstream exposes: a processor's (its parts' families
listed by their own modules), the store writer's, and those of `embedstream run` supervising
its lane processes. Tests keep the docs and the exposition in step with these."""

from __future__ import annotations

from embedstream.ops.accounting import SOURCE_METRIC_NAMES
from embedstream.ops.batch_metrics import BATCH_METRIC_NAMES
from embedstream.ops.budget_metrics import BUDGET_METRIC_NAMES
from embedstream.ops.gathered import HOST_METRIC_NAMES
from embedstream.ops.migration_metrics import MIGRATION_METRIC_NAMES
from embedstream.ops.online_metrics import ONLINE_METRIC_NAMES
from embedstream.ops.store_metrics import STORE_METRIC_NAMES

# Every family a processor exposes, as named in the text exposition (counters with their
# ``_total`` suffix); histograms expose ``_bucket``, ``_sum`` and ``_count`` series under these.
PROCESSOR_METRIC_NAMES: frozenset[str] = frozenset(
    {
        "embedstream_queue_depth",
        "embedstream_consumer_lag",
        "embedstream_consumer_lag_seconds",
        "embedstream_batch_size",
        "embedstream_batch_tokens",
        "embedstream_item_wait_seconds",
        "embedstream_end_to_end_latency_seconds",
        "embedstream_flushes_total",
        "embedstream_api_calls_total",
        "embedstream_api_latency_seconds",
        "embedstream_api_errors_total",
        "embedstream_results_total",
        "embedstream_retries_total",
        "embedstream_dead_letters_total",
        "embedstream_documents_total",
        "embedstream_chunks_total",
        "embedstream_paused_partitions",
        "embedstream_in_flight_calls",
        "embedstream_concurrency_limit",
        "embedstream_adaptive_wait_seconds",
        "embedstream_ready",
        "embedstream_buffered_items",
        "embedstream_cache_hits_total",
        "embedstream_cache_misses_total",
        "embedstream_cache_errors_total",
        "embedstream_cache_evictions_total",
        "embedstream_cache_tokens_saved_total",
        *SOURCE_METRIC_NAMES,
        *ONLINE_METRIC_NAMES,
        *MIGRATION_METRIC_NAMES,
        *BUDGET_METRIC_NAMES,
        *BATCH_METRIC_NAMES,
    }
)
# ... and every family of embedstream's processes: the store writer's own too, and those of
# `embedstream run` supervising its lane processes.
METRIC_NAMES: frozenset[str] = PROCESSOR_METRIC_NAMES | STORE_METRIC_NAMES | HOST_METRIC_NAMES
