"""The `top` line of the sources that spend the most tokens, from real /metrics text."""

from __future__ import annotations

from datetime import datetime

from embedstream.ops.metrics import Metrics
from embedstream.tools.top.layout import Screen, render
from embedstream.tools.top.rates import TargetView, compute_rates
from embedstream.tools.top.readings import Snapshot, parse_exposition
from embedstream.tools.top.sources import sources_line
from prometheus_client import CollectorRegistry, generate_latest
from rich.console import Console

URL = "http://127.0.0.1:9464/metrics"


def scrape(metrics: Metrics) -> Snapshot:
    return parse_exposition(generate_latest(metrics.registry).decode())


def spend(metrics: Metrics, **tokens_by_source: int) -> None:
    for source, tokens in tokens_by_source.items():
        metrics.count_source_usage(source, tokens=tokens, estimated=False, call_share=1.0)


def test_totals_before_the_second_scrape_then_rates_over_the_refresh() -> None:
    metrics = Metrics(CollectorRegistry())
    spend(metrics, **{"orders.low": 3000, "wiki.low": 1000})
    first = scrape(metrics)
    assert sources_line([TargetView(URL, first)]) == (
        "tokens by source: orders.low 75% (3000 since start), wiki.low 25% (1000 since start)"
    )
    spend(metrics, **{"orders.low": 100, "wiki.low": 900})
    metrics.count_source_usage("wiki.low", tokens=1000, estimated=True, call_share=1.0)
    second = scrape(metrics)
    rates = compute_rates(first, second, 10.0)
    line = sources_line([TargetView(URL, second, rates)])
    # Over the 10 s: wiki 1,900 (reported + estimated), orders 100.
    assert line == "tokens by source: wiki.low 95% (190/s), orders.low 5% (10.0/s)"


def test_the_top_sources_only_summed_over_targets_and_none_before_any_token() -> None:
    assert sources_line([TargetView(URL, scrape(Metrics(CollectorRegistry())))]) is None
    assert sources_line([TargetView(URL, error="refused")]) is None
    a, b = Metrics(CollectorRegistry()), Metrics(CollectorRegistry())
    spend(a, s1=500, s2=100, s3=50, s4=10)
    spend(b, s1=500, s4=5)
    line = sources_line([TargetView(URL, scrape(a)), TargetView(URL + "2", scrape(b))])
    assert line is not None
    assert line.startswith("tokens by source: s1 86% (1000 since start), s2 9% (100")
    assert line.endswith(", 1 more")  # s4 is the fourth


def test_the_line_is_on_the_screen() -> None:
    metrics = Metrics(CollectorRegistry())
    spend(metrics, **{"orders.low": 42})
    screen = Screen((TargetView(URL, scrape(metrics)),), datetime(2024, 1, 1), 2.0)
    console = Console(width=120, record=True)
    console.print(render(screen, 120))
    assert "tokens by source: orders.low 100% (42 since start)" in console.export_text()
