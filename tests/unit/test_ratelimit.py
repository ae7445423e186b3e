"""Token buckets with fake times: exact waits, FIFO debt, and the admission bound."""

from __future__ import annotations

import math
from collections.abc import Mapping
from itertools import pairwise

import pytest
from embedsim.quota import Quota
from embedstream.core.ratelimit import AnnouncedBudget, RateLimits, TokenBucket
from hypothesis import given, settings
from hypothesis import strategies as st


@pytest.mark.parametrize(
    ("reservations", "delays"),
    [
        # rate 2/s, burst 4: the first 4 go at once, then the queue forms
        ([(1, 0.0)] * 6, [0.0, 0.0, 0.0, 0.0, 0.5, 1.0]),
        # refill between calls
        ([(4, 0.0), (2, 1.0)], [0.0, 0.0]),
        ([(4, 0.0), (3, 1.0)], [0.0, 0.5]),
        # refill never exceeds the burst
        ([(1, 0.0), (4, 100.0), (1, 100.0)], [0.0, 0.0, 0.5]),
        # an amount over the burst is allowed and just waits longer
        ([(10, 0.0)], [3.0]),
        ([(10, 0.0), (1, 0.0)], [3.0, 3.5]),  # and the next caller queues behind it
        # debt is paid off by time: after 3 s of refill the queue is empty again
        ([(10, 0.0), (1, 3.0)], [3.0, 0.5]),
        # zero is a valid amount: it only waits for the queue ahead of it
        ([(6, 0.0), (0, 0.0)], [1.0, 1.0]),
        # a clock read out of order adds no refill
        ([(4, 5.0), (1, 4.0)], [0.0, 0.5]),
    ],
)
def test_bucket_delays(reservations: list[tuple[float, float]], delays: list[float]) -> None:
    bucket = TokenBucket(rate_per_s=2.0, burst=4.0)
    assert [bucket.reserve(amount, now) for amount, now in reservations] == delays


@pytest.mark.parametrize(
    ("reservations", "now", "available"),
    [
        ([], 0.0, 4.0),  # starts full
        ([(3, 0.0)], 0.0, 1.0),
        ([(3, 0.0)], 1.0, 3.0),
        ([(3, 0.0)], 10.0, 4.0),
        ([(6, 0.0)], 0.0, -2.0),  # in debt: later callers wait
        ([(6, 0.0)], 0.5, -1.0),
    ],
)
def test_bucket_available(
    reservations: list[tuple[float, float]], now: float, available: float
) -> None:
    bucket = TokenBucket(rate_per_s=2.0, burst=4.0)
    for amount, at in reservations:
        bucket.reserve(amount, at)
    assert bucket.available(now) == available
    assert bucket.available(now) == available  # a pure query: asking twice changes nothing


@pytest.mark.parametrize(("rate", "burst"), [(0.0, 1.0), (1.0, 0.0), (-1.0, 1.0)])
def test_bucket_rejects_non_positive(rate: float, burst: float) -> None:
    with pytest.raises(ValueError):
        TokenBucket(rate, burst)


def test_bucket_rejects_negative_amount() -> None:
    with pytest.raises(ValueError):
        TokenBucket(1.0, 1.0).reserve(-1, 0.0)


@pytest.mark.parametrize(
    ("rpm", "tpm", "reservations", "delays"),
    [
        (None, None, [(10**9, 0.0)] * 3, [0.0, 0.0, 0.0]),
        # 120 rpm = 2/s, burst 120: requests only
        (120, None, [(10**6, 0.0)] * 121, [0.0] * 120 + [0.5]),
        # 600 tpm = 10 tokens/s, burst 600: tokens only
        (None, 600, [(600, 0.0), (10, 0.0), (20, 1.0)], [0.0, 1.0, 2.0]),
        # both: the longer wait wins, each bucket charged
        (60, 6000, [(6000, 0.0), (100, 0.0)], [0.0, 1.0]),
        (1, 6000, [(1, 0.0), (1, 0.0)], [0.0, 60.0]),
    ],
)
def test_rate_limits(
    rpm: float | None,
    tpm: float | None,
    reservations: list[tuple[int, float]],
    delays: list[float],
) -> None:
    limits = RateLimits(rpm, tpm)
    assert [limits.reserve(tokens, now) for tokens, now in reservations] == delays


