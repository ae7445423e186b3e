"""When to ask a provider that counts as down (`core/outage.py`) whether it is back. Pure: the
clock reading is passed in.

While the provider is down nothing else may call it: the online lane answers 503 at once and
the Kafka lanes stop fetching, so without a probe an outage with no work held never ends (the
online lane answered 503 for ever after a 3 s blip). The rule:

- one probe out at a time, the first PROBE_EVERY_S after the provider went down;
- after a failed probe, the next PROBE_EVERY_S later, or at the provider's Retry-After when it
  names a later time: a provider that is down gets one small call a second, no more;
- after a probe that succeeded while the provider still counts as down, the next one at once:
  the outage ends on its second success in a row, so the lane serves again within about one
  probe interval of the provider's return, not two.
"""

from __future__ import annotations

import math

PROBE_EVERY_S = 1.0


class ProbeSchedule:
    def __init__(self, every_s: float = PROBE_EVERY_S) -> None:
        if not every_s > 0:
            raise ValueError(f"every_s must be > 0, got {every_s}")
        self._every_s = every_s
        self._next_at: float | None = None  # None: the provider is not down (no schedule)
        self._out = False  # a probe is waiting for its answer

    def due_in(self, now: float, *, down: bool) -> float:
        """Seconds until a probe may start (0: now); ``inf`` while the provider is not
        ``down`` or a probe is out."""
        if not down:
            self._next_at = None  # up again: the next outage starts a schedule of its own
            return math.inf
        if self._next_at is None:
            self._next_at = now + self._every_s
        if self._out:
            return math.inf
        return max(0.0, self._next_at - now)

    def started(self) -> None:
        self._out = True

    def answered(self, now: float, *, ok: bool, retry_after_s: float | None = None) -> None:
        """The probe's answer: a success makes the next one due at once, a failure waits."""
        self._out = False
        if ok:
            self._next_at = now
        else:
            self._next_at = now + max(self._every_s, retry_after_s or 0.0)
