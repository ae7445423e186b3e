"""The chaos tests' diagnosis of lost requests (tests/e2e/lost_diagnosis.py), on a real broker:
it must place each lost request on its input partition beside the group's committed offset,
and find a result written in an aborted transaction, which a committed read never shows."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from aiokafka import TopicPartition
from embedstream.kafka.client.admin import create_topics, load_topic_specs, topic_names
from embedstream.kafka.client.clients import consumer_for, producer_for
from embedstream.kafka.client.reader import read_topics

from tests.e2e.lost_diagnosis import diagnose_lost, open_transactions
from tests.integration.helpers import publish, request

pytestmark = pytest.mark.integration


async def test_lost_requests_are_placed_and_hidden_results_found(
    bootstrap: str, unique_prefix: str, tmp_path: Path
) -> None:
    await create_topics(bootstrap, load_topic_specs(unique_prefix))
    names = topic_names(unique_prefix)
    ids = [f"r{i}" for i in range(6)]
    await publish(bootstrap, names.requests_low,
                  [request(rid, f"text {rid}") for rid in ids])  # fmt: skip
    group = unique_prefix + "group"
    consumer = consumer_for(bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        low = [TopicPartition(names.requests_low, p) for p in range(4)]
        consumer.assign(low)
        await consumer.commit(dict.fromkeys(low, 1))
    finally:
        await consumer.stop()
    # r0's result in a transaction that aborted: there, but never visible to a committed read.
    producer = producer_for(bootstrap, transactional_id=f"diag-{uuid.uuid4().hex}",
                            enable_idempotence=True, acks="all")  # fmt: skip
    await producer.start()
    try:
        await producer.begin_transaction()
        await producer.send_and_wait(names.results, b"{}", key=b"r0")
        await producer.abort_transaction()
    finally:
        await producer.stop()
    log = tmp_path / "p0.log"
    log.write_text("INFO traffic\nERROR giving up x (transaction failed)\nINFO more traffic\n")

    text = await diagnose_lost(bootstrap, unique_prefix, group, ["r0", "r1"], [log])

    assert text.startswith("lost 2; 1 of them have a result in an uncommitted read"), text
    placed = [line for line in text.splitlines() if line.startswith(f"  {names.requests_low}-")]
    assert sum(int(line.split(": ")[1].split()[0]) for line in placed) == 2, text
    assert all(line.endswith("committed offset 1") for line in placed), text
    assert "ERROR giving up x (transaction failed)" in text and "traffic" not in text, text
    committed_read = [r async for r in read_topics(bootstrap, [names.results], timeout_s=30)]
    assert committed_read == []


async def test_an_open_transaction_is_found_until_it_ends(
    bootstrap: str, unique_prefix: str
) -> None:
    """A transaction left open on the results topic hides what follows it from a committed
    read: the drain helper waits it out rather than call the hidden results lost."""
    await create_topics(bootstrap, load_topic_specs(unique_prefix))
    names = topic_names(unique_prefix)
    producer = producer_for(bootstrap, transactional_id=f"open-{uuid.uuid4().hex}",
                            enable_idempotence=True, acks="all")  # fmt: skip
    await producer.start()
    try:
        assert await open_transactions(bootstrap, names.results) == {}
        await producer.begin_transaction()
        sent = await producer.send_and_wait(names.results, b"{}", key=b"r0")
        await publish(bootstrap, names.results, [(b"r0", b"{}")])  # behind it, hidden
        opened = await open_transactions(bootstrap, names.results)
        assert opened == {f"{names.results}-{sent.partition}": 2}
        await producer.abort_transaction()
        assert await open_transactions(bootstrap, names.results) == {}
    finally:
        await producer.stop()
