"""The online scenario's rows: each arm's drain share of the drain alone, the callers'
latency and failures, the front's CPU per request and its ratio (pure arithmetic)."""

from __future__ import annotations

import argparse

import pytest
from embedstream.tools.bench.kafka_figures import Drain
from embedstream.tools.bench.online_figures import Callers, FrontCpu, front_cpu_row, online_rows
from embedstream.tools.bench.options import SCENARIOS, add_cli_arguments, sizes_from_args


def drain(items: int, seconds: float) -> Drain:
    return Drain(items, seconds, 10, items, 1.0, None, 1000)


def test_online_rows_give_each_arms_share_and_its_callers_tail() -> None:
    lane = Callers([0.05] * 98 + [0.2, 0.3], sent=102, failed=2, seconds=10.0)
    direct = Callers([0.1] * 100, sent=100, failed=0, seconds=10.0)
    rows = online_rows(drain(1000, 1.0), (drain(1000, 1.25), lane), (drain(900, 1.0), direct),
                       20.0, "kafka")  # fmt: skip
    assert [r.kind for r in rows] == ["online-drain", "online-drain", "online-callers",
                                      "online-drain", "online-callers"]  # fmt: skip
    assert "(80% of alone)" in rows[1].scenario and "through the online lane" in rows[1].scenario
    assert "(90% of alone)" in rows[3].scenario and rows[3].failed == 100
    assert rows[2].items == 100 and rows[2].failed == 2 and rows[2].offered_per_s == 20.0
    assert rows[2].latency is not None and rows[2].latency.p50_ms == pytest.approx(50.0)
    assert rows[4].latency is not None and rows[4].latency.p99_ms == pytest.approx(100.0)


def test_the_fronts_cpu_per_request_and_its_ratio() -> None:
    row = front_cpu_row(FrontCpu(2000, http_cpu_s=1.0, in_process_cpu_s=0.2))
    assert "500 µs CPU/request over HTTP, 100 in process (5.0x)" in row.scenario
    assert front_cpu_row(FrontCpu(0, 0.0, 0.0)).scenario.endswith("(0.0x)")


def test_online_is_a_scenario_with_sizes_of_its_own() -> None:
    parser = argparse.ArgumentParser()
    add_cli_arguments(parser)
    ns = parser.parse_args(["--scenarios", "online", "--online-items", "300", "--online-rate", "5"])
    assert ns.scenarios == ("online",) and "online" in SCENARIOS
    sizes = sizes_from_args(ns)
    assert (sizes.online_items, sizes.online_rate) == (300, 5.0)
    assert sizes_from_args(parser.parse_args([])).online_items == 100_000
