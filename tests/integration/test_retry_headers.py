"""Malformed embedstream headers on Apache Kafka: dead-lettered as `invalid_headers`.

A retry record whose `embedstream.retry.attempts` is not a number used to raise out of the
fetch loop; the processor died and, restarted, died again on the same uncommitted record.
"""

from __future__ import annotations

import pytest
from aiokafka import AIOKafkaProducer
from embedsim.model import SimulatorConfig
from embedsim.server import SimulatorServer
from embedstream.kafka.client.admin import topic_names
from embedstream.wire import headers_dict

from tests.integration.helpers import (
    committed_lag,
    create_all_topics,
    read_topic,
    request,
    running_processor,
    settings_for,
    wait_for_ids,
)

pytestmark = pytest.mark.integration

Headers = list[tuple[str, bytes]]


async def _publish_to_partition(
    bootstrap: str, topic: str, records: list[tuple[bytes, bytes, Headers]]
) -> None:
    """In order, all to partition 0: the records behind a bad one share its partition."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        for key, value, headers in records:
            await producer.send_and_wait(topic, value, key=key, headers=headers, partition=0)
    finally:
        await producer.stop()


def _good_retry_headers() -> Headers:
    """What embedstream writes on a retry record (spelt out: the test stands on its own)."""
    return [
        ("embedstream.retry.attempts", b"1"),
        ("embedstream.retry.not_before", b"0"),
        ("embedstream.retry.first_error", b"timeout: no answer"),
        ("embedstream.retry.first_failure", b"1700000000000"),
        ("embedstream.priority", b"low"),
    ]


async def test_a_retry_record_with_a_non_numeric_attempt_count_is_dead_lettered(
    bootstrap: str, unique_prefix: str
) -> None:
    """The bad record is dead-lettered as invalid_headers (original bytes kept), every record
    behind it on its partition gets a result, and the processor keeps running; a second run
    (a restart) reads on past it: the record is not dead-lettered again, and new malformed
    ones (a non-numeric not-before time, an unknown priority) are parked the same way."""
    async with SimulatorServer(SimulatorConfig(base_ms=2)) as simulator:
        settings = settings_for(bootstrap, unique_prefix, simulator.url)
        names = topic_names(unique_prefix)
        await create_all_topics(settings)
        bad_key, bad_value = request("bad-attempts", "text of a bad retry record")
        first: list[tuple[bytes, bytes, Headers]] = [
            (bad_key, bad_value, [("embedstream.retry.attempts", b"two")])
        ]
        behind = [f"r1-{i}" for i in range(20)]
        first += [(*request(i, f"text {i}"), _good_retry_headers()) for i in behind]
        await _publish_to_partition(bootstrap, names.retry, first)
        async with running_processor(settings) as processor:
            seen = await wait_for_ids(bootstrap, names.results, set(behind), timeout_s=60)
            assert processor.joined
        assert set(seen) >= set(behind)
        [letter] = await read_topic(bootstrap, names.dead_letters, idle_s=0.5)
        headers = headers_dict(letter.headers)
        assert headers["embedstream.error.reason"] == "invalid_headers"
        assert "embedstream.retry.attempts" in headers["embedstream.error.message"]
        assert headers["embedstream.source.topic"] == names.retry
        assert (letter.key, letter.value) == (bad_key, bad_value)

        second: list[tuple[bytes, bytes, Headers]] = [
            (*request("bad-time", "t"), [("embedstream.retry.not_before", b"soon")]),
            (*request("bad-lane", "t"), [("embedstream.priority", b"urgent")]),
        ]
        again = [f"r2-{i}" for i in range(20)]
        second += [(*request(i, f"text {i}"), _good_retry_headers()) for i in again]
        await _publish_to_partition(bootstrap, names.retry, second)
        async with running_processor(settings) as processor:
            seen = await wait_for_ids(bootstrap, names.results, set(again), timeout_s=60)
            assert processor.joined
        assert set(seen) >= set(again)
        letters = await read_topic(bootstrap, names.dead_letters, idle_s=0.5)
        assert sorted(r.key for r in letters) == [b"bad-attempts", b"bad-lane", b"bad-time"]
        reasons = {headers_dict(r.headers)["embedstream.error.reason"] for r in letters}
        assert reasons == {"invalid_headers"}
        lag = await committed_lag(bootstrap, settings.group_id, [names.retry])
        assert lag == {names.retry: 0}
