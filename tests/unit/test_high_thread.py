"""The high lane as a processor of its own on a thread (high_thread): its settings, its calls
counted by the main processor's governor, its state merged into what the health loop reads,
and the ways it refuses to start. Pure where it can be: posts and clocks are passed in."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, cast

import pytest
from embedstream.app import build_service
from embedstream.app_high_thread import (
    HighSnapshot,
    HighThread,
    Oldest,
    WithHighThread,
    high_thread_settings,
)
from embedstream.app_online_thread import LoopEcho
from embedstream.core import configured
from embedstream.core.flow import LOW_SHARE, low_ceiling
from embedstream.core.lanes import Priority
from embedstream.errors import ConfigError
from embedstream.kafka.processor import Processor
from embedstream.settings import Settings, load_settings
from embedstream.testing.kafka import FakeCluster, FakeConsumer, FakeProducer

from tests.unit.harness import NAMES, GatedBackend

HIGH, LOW = Priority.HIGH, Priority.LOW


def settings_with(**values: object) -> Settings:
    env = {"EMBEDSTREAM_HIGH_THREAD": "true", "EMBEDSTREAM_TOPIC_PREFIX": "t."}
    env |= {f"EMBEDSTREAM_{k.upper()}": str(v) for k, v in values.items()}
    return load_settings(env=env)


@pytest.mark.parametrize(
    ("max_concurrency", "slots"), [(8, 2), (3, 2), (2, 1), (1, 1)]
)  # fmt: skip
def test_the_high_processor_has_its_slots_and_nothing_the_main_one_serves(
    max_concurrency: int, slots: int
) -> None:
    main = settings_with(
        max_concurrency=max_concurrency, rate_limit_rpm=600, http_port=8181, metrics_port=9100
    )
    high = high_thread_settings(main)
    assert high.max_concurrency == slots
    assert (high.rate_limit_rpm, high.rate_limit_tpm) == (0.0, 0.0)  # the main one counts
    assert (high.http_port, high.metrics_port) == (0, 0)  # the main one serves both
    assert high.high_thread is False  # (it builds no thread of its own)
    assert high.client_id == f"{main.client_id}-high"
    assert high.group_id == main.group_id  # a member of the same group
    # One memory bound for both: low input stops at 80% of it in the main processor, the high
    # processor holds at most the rest.
    assert high.buffered_items_limit == main.buffered_items_limit - low_ceiling(
        main.buffered_items_limit
    )
    assert high.max_buffered_bytes <= main.max_buffered_bytes * (1 - LOW_SHARE) + 1


class Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def test_high_calls_on_the_thread_count_and_steer_the_main_processors_low_calls() -> None:
    clock = Clock()
    main_settings = settings_with(max_concurrency=8, high_target_ms=100, max_batch_size=2048)
    main = configured.governor(main_settings, clock)
    high = configured.governor(high_thread_settings(main_settings), clock)
    posted: list[Callable[[], None]] = []
    high.echo = LoopEcho(main, posted.append, clock)
    high.saw(HIGH)
    high.started(HIGH)
    assert main.in_flight == 0  # posted, not run: the main governor is its own loop's
    for function in posted:
        function()
    posted.clear()
    assert (main.in_flight, main.lane_in_flight(HIGH)) == (1, 1)
    assert main.call_cap(LOW, 2048) == 2048  # high items have not been seen to wait yet
    clock.now += 0.3
    high.finished(HIGH, 0.4)  # its oldest item took 400 ms against a 100 ms target
    for function in posted:
        function()
    assert main.in_flight == 0
    assert main.call_cap(LOW, 2048) == 1024  # low's calls cut while high is late


class StubProcessor:
    """The few reads the health loop makes of a processor, with fixed answers."""

    joined = True
    provider_ok = True
    limits: Any = None

    def partitions(self) -> dict[Any, Oldest]:
        return {"low-0": Oldest(1_000)}

    def lag_by_partition(self) -> dict[Any, int]:
        return {"low-0": 40}

    def lane_by_partition(self) -> dict[Any, str]:
        return {"low-0": "low"}

    def paused_count(self) -> int:
        return 1

    def buffered_in(self, priority: Priority) -> int:
        return 7 if priority is LOW else 0

    def delayed_count(self) -> int:
        return 2

    def held_items(self) -> int:
        return 9

    def in_flight(self) -> int:
        return 3

    def concurrency_limit(self) -> int:
        return 8

    def depth(self, lane: Priority) -> int:
        return 47 if lane is LOW else 0

    async def refresh_lag(self) -> None:
        return None


def test_the_health_loop_reads_both_processors_partitions_and_queues() -> None:
    thread = HighThread(settings_with(), configured.governor(settings_with(), Clock()), _never)
    observed = WithHighThread(cast(Processor, StubProcessor()), thread)
    assert observed.joined is False  # the high processor has not joined yet
    thread.snapshot = HighSnapshot(
        joined=True, oldest={"high-0": Oldest(2_000)}, lag={"high-0": 5},
        lanes={"high-0": "high"}, paused=0, buffered={HIGH: 4}, depth={HIGH: 9}, delayed=1,
        held=4, in_flight=2,
    )  # fmt: skip
    assert observed.joined is True
    assert {tp: o.oldest_timestamp_ms() for tp, o in observed.partitions().items()} == {
        "low-0": 1_000,
        "high-0": 2_000,
    }
    assert observed.lag_by_partition() == {"low-0": 40, "high-0": 5}
    assert observed.lane_by_partition() == {"low-0": "low", "high-0": "high"}
    assert (observed.buffered_in(HIGH), observed.buffered_in(LOW)) == (4, 7)
    assert (observed.depth(HIGH), observed.depth(LOW)) == (9, 47)
    assert (observed.held_items(), observed.in_flight(), observed.delayed_count()) == (13, 5, 3)
    assert observed.concurrency_limit() == 8  # the main processor's limit is the one limit


def _never(settings: Settings) -> Any:
    raise AssertionError("not built in this test")


async def test_a_high_processor_that_cannot_be_built_fails_the_start_in_one_error() -> None:
    def build(settings: Settings) -> Any:
        raise ConfigError("topic_requests_high", "names a topic twice")

    thread = HighThread(settings_with(), configured.governor(settings_with(), Clock()), build)
    failed: list[bool] = []
    with pytest.raises(ConfigError, match="topic_requests_high"):
        await thread.start(on_failure=lambda: failed.append(True))
    await thread.join()
    await asyncio.sleep(0)  # the failure is also posted to this loop
    assert failed == [True]


def test_the_high_thread_is_refused_beside_a_store() -> None:
    cluster = FakeCluster({name: 1 for name in vars(NAMES).values()})
    settings = settings_with(store_dsn="postgresql://u@h/db")
    with pytest.raises(ConfigError, match="high_thread"):
        build_service(
            settings, GatedBackend(), consumer=FakeConsumer(cluster), producer=FakeProducer(cluster)
        )


def test_the_main_processor_reads_every_input_but_the_high_topics() -> None:
    cluster = FakeCluster({name: 1 for name in vars(NAMES).values()})
    service = build_service(
        settings_with(), GatedBackend(), consumer=FakeConsumer(cluster),
        producer=FakeProducer(cluster),
    )  # fmt: skip
    assert service.high is not None
    topics = service.processor.parts.topics
    assert NAMES.requests_high not in topics
    assert {NAMES.requests_low, NAMES.retry} <= set(topics)
