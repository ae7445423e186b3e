"""Which offset of a partition is safe to commit when items finish out of order.

Records are tracked in fetch order (increasing offsets) and completed in any order. The commit
position is the lowest offset not yet completed, or one past the highest tracked offset when
everything is done, so a commit never moves past unfinished work.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable


class PartitionOffsets:
    def __init__(self) -> None:
        self._outstanding: deque[int] = deque()
        self._timestamps: dict[int, int] = {}
        self._sizes: dict[int, int] = {}
        self.pending_bytes = 0  # bytes of the records not yet finished (backpressure)
        self._completed: set[int] = set()
        # One past the highest offset tracked (None: none yet): a lower one was seen.
        self.next_untracked: int | None = None
        self._committed: int | None = None

    def seen(self, offset: int) -> bool:
        """The offset was already tracked under this assignment (a record delivered again,
        e.g. when the consumer's position went back to the committed offset)."""
        return self.next_untracked is not None and offset < self.next_untracked

    def track(self, offset: int, timestamp_ms: int | None = None, size: int = 0) -> None:
        if self.next_untracked is not None and offset < self.next_untracked:
            raise ValueError(f"offset {offset} tracked out of order")
        self._outstanding.append(offset)
        if timestamp_ms is not None:
            self._timestamps[offset] = timestamp_ms
        if size:
            self._sizes[offset] = size
            self.pending_bytes += size
        self.next_untracked = offset + 1

    def hold_bytes(self, offset: int, size: int) -> None:
        """Count `size` more bytes (less, if negative) against the unfinished record at
        `offset`: its result while it waits for the broker's ack. Nothing for a record already
        finished, whose bytes were freed with it."""
        if offset in self._completed or not self._outstanding or offset < self._outstanding[0]:
            return
        before = self._sizes.get(offset, 0)
        after = max(0, before + size)
        if after:
            self._sizes[offset] = after
        else:
            self._sizes.pop(offset, None)
        self.pending_bytes += after - before

    def hold_written(self, size: int) -> None:
        """Count `size` more bytes (less, if negative) against the partition's unfinished
        records: outputs waiting for the broker's ack, held and released around their write
        by a writer that finishes their records only after it (a call's results), so no
        record of them finishes while they are held."""
        self.pending_bytes += size

    def complete(self, offset: int) -> None:
        self.complete_all((offset,))

    def complete_all(self, offsets: Iterable[int]) -> None:
        """`complete` each of ``offsets``, then move the commit position once."""
        completed, held = self._completed, self._sizes
        freed = 0
        for offset in offsets:
            if offset not in completed:
                freed += held.pop(offset, 0)
                completed.add(offset)
        self.pending_bytes -= freed
        outstanding = self._outstanding
        while outstanding and outstanding[0] in completed:
            done = outstanding.popleft()
            completed.discard(done)
            self._timestamps.pop(done, None)

    @property
    def pending(self) -> int:
        return len(self._outstanding)

    def oldest_timestamp_ms(self) -> int | None:
        """Timestamp of the oldest unfinished record: what lag in seconds is measured from."""
        if not self._outstanding:
            return None
        return self._timestamps.get(self._outstanding[0])

    def safe_offset(self) -> int | None:
        """The offset to commit (Kafka's "next record to read"), or None if nothing tracked."""
        if self._outstanding:
            return self._outstanding[0]
        return self.next_untracked

    def to_commit(self) -> int | None:
        """The safe offset if it moved since the last `mark_committed`, else None."""
        safe = self.safe_offset()
        if safe is None or (self._committed is not None and safe <= self._committed):
            return None
        return safe

    def mark_committed(self, offset: int) -> None:
        if self._committed is None or offset > self._committed:
            self._committed = offset
