"""Typed helpers shared by integration tests: publish requests, read outcomes, committed lag.

Each takes a bootstrap string (the plaintext test broker) or a KafkaConnection (a secured
listener); the clients come from embedstream.kafka.client.clients like the package's own."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import orjson
from aiokafka import TopicPartition
from aiokafka.errors import GroupCoordinatorNotAvailableError
from embedstream.app.processor import build_service, default_backend
from embedstream.app.service import Service
from embedstream.kafka.client.admin import configured_specs, create_topics
from embedstream.kafka.client.clients import (
    KafkaTarget,
    admin_for,
    connection_for,
    consumer_for,
    partitions_of,
    producer_for,
)
from embedstream.kafka.consumption.processor_loop import Processor
from embedstream.settings import Settings, load_settings


def settings_for(bootstrap: str, prefix: str, base_url: str, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "topic_prefix": prefix,
        "group_id": prefix + "group",
        "base_url": base_url,
        "metrics_port": 0,
        "fetch_max_wait_ms": 50,
        "commit_interval_ms": 200,
        "session_timeout_ms": 10_000,
        "max_wait_ms": 20,
    }
    values.update(overrides)
    return load_settings(env={}, overrides=values)


async def create_all_topics(settings: Settings) -> None:
    """Every topic the settings name (their own names, else the prefixed defaults)."""
    await create_topics(connection_for(settings), configured_specs(settings))


async def publish(
    bootstrap: KafkaTarget, topic: str, records: Sequence[tuple[bytes | None, bytes | None]]
) -> None:
    producer = producer_for(bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        futures = [await producer.send(topic, value, key=key) for key, value in records]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


@contextlib.asynccontextmanager
async def steady_traffic(
    bootstrap: str, topic: str, *, rate_per_s: float = 100.0, prefix: str = "steady"
) -> AsyncIterator[list[str]]:
    """Good requests published at a steady rate while the block runs (their ids, growing).

    Failures the provider's other calls do not share are what spend attempts: tests of
    item-specific failures run them beside healthy traffic, as they would be in production.
    """
    ids: list[str] = []
    stop = asyncio.Event()

    async def feed() -> None:
        producer = producer_for(bootstrap, acks="all", linger_ms=5)
        await producer.start()
        try:
            wave_s = 0.05
            while not stop.is_set():
                for _ in range(max(1, int(rate_per_s * wave_s))):
                    key, value = request(f"{prefix}-{len(ids)}", f"healthy text {len(ids)}")
                    ids.append(key.decode())
                    await producer.send(topic, value, key=key)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), wave_s)
            await producer.flush()
        finally:
            await producer.stop()

    task = asyncio.create_task(feed())
    try:
        yield ids
    finally:
        stop.set()
        await task


def request(request_id: str, text: str, **fields: Any) -> tuple[bytes, bytes]:
    return request_id.encode(), orjson.dumps({"id": request_id, "text": text, **fields})


async def read_topic(bootstrap: KafkaTarget, topic: str, *, idle_s: float = 1.0) -> list[Any]:
    """Every record of a topic (read_committed), stopping after `idle_s` without new data."""
    consumer = consumer_for(bootstrap, enable_auto_commit=False, isolation_level="read_committed")
    await consumer.start()
    try:
        tps = await partitions_of(consumer, topic)
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        end = await consumer.end_offsets(tps)
        records: list[Any] = []
        last = time.monotonic()
        while True:
            batch = await consumer.getmany(timeout_ms=100)
            for recs in batch.values():
                records.extend(recs)
            if batch:
                last = time.monotonic()
            caught_up = all([await consumer.position(tp) >= end[tp] for tp in tps])
            if caught_up and time.monotonic() - last >= idle_s:
                return records
    finally:
        await consumer.stop()


async def wait_for_ids(
    bootstrap: KafkaTarget, topic: str, ids: set[str], timeout_s: float
) -> dict[str, list[dict[str, Any]]]:
    """Read `topic` until every id has at least one record; returns records by id."""
    consumer = consumer_for(bootstrap, enable_auto_commit=False, isolation_level="read_committed")
    await consumer.start()
    seen: dict[str, list[dict[str, Any]]] = {}
    try:
        tps = await partitions_of(consumer, topic)
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        deadline = time.monotonic() + timeout_s
        while not ids.issubset(seen) and time.monotonic() < deadline:
            for recs in (await consumer.getmany(timeout_ms=200)).values():
                for record in recs:
                    doc = orjson.loads(record.value)
                    seen.setdefault(doc["id"], []).append(doc)
        return seen
    finally:
        await consumer.stop()


async def group_offsets(bootstrap: KafkaTarget, group: str) -> dict[TopicPartition, int]:
    """A group's committed offsets ({} for a group that never committed).

    On a fresh broker the first coordinator lookup creates __consumer_offsets and fails with
    GroupCoordinatorNotAvailable until it exists, so retry that for a while.
    """
    admin = admin_for(bootstrap)
    await admin.start()
    try:
        for _ in range(60):
            try:
                offsets = await admin.list_consumer_group_offsets(group)
            except GroupCoordinatorNotAvailableError:
                await asyncio.sleep(0.5)
                continue
            return {tp: meta.offset for tp, meta in offsets.items()}
        raise TimeoutError(f"no coordinator for group {group}")
    finally:
        await admin.close()


async def committed_lag(
    bootstrap: KafkaTarget, group: str, topics: Sequence[str]
) -> dict[str, int]:
    """Per topic: end offsets minus the group's committed offsets, summed over partitions."""
    committed = await group_offsets(bootstrap, group)
    consumer = consumer_for(bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        lag: dict[str, int] = {}
        for topic in topics:
            tps = await partitions_of(consumer, topic)
            ends = await consumer.end_offsets(tps)
            # -1 (or absent) means never committed: count from 0.
            lag[topic] = sum(ends[tp] - max(0, committed.get(tp, 0)) for tp in tps)
        return lag
    finally:
        await consumer.stop()


@contextlib.asynccontextmanager
async def running_service(settings: Settings) -> AsyncIterator[Service]:
    """A processor with its health loop and ops server, joined and assigned."""
    backend = default_backend(settings)
    service = build_service(settings, backend)
    task = asyncio.create_task(service.run())
    try:
        await asyncio.wait_for(_assigned_or_failed(service, task), 60)
        yield service
    finally:
        service.stop()
        try:
            await asyncio.wait_for(task, 60)
        finally:
            # As run_service does: an unclosed client's clean-up ran at a later test's
            # garbage collection, on a closed loop ("Task exception was never retrieved").
            await backend.close()


@contextlib.asynccontextmanager
async def running_processor(settings: Settings) -> AsyncIterator[Processor]:
    async with running_service(settings) as service:
        yield service.processor


async def _assigned_or_failed(service: Service, task: asyncio.Task[None]) -> None:
    waiter = asyncio.ensure_future(service.wait_assigned())
    done, _ = await asyncio.wait({waiter, task}, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        waiter.cancel()
        task.result()  # raises the processor's start-up error