def test_unlimited_never_waits() -> None:
    limits = RateLimits.unlimited()
    assert limits.requests is None and limits.tokens is None
    assert limits.reserve(10**12, 0.0) == 0.0


@given(
    rate=st.floats(min_value=0.1, max_value=1000.0),
    burst=st.floats(min_value=0.1, max_value=1000.0),
    steps=st.lists(
        st.tuples(
            st.floats(min_value=0.0, max_value=2000.0),  # amount
            st.floats(min_value=0.0, max_value=5.0),  # time since the previous reservation
        ),
        min_size=1,
        max_size=50,
    ),
    horizon=st.floats(min_value=0.0, max_value=300.0),
)
def test_admitted_never_exceeds_burst_plus_refill(
    rate: float, burst: float, steps: list[tuple[float, float]], horizon: float
) -> None:
    bucket = TokenBucket(rate, burst)
    now = 0.0
    admitted_at: list[tuple[float, float]] = []
    for amount, gap in steps:
        now += gap
        admitted_at.append((now + bucket.reserve(amount, now), amount))
    times = [t for t, _ in admitted_at]
    # FIFO: nobody overtakes an earlier reservation (up to float rounding)
    assert all(later >= earlier - 1e-9 for earlier, later in pairwise(times))
    for t in [horizon, *times]:
        total = sum(amount for at, amount in admitted_at if at <= t)
        assert total <= (burst + rate * t) * (1 + 1e-9) + 1e-9


def test_bucket_wait_reserves_nothing() -> None:
    bucket = TokenBucket(rate_per_s=2.0, burst=4.0)
    bucket.reserve(5, 0.0)  # one in debt
    assert bucket.wait(1, 0.0) == pytest.approx(1.0)
    assert bucket.wait(0, 0.0) == pytest.approx(0.5)  # the debt must be paid first
    assert bucket.available(0.0) == -1.0


def test_bucket_retune_keeps_the_level_within_the_new_burst() -> None:
    bucket = TokenBucket(rate_per_s=2.0, burst=4.0)
    bucket.reserve(1, 0.0)
    bucket.retune(10.0, 2.0, 0.0)
    assert bucket.available(0.0) == 2.0
    bucket.reserve(2, 0.0)
    assert bucket.wait(1, 0.0) == pytest.approx(0.1)


def test_bucket_lower_to_only_lowers() -> None:
    bucket = TokenBucket(rate_per_s=2.0, burst=4.0)
    bucket.lower_to(10.0, 0.0)
    assert bucket.available(0.0) == 4.0
    bucket.lower_to(-1.0, 0.0)
    assert bucket.wait(1, 0.0) == pytest.approx(1.0)


def test_rate_limits_wait_and_calls_now() -> None:
    limits = RateLimits(rpm=120, tpm=600)
    assert limits.calls_now(0.0) == 120
    assert limits.wait(0.0) == 0.0
    limits.reserve(700, 0.0)  # 100 tokens in debt: 10 s at 10 tokens/s
    assert limits.wait(0.0) == pytest.approx(10.0)
    assert RateLimits.unlimited().calls_now(0.0) == math.inf


def openai_headers(
    limit: int, remaining: int, reset: str, kind: str = "requests"
) -> dict[str, str]:
    return {
        f"x-ratelimit-limit-{kind}": str(limit),
        f"x-ratelimit-remaining-{kind}": str(remaining),
        f"x-ratelimit-reset-{kind}": reset,
    }


