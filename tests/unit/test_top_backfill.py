"""The backfill's line of ``embedstream top``: a migration's progress from the processors'
own metrics (ops/migration_metrics.py), summed over the targets filling the generation."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from io import StringIO

import pytest
from embedstream.core.backfill_skips import SkipReason
from embedstream.ops.metrics import Metrics
from embedstream.tools.top.backfill import backfill_line
from embedstream.tools.top.layout import Screen, render
from embedstream.tools.top.rates import TargetView
from embedstream.tools.top.readings import BackfillProgress, Snapshot, parse_exposition
from prometheus_client import CollectorRegistry, generate_latest
from rich.console import Console

URL = "http://127.0.0.1:9464/metrics"
NOW = datetime(2024, 5, 6, 7, 8, 9)


def scrape(setup: Callable[[Metrics], None]) -> Snapshot:
    metrics = Metrics(CollectorRegistry())
    setup(metrics)
    return parse_exposition(generate_latest(metrics.registry).decode())


def filling(
    ended: int, skipped: int, left: int, now: float, superseded: int = 0
) -> Callable[[Metrics], None]:
    def setup(m: Metrics) -> None:
        m.migration.set_plan(1_000, 800_000)
        for _ in range(ended):
            m.migration.count_document("complete")
        for _ in range(skipped):
            m.migration.count_skipped(SkipReason.COMPLETE)
        for _ in range(superseded):
            m.migration.count_skipped(SkipReason.SUPERSEDED)
        m.migration.count_tokens("7c2e91af", "backfill", 200 * ended)
        m.migration.count_tokens("7c2e91af", "low", 5_000)  # the dual-write's: not the backfill's
        m.migration.sample(left + 100, 0, 0.0)
        m.migration.sample(left, 100, now)  # 100 records in `now` seconds

    return setup


def test_the_snapshot_carries_the_backfills_figures() -> None:
    progress = scrape(filling(ended=30, skipped=5, left=400, now=10.0)).backfill
    assert progress == BackfillProgress(1_000, 800_000, 30, 5, 6_000, 400, 40.0)


def test_no_backfill_while_no_generation_is_filled() -> None:
    assert scrape(lambda m: None).backfill is None
    views = [TargetView(URL, scrape(lambda m: None)), TargetView(URL, error="unreachable")]
    assert backfill_line(views) is None


@pytest.mark.parametrize(
    ("targets", "expected"),
    [
        (
            [filling(30, 5, 400, 10.0)],
            "backfill: 35 of 1,000 documents (5 held already), "
            "6,000 provider tokens (planned 800,000 estimated), 400 records to read, "
            "about 40 s left",
        ),
        (  # two processors: summed; the slower one's time left
            [filling(30, 5, 400, 10.0), filling(20, 0, 6_000, 10.0)],
            "backfill: 55 of 1,000 documents (5 held already), "
            "10,000 provider tokens (planned 800,000 estimated), 6,400 records to read, "
            "about 10 min left",
        ),
        (
            [filling(900, 100, 0, 10.0)],
            "backfill: 1,000 of 1,000 documents (100 held already), "
            "180,000 provider tokens (planned 800,000 estimated), 0 records to read, all read",
        ),
        (  # older versions passed over are no documents of the plan
            [filling(30, 5, 400, 10.0, superseded=7)],
            "backfill: 35 of 1,000 documents (5 held already, 7 older versions passed over), "
            "6,000 provider tokens (planned 800,000 estimated), 400 records to read, "
            "about 40 s left",
        ),
        (  # a target reading nothing for a minute while records are left
            [filling(30, 5, 400, 0.0)],
            "backfill: 35 of 1,000 documents (5 held already), "
            "6,000 provider tokens (planned 800,000 estimated), 400 records to read, "
            "no progress in the last minute",
        ),
    ],
)
def test_the_line_sums_the_targets(targets: list[Callable[[Metrics], None]], expected: str) -> None:
    views = [TargetView(URL, scrape(setup)) for setup in targets]
    assert backfill_line(views) == expected


def test_the_screen_shows_the_line_below_the_targets() -> None:
    console = Console(file=StringIO(), width=1000, record=True, color_system=None)
    console.print(render(Screen([TargetView(URL, scrape(filling(30, 5, 400, 10.0)))], NOW), 160))
    lines = [line.rstrip() for line in console.export_text().splitlines()]
    [line] = [line for line in lines if line.startswith("backfill:")]
    assert line.endswith("about 40 s left")
