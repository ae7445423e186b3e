"""Whether the provider is down: outage-like failures (connection, timeout, 5xx) with no success
between, for long enough. Pure: the clock reading is passed in.

Readiness (`/readyz`) and pausing follow this, so it must turn promptly and not flap:

- DOWN_AFTER_FAILURES = 3 in a row, spanning DOWN_AFTER_S = 1 s. One blip (a gateway restart,
  a dropped connection pool) fails every call in flight within milliseconds, up to
  max_concurrency failures at once; those batches are held and tried again after the first
  hold (0.25 to 0.75 s with jitter), so a failure still there after a second has outlived a
  retry round. With traffic flowing, a second without a single success is hundreds of failed
  calls, never chance: at the 2% of random 5xx of the soak run, three failures in a row happen
  once in about 125,000 calls, and never a second of them. The count guards sparse traffic,
  where one failed call and a second of silence are not an outage. An outage is therefore seen
  within 1 to 2 s (it used to take 5 failures over 3 s, while items of it could already be
  dead-lettered).
- UP_AFTER_SUCCESSES = 2 in a row, once down: one lucky answer from a provider failing most
  calls does not make the processor ready for a moment. When the provider is back, the held
  batches all go out at once, so the second success follows the first within milliseconds.
"""

from __future__ import annotations

DOWN_AFTER_FAILURES = 3
DOWN_AFTER_S = 1.0
UP_AFTER_SUCCESSES = 2


class OutageDetector:
    def __init__(self) -> None:
        self._failures = 0  # outage-like failures since the last success
        self._first_failure_at: float | None = None
        self._successes = 0  # successes in a row (counted only while down)
        self._down = False

    def down(self, now: float) -> bool:
        if not self._down and self._first_failure_at is not None:
            self._down = (
                self._failures >= DOWN_AFTER_FAILURES
                and now - self._first_failure_at >= DOWN_AFTER_S
            )
        return self._down

    def failure(self, now: float) -> None:
        """An outage-like failure."""
        self._failures += 1
        self._successes = 0
        if self._first_failure_at is None:
            self._first_failure_at = now

    def success(self, now: float) -> None:
        self.down(now)  # a failure streak long enough counts, even if nobody asked meanwhile
        self._failures = 0
        self._first_failure_at = None
        if self._down:
            self._successes += 1
            self._down = self._successes < UP_AFTER_SUCCESSES
        if not self._down:
            self._successes = 0