@pytest.mark.parametrize(
    ("headers", "rate", "burst"),
    [
        # 3000 RPM, a minute's bucket: pace at 95% of 50/s, burst at most a second of it
        (openai_headers(3000, 2999, "20ms"), 47.5, 47.5),
        # the provider's bucket holds a second (50): remaining 40 + 0.2 s x 50/s
        (openai_headers(3000, 40, "200ms"), 47.5, 47.5),
        # a bucket smaller than a second of refill: 10 + 0.1 s x 50/s = 15
        (openai_headers(3000, 10, "100ms"), 47.5, 15 * 0.95),
        # no reset: the limit alone, a second of it
        ({"x-ratelimit-limit-requests": "600"}, 9.5, 9.5),
        # 1 RPM: the burst is never below one call
        (openai_headers(1, 1, "0ms"), 0.95 / 60, 1.0),
    ],
)
def test_announced_requests_budget(headers: dict[str, str], rate: float, burst: float) -> None:
    budget = AnnouncedBudget()
    budget.observe(headers, 0.0)
    bucket = budget.limits.requests
    assert bucket is not None and budget.limits.tokens is None
    assert bucket.rate_per_s == pytest.approx(rate)
    assert bucket.burst == pytest.approx(burst)


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"x-ratelimit-remaining-requests": "5", "x-ratelimit-reset-requests": "1s"},  # no limit
        {"x-ratelimit-limit-requests": "lots"},
        {"x-ratelimit-limit-requests": "0"},
        {"x-ratelimit-limit-requests": "-5"},
        {"retry-after": "3"},
    ],
)
def test_nothing_announced_limits_nothing(headers: dict[str, str]) -> None:
    budget = AnnouncedBudget()
    budget.observe(headers, 0.0)
    assert budget.wait(0.0) == 0.0
    assert budget.calls_now(0.0) == math.inf
    assert budget.reserve(10**9, 0.0) == 0.0


def test_remaining_caps_the_level_less_the_calls_still_unanswered() -> None:
    budget = AnnouncedBudget()
    budget.observe(openai_headers(3000, 40, "200ms"), 0.0)
    assert budget.calls_now(0.0) == pytest.approx(40.0)
    # Someone else sharing the key spent most of it; 3 of our calls are still out.
    budget.observe(openai_headers(3000, 5, "900ms"), 0.0, unanswered=3)
    assert budget.calls_now(0.0) == pytest.approx(2.0)
    budget.observe(openai_headers(3000, 0, "1s"), 0.0, unanswered=1)
    assert budget.wait(0.0) == pytest.approx(2 / 47.5)  # one in debt, then one to wait for


def test_announced_tokens_budget_delays_a_call_until_its_tokens_are_covered() -> None:
    budget = AnnouncedBudget()
    budget.observe(openai_headers(600_000, 600_000, "0ms", kind="tokens"), 0.0)  # 10k/s
    assert budget.reserve(9_500, 0.0) == 0.0  # the burst is a second of refill: 9,500
    assert budget.reserve(950, 0.0) == pytest.approx(0.1)
    assert budget.wait(0.0) == pytest.approx(0.1)  # no new call before that one's tokens


@settings(max_examples=60, deadline=None)
@given(
    rpm=st.sampled_from([60, 600, 3000, 10_000]),
    provider_burst_s=st.sampled_from([0.5, 1.0, 60.0]),
    jitter=st.lists(st.floats(min_value=0.0, max_value=0.02), min_size=1, max_size=50),
    latency=st.floats(min_value=0.001, max_value=0.5),
)
def test_a_client_pacing_by_the_headers_is_never_refused(
    rpm: int, provider_burst_s: float, jitter: list[float], latency: float
) -> None:
    # The simulator's budget as the provider. The client keeps at most 8 calls out and sends
    # each as soon as its budget allows; a call reaches the provider up to 20 ms late and is
    # answered `latency` later, with the provider's headers.
    provider = Quota("requests", rpm, provider_burst_s, now=0.0)
    budget = AnnouncedBudget()
    now = 0.0
    answers: list[tuple[float, Mapping[str, str]]] = []  # (when it is back, headers), sorted
    refused = sent = 0
    informed = False  # before the first answer nothing is known: up to 8 calls go blind
    while sent < 300:
        while answers and answers[0][0] <= now:
            _, headers = answers.pop(0)
            budget.observe(headers, now, unanswered=len(answers))
            informed = True
        wait = budget.wait(now)
        if len(answers) >= 8 or wait > 0:
            now = min(now + wait if wait > 0 else math.inf, answers[0][0] if answers else math.inf)
            continue
        now += budget.reserve(1, now)
        arrival = now + jitter[sent % len(jitter)]
        if provider.wait(1, arrival) == 0:
            provider.take(1, arrival)
        elif informed:
            refused += 1
        answers.append((arrival + latency, provider.headers(arrival)))
        answers.sort(key=lambda answer: answer[0])
        sent += 1
    assert refused == 0
