"""Retry and hold delays: exponential with jitter, never past the cap."""

from __future__ import annotations

import random

import pytest
from embedstream.core.backoff import Backoff


@pytest.mark.parametrize(("attempt", "step"), [(1, 0.5), (2, 1.0), (4, 4.0), (7, 30.0)])
def test_the_delay_doubles_per_attempt_up_to_the_cap(attempt: int, step: float) -> None:
    assert Backoff(base_s=0.5, cap_s=30.0, jitter=0.0).delay(attempt, random.Random(1)) == step


def test_a_batch_held_thousands_of_times_still_gets_the_capped_delay() -> None:
    """A hold counts its repeats: in a long outage they passed a thousand, and 2**1100 does not
    fit a float (OverflowError, the held batch's dispatch failed)."""
    assert Backoff(base_s=0.5, cap_s=30.0, jitter=0.0).delay(5000, random.Random(1)) == 30.0


def test_a_retry_after_longer_than_the_step_is_honoured() -> None:
    assert Backoff(base_s=0.5, cap_s=30.0).delay(1, random.Random(1), retry_after=12.0) == 12.0
