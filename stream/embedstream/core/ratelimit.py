"""Optional fixed requests-per-minute and tokens-per-minute limits, as token buckets.

A reservation is committed at once and answered with how long to wait. The level may go
negative: that debt is a queue, so each later caller waits behind every earlier one (FIFO), and
over any span ending at T no more than ``burst + rate * T`` is ever admitted.
"""

from __future__ import annotations


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
