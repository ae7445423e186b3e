"""The arrival rate the fill rule reads, with time passed in."""

from __future__ import annotations

import math

import pytest
from embedstream.core.arrivals import ArrivalRate


def test_no_arrivals_is_no_rate() -> None:
    assert ArrivalRate().per_s(5.0) == 0.0


def test_a_steady_stream_reads_its_rate() -> None:
    rate = ArrivalRate(time_constant_s=0.25)
    for i in range(4_000):  # 1000/s for 4 s: 16 time constants, the start forgotten
        rate.add(i / 1000)
    assert rate.per_s(3.999) == pytest.approx(1000.0, rel=0.01)


def test_the_rate_fades_after_the_stream_stops() -> None:
    rate = ArrivalRate(time_constant_s=0.25)
    rate.add(0.0, count=100)
    assert rate.per_s(0.0) == pytest.approx(400.0)
    assert rate.per_s(0.25) == pytest.approx(400.0 / math.e)
    assert rate.per_s(-1.0) == pytest.approx(400.0)  # a clock read late never grows it


def test_a_bad_time_constant_is_refused() -> None:
    with pytest.raises(ValueError, match="time_constant_s"):
        ArrivalRate(time_constant_s=0)
