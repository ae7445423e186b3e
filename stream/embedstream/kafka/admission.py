"""One Kafka record in: a work item for the engine, or the failure that dead-letters it.

Everything here is decided from the record alone (value and headers), before the record takes
any buffer space. Nothing raises: malformed values and malformed embedstream headers (say, a
retry record whose attempt count is not a number) become a dead letter with a reason.
"""

from __future__ import annotations

from embedstream.core.intake import Admitted, Intake
from embedstream.core.lanes import InputLane, Priority
from embedstream.errors import InvalidEvent
from embedstream.kafka.partitions import PartitionState
from embedstream.kafka.protocols import Record
from embedstream.kafka.topics import TopicNames
from embedstream.kafka.work import Origin, WorkItem
from embedstream.wire import Failure, RetryState, read_retry_state


class Admission:
    def __init__(self, intake: Intake, topics: TopicNames) -> None:
        self._intake = intake
        self._topics = topics

    def admit(self, record: Record, state: PartitionState, now_ms: int) -> WorkItem | Failure:
        try:
            retry = read_retry_state(record.headers)
        except InvalidEvent as exc:
            return _failure(record, "InvalidEvent", exc.reason, exc.message, 0, now_ms)
        value = record.value or b""
        verdict = self._intake.admit(record.value)
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
            timestamp_ms=retry.enqueued_at_ms or record.timestamp,
            model=verdict.model,
            encoding_format=verdict.encoding_format,
            truncated_from=verdict.truncated_from,
            not_before_ms=retry.not_before_ms,
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
