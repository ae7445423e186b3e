"""Which records of a keyed topic a later record of the same key replaces. Pure.

A migration's backfill reads the documents topic from its beginning, and that topic holds
more than each document's latest version: Kafka never compacts a partition's active segment,
and compacts the others only when its cleaner gets to them, so a week of edits can sit there
version after version. Before the backfill embeds anything, the topic is read once to its end
(`kafka/backfill/read_ahead.py`), keeping per partition only each key's newest offset; a record
with a newer one of its key (a later version, or a delete) is *superseded*: the backfill does
not embed it, and the newer record brings the document's state when the backfill reaches it.
That is compaction's own rule (the latest record of a key wins), so the backfill pays for
what the topic holds once compacted, however far compaction is behind.

Memory is bounded: at most ``max_keys`` keys are kept, then no new one (the records of those
never read as superseded: embedded, as before); a key already kept still follows its newest
record. A record past what was read (written after the read-ahead) is not known to be
superseded either: the live stream writes those to the new generation itself.
"""

from __future__ import annotations


class LatestRecords:
    """Each key's newest offset per partition, fed the records of each partition in offset
    order (a key lives in one partition)."""

    def __init__(self, max_keys: int) -> None:
        self._max_keys = max_keys
        self._newest: dict[int, dict[bytes, int]] = {}
        self._keys = 0
        self.full = False  # some keys were not kept (max_keys reached)

    def __len__(self) -> int:
        return self._keys

    def read(self, partition: int, offset: int, key: bytes | None) -> None:
        """A record read ahead. A record without a key has no later version to look for."""
        if key is None:
            return
        newest = self._newest.setdefault(partition, {})
        if key in newest:
            newest[key] = max(newest[key], offset)
        elif self._keys < self._max_keys:
            newest[key] = offset
            self._keys += 1
        else:
            self.full = True

    def superseded(self, partition: int, offset: int, key: bytes | None) -> bool:
        """Whether a later record of ``key`` was read ahead: then this one need not be
        embedded. False when none was, or when nothing is known of the key."""
        if key is None:
            return False
        newest = self._newest.get(partition, {}).get(key)
        return newest is not None and newest > offset
