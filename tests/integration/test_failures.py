"""Failure handling on Apache Kafka with the simulator's fault injection.

One bad item never fails its batch-mates, nothing is lost, nothing is sent twice once it
succeeded, and the stream never stops because of bad input.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import math
import time
import uuid
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from embedsim.model import SimulatorConfig, expected_vector
from embedsim.server import SimulatorServer
from embedstream.kafka.client.admin import topic_names
from embedstream.wire import headers_dict
from jsonschema import Draft202012Validator

from tests.integration.helpers import (
    create_all_topics,
    publish,
    read_topic,
    request,
    running_processor,
    running_service,
    settings_for,
    steady_traffic,
    wait_for_ids,
)

pytestmark = pytest.mark.integration

SCHEMA = json.loads(
    (Path(__file__).parents[2] / "topics/schemas/dead_letter_headers.schema.json").read_text()
)
DLQ_HEADERS = Draft202012Validator(SCHEMA)


def poison_records(n_each: int) -> dict[str, tuple[bytes, str]]:
    """key → (value, expected reason), n_each of every kind of poison."""
    kinds: dict[str, tuple[bytes, str]] = {}
    for i in range(n_each):
        kinds[f"p-json-{i}"] = (b'{"id": "x", "text": ', "invalid_json")
        kinds[f"p-utf8-{i}"] = (b'{"id": "x", "text": "\xff\xfe"}', "invalid_utf8")
        kinds[f"p-noid-{i}"] = (orjson.dumps({"text": "no id"}), "missing_id")
        kinds[f"p-intid-{i}"] = (orjson.dumps({"id": 42, "text": "t"}), "invalid_id")
        kinds[f"p-empty-{i}"] = (orjson.dumps({"id": f"e{i}", "text": "  "}), "empty_text")
        kinds[f"p-type-{i}"] = (orjson.dumps({"id": f"t{i}", "text": ["a"]}), "invalid_text")
        kinds[f"p-dims-{i}"] = (
            orjson.dumps({"id": f"d{i}", "text": "t", "dimensions": "many"}),
            "invalid_dimensions",
        )
        kinds[f"p-big-{i}"] = (orjson.dumps({"id": f"b{i}", "text": "x" * 5000}), "oversized")
        kinds[f"p-long-{i}"] = (
            orjson.dumps({"id": f"l{i}", "text": "word " * 700}),
            "too_long",
        )
    return kinds


async def test_poison_input_is_dead_lettered_once_and_good_records_flow(
    bootstrap: str, unique_prefix: str
) -> None:
    async with SimulatorServer(SimulatorConfig(base_ms=2)) as simulator:
        settings = settings_for(
            bootstrap, unique_prefix, simulator.url, max_event_bytes=4096, max_input_tokens=1000
        )
        names = topic_names(unique_prefix)
        await create_all_topics(settings)
        poison = poison_records(11)  # 99 records, ~1% of 10,000
        good = {f"g{i}": f"good text number {i}" for i in range(10_000 - len(poison))}
        records = [request(i, t) for i, t in good.items()]
        records += [(key.encode(), value) for key, (value, _) in poison.items()]
        records.sort(key=lambda r: zlib.crc32(r[0] or b""))  # poison spread through the stream
        async with running_processor(settings) as processor:
            await publish(bootstrap, names.requests_low, records)
            seen = await wait_for_ids(bootstrap, names.results, set(good), timeout_s=180)
            assert set(seen) == set(good)
            dead = await _wait_for_dead_letters(bootstrap, names.dead_letters, len(poison))
            assert processor.joined  # still running: bad input never stopped it
        assert sorted(r.key.decode() for r in dead) == sorted(poison)  # each exactly once
        for record in dead:
            headers = headers_dict(record.headers)
            DLQ_HEADERS.validate(headers)
            value, reason = poison[record.key.decode()]
            assert record.value == value  # the original bytes, untouched
            assert headers["embedstream.error.reason"] == reason
            assert headers["embedstream.source.topic"] == names.requests_low
        results = await read_topic(bootstrap, names.results)
        assert len(results) == len(good)
        for record in results[:500]:
            doc = orjson.loads(record.value)
            expected = expected_vector(settings.model, good[doc["id"]], doc["dimensions"])
            assert doc["embedding"] == pytest.approx(expected, abs=1e-6)


async def _wait_for_dead_letters(bootstrap: str, topic: str, n: int) -> list[Any]:
    for _ in range(60):
        records = await read_topic(bootstrap, topic, idle_s=0.5)
        if len(records) >= n:
            return records
    return await read_topic(bootstrap, topic, idle_s=0.5)


async def test_one_rejected_item_is_isolated_by_splitting(
    bootstrap: str, unique_prefix: str
) -> None:
    config = SimulatorConfig(base_ms=2, reject_texts_containing="REJECTME", record_calls=True)
    async with SimulatorServer(config) as simulator:
        settings = settings_for(
            bootstrap, unique_prefix, simulator.url, max_batch_size=64, max_wait_ms=500,
            max_concurrency=1,
        )  # fmt: skip
        names = topic_names(unique_prefix)
        await create_all_topics(settings)
        ids = [f"i{i}" for i in range(64)]
        texts = {i: f"text {i}" for i in ids}
        texts["i37"] = "this one says REJECTME"
        # One partition, published before the processor starts: they form one batch of 64.
        await publish(bootstrap, names.requests_low, [request(i, texts[i]) for i in ids])
        good = set(ids) - {"i37"}
        async with running_processor(settings):
            seen = await wait_for_ids(bootstrap, names.results, good, timeout_s=60)
            dead = await _wait_for_dead_letters(bootstrap, names.dead_letters, 1)
        assert set(seen) == good and all(len(v) == 1 for v in seen.values())
        [letter] = dead
        headers = headers_dict(letter.headers)
        assert letter.key == b"i37"
        assert headers["embedstream.error.attempts"] == "1"
        assert headers["embedstream.error.reason"] == "rejected"
        calls = simulator.calls
        sent = Counter(text for call in calls if call.status == 200 for text in call.inputs)
        assert all(count == 1 for count in sent.values())  # no good item sent twice
        batch = max(len(call.inputs) for call in calls)
        extra = len(calls) - math.ceil(len(ids) / batch)
        assert extra <= 2 * math.ceil(math.log2(batch)) + 1


async def test_flaky_items_end_with_one_result_after_three_attempts(
    bootstrap: str, unique_prefix: str
) -> None:
    config = SimulatorConfig(
        base_ms=2, fail_texts_containing="FLAKY", fail_times=2, record_calls=True
    )
    async with SimulatorServer(config) as simulator:
        settings = settings_for(
            bootstrap, unique_prefix, simulator.url, retry_backoff_base_ms=200,
            retry_backoff_cap_ms=1000, max_attempts=5, max_batch_size=1,
        )  # fmt: skip
        names = topic_names(unique_prefix)
        await create_all_topics(settings)
        ids = [f"f{i}" for i in range(40)]
        async with (
            running_processor(settings),
            steady_traffic(bootstrap, names.requests_low, rate_per_s=200) as healthy,
        ):
            await _until_flowing(bootstrap, names.results, healthy)
            await publish(bootstrap, names.requests_high, [request(i, f"FLAKY {i}") for i in ids])
            seen = await wait_for_ids(bootstrap, names.results, set(ids), timeout_s=90)
        seen = {i: docs for i, docs in seen.items() if i in set(ids)}
        assert set(seen) == set(ids)
        assert {i: [d["attempts"] for d in docs] for i, docs in seen.items()} == {
            i: [3] for i in ids
        }
        _assert_no_early_retry(simulator, base_s=0.2, jitter=0.5)


async def test_always_failing_items_make_max_attempts_calls_then_one_dead_letter(
    bootstrap: str, unique_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Each failing item is called max_attempts times. A failure waits for the answers of the
    calls in flight to tell whether the provider serves others; on a loaded machine none may
    be in flight, and the failure then looks like an outage: the call is held and sent again
    without spending an attempt (by design, see core/outage.py), so each such hold may add
    one call per text; without one, none may. Each text goes alone (max_batch_size=1): retries
    batched together would be split to isolate their poison, and each level of that split is a
    call that spends no attempt (test_poison_bisection.py bounds those calls)."""
    caplog.set_level(logging.INFO, logger="embedstream.engine.calls")
    config = SimulatorConfig(
        base_ms=2, fail_texts_containing="BROKEN", fail_times=1000, record_calls=True
    )
    async with SimulatorServer(config) as simulator:
        settings = settings_for(
            bootstrap, unique_prefix, simulator.url, retry_backoff_base_ms=100,
            retry_backoff_cap_ms=400, max_attempts=3, max_batch_size=1,
        )  # fmt: skip
        names = topic_names(unique_prefix)
        await create_all_topics(settings)
        ids = [f"b{i}" for i in range(20)]
        async with (
            running_processor(settings),
            steady_traffic(bootstrap, names.requests_high, rate_per_s=200) as healthy,
        ):
            await _until_flowing(bootstrap, names.results, healthy)
            await publish(bootstrap, names.requests_low, [request(i, f"BROKEN {i}") for i in ids])
            dead = await _wait_for_dead_letters(bootstrap, names.dead_letters, len(ids))
            await asyncio.sleep(1.0)  # a late extra attempt or dead letter would show up here
            dead = await read_topic(bootstrap, names.dead_letters, idle_s=0.5)
        assert sorted(r.key.decode() for r in dead) == sorted(ids)
        assert {headers_dict(r.headers)["embedstream.error.attempts"] for r in dead} == {"3"}
        per_text = Counter(t for call in simulator.calls for t in call.inputs if "BROKEN" in t)
        holds = sum(r.getMessage().startswith(("provider down", "held a call"))
                    for r in caplog.records)  # fmt: skip
        # Exactly three calls a text without a hold; with holds, three plus at most one a hold.
        assert len(per_text) == len(ids) and min(per_text.values()) >= 3
        assert max(per_text.values()) <= 3 + holds
        results = await read_topic(bootstrap, names.results, idle_s=0.2)
        assert not {orjson.loads(r.value)["id"] for r in results} & set(ids)
        if holds == 0:
            _assert_no_early_retry(simulator, base_s=0.1, jitter=0.5)


