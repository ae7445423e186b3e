"""embedstream's Kafka headers: dead letters, retry records, truncation."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from embedstream.errors import InvalidEvent, Reason
from embedstream.wire.events import Failure

Headers = list[tuple[str, bytes]]
HEADER_PREFIX = "embedstream."
# Dead letters.
ERROR_CLASS = HEADER_PREFIX + "error.class"
ERROR_REASON = HEADER_PREFIX + "error.reason"
ERROR_MESSAGE = HEADER_PREFIX + "error.message"
ERROR_ATTEMPTS = HEADER_PREFIX + "error.attempts"
SOURCE_TOPIC = HEADER_PREFIX + "source.topic"
SOURCE_PARTITION = HEADER_PREFIX + "source.partition"
SOURCE_OFFSET = HEADER_PREFIX + "source.offset"
FAILURE_FIRST = HEADER_PREFIX + "failure.first"
FAILURE_LAST = HEADER_PREFIX + "failure.last"
# Retry records.
RETRY_ATTEMPTS = HEADER_PREFIX + "retry.attempts"
RETRY_NOT_BEFORE = HEADER_PREFIX + "retry.not_before"
RETRY_FIRST_ERROR = HEADER_PREFIX + "retry.first_error"
RETRY_FIRST_FAILURE = HEADER_PREFIX + "retry.first_failure"
PRIORITY = HEADER_PREFIX + "priority"
ENQUEUED_AT = HEADER_PREFIX + "enqueued_at"
# On a dead letter of a document's chunk: which document, version and chunk it was.
DOC_ID = HEADER_PREFIX + "doc.id"
DOC_VERSION = HEADER_PREFIX + "doc.version"
DOC_CHUNK_SEQ = HEADER_PREFIX + "doc.chunk_seq"
# On a document's tombstone (its value is null): the index generation it deletes from.
INDEX_GENERATION_HEADER = HEADER_PREFIX + "index_generation"
# On every output of the backfill lane (a migration filling a new index generation from the
# documents topic): the store lets the live stream's writes of a document win over these.
BACKFILL_HEADER = HEADER_PREFIX + "backfill"
# On a result whose text was cut to the per-input limit: the token estimate before cutting.
TRUNCATED_FROM = HEADER_PREFIX + "truncated_from_tokens"

MAX_MESSAGE_BYTES = 1024


def dead_letter_headers(failure: Failure) -> Headers:
    message = failure.message.encode("utf-8")[:MAX_MESSAGE_BYTES]
    pairs = {
        ERROR_CLASS: failure.error_class,
        ERROR_REASON: failure.reason,
        ERROR_MESSAGE: message.decode("utf-8", "ignore"),
        ERROR_ATTEMPTS: str(failure.attempts),
        SOURCE_TOPIC: failure.source_topic,
        SOURCE_PARTITION: str(failure.source_partition),
        SOURCE_OFFSET: str(failure.source_offset),
        FAILURE_FIRST: rfc3339(failure.first_failure_ms),
        FAILURE_LAST: rfc3339(failure.last_failure_ms),
    }
    return [(name, value.encode("utf-8")) for name, value in pairs.items()]


def chunk_headers(doc_id: str, version: str, chunk_seq: int) -> Headers:
    return [
        (DOC_ID, doc_id.encode("utf-8")),
        (DOC_VERSION, version.encode("utf-8")),
        (DOC_CHUNK_SEQ, str(chunk_seq).encode()),
    ]


@dataclass(frozen=True, slots=True)
class RetryState:
    """What a retry record carries besides the original request (all from its headers)."""

    attempts: int = 0  # calls already made for this request
    not_before_ms: int = 0  # earliest time to call again
    first_error: str | None = None
    first_failure_ms: int | None = None
    high_priority: bool = False
    enqueued_at_ms: int | None = None  # when the request first entered Kafka

    def headers(self) -> Headers:
        pairs = [
            (RETRY_ATTEMPTS, str(self.attempts)),
            (RETRY_NOT_BEFORE, str(self.not_before_ms)),
            (RETRY_FIRST_ERROR, self.first_error or ""),
            (RETRY_FIRST_FAILURE, str(self.first_failure_ms or 0)),
            (PRIORITY, "high" if self.high_priority else "low"),
        ]
        if self.enqueued_at_ms is not None:
            pairs.append((ENQUEUED_AT, str(self.enqueued_at_ms)))
        return [(name, value.encode("utf-8")[:MAX_MESSAGE_BYTES]) for name, value in pairs]


def read_retry_state(headers: Iterable[tuple[str, bytes | None]] | None) -> RetryState:
    """embedstream's headers of any input record (absent on a fresh request).

    Raises InvalidEvent (reason ``invalid_headers``) when one of them is present but not what
    embedstream writes, so the record is dead-lettered instead of crashing the fetch loop.
    """
    if not headers:  # a fresh request: most records carry no header at all
        return NO_RETRY
    found = headers_dict(headers)
    if not any(name.startswith(HEADER_PREFIX) for name in found):
        return NO_RETRY
    first_failure = _header_int(found, RETRY_FIRST_FAILURE)
    return RetryState(
        attempts=_header_int(found, RETRY_ATTEMPTS, MAX_ATTEMPTS_HEADER) or 0,
        not_before_ms=_header_int(found, RETRY_NOT_BEFORE) or 0,
        first_error=found.get(RETRY_FIRST_ERROR) or None,
        first_failure_ms=first_failure or None,
        high_priority=_priority(found),
        enqueued_at_ms=_header_int(found, ENQUEUED_AT),
    )


# The state of a request that was never retried (frozen: one shared by every fresh record).
NO_RETRY = RetryState()

# Epoch milliseconds up to the last one of the year 9999 (the latest `rfc3339` can write: a
# dead letter of the item carries it), attempts up to a billion: anything larger is not
# something embedstream wrote (nor could write back: a retry counts one attempt more).
MAX_EPOCH_MS = 253_402_300_799_999  # the latest time embedstream writes or reads back
MAX_ATTEMPTS_HEADER = 1_000_000_000


def _header_int(found: Mapping[str, str], name: str, maximum: int = MAX_EPOCH_MS) -> int | None:
    text = found.get(name)
    if text is None:
        return None
    if not text.isascii() or not text.isdigit() or int(text) > maximum:
        raise InvalidEvent(
            Reason.INVALID_HEADERS,
            f"header {name} must be an integer from 0 to {maximum}, got {text!r:.40}",
        )
    return int(text)


def _priority(found: Mapping[str, str]) -> bool:
    value = found.get(PRIORITY, "low")
    if value not in ("high", "low"):
        raise InvalidEvent(
            Reason.INVALID_HEADERS, f"header {PRIORITY} must be high or low, got {value!r:.40}"
        )
    return value == "high"


def rfc3339(epoch_ms: int) -> str:
    moment = datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def headers_dict(headers: Iterable[tuple[str, bytes | None]] | None) -> dict[str, str]:
    """Kafka headers (a sequence of (str, bytes)) as a dict of strings (the last value wins)."""
    return {k: (v or b"").decode("utf-8", "replace") for k, v in headers or ()}
