"""One Kafka record in: a work item for the engine (or a document to cut into them, or a
document's tombstone), or the failure that dead-letters it.

Everything here is decided from the record alone (value and headers), before the record takes
any buffer space. Nothing raises: malformed values and malformed embedstream headers (say, a
retry record whose attempt count is not a number) become a dead letter with a reason.
"""

from __future__ import annotations

from embedstream.core.intake import Admitted, AdmittedDocument, Intake
from embedstream.core.lanes import InputLane, Priority
from embedstream.errors import InvalidEvent
from embedstream.kafka.documents import DocumentStart
from embedstream.kafka.partitions import PartitionState
from embedstream.kafka.protocols import Record
from embedstream.kafka.topics import TopicNames
from embedstream.kafka.work import Origin, WorkItem
from embedstream.wire import MAX_EPOCH_MS, Failure, RetryState, read_retry_state
from embedstream.wire.document_events import DocumentTombstone


class Admission:
    def __init__(self, intake: Intake, topics: TopicNames, *, max_delay_ms: int) -> None:
        self._intake = intake
        self._topics = topics
        # No retry waits longer than the longest backoff (retry_backoff_cap_ms): a not-before
        # time in the year 9999 would hold the record, and its partition's commits, for ever.
        self._max_delay_ms = max_delay_ms

    def admit(
        self, record: Record, state: PartitionState, now_ms: int
    ) -> WorkItem | DocumentStart | DocumentTombstone | Failure:
        try:
            retry = read_retry_state(record.headers)
        except InvalidEvent as exc:
            return _failure(record, "InvalidEvent", exc.reason, exc.message, 0, now_ms)
        value = record.value or b""
        # A tombstone deletes a document; the retry topic (embedstream's own) carries none.
        retry_topic = self._topics.lane_of(record.topic) is InputLane.RETRY
        verdict = self._intake.admit(record.value, None if retry_topic else record.key)
        if isinstance(verdict, DocumentTombstone):
            return verdict
        # Kafka's -1 is "no timestamp", and a producer may set any: then the request
        # enters now (its retry record's enqueued_at must be a time embedstream reads back).
        timestamp_ms = retry.enqueued_at_ms or _plausible(record.timestamp, now_ms)
        if isinstance(verdict, AdmittedDocument):
            origin = Origin(record.topic, record.partition, record.offset)
            return DocumentStart(verdict, origin, self._priority(record.topic, retry), timestamp_ms)
        if not isinstance(verdict, Admitted):
            return _failure(record, verdict.error_class, verdict.reason, verdict.message,
                            retry.attempts, now_ms)  # fmt: skip
        return WorkItem(
            id=verdict.request.id,
            text=verdict.request.text,
            tokens=verdict.tokens,
            deadline_ms=verdict.request.deadline_ms,
            attempts=retry.attempts,
            first_failure_ms=retry.first_failure_ms,
            first_error=retry.first_error,
            request=verdict.request,
            origin=Origin(record.topic, record.partition, record.offset),
            raw=value,
            priority=self._priority(record.topic, retry),
            partition=state,
            timestamp_ms=timestamp_ms,
            model=verdict.model,
            encoding_format=verdict.encoding_format,
            truncated_from=verdict.truncated_from,
            not_before_ms=min(retry.not_before_ms, now_ms + self._max_delay_ms),
        )

    def _priority(self, topic: str, retry: RetryState) -> Priority:
        lane = self._topics.lane_of(topic)
        if lane is InputLane.HIGH or (lane is InputLane.RETRY and retry.high_priority):
            return Priority.HIGH
        return Priority.LOW


def _failure(
    record: Record, error_class: str, reason: str, message: str, attempts: int, now_ms: int
) -> Failure:
    return Failure(error_class, reason, message, attempts, record.topic, record.partition,
                   record.offset, now_ms, now_ms)  # fmt: skip


def _plausible(timestamp_ms: int, now_ms: int) -> int:
    return timestamp_ms if 0 <= timestamp_ms <= MAX_EPOCH_MS else now_ms
