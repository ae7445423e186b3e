"""What a migration's backfill can reach: the documents its source, the compacted documents
topic, holds (folded from the topic's records as compaction would leave them), and which of the
documents a new generation lacks that source does not hold. Those are never backfilled: only a
new version from the live stream, or the document published again, brings them. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Set
from dataclasses import dataclass, field

SHOWN_UNSOURCED = 5  # documents named when the source lacks some


@dataclass(slots=True)
class HeldDocuments:
    """The doc_ids a documents topic holds, fed its records in offset order per partition (a
    key lives in one partition, so that is every key's order): the latest record per key wins
    and a tombstone (no value) removes the key."""

    ids: set[str] = field(default_factory=set)

    def read(self, key: bytes | None, has_value: bool) -> None:
        if key is None:  # a compacted topic refuses these; nothing a doc_id could match
            return
        doc_id = key.decode("utf-8", "replace")
        if has_value:
            self.ids.add(doc_id)
        else:
            self.ids.discard(doc_id)


@dataclass(frozen=True, slots=True)
class Unsourced:
    """Of ``lacking`` documents, ``count`` the source does not hold; ``first`` names the
    first of them in the order given."""

    lacking: int
    count: int
    first: tuple[str, ...]


def unsourced(lacking: Iterable[str], held: Set[str], shown: int = SHOWN_UNSOURCED) -> Unsourced:
    """The documents of ``lacking`` that are not in ``held``."""
    total = 0
    missing: list[str] = []
    count = 0
    for doc_id in lacking:
        total += 1
        if doc_id not in held:
            count += 1
            if len(missing) < shown:
                missing.append(doc_id)
    return Unsourced(total, count, tuple(missing))
