"""The per-record NamedTuples built with tuple.__new__ on the hot paths (no call of their
generated __new__) are the values their constructors build: all their fields, none missing
when a field is added to the class."""

from __future__ import annotations

import orjson
from aiokafka import TopicPartition
from embedstream.core import configured
from embedstream.core.intake import Admitted, Intake
from embedstream.core.lanes import BucketKey, InputLane, Priority
from embedstream.core.tokens import estimate_tokens
from embedstream.kafka.client.admin import topic_names
from embedstream.kafka.consumption.admission import Admission
from embedstream.kafka.outputs.partitions import PartitionState
from embedstream.kafka.outputs.work import Origin, WorkItem
from embedstream.settings import load_settings
from embedstream.testing.kafka import FakeRecord
from embedstream.wire import EmbedRequest, request_from_doc

from tests.unit.test_outcomes_memory import AckLater, wired, work_item

SETTINGS = load_settings(env={})
NAMES = topic_names("f.")


def _same(built: tuple[object, ...], expected: tuple[object, ...]) -> None:
    assert type(built) is type(expected)
    assert built == expected
    assert len(built) == len(type(expected)._fields)  # type: ignore[attr-defined]


def test_a_request_of_an_id_and_a_text() -> None:
    _same(request_from_doc({"id": "a", "text": "t"}), EmbedRequest("a", "t"))


def test_an_admitted_request_and_its_work_item() -> None:
    intake = Intake(SETTINGS, configured.provider_limits(SETTINGS), estimate_tokens)
    admitted = intake.admit(orjson.dumps({"id": "a", "text": "hello"}))
    assert isinstance(admitted, Admitted)
    tokens = estimate_tokens("hello")
    expected = Admitted(
        EmbedRequest("a", "hello"), SETTINGS.model, SETTINGS.encoding_format, tokens
    )
    _same(admitted, expected)
    admission = Admission(intake, NAMES, max_delay_ms=1000)
    state = PartitionState(TopicPartition(NAMES.requests_low, 2), InputLane.LOW)
    record = FakeRecord(NAMES.requests_low, 2, 7, b"a", orjson.dumps({"id": "a", "text": "x"}))
    item = admission.admit(record, state, 1_000)
    assert isinstance(item, WorkItem)
    _same(item.origin, Origin(NAMES.requests_low, 2, 7))
    _same(
        item.key,
        BucketKey(Priority.LOW, SETTINGS.model, SETTINGS.encoding_format, None, None, None, None),
    )


def test_a_result_output() -> None:
    sink, _, state = wired(AckLater())
    item = work_item(state, 4)
    output = sink.result_output(item, "m", "AAAAPw==", 1, 5, 41.0, False, "g1")
    expected = type(output)(
        item.origin, output.topic, b"r4", output.value, output.headers, item.partition
    )
    _same(output, expected)
    assert output.partition is None  # the key picks it
