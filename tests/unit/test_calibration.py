"""The pace's calibration (`core/calibration.py`): estimates go as they are until a call
reports its usage, then scale by the reported share, smoothed, with a margin and bounds."""

from __future__ import annotations

import pytest
from embedstream.core.calibration import TokenCalibration
from embedstream.engine.build import build_budget
from embedstream.engine.clock import SystemClock
from embedstream.ops.budget_metrics import BudgetMetrics
from embedstream.settings import load_settings
from prometheus_client import CollectorRegistry


def test_estimates_go_as_they_are_until_a_call_reports_its_usage() -> None:
    calibration = TokenCalibration()
    assert calibration.scale(1000) == 1000
    calibration.observe(1000, 0)  # no usage reported: says nothing
    calibration.observe(0, 500)
    assert calibration.ratio is None and calibration.scale(1000) == 1000


def test_the_first_report_sets_the_share_and_later_ones_move_it_a_fifth_of_the_way() -> None:
    calibration = TokenCalibration()
    calibration.observe(1000, 500)  # the provider counted half of our estimate
    assert calibration.ratio == 0.5
    assert calibration.scale(1000) == 525  # with the 5% margin
    calibration.observe(1000, 1000)
    assert calibration.ratio == pytest.approx(0.6)
    assert calibration.scale(10) == 7  # rounded up: never under the smoothed count


def test_an_estimate_that_errs_low_is_scaled_up_and_oddities_are_bounded() -> None:
    calibration = TokenCalibration()
    calibration.observe(100, 150)
    assert calibration.scale(100) == 158  # 1.5 x 1.05, up: before the provider's 429s say it
    wild = TokenCalibration()
    wild.observe(100, 100_000)  # a provider's oddity, not a ratio
    assert wild.ratio == 3.0 and wild.scale(100) == 300
    tiny = TokenCalibration()
    tiny.observe(100_000, 1)
    assert tiny.ratio == 0.2 and tiny.scale(100) == 21
    assert tiny.scale(0) == 0


@pytest.mark.parametrize(("smoothing", "margin"), [(0.0, 1.05), (1.5, 1.05), (0.2, 0.9)])
def test_bad_terms_are_refused(smoothing: float, margin: float) -> None:
    with pytest.raises(ValueError, match="smoothing"):
        TokenCalibration(smoothing, margin)


def test_the_ratio_is_a_gauge_read_at_each_scrape() -> None:
    """`embedstream_budget_token_ratio`: 1 until a call reports usage, then the learnt share
    (the metric reads the governor's calibration; the budget's builder wires it)."""
    registry = CollectorRegistry()
    budget = build_budget(load_settings(env={}), SystemClock(), observer=BudgetMetrics(registry))
    assert registry.get_sample_value("embedstream_budget_token_ratio") == 1.0
    budget.counted(2000, 1400)
    assert registry.get_sample_value("embedstream_budget_token_ratio") == 0.7
