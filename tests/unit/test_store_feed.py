"""The store writer's loop (kafka/consumption/store_feed.py) on the in-memory cluster and store:
offsets
commit only after the store's transaction; an outage retries the same batch and commits
nothing meanwhile; refused and malformed records are dead-lettered with their reason and the
rest is written; a revoke and a stop wait for the batch in hand."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiokafka import TopicPartition
from embedstream.app.store_writer import build_store_writer
from embedstream.core.backoff import Backoff
from embedstream.engine.bounded import CANCEL_GRACE_S
from embedstream.kafka.client.admin import topic_names
from embedstream.kafka.consumption.member import STOP_TIMEOUT_S
from embedstream.kafka.consumption.store_feed import FETCH_TIMEOUT_MS, StoreFeed
from embedstream.kafka.outputs.result_writer import DirectWriter, ResultWriter
from embedstream.ops.store_metrics import StoreMetrics
from embedstream.settings import load_settings
from embedstream.stores.base import Rejected
from embedstream.testing import FakeClock, eventually, settled
from embedstream.testing.kafka import FakeCluster, FakeConsumer, FakeProducer
from embedstream.testing.stores import MemoryStore
from embedstream.testing.virtual_loop import VirtualLoop
from embedstream.wire import ChunkResult, DocumentComplete, OutputRecord, PlainResult, headers_dict
from embedstream.wire.headers import ERROR_REASON, SOURCE_OFFSET

NAMES = topic_names("t.")
RESULTS = TopicPartition(NAMES.results, 0)


def chunk(doc: str, version: str, seq: int, count: int, model: str = "m", dims: int = 3) -> bytes:
    return ChunkResult(
        doc, version, seq, count, (seq, seq + 1), [float(seq + 1)] * dims, model, dims, 1,
        False, None, 1, 1.0,
    ).encode()  # fmt: skip


def plain(request_id: str, model: str = "m") -> bytes:
    return PlainResult(request_id, model, [1.0, 2.0, 3.0], 3, 1, None, 1, 1.0).encode()


@dataclass
class Feed:
    cluster: FakeCluster
    consumer: FakeConsumer
    store: MemoryStore
    feed: StoreFeed
    metrics: StoreMetrics
    delays: list[float] = field(default_factory=list)
    seen_during_outage: list[tuple[dict[TopicPartition, int], str | None]] = field(
        default_factory=list
    )

    def publish(self, key: str | None, value: bytes | None) -> int:
        return self.cluster.produce(
            NAMES.results, value, None if key is None else key.encode(), partition=0
        ).offset

    def committed(self) -> int:
        return self.cluster.group_offsets.get(RESULTS, 0)

    async def fetch_turns(self, turns: int) -> None:
        """Until the loop has begun `turns` more fetches: each begun one means every fetch
        before it was handled (written and committed, or skipped)."""
        target = self.consumer.fetches + turns
        await eventually(lambda: self.consumer.fetches >= target)

    def dead_letters(self) -> list[dict[str, str]]:
        return [headers_dict(r.headers) for r in self.cluster.records(NAMES.dead_letters)]


@asynccontextmanager
async def running(store: MemoryStore | None = None, **options: Any) -> AsyncIterator[Feed]:
    cluster = FakeCluster({NAMES.results: 1, NAMES.dead_letters: 1})
    consumer = FakeConsumer(cluster)
    store = store or MemoryStore()
    metrics = StoreMetrics()
    holder: list[Feed] = []

    async def sleep(delay: float) -> None:  # no real time: record and let the loop turn
        h = holder[0]
        h.delays.append(delay)
        h.seen_during_outage.append((dict(cluster.group_offsets), h.feed.store_problem))
        await asyncio.sleep(0)

    feed = StoreFeed(
        consumer, store, ResultWriter(DirectWriter(FakeProducer(cluster), FakeClock()), NAMES,
        FakeClock()),
        NAMES.results,
        metrics, backoff=Backoff(base_s=0.5, cap_s=4.0, jitter=0.0), sleep=sleep, **options,
    )  # fmt: skip
    h = Feed(cluster, consumer, store, feed, metrics)
    holder.append(h)
    task = asyncio.create_task(feed.run())
    await eventually(feed.joined.is_set)
    try:
        yield h
    finally:
        feed.stop()
        await asyncio.wait_for(task, 5)


def sample(metrics: StoreMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


async def test_a_document_and_a_request_are_written_then_their_offsets_committed() -> None:
    async with running() as h:
        h.publish("d", chunk("d", "1", 0, 2))
        h.publish("d", chunk("d", "1", 1, 2))
        h.publish("d", DocumentComplete("d", "1", 2, None).encode())
        last = h.publish("r1", plain("r1"))
        await eventually(lambda: h.committed() == last + 1)
        assert h.store.rows_of("d") == [("1", 0), ("1", 1)]
        assert h.store.complete == {"d": ("1", 2)} and set(h.store.requests) == {"r1"}
        assert sample(h.metrics, "embedstream_store_rows_upserted_total", kind="chunk") == 2
        assert sample(h.metrics, "embedstream_store_rows_upserted_total", kind="request") == 1
        assert (
            sample(h.metrics, "embedstream_store_documents_completed_total", outcome="complete")
            == 1
        )


@dataclass
class GatedStore(MemoryStore):
    gate: asyncio.Event = field(default_factory=asyncio.Event)
    entered: asyncio.Event = field(default_factory=asyncio.Event)

    async def apply(self, records: Sequence[OutputRecord]) -> list[Rejected]:
        self.entered.set()
        await self.gate.wait()
        return await super().apply(records)


async def test_nothing_is_committed_while_the_transaction_is_open() -> None:
    store = GatedStore()
    async with running(store) as h:
        last = h.publish("r1", plain("r1"))
        await asyncio.wait_for(store.entered.wait(), 5)
        await settled()  # a commit not waiting for the transaction would have run by now
        assert h.committed() == 0 and h.consumer.commits == []
        store.gate.set()
        await eventually(lambda: h.committed() == last + 1)


async def test_an_outage_retries_the_same_batch_with_backoff_and_commits_nothing_meanwhile() -> (
    None
):
    store = MemoryStore(fail_next=3)
    async with running(store) as h:
        h.publish("d", chunk("d", "1", 0, 1))
        last = h.publish("d", DocumentComplete("d", "1", 1, None).encode())
        await eventually(lambda: h.committed() == last + 1)
        assert store.attempts == 4 and len(store.applied) == 1
        assert [len(batch) for batch in store.applied] == [2]  # the same batch, whole
        assert h.delays == [0.5, 1.0, 2.0]
        assert all(offsets == {} for offsets, _ in h.seen_during_outage)
        assert all(
            problem and "connection refused" in problem for _, problem in h.seen_during_outage
        )
        assert h.feed.store_problem is None
        assert sample(h.metrics, "embedstream_store_transactions_total", outcome="failed") == 3


async def test_refused_and_malformed_records_are_dead_lettered_and_the_rest_is_written() -> None:
    async with running() as h:
        h.publish("r1", plain("r1"))
        h.publish("r2", plain("r2", model="other"))
        bad = h.publish("x", b"{not json")
        h.publish("r3", chunk("r3", "1", 0, 1, dims=5))  # a chunk keyed by its doc_id
        last = h.publish("r4", plain("r4"))
        await eventually(lambda: h.committed() == last + 1)
        assert set(h.store.requests) == {"r1", "r4"}
        reasons = sorted(d[ERROR_REASON] for d in h.dead_letters())
        assert reasons == ["dimension_mismatch", "invalid_json", "model_mismatch"]
        offsets = {d[ERROR_REASON]: int(d[SOURCE_OFFSET]) for d in h.dead_letters()}
        assert offsets["invalid_json"] == bad
        assert sample(h.metrics, "embedstream_store_rejected_total", reason="model_mismatch") == 1


async def test_a_record_the_database_refuses_is_found_by_splitting_and_dead_lettered() -> None:
    async with running(MemoryStore(refuse_doc_ids=frozenset({"bad"}))) as h:
        for doc in ("a", "bad", "c", "d"):
            h.publish(doc, chunk(doc, "1", 0, 1))
        last = h.publish("e", chunk("e", "1", 0, 1))
        await eventually(lambda: h.committed() == last + 1)
        assert sorted(k[0] for k in h.store.chunks) == ["a", "c", "d", "e"]
        assert [d[ERROR_REASON] for d in h.dead_letters()] == ["store_failed"]


async def test_stop_finishes_the_batch_in_hand_and_commits_it() -> None:
    store = GatedStore()
    async with running(store) as h:
        last = h.publish("r1", plain("r1"))
        await asyncio.wait_for(store.entered.wait(), 5)
        h.feed.stop()
        store.gate.set()
        await eventually(lambda: h.committed() == last + 1)
    assert store.closed and h.consumer.stopped


async def test_stop_during_an_outage_gives_the_batch_up_uncommitted() -> None:
    store = MemoryStore(fail_next=10**6)
    async with running(store) as h:
        h.publish("r1", plain("r1"))
        await eventually(lambda: store.attempts >= 2)
    assert h.committed() == 0 and store.requests == {}


async def test_a_revoke_waits_for_the_batch_in_hand_to_commit() -> None:
    store = GatedStore()
    async with running(store) as h:
        last = h.publish("r1", plain("r1"))
        await asyncio.wait_for(store.entered.wait(), 5)
        revoke = asyncio.create_task(h.consumer.revoke({RESULTS}))
        await settled()  # a revoke that did not wait for the batch would have returned
        assert not revoke.done()
        store.gate.set()
        await asyncio.wait_for(revoke, 5)
        assert h.committed() == last + 1
        h.publish("r2", plain("r2"))  # no longer ours: not written
        await h.fetch_turns(2)  # a fetch begun after r2 was there has been handled
        assert set(store.requests) == {"r1"}


async def test_a_revoke_during_an_outage_gives_the_batch_up_at_once() -> None:
    store = MemoryStore(fail_next=10**6)
    async with running(store) as h:
        h.publish("r1", plain("r1"))
        await eventually(lambda: store.attempts >= 2)
        await asyncio.wait_for(h.consumer.revoke({RESULTS}), 5)
        assert h.committed() == 0 and h.feed.assignment == set()


async def test_lag_and_readiness_of_a_store_writer() -> None:
    cluster = FakeCluster({NAMES.results: 1, NAMES.dead_letters: 1})
    settings = load_settings(
        env={}, overrides={"topic_prefix": "t.", "store_dsn": "postgresql://u:pw@h/db"}
    )
    store = MemoryStore(fail_next=10**6)
    writer = build_store_writer(
        settings, store, consumer=FakeConsumer(cluster), producer=FakeProducer(cluster)
    )
    assert writer.readiness().reasons() == ["joined_group"]
    task = asyncio.create_task(writer.run())
    for i in range(3):
        cluster.produce(NAMES.results, plain(f"r{i}"), f"r{i}".encode(), partition=0)
    await eventually(lambda: writer.feed.store_problem is not None)
    writer.sample()
    readiness = writer.readiness()
    assert readiness.reasons() == ["store_writable"]
    assert "connection refused" in readiness.details()["store_writable"]
    lag = writer.metrics.registry.get_sample_value(
        "embedstream_consumer_lag", {"topic": NAMES.results, "partition": "0", "lane": "results"}
    )
    assert lag == 3
    writer.stop()
    await asyncio.wait_for(task, 5)


@pytest.mark.parametrize(
    ("overrides", "setting"),
    [
        ({"store_table": "Bad-Name"}, "store_table"),
        ({"store_schema": "x" * 49}, "store_schema"),
        ({"store_dsn": "just-a-host"}, "store_dsn"),
        ({"store_index": "hnsw", "store_dimensions": 3072}, "store_index"),
        ({"store_dimensions": 0}, "store_dimensions"),
        ({"store_group_id": "g", "group_id": "g"}, "store_group_id"),
        ({"store_batch_max": 0}, "store_batch_max"),
        ({"store_index": "flat"}, "store_index"),
    ],
)
def test_bad_store_settings_fail_at_start_naming_the_setting(
    overrides: dict[str, Any], setting: str
) -> None:
    from embedstream.errors import ConfigError

    with pytest.raises(ConfigError) as caught:
        load_settings(env={}, overrides=overrides)
    assert caught.value.setting == setting


def test_the_dsn_is_required_by_the_sink_read_from_a_file_and_masked(tmp_path: Any) -> None:
    from embedstream.errors import ConfigError
    from embedstream.settings.rules import require_store

    with pytest.raises(ConfigError, match="store_dsn"):
        require_store(load_settings(env={}))
    secret = tmp_path / "dsn"
    secret.write_text("postgresql://writer:s3cret-pw@db:5432/vectors\n")
    settings = load_settings(env={"EMBEDSTREAM_STORE_DSN_FILE": str(secret)})
    assert settings.store_dsn == "postgresql://writer:s3cret-pw@db:5432/vectors"
    assert "s3cret-pw" not in repr(settings) and "s3cret-pw" not in str(settings.describe())
    assert "s3cret-pw" in settings.secret_values()
    assert load_settings(env={"EMBEDSTREAM_STORE_DIMENSIONS": "768"}).store_dimensions == 768


@pytest.mark.parametrize("name", ["embeddings", "_x1", "a" * 48, "A", "1a", "a-b", "a" * 49, ""])
def test_the_settings_and_the_store_agree_on_legal_table_names(name: str) -> None:
    from embedstream.settings.rules import STORE_IDENTIFIER
    from embedstream.stores.pgschema import IDENTIFIER

    assert bool(STORE_IDENTIFIER.fullmatch(name)) == bool(IDENTIFIER.fullmatch(name))


def test_the_store_writer_exposes_its_names_and_the_shared_ones() -> None:
    from embedstream.ops.metrics import METRIC_NAMES, PROCESSOR_METRIC_NAMES
    from embedstream.ops.store_metrics import STORE_METRIC_NAMES

    metrics = StoreMetrics()
    exposed = {
        family.name + "_total" if family.type == "counter" else family.name
        for family in metrics.registry.collect()
    }
    shared = {"embedstream_consumer_lag", "embedstream_ready", "embedstream_dead_letters_total"}
    assert exposed == STORE_METRIC_NAMES | shared
    assert shared <= PROCESSOR_METRIC_NAMES and exposed <= METRIC_NAMES


def test_the_feed_stops_within_a_bound_though_the_consumer_never_closes() -> None:
    """aiokafka's stop waits for a rebalance in progress: the writer's exit did too."""

    async def stopped() -> float:
        cluster = FakeCluster({NAMES.results: 1, NAMES.dead_letters: 1})
        consumer = FakeConsumer(cluster)
        consumer.stop = never  # type: ignore[method-assign]
        writer = DirectWriter(FakeProducer(cluster), FakeClock())
        feed = StoreFeed(consumer, MemoryStore(), ResultWriter(writer, NAMES, FakeClock()),
                         NAMES.results, StoreMetrics())  # fmt: skip
        task = asyncio.create_task(feed.run())
        await eventually(feed.joined.is_set)
        loop = asyncio.get_running_loop()
        began = loop.time()
        feed.stop()
        await asyncio.wait_for(task, 3600)
        return loop.time() - began

    loop = VirtualLoop()
    try:
        took = loop.run_until_complete(stopped())
    finally:
        loop.close()
    assert took <= STOP_TIMEOUT_S + CANCEL_GRACE_S + FETCH_TIMEOUT_MS / 1000


async def never(*args: Any, **kwargs: Any) -> Any:
    await asyncio.Event().wait()
