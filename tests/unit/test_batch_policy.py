"""The batch lane's pure rules (core/batch_routing.py, core/batch_jobs.py, core/batch_terms.py):
what goes to a job, how a job is cut, what an ended job does, what tokens cost. Times are fake,
checked to the millisecond at each boundary."""

from __future__ import annotations

import random

import pytest
from embedstream.core.backoff import Backoff
from embedstream.core.batch_jobs import (
    FILE_MARGIN,
    LINE_OVERHEAD_BYTES,
    FormingJob,
    JobLimits,
    JobOffsets,
    Resubmit,
    WriteOutcomes,
    ending,
    line_bytes,
    may_submit,
    overdue,
    writable,
)
from embedstream.core.batch_routing import BatchRouting, PaceMeter, waits_too_long
from embedstream.core.batch_terms import ModelPrice, Prices, Tier, parse_prices, takes_batch_jobs
from embedstream.core.lanes import InputLane, Priority

# --------------------------------------------------------------------------- routing


def test_whole_streams_are_the_marked_low_topics_and_a_backfill_via_batch() -> None:
    routing = BatchRouting(topics=frozenset({"bulk"}))
    assert routing.enabled
    assert routing.whole("bulk", InputLane.LOW, backfill_via_batch=False)
    assert not routing.whole("other", InputLane.LOW, backfill_via_batch=False)
    assert not routing.whole("bulk", InputLane.HIGH, backfill_via_batch=False)
    assert not routing.whole("bulk", InputLane.RETRY, backfill_via_batch=False)  # retries go on
    assert routing.whole("docs", InputLane.BACKFILL, backfill_via_batch=True)
    assert not routing.whole("docs", InputLane.BACKFILL, backfill_via_batch=False)
    assert not BatchRouting().enabled
    assert BatchRouting(migrations=True).enabled and BatchRouting(after_s=0.5).enabled


@pytest.mark.parametrize(
    ("priority", "attempts", "chunk", "expected"),
    [
        (Priority.LOW, 0, False, True),
        (Priority.LOW, 1, False, False),  # a retry was paid for once: it goes on sync
        (Priority.LOW, 0, True, False),  # a document's chunk: only whole streams
        (Priority.HIGH, 0, False, False),
        (Priority.BACKFILL, 0, False, False),
    ],
)
def test_the_adaptive_rule_takes_only_first_attempts_of_low_requests(
    priority: Priority, attempts: int, chunk: bool, expected: bool
) -> None:
    assert BatchRouting(after_s=30.0).adaptive(priority, attempts, chunk) is expected
    assert BatchRouting().adaptive(priority, attempts, chunk) is False


def test_an_item_goes_to_a_job_once_the_sync_wait_reaches_batch_after_s() -> None:
    # 200 items/s, 30 s: the sync path takes what it sends in 30 s, 6,000 items.
    assert not waits_too_long(5_999, 200.0, 30.0)
    assert waits_too_long(6_000, 200.0, 30.0)
    assert not waits_too_long(10**9, None, 30.0)  # no pace yet: nothing judged
    assert waits_too_long(1, 0.0, 30.0)  # nothing sent lately: anything waiting waits too long
    assert not waits_too_long(0, 0.0, 30.0, waited_s=29.999)


def test_the_time_waited_in_kafka_counts_to_the_millisecond() -> None:
    # 1,000 waiting at 200/s: 5 s more. An item 24.999 s old is sent by 29.999 s: sync.
    assert not waits_too_long(1_000, 200.0, 30.0, waited_s=24.999)
    assert waits_too_long(1_000, 200.0, 30.0, waited_s=25.000)
    assert waits_too_long(0, 200.0, 30.0, waited_s=30.000)  # waited its time in Kafka already


def test_the_pace_is_unknown_for_its_first_second_then_counts_the_last_ten() -> None:
    meter = PaceMeter()
    meter.sent(500, now=100.000)
    assert meter.per_s(100.999) is None
    assert meter.per_s(101.000) == 500.0  # 500 over the 1 s seen
    meter.sent(1_500, now=104.000)
    assert meter.per_s(105.000) == pytest.approx(2_000 / 5.0)
    assert meter.per_s(109.999) == pytest.approx(2_000 / 9.999)
    assert meter.per_s(110.000) == pytest.approx(1_500 / 10.0)  # the first 500 left the window
    assert meter.per_s(114.000) == 0.0
    with pytest.raises(ValueError):
        PaceMeter(window_s=1.0, min_span_s=2.0)


# --------------------------------------------------------------------------- cutting


def test_job_offsets_are_a_bitmap_from_the_first() -> None:
    offsets = JobOffsets()
    for offset in (1_000_000, 1_000_003, 1_000_008, 1_049_999):
        offsets.add(offset)
    assert list(offsets) == [1_000_000, 1_000_003, 1_000_008, 1_049_999]
    assert len(offsets) == 4 and 1_000_003 in offsets and 1_000_004 not in offsets
    assert 999_999 not in offsets and 2_000_000 not in offsets
    copy = JobOffsets(offsets.first, offsets.bits)
    assert list(copy) == list(offsets) and copy.last == 1_049_999 and len(copy) == 4
    with pytest.raises(ValueError):
        offsets.add(1_049_999)
    every = JobOffsets()
    for offset in range(0, 100_000, 2):  # 50,000 offsets over a span of 100,000
        every.add(offset)
    assert len(every) == 50_000 and len(every.bits) == 12_500  # a bit per offset


