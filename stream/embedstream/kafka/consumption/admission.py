"""One Kafka record in: a work item for the engine (or a document to cut into them, or a
document's tombstone), or the failure that dead-letters it.

Everything here is decided from the record alone (value and headers), before the record takes
any buffer space. Nothing raises: malformed values and malformed embedstream headers (say, a
retry record whose attempt count is not a number) become a dead letter with a reason. Values in
a registry format are decoded first (`admit_framed`, async: a new schema id is fetched); a
registry outage holds the record back instead of dead-lettering it.
"""

from __future__ import annotations

from dataclasses import dataclass

from embedstream.core.intake import Admitted, AdmittedDocument, Intake, Rejected
from embedstream.core.lanes import InputLane, Priority
from embedstream.engine.schema_decoders import SchemaDecoders
from embedstream.errors import InvalidEvent, Reason, RegistryUnavailable
from embedstream.kafka.client.protocols import Record
from embedstream.kafka.client.topics import TopicNames
from embedstream.kafka.outputs.document_runs import DocumentStart
from embedstream.kafka.outputs.partitions import PartitionState
from embedstream.kafka.outputs.work import Origin, WorkItem
from embedstream.wire import MAX_EPOCH_MS, NO_RETRY, Failure, read_retry_state
from embedstream.wire.document_events import DocumentTombstone
from embedstream.wire.field_mapping import MappedEvent


@dataclass(frozen=True, slots=True)
class HeldBack:
    """The Schema Registry could not be asked for the record's schema (an outage): the record
    is not admitted, its partition pauses and reads it again after a backoff."""

    reason: str
    message: str
    retry_after_s: float | None = None


