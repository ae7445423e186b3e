"""The backfill's read-ahead (core/latest_records.py): a record is superseded when a later
record of its key was read in its partition; memory stays within its bound of keys."""

from __future__ import annotations

import pytest
from embedstream.core.latest_records import LatestRecords

# (partition, offset, key) read ahead, in offset order per partition.
TOPIC = [
    (0, 0, b"a"), (0, 1, b"b"), (0, 2, b"a"), (0, 3, None), (0, 4, b"a"),
    (1, 0, b"a"), (1, 1, b"c"), (1, 2, b"c"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("partition", "offset", "key", "superseded"),
    [
        (0, 0, b"a", True),  # offsets 2 and 4 are later records of "a"
        (0, 2, b"a", True),
        (0, 4, b"a", False),  # its newest: embedded
        (0, 1, b"b", False),  # one record only
        (0, 3, None, False),  # no key: nothing to replace it
        (1, 0, b"a", False),  # another partition's "a" is another key's place
        (1, 1, b"c", True),
        (0, 9, b"a", False),  # written after the read-ahead: not known to be replaced
        (0, 5, b"z", False),  # a key never read
        (2, 0, b"a", False),  # a partition never read
    ],
)
def test_a_record_is_superseded_by_a_later_one_of_its_key(
    partition: int, offset: int, key: bytes | None, superseded: bool
) -> None:
    latest = LatestRecords(max_keys=100)
    for record in TOPIC:
        latest.read(*record)
    assert latest.superseded(partition, offset, key) is superseded
    assert len(latest) == 4 and not latest.full  # a, b in 0; a, c in 1


def test_past_its_bound_new_keys_are_not_kept_and_kept_ones_follow_their_newest() -> None:
    latest = LatestRecords(max_keys=2)
    for offset, key in enumerate([b"a", b"b", b"c", b"c", b"a"]):
        latest.read(0, offset, key)
    assert len(latest) == 2 and latest.full
    assert latest.superseded(0, 0, b"a")  # kept: offset 4 replaces it
    assert not latest.superseded(0, 2, b"c")  # not kept: embedded, as without a read-ahead
