"""How a service starts on the in-memory fakes: the broker probe waits for the producer, and a
consumer that cannot start (a topic gone) is closed and reported in one line."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiokafka.errors import UnknownTopicOrPartitionError
from embedstream.app.processor import build_service
from embedstream.engine.cache_tiers import SIZING_ENTRY_BYTES
from embedstream.errors import ConfigError
from embedstream.settings import load_settings
from embedstream.testing.kafka import FakeCluster, FakeConsumer, FakeProducer

from tests.unit.harness import NAMES, GatedBackend


def _cluster() -> FakeCluster:
    return FakeCluster({name: 1 for name in vars(NAMES).values()})


SETTINGS = load_settings(env={}, overrides={"topic_prefix": "t.", "metrics_port": 0})


@dataclass
class _Metadata:
    """The producer's client as the readiness probe uses it: records each probe."""

    producer: SlowStartProducer
    probes: list[bool] = field(default_factory=list)  # was the producer started then?
    probed: asyncio.Event = field(default_factory=asyncio.Event)

    async def fetch_all_metadata(self) -> None:
        self.probes.append(self.producer.started)
        self.probed.set()


@dataclass
class SlowStartProducer(FakeProducer):
    """A producer whose start (the broker bootstrap) waits for ``gate``."""

    gate: asyncio.Event = field(default_factory=asyncio.Event)
    client: Any = None

    async def start(self) -> None:
        await self.gate.wait()
        await super().start()


async def test_the_first_broker_probe_waits_for_the_producer_to_start() -> None:
    cluster = _cluster()
    producer = SlowStartProducer(cluster)
    metadata = producer.client = _Metadata(producer)
    service = build_service(
        SETTINGS, GatedBackend(), consumer=FakeConsumer(cluster), producer=producer
    )
    task = asyncio.create_task(service.run())
    try:
        for _ in range(100):  # plenty of turns for a health loop that would not wait
            await asyncio.sleep(0)
        assert metadata.probes == []
        assert service.health.readiness().broker_reachable  # no false alarm meanwhile
        producer.gate.set()
        await asyncio.wait_for(metadata.probed.wait(), 5)
        assert metadata.probes[0] is True
    finally:
        producer.gate.set()
        service.stop()
        service.stop()
        await asyncio.wait_for(task, 10)


class VanishedTopicConsumer(FakeConsumer):
    async def start(self) -> None:
        raise UnknownTopicOrPartitionError()


async def test_a_consumer_that_cannot_find_its_topics_is_closed_and_named() -> None:
    cluster = _cluster()
    consumer, producer = VanishedTopicConsumer(cluster), FakeProducer(cluster)
    service = build_service(SETTINGS, GatedBackend(), consumer=consumer, producer=producer)
    with pytest.raises(ConfigError) as caught:
        await asyncio.wait_for(service.run(), 10)
    assert str(caught.value) == (
        "setting topic_prefix (EMBEDSTREAM_TOPIC_PREFIX): a topic of t.requests.high, "
        "t.requests.low, t.retry does not exist at 127.0.0.1:9092; create the topics with "
        "`embedstream topics create` (or check the prefix)"
    )
    assert consumer.stopped and producer.stopped  # no client left unclosed


@pytest.mark.parametrize(
    ("overrides", "warned"),
    [
        ({}, False),  # the defaults: 10,319 entries for 5,000 buffered plus 1,000 chunks
        ({"cache_max_bytes": 5_999 * SIZING_ENTRY_BYTES}, True),
        ({"cache_max_bytes": 6_000 * SIZING_ENTRY_BYTES}, False),
        ({"cache_max_bytes": 100 * SIZING_ENTRY_BYTES, "cache": "off"}, False),
        (
            {
                "cache_max_bytes": 2_000 * SIZING_ENTRY_BYTES,
                "max_document_chunks": 1_500,
                "max_buffered_bytes": 500 * 1024,
                "max_event_bytes": 64 * 1024,
            },  # 500 items
            False,
        ),
    ],
)
def test_a_cache_smaller_than_the_work_in_hand_is_warned_of_at_start(
    overrides: dict[str, Any], warned: bool, caplog: pytest.LogCaptureFixture
) -> None:
    settings = load_settings(env={}, overrides={"topic_prefix": "t.", **overrides})
    cluster = _cluster()
    build_service(
        settings, GatedBackend(), consumer=FakeConsumer(cluster), producer=FakeProducer(cluster)
    )
    warnings = [r.getMessage() for r in caplog.records if "cache_max_bytes" in r.getMessage()]
    if warned:
        assert warnings == [
            f"cache_max_bytes ({5_999 * SIZING_ENTRY_BYTES}) keeps at most 5999 vectors, fewer "
            "than the buffer's item bound (5000) plus max_document_chunks (1000): the in-process "
            "cache may drop vectors of the work in hand before their texts come back; raise it "
            f"to at least {6_000 * SIZING_ENTRY_BYTES}"
        ]
    else:
        assert warnings == []
