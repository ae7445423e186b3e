"""While its results wait for the broker's ack, a call keeps their records, not their vectors,
and the records count against max_buffered_bytes.

Behind a slow broker thousands of results wait to be acknowledged (a soak held 4,392 of them,
bench/soak_heap.py); a 256-float vector as a list costs 8 KiB, more than its JSON, so the
vectors are let go as soon as the records are encoded; a 1,536-float result is 30 KB of JSON,
thirty times its request, so the byte bound counts it until it is acked.
"""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Sequence
from typing import Any

import orjson
import pytest
from aiokafka import TopicPartition
from embedstream.core.chunker import ChunkingRules
from embedstream.core.generations import GenerationIds
from embedstream.core.lanes import BucketKey, InputLane, Priority
from embedstream.engine.jobs import Embedded, Hit
from embedstream.kafka.client.topics import configured_topics
from embedstream.kafka.outputs.document_runs import DocumentFlow
from embedstream.kafka.outputs.outcomes import KafkaOutcomes
from embedstream.kafka.outputs.partitions import PartitionState
from embedstream.kafka.outputs.result_writer import Output, ResultWriter
from embedstream.kafka.outputs.work import Origin, WorkItem
from embedstream.ops.metrics import Metrics
from embedstream.settings import load_settings
from embedstream.testing.clock import FakeClock
from embedstream.wire import EmbedRequest, EmbedResult

KEY = BucketKey(Priority.LOW, "m", "float", None)


class Vector(list[float]):
    """A float list that can be watched with a weak reference."""


class AckLater:
    """A writer whose broker acknowledges nothing until `ack` is set."""

    def __init__(self) -> None:
        self.waiting: list[Output] = []
        self.writing = asyncio.Event()  # set once a write is waiting for its ack
        self.ack = asyncio.Event()

    async def write(self, output: Output) -> None:
        await self.write_many([output])

    async def write_many(self, outputs: Sequence[Output]) -> None:
        self.waiting.extend(outputs)
        self.writing.set()
        await self.ack.wait()


def wired(writer: AckLater) -> tuple[ResultWriter, KafkaOutcomes, PartitionState]:
    """A call's outcomes written through ``writer``, and the low partition its items come from."""
    clock = FakeClock()
    metrics = Metrics()
    sink = ResultWriter(writer, configured_topics(load_settings(env={})), clock)
    generations = GenerationIds(ChunkingRules(), "m")
    documents = DocumentFlow(sink, metrics, include_text=False, generations=generations)
    outcomes = KafkaOutcomes(sink, metrics, documents, clock)
    return sink, outcomes, PartitionState(TopicPartition("embed.requests.low", 0), InputLane.LOW)


def work_item(state: PartitionState, offset: int) -> WorkItem:
    request = EmbedRequest(f"r{offset}", "some text")
    return WorkItem(
        id=request.id, text=request.text, tokens=2, request=request,
        origin=Origin(state.tp.topic, state.tp.partition, offset), raw=b"{}",
        priority=Priority.LOW, partition=state, timestamp_ms=0, model="m",
        encoding_format="float",
    )  # fmt: skip


async def test_vectors_are_let_go_while_their_results_wait_for_the_ack() -> None:
    writer = AckLater()
    _, outcomes, state = wired(writer)
    items = [work_item(state, offset) for offset in range(3)]
    for item in items:
        state.offsets.track(item.origin.offset)
    vectors = [Vector([0.5 + i, 0.25]) for i in range(3)]
    watched = [weakref.ref(v) for v in vectors]
    await outcomes.succeeded(
        KEY, [Embedded(item, v, 1) for item, v in zip(items, vectors, strict=True)], 2
    )
    del vectors
    await writer.writing.wait()  # the background write has begun
    gc.collect()
    assert [ref() for ref in watched] == [None, None, None]
    # The records carry the vectors, and the items finish once the broker has them.
    assert [orjson.loads(o.value or b"")["embedding"] for o in writer.waiting] == [
        [0.5, 0.25], [1.5, 0.25], [2.5, 0.25]
    ]  # fmt: skip
    assert state.offsets.pending == 3
    writer.ack.set()
    await outcomes.flush()
    assert state.offsets.pending == 0


async def test_results_waiting_for_the_ack_count_against_the_byte_bound() -> None:
    writer = AckLater()
    _, outcomes, state = wired(writer)
    items = [work_item(state, offset) for offset in range(2)]
    for item in items:
        state.offsets.track(item.origin.offset, size=len(item.raw))
    vector = [1 / 3] * 1536  # a 1,536-dimensions result: about 30 KB of JSON
    await outcomes.succeeded(KEY, [Embedded(item, vector, 1) for item in items], 1536)
    await writer.writing.wait()
    results = sum(len(o.value or b"") for o in writer.waiting)
    assert results > 2 * 25_000
    assert state.offsets.pending_bytes == results + 2 * len(b"{}")
    writer.ack.set()
    await outcomes.flush()
    assert state.offsets.pending_bytes == 0


