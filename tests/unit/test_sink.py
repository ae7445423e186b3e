from __future__ import annotations

from typing import Any

import pytest
from aiokafka.errors import KafkaConnectionError
from embedstream.kafka.sink import DirectWriter, Output, OutputUnwritable
from embedstream.kafka.work import Origin

OUTPUT = Output(Origin("in", 0, 7), "results", b"id", b"{}", [])


class FlakyProducer:
    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.sent: list[tuple[str, Any]] = []

    async def send_and_wait(self, topic: str, value: Any, **kwargs: Any) -> None:
        if self.failures:
            self.failures -= 1
            raise KafkaConnectionError("broker down")
        self.sent.append((topic, value))


async def test_a_failed_write_is_retried_until_the_broker_takes_it() -> None:
    producer = FlakyProducer(failures=3)
    await DirectWriter(producer, retry_for_s=5, first_delay_s=0.001).write(OUTPUT)
    assert producer.sent == [("results", b"{}")]


async def test_a_write_that_keeps_failing_gives_up_without_pretending_success() -> None:
    producer = FlakyProducer(failures=10**6)
    with pytest.raises(OutputUnwritable):
        await DirectWriter(producer, retry_for_s=0.05, first_delay_s=0.001).write(OUTPUT)
    assert producer.sent == []
