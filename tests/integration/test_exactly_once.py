"""Exactly-once mode on Apache Kafka: outputs and offsets in one transaction per partition."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest
from aiokafka import TopicPartition
from embedsim.server import SimulatorServer
from embedstream.core.lanes import InputLane
from embedstream.kafka.client.admin import topic_names
from embedstream.kafka.client.clients import make_transactional_producer
from embedstream.kafka.client.protocols import TransactionalProducer
from embedstream.kafka.outputs.partitions import PartitionState
from embedstream.kafka.outputs.result_writer import Output
from embedstream.kafka.outputs.transactions import Fenced, PartitionTransactions, transactional_id
from embedstream.kafka.outputs.work import Origin
from embedstream.tools.verify.app import verify

from tests.integration.helpers import (
    committed_lag,
    create_all_topics,
    publish,
    request,
    running_processor,
    settings_for,
    wait_for_ids,
)

pytestmark = pytest.mark.integration


def _maybe(
    context: AbstractAsyncContextManager[Any], wanted: bool
) -> AbstractAsyncContextManager[Any]:
    return context if wanted else contextlib.nullcontext()


@pytest.mark.parametrize("split", [False, True], ids=["one-processor", "high-and-bulk"])
async def test_results_and_offsets_commit_together(
    bootstrap: str, unique_prefix: str, split: bool
) -> None:
    """Split (input_lanes), the high topic's transactions are the high processor's own."""
    async with SimulatorServer() as simulator:
        settings = settings_for(
            bootstrap, unique_prefix, simulator.url, delivery="exactly_once", max_batch_size=64,
            input_lanes="bulk" if split else "all",
        )  # fmt: skip
        names = topic_names(unique_prefix)
        await create_all_topics(settings)
        ids = [f"x{i}" for i in range(3000)]
        high_ids = [f"h{i}" for i in range(500)]
        bad = [(b"bad", b"{not json")]
        high = dataclasses.replace(settings, input_lanes="high")
        async with running_processor(settings), _maybe(running_processor(high), split):
            await publish(bootstrap, names.requests_low, [request(i, f"t {i}") for i in ids] + bad)
            await publish(bootstrap, names.requests_high, [request(i, f"u {i}") for i in high_ids])
            seen = await wait_for_ids(bootstrap, names.results, {*ids, *high_ids}, timeout_s=120)
        assert set(seen) == {*ids, *high_ids}
        report = await verify(
            bootstrap, unique_prefix, check_vectors=True, default_model=settings.model
        )
        assert report.ok, report.summary()
        assert report.duplicates == {} and report.dead_letters == 1
        topics = [names.requests_low, names.requests_high]
        lag = await committed_lag(bootstrap, settings.group_id, topics)
        assert lag == {names.requests_low: 0, names.requests_high: 0}


async def test_a_fenced_producer_leaves_no_exception_unretrieved(
    bootstrap: str, unique_prefix: str
) -> None:
    """Fenced while its sends to several partitions are in flight, aiokafka's producer parks
    ProducerFenced on futures nobody awaits (its transaction waiter, each failed batch's drain
    waiter): a zombie logged hundreds of "Future exception was never retrieved" lines. The
    commit gives the partition up (Fenced) and leaves none behind."""
    settings = settings_for(bootstrap, unique_prefix, "http://127.0.0.1:1/v1")
    names = topic_names(unique_prefix)
    await create_all_topics(settings)
    loop = asyncio.get_running_loop()
    gc.collect()  # earlier tests' garbage is not this test's to answer for
    logged: list[str] = []
    previous_handler = loop.get_exception_handler()
    loop.set_exception_handler(
        lambda _, context: logged.append(
            f"{context.get('message')}: {context.get('exception')!r} "
            f"in {context.get('task') or context.get('future')}"
        )
    )
    tp = TopicPartition(names.requests_low, 0)
    owner = PartitionState(tp, InputLane.LOW)

    def producer(txn_id: str) -> TransactionalProducer:
        return make_transactional_producer(settings, txn_id)

    transactions = PartitionTransactions(settings.group_id, producer)
    newer = producer(transactional_id(settings.group_id, tp.topic, tp.partition))
    try:
        transactions.open(tp, owner)
        assert await transactions.assign(tp)
        await newer.start()  # the same transactional id elsewhere: ours is fenced
        for offset in range(40):  # outputs to every partition of the results topic
            await transactions.write(
                Output(Origin(tp.topic, 0, offset), names.results, b"k%d" % offset, b"{}", [],
                       owner)
            )  # fmt: skip
        with pytest.raises(Fenced):
            await transactions.commit(tp, 40)
        await transactions.close()
        gc.collect()
        await asyncio.sleep(0.1)
        gc.collect()
    finally:
        await newer.stop()
        loop.set_exception_handler(previous_handler)
    assert logged == []
