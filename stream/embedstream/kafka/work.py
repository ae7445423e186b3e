"""A request read from Kafka on its way through the engine, with where it must be acked."""

from __future__ import annotations

from dataclasses import dataclass

from embedstream.core.lanes import BucketKey, Priority
from embedstream.engine.jobs import Job
from embedstream.kafka.partitions import PartitionState
from embedstream.wire import EmbedRequest


@dataclass(frozen=True, slots=True)
class Origin:
    topic: str
    partition: int
    offset: int


@dataclass(slots=True, eq=False, kw_only=True)
class WorkItem(Job):
    request: EmbedRequest
    origin: Origin
    raw: bytes
    priority: Priority
    partition: PartitionState  # the assignment it was read under (dead once revoked)
    timestamp_ms: int  # when the request first entered Kafka: end-to-end latency starts here
    model: str  # resolved at intake: the request's, or the configured default
    encoding_format: str
    truncated_from: int | None = None  # estimate before truncation (oversize_policy=truncate)
    not_before_ms: int = 0  # a retry's earliest send time (from the retry record's headers)

    @property
    def key(self) -> BucketKey:
        r = self.request
        return BucketKey(
            self.priority, self.model, self.encoding_format, r.dimensions,
            r.user, r.input_type, r.task,
        )  # fmt: skip

    @property
    def current(self) -> bool:
        """Its partition is still assigned as it was when the record was read."""
        return self.partition.live

    def finish(self) -> None:
        """Its outcome is written: the offset may be committed."""
        self.partition.complete(self.origin.offset)