async def _until_flowing(bootstrap: str, results_topic: str, healthy: list[str]) -> None:
    """Wait until healthy traffic gets results (the provider is seen to serve others)."""
    while True:
        if len(healthy) >= 5:
            break
        await asyncio.sleep(0.05)
    await wait_for_ids(bootstrap, results_topic, set(healthy[:5]), timeout_s=60)


def _assert_no_early_retry(simulator: SimulatorServer, *, base_s: float, jitter: float) -> None:
    """Attempt k+1 of a text comes no sooner than the smallest backoff allowed after k."""
    times: dict[str, list[float]] = {}
    for call in simulator.calls:
        for text in call.inputs:
            times.setdefault(text, []).append(call.received_at)
    for stamps in times.values():
        for attempt, (before, after) in enumerate(itertools.pairwise(stamps), 1):
            least = base_s * 2 ** (attempt - 1) * (1 - jitter)
            assert after - before >= least - 0.01, (attempt, after - before, least)


async def test_hanging_calls_time_out_and_every_request_still_ends(
    bootstrap: str, unique_prefix: str
) -> None:
    config = SimulatorConfig(base_ms=2, hang_rate=0.05, hang_s=3600, seed=3)
    async with SimulatorServer(config) as simulator:
        settings = settings_for(
            bootstrap, unique_prefix, simulator.url, request_timeout_s=0.5,
            retry_backoff_base_ms=100, retry_backoff_cap_ms=500, max_attempts=8,
            max_batch_size=32,
        )  # fmt: skip
        names = topic_names(unique_prefix)
        await create_all_topics(settings)
        ids = [f"h{i}" for i in range(2000)]
        await publish(bootstrap, names.requests_low, [request(i, f"text {i}") for i in ids])
        async with running_processor(settings):
            seen = await wait_for_ids(bootstrap, names.results, set(ids), timeout_s=180)
            missing = set(ids) - set(seen)
            dead = await read_topic(bootstrap, names.dead_letters, idle_s=0.5)
        assert missing == {r.key.decode() for r in dead}  # each ends as a result or a letter
        assert len(missing) < 20
        assert simulator.stats.errors == {}  # hangs, not errors: only our timeouts cut them


