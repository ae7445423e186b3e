"""Exactly-once mode of the Kafka shell against the in-memory fakes: transactional producers
that fence each other by transactional id, and commits whose markers may be written late.

Each test is a defect found in chaos runs (duplicates in a read_committed read, a member that
gave its partitions up in a loop, a commit loop that died on a broken producer).
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

import orjson
from embedstream.kafka.outputs.transactions import transactional_id
from embedstream.testing import eventually, settled
from embedstream.testing.kafka import FakeCluster, FakeTransactionalProducer

from tests.unit.harness import LOW, NAMES, GatedBackend, fake_cluster, running

LOW_TXN = transactional_id("embedstream", LOW.topic, LOW.partition)


class Producers:
    """Makes the processor's transactional producers and keeps them; the first one of each
    transactional id gets the fault options."""

    def __init__(
        self,
        cluster: FakeCluster,
        *,
        start_gate: asyncio.Event | None = None,
        stall_commits: int = 0,
    ) -> None:
        self.cluster = cluster
        self.start_gate = start_gate
        self.stall_commits = stall_commits
        self.made: list[FakeTransactionalProducer] = []

    def __call__(self, txn_id: str) -> FakeTransactionalProducer:
        first = not self.of(txn_id)
        producer = FakeTransactionalProducer(
            self.cluster, txn_id, start_gate=self.start_gate,
            stall_commits=self.stall_commits if first else 0,
        )  # fmt: skip
        self.made.append(producer)
        return producer

    def of(self, txn_id: str) -> list[FakeTransactionalProducer]:
        return [p for p in self.made if p.transactional_id == txn_id]


def result_ids(cluster: FakeCluster) -> list[str]:
    return [orjson.loads(r.value or b"")["id"] for r in cluster.records(NAMES.results)]


def publish(cluster: FakeCluster, count: int, prefix: str = "r") -> list[str]:
    ids = [f"{prefix}{i}" for i in range(count)]
    for i in ids:
        value = orjson.dumps({"id": i, "text": f"text {i}"})
        cluster.produce(LOW.topic, value, i.encode(), partition=LOW.partition)
    return ids


async def test_a_new_owner_reads_on_from_the_previous_owners_last_commit_even_if_unfinished() -> (
    None
):
    """The previous owner committed offsets 0-4 with their results, but the transaction's
    markers are not written yet when the partition is assigned, so the offset the consumer
    reads at assignment is stale. Fencing first completes that transaction; the offset is read
    again after it: no result twice."""
    cluster = fake_cluster()
    cluster.hold_markers = True
    ids = publish(cluster, 10)
    previous = FakeTransactionalProducer(cluster, LOW_TXN)
    await previous.start()
    await previous.begin_transaction()
    for i in ids[:5]:
        await previous.send(NAMES.results, orjson.dumps({"id": i}), i.encode())
    await previous.send_offsets_to_transaction({LOW: 5}, "embedstream")
    await previous.commit_transaction()  # acknowledged; its markers come later
    assert cluster.group_offsets == {}
    cluster.hold_markers = False  # the new owner's own commits complete at once

    async with running(GatedBackend(), cluster=cluster, transactional=Producers(cluster)) as h:
        await eventually(lambda: h.committed(LOW) == 10)
    assert sorted(result_ids(cluster)) == sorted(ids)  # each once: 0-4 by the previous owner


async def test_the_listener_returns_at_once_and_nothing_is_read_before_the_fence() -> None:
    """Producers slow to start (init_transactions waits while the previous owner's transaction
    completes): the rebalance listener does not wait for them, since aiokafka sends no
    heartbeats while it runs and a slow one cost members their session; the partitions stay
    paused and unread until fenced in, then each record gets one result and no partition is
    given up."""
    cluster = fake_cluster()
    gate = asyncio.Event()
    producers = Producers(cluster, start_gate=gate)
    backend = GatedBackend()
    backend.gate.set()
    ids = publish(cluster, 20)
    async with running(backend, cluster=cluster, transactional=producers) as h:
        await asyncio.wait_for(h.consumer.revoke({LOW}), 1)
        await asyncio.wait_for(h.consumer.assign({LOW}), 1)  # the producer is still starting
        await eventually(lambda: LOW in h.consumer.paused)  # at the fetch loop's next turn
        await h.fetch_turns(2)
        await h.commit_rounds()
        assert backend.calls == [] and LOW in h.consumer.paused
        gate.set()
        await eventually(lambda: h.committed(LOW) == 20)
        assert h.consumer.rejoins_requested == 0 and not h.consumer.paused
    assert sorted(result_ids(cluster)) == sorted(ids)


async def test_an_output_read_under_an_earlier_assignment_is_not_committed_in_a_later_one() -> None:
    """Revoked with a call in flight (past drain_timeout_s) and assigned here again: the input
    is read again from the commit, so the late output of the first read must be dropped.
    (No cache: with one, the second read waits for the first call's vector instead of making
    a call of its own, test_shared_texts.py.)"""
    cluster = fake_cluster()
    backend = GatedBackend()
    producers = Producers(cluster)
    async with running(
        backend, cluster=cluster, transactional=producers, drain_timeout_s=0.1, max_concurrency=4,
        cache="off",
    ) as h:  # fmt: skip
        cluster.produce(
            LOW.topic, orjson.dumps({"id": "slow", "text": "SLOW"}), b"slow", partition=0
        )
        await eventually(lambda: len(backend.calls) == 1)
        await h.consumer.revoke({LOW})
        await h.consumer.assign({LOW})
        await eventually(lambda: len(backend.calls) == 2)  # read again, sent again
        backend.gate.set()  # both calls answer, the first one's output is stale
        await eventually(lambda: h.committed(LOW) == 1)
        await h.engine_idle()  # the stale output is written (staged) by now, if it ever is
        await h.commit_rounds()
    assert result_ids(cluster) == ["slow"]


async def test_read_again_with_the_first_call_in_flight_it_waits_for_that_calls_vector() -> None:
    """As above, with the cache: the second read makes no call of its own but waits for the
    first one's vector (issue 43); only the current assignment's output is committed."""
    cluster = fake_cluster()
    backend = GatedBackend()
    producers = Producers(cluster)
    async with running(
        backend, cluster=cluster, transactional=producers, drain_timeout_s=0.1, max_concurrency=4
    ) as h:
        cluster.produce(
            LOW.topic, orjson.dumps({"id": "slow", "text": "SLOW"}), b"slow", partition=0
        )
        await eventually(lambda: len(backend.calls) == 1)
        await h.consumer.revoke({LOW})
        await h.consumer.assign({LOW})
        await h.fetch_turns(2)  # read again and cut meanwhile: it waits, no second call
        assert len(backend.calls) == 1
        backend.gate.set()
        await eventually(lambda: h.committed(LOW) == 1)
        await h.engine_idle()
        await h.commit_rounds()
    assert result_ids(cluster) == ["slow"] and len(backend.calls) == 1


async def test_a_fenced_producer_is_dropped_and_the_partition_given_up() -> None:
    """Another member initialised the same transactional id (this one is the zombie): the
    commit is refused, the producer stopped, a rebalance requested, and nothing written; once
    assigned again, a new producer commits what was left."""
    cluster = fake_cluster()
    producers = Producers(cluster)
    async with running(GatedBackend(), cluster=cluster, transactional=producers) as h:
        await eventually(lambda: len(producers.of(LOW_TXN)) == 1 and producers.made[0].started)
        newer = FakeTransactionalProducer(cluster, LOW_TXN)
        await newer.start()  # fences ours
        publish(cluster, 5)
        await eventually(lambda: h.consumer.rejoins_requested == 1)
        ours = producers.of(LOW_TXN)[0]
        assert ours.stopped and ours.committed_transactions == 0
        assert result_ids(cluster) == []
        await h.consumer.revoke({LOW})
        await h.consumer.assign({LOW})
        await eventually(lambda: h.committed(LOW) == 5)
    assert sorted(result_ids(cluster)) == [f"r{i}" for i in range(5)]


async def test_a_producer_left_mid_commit_is_replaced_and_committing_goes_on() -> None:
    """A commit that timed out leaves aiokafka's producer COMMITTING_TRANSACTION; beginning
    another transaction on it trips aiokafka's assertion (`Invalid state transition`), which
    used to end the commit loop. It is dropped instead, the partition given up and, assigned
    again, committed by a fresh producer."""
    cluster = fake_cluster()
    producers = Producers(cluster, stall_commits=1)
    async with running(GatedBackend(), cluster=cluster, transactional=producers) as h:
        publish(cluster, 5)
        await eventually(lambda: h.consumer.rejoins_requested == 1)
        first = producers.of(LOW_TXN)[0]
        assert first.stopped and first.committed_transactions == 0
        await h.consumer.revoke({LOW})
        await h.consumer.assign({LOW})
        await eventually(lambda: h.committed(LOW) == 5)
        publish(cluster, 3, prefix="later")
        await eventually(lambda: h.committed(LOW) == 8)  # the commit loop is still alive
    assert len(result_ids(cluster)) == 8 and len(set(result_ids(cluster))) == 8


async def test_stop_closes_every_transactional_producer() -> None:
    cluster = fake_cluster()
    producers = Producers(cluster)
    async with running(GatedBackend(), cluster=cluster, transactional=producers) as h:
        publish(cluster, 3)
        await eventually(lambda: h.committed(LOW) == 3)
    assert len(producers.made) == 3  # high, low and retry partitions
    assert all(p.stopped for p in producers.made)


async def test_a_partition_assigned_while_stopping_gets_no_producer() -> None:
    """A rebalance during shutdown: the partition is never read again here, so no producer is
    started to fence it in (one started then was cut off by close() and left a connection
    unclosed in a chaos run)."""
    cluster = fake_cluster()
    producers = Producers(cluster)
    backend = GatedBackend()
    backend.gate.set()
    async with running(backend, cluster=cluster, transactional=producers) as h:
        await eventually(lambda: len(producers.made) > 0)
        made = len(producers.made)
        h.service.processor.parts.handoff.stopping(drain_by=math.inf)
        await asyncio.wait_for(h.consumer.revoke({LOW}), 1)
        await asyncio.wait_for(h.consumer.assign({LOW}), 1)
        await settled()  # a fence started at the assignment would have made its producer
        assert len(producers.made) == made


async def test_a_documents_chunks_and_final_record_commit_with_its_offset() -> None:
    """Exactly-once: a document's chunk results and its final record are in the transactions
    of its input partition, with the offset; a consumer reading committed data sees them all
    and in order."""
    cluster = fake_cluster()
    text = "\n\n".join(f"{word} " * 12 for word in ("alpha", "bravo", "charlie"))
    cluster.produce(LOW.topic, orjson.dumps({"doc_id": "d", "text": text}), b"d", partition=0)
    small: dict[str, Any] = {
        "chunk_max_tokens": 40,
        "chunk_overlap_tokens": 0,
        "chunk_min_tokens": 0,
    }
    async with running(
        GatedBackend(), cluster=cluster, transactional=Producers(cluster), **small
    ) as h:
        await eventually(lambda: h.committed(LOW) == 1)
    kinds = [orjson.loads(r.value or b"")["type"] for r in cluster.records(NAMES.results)]
    assert kinds == ["chunk", "chunk", "chunk", "complete"]
