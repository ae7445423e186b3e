"""The screen of ``embedstream top`` as rich renderables: a pure function of the model and the
terminal width, so tests render it into any width without a terminal.

Every line fits the width: columns are dropped, least important first, until the table fits
(an 80-column terminal keeps state, throughput, lag per lane, error and dead-letter rates, the
batch size and the P99 item wait), and the target name is cut with an ellipsis last.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime

from rich.console import Console, ConsoleOptions, Group, RenderableType
from rich.table import Table
from rich.text import Text

from embedstream.tools.top.backfill import backfill_line
from embedstream.tools.top.budget import budget_line
from embedstream.tools.top.money import money_line
from embedstream.tools.top.online import online_line
from embedstream.tools.top.rates import TargetView
from embedstream.tools.top.rows import (
    PartitionRow,
    Row,
    State,
    cache_line,
    documents_line,
    fmt_count,
    fmt_in_flight,
    fmt_mean,
    fmt_ms,
    fmt_rate,
    fmt_seconds,
    fmt_state,
    partition_rows,
    problems,
    target_row,
    total_row,
)
from embedstream.tools.top.sources import sources_line

STYLES = {
    State.DOWN: "bold red",
    State.PROVIDER: "bold red",
    State.NOT_READY: "red",
    State.PAUSED: "yellow",
    State.READY: "green",
    State.UNKNOWN: "dim",
}


@dataclass(frozen=True, slots=True)
class Column:
    """A numeric column: ``rank`` orders which go first when the width is short (highest
    first); ``cell`` writes a row's value in at most ``width`` characters."""

    title: str
    width: int
    rank: int
    cell: Callable[[Row], str]


# Display order; ranks say what an 80-column terminal keeps (1..5) and what only wider ones show.
COLUMNS: tuple[Column, ...] = (
    Column("ITEMS/S", 7, 1, lambda r: fmt_rate(r.items_per_s)),
    Column("ERR/S", 6, 3, lambda r: fmt_rate(r.errors_per_s)),
    Column("DLQ/S", 6, 3, lambda r: fmt_rate(r.dead_letters_per_s)),
    Column("RETRY/S", 7, 9, lambda r: fmt_rate(r.retries_per_s)),
    Column("LAG HI", 6, 2, lambda r: fmt_count(r.lag_high)),
    Column("LAG LO", 6, 2, lambda r: fmt_count(r.lag_low)),
    Column("LAG RT", 6, 8, lambda r: fmt_count(r.lag_retry)),
    Column("LAG S", 6, 6, lambda r: fmt_seconds(r.lag_seconds)),
    Column("BATCH", 6, 5, lambda r: fmt_mean(r.batch_mean)),
    Column("WAIT P50", 8, 7, lambda r: fmt_ms(r.wait_p50_ms)),
    Column("WAIT P99", 8, 4, lambda r: fmt_ms(r.wait_p99_ms)),
    Column("CALLS", 7, 10, fmt_in_flight),
)
STATE_WIDTH = 9
NAME_MIN, NAME_MAX = 8, 24
RATE_WORDS = {"ITEMS/S": "results", "ERR/S": "API errors", "DLQ/S": "dead letters"}
RATE_WORDS |= {"RETRY/S": "retries"}
# What the other columns mean, keyed by the column that stands for its group.
LAG_WORDS = {"LAG HI": ("HI", "high"), "LAG LO": ("LO", "low"), "LAG RT": ("RT", "retry")}
LEGEND = {
    "LAG S": "LAG S: age of the oldest record read but not yet committed (s)",
    "BATCH": "BATCH: mean inputs per call",
    "WAIT P99": "WAIT: item wait, from arrival in the batcher to its flush (ms)",
    "CALLS": "CALLS: calls in flight / concurrency limit",
}


def legend(columns: Sequence[Column], interval_s: float | None) -> str:
    """One sentence per shown group of columns; rates say over how long they are measured."""
    shown = [c.title for c in columns]
    rates = ", ".join(f"{t} {RATE_WORDS[t]}" for t in shown if t in RATE_WORDS)
    over = "the last refresh" if interval_s is None else f"the last {interval_s:g} s"
    parts = [f"{rates} per second over {over}"] if rates else []
    lags = [LAG_WORDS[t] for t in shown if t in LAG_WORDS]
    if lags:
        short, lanes = "/".join(s for s, _ in lags), ", ".join(w for _, w in lags)
        parts.append(f"LAG {short}: offsets behind on the {lanes} topics")
    parts += [text for key, text in LEGEND.items() if key in shown]
    return ". ".join(parts) + "."


def fit_columns(width: int, name_width: int) -> tuple[list[Column], int]:
    """The columns that fit ``width`` (in display order) and the width left for names.

    A line is the name, each column and the state, one space apart.
    """
    kept = list(COLUMNS)
    name = min(max(name_width, NAME_MIN), NAME_MAX)

    def needed(columns: Sequence[Column], name: int) -> int:
        return name + sum(c.width + 1 for c in columns) + 1 + STATE_WIDTH

    while kept and needed(kept, name) > width:
        kept.remove(max(kept, key=lambda c: (c.rank, COLUMNS.index(c))))
    return kept, max(NAME_MIN, min(name, width - needed(kept, 0)))


def _table() -> Table:
    """Borderless, one space between columns: a line is exactly the column widths plus gaps."""
    return Table(
        box=None,
        show_edge=False,
        pad_edge=False,
        padding=(0, 1),
        collapse_padding=True,
        header_style="bold",
    )


