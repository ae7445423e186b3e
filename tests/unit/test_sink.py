from __future__ import annotations

import pytest
from embedstream.kafka.fakes import FakeCluster, FakeProducer
from embedstream.kafka.sink import DirectWriter, Output, OutputUnwritable
from embedstream.kafka.work import Origin

OUTPUT = Output(Origin("in", 0, 7), "results", b"id", b"{}", [])


def FlakyProducer(failures: int) -> FakeProducer:
    return FakeProducer(FakeCluster({"results": 1}), fail_next=failures)


async def test_a_failed_write_is_retried_until_the_broker_takes_it() -> None:
    producer = FlakyProducer(failures=3)
    await DirectWriter(producer, retry_for_s=5, first_delay_s=0.001).write(OUTPUT)
    assert [(r.topic, r.value) for r in producer.sent] == [("results", b"{}")]


async def test_a_write_that_keeps_failing_gives_up_without_pretending_success() -> None:
    producer = FlakyProducer(failures=10**6)
    with pytest.raises(OutputUnwritable):
        await DirectWriter(producer, retry_for_s=0.05, first_delay_s=0.001).write(OUTPUT)
    assert producer.sent == []
