"""The aiokafka private attributes embedstream relies on exist in the installed version.

The exactly-once code reads a transactional producer's state and its parked futures, and the
rebalance code asks the group coordinator to rejoin, through `kafka/client/aiokafka_private.py`. A
rename upstream must fail here, not silently disable fencing checks at runtime."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import aiokafka
import pytest
from embedstream.kafka.client.aiokafka_private import (
    SUPPORTED_AIOKAFKA,
    AiokafkaTransactionalProducer,
    PrivateApiMissing,
    missing_private_attributes,
)
from embedstream.kafka.client.clients import consumer_for, producer_for

ROOT = Path(__file__).resolve().parents[2]


async def test_the_installed_aiokafka_has_every_private_attribute_embedstream_reads() -> None:
    producer = producer_for("127.0.0.1:1", transactional_id="t", enable_idempotence=True)
    consumer = consumer_for("127.0.0.1:1", group_id="g")
    try:
        assert missing_private_attributes(producer, consumer) == [], aiokafka.__version__
    finally:
        await producer.stop()
        await consumer.stop()


async def test_a_fresh_transactional_producer_reads_uninitialized_and_nothing_pending() -> None:
    producer = AiokafkaTransactionalProducer(
        producer_for("127.0.0.1:1", transactional_id="t", enable_idempotence=True)
    )
    try:
        assert producer.transaction_state == "UNINITIALIZED"
        assert producer.pending_futures() == []
    finally:
        await producer.stop()


async def test_a_missing_private_attribute_is_an_error_naming_it_and_the_supported_range() -> None:
    raw = producer_for("127.0.0.1:1", transactional_id="t", enable_idempotence=True)
    try:
        del raw._txn_manager  # as if upstream renamed it
        with pytest.raises(PrivateApiMissing, match=r"_txn_manager.*aiokafka>=0\.12,<0\.15"):
            AiokafkaTransactionalProducer(raw)
    finally:
        raw._txn_manager = None
        await raw.stop()


def test_the_adapter_and_pyproject_pin_the_same_aiokafka_range() -> None:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pinned = next(d for d in deps if re.match(r"aiokafka\b", d))
    assert pinned == f"aiokafka{SUPPORTED_AIOKAFKA}"
