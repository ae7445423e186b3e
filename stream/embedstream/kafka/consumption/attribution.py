"""What each admitted record is attributed to: its source (the input topic it first came in
on, for accounting) and its process span (tracing).

Wraps :class:`~embedstream.kafka.consumption.admission.Admission`: a request gets both on its work
item, a
document on its start (its chunks inherit them). A retry record's source is the one its
request came in on (the retry record's `embedstream.source.topic` header), not the retry
topic. Sources are labels of metrics, so they are bounded: the configured input topics only;
a header naming anything else counts as the retry topic.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Protocol

from embedstream.core.intake import Intake
from embedstream.core.tracing import NULL_TRACER, Tracer
from embedstream.engine.schema_decoders import SchemaDecoders
from embedstream.kafka.client.protocols import Record
from embedstream.kafka.client.topics import TopicNames
from embedstream.kafka.consumption.admission import Admission, HeldBack
from embedstream.kafka.outputs.document_runs import DocumentStart
from embedstream.kafka.outputs.partitions import PartitionState
from embedstream.kafka.outputs.work import WorkItem
from embedstream.wire import SOURCE_TOPIC, Failure
from embedstream.wire.document_events import DocumentTombstone


class SourceObserver(Protocol):
    def declare_sources(self, sources: Iterable[str]) -> None:
        """The sources there will be (their series exist from the start)."""

    def count_source_requests(self, source: str, count: int) -> None:
        """``count`` requests (or documents) came in on `source` (retries are not counted
        again)."""


class Sources:
    """The bounded set of source labels: the configured input topics."""

    def __init__(self, topics: TopicNames, inputs: Iterable[str]) -> None:
        self._retry = topics.retry  # the one topic whose lane is InputLane.RETRY
        self.known = frozenset(inputs)

    def of(self, record: Record) -> str:
        if record.topic != self._retry:
            return record.topic
        for name, value in record.headers or ():
            if name == SOURCE_TOPIC and value:
                source = value.decode("utf-8", "replace")
                return source if source in self.known else record.topic
        return record.topic


class AttributedAdmission(Admission):
    def __init__(
        self,
        intake: Intake,
        topics: TopicNames,
        *,
        max_delay_ms: int,
        sources: Sources,
        observer: SourceObserver,
        tracer: Tracer = NULL_TRACER,
        decoders: SchemaDecoders | None = None,
        max_event_bytes: int = 1_048_576,
        max_document_bytes: int = 1_048_576,
    ) -> None:
        super().__init__(
            intake, topics, max_delay_ms=max_delay_ms, decoders=decoders,
            max_event_bytes=max_event_bytes, max_document_bytes=max_document_bytes,
        )  # fmt: skip
        self._sources = sources
        self._observer = observer
        observer.declare_sources(sorted(sources.known))
        self._tracer = tracer
        self._traced = tracer is not NULL_TRACER  # else every work item keeps its NULL_SPAN
        self._retry_topic = topics.retry
        self._counted: dict[str, int] = {}  # requests by source since the last report

    def admit(
        self, record: Record, state: PartitionState, now_ms: int
    ) -> WorkItem | DocumentStart | DocumentTombstone | Failure:
        # (Admission.admit is this _admit: called straight, once a record)
        return self._attributed(record, self._admit(record, state, now_ms, None))

    async def admit_framed(
        self, record: Record, state: PartitionState, now_ms: int
    ) -> WorkItem | DocumentStart | DocumentTombstone | Failure | HeldBack:
        verdict = await super().admit_framed(record, state, now_ms)
        if isinstance(verdict, HeldBack):
            return verdict
        return self._attributed(record, verdict)

    def _attributed(
        self, record: Record, verdict: WorkItem | DocumentStart | DocumentTombstone | Failure
    ) -> WorkItem | DocumentStart | DocumentTombstone | Failure:
        """Its source and its process span, on the work a record became."""
        if isinstance(verdict, Failure | DocumentTombstone):
            return verdict
        topic = record.topic  # (Sources.of, without its call for a request's own topic)
        source = topic if topic != self._retry_topic else self._sources.of(record)
        if record.topic != self._retry_topic:
            self._counted[source] = self._counted.get(source, 0) + 1
        if isinstance(verdict, DocumentStart):
            span = self._tracer.request(
                record.headers, record.topic, record.partition, record.offset
            )
            return dataclasses.replace(verdict, source=source, span=span)
        verdict.source = source
        if self._traced:
            verdict.span = self._tracer.request(
                record.headers, record.topic, record.partition, record.offset
            )
        return verdict

    def report_counts(self) -> None:
        """The requests counted by source since the last report, to the observer: once a
        fetch rather than once a record (a counter's lock each)."""
        counted, self._counted = self._counted, {}
        for source, count in counted.items():
            self._observer.count_source_requests(source, count)
