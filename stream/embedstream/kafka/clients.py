"""Kafka client construction and small helpers. The only module (besides topic admin) that
imports aiokafka, so the rest of the pipeline is testable without a broker."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaConnectionError, KafkaError

from embedstream.config import Settings
from embedstream.errors import ConfigError
from embedstream.kafka.protocols import Producer

__all__ = [
    "AIOKafkaConsumer",
    "AIOKafkaProducer",
    "ConsumerRebalanceListener",
    "TopicPartition",
    "check_broker",
    "make_consumer",
    "make_producer",
]


def make_consumer(settings: Settings) -> AIOKafkaConsumer:
    """The group member; the processor subscribes it with its rebalance listener."""
    return AIOKafkaConsumer(
        bootstrap_servers=settings.bootstrap_servers,
        group_id=settings.group_id,
        client_id=f"{settings.client_id}-consumer",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        session_timeout_ms=settings.session_timeout_ms,
        heartbeat_interval_ms=settings.heartbeat_interval_ms,
        fetch_max_wait_ms=settings.fetch_max_wait_ms,
        max_poll_records=settings.max_poll_records,
        max_partition_fetch_bytes=max(1_048_576, settings.max_event_bytes + 1024),
        # Long batches of API calls must not look like a dead consumer.
        max_poll_interval_ms=max(300_000, int(settings.request_timeout_s * 1000 * 4)),
    )


def make_producer(settings: Settings, **overrides: Any) -> AIOKafkaProducer:
    options: dict[str, Any] = {
        "bootstrap_servers": settings.bootstrap_servers,
        "client_id": f"{settings.client_id}-producer",
        "acks": "all",
        "linger_ms": 5,
        # Results are kilobytes each (a float vector as JSON). With aiokafka's 16 KiB default
        # a batch holds three, and every other pending send waits for the partition to drain
        # and retries: thousands of wake-ups per batch. 1 MiB keeps a whole call's results in
        # one produce request.
        "max_batch_size": 1_048_576,
        "max_request_size": max(1_048_576, settings.max_event_bytes * 2),
        "compression_type": None,
    }
    options.update(overrides)
    return AIOKafkaProducer(**options)


async def check_broker(settings: Settings) -> None:
    """Fail fast, naming the setting, when no broker answers at ``bootstrap_servers``."""
    producer = make_producer(settings, request_timeout_ms=int(settings.connect_timeout_s * 1000))
    try:
        await asyncio.wait_for(producer.start(), settings.connect_timeout_s)
    except (KafkaConnectionError, KafkaError, TimeoutError, OSError) as exc:
        raise ConfigError(
            "bootstrap_servers",
            f"no Kafka broker answered at {settings.bootstrap_servers} "
            f"within {settings.connect_timeout_s:g}s ({type(exc).__name__})",
        ) from exc
    finally:
        await producer.stop()


def broker_probe(producer: Producer) -> Callable[[], Awaitable[object]]:
    """A cheap "does the broker answer?" check for readiness: a metadata request through
    the producer's connection (a fake producer without one always answers)."""
    client = getattr(producer, "client", None)

    async def probe() -> object:
        return None if client is None else await client.fetch_all_metadata()

    return probe


async def partitions_of(consumer: AIOKafkaConsumer, topic: str) -> list[TopicPartition]:
    """Partitions of `topic`, fetched fresh from the broker.

    `partitions_for_topic` only reads the consumer's metadata cache, which knows nothing of a
    topic the consumer has not subscribed to yet, so ask the cluster directly.
    """
    cluster = await consumer._client.fetch_all_metadata()
    return [TopicPartition(topic, p) for p in sorted(cluster.partitions_for_topic(topic) or ())]
