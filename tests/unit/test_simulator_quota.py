"""The simulator's announced budgets: refill, admission and OpenAI-style headers, fake time."""

from __future__ import annotations

import pytest
from embedsim.quota import Quota, Quotas, go_duration
from embedstream.core.concurrency import parse_reset_duration
from hypothesis import given
from hypothesis import strategies as st


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.0, "0ms"), (0.02, "20ms"), (0.0201, "21ms"), (1.0, "1s"), (1.5, "1.5s"), (360, "6m0s")],
)
def test_go_duration(seconds: float, text: str) -> None:
    assert go_duration(seconds) == text


@given(st.floats(min_value=0.0, max_value=86_400.0))
def test_durations_read_back_as_at_least_what_was_meant(seconds: float) -> None:
    parsed = parse_reset_duration(go_duration(seconds))
    assert parsed is not None
    assert seconds - 1e-3 <= parsed <= seconds + 1e-3


def test_a_minute_budget_announces_limit_remaining_and_time_to_whole() -> None:
    quota = Quota("requests", 3000, 60.0, now=0.0)
    assert quota.headers(0.0) == {
        "x-ratelimit-limit-requests": "3000",
        "x-ratelimit-remaining-requests": "3000",
        "x-ratelimit-reset-requests": "0ms",
    }
    quota.take(1, 0.0)
    assert quota.headers(0.0)["x-ratelimit-remaining-requests"] == "2999"
    assert quota.headers(0.0)["x-ratelimit-reset-requests"] == "20ms"  # one request's refill


def test_a_short_burst_holds_only_seconds_of_refill() -> None:
    quota = Quota("requests", 3000, 1.0, now=0.0)  # 50 per second, at most 50 at once
    for _ in range(50):
        assert quota.wait(1, 0.0) == 0.0
        quota.take(1, 0.0)
    assert quota.wait(1, 0.0) == pytest.approx(0.02)
    assert quota.headers(0.0)["x-ratelimit-reset-requests"] == "1s"
    assert quota.wait(1, 0.02) == pytest.approx(0.0)
    assert quota.headers(100.0)["x-ratelimit-remaining-requests"] == "50"  # never above it


def test_both_budgets_must_admit_and_a_refusal_takes_nothing() -> None:
    quotas = Quotas(rpm=60, tpm=600, burst_s=60.0, now=0.0)
    assert quotas.admit(500, 0.0) == 0.0
    assert quotas.admit(200, 0.0) == pytest.approx(10.0)  # 100 tokens short at 10 tokens/s
    headers = quotas.headers(0.0)
    assert headers["x-ratelimit-remaining-requests"] == "59"  # the refused call took nothing
    assert headers["x-ratelimit-remaining-tokens"] == "100"
    assert quotas.admit(100, 0.0) == 0.0


def test_a_call_larger_than_the_budget_waits_for_a_whole_budget_then_goes() -> None:
    quotas = Quotas(rpm=0, tpm=600, burst_s=60.0, now=0.0)
    assert quotas.admit(600, 0.0) == 0.0
    assert quotas.admit(1000, 0.0) == pytest.approx(60.0)
    assert quotas.admit(1000, 60.0) == 0.0


def test_no_budgets_admit_everything_and_announce_nothing() -> None:
    quotas = Quotas(rpm=0, tpm=0, burst_s=60.0, now=0.0)
    assert quotas.admit(10**9, 0.0) == 0.0
    assert quotas.headers(0.0) == {}


@pytest.mark.parametrize(("per_minute", "burst_s"), [(0, 1.0), (60, 0.0), (-1, 1.0)])
def test_quota_rejects_non_positive(per_minute: float, burst_s: float) -> None:
    with pytest.raises(ValueError):
        Quota("requests", per_minute, burst_s, now=0.0)
