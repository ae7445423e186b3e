"""The online lane on a thread of its own (online_thread): its engine's governor echoes each
item seen, call started or ended and token spent to the processor's governor, one posted
function each, which counts them as if the lane's calls were its own; the lane's engine takes
the slots the processor keeps for it. Pure: the post and the clocks are passed in."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from embedstream.app_online_thread import SAW_EVERY_S, LoopEcho, online_thread_settings
from embedstream.core import configured
from embedstream.core.governor import Governor
from embedstream.core.lanes import Priority
from embedstream.errors import Reason, TransientError
from embedstream.settings import Settings, load_settings

ONLINE, LOW = Priority.ONLINE, Priority.LOW


def processor_settings(**values: object) -> Settings:
    env = {"EMBEDSTREAM_HTTP_PORT": "8181", "EMBEDSTREAM_ONLINE_THREAD": "true"}
    env |= {f"EMBEDSTREAM_{k.upper()}": str(v) for k, v in values.items()}
    return load_settings(env=env)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def echo_to(target: Governor, clock: Clock) -> tuple[LoopEcho, list[Callable[[], None]]]:
    posted: list[Callable[[], None]] = []
    return LoopEcho(target, posted.append, clock), posted


def run(posted: list[Callable[[], None]]) -> int:
    """Run what was posted (as the processor's loop would), and say how many."""
    count = len(posted)
    for function in posted:
        function()
    posted.clear()
    return count


def test_the_lanes_calls_count_in_the_processors_governor_once_run_on_its_loop() -> None:
    clock = Clock()
    target = configured.governor(processor_settings(max_concurrency=8), clock)
    lane = configured.governor(online_thread_settings(processor_settings()), clock)
    echo, posted = echo_to(target, clock)
    lane.echo = echo
    assert target.call_cap(LOW, 2048) == 2048  # no online traffic yet: full-size calls
    lane.saw(ONLINE)
    lane.started(ONLINE)
    lane.reserve(120)
    assert target.in_flight == 0  # nothing touches the processor's governor from the thread
    assert run(posted) == 3
    assert target.in_flight == 1 and target.lane_in_flight(ONLINE) == 1
    assert target.call_cap(LOW, 2048) == 256  # the lane active: the Kafka lanes' calls cut
    assert target.lane_slots(LOW) == 5  # and two slots kept for it (high keeps one always)
    lane.finished(ONLINE, oldest_s=0.5)  # over online_target_ms (100): low cut further
    run(posted)
    assert target.in_flight == 0 and target.call_cap(LOW, 2048) == 128
    clock.now += 1.5  # the lane idle past its recent window: full calls and slots again
    assert target.call_cap(LOW, 2048) == 2048 and target.lane_slots(LOW) == 7


def test_activity_is_echoed_at_most_every_tenth_of_a_second_but_a_call_at_once() -> None:
    clock = Clock()
    target = configured.governor(processor_settings(), clock)
    echo, posted = echo_to(target, clock)
    for _ in range(50):  # the batcher's passes over a waiting item
        echo.saw(ONLINE)
    assert run(posted) == 1
    clock.now += SAW_EVERY_S / 2
    echo.saw(ONLINE)
    assert run(posted) == 0
    echo.started(ONLINE)
    echo.saw(ONLINE)  # a call resets the pace: the next item seen goes at once
    assert run(posted) == 2
    clock.now += SAW_EVERY_S * 1.01
    echo.saw(ONLINE)
    assert run(posted) == 1


def test_a_governor_without_an_echo_tells_nobody() -> None:
    clock = Clock()
    governor = Governor(max_concurrency=4, clock=clock)
    governor.saw(ONLINE)
    governor.started(ONLINE)
    governor.finished(ONLINE, 0.01)
    assert governor.reserve(10) == 0.0 and governor.echo is None


@pytest.mark.parametrize(("max_concurrency", "slots"), [(8, 2), (3, 2), (2, 1), (1, 1)])
def test_the_lanes_engine_has_the_slots_kept_for_it_and_no_buckets_of_its_own(
    max_concurrency: int, slots: int
) -> None:
    settings = processor_settings(
        max_concurrency=max_concurrency, rate_limit_rpm=600, rate_limit_tpm=100000,
        metrics_port=9100,
    )  # fmt: skip
    lane = online_thread_settings(settings)
    assert lane.max_concurrency == slots
    assert (lane.rate_limit_rpm, lane.rate_limit_tpm, lane.metrics_port) == (0.0, 0.0, 0)
    assert (lane.http_port, lane.model, lane.base_url) == (
        settings.http_port, settings.model, settings.base_url,
    )  # fmt: skip


def test_a_429_pause_holds_both_engines_whichever_met_it() -> None:
    clock = Clock()
    target = configured.governor(processor_settings(), clock)
    lane = configured.governor(online_thread_settings(processor_settings()), clock)
    echo, posted = echo_to(target, clock)
    lane.echo = echo
    limited = TransientError(Reason.RATE_LIMITED, "429", retry_after=2.0)
    target.on_failure(limited)  # a Kafka call met it: the lane holds its calls too
    assert lane.blocked_for() == pytest.approx(2.0) and run(posted) == 0
    clock.now += 2.5
    assert lane.blocked_for() == 0.0 and target.blocked_for() == 0.0
    lane.on_failure(limited)  # the lane's call met it: the Kafka lanes hold theirs once run
    assert target.blocked_for() == 0.0
    assert run(posted) == 1 and target.blocked_for() == pytest.approx(2.0)
