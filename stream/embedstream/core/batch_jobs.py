"""How a batch job is cut, and what is done when the provider ends it. Pure.

A job holds records of ONE input partition (its *stream*: topic, partition, lane, and the index
generation a backfill fills), named by their offsets, never their texts: the work stays in
Kafka, read again to write the job's file and again to write its outcomes. A job gathers the
records routed to it while it is *forming*, and is closed when the next record would break a
limit of the provider (OpenAI: 50,000 inputs and 200 MB a job; the model's enqueued tokens when
known), or ``form_s`` after it opened, or when its partition is let go.

When the provider ends a job (`JobEnding`): a refusal for the model's enqueued tokens resubmits
the whole job after a backoff (the work waits in Kafka, not in memory); anything else has its
outcomes written: each request answered by its line, and those without an answer (expired,
cancelled, failed jobs) sent again in their lane's sync path.

A stream's jobs write their outcomes in the order they were formed (`writable`): two versions of
a document, or a version and its delete, never reach the store out of order.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum

from embedstream.core.backoff import Backoff

# OpenAI's limits of a batch of /v1/embeddings (the Batch API guide; the SDK's
# BatchCreateParams): 50,000 inputs across its requests, and a file of up to 200 MB.
MAX_JOB_INPUTS = 50_000
MAX_FILE_BYTES = 200_000_000
# A line's bytes beyond its text: its custom id, method, url, model and fields, as JSON.
LINE_OVERHEAD_BYTES = 160
# The file is kept this far under the provider's limit: the text's bytes are estimated
# (JSON escapes a quote or a control character in two or more bytes).
FILE_MARGIN = 0.95
# What the provider answers for a job over the model's enqueued tokens.
ENQUEUED_REFUSAL = "token_limit_exceeded"


class JobState(StrEnum):
    FORMING = "forming"  # gathering records (the input partition's owner writes it)
    CLOSED = "closed"  # complete: to be submitted by the jobs' watcher
    SUBMITTED = "submitted"  # at the provider (its batch id recorded)
    ENDED = "ended"  # the provider ended it: its outcomes are being written
    FINISHED = "finished"  # every outcome written


@dataclass(frozen=True, slots=True)
class JobLimits:
    max_inputs: int = MAX_JOB_INPUTS
    max_bytes: int = MAX_FILE_BYTES
    max_tokens: int | None = None  # the model's enqueued-token limit, when known
    form_s: float = 60.0

    def __post_init__(self) -> None:
        if not 1 <= self.max_inputs <= MAX_JOB_INPUTS:
            raise ValueError(f"max_inputs must be in 1..{MAX_JOB_INPUTS}")
        if self.max_bytes < 1 or (self.max_tokens is not None and self.max_tokens < 1):
            raise ValueError("max_bytes and max_tokens must be >= 1")
        if not self.form_s >= 0:
            raise ValueError("form_s must be >= 0")

    def fits_alone(self, inputs: int, size: int, tokens: int) -> bool:
        """A record this big can be a job at all (else its lane's sync path takes it)."""
        return (
            inputs <= self.max_inputs
            and size <= self.max_bytes * FILE_MARGIN
            and (self.max_tokens is None or tokens <= self.max_tokens)
        )


def line_bytes(text_bytes: int, model: str) -> int:
    """A line of the job's file, estimated from its text's UTF-8 bytes."""
    return text_bytes + len(model) + LINE_OVERHEAD_BYTES


class JobOffsets:
    """The offsets of a job's records, added in increasing order; a bitmap from the first."""

    def __init__(self, first: int | None = None, bits: bytes = b"") -> None:
        self.first = first
        self._bits = bytearray(bits)
        self._count = sum(bin(b).count("1") for b in self._bits)
        self.last: int | None = None
        if first is not None:
            for offset in self:
                self.last = offset

    def add(self, offset: int) -> None:
        if self.last is not None and offset <= self.last:
            raise ValueError(f"offset {offset} added after {self.last}")
        if self.first is None:
            self.first = offset
        index = offset - self.first
        if index // 8 >= len(self._bits):
            self._bits.extend(bytes(index // 8 + 1 - len(self._bits)))
        self._bits[index // 8] |= 1 << (index % 8)
        self._count += 1
        self.last = offset

    def __len__(self) -> int:
        return self._count

    def __contains__(self, offset: object) -> bool:
        if self.first is None or not isinstance(offset, int) or offset < self.first:
            return False
        index = offset - self.first
        return index // 8 < len(self._bits) and bool(self._bits[index // 8] >> (index % 8) & 1)

    def __iter__(self) -> Iterator[int]:
        first = self.first
        if first is None:
            return
        for byte_index, byte in enumerate(self._bits):
            if byte:
                for bit in range(8):
                    if byte >> bit & 1:
                        yield first + byte_index * 8 + bit

    @property
    def bits(self) -> bytes:
        return bytes(self._bits)


class FormingJob:
    """A job gathering records: what it holds so far, against its limits."""

    def __init__(self, limits: JobLimits, opened_at: float) -> None:
        self.limits = limits
        self.opened_at = opened_at
        self.offsets = JobOffsets()
        self.inputs = 0
        self.bytes = 0
        self.tokens = 0

    def fits(self, inputs: int, size: int, tokens: int) -> bool:
        """The record's lines would keep the job within every limit."""
        limits = self.limits
        return (
            self.inputs + inputs <= limits.max_inputs
            and self.bytes + size <= limits.max_bytes * FILE_MARGIN
            and (limits.max_tokens is None or self.tokens + tokens <= limits.max_tokens)
        )

    def add(self, offset: int, inputs: int, size: int, tokens: int) -> None:
        self.offsets.add(offset)
        self.inputs += inputs
        self.bytes += size
        self.tokens += tokens

    @property
    def full(self) -> bool:
        """Nothing more can join (its inputs are at the limit)."""
        return self.inputs >= self.limits.max_inputs

    def due(self, now: float) -> bool:
        """Open long enough: close it (a job is never empty)."""
        return len(self.offsets) > 0 and now - self.opened_at >= self.limits.form_s


@dataclass(frozen=True, slots=True)
class Resubmit:
    """Submit the whole job again after ``after_s``."""

    after_s: float


@dataclass(frozen=True, slots=True)
class WriteOutcomes:
    """Write the job's outcomes: its answered lines, and the rest through the sync path."""

    status: str


JobEnding = Resubmit | WriteOutcomes


def ending(status: str, error_codes: frozenset[str], refusals: int, backoff: Backoff,
           rng: random.Random) -> JobEnding:  # fmt: skip
    """What to do with an attempt the provider ended with ``status``. ``refusals``: how many
    times the provider refused this job for its enqueued tokens, this one included."""
    if status == "failed" and ENQUEUED_REFUSAL in error_codes:
        return Resubmit(backoff.delay(refusals, rng))
    return WriteOutcomes(status)


def may_submit(tokens: int, submitted_tokens: int, limit: int | None) -> bool:
    """A job may go to the provider now without passing the model's enqueued-token limit (a
    job alone over it goes anyway: the provider's answer decides)."""
    return limit is None or submitted_tokens == 0 or submitted_tokens + tokens <= limit


def writable(seq: int, unfinished_seqs: frozenset[int]) -> bool:
    """A stream's job may write its outcomes: every job formed before it has finished."""
    return all(other >= seq for other in unfinished_seqs)


def overdue(submitted_at_ms: int, now_ms: int, window_s: float) -> bool:
    """Past its completion window: the provider should have ended it by now."""
    return now_ms - submitted_at_ms > window_s * 1000
