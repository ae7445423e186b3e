"""Batch jobs end to end on Apache Kafka and the real simulator's Batch API: a low topic marked
for batch jobs gets every request answered through them (results as the sync path writes
them, each exactly once), the jobs recorded in the jobs topic, the provider paid at its batch
price only; failing lines are retried or dead-lettered; an expired job's rest goes sync."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import openai
import orjson
import pytest
from aiokafka import TopicPartition
from aiokafka.partitioner import DefaultPartitioner
from embedsim import SimulatorConfig, SimulatorServer, expected_vector
from embedstream.core.batch_jobs import JobOffsets
from embedstream.core.lanes import BucketKey, Priority
from embedstream.kafka.batchjobs.job_file import LineBodies
from embedstream.kafka.client.admin import topic_names
from embedstream.kafka.client.clients import consumer_for, producer_for
from embedstream.testing import eventually
from embedstream.wire.batch_jobs import (
    BATCH_ATTEMPT_KEY,
    BATCH_GROUP_KEY,
    BATCH_METADATA_KEY,
    JobRecord,
    JobStream,
    decode_job,
    job_id,
)
from prometheus_client import generate_latest

from tests.integration.helpers import (
    committed_lag,
    create_all_topics,
    publish,
    read_topic,
    request,
    running_service,
    settings_for,
    wait_for_ids,
)

pytestmark = pytest.mark.integration

MODEL = "text-embedding-3-small"


def _batch_settings(bootstrap: str, prefix: str, url: str, **overrides: Any) -> Any:
    values: dict[str, Any] = {
        "batch_topics": prefix + "requests.low",
        "batch_form_s": 0.5,
        "batch_poll_s": 0.2,
        "dimensions": 8,
    }
    values.update(overrides)
    return settings_for(bootstrap, prefix, url, **values)


def _same_partition(prefix: str, count: int, partitions: int = 4) -> list[str]:
    """Request ids (keys) the producer puts in one partition."""
    by_partition: dict[int, list[str]] = {}
    partitioner = DefaultPartitioner()
    for i in range(1000):
        key = f"{prefix}{i}"
        found = by_partition.setdefault(partitioner(key.encode(), list(range(partitions)), []), [])
        found.append(key)
        if len(found) == count:
            return found
    raise AssertionError("no partition got them")


async def _jobs(bootstrap: str, topic: str) -> list[JobRecord]:
    """Each job's last record."""
    last = {}
    for record in await read_topic(bootstrap, topic, idle_s=0.2):
        if record.value is not None:
            job = decode_job(record.value)
            last[job.id] = job
    return list(last.values())


async def _stats(simulator: SimulatorServer) -> dict[str, Any]:
    simulator.batches.advance()
    return dict(simulator.stats.to_json())