class Admission:
    def __init__(
        self,
        intake: Intake,
        topics: TopicNames,
        *,
        max_delay_ms: int,
        decoders: SchemaDecoders | None = None,
        max_event_bytes: int = 1_048_576,
        max_document_bytes: int = 1_048_576,
        lane: InputLane | None = None,
    ) -> None:
        """``lane``: every record read here feeds that lane (the backfill's, of the documents
        topic); None: each topic's own lane."""
        self._lane = lane
        self._intake = intake
        self._topics = topics
        self._decoders = decoders  # None: JSON values
        self._max_event_bytes = max_event_bytes
        self._max_document_bytes = max_document_bytes
        # No retry waits longer than the longest backoff (retry_backoff_cap_ms): a not-before
        # time in the year 9999 would hold the record, and its partition's commits, for ever.
        self._max_delay_ms = max_delay_ms
        self._lanes: dict[str, InputLane] = {}  # each topic's, looked up once

    def report_counts(self) -> None:
        """Report what was counted while admitting a fetch's records (nothing here; the
        sources' accounting: `kafka/consumption/attribution.py`)."""

    @property
    def framed(self) -> bool:
        """Values are in the Schema Registry wire format: admit them with `admit_framed`."""
        return self._decoders is not None

    def admit(
        self, record: Record, state: PartitionState, now_ms: int
    ) -> WorkItem | DocumentStart | DocumentTombstone | Failure:
        """A JSON record (the hot path: no await)."""
        return self._admit(record, state, now_ms, None)

    async def admit_framed(
        self, record: Record, state: PartitionState, now_ms: int
    ) -> WorkItem | DocumentStart | DocumentTombstone | Failure | HeldBack:
        """A registry-framed record: decoded (fetching its schema if new), mapped, then checked
        as a JSON event is. HeldBack if the registry cannot answer now."""
        assert self._decoders is not None
        value = record.value
        if value is None:  # a tombstone: nothing to decode
            return self._admit(record, state, now_ms, None)
        most = max(self._max_event_bytes, self._max_document_bytes)
        if len(value) > most:  # before decoding: a huge payload costs the decoder too
            message = f"value is {len(value)} bytes, limit {most}"
            return _failure(record, "InvalidEvent", Reason.OVERSIZED, message, 0, now_ms)
        try:
            mapped = await self._decoders.decode(value)
        except InvalidEvent as exc:
            return _failure(record, "InvalidEvent", exc.reason, exc.message, 0, now_ms)
        except RegistryUnavailable as exc:
            return HeldBack(exc.reason, exc.message, exc.retry_after)
        return self._admit(record, state, now_ms, mapped)

    def _admit(
        self, record: Record, state: PartitionState, now_ms: int, mapped: MappedEvent | None
    ) -> WorkItem | DocumentStart | DocumentTombstone | Failure:
        try:  # (most records carry no header at all: no call for them)
            retry = read_retry_state(record.headers) if record.headers else NO_RETRY
        except InvalidEvent as exc:
            return _failure(record, "InvalidEvent", exc.reason, exc.message, 0, now_ms)
        value = record.value or b""
        lane = self._lanes.get(record.topic)
        if lane is None:
            lane = self._lanes[record.topic] = self._topics.lane_of(record.topic)
        # A tombstone deletes a document; the retry topic (embedstream's own) carries none.
        retry_topic = lane is _RETRY_INPUT
        if mapped is None:
            verdict = self._intake.admit(record.value, None if retry_topic else record.key)
        else:
            doc = mapped.fields
            if mapped.doc_id is not None:
                doc = {**doc, "doc_id": mapped.doc_id}
            verdict = self._intake.admit_object(doc, len(value))
        # Kafka's -1 is "no timestamp", and a producer may set any: then the request
        # enters now (its retry record's enqueued_at must be a time embedstream reads back).
        timestamp_ms = retry.enqueued_at_ms or record.timestamp  # (the header's is in range)
        if not 0 <= timestamp_ms <= MAX_EPOCH_MS:
            timestamp_ms = now_ms
        if lane is _HIGH_INPUT or (lane is _RETRY_INPUT and retry.high_priority):
            priority = Priority.HIGH
        else:
            priority = Priority.LOW
        if self._lane is not None:
            priority = self._lane.priority
        elif mapped is not None and mapped.high_priority is not None and not retry_topic:
            priority = Priority.HIGH if mapped.high_priority else Priority.LOW
        if type(verdict) is not Admitted:  # (the usual verdict is looked for first)
            if isinstance(verdict, DocumentTombstone):
                return verdict
            if isinstance(verdict, AdmittedDocument):
                origin = Origin(record.topic, record.partition, record.offset)
                return DocumentStart(verdict, origin, priority, timestamp_ms)
            if isinstance(verdict, Rejected):
                return _failure(record, verdict.error_class, verdict.reason, verdict.message,
                                retry.attempts, now_ms)  # fmt: skip
        request = verdict.request
        item = WorkItem(
            id=request.id,
            text=request.text,
            tokens=verdict.tokens,
            deadline_ms=request.deadline_ms,
            request=request,
            origin=_tuple_new(Origin, (record.topic, record.partition, record.offset)),
            raw=value,
            priority=priority,
            partition=state,
            timestamp_ms=timestamp_ms,
            model=verdict.model,
            encoding_format=verdict.encoding_format,
            truncated_from=verdict.truncated_from,
        )
        if retry is not NO_RETRY:  # a retry record: what its headers carry (else the defaults)
            item.attempts = retry.attempts
            item.first_failure_ms = retry.first_failure_ms
            item.first_error = retry.first_error
            item.not_before_ms = min(retry.not_before_ms, now_ms + self._max_delay_ms)
        return item


_HIGH_INPUT, _RETRY_INPUT = InputLane.HIGH, InputLane.RETRY  # (module names: read per record)

# Builds a NamedTuple from all its fields without the call of its generated __new__ (the
# largest part of building one, per record).
_tuple_new = tuple.__new__


def _failure(
    record: Record, error_class: str, reason: str, message: str, attempts: int, now_ms: int
) -> Failure:
    return Failure(error_class, reason, message, attempts, record.topic, record.partition,
                   record.offset, now_ms, now_ms)  # fmt: skip
