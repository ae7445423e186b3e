"""Rows and layout of ``embedstream top``, rendered without a terminal."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from io import StringIO

import pytest
from embedstream.ops.metrics import Metrics
from embedstream.tools.top.layout import COLUMNS, STYLES, Screen, fit_columns, render
from embedstream.tools.top.rates import TargetView, compute_rates
from embedstream.tools.top.readings import Snapshot, parse_exposition
from embedstream.tools.top.rows import (
    State,
    fmt_count,
    fmt_ms,
    fmt_rate,
    fmt_state,
    partition_rows,
    problems,
    target_row,
    total_row,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from rich.console import Console

NOW = datetime(2024, 5, 6, 7, 8, 9)
URL = "http://127.0.0.1:9464/metrics"


def scrape(setup: Callable[[Metrics], None]) -> Snapshot:
    metrics = Metrics(CollectorRegistry())
    setup(metrics)
    return parse_exposition(generate_latest(metrics.registry).decode())


def healthy(m: Metrics) -> None:
    m.set_lag("embed.requests.high", 0, "high", 40)
    m.set_lag("embed.requests.low", 1, "low", 12345)
    m.set_lag("embed.retry", 2, "retry", 3)
    m.set_lag_seconds("embed.requests.low", 1, "low", 2.5)
    m.set_in_flight_calls(3)
    m.set_concurrency_limit(8)
    m.set_ready(True)


def busy(m: Metrics) -> None:
    healthy(m)
    for _ in range(40):
        m.observe_result("high", 0.1)
    m.observe_flush("high", "size", items=40, tokens=400, waits_s=[0.02] * 40)
    for ok in (True, True, False):
        m.observe_call(0.1, ok=ok)
    m.observe_error("TransientError", "timeout")
    m.count_dead_letter("too_long")
    m.count_retry("timeout")


def refused(m: Metrics) -> None:
    healthy(m)
    m.set_ready(False)
    m.set_paused_partitions(2)
    m.observe_call(0.1, ok=False)
    m.observe_error("ProviderWideError", "auth")


@pytest.fixture(scope="module")
def views() -> list[TargetView]:
    before = scrape(healthy)
    return [
        TargetView(URL, scrape(busy), compute_rates(before, scrape(busy), 4.0)),
        TargetView("http://10.0.0.7:9464/metrics", scrape(refused), None),
        TargetView(
            "http://10.0.0.7:9465/metrics",
            scrape(refused),
            compute_rates(before, scrape(refused), 2),
        ),
        TargetView("http://10.0.0.8:9464/metrics", error="unreachable"),
    ]


def text_of(screen: Screen, width: int) -> list[str]:
    """The frame laid out for ``width``, drawn on a much wider console: every cut and wrap
    must come from the layout itself, not from rich cropping to the console."""
    console = Console(file=StringIO(), width=1000, record=True, color_system=None)
    console.print(render(screen, width))
    return [line.rstrip() for line in console.export_text().splitlines()]


def cells(lines: list[str], name: str) -> list[str]:
    rows = [line.split() for line in lines if line.split()[:1] == [name]]
    assert len(rows) == 1, lines
    return rows[0]


# --------------------------------------------------------------------------- formats


@pytest.mark.parametrize(
    ("fmt", "value", "text"),
    [
        (fmt_count, None, "-"),
        (fmt_count, 0.0, "0"),
        (fmt_count, 9999.0, "9999"),
        (fmt_count, 12345.0, "12.3k"),
        (fmt_count, 123456.0, "123k"),
        (fmt_count, 4_500_000.0, "4.5M"),
        (fmt_rate, 0.0, "0"),
        (fmt_rate, 0.25, "0.25"),
        (fmt_rate, 12.34, "12.3"),
        (fmt_rate, 850.0, "850"),
        (fmt_rate, 12_345.0, "12.3k"),
        (fmt_ms, 2.5, "2.50"),
        (fmt_ms, 37.5, "37.5"),
        (fmt_ms, 1200.0, "1200"),
    ],
)
def test_formats(fmt: Callable[[float | None], str], value: float | None, text: str) -> None:
    assert fmt(value) == text


# --------------------------------------------------------------------------- rows


def test_rows_show_rates_not_totals(views: list[TargetView]) -> None:
    row = target_row(views[0])
    assert row.items_per_s == pytest.approx(10.0)  # 40 results in 4 s
    assert row.errors_per_s == pytest.approx(0.25)
    assert row.dead_letters_per_s == pytest.approx(0.25)
    assert row.retries_per_s == pytest.approx(0.25)
    assert row.batch_mean == pytest.approx(40.0)
    assert row.wait_p50_ms == pytest.approx(17.5)  # interpolated in (10, 25] ms
    assert (row.lag_high, row.lag_low, row.lag_retry, row.lag_seconds) == (40, 12345, 3, 2.5)
    assert row.state is State.READY
    # One snapshot only: no rates yet, but lag and state are known.
    first = target_row(views[1])
    assert (first.items_per_s, first.errors_per_s, first.dead_letters_per_s) == (None,) * 3
    assert first.lag_low == 12345


@pytest.mark.parametrize(
    ("index", "state", "word"),
    [
        (0, State.READY, "ready"),
        (1, State.NOT_READY, "not ready"),  # no rates yet: provider state unknown
        (2, State.PROVIDER, "provider"),
        (3, State.DOWN, "down"),
    ],
)
def test_state_is_the_worst_that_applies(
    views: list[TargetView], index: int, state: State, word: str
) -> None:
    row = target_row(views[index])
    assert row.state is state
    assert fmt_state(row) == word


def test_paused_shows_how_many() -> None:
    def paused(m: Metrics) -> None:
        healthy(m)
        m.set_paused_partitions(3)

    row = target_row(TargetView(URL, scrape(paused)))
    assert (row.state, fmt_state(row)) == (State.PAUSED, "paused 3")


def test_total_sums_rates_and_counts_ready_targets(views: list[TargetView]) -> None:
    total = total_row(views)
    assert total.items_per_s == pytest.approx(10.0)
    assert total.errors_per_s == pytest.approx(0.25 + 0.5)
    assert total.lag_low == 3 * 12345
    assert total.state is State.DOWN  # the worst target
    assert fmt_state(total) == "1/4 ready"


def test_problems_name_each_target_worst_first(views: list[TargetView]) -> None:
    assert problems(views) == [
        (State.DOWN, "10.0.0.8:9464: down (unreachable)"),
        (State.PROVIDER, "10.0.0.7:9465: provider failing (1 of 1 calls failed)"),
        (State.NOT_READY, "10.0.0.7:9464: not ready (see its /readyz)"),
        (State.NOT_READY, "10.0.0.7:9465: not ready (see its /readyz)"),
        (State.PAUSED, "10.0.0.7:9464: 2 partition(s) paused for backpressure"),
        (State.PAUSED, "10.0.0.7:9465: 2 partition(s) paused for backpressure"),
    ]


def test_partition_rows_most_behind_first(views: list[TargetView]) -> None:
    rows = partition_rows(views[:1])
    assert [(r.topic, r.partition, r.lane, r.lag) for r in rows] == [
        ("embed.requests.low", 1, "low", 12345),
        ("embed.requests.high", 0, "high", 40),
        ("embed.retry", 2, "retry", 3),
    ]


# --------------------------------------------------------------------------- layout


def test_an_80_column_frame_keeps_what_matters(views: list[TargetView]) -> None:
    lines = text_of(Screen(views, NOW, 2.0), 80)
    assert max(len(line) for line in lines) <= 80
    titles = lines[1].split()
    assert titles[:1] == ["TARGET"] and titles[-1] == "STATE"
    header = " ".join(titles)
    for title in ("ITEMS/S", "ERR/S", "DLQ/S", "LAG HI", "LAG LO", "BATCH", "WAIT P99"):
        assert title in header
    # TARGET ITEMS/S ERR/S DLQ/S LAG HI LAG LO BATCH WAIT P99 STATE
    assert " ".join(cells(lines, "127.0.0.1:9464")) == (
        "127.0.0.1:9464 10.0 0.25 0.25 40 12.3k 40.0 24.9 ready"
    )
    assert cells(lines, "10.0.0.8:9464") == ["10.0.0.8:9464", "down"]
    assert cells(lines, "TOTAL")[-2:] == ["1/4", "ready"]
    text = " ".join(lines)  # the legend is wrapped at the width
    assert "10.0.0.8:9464: down (unreachable)" in text
    # The latency column says what it measures, and rates say over how long.
    assert "WAIT: item wait" in text and "per second over the last 2 s" in text


def test_a_wide_frame_shows_every_column(views: list[TargetView]) -> None:
    lines = text_of(Screen(views, NOW, 2.0), 200)
    assert max(len(line) for line in lines) <= 200
    header = " ".join(lines[1].split())
    assert all(column.title in header for column in COLUMNS)
    assert "WAIT P50" in header and "CALLS" in header


@settings(deadline=None)  # rendering time varies with the machine's load; not what is tested
@given(
    width=st.integers(min_value=45, max_value=260),
    name=st.text(alphabet="abcdefghij.-:0123456789", min_size=1, max_size=60),
    lag=st.floats(min_value=0, max_value=1e24),
    partitions=st.booleans(),
)
def test_every_line_fits_any_width(width: int, name: str, lag: float, partitions: bool) -> None:
    def huge(m: Metrics) -> None:
        healthy(m)
        m.set_lag("a-topic-with-a-very-long-name.requests.low", 7, "low", int(lag))

    snap = scrape(huge)
    views = [
        TargetView(f"http://{name}:9464/metrics", snap, compute_rates(snap, snap, 1.0)),
        TargetView(f"http://{name}x:1/metrics", error="unreachable " * 10),
    ]
    lines = text_of(Screen(views, NOW, 2.0, show_partitions=partitions, interactive=True), width)
    assert max(len(line) for line in lines) <= width, "\n".join(lines)
    # Each target stays on one line: its state is on the line that starts its name.
    row_lines = [line for line in lines if line.endswith(("ready", "down"))]
    assert len(row_lines) >= 2


@pytest.mark.parametrize("width", [60, 80, 100, 132, 200])
def test_columns_are_dropped_least_important_first(width: int) -> None:
    kept, name_width = fit_columns(width, name_width=14)
    dropped = [c for c in COLUMNS if c not in kept]
    assert max((c.rank for c in kept), default=0) <= min((c.rank for c in dropped), default=99)
    used = name_width + sum(c.width + 1 for c in kept) + 1 + 9
    assert used <= width


def test_states_are_coloured() -> None:
    assert STYLES[State.DOWN] == "bold red" and STYLES[State.PROVIDER] == "bold red"
    assert STYLES[State.NOT_READY] == "red" and STYLES[State.PAUSED] == "yellow"
    assert STYLES[State.READY] == "green"


def test_colours_reach_the_terminal(views: list[TargetView]) -> None:
    console = Console(file=StringIO(), width=120, force_terminal=True, color_system="standard")
    console.print(render(Screen(views, NOW, 2.0), 120))
    ansi = console.file.getvalue()  # type: ignore[attr-defined]

    def codes(word: str) -> set[str]:
        found = re.search("\x1b\\[([0-9;]*)m" + word, ansi)
        assert found, word
        return set(found.group(1).split(";"))

    assert {"1", "31"} <= codes("down")  # bold red
    assert {"1", "31"} <= codes("provider")
    assert "31" in codes("not ready")  # red
    assert "32" in codes("ready ")  # green


def test_partition_view_on_a_key(views: list[TargetView]) -> None:
    hidden = "\n".join(text_of(Screen(views, NOW, 2.0, interactive=True), 80))
    assert "lag per partition" not in hidden and "p partitions" in hidden
    shown = text_of(Screen(views, NOW, 2.0, show_partitions=True, interactive=True), 80)
    assert "p hide partitions" in shown[0]
    start = shown.index("lag per partition, most behind first")
    assert shown[start + 1].split() == ["TARGET", "TOPIC", "PART", "LANE", "LAG", "LAG", "S"]
    assert shown[start + 2].split() == [
        "10.0.0.7:9464", "embed.requests.low", "1", "low", "12.3k", "2.5",
    ]  # fmt: skip


def test_row_of_a_down_target_is_dim() -> None:
    console = Console(file=StringIO(), width=100, force_terminal=True, color_system="standard")
    console.print(render(Screen([TargetView(URL, error="timeout")], NOW), 100))
    assert "\x1b[2m127.0.0.1:9464" in console.file.getvalue()  # type: ignore[attr-defined]


def cached(m: Metrics) -> None:
    healthy(m)
    m.count_cache_lookups({"memory": 30, "redis": 60}, misses=10, tokens_saved=9000)
    m.count_cache_error("get")


def test_a_cache_line_shows_hit_ratio_and_tokens_saved_over_the_refresh() -> None:
    before, after = scrape(healthy), scrape(cached)
    views = [TargetView(URL, after, compute_rates(before, after, 2.0))]
    lines = text_of(Screen(views, NOW, 2.0), 120)
    [line] = [line for line in lines if line.startswith("cache:")]
    assert line == "cache: 90% hits (45 hits/s, 5 misses/s), 4500 tokens saved/s, 0.5 errors/s"
    first = text_of(Screen([TargetView(URL, after)], NOW, 2.0), 120)
    assert any(
        line.startswith("cache: 90% hits since start (90 hits, 10 misses)") for line in first
    )


def with_documents(m: Metrics) -> None:
    healthy(m)
    for outcome, times in (("complete", 8), ("incomplete", 1), ("deleted", 2)):
        for _ in range(times):
            m.count_document(outcome)
    m.count_chunks(160)


def test_a_documents_line_shows_versions_by_outcome_and_chunks_over_the_refresh() -> None:
    before, after = scrape(healthy), scrape(with_documents)
    views = [TargetView(URL, after, compute_rates(before, after, 2.0))]
    lines = text_of(Screen(views, NOW, 2.0), 120)
    [line] = [line for line in lines if line.startswith("documents")]
    assert line == "documents/s: 4.0 complete, 0.5 incomplete, 1.0 deleted; 80 chunks/s"
    first = text_of(Screen([TargetView(URL, after)], NOW, 2.0), 120)
    assert "documents since start: 8 complete, 1 incomplete, 2 deleted; 160 chunks" in first


def test_the_documents_line_adds_up_targets_and_fits_a_narrow_terminal() -> None:
    before, after = scrape(healthy), scrape(with_documents)
    rates = compute_rates(before, after, 2.0)
    views = [
        TargetView(URL, after, rates),
        TargetView("http://10.0.0.7:9464/metrics", after, rates),
    ]
    [line] = [line for line in text_of(Screen(views, NOW, 2.0), 120) if line.startswith("doc")]
    assert line == "documents/s: 8.0 complete, 1.0 incomplete, 2.0 deleted; 160 chunks/s"
    narrow = [line for line in text_of(Screen(views, NOW, 2.0), 40) if line.startswith("doc")]
    assert len(narrow) == 1 and len(narrow[0]) <= 40 and narrow[0].endswith("…")


def test_no_documents_line_without_documents() -> None:
    before, after = scrape(healthy), scrape(busy)
    lines = text_of(Screen([TargetView(URL, after, compute_rates(before, after, 2.0))], NOW), 120)
    assert not any(line.startswith("documents") for line in lines)


def test_no_cache_line_without_a_cache() -> None:
    before, after = scrape(healthy), scrape(busy)
    lines = text_of(Screen([TargetView(URL, after, compute_rates(before, after, 2.0))], NOW), 120)
    assert not any(line.startswith("cache:") for line in lines)


def online(m: Metrics) -> None:
    healthy(m)
    for seconds in (0.02,) * 98 + (0.25, 0.25):
        m.online.count_request("rag", 200)
        m.online.observe_request(seconds)
    for status in (429, 429, 503):
        m.online.count_request("idx", status)


def test_an_online_line_shows_requests_refusals_and_the_callers_p99() -> None:
    before, after = scrape(healthy), scrape(online)
    views = [TargetView(URL, after, compute_rates(before, after, 2.0))]
    [line] = [line for line in text_of(Screen(views, NOW, 2.0), 120) if line.startswith("online")]
    assert line == "online: 50.0 req/s, P99 250 ms, 1.0 refused/s (429), 0.5 failed/s (5xx)"
    first = text_of(Screen([TargetView(URL, after)], NOW, 2.0), 120)
    assert "online: 100 answered since start, 2 refused (429), 1 failed (5xx)" in first


def test_no_online_line_without_online_callers() -> None:
    before, after = scrape(healthy), scrape(busy)
    lines = text_of(Screen([TargetView(URL, after, compute_rates(before, after, 2.0))], NOW), 120)
    assert not any(line.startswith("online") for line in lines)
