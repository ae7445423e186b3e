"""Kafka client construction and small helpers. With the rest of `kafka/`, the only place that
imports aiokafka, so the pipeline is testable without a broker. Every client is built here from
one :class:`~embedstream.kafka.client.connection.KafkaConnection`, so TLS and SASL apply to all."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from embedstream.kafka.client.aiokafka_private import (
    AiokafkaTransactionalProducer,
    fetch_cluster,
    request_rejoin,
)
from embedstream.kafka.client.connection import (
    KafkaConnection,
    KafkaTarget,
    as_connection,
    connection_for,
)
from embedstream.kafka.client.preflight import check_connection
from embedstream.kafka.client.protocols import Producer, TransactionalProducer
from embedstream.settings import Settings

__all__ = [
    "AIOKafkaConsumer",
    "AIOKafkaProducer",
    "ConsumerRebalanceListener",
    "KafkaConnection",
    "KafkaTarget",
    "TopicPartition",
    "admin_for",
    "check_broker",
    "connection_for",
    "consumer_for",
    "make_consumer",
    "make_producer",
    "make_reader",
    "make_store_consumer",
    "make_transactional_producer",
    "producer_for",
    "request_rejoin",
]


def consumer_for(target: KafkaTarget, **options: Any) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(**as_connection(target).options(), **options)


def producer_for(target: KafkaTarget, **options: Any) -> AIOKafkaProducer:
    return AIOKafkaProducer(**as_connection(target).options(), **options)


def admin_for(target: KafkaTarget, **options: Any) -> AIOKafkaAdminClient:
    return AIOKafkaAdminClient(**as_connection(target).options(), **options)


def make_reader(target: KafkaTarget, **options: Any) -> AIOKafkaConsumer:
    """A consumer in no group that commits nothing, for tools that assign and seek."""
    defaults: dict[str, Any] = {
        "group_id": None,
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "isolation_level": "read_committed",
    }
    return consumer_for(target, **{**defaults, **options})


def make_consumer(settings: Settings) -> AIOKafkaConsumer:
    """The group member; the processor subscribes it with its rebalance listener."""
    return consumer_for(
        connection_for(settings),
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


def make_backfill_consumer(settings: Settings, group_id: str) -> AIOKafkaConsumer:
    """The backfill's member of its own group (kafka/backfill/feed.py): documents, whole."""
    return consumer_for(
        connection_for(settings),
        group_id=group_id,
        client_id=f"{settings.client_id}-backfill",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        session_timeout_ms=settings.session_timeout_ms,
        heartbeat_interval_ms=settings.heartbeat_interval_ms,
        fetch_max_wait_ms=settings.fetch_max_wait_ms,
        max_poll_records=settings.max_poll_records,
        max_partition_fetch_bytes=max(1_048_576, settings.max_document_bytes + 1024),
        max_poll_interval_ms=max(300_000, int(settings.request_timeout_s * 1000 * 4)),
    )


def make_store_consumer(settings: Settings) -> AIOKafkaConsumer:
    """The store writer's group member (its own group): reads the results topic, committed
    records only, a store transaction's worth per fetch."""
    return consumer_for(
        connection_for(settings),
        group_id=settings.store_group_id,
        client_id=f"{settings.client_id}-sink",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        session_timeout_ms=settings.session_timeout_ms,
        heartbeat_interval_ms=settings.heartbeat_interval_ms,
        fetch_max_wait_ms=settings.fetch_max_wait_ms,
        max_poll_records=settings.store_batch_max,
        max_partition_fetch_bytes=max(1_048_576, settings.max_event_bytes + 1024),
        # A store outage holds a batch for minutes of retries: not a dead consumer.
        max_poll_interval_ms=600_000,
    )


def make_producer(settings: Settings, **overrides: Any) -> AIOKafkaProducer:
    options: dict[str, Any] = {
        "client_id": f"{settings.client_id}-producer",
        "acks": "all",
        "linger_ms": 5,
        # Results are kilobytes each (a float vector as JSON). With aiokafka's 16 KiB default
        # a batch holds three, and every other pending send waits for the partition to drain
        # and retries: thousands of wake-ups per batch. 1 MiB keeps a whole call's results in
        # one produce request.
        "max_batch_size": 1_048_576,
        "max_request_size": max(1_048_576, settings.max_event_bytes * 2),
        # Float vectors as JSON compress about 2x; lz4 and zstd cost little CPU for it.
        "compression_type": None
        if settings.compression_type == "none"
        else settings.compression_type,
    }
    options.update(overrides)
    return producer_for(connection_for(settings), **options)


def make_transactional_producer(settings: Settings, txn_id: str) -> TransactionalProducer:
    """The producer of one input partition's transactions (exactly-once)."""
    return AiokafkaTransactionalProducer(
        make_producer(settings, transactional_id=txn_id, enable_idempotence=True)
    )


async def check_broker(settings: Settings) -> None:
    """Fail fast, naming the setting, when the cluster cannot be reached, trusted or logged in
    to with these settings (see :mod:`embedstream.kafka.client.preflight`)."""
    await check_connection(
        connection_for(settings),
        timeout_s=settings.connect_timeout_s,
        client_id=f"{settings.client_id}-preflight",
    )


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
    cluster = await fetch_cluster(consumer)
    return [TopicPartition(topic, p) for p in sorted(cluster.partitions_for_topic(topic) or ())]
