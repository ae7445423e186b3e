"""The RPM/TPM pace's token counts, calibrated by what the provider reports. Pure.

Items carry an estimate of their tokens (`core/tokens.py`: ``ceil(bytes / 3) + 1``, high by
design so that a batch never exceeds a provider's per-call limit). Paced on that estimate, a
`rate_limit_tpm` of 3,000,000 spent 2,100,000 a minute as the simulator counts (42.4 estimated
tokens a request against 30.0 counted). Each answer reports its call's usage,
so the pace scales its estimates by the reported share, smoothed over calls, with a margin,
and within bounds: an estimate that errs low is scaled up as well, before the provider's
429s would say it. Until a call has reported anything, the estimates go as they are.
"""

from __future__ import annotations

import math

SMOOTHING = 0.2  # each call's share moves the ratio a fifth of the way
MARGIN = 1.05  # pace a little above what the provider counted
FLOOR, CEILING = 0.2, 3.0  # a report far outside these is a provider's oddity, not a ratio


class TokenCalibration:
    def __init__(self, smoothing: float = SMOOTHING, margin: float = MARGIN) -> None:
        if not 0 < smoothing <= 1 or not margin >= 1:
            raise ValueError(f"need 0 < smoothing <= 1 and margin >= 1, got {smoothing}, {margin}")
        self._smoothing = smoothing
        self._margin = margin
        self.ratio: float | None = None  # reported tokens per estimated token, smoothed

    def observe(self, estimated: int, reported: int) -> None:
        """A call estimated at ``estimated`` tokens was counted ``reported`` by the provider
        (0: it reported no usage, which says nothing)."""
        if estimated <= 0 or reported <= 0:
            return
        share = min(CEILING, max(FLOOR, reported / estimated))
        self.ratio = (
            share if self.ratio is None else self.ratio + self._smoothing * (share - self.ratio)
        )

    def scale(self, tokens: int) -> int:
        """What an estimate of ``tokens`` counts for at the pace."""
        if self.ratio is None or tokens <= 0:
            return tokens
        factor = min(CEILING, self.ratio * self._margin)
        return max(1, math.ceil(round(tokens * factor, 6)))  # (no ulp of float noise up)