def targets_table(views: Sequence[TargetView], width: int) -> tuple[Table, list[Column]]:
    rows = [target_row(view) for view in views]
    total = total_row(views)
    columns, name_width = fit_columns(width, max((len(r.name) for r in rows), default=0))
    table = _table()
    table.add_column("TARGET", width=name_width, no_wrap=True, overflow="ellipsis")
    for column in columns:
        table.add_column(column.title, width=column.width, justify="right", no_wrap=True)
    table.add_column("STATE", width=STATE_WIDTH, no_wrap=True, overflow="ellipsis")
    for row in rows:
        cells = [column.cell(row) for column in columns]
        if row.down is not None:
            cells = ["" for _ in columns]
        # A value too wide for its column shows as #### (like a spreadsheet), keeping the width.
        cells = [
            v if len(v) <= c.width else "#" * c.width for v, c in zip(cells, columns, strict=True)
        ]
        state = Text(fmt_state(row), style=STYLES[row.state])
        table.add_row(row.name, *cells, state, style="dim" if row.down else None)
    cells = [column.cell(total) for column in columns]
    cells = [v if len(v) <= c.width else "#" * c.width for v, c in zip(cells, columns, strict=True)]
    table.add_row(
        "TOTAL",
        *cells,
        Text(fmt_state(total), style=STYLES[total.state]),
        style="bold",
        end_section=False,
    )
    return table, columns


def partitions_table(rows: Sequence[PartitionRow], width: int) -> Table:
    """Lag per partition, most behind first; the topic column takes what the width leaves."""
    name = min(max(max((len(r.target) for r in rows), default=0), NAME_MIN), NAME_MAX)
    fixed = 4 + 5 + 6 + 6 + 5  # PART, LANE, LAG, LAG S and the spaces between the six columns
    topic = max((len(r.topic) for r in rows), default=10)
    topic = max(8, min(topic, width - fixed - name))
    name = max(NAME_MIN, min(name, width - fixed - topic))
    table = _table()
    table.add_column("TARGET", width=name, no_wrap=True, overflow="ellipsis")
    table.add_column("TOPIC", width=topic, no_wrap=True, overflow="ellipsis")
    table.add_column("PART", width=4, justify="right", no_wrap=True)
    table.add_column("LANE", width=5, no_wrap=True)
    table.add_column("LAG", width=6, justify="right", no_wrap=True)
    table.add_column("LAG S", width=6, justify="right", no_wrap=True)
    for r in rows:
        lag, seconds = fmt_count(r.lag), fmt_seconds(r.lag_seconds)
        table.add_row(
            r.target,
            r.topic,
            str(r.partition),
            r.lane,
            lag if len(lag) <= 6 else "######",
            seconds if len(seconds) <= 6 else "######",
        )
    return table


@dataclass(frozen=True, slots=True)
class Screen:
    """Everything one frame shows."""

    views: Sequence[TargetView]
    now: datetime
    interval_s: float | None = None
    show_partitions: bool = False
    interactive: bool = False  # keys work: say which


def _line(text: str, width: int, style: str = "") -> Text:
    """One line, cut with an ellipsis to ``width`` here rather than by whoever draws it."""
    if len(text) > width:
        text = text[: max(width - 1, 0)] + "…"
    return Text(text, style=style, no_wrap=True, overflow="ellipsis")


def render(screen: Screen, width: int) -> Group:
    """The whole frame for a terminal ``width`` columns wide."""
    views = screen.views
    up = sum(1 for v in views if v.up)
    header = f"embedstream top  {screen.now:%H:%M:%S}  {up}/{len(views)} up"
    if screen.interval_s is not None:
        header += f"  every {screen.interval_s:g}s"
    if screen.interactive:
        header += "  ·  q quit  p " + ("hide " if screen.show_partitions else "") + "partitions"
    parts: list[RenderableType] = [_line(header, width, "bold")]
    table, columns = targets_table(views, width)
    parts.append(table)
    online = online_line(views)
    if online is not None:
        parts.append(_line(online, width))
    budget = budget_line(views)
    if budget is not None:
        parts.append(_line(budget, width))
    backfill = backfill_line(views)
    if backfill is not None:
        parts.append(_line(backfill, width))
    cache = cache_line(views)
    if cache is not None:
        parts.append(_line(cache, width))
    documents = documents_line(views)
    if documents is not None:
        parts.append(_line(documents, width))
    sources = sources_line(views)
    if sources is not None:
        parts.append(_line(sources, width))
    money = money_line(views)
    if money is not None:
        parts.append(_line(money, width))
    parts.extend(_line(text, width, STYLES[state]) for state, text in problems(views))
    if screen.show_partitions:
        rows = partition_rows(views)
        parts.append(_line("lag per partition, most behind first", width, "bold"))
        if rows:
            parts.append(partitions_table(rows, width))
        else:
            parts.append(_line("no partitions assigned", width))
    # Wrapped here at the width (never by the terminal): dim, under everything else.
    lines = textwrap.wrap(legend(columns, screen.interval_s), width=max(width, 20))
    parts.extend(_line(line, width, "dim") for line in lines)
    return Group(*parts)


@dataclass(frozen=True, slots=True)
class Fitted:
    """A renderable that lays the screen out for whatever width it is given (resizes too)."""

    screen: Screen

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Group]:
        yield render(self.screen, options.max_width)
