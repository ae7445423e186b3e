"""The online lane's per-request timeline (bench only): the callers' ``traceparent`` carries
each request's number; the processor's tracer notes when the lane took it, when the provider
call carrying it started and ended and when the lane answered; the stage rows follow."""

from __future__ import annotations

import itertools

import pytest
from embedstream.core.tracing import NULL_SPAN
from embedstream.tools.bench.online_figures import ONLINE_MOMENTS, online_stage_rows
from embedstream.tools.bench.timeline import (
    Timeline,
    TimelineTracer,
    request_id_of,
    traceparent_for,
)


@pytest.mark.parametrize("number", [0, 1, 41, 2**40])
def test_a_requests_number_goes_through_its_traceparent(number: int) -> None:
    header = traceparent_for(number)
    assert header.startswith("00-") and len(header) == 55  # the W3C header's length
    assert request_id_of(header) == str(number)


@pytest.mark.parametrize(
    "header", [None, "", "garbage", "00-abc-01-01", "00-" + "z" * 32 + "-1-01"]
)
def test_a_header_not_made_by_the_callers_names_no_request(header: str | None) -> None:
    assert request_id_of(header) is None


def test_the_tracer_notes_the_lanes_moments_of_online_requests_only() -> None:
    timeline = Timeline()
    tracer = TimelineTracer(timeline)
    assert tracer.request(None, "requests.low", 0, 7) is NULL_SPAN
    assert tracer.online(None, "key") is NULL_SPAN  # a caller that sent no number
    first = tracer.online(traceparent_for(3), "key")
    second = tracer.online(traceparent_for(4), "key")
    call = tracer.call("m", [NULL_SPAN, first, NULL_SPAN], size=3, reason="full", attempt=1)
    call.end(input_tokens=3)
    again = tracer.call("m", [first, second], size=2, reason="held", attempt=2)
    again.end(error="timeout")
    first.end("200")
    second.end("200")
    three, four = timeline.moments["3"], timeline.moments["4"]
    assert set(timeline.moments) == {"3", "4"}  # the Kafka record and the unnumbered: none
    assert list(three) == ["received", "call_start", "call_done", "returned"]
    # A request's first call counts (a retry must not move its call later): 4 was only in
    # the second, so its call started after 3's had ended.
    assert three["call_start"] <= three["call_done"] <= four["call_start"] <= four["call_done"]
    assert tracer.call("m", [NULL_SPAN], size=1, reason="full", attempt=1) is not None


def test_online_stage_rows_follow_the_online_moments_in_order() -> None:
    base = {"scheduled": 0.0, "received": 0.010, "call_start": 0.030, "call_done": 0.080,
            "returned": 0.085, "answered": 0.100}  # fmt: skip
    moments = {"1": base, "2": {k: v * 2 for k, v in base.items()}, "3": {"scheduled": 0.0}}
    rows = online_stage_rows(moments, "lane", 10.0)
    names = [r.scenario.removeprefix("lane: ") for r in rows]
    stages = [f"{a} -> {b}" for a, b in itertools.pairwise(ONLINE_MOMENTS)]
    assert names == [*stages, "scheduled -> answered"]
    call = rows[2]
    assert call.items == 2 and call.latency is not None
    assert call.latency.p50_ms == pytest.approx(75.0)  # 50 and 100 ms
    whole = rows[-1]
    assert whole.items == 2 and whole.latency is not None and whole.latency.p99_ms <= 200.0
