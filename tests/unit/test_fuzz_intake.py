"""Fuzzing the intake: arbitrary bytes and headers in, a work item or a dead letter out.

A record from Kafka can hold anything. Admission (`kafka/consumption/admission.py`: the
retry-header reader
`wire.read_retry_state`, then `core/intake.py`) must turn every one into a work item or a
failure with a reason code, never raise: an exception there stops the fetch loop, and the record,
never committed, stops the member again after every restart. Whatever it admits must also be
writable as each of its outcomes (result, retry record, dead letter), or the record would be
stuck unfinished later.

Sized for CI (3,500 examples, about 20 s); `bash ops/fuzz.sh` runs the same
properties with the `fuzz` profile (tests/unit/conftest.py): hundreds of thousands.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from aiokafka import TopicPartition
from embedstream.core import configured
from embedstream.core.intake import Intake
from embedstream.core.lanes import InputLane, Priority
from embedstream.core.tokens import estimate_tokens
from embedstream.errors import InvalidEvent, Reason
from embedstream.kafka.client.admin import topic_names
from embedstream.kafka.consumption.admission import Admission
from embedstream.kafka.outputs.partitions import PartitionState
from embedstream.kafka.outputs.work import WorkItem
from embedstream.settings import load_settings
from embedstream.testing.kafka import FakeRecord
from embedstream.wire import (
    ENQUEUED_AT,
    PRIORITY,
    RETRY_ATTEMPTS,
    RETRY_FIRST_ERROR,
    RETRY_FIRST_FAILURE,
    RETRY_NOT_BEFORE,
    EmbedResult,
    Failure,
    RetryState,
    dead_letter_headers,
    read_retry_state,
)
from embedstream.wire.document_events import DocumentTombstone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

NAMES = topic_names("f.")
SETTINGS = load_settings(env={}, overrides={"max_event_bytes": 4096, "max_input_tokens": 500})
ADMISSION = Admission(
    Intake(SETTINGS, configured.provider_limits(SETTINGS), estimate_tokens),
    NAMES,
    max_delay_ms=int(SETTINGS.retry_backoff_cap_ms),
)
NOW_MS = 1_780_000_000_000
REASONS = {str(r) for r in Reason}
# 3,500 examples in CI (about 20 s of CPU on our 2-core runner, most of it hypothesis drawing);
# the `fuzz` profile (ops/fuzz.sh) raises the default above these.


def _fuzz(examples: int) -> settings:
    return settings(
        max_examples=max(examples, settings().max_examples),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


# ------------------------------------------------------------------------------ strategies

OUR_HEADERS = [RETRY_ATTEMPTS, RETRY_NOT_BEFORE, RETRY_FIRST_ERROR, RETRY_FIRST_FAILURE,
               PRIORITY, ENQUEUED_AT]  # fmt: skip
# Short texts over a small alphabet that still has what parsers trip on: quotes, escapes,
# controls, non-ASCII letters and digits, an astral character.
texts = st.text(st.sampled_from('ab Z0"\\\n\t\x00é٣𝄞-:T+'), max_size=10)
numbers = st.one_of(
    st.integers(min_value=-(10**20), max_value=10**20),
    st.sampled_from([0, 1, 2**31, 2**63, 253_402_300_800_000, 253_402_300_799_999]),
)
header_values = st.one_of(
    st.none(),
    st.binary(max_size=24),
    numbers.map(lambda n: str(n).encode()),
    st.sampled_from([b"253402300800000", b"253402300799999", b"99999999999999999"]),
    texts.map(str.encode),
    st.sampled_from([b"high", b"low", b"", b" 1", b"1e3", b"\xff\xfe", "٣".encode(), b"+5"]),
)
header_names = st.one_of(
    st.sampled_from([*OUR_HEADERS, "embedstream.", "embedstream.other", "traceparent"]),
    texts,
)
# Each of embedstream's headers present or not (with boundary numbers often), then others.
headers = st.builds(
    lambda ours, others: [*ours, *others],
    st.lists(st.tuples(st.sampled_from(OUR_HEADERS), header_values), max_size=6),
    st.lists(st.tuples(header_names, header_values), max_size=2),
)
field_names = st.sampled_from(["id", "text", "model", "dimensions", "metadata", "x"])
scalars = st.one_of(
    st.none(), st.booleans(), numbers, st.floats(), texts,
    st.sampled_from(["float", "base64", "2026-12-01T00:00:00Z", "0001-01-01T00:00:00+14:00"]),
)  # fmt: skip
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(field_names, inner, max_size=3),
    max_leaves=5,
)
request_docs = st.fixed_dictionaries(
    {},
    optional={
        name: json_values
        for name in ("id", "text", "model", "encoding_format", "dimensions", "metadata",
                     "deadline", "extra")
    },
)  # fmt: skip


def _encode(doc: Any, how: int) -> bytes:
    if how == 0:
        return json.dumps(doc).encode()  # NaN, Infinity and big integers as Python writes them
    try:
        return orjson.dumps(doc)
    except TypeError:  # integers over 64 bits
        return json.dumps(doc).encode()


well_formed = st.builds(
    lambda rid, text: orjson.dumps({"id": rid, "text": text}),
    texts.filter(bool), texts.filter(str.strip),
)  # fmt: skip
values = st.one_of(
    well_formed,  # first: hypothesis leans to it, and admitted items reach the outcome checks
    st.none(),
    st.binary(max_size=300),
    st.builds(_encode, request_docs, st.integers(0, 1)),
    st.builds(lambda raw, cut: raw[:cut], st.builds(_encode, request_docs, st.just(1)),
              st.integers(0, 200)),  # truncated JSON
    st.builds(lambda doc, pad: _encode(doc, 1) + b" " * pad, request_docs, st.just(5000)),
)  # fmt: skip
topics = st.sampled_from([NAMES.requests_high, NAMES.requests_low, NAMES.retry])


# ------------------------------------------------------------------------------ properties


@_fuzz(2000)
@given(value=values, record_headers=headers, topic=topics, timestamp=numbers)
def test_every_record_becomes_work_or_a_dead_letter_with_a_reason(
    value: bytes | None, record_headers: list[tuple[str, bytes | None]], topic: str, timestamp: int
) -> None:
    record = FakeRecord(topic, 0, 7, b"key", value, tuple(record_headers), timestamp)  # type: ignore[arg-type]
    state = PartitionState(TopicPartition(topic, 0), InputLane.LOW)
    verdict = ADMISSION.admit(record, state, NOW_MS)
    if isinstance(verdict, Failure):
        assert verdict.reason in REASONS, verdict
        assert verdict.error_class in ("InvalidEvent", "PermanentItemError"), verdict
        assert dead_letter_headers(verdict)  # the dead letter can be written
        return
    if isinstance(verdict, DocumentTombstone):  # a keyed record without a value, read as a delete
        assert value is None and topic != NAMES.retry and verdict.doc_id == "key"
        return
    assert isinstance(verdict, WorkItem)
    assert verdict.text.strip() and verdict.id and verdict.attempts >= 0
    assert verdict.tokens <= SETTINGS.max_input_tokens
    assert verdict.not_before_ms <= NOW_MS + SETTINGS.retry_backoff_cap_ms  # never held for ever
    _assert_every_outcome_writable(verdict)


def _assert_every_outcome_writable(item: WorkItem) -> None:
    """What the sink would write for it: a result, a retry record, a dead letter."""
    result = EmbedResult(item.id, item.model, [0.5], 1, 1, item.request.metadata,
                         item.attempts + 1, float(NOW_MS - item.timestamp_ms))  # fmt: skip
    assert orjson.loads(result.encode())["id"] == item.id
    retry = RetryState(item.attempts + 1, NOW_MS + 500, item.first_error or "timeout: x",
                       item.first_failure_ms or NOW_MS, item.priority is Priority.HIGH,
                       item.timestamp_ms)  # fmt: skip
    assert read_retry_state(retry.headers()).attempts == item.attempts + 1
    failure = Failure("TransientError", "timeout", "x", item.attempts + 1, item.origin.topic, 0,
                      7, item.first_failure_ms or NOW_MS, NOW_MS)  # fmt: skip
    assert dead_letter_headers(failure)


INTAKES = [
    Intake(variant, configured.provider_limits(variant), estimate_tokens)
    for variant in (
        SETTINGS,
        load_settings(env={}, overrides={"max_input_tokens": 6, "oversize_policy": "truncate",
                                         "max_event_bytes": 60}),
        load_settings(env={}, overrides={"dimensions": 64, "encoding_format": "base64"}),
        load_settings(env={}, overrides={"allowed_models": "m1,m2", "model": "m2"}),
    )
]  # fmt: skip
# Texts about max_input_tokens long (6 in the second settings: up to 15 bytes fit).
long_texts = st.text(st.sampled_from("ab é"), min_size=10, max_size=25)
plain_docs = st.fixed_dictionaries(
    {"id": st.sampled_from(["r-1", "x" * 512, "x" * 513]) | json_values | texts,
     "text": json_values | texts | long_texts}
)  # fmt: skip


@_fuzz(1500)
@given(doc=request_docs | plain_docs, size=st.integers(0, 100), which=st.integers(0, 3))
def test_the_short_path_of_a_plain_request_gives_the_general_paths_verdict(
    doc: dict[str, Any], size: int, which: int
) -> None:
    """admit_object's short path (an id and a text, nothing else) against the general rule,
    for any object, size and settings (the verdicts compare field by field)."""
    intake = INTAKES[which]
    assert intake.admit_object(doc, size) == intake._admit_general(doc, size)


@pytest.mark.parametrize("which", range(len(INTAKES)))
@pytest.mark.parametrize("length", [*range(12, 20), 24_000])
@pytest.mark.parametrize("size", [59, 60, 61, 4096, 4097])
def test_the_short_path_at_the_limits(which: int, length: int, size: int) -> None:
    """Around max_input_tokens (6 and 500: 15 and 1,497 bytes) and max_event_bytes."""
    doc = {"id": "r-1", "text": "a" * length}
    intake = INTAKES[which]
    assert intake.admit_object(doc, size) == intake._admit_general(doc, size)


@_fuzz(1500)
@given(record_headers=headers)
def test_the_retry_header_reader_returns_a_state_or_refuses_with_invalid_headers(
    record_headers: list[tuple[str, bytes | None]],
) -> None:
    try:
        state = read_retry_state(record_headers)
    except InvalidEvent as exc:
        assert exc.reason == Reason.INVALID_HEADERS
        return
    assert state.attempts >= 0 and state.not_before_ms >= 0
    assert read_retry_state(state.headers()) == state  # what it writes, it reads back


@pytest.mark.parametrize("record_headers", [None, [], [("traceparent", b"00-ab-cd-01")]])
def test_a_record_with_no_header_of_ours_is_a_fresh_request(
    record_headers: list[tuple[str, bytes | None]] | None,
) -> None:
    assert read_retry_state(record_headers) == RetryState()


# ------------------------------------------------------------------------------ found by it


def test_a_first_failure_time_past_the_year_9999_is_refused_not_a_crash_later() -> None:
    """Year 10000 passed the reader, and dead-lettering the item later raised in rfc3339: the
    outcome was never written and the record never committed."""
    latest = 253_402_300_799_999
    state = read_retry_state([(RETRY_FIRST_FAILURE, str(latest).encode())])
    failure = Failure("TransientError", "timeout", "x", 1, "t", 0, 0, latest, latest)
    assert dict(dead_letter_headers(failure))["embedstream.failure.first"].startswith(b"9999-")
    assert state.first_failure_ms == latest
    try:
        read_retry_state([(RETRY_FIRST_FAILURE, str(latest + 1).encode())])
    except InvalidEvent as exc:
        assert exc.reason == Reason.INVALID_HEADERS
    else:
        raise AssertionError("year 10000 accepted")


def test_a_retry_due_in_the_year_9999_waits_no_longer_than_the_backoff_cap() -> None:
    """It would be held in memory for ever, and its partition's commits with it."""
    value = orjson.dumps({"id": "r", "text": "t"})
    record = FakeRecord(NAMES.retry, 0, 1, b"r", value, ((RETRY_NOT_BEFORE, b"253402300799999"),))
    state = PartitionState(TopicPartition(NAMES.retry, 0), InputLane.LOW)
    item = ADMISSION.admit(record, state, NOW_MS)
    assert isinstance(item, WorkItem)
    assert item.not_before_ms == NOW_MS + SETTINGS.retry_backoff_cap_ms


def test_a_record_without_a_timestamp_gets_a_retry_record_embedstream_can_read_back() -> None:
    """Kafka's timestamp -1 ("none") became the retry record's enqueued_at header "-1", which
    the reader refuses: the retried request was then dead-lettered as invalid_headers."""
    value = orjson.dumps({"id": "r", "text": "t"})
    record = FakeRecord(NAMES.requests_low, 0, 1, b"r", value, (), -1)
    state = PartitionState(TopicPartition(NAMES.requests_low, 0), InputLane.LOW)
    item = ADMISSION.admit(record, state, NOW_MS)
    assert isinstance(item, WorkItem) and item.timestamp_ms == NOW_MS
    _assert_every_outcome_writable(item)
