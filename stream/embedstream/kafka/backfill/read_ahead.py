"""The backfill's read-ahead: the documents topic read once to its end before the backfill
embeds anything, keeping each key's newest offset (`core/latest_records.py`), so that it
embeds each document's latest version only, however far the topic's compaction is behind.

The topic is read as `migrate status` reads it (:mod:`embedstream.kafka.client.reader`: no consumer
group, committed records only, to the ends its first fetch reports). A read that fails or runs
out of time keeps what it read: the records beyond it are embedded, as without a read-ahead.
"""

from __future__ import annotations

import logging

from aiokafka.errors import KafkaError

from embedstream.core.latest_records import LatestRecords
from embedstream.kafka.client.connection import KafkaConnection
from embedstream.kafka.client.reader import ReadError, read_topic

log = logging.getLogger(__name__)

# Keys kept (each about 100 bytes with its offset): a corpus of a million documents; past it,
# the versions of the documents beyond are all embedded (core/latest_records.py).
MAX_KEYS = 1_000_000
READ_AHEAD_TIMEOUT_S = 600.0  # the whole topic, values and all: a large corpus takes a while


async def read_ahead(
    connection: KafkaConnection,
    topic: str,
    *,
    client_id: str,
    max_keys: int = MAX_KEYS,
    timeout_s: float = READ_AHEAD_TIMEOUT_S,
) -> LatestRecords:
    """Each key's newest offset in ``topic``, as far as it could be read."""
    latest = LatestRecords(max_keys)
    read = 0
    try:
        async for record in read_topic(connection, topic, timeout_s=timeout_s, client_id=client_id):
            latest.read(record.partition, record.offset, record.key)
            read += 1
    except (ReadError, KafkaError, OSError) as exc:
        log.warning("the backfill's read-ahead of %s stopped after %d records (%s); the "
                    "versions it did not reach are all embedded", topic, read, exc)  # fmt: skip
        return latest
    if latest.full:
        log.warning("the backfill's read-ahead of %s kept %d keys, its bound: the versions of "
                    "the other documents are all embedded", topic, max_keys)  # fmt: skip
    log.info("backfill read-ahead of %s: %d records, %d documents", topic, read, len(latest))
    return latest
