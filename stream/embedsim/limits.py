"""The simulator's rate limits, on an injected clock: a 429 window, a requests-per-second token
bucket, and announced per-minute request/token budgets (see quota.py). No HTTP here."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from embedsim.config import SimulatorConfig
from embedsim.errors import rate_limited
from embedsim.model import TokenBucket
from embedsim.quota import Quotas


class RateLimits:
    """What one server's limits have used so far; raises the 429 ApiError a provider would."""

    def __init__(self, config: SimulatorConfig, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._config = config
        self._bucket: TokenBucket | None = None
        self._quotas = _quotas(config, clock())
        self._until = 0.0  # the end of the 429 window
        self.apply(config, window_changed=True)

    def apply(self, config: SimulatorConfig, *, window_changed: bool) -> None:
        """Take new settings: `window_changed` (re)starts the 429 window from now; budgets and
        the bucket start afresh only when their own settings changed."""
        now = self._clock()
        if window_changed:
            self._until = now + config.rate_limit_for_s
            self._quotas = _quotas(config, now)
        elif _quota_settings(config) != _quota_settings(self._config):
            self._quotas = _quotas(config, now)
        if config.rate_limit_rps <= 0:
            self._bucket = None
        elif self._bucket is None or self._bucket.rate != config.rate_limit_rps:
            self._bucket = TokenBucket(
                config.rate_limit_rps, max(1.0, config.rate_limit_rps), now=now
            )
        self._config = config

    def check_rate(self) -> None:
        """The 429 window and the requests-per-second bucket."""
        now = self._clock()
        if now < self._until:
            raise rate_limited(self._until - now)
        if self._bucket is not None:
            wait_s = self._bucket.take(now)
            if wait_s > 0:
                raise rate_limited(wait_s)

    def check_quotas(self, tokens: int) -> Mapping[str, str]:
        """Count the call against the announced budgets; the headers it is answered with."""
        now = self._clock()
        wait_s = self._quotas.admit(tokens, now)
        if wait_s > 0:
            error = rate_limited(wait_s)
            error.headers.update(self._quotas.headers(now))
            raise error
        return self._quotas.headers(now)


def _quota_settings(config: SimulatorConfig) -> tuple[float, float, float]:
    return (config.rate_limit_rpm, config.rate_limit_tpm, config.rate_limit_burst_s)


def _quotas(config: SimulatorConfig, now: float) -> Quotas:
    return Quotas(config.rate_limit_rpm, config.rate_limit_tpm, config.rate_limit_burst_s, now)
