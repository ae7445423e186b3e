"""How many embeddings calls may be in flight, and when the provider said to hold off.

:class:`ConcurrencyLimit` is either fixed or adaptive (AIMD: additive increase, multiplicative
decrease). :class:`ProviderGate` remembers the latest "do not call before" instant the provider
announced through its headers. Both are pure: time comes in as ``now`` (monotonic seconds).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from email.utils import parsedate_to_datetime


class ConcurrencyLimit:
    """The number of calls allowed in flight.

    Adaptive mode starts at ``max_limit``: start optimistic and back off on signals. Halving
    reaches any lower level in a few steps, whereas starting low would cost ``limit`` calls per
    +1 step of a healthy provider's throughput.

    A decrease opens a *window* lasting as many completions as the limit that was in force
    when it happened, i.e. as many calls as may have been in flight together. Further slow
    calls or overloads in that window came from the same burst and do not decrease again.
    """

    def __init__(
        self,
        max_limit: int,
        *,
        adaptive: bool,
        target_latency_s: float | None = None,
        min_limit: int = 1,
    ) -> None:
        if not 1 <= min_limit <= max_limit:
            raise ValueError(f"need 1 <= min_limit <= max_limit, got {min_limit}, {max_limit}")
        if target_latency_s is not None and not target_latency_s > 0:
            raise ValueError(f"target_latency_s must be > 0, got {target_latency_s}")
        self.max_limit = max_limit
        self.min_limit = min_limit
        self.adaptive = adaptive
        self.target_latency_s = target_latency_s
        self._limit = max_limit
        self._streak = 0  # consecutive completions under target since the last change
        self._window = 0  # completions left in which a further decrease is ignored
        self.changed_at: float | None = None  # when the limit last moved, for logs and metrics

    @property
    def limit(self) -> int:
        return self._limit

    def on_success(self, latency_s: float, now: float) -> None:
        if not self.adaptive:
            return
        in_window = self._complete()
        if self.target_latency_s is not None and latency_s > self.target_latency_s:
            self._decrease(in_window, now)
            return
        self._streak += 1
        if self._streak >= self._limit:
            self._streak = 0
            if self._limit < self.max_limit:
                self._limit += 1
                self.changed_at = now

    def on_overload(self, now: float) -> None:
        """A 429 or 503 answer."""
        if self.adaptive:
            self._decrease(self._complete(), now)

    def _complete(self) -> bool:
        """Count one completion; True if it falls in the window of an earlier decrease."""
        if self._window > 0:
            self._window -= 1
            return True
        return False

    def _decrease(self, in_window: bool, now: float) -> None:
        self._streak = 0
        if in_window:
            return
        self._window = self._limit
        lowered = max(self.min_limit, self._limit // 2)
        if lowered != self._limit:
            self._limit = lowered
            self.changed_at = now


# Go-style durations as OpenAI sends them in x-ratelimit-reset-*: "20ms", "6m0s", "1h2m3.5s".
_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
_PART = re.compile(rf"({_NUMBER})(ms|us|µs|ns|h|m|s)")
_DURATION = re.compile(rf"(?:{_NUMBER}(?:ms|us|µs|ns|h|m|s))+")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def parse_reset_duration(text: str) -> float | None:
    """Seconds in a duration such as ``"6m0s"``; a bare number is seconds; None if malformed."""
    text = text.strip()
    if re.fullmatch(_NUMBER, text):
        return float(text)
    if not _DURATION.fullmatch(text):
        return None
    return sum(float(n) * _UNIT_SECONDS[unit] for n, unit in _PART.findall(text))


def _parse_seconds(text: str) -> float | None:
    text = text.strip()
    return float(text) if re.fullmatch(_NUMBER, text) else None


class ProviderGate:
    """The instant before which the provider asked not to be called.

    Header-derived pauses are capped at ``max_block_s`` so one absurd header cannot stall the
    stream indefinitely; a still-overloaded provider will simply say so again.
    """

    def __init__(self, max_block_s: float = 600.0) -> None:
        if not max_block_s > 0:
            raise ValueError(f"max_block_s must be > 0, got {max_block_s}")
        self.max_block_s = max_block_s
        self._until = -math.inf

    def block_until(self, until: float) -> None:
        self._until = max(self._until, until)

    def blocked_for(self, now: float) -> float:
        return max(0.0, self._until - now)

    def from_headers(self, headers: Mapping[str, str], now: float) -> None:
        """Block for the longest pause any header asks for; malformed values are ignored."""
        h = {name.lower(): value for name, value in headers.items()}
        waits = [
            _retry_after(h),
            _ms(h.get("retry-after-ms")),
            _exhausted(h, "requests"),
            _exhausted(h, "tokens"),
        ]
        longest = max((w for w in waits if w is not None and math.isfinite(w)), default=None)
        if longest is not None and longest > 0:
            self.block_until(now + min(longest, self.max_block_s))


def _ms(value: str | None) -> float | None:
    seconds = _parse_seconds(value) if value is not None else None
    return seconds / 1000 if seconds is not None else None


def _retry_after(h: Mapping[str, str]) -> float | None:
    """Retry-After in seconds, or as an HTTP date measured against the response's own Date.

    Subtracting the server's Date keeps us off the wall clock and immune to clock skew.
    """
    value = h.get("retry-after")
    if value is None:
        return None
    seconds = _parse_seconds(value)
    if seconds is not None or "date" not in h:
        return seconds
    try:
        return (parsedate_to_datetime(value) - parsedate_to_datetime(h["date"])).total_seconds()
    except (TypeError, ValueError):  # unparsable, or one date naive and one aware
        return None


def _exhausted(h: Mapping[str, str], kind: str) -> float | None:
    """The reset delay when the remaining request or token quota is zero.

    Only when the limit itself is not announced: with it, the announced budget (see
    ``core/ratelimit.AnnouncedBudget``) paces calls to the refill, which at 3000 RPM frees a
    call every 20 ms, where the reset (time to a whole budget) could be a minute.
    """
    remaining = h.get(f"x-ratelimit-remaining-{kind}", "").strip()
    reset = h.get(f"x-ratelimit-reset-{kind}")
    if remaining != "0" or reset is None or _parse_seconds(h.get(f"x-ratelimit-limit-{kind}", "")):
        return None
    return parse_reset_duration(reset)
