"""Prometheus metrics of the online lane, on the processor's registry (or `serve`'s own).

Per caller key *name* (the configured names, or `anonymous`), never the key: requests by
status (429s and 503s among them), tokens, and the latency of every request as its caller saw
it. The engine's metrics carry the rest with ``lane="online"`` (waits, flushes, calls).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

ONLINE_METRIC_NAMES: frozenset[str] = frozenset(
    {
        "embedstream_online_requests_total",
        "embedstream_online_tokens_total",
        "embedstream_online_request_seconds",
    }
)
# An online request's answer: milliseconds to a few seconds (its deadline).
REQUEST_BUCKETS = (
    *(0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5),
    *(0.75, 1.0, 2.5, 5.0, 10.0, 30.0),
)


class OnlineMetrics:
    """What `embedstream.online.lane.OnlineLane` reports."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._requests = Counter(
            "embedstream_online_requests",
            "Online requests answered, by caller key name and HTTP status.",
            ["key", "status"],
            registry=registry,
        )
        self._tokens = Counter(
            "embedstream_online_tokens",
            "Estimated tokens of the online requests answered 200, by caller key name.",
            ["key"],
            registry=registry,
        )
        self._latency = Histogram(
            "embedstream_online_request_seconds",
            "Seconds from an online request's arrival to its answer.",
            buckets=REQUEST_BUCKETS,
            registry=registry,
        )

    def declare_keys(self, names: list[str]) -> None:
        """Series of the caller keys known at start read 0 instead of "no data", so rate()
        and the dashboard's 429 panel work before the first request."""
        for name in names:
            self._tokens.labels(name)
            for status in ("200", "429"):
                self._requests.labels(name, status)

    def count_request(self, key: str, status: int) -> None:
        self._requests.labels(key, str(status)).inc()

    def count_tokens(self, key: str, tokens: int) -> None:
        self._tokens.labels(key).inc(tokens)

    def observe_request(self, seconds: float) -> None:
        self._latency.observe(seconds)