async def test_a_marked_topic_is_embedded_through_batch_jobs_at_the_batch_price(
    bootstrap: str, unique_prefix: str
) -> None:
    config = SimulatorConfig(base_ms=0, batch_completion_s=0.5)
    async with SimulatorServer(config) as simulator:
        settings = _batch_settings(bootstrap, unique_prefix, simulator.url,
                                   batch_max_inputs=150)  # fmt: skip
        names = topic_names(unique_prefix)
        await create_all_topics(settings)
        texts = {f"r-{i}": f"text number {i} " + "word " * (i % 7) for i in range(400)}
        twins = _same_partition("dup-", 2)  # one job: the text asked once for both
        for twin in twins:
            texts[twin] = "the same text twice"
        async with running_service(settings):
            await publish(bootstrap, names.requests_low,
                          [request(i, t, metadata={"n": i}) for i, t in texts.items()])  # fmt: skip
            found = await wait_for_ids(bootstrap, names.results, set(texts), timeout_s=90)
            await asyncio.sleep(1.0)  # anything written twice would show by now
            again = await wait_for_ids(bootstrap, names.results, set(texts), timeout_s=30)
            lag = await committed_lag(bootstrap, settings.group_id, [names.requests_low])
            # The jobs' results filled the cache: the same texts again ask the provider nothing.
            before = await _stats(simulator)
            repeats = {f"again-{i}": t for i, t in list(texts.items())[:50]}
            await publish(bootstrap, names.requests_low,
                          [request(i, t) for i, t in repeats.items()])  # fmt: skip
            cached = await wait_for_ids(bootstrap, names.results, set(repeats), timeout_s=60)
            after = await _stats(simulator)

            async def all_finished() -> bool:  # (a job's last record follows its results)
                jobs = await _jobs(bootstrap, names.batch_jobs or "")
                return sum(j.inputs for j in jobs if j.state == "finished") == len(texts) + len(
                    repeats
                )

            await eventually(all_finished, 30, 0.3)
        assert {i: len(docs) for i, docs in again.items() if len(docs) != 1} == {}
        assert all(cached[i][0]["cached"] for i in repeats)
        assert (after["batches"], after["tokens"]) == (before["batches"], 0)
        for request_id, [doc] in found.items():
            assert doc["embedding"] == pytest.approx(expected_vector(MODEL, texts[request_id], 8))
            assert doc["metadata"] == {"n": request_id} and doc["model"] == MODEL
        stats = await _stats(simulator)
        assert stats["tokens"] == 0, "nothing went through sync calls"
        assert stats["batch_inputs"] == len(texts) - 1  # the duplicate asked once
        assert stats["batches"] >= 3  # 150 inputs a job at most
        assert lag == {names.requests_low: 0}
        jobs = await _jobs(bootstrap, names.batch_jobs or "")
        finished = {j.id: j for j in jobs if j.state == "finished"}
        paid = {j.id for j in finished.values() if j.batch_id}  # the repeats' job: none
        assert len(paid) == stats["batches"] and len(finished) > len(paid)
        assert sum(j.inputs for j in finished.values()) == len(texts) + len(repeats)
        assert (
            max(len(r.value or b"") for r in await read_topic(bootstrap, names.batch_jobs or ""))
            < 100_000
        )


async def test_failing_lines_are_retried_and_poison_is_dead_lettered(
    bootstrap: str, unique_prefix: str
) -> None:
    config = SimulatorConfig(base_ms=0, batch_completion_s=0.3, reject_texts_containing="POISON")
    async with SimulatorServer(config) as simulator:
        settings = _batch_settings(bootstrap, unique_prefix, simulator.url)
        names = topic_names(unique_prefix)
        await create_all_topics(settings)
        texts = {f"ok-{i}": f"fine text {i}" for i in range(50)}
        texts["bad"] = "this holds POISON"
        async with running_service(settings):
            await publish(bootstrap, names.requests_low, [request(i, t) for i, t in texts.items()])
            good = {i for i in texts if i != "bad"}
            found = await wait_for_ids(bootstrap, names.results, good, timeout_s=60)
            dead = await wait_for_ids(bootstrap, names.dead_letters, set(), timeout_s=0)
            del dead
            letters = await read_topic(bootstrap, names.dead_letters)
        assert set(found) == good
        [letter] = letters
        assert orjson.loads(letter.value)["id"] == "bad"
        headers = dict(letter.headers)
        assert headers["embedstream.error.reason"] == b"rejected"


async def test_an_expired_job_writes_its_done_lines_and_sends_the_rest_sync(
    bootstrap: str, unique_prefix: str
) -> None:
    config = SimulatorConfig(base_ms=0, batch_completion_s=10.0, batch_window_s=2.0)
    async with SimulatorServer(config) as simulator:
        settings = _batch_settings(bootstrap, unique_prefix, simulator.url)
        names = topic_names(unique_prefix)
        await create_all_topics(settings)
        texts = {f"r-{i}": f"text {i}" for i in range(40)}
        async with running_service(settings):
            await publish(bootstrap, names.requests_low, [request(i, t) for i, t in texts.items()])
            found = await wait_for_ids(bootstrap, names.results, set(texts), timeout_s=60)
        assert {i: len(d) for i, d in found.items() if len(d) != 1} == {}
        stats = await _stats(simulator)
        assert 0 < stats["batch_inputs"] < len(texts)  # some done by the window, in the job
        assert stats["inputs"] == len(texts) - stats["batch_inputs"]  # the rest sync


