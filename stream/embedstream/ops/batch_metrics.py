"""Prometheus metrics of the money: provider tokens and their cost by price tier (a sync call's,
a batch job's), where the batch lane routes work, and its jobs (how many, in which state, the
oldest's age, how they ended, what their lines answered). On the processor's registry.

Model labels are bounded: past ``MAX_MODELS`` distinct models, any other counts as ``other``.
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge

from embedstream.core.batch_jobs import JobState
from embedstream.core.batch_terms import Prices, Tier

BATCH_METRIC_NAMES: frozenset[str] = frozenset(
    {
        "embedstream_provider_tokens_total",
        "embedstream_provider_cost_usd_total",
        "embedstream_batch_routed_total",
        "embedstream_batch_jobs",
        "embedstream_batch_job_oldest_seconds",
        "embedstream_batch_jobs_ended_total",
        "embedstream_batch_lines_total",
    }
)
MAX_MODELS = 16
OTHER = "other"
ROUTES = (("whole", "batch"), ("adaptive", "batch"), ("adaptive", "sync"))
JOB_ENDINGS = ("completed", "expired", "failed", "cancelled", "refused", "abandoned")
LINE_OUTCOMES = ("answered", "failed", "unanswered", "missing")


class BatchMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self._prices: Prices | None = None
        self._models: set[str] = set()
        self._tokens = Counter(
            "embedstream_provider_tokens",
            "Provider tokens billed, by price tier (sync: a call's; batch: a batch job's) and "
            "model (the call's reported usage, or the estimate where it reported none).",
            ["tier", "model"],
            registry=r,
        )
        self._cost = Counter(
            "embedstream_provider_cost_usd",
            "What those tokens cost, by tier, at token_prices (models without a price: 0).",
            ["tier"],
            registry=r,
        )
        self._routed = Counter(
            "embedstream_batch_routed",
            "Records the batch lane routed: rule whole (a stream batched whole) or adaptive "
            "(batch_after_s), route batch (to a job) or sync.",
            ["rule", "route"],
            registry=r,
        )
        self._jobs = Gauge(
            "embedstream_batch_jobs",
            "Batch jobs this processor's watcher follows, by state.",
            ["state"],
            registry=r,
        )
        self._oldest = Gauge(
            "embedstream_batch_job_oldest_seconds",
            "Age of the oldest job at the provider (submitted, not ended); 0 when none is.",
            registry=r,
        )
        self._ended = Counter(
            "embedstream_batch_jobs_ended",
            "Attempts of jobs the provider ended, by how (refused: for the model's enqueued "
            "tokens, submitted again later; abandoned: their generation no longer kept).",
            ["status"],
            registry=r,
        )
        self._lines = Counter(
            "embedstream_batch_lines",
            "Inputs of ended jobs by outcome: answered, failed (an error line: retried or "
            "dead-lettered), unanswered (sent again sync), cached (not asked), missing (the "
            "record was gone from its topic).",
            ["outcome"],
            registry=r,
        )
        for tier in Tier:
            self._cost.labels(tier.value)
        for rule, route in ROUTES:
            self._routed.labels(rule, route)
        for state in JobState:
            self._jobs.labels(state.value)
        for status in JOB_ENDINGS:
            self._ended.labels(status)
        for outcome in LINE_OUTCOMES:
            self._lines.labels(outcome)

    def set_prices(self, prices: Prices) -> None:
        self._prices = prices

    def _model(self, model: str) -> str:
        if model in self._models:
            return model
        if len(self._models) >= MAX_MODELS:
            return OTHER
        self._models.add(model)
        return model

    def count_tier_tokens(self, tier: str, model: str, tokens: int) -> None:
        if tokens <= 0:
            return
        self._tokens.labels(tier, self._model(model)).inc(tokens)
        cost = None if self._prices is None else self._prices.cost(model, Tier(tier), tokens)
        if cost:
            self._cost.labels(tier).inc(cost)

    def count_routed(self, rule: str, route: str, count: int = 1) -> None:
        self._routed.labels(rule, route).inc(count)

    def set_jobs(self, by_state: Mapping[str, int], oldest_s: float) -> None:
        for state in JobState:
            self._jobs.labels(state.value).set(by_state.get(state.value, 0))
        self._oldest.set(oldest_s)

    def count_ended(self, status: str) -> None:
        self._ended.labels(status).inc()

    def count_lines(self, outcome: str, count: int) -> None:
        if count:
            self._lines.labels(outcome).inc(count)