@pytest.mark.parametrize(
    ("priority", "slices"), [(Priority.LOW, [256, 256, 88]), (Priority.HIGH, [600])]
)
async def test_a_big_low_call_is_encoded_in_slices_with_the_loop_turning_between(
    priority: Priority, slices: list[int]
) -> None:
    """A task that became ready while a 600-result low call is encoded runs between its
    slices, not after the last one; a high call's results go in one stretch."""
    writer = AckLater()
    writer.ack.set()
    _, outcomes, state = wired(writer)
    order: list[object] = []
    encode = outcomes._encoded  # a slice's records

    def noting(rows: list[Any], now: int) -> list[Output]:
        order.append(len(rows))
        return encode(rows, now)

    outcomes._encoded = noting  # type: ignore[method-assign]
    items = [work_item(state, offset) for offset in range(600)]
    for item in items:
        state.offsets.track(item.origin.offset)

    async def other_work() -> None:
        for _ in range(3):
            order.append("turn")
            await asyncio.sleep(0)

    key = BucketKey(priority, "m", "float", None)
    await outcomes.succeeded(key, [Embedded(item, [0.5], 1) for item in items], 1)
    other = asyncio.create_task(other_work())
    await outcomes.flush()
    await other
    assert [n for n in order if n != "turn"] == slices
    # The other task ran before the last slice of a low call.
    assert (order.index("turn") < order.index(88)) if 88 in slices else order[0] == 600
    assert len(writer.waiting) == 600 and state.offsets.pending == 0


async def test_cache_hits_waiting_for_the_ack_count_and_keep_no_vectors() -> None:
    """Results from the cache go the same way: bytes held against the bound until acked,
    vectors let go once encoded."""
    writer = AckLater()
    _, outcomes, state = wired(writer)
    items = [work_item(state, offset) for offset in range(2)]
    for item in items:
        state.offsets.track(item.origin.offset, size=len(item.raw))
    vectors = [Vector([1 / 3] * 1536) for _ in items]
    watched = [weakref.ref(v) for v in vectors]
    outcomes.answered([Hit(item, KEY, v, 1536) for item, v in zip(items, vectors, strict=True)])
    del vectors
    await writer.writing.wait()
    gc.collect()
    assert [ref() for ref in watched] == [None, None]
    results = sum(len(o.value or b"") for o in writer.waiting)
    assert results > 2 * 25_000
    assert all(orjson.loads(o.value or b"")["cached"] for o in writer.waiting)
    assert state.offsets.pending_bytes == results + 2 * len(b"{}")
    writer.ack.set()
    await outcomes.flush()
    assert state.offsets.pending_bytes == 0 and state.offsets.pending == 0


@pytest.mark.parametrize("truncated_from", [None, 9000])
def test_a_result_record_is_its_embed_results_json(truncated_from: int | None) -> None:
    """The record written from a result's fields is what `EmbedResult.encode` gives, keyed by
    the request id, with the source header (and the truncation's)."""
    sink, _, state = wired(AckLater())
    item = work_item(state, 7)
    item.attempts, item.source, item.truncated_from = 2, "embed.requests.low", truncated_from
    output = sink.result_output(item, "m", "AAAAPw==", 1, 5, 41.23456, False, "g1")
    expected = EmbedResult("r7", "m", "AAAAPw==", 1, 5, None, 2, 41.23456, False, "g1")
    assert output.value == expected.encode()
    assert (output.key, output.topic, output.origin.offset) == (b"r7", "embed.results", 7)
    headers = [("embedstream.source.topic", b"embed.requests.low")]
    if truncated_from is not None:
        headers.append(("embedstream.truncated_from_tokens", b"9000"))
    assert output.headers == headers


def test_a_registry_format_encodes_the_embed_result() -> None:
    sink, _, state = wired(AckLater())
    seen: list[EmbedResult] = []

    class Values:
        def encode(self, result: EmbedResult) -> bytes:
            seen.append(result)
            return b"framed"

        def encode_chunk(self, chunk: object) -> bytes:
            raise AssertionError("no chunk here")

        def encode_end(self, end: object) -> bytes:
            raise AssertionError("no document here")

    sink.result_values = Values()
    output = sink.result_output(work_item(state, 3), "m", [0.5], 1, 5, 2.0, True, "g1")
    assert output.value == b"framed"
    assert seen == [EmbedResult("r3", "m", [0.5], 1, 5, None, 0, 2.0, True, "g1")]


@pytest.mark.parametrize(
    ("sources", "reported", "expected"),
    [
        # one source (the usual call): everything to it, the whole call's share
        (["a", "a", "a"], 2, {"a": (6, 1.0)}),
        (["a", "a", "a"], 0, {"a": (6, 1.0)}),  # no usage reported: the estimates (2 each)
        # two sources sharing a call: each its tokens and its share of the inputs
        (["a", "b", "a"], 2, {"a": (4, 2 / 3), "b": (2, 1 / 3)}),
    ],
)
async def test_a_calls_usage_is_accounted_by_source_and_generation(
    sources: list[str], reported: int, expected: dict[str, tuple[int, float]]
) -> None:
    writer = AckLater()
    writer.ack.set()
    _, outcomes, state = wired(writer)
    metrics = outcomes._observer
    assert isinstance(metrics, Metrics)
    items = [work_item(state, offset) for offset in range(len(sources))]
    for item, source in zip(items, sources, strict=True):
        item.source = source
        state.offsets.track(item.origin.offset)
    await outcomes.succeeded(KEY, [Embedded(item, [0.5], reported) for item in items], 1)
    await outcomes.flush()
    basis = "reported" if reported else "estimated"
    sample = metrics.registry.get_sample_value
    for source, (tokens, share) in expected.items():
        labels = {"source": source, "basis": basis}
        assert sample("embedstream_source_tokens_total", labels) == tokens
        calls = sample("embedstream_source_calls_total", {"source": source})
        assert calls == pytest.approx(share)
    generation = outcomes.documents.generations.id_of("m", None)
    labels = {"index_generation": generation, "lane": "low"}
    assert sample("embedstream_generation_tokens_total", labels) == 6