async def test_rejected_key_pauses_without_dead_letters_and_never_leaks_the_key(
    bootstrap: str, unique_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    canary = f"sk-canary-{uuid.uuid4().hex}"
    config = SimulatorConfig(base_ms=2, auth_key="the-right-key")
    caplog.set_level(logging.DEBUG)
    async with SimulatorServer(config) as simulator:
        settings = settings_for(
            bootstrap, unique_prefix, simulator.url, api_key=canary, max_batch_size=64,
            retry_backoff_base_ms=100, retry_backoff_cap_ms=300,
            max_buffered_bytes=200 * 1024, max_event_bytes=4096,  # an item bound of 200
        )  # fmt: skip
        names = topic_names(unique_prefix)
        await create_all_topics(settings)
        ids = [f"k{i}" for i in range(1000)]
        await publish(bootstrap, names.requests_low, [request(i, f"text {i}") for i in ids])
        async with running_service(settings) as service:
            processor = service.processor
            for _ in range(100):
                if not processor.provider_ok and processor.paused_count() > 0:
                    break
                await asyncio.sleep(0.05)
            assert not processor.provider_ok
            assert not service.health.readiness().ready
            assert "provider_usable" in service.health.readiness().reasons()
            assert processor.paused_count() > 0
            assert processor.held <= settings.buffered_items_limit
            simulator.set_faults(auth_key=canary)  # the key is accepted again
            seen = await wait_for_ids(bootstrap, names.results, set(ids), timeout_s=120)
            assert service.health.readiness().ready
        assert set(seen) == set(ids)
        dead = await read_topic(bootstrap, names.dead_letters, idle_s=0.3)
        assert dead == []
        assert simulator.stats.errors.get("401", 0) > 0
        assert canary not in caplog.text
        assert "Incorrect API key provided: ***" in caplog.text


async def test_expired_deadline_is_dead_lettered_not_sent(
    bootstrap: str, unique_prefix: str
) -> None:
    async with SimulatorServer(SimulatorConfig(base_ms=2, record_calls=True)) as simulator:
        settings = settings_for(bootstrap, unique_prefix, simulator.url)
        names = topic_names(unique_prefix)
        await create_all_topics(settings)
        records = [
            request("late", "too late", deadline="2020-01-01T00:00:00Z"),
            request("soon", "in time", deadline=int(time.time() * 1000) + 600_000),
        ]
        await publish(bootstrap, names.requests_high, records)
        async with running_processor(settings):
            seen = await wait_for_ids(bootstrap, names.results, {"soon"}, timeout_s=60)
            dead = await _wait_for_dead_letters(bootstrap, names.dead_letters, 1)
        assert set(seen) == {"soon"}
        [letter] = dead
        assert letter.key == b"late"
        assert headers_dict(letter.headers)["embedstream.error.reason"] == "deadline_exceeded"
        assert all("too late" not in call.inputs for call in simulator.calls)
