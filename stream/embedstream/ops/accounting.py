"""Accounting per source (an input topic): who sent the requests and who spent the tokens.

Counters on the processor's registry, labelled by `source`. Labels are bounded twice: the
Kafka shell labels only configured input topics (`kafka/consumption/attribution.py`), and past
`MAX_SOURCES` distinct labels anything new counts as `other`, so a misconfiguration can never
grow the series without end.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter

MAX_SOURCES = 64
OTHER = "other"
TOKEN_BASES = ("reported", "estimated")

SOURCE_METRIC_NAMES = frozenset(
    {
        "embedstream_source_requests_total",
        "embedstream_source_tokens_total",
        "embedstream_source_calls_total",
        "embedstream_source_cache_hits_total",
        "embedstream_source_cache_tokens_saved_total",
    }
)


class SourceAccounting:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self._seen: set[str] = set()
        # A request is counted on the fetch loop's path: its labelled child, looked up once.
        self._request_children: dict[str, Any] = {}
        self._requests = Counter(
            "embedstream_source_requests_total",
            "Requests and documents read, by source topic (retries not counted again).",
            ["source"],
            registry=r,
        )
        self._tokens = Counter(
            "embedstream_source_tokens_total",
            "Provider tokens of results by source: each call's reported usage shared by "
            "estimate (basis reported), or the estimates where it reported none (estimated).",
            ["source", "basis"],
            registry=r,
        )
        self._calls = Counter(
            "embedstream_source_calls_total",
            "Successful calls' share by source: a call adds each source its share of inputs.",
            ["source"],
            registry=r,
        )
        self._cache_hits = Counter(
            "embedstream_source_cache_hits_total",
            "Requests answered from the embedding cache, by source.",
            ["source"],
            registry=r,
        )
        self._cache_tokens_saved = Counter(
            "embedstream_source_cache_tokens_saved_total",
            "Estimated tokens the cache kept from the provider, by source.",
            ["source"],
            registry=r,
        )

    def declare_sources(self, sources: Iterable[str]) -> None:
        """The configured sources' series, at 0 from the start: rate() and the dashboard see
        a source before its first request, as the other metrics' known series."""
        for source in sources:
            label = self.label(source)
            self._requests.labels(source=label)
            for basis in TOKEN_BASES:
                self._tokens.labels(source=label, basis=basis)
            self._calls.labels(source=label)
            self._cache_hits.labels(source=label)
            self._cache_tokens_saved.labels(source=label)

    def label(self, source: str) -> str:
        if source in self._seen:
            return source
        if len(self._seen) >= MAX_SOURCES:
            return OTHER
        self._seen.add(source)
        return source

    def count_source_requests(self, source: str, count: int) -> None:
        child = self._request_children.get(source)
        if child is None:
            child = self._requests.labels(source=self.label(source))
            self._request_children[source] = child
        child.inc(count)

    def count_source_usage(
        self, source: str, *, tokens: int, estimated: bool, call_share: float
    ) -> None:
        label = self.label(source)
        basis = "estimated" if estimated else "reported"
        self._tokens.labels(source=label, basis=basis).inc(tokens)
        self._calls.labels(source=label).inc(call_share)

    def count_source_cache_savings(self, source: str, hits: int, tokens: int) -> None:
        label = self.label(source)
        self._cache_hits.labels(source=label).inc(hits)
        self._cache_tokens_saved.labels(source=label).inc(tokens)