async def test_exactly_once_every_result_once_and_jobs_committed_with_their_offsets(
    bootstrap: str, unique_prefix: str
) -> None:
    config = SimulatorConfig(base_ms=0, batch_completion_s=0.5)
    async with SimulatorServer(config) as simulator:
        settings = _batch_settings(bootstrap, unique_prefix, simulator.url,
                                   delivery="exactly_once", batch_max_inputs=100)  # fmt: skip
        names = topic_names(unique_prefix)
        await create_all_topics(settings)
        texts = {f"r-{i}": f"exactly once {i}" for i in range(300)}
        async with running_service(settings):
            await publish(bootstrap, names.requests_low, [request(i, t) for i, t in texts.items()])
            await wait_for_ids(bootstrap, names.results, set(texts), timeout_s=90)
            await asyncio.sleep(1.0)
            lag = await committed_lag(bootstrap, settings.group_id, [names.requests_low])
        records = await read_topic(bootstrap, names.results)
        ids = [orjson.loads(r.value)["id"] for r in records]
        assert sorted(ids) == sorted(texts)  # read_committed: each exactly once
        assert lag == {names.requests_low: 0}
        assert (await _stats(simulator))["tokens"] == 0


async def test_the_adaptive_rule_sends_what_the_sync_pace_cannot_drain_to_jobs(
    bootstrap: str, unique_prefix: str
) -> None:
    # A slow sync provider: one call at a time, 10 inputs a call, 100 ms a call: ~100 inputs/s.
    config = SimulatorConfig(base_ms=100, capacity=1, batch_completion_s=0.5)
    async with SimulatorServer(config) as simulator:
        settings = _batch_settings(
            bootstrap, unique_prefix, simulator.url, batch_topics=None, batch_after_s=1.0,
            max_concurrency=1, max_batch_size=10,
        )  # fmt: skip
        names = topic_names(unique_prefix)
        await create_all_topics(settings)
        texts = {f"r-{i}": f"adaptive {i}" for i in range(2_000)}
        async with running_service(settings) as service:
            await publish(bootstrap, names.requests_low, [request(i, t) for i, t in texts.items()])
            found = await wait_for_ids(bootstrap, names.results, set(texts), timeout_s=120)
            exposition = generate_latest(service.metrics.registry).decode()
        assert {i: len(d) for i, d in found.items() if len(d) != 1} == {}
        stats = await _stats(simulator)
        assert stats["inputs"] + stats["batch_inputs"] == len(texts)
        assert stats["inputs"] > 0 and stats["batch_inputs"] > stats["inputs"]
        routed = _sample(
            exposition, 'embedstream_batch_routed_total{route="batch",rule="adaptive"}'
        )
        assert routed == stats["batch_inputs"]


def _sample(exposition: str, series: str) -> float:
    for line in exposition.splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{series} not exported")


