"""The demo's page shows a run of the demo as it is now: its progress lines and headings are
the default plan's, its lanes lines are what the summary says of the figures shown above
them, and its counts add up. A change to the phases, their defaults or the summary's words
that leaves the page behind fails here."""

from __future__ import annotations

import re
from pathlib import Path

from embedstream.tools.demo.documents_phase import document_plan
from embedstream.tools.demo.options import (
    DEFAULT_BACKLOG_ITEMS,
    DEFAULT_DOCUMENTS,
    DEFAULT_HIGH_RATE,
    DEFAULT_SPARSE_ITEMS,
    DEFAULT_SPARSE_RATE,
)
from embedstream.tools.demo.phases import LanesPhase, plan
from embedstream.tools.demo.summary import LaneFigures, PhaseFigures, lanes_lines

PAGE = Path(__file__).parents[2] / "docs" / "getting-started" / "demo.md"


def _page() -> str:
    return PAGE.read_text(encoding="utf-8")


def _shown_run() -> list[str]:
    """The lines of the page's run: its first code block without a language."""
    blocks: list[tuple[str, list[str]]] = []  # (language, lines)
    inside = False
    for line in _page().splitlines():
        if line.startswith("```"):
            if not inside:
                blocks.append((line[3:].strip(), []))
            inside = not inside
        elif inside:
            blocks[-1][1].append(line)
    runs = [lines for language, lines in blocks if not language]
    assert runs, "the page shows no run"
    return runs[0]


def _numbers(line: str) -> list[float]:
    return [float(cell.replace(",", "")) for cell in line.split()[1:]]


def test_the_progress_lines_and_headings_are_the_default_plans() -> None:
    lines = _shown_run()
    assert lines[0].startswith("embedded broker at 127.0.0.1:")
    phases = plan(DEFAULT_SPARSE_ITEMS, DEFAULT_SPARSE_RATE, DEFAULT_BACKLOG_ITEMS,
                  DEFAULT_HIGH_RATE)  # fmt: skip
    documents = document_plan(DEFAULT_DOCUMENTS)
    assert lines[1:6] == [
        *(f"{phase.describe()} ..." for phase in phases),
        f"documents: {len(documents.first)} document events ...",
        f"edits and a delete: {len(documents.edits)} document events ...",
        "reading back requests, results and dead letters ...",
    ]
    for phase in phases:
        assert any(line.startswith(f"{phase.describe()}, done in ") for line in lines), phase


def test_the_lanes_lines_are_what_the_summary_says_of_the_figures_shown() -> None:
    lines = _shown_run()
    heading = f"{LanesPhase(DEFAULT_BACKLOG_ITEMS, DEFAULT_HIGH_RATE).describe()}, done in "
    start = next(i for i, line in enumerate(lines) if line.startswith(heading))
    table = lines[start:]
    high = _numbers(next(line for line in table if line.split()[:1] == ["high"]))
    low = _numbers(next(line for line in table if line.split()[:1] == ["low"]))
    drained = re.search(r"the low backlog drained in ([\d.]+) s", "\n".join(table))
    assert drained, table
    # items items/s P50 P99 (the calls and mean batch are the `all` row's)
    figures = PhaseFigures(
        phase=LanesPhase(DEFAULT_BACKLOG_ITEMS, DEFAULT_HIGH_RATE).sent(int(high[0])),
        seconds=float(drained.group(1)),
        lanes={
            "high": LaneFigures(int(high[0]), high[2], high[3]),
            "low": LaneFigures(int(low[0]), low[2], low[3]),
        },
        total=LaneFigures(int(high[0] + low[0]), None, None),
        calls=0,
        mean_batch=None,
        dead_letters=0,
        lane_seconds={"low": float(drained.group(1))},
    )
    words = str(lanes_lines(figures)).splitlines()
    assert table[6:8] == words
    assert words[1].endswith("high requests are served first")  # the page shows priority
    # Every request of the two phases read back once.
    requests = DEFAULT_SPARSE_ITEMS + DEFAULT_BACKLOG_ITEMS + int(high[0])
    assert f"read back from the topics: {requests:,} requests, {requests:,} results" in lines


def test_the_page_words_the_default_plan() -> None:
    text = " ".join(_page().split())
    assert (
        f"It sends {DEFAULT_SPARSE_ITEMS} requests one by one ({DEFAULT_SPARSE_RATE:g} a second"
        in text
    )
    assert f"{DEFAULT_BACKLOG_ITEMS:,} low-priority requests at once" in text
    assert f"high-priority requests at {DEFAULT_HIGH_RATE:g} a second" in text
    assert f"then {DEFAULT_DOCUMENTS} multi-paragraph documents" in text
