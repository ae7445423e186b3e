"""Progress of ``embedstream produce`` and ``embedstream bench``: a rich bar on a terminal, a
plain line now and then otherwise (a log file or CI output gets whole lines, never
carriage-return frames).

``produce`` counts requests sent and, when the input's size is known (a regular file), in
bytes read, which is what the bar fills by: counting the lines first would mean reading the
input twice. ``bench`` shows one bar per scenario (:class:`StepProgress`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol, TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    ProgressColumn,
    TaskID,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

Clock = Callable[[], float]

# A plain line every few seconds: often enough to show life, rare enough for a log file.
PLAIN_INTERVAL_S = 5.0


class ProduceProgress(Protocol):
    def advance(self, items: int, nbytes: int) -> None:
        """``items`` more requests sent, ``nbytes`` more bytes of input read."""

    def finish(self) -> None:
        """The input is exhausted and everything was sent."""


def _size(nbytes: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if nbytes < 1000 or unit == "GB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1000
    raise AssertionError(nbytes)  # pragma: no cover - the loop returns at GB


class PlainProgress:
    """``produce: 12,000 sent (2,400/s), 4.1 MB of 10.0 MB read (41%)`` every few seconds."""

    def __init__(
        self,
        stream: TextIO,
        total_bytes: int | None,
        *,
        clock: Clock = time.monotonic,
        interval_s: float = PLAIN_INTERVAL_S,
    ) -> None:
        self._stream = stream
        self._total = total_bytes
        self._clock = clock
        self._interval_s = interval_s
        self._started = clock()
        self._last_line = self._started
        self.items = 0
        self.bytes = 0

    def advance(self, items: int, nbytes: int) -> None:
        self.items += items
        self.bytes += nbytes
        now = self._clock()
        if now - self._last_line >= self._interval_s:
            self._last_line = now
            self._write(now)

    def finish(self) -> None:
        pass  # the caller prints the final count

    def _write(self, now: float) -> None:
        rate = self.items / max(now - self._started, 1e-9)
        line = f"produce: {self.items:,} sent ({rate:,.0f}/s)"
        if self._total:
            share = 100 * self.bytes / self._total
            line += f", {_size(self.bytes)} of {_size(self._total)} read ({share:.0f}%)"
        self._stream.write(line + "\n")
        self._stream.flush()


class TerminalProgress:
    """A rich progress bar over the bytes read (a spinner-less count when the size is unknown)."""

    def __init__(self, stream: TextIO, total_bytes: int | None) -> None:
        console = Console(file=stream)
        columns: list[ProgressColumn] = [
            TextColumn("[bold]produce"),
            TextColumn("{task.fields[items]:>9,} sent"),
        ]
        if total_bytes:
            columns += [
                BarColumn(),
                TaskProgressColumn(),
                DownloadColumn(),
                TimeRemainingColumn(),
            ]
        else:
            columns += [TimeElapsedColumn()]
        self._progress = Progress(*columns, console=console, transient=False)
        self._task = self._progress.add_task("produce", total=total_bytes or None, items=0)
        self._items = 0
        self._progress.start()

    def advance(self, items: int, nbytes: int) -> None:
        self._items += items
        self._progress.update(self._task, advance=nbytes, items=self._items)

    def finish(self) -> None:
        self._progress.stop()


def make_progress(stream: TextIO, total_bytes: int | None) -> ProduceProgress:
    """A bar when ``stream`` is a terminal, plain lines otherwise."""
    if stream.isatty():
        return TerminalProgress(stream, total_bytes)
    return PlainProgress(stream, total_bytes)


# --------------------------------------------------------------------------- steps
# A run of named steps (``embedstream bench``'s scenarios), each with its own progress.


class StepProgress(Protocol):
    def begin(self, label: str, total: float | None, unit: str) -> None:
        """A step starts; ``total`` of ``unit`` (items, s) to go, None when unknown."""

    def update(self, done: float) -> None:
        """``done`` of the current step's total so far."""

    def end(self, summary: str) -> None:
        """The current step is over; ``summary`` is one line about it."""

    def close(self) -> None:
        """Every step is over."""


class PlainSteps:
    """``bench: closed started`` and ``bench: closed: 1,200 of 2,000 items`` every few seconds,
    then the step's summary: whole lines for a log file or CI output."""

    def __init__(
        self,
        stream: TextIO,
        *,
        prefix: str = "bench",
        clock: Clock = time.monotonic,
        interval_s: float = PLAIN_INTERVAL_S,
    ) -> None:
        self._stream = stream
        self._prefix = prefix
        self._clock = clock
        self._interval_s = interval_s
        self._label = ""
        self._total: float | None = None
        self._unit = ""
        self._last_line = clock()

    def begin(self, label: str, total: float | None, unit: str) -> None:
        self._label, self._total, self._unit = label, total, unit
        self._last_line = self._clock()
        self._write(f"{label} started")

    def update(self, done: float) -> None:
        now = self._clock()
        if now - self._last_line < self._interval_s:
            return
        self._last_line = now
        of = f" of {self._total:,.0f}" if self._total else ""
        self._write(f"{self._label}: {done:,.0f}{of} {self._unit}")

    def end(self, summary: str) -> None:
        self._write(f"{self._label}: {summary}")

    def close(self) -> None:
        pass

    def _write(self, text: str) -> None:
        self._stream.write(f"{self._prefix}: {text}\n")
        self._stream.flush()


class TerminalSteps:
    """One rich bar per step; a finished step keeps its bar and shows its summary."""

    def __init__(self, stream: TextIO) -> None:
        self._progress = Progress(
            TextColumn("[bold]{task.description:<18}"),
            BarColumn(),
            TaskProgressColumn(),
            TextColumn("{task.fields[note]}"),
            TimeElapsedColumn(),
            console=Console(file=stream),
            transient=False,
        )
        self._task: TaskID | None = None
        self._unit = ""
        self._progress.start()

    def begin(self, label: str, total: float | None, unit: str) -> None:
        self._unit = unit
        self._task = self._progress.add_task(label, total=total, note="")

    def update(self, done: float) -> None:
        if self._task is not None:
            self._progress.update(self._task, completed=done, note=f"{done:,.0f} {self._unit}")

    def end(self, summary: str) -> None:
        if self._task is not None:
            task = self._task
            total = self._progress.tasks[task].total
            self._progress.update(task, completed=total or 1, total=total or 1, note=summary)
            self._task = None

    def close(self) -> None:
        self._progress.stop()


def make_step_progress(stream: TextIO, *, prefix: str = "bench") -> StepProgress:
    """Bars when ``stream`` is a terminal, plain lines otherwise."""
    if stream.isatty():
        return TerminalSteps(stream)
    return PlainSteps(stream, prefix=prefix)
