"""Produces results, retries and dead letters, and returns only once the broker acked them.

The processor commits an input offset only after the matching ``send_and_wait`` here returned,
so every committed request has its outcome durably in Kafka (at-least-once).
"""

from __future__ import annotations

import time
from typing import Any

from stream.events import HEADER_PREFIX, EmbedResult, Failure, dead_letter_headers
from stream.topics import TopicNames
from stream.work import WorkItem

RETRY_ATTEMPTS = HEADER_PREFIX + "retry.attempts"
RETRY_NOT_BEFORE = HEADER_PREFIX + "retry.not_before"
RETRY_FIRST_ERROR = HEADER_PREFIX + "retry.first_error"
RETRY_FIRST_FAILURE = HEADER_PREFIX + "retry.first_failure"
PRIORITY = HEADER_PREFIX + "priority"
ENQUEUED_AT = HEADER_PREFIX + "enqueued_at"
# On a result whose text was cut to the per-input limit: the token estimate before cutting.
TRUNCATED_FROM = HEADER_PREFIX + "truncated_from_tokens"


def now_ms() -> int:
    return int(time.time() * 1000)


class Sink:
    def __init__(self, producer: Any, topics: TopicNames) -> None:
        self._producer = producer
        self._topics = topics

    async def result(self, item: WorkItem, result: EmbedResult) -> None:
        headers = []
        if item.truncated_from is not None:
            headers.append((TRUNCATED_FROM, str(item.truncated_from).encode()))
        await self._producer.send_and_wait(
            self._topics.results, result.encode(), key=item.request.id.encode(), headers=headers
        )

    async def retry(self, item: WorkItem, not_before_ms: int, error: str) -> None:
        headers = [
            (RETRY_ATTEMPTS, str(item.attempts).encode()),
            (RETRY_NOT_BEFORE, str(not_before_ms).encode()),
            (RETRY_FIRST_ERROR, (item.first_error or error).encode()[:1024]),
            (RETRY_FIRST_FAILURE, str(item.first_failure_ms or now_ms()).encode()),
            (PRIORITY, item.priority.name.lower().encode()),
            (ENQUEUED_AT, str(item.timestamp_ms).encode()),
        ]
        await self._producer.send_and_wait(
            self._topics.retry, item.raw, key=item.request.id.encode(), headers=headers
        )

    async def dead_letter(self, raw: bytes | None, key: bytes | None, failure: Failure) -> None:
        await self._producer.send_and_wait(
            self._topics.dead_letters, raw, key=key, headers=dead_letter_headers(failure)
        )
