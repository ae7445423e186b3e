"""Which work goes to the provider's Batch API (half price, a completion window of up to a day)
instead of a sync call. Pure: time comes in as ``now``.

Three ways in, all of work that can wait:

- a whole stream: a migration's backfill when it was started ``--via batch`` (or
  ``migrate_via = batch``), and the low-lane topics the user lists in ``batch_topics``. Every
  record of such a partition goes into a job, in order (so a document's versions and its delete
  stay in order: `core/batch_jobs.py` ends a stream's jobs in order too);
- the adaptive rule (``batch_after_s``): a low-lane request that would not be sent within
  ``batch_after_s`` of entering Kafka goes to a job: the time it has waited already (in Kafka,
  behind the backlog) plus what waits for sync calls ahead of it at the lane's current pace.
  A backlog of N at a pace of P a second thus sends its first P x ``batch_after_s`` or so
  through sync calls and the rest to jobs; a steady stream the sync path keeps up with, none.
  The pace is the low lane's sync flush rate over the last ``PACE_WINDOW_S``, known once
  ``PACE_MIN_SPAN_S`` of it has been seen; until then the lane's records wait in Kafka;
- never: high and online work, retries (already paid for once, they go on where they were),
  the chunks of a document read by a stream that is not batched whole.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from embedstream.core.lanes import InputLane, Priority

PACE_WINDOW_S = 10.0
PACE_MIN_SPAN_S = 1.0


@dataclass(frozen=True, slots=True)
class BatchRouting:
    """The settings' answer to which work may wait for a batch job."""

    topics: frozenset[str] = frozenset()  # batch_topics: low topics batched whole
    after_s: float | None = None  # batch_after_s (None: no adaptive rule)
    migrations: bool = False  # migrate_via = batch: every migration's backfill by default

    @property
    def enabled(self) -> bool:
        """Some work may go to jobs (a migration started ``--via batch`` may add some later)."""
        return bool(self.topics) or self.after_s is not None or self.migrations

    def whole(self, topic: str, lane: InputLane, *, backfill_via_batch: bool) -> bool:
        """Every record of this stream goes into jobs."""
        if lane is InputLane.BACKFILL:
            return backfill_via_batch
        return lane is InputLane.LOW and topic in self.topics

    def adaptive(self, priority: Priority, attempts: int, chunk: bool) -> bool:
        """The adaptive rule may send this item to a job: a first attempt of a low request."""
        return self.after_s is not None and priority is Priority.LOW and attempts == 0 and not chunk


def waits_too_long(
    sync_waiting: int, pace_per_s: float | None, after_s: float, waited_s: float = 0.0
) -> bool:
    """The adaptive rule: an item that has waited ``waited_s`` already, behind ``sync_waiting``
    sync items, would be sent more than ``after_s`` after it came, at ``pace_per_s`` (items sent
    a second); None (no pace yet): nothing is judged to."""
    if pace_per_s is None:
        return False
    if pace_per_s <= 0:  # nothing sent lately: anything waiting behind others waits too long
        return sync_waiting > 0 or waited_s >= after_s
    return waited_s + sync_waiting / pace_per_s >= after_s


class PaceMeter:
    """Items a lane sends per second: those of the last ``window_s``, once ``min_span_s`` has
    been seen (before that, None: no pace to judge by)."""

    def __init__(self, window_s: float = PACE_WINDOW_S, min_span_s: float = PACE_MIN_SPAN_S):
        if not window_s >= min_span_s > 0:
            raise ValueError("need window_s >= min_span_s > 0")
        self.window_s = window_s
        self.min_span_s = min_span_s
        self._sent: deque[tuple[float, int]] = deque()
        self._in_window = 0
        self._first: float | None = None

    def sent(self, count: int, now: float) -> None:
        if self._first is None:
            self._first = now
        self._sent.append((now, count))
        self._in_window += count
        self._forget(now)

    def per_s(self, now: float) -> float | None:
        if self._first is None or now - self._first < self.min_span_s:
            return None
        self._forget(now)
        return self._in_window / min(self.window_s, now - self._first)

    def known_in(self, now: float) -> float | None:
        """Seconds until a pace is known (None: not before something is sent)."""
        if self._first is None:
            return None
        return max(0.0, self._first + self.min_span_s - now)

    def _forget(self, now: float) -> None:
        while self._sent and self._sent[0][0] <= now - self.window_s:
            self._in_window -= self._sent.popleft()[1]
