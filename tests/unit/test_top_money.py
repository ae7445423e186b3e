"""The money line of ``embedstream top``: tokens by price tier and their cost, from the
processors' own metrics (ops/batch_metrics.py), and the batch jobs they follow."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from io import StringIO

from embedstream.core.batch_terms import Prices, parse_prices
from embedstream.ops.metrics import Metrics
from embedstream.tools.top.layout import Screen, render
from embedstream.tools.top.money import money_line
from embedstream.tools.top.rates import TargetView
from embedstream.tools.top.readings import Snapshot, parse_exposition
from prometheus_client import CollectorRegistry, generate_latest
from rich.console import Console

URL = "http://127.0.0.1:9464/metrics"


def scrape(setup: Callable[[Metrics], None]) -> Snapshot:
    metrics = Metrics(CollectorRegistry())
    metrics.batch.set_prices(Prices(parse_prices("m=2.0"), "openai"))
    setup(metrics)
    return parse_exposition(generate_latest(metrics.registry).decode())


def spending(sync: int, batch: int) -> Callable[[Metrics], None]:
    def setup(m: Metrics) -> None:
        m.count_tier_tokens("sync", "m", sync)
        m.count_tier_tokens("batch", "m", batch)
        m.batch.set_jobs({"submitted": 2, "ended": 1, "finished": 5}, 180.0)

    return setup


def test_tokens_and_cost_by_tier_summed_over_the_targets() -> None:
    views = [
        TargetView(URL, scrape(spending(10_000, 290_000))),
        TargetView(URL, scrape(spending(0, 700_000))),
        TargetView(URL, error="down"),
    ]
    assert money_line(views) == (
        "money: 1.0M tokens, 99% at the batch price; $1.010 (sync $0.020, batch $0.990); "
        "jobs 4 submitted, 2 ended, oldest 3 min"
    )


def test_no_line_before_any_token_and_no_jobs_said_without_any() -> None:
    assert money_line([TargetView(URL, scrape(lambda m: None))]) is None
    only_sync = scrape(lambda m: m.count_tier_tokens("sync", "m", 500))
    assert money_line([TargetView(URL, only_sync)]) == (
        "money: 500 tokens, 0% at the batch price; $0.001 (sync $0.001, batch $0.000)"
    )


def test_the_screen_shows_it() -> None:
    console = Console(file=StringIO(), width=160, color_system=None)
    screen = Screen([TargetView(URL, scrape(spending(1_000, 3_000)))], datetime(2024, 5, 6))
    console.print(render(screen, 160))
    assert "money: 4000 tokens, 75% at the batch price" in console.file.getvalue()  # type: ignore[attr-defined]