def test_a_job_is_cut_at_each_provider_limit() -> None:
    limits = JobLimits(max_inputs=10, max_bytes=10_000, max_tokens=100, form_s=60)
    job = FormingJob(limits, opened_at=0.0)
    assert job.fits(10, 9_500, 100)  # exactly at each limit (the bytes with their margin)
    assert not job.fits(11, 1, 1)
    assert not job.fits(1, int(10_000 * FILE_MARGIN) + 1, 1)
    assert not job.fits(1, 1, 101)
    job.add(5, inputs=9, size=9_000, tokens=90)
    assert not job.full and job.fits(1, 500, 10) and not job.fits(2, 1, 1)
    job.add(6, inputs=1, size=500, tokens=10)
    assert job.full and not job.fits(1, 1, 1)
    assert JobLimits(max_tokens=None).fits_alone(50_000, 190_000_000, 10**12)
    assert not JobLimits().fits_alone(50_001, 1, 1)
    assert not JobLimits(max_tokens=1_000).fits_alone(1, 1, 1_001)
    with pytest.raises(ValueError):
        JobLimits(max_inputs=50_001)


def test_a_job_closes_form_s_after_it_opened_and_never_empty() -> None:
    job = FormingJob(JobLimits(form_s=2.5), opened_at=10.0)
    assert not job.due(100.0)  # empty: nothing to submit
    job.add(0, 1, 200, 3)
    assert not job.due(12.499)
    assert job.due(12.500)


def test_a_line_is_its_text_and_a_fixed_overhead() -> None:
    assert line_bytes(1_000, "text-embedding-3-small") == 1_000 + 22 + LINE_OVERHEAD_BYTES


# --------------------------------------------------------------------------- endings


def test_an_enqueued_token_refusal_resubmits_after_a_growing_backoff() -> None:
    backoff = Backoff(base_s=60.0, cap_s=3_600.0, jitter=0.0)
    rng = random.Random(1)
    codes = frozenset({"token_limit_exceeded"})
    waits = [ending("failed", codes, n, backoff, rng) for n in (1, 2, 3, 10)]
    assert waits == [Resubmit(60.0), Resubmit(120.0), Resubmit(240.0), Resubmit(3_600.0)]


@pytest.mark.parametrize("status", ["completed", "expired", "cancelled", "failed"])
def test_every_other_ending_writes_the_outcomes(status: str) -> None:
    codes = frozenset({"invalid_json_line"}) if status == "failed" else frozenset()
    assert ending(status, codes, 0, Backoff(), random.Random(0)) == WriteOutcomes(status)


def test_jobs_wait_for_the_enqueued_tokens_of_those_submitted() -> None:
    assert may_submit(400, 600, 1_000) and not may_submit(401, 600, 1_000)
    assert may_submit(5_000, 0, 1_000)  # alone over it: the provider's answer decides
    assert may_submit(10**9, 10**9, None)


def test_a_streams_jobs_write_in_the_order_they_were_formed() -> None:
    assert writable(3, frozenset({3, 4, 7}))
    assert not writable(4, frozenset({3, 4}))
    assert writable(4, frozenset())


def test_a_job_is_overdue_once_past_its_window() -> None:
    day = 86_400.0
    assert not overdue(0, 86_400_000, day)
    assert overdue(0, 86_400_001, day)


# --------------------------------------------------------------------------- terms


def test_which_presets_take_batch_jobs() -> None:
    assert takes_batch_jobs("openai", False) and takes_batch_jobs("azure", False)
    assert not takes_batch_jobs("generic", False) and takes_batch_jobs("generic", True)
    for profile in ("vllm", "tei", "ollama", "dashscope"):
        assert not takes_batch_jobs(profile, True)


def test_prices_by_tier_with_the_presets_discount() -> None:
    table = parse_prices("small=0.02, large=0.13/0.07")
    assert table == {"small": ModelPrice(0.02), "large": ModelPrice(0.13, 0.07)}
    prices = Prices(table, "openai")
    assert prices.per_million("small", Tier.BATCH) == pytest.approx(0.01)
    assert prices.per_million("large", Tier.BATCH) == 0.07
    assert prices.cost("small", Tier.SYNC, 3_000_000) == pytest.approx(0.06)
    assert prices.per_million("unknown", Tier.SYNC) is None
    assert Prices(table, "vllm").per_million("small", Tier.BATCH) is None
    for bad in ("small", "small=cheap", "=1", "small=1/x", "small=-1"):
        with pytest.raises(ValueError, match=r"small|=1"):
            parse_prices(bad)
