"""A batch job's record in the batch jobs topic (compacted, keyed by the job's id): which input
records it holds and where their outcomes go, its provider batch, how far its outcomes are
written. Every change of the job is a new record of the same key; the last one is the job.

The records are named by offsets (a bitmap from the first, zlib-compressed, base64): a job of
50,000 requests spread over 100,000 offsets is a record of a few KB, far under Kafka's default
1 MB limit whatever its texts weigh. Partition ``p mod N`` of the topic holds the jobs of input
partitions ``p`` (of every input topic), so the owner of an input partition reads one
partition of it to find that partition's jobs.

The batch's ``metadata`` at the provider carries the job's id (``BATCH_METADATA_KEY``): a job
submitted just before a crash is found again by listing the provider's batches, never paid
twice.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import zlib
from dataclasses import dataclass, field

import orjson

from embedstream.errors import InvalidEvent, Reason

BATCH_METADATA_KEY = "embedstream_job"
BATCH_GROUP_KEY = "embedstream_group"
BATCH_ATTEMPT_KEY = "embedstream_attempt"
FORMAT_VERSION = 1


@dataclass(frozen=True, slots=True)
class JobStream:
    """The input a job's records come from, and the lane and generation they are embedded in."""

    topic: str
    partition: int
    lane: str  # "low" or "backfill"
    # A backfill's generation (model, dimensions, max/overlap/min tokens); None: the
    # processor's own settings.
    generation: dict[str, object] | None = None

    @property
    def generation_id(self) -> str | None:
        found = None if self.generation is None else self.generation.get("id")
        return found if isinstance(found, str) else None

    def key(self) -> str:
        """What names the stream in job ids: every field of it."""
        return f"{self.topic}/{self.partition}/{self.lane}/{self.generation_id or ''}"


@dataclass(frozen=True, slots=True)
class JobRecord:
    id: str
    group: str  # the processors' group_id (jobs of another group are not ours)
    stream: JobStream
    seq: int  # formed after the stream's jobs of lower seq
    whole: bool  # every record of the stream goes to jobs: ends in order with the others
    model: str
    state: str  # core.batch_jobs.JobState
    offsets_first: int
    offsets_bits: bytes
    inputs: int
    size: int  # the file's estimated bytes
    tokens: int
    opened_at_ms: int
    closed_at_ms: int | None = None
    attempt: int = 0  # submissions so far
    refusals: int = 0  # of them refused for the model's enqueued tokens
    not_before_ms: int = 0  # not submitted again before this (after a refusal)
    file_id: str | None = None
    batch_id: str | None = None
    submitted_at_ms: int | None = None
    status: str | None = None  # the provider's, once it ended the attempt
    output_file_id: str | None = None
    error_file_id: str | None = None
    error_codes: tuple[str, ...] = ()
    ended_at_ms: int | None = None
    written: int | None = None  # outcomes written for every record below this offset
    finished_at_ms: int | None = None
    # Its revision: every record of a job counts one more than the one before it, so a reader
    # that has a later one never goes back to an older one it reads after it.
    rev: int = 0
    extra: dict[str, object] = field(default_factory=dict, compare=False)

    @property
    def key(self) -> bytes:
        return self.id.encode()

    def but(self, **changes: object) -> JobRecord:
        """The job's next record: ``changes`` applied, one revision on."""
        return dataclasses.replace(self, **{"rev": self.rev + 1, **changes})  # type: ignore[arg-type]

    def encode(self) -> bytes:
        doc = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
               if f.name not in ("offsets_bits", "extra", "stream")}  # fmt: skip
        doc["v"] = FORMAT_VERSION
        doc["stream"] = dataclasses.asdict(self.stream)
        doc["offsets_bits"] = base64.b64encode(zlib.compress(self.offsets_bits, 6)).decode()
        doc["error_codes"] = list(self.error_codes)
        return orjson.dumps(doc)


def job_id(group: str, stream: JobStream, model: str, first_offset: int) -> str:
    """A job's id: its stream's and model's digest, and its first offset (unique: a stream's
    jobs never share a first offset)."""
    digest = hashlib.sha256(f"{group}\0{stream.key()}\0{model}".encode()).hexdigest()[:12]
    return f"job-{digest}-{first_offset}"


def jobs_partition(input_partition: int, partitions: int) -> int:
    return input_partition % partitions


def decode_job(value: bytes) -> JobRecord:
    """A job record; InvalidEvent if it is not one."""
    try:
        doc = orjson.loads(value)
        if not isinstance(doc, dict) or doc.get("v") != FORMAT_VERSION:
            raise ValueError(f"not a version {FORMAT_VERSION} job record")
        stream_doc = doc.pop("stream")
        doc.pop("v")
        bits = zlib.decompress(base64.b64decode(doc.pop("offsets_bits")))
        stream = JobStream(
            str(stream_doc["topic"]), int(stream_doc["partition"]), str(stream_doc["lane"]),
            stream_doc.get("generation"),
        )  # fmt: skip
        doc["error_codes"] = tuple(doc.get("error_codes") or ())
        known = {f.name for f in dataclasses.fields(JobRecord)}
        extra = {k: v for k, v in doc.items() if k not in known}
        fields = {k: v for k, v in doc.items() if k in known}
        return JobRecord(stream=stream, offsets_bits=bits, extra=extra, **fields)
    except (ValueError, KeyError, TypeError, zlib.error, orjson.JSONDecodeError) as exc:
        raise InvalidEvent(Reason.INVALID_JSON, f"unreadable batch job record: {exc}") from None
