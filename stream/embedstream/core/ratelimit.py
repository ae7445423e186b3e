"""Requests-per-minute and tokens-per-minute budgets, as token buckets: fixed ones from the
settings (:class:`RateLimits`) and the ones the provider announces in its ``x-ratelimit-*``
headers (:class:`AnnouncedBudget`).

A reservation is committed at once and answered with how long to wait. The level may go
negative: that debt is a queue, so each later caller waits behind every earlier one (FIFO), and
over any span ending at T no more than ``burst + rate * T`` is ever admitted. Before a batch is
cut the governor asks how long until the next call may start (:meth:`TokenBucket.wait`), so
while the budget is spent the batcher keeps buffering and the next call carries more.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from embedstream.core.concurrency import parse_reset_duration


class TokenBucket:
    """Refills at ``rate_per_s`` up to ``burst``; starts full at the first reservation.

    An amount larger than ``burst`` is allowed: it never fits at once, so it just waits until
    the refill has covered it. Refusing it would starve a legal but large request forever.
    """

    def __init__(self, rate_per_s: float, burst: float) -> None:
        if not rate_per_s > 0 or not burst > 0:
            raise ValueError(f"rate_per_s and burst must be > 0, got {rate_per_s}, {burst}")
        self.rate_per_s = rate_per_s
        self.burst = burst
        self._level = burst
        self._at: float | None = None  # time of the last reservation

    def available(self, now: float) -> float:
        """The level at ``now`` without reserving: negative while earlier callers still wait."""
        if self._at is None:
            return self.burst
        elapsed = max(0.0, now - self._at)  # a clock read out of order adds nothing
        return min(self.burst, self._level + elapsed * self.rate_per_s)

    def reserve(self, amount: float, now: float) -> float:
        """Take ``amount`` now; return the seconds to wait before using it (0 if available)."""
        if amount < 0:
            raise ValueError(f"amount must be >= 0, got {amount}")
        self._level = self.available(now) - amount
        self._at = max(now, self._at) if self._at is not None else now
        return max(0.0, -self._level / self.rate_per_s)

    def wait(self, amount: float, now: float) -> float:
        """Seconds until ``amount`` is available, without reserving it."""
        missing = amount - self.available(now)
        # A rounding remainder is no wait: a caller sleeping 1e-17 s would spin on it.
        return missing / self.rate_per_s if missing > 1e-9 * max(1.0, amount) else 0.0

    def retune(self, rate_per_s: float, burst: float, now: float) -> None:
        """New rate and burst from now on; the level is kept (within the new burst)."""
        if not rate_per_s > 0 or not burst > 0:
            raise ValueError(f"rate_per_s and burst must be > 0, got {rate_per_s}, {burst}")
        level = min(self.available(now), burst)
        self.rate_per_s, self.burst = rate_per_s, burst
        self._level, self._at = level, max(now, self._at) if self._at is not None else now

    def lower_to(self, level: float, now: float) -> None:
        """The level is at most ``level`` now (someone else spent from the same budget)."""
        self._level = min(self.available(now), level)
        self._at = max(now, self._at) if self._at is not None else now


class RateLimits:
    """A requests-per-minute and a tokens-per-minute bucket, each optional.

    Each bucket may burst one minute's allowance: that matches a provider that refills its own
    per-minute bucket continuously. If the provider enforces over shorter periods, its 429s and
    rate-limit headers still reach the adaptive limit and the provider gate.
    """

    def __init__(self, rpm: float | None, tpm: float | None) -> None:
        self.requests = TokenBucket(rpm / 60.0, rpm) if rpm is not None else None
        self.tokens = TokenBucket(tpm / 60.0, tpm) if tpm is not None else None

    @classmethod
    def unlimited(cls) -> RateLimits:
        return cls(None, None)

    def reserve(self, tokens: int, now: float) -> float:
        """Reserve one request of ``tokens`` in both buckets; the wait is the longer of the two.

        Sending after the longer wait is never earlier than either bucket admits, so committing
        to both at once is safe (merely conservative for the bucket that had room sooner).
        """
        delays = [0.0]
        if self.requests is not None:
            delays.append(self.requests.reserve(1, now))
        if self.tokens is not None:
            delays.append(self.tokens.reserve(tokens, now))
        return max(delays)

    def wait(self, now: float) -> float:
        """Seconds until another call may start: a request is available and no earlier
        reservation is still waiting for its tokens."""
        return max(
            self.requests.wait(1, now) if self.requests is not None else 0.0,
            self.tokens.wait(0, now) if self.tokens is not None else 0.0,
        )

    def calls_now(self, now: float) -> float:
        """How many calls the requests budget admits at once right now (inf if unlimited)."""
        return self.requests.available(now) if self.requests is not None else math.inf

    def room_wait(self, tokens: int, now: float) -> float:
        """Seconds until both buckets hold a call of ``tokens`` (a bucket's burst at most)
        without debt: what a lower lane's call waits, reserving nothing, while an upper lane
        is active, so that lane's calls never queue behind its tokens."""
        return max(
            self.requests.wait(1, now) if self.requests is not None else 0.0,
            self.tokens.wait(min(tokens, self.tokens.burst), now)
            if self.tokens is not None
            else 0.0,
        )


# Pace at this share of what the provider announces: it counts a call when it arrives, we
# when we send it, and network jitter can bunch calls we spaced out.
ANNOUNCED_SHARE = 0.95
# Burst at most this much refill even when the announced budget (a minute's) is larger:
# providers enforce over shorter periods too (OpenAI: limits "may be quantized"), and a
# second of calls at once is already what the announced pace allows.
ANNOUNCED_BURST_S = 1.0
_NUMBER = re.compile(r"\d+(?:\.\d*)?")


class AnnouncedBudget:
    """The per-minute budgets a provider announces, learnt from each answer's headers.

    ``x-ratelimit-limit-{requests,tokens}`` sets each bucket's refill rate (limit / 60 per
    second); remaining plus reset (the time to a whole budget) times that rate is the size of
    the provider's bucket, which bounds our burst; and ``remaining`` caps our level, less the
    calls still unanswered that the provider may not have counted yet, so a budget spent by
    someone else sharing the key slows us down too. Until a provider announces anything,
    nothing is limited here.
    """

    def __init__(self, share: float = ANNOUNCED_SHARE, burst_s: float = ANNOUNCED_BURST_S):
        if not 0 < share <= 1 or not burst_s > 0:
            raise ValueError(f"need 0 < share <= 1 and burst_s > 0, got {share}, {burst_s}")
        self.share = share
        self.burst_s = burst_s
        self.limits = RateLimits.unlimited()

    def observe(self, headers: Mapping[str, str], now: float, unanswered: int = 0) -> None:
        """Learn from one answer's headers; ``unanswered``: other calls still in flight."""
        h = {name.lower(): value for name, value in headers.items()}
        for kind in ("requests", "tokens"):
            limit = _count(h.get(f"x-ratelimit-limit-{kind}"))
            if limit is None or limit <= 0:
                continue
            remaining = _count(h.get(f"x-ratelimit-remaining-{kind}"))
            reset_text = h.get(f"x-ratelimit-reset-{kind}")
            reset = parse_reset_duration(reset_text) if reset_text is not None else None
            rate = limit / 60.0
            size = limit
            if remaining is not None and reset is not None:
                size = min(limit, remaining + reset * rate)
            burst = max(1.0, min(size, rate * self.burst_s) * self.share)
            bucket = self.limits.requests if kind == "requests" else self.limits.tokens
            if bucket is None:
                bucket = TokenBucket(rate * self.share, burst)
                if kind == "requests":
                    self.limits.requests = bucket
                else:
                    self.limits.tokens = bucket
            else:
                bucket.retune(rate * self.share, burst, now)
            if remaining is not None:
                per_call = 1.0 if kind == "requests" else 0.0  # unknown token counts: none
                bucket.lower_to(remaining - per_call * unanswered, now)

    def reserve(self, tokens: int, now: float) -> float:
        return self.limits.reserve(tokens, now)

    def wait(self, now: float) -> float:
        return self.limits.wait(now)

    def calls_now(self, now: float) -> float:
        return self.limits.calls_now(now)


def _count(value: str | None) -> float | None:
    if value is None or not _NUMBER.fullmatch(value.strip()):
        return None
    return float(value)
