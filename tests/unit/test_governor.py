from __future__ import annotations

import pytest
from embedstream.core.governor import Governor
from embedstream.core.lanes import Priority
from embedstream.errors import ProviderWideError, TransientError
from embedstream.testing import FakeClock


def make(clock: FakeClock, **kwargs: object) -> Governor:
    return Governor(max_concurrency=2, clock=clock, **kwargs)  # type: ignore[arg-type]


def test_retry_after_closes_the_gate_for_everyone_until_it_passes() -> None:
    clock = FakeClock()
    governor = make(clock)
    governor.on_failure(TransientError("rate_limited", "429", retry_after=2.0))
    assert governor.pick({Priority.HIGH, Priority.LOW}) is None
    clock.advance(1.999)
    assert governor.blocked_for() == pytest.approx(0.001)
    clock.advance(0.001)
    assert governor.pick({Priority.HIGH}) is Priority.HIGH


def test_a_429_without_retry_after_still_pauses() -> None:
    clock = FakeClock()
    governor = make(clock)
    governor.on_failure(TransientError("rate_limited", "429"))
    assert governor.blocked_for() == pytest.approx(1.0)


@pytest.mark.parametrize("reason", ["http_500", "timeout", "connection"])
def test_other_transient_errors_do_not_close_the_gate(reason: str) -> None:
    governor = make(FakeClock())
    governor.on_failure(TransientError(reason, "x", retry_after=5))
    assert governor.blocked_for() == 0


def test_provider_wide_error_with_retry_after_closes_the_gate() -> None:
    governor = make(FakeClock())
    governor.on_failure(ProviderWideError("auth", "401", retry_after=3))
    assert governor.blocked_for() == pytest.approx(3)


def test_exhausted_rate_limit_headers_close_the_gate() -> None:
    governor = make(FakeClock())
    governor.on_success(
        0.01, {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "2s"}
    )
    assert governor.blocked_for() == pytest.approx(2)


def test_an_announced_budget_paces_call_starts_and_caps_the_slots_to_spread_over() -> None:
    clock = FakeClock()
    governor = Governor(max_concurrency=8, clock=clock)
    assert governor.idle_slots(Priority.HIGH) == 8  # nothing announced yet
    governor.started(Priority.HIGH)
    governor.on_success(
        0.04,
        {
            "x-ratelimit-limit-requests": "60",  # one call a second...
            "x-ratelimit-remaining-requests": "3",  # ...and three left now
            "x-ratelimit-reset-requests": "57s",
        },
    )
    governor.finished(Priority.HIGH)
    assert governor.idle_slots(Priority.HIGH) == 1  # 95% of a one-second burst: 1 call
    assert governor.blocked_for() == 0.0
    assert governor.reserve(10) == 0.0
    assert governor.blocked_for() == pytest.approx(1 / 0.95)  # the next start is a second away
    assert governor.pick({Priority.HIGH, Priority.LOW}) is None
    clock.advance(1 / 0.95)
    assert governor.pick({Priority.HIGH}) is Priority.HIGH


def test_an_exhausted_announced_budget_waits_for_the_refill_not_the_reset() -> None:
    governor = make(FakeClock())
    governor.on_success(
        0.04,
        {
            "x-ratelimit-limit-requests": "3000",
            "x-ratelimit-remaining-requests": "0",
            "x-ratelimit-reset-requests": "1m0s",
        },
    )
    assert governor.blocked_for() == pytest.approx(1 / 47.5)  # one call's refill, not 60 s


def test_configured_rate_limits_hold_the_next_cut_too() -> None:
    clock = FakeClock()
    governor = Governor(max_concurrency=2, clock=clock, rpm=60)
    for _ in range(60):
        governor.reserve(1)
    assert governor.blocked_for() == pytest.approx(1.0)  # buffer meanwhile, cut later


def test_slots_and_low_cap() -> None:
    governor = make(FakeClock(), min_low_share=0.0)
    assert governor.pick({Priority.LOW}) is Priority.LOW
    governor.started(Priority.LOW)
    assert governor.pick({Priority.LOW}) is None  # one of two slots stays free for high
    assert governor.pick({Priority.HIGH, Priority.LOW}) is Priority.HIGH
    governor.started(Priority.HIGH)
    assert governor.pick({Priority.HIGH, Priority.LOW}) is None  # full
    governor.finished(Priority.LOW)
    assert governor.pick({Priority.HIGH, Priority.LOW}) is Priority.HIGH


def test_adaptive_limit_halves_on_overload() -> None:
    governor = Governor(max_concurrency=8, clock=FakeClock(), adaptive=True)
    governor.on_failure(TransientError("http_503", "busy"))
    assert governor.limit.limit == 4


def test_rate_limits_delay_calls() -> None:
    clock = FakeClock()
    governor = Governor(max_concurrency=2, clock=clock, rpm=60)  # one call a second, burst 60
    delays = [governor.reserve(10) for _ in range(61)]
    assert delays[:60] == [0.0] * 60
    assert delays[60] == pytest.approx(1.0)


def test_provider_down_needs_repeated_failures_over_a_second() -> None:
    clock = FakeClock()
    governor = make(clock)
    for _ in range(10):
        governor.on_failure(TransientError("connection", "refused"))
    assert not governor.provider_down  # a burst (one blip fails every call in flight)
    clock.advance(0.999)
    assert not governor.provider_down
    clock.advance(0.001)
    assert governor.provider_down  # seen down within a second, not three
    governor.on_success(0.01, {})
    assert governor.provider_down  # one success is not recovery ...
    governor.on_success(0.01, {})
    assert not governor.provider_down  # ... two in a row are


def test_a_lone_failure_and_silence_are_not_an_outage() -> None:
    clock = FakeClock()
    governor = make(clock)
    governor.on_failure(TransientError("http_500", "x"))
    governor.on_failure(TransientError("http_500", "x"))
    clock.advance(10)
    assert not governor.provider_down  # two failures of sparse traffic
    governor.on_failure(TransientError("http_500", "x"))
    assert governor.provider_down


def test_readiness_does_not_flap_with_a_provider_failing_most_calls() -> None:
    """Failing 3 calls of 4 (success, failure x3, repeated, 0.4 s apart): once down, the lone
    successes never bring it back up."""
    clock = FakeClock()
    governor = make(clock)
    seen: list[bool] = []
    for call in range(40):
        if call % 4 == 0:
            governor.on_success(0.01, {})
        else:
            governor.on_failure(TransientError("http_503", "x"))
        clock.advance(0.4)
        seen.append(governor.provider_down)
    first_down = seen.index(True)
    assert first_down <= 8 and all(seen[first_down:])


def test_intermittent_errors_among_successes_never_look_down() -> None:
    clock = FakeClock()
    governor = make(clock)
    for call in range(1000):
        if call % 50 in (0, 1):  # 4% of calls fail, two in a row
            governor.on_failure(TransientError("http_500", "x"))
        else:
            governor.on_success(0.01, {})
        clock.advance(0.05)
        assert not governor.provider_down


def test_item_errors_never_look_like_an_outage() -> None:
    clock = FakeClock()
    governor = make(clock)
    for _ in range(10):
        governor.on_failure(TransientError("malformed_response", "bad"))
        clock.advance(1)
    assert not governor.provider_down