async def test_a_job_submitted_just_before_a_crash_is_found_by_its_metadata_not_paid_again(
    bootstrap: str, unique_prefix: str
) -> None:
    """The previous owner recorded a job (closed) and created its batch, then died before
    recording the batch's id: the watcher lists the provider's batches, finds the one its
    metadata names, and follows it: no second batch."""
    config = SimulatorConfig(base_ms=0, batch_completion_s=0.3)
    async with SimulatorServer(config) as simulator:
        settings = _batch_settings(bootstrap, unique_prefix, simulator.url)
        names = topic_names(unique_prefix)
        await create_all_topics(settings)
        texts = {f"early-{i}": f"submitted before the crash {i}" for i in range(5)}
        producer = producer_for(bootstrap, acks="all")
        await producer.start()
        try:
            for i, text in texts.items():
                await producer.send_and_wait(names.requests_low, request(i, text)[1],
                                             key=i.encode(), partition=0)  # fmt: skip
        finally:
            await producer.stop()
        stream = JobStream(names.requests_low, 0, "low")
        offsets = JobOffsets()
        for offset in range(len(texts)):
            offsets.add(offset)
        job = JobRecord(
            id=job_id(settings.group_id, stream, MODEL, 0), group=settings.group_id,
            stream=stream, seq=0, whole=True, model=MODEL, state="closed", offsets_first=0,
            offsets_bits=offsets.bits, inputs=len(texts), size=1000, tokens=30,
            opened_at_ms=int(time.time() * 1000), closed_at_ms=int(time.time() * 1000),
        )  # fmt: skip
        await publish_to(bootstrap, names.batch_jobs or "", job.key, job.encode(), partition=0)
        await commit_group(bootstrap, settings.group_id, names.requests_low, 0, len(texts))
        bodies = LineBodies("base64", {})
        lines = b"".join(bodies.line(str(o), BucketKey(Priority.LOW, MODEL, "float", 8), t)
                         for o, t in enumerate(texts.values()))  # fmt: skip
        async with openai.AsyncOpenAI(base_url=simulator.url, api_key="k") as client:
            uploaded = await client.files.create(file=("job.jsonl", lines), purpose="batch")
            await client.batches.create(
                input_file_id=uploaded.id, endpoint="/v1/embeddings", completion_window="24h",
                metadata={BATCH_METADATA_KEY: job.id, BATCH_GROUP_KEY: settings.group_id,
                          BATCH_ATTEMPT_KEY: "1"},
            )  # fmt: skip
        async with running_service(settings):
            found = await wait_for_ids(bootstrap, names.results, set(texts), timeout_s=60)
        for request_id, [doc] in found.items():
            assert doc["embedding"] == pytest.approx(expected_vector(MODEL, texts[request_id], 8))
        assert len(simulator.batches.book) == 1, "followed, not submitted again"


async def test_a_job_refused_for_its_enqueued_tokens_waits_in_kafka_and_goes_again(
    bootstrap: str, unique_prefix: str
) -> None:
    # Room for one job's tokens at a time at the provider: the second is refused until the
    # first is done, then goes again after batch_retry_s.
    config = SimulatorConfig(base_ms=0, batch_completion_s=1.0, batch_enqueued_tokens=600)
    async with SimulatorServer(config) as simulator:
        settings = _batch_settings(bootstrap, unique_prefix, simulator.url, batch_retry_s=0.5,
                                   batch_max_inputs=100)  # fmt: skip
        names = topic_names(unique_prefix)
        await create_all_topics(settings)
        texts = {f"t-{i}": f"four tokens {i}" for i in range(300)}  # ~3 tokens each
        async with running_service(settings) as service:
            await publish(bootstrap, names.requests_low, [request(i, t) for i, t in texts.items()])
            found = await wait_for_ids(bootstrap, names.results, set(texts), timeout_s=120)
            exposition = generate_latest(service.metrics.registry).decode()
        assert {i: len(d) for i, d in found.items() if len(d) != 1} == {}
        refused = _sample(exposition, 'embedstream_batch_jobs_ended_total{status="refused"}')
        completed = _sample(exposition, 'embedstream_batch_jobs_ended_total{status="completed"}')
        stats = await _stats(simulator)
        assert refused >= 1 and stats["batches"] == refused + completed
        assert stats["tokens"] == 0 and stats["batch_inputs"] == len(texts)


async def publish_to(
    bootstrap: str, topic: str, key: bytes, value: bytes, *, partition: int
) -> None:
    producer = producer_for(bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(topic, value, key=key, partition=partition)
    finally:
        await producer.stop()


async def commit_group(bootstrap: str, group: str, topic: str, partition: int, offset: int) -> None:
    """The group's commit, as the previous owner left it."""
    consumer = consumer_for(bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        await consumer.commit({tp: offset})
    finally:
        await consumer.stop()
