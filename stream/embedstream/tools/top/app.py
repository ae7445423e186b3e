"""The shell of ``embedstream top``: poll /metrics of each target, redraw a frame.

Arithmetic lives in :mod:`embedstream.tools.top.readings`, layout in
:mod:`embedstream.tools.top.layout`; this module only fetches, keeps the previous snapshot per
target, and draws with rich (Live on a terminal, plain frames otherwise). A target that cannot
be scraped shows as "down" in its row; nothing a target does stops the loop.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import sys
from dataclasses import dataclass
from datetime import datetime
from typing import TextIO
from urllib.parse import urlsplit, urlunsplit

import aiohttp
from rich.console import Console
from rich.live import Live

from embedstream.tools.top.keypresses import terminal_keys
from embedstream.tools.top.layout import Fitted, Screen
from embedstream.tools.top.rates import TargetView, compute_rates
from embedstream.tools.top.readings import Snapshot, parse_exposition

DEFAULT_TARGET = "http://127.0.0.1:9464"
DEFAULT_INTERVAL_S = 2.0
MIN_TIMEOUT_S = 1.0
MAX_TIMEOUT_S = 10.0


def normalise_target(target: str) -> str:
    """``host:port``, ``:port``, ``port`` or a URL -> ``http://host:port/metrics``.

    A URL with a path other than ``/`` keeps it; the host defaults to 127.0.0.1.
    """
    text = target.strip()
    if not text:
        raise ValueError("empty target")
    if text.isdigit():
        text = "127.0.0.1:" + text
    elif text.startswith(":"):
        text = "127.0.0.1" + text
    if "://" not in text:
        text = "http://" + text
    parts = urlsplit(text)
    if not parts.netloc:
        raise ValueError(f"not a host:port or URL: {target!r}")
    path = "/metrics" if parts.path in ("", "/") else parts.path
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


@dataclass(frozen=True, slots=True)
class _Scrape:
    snapshot: Snapshot | None
    at: float  # loop time when the response (or the failure) arrived
    error: str | None = None


def _describe(exc: BaseException) -> str:
    """A few words for the row of a target that is down."""
    if isinstance(exc, TimeoutError):
        return "timeout"
    if isinstance(exc, aiohttp.ClientResponseError):
        return f"HTTP {exc.status}"
    if isinstance(exc, aiohttp.ClientConnectionError | OSError):
        return "unreachable"
    if isinstance(exc, aiohttp.ClientError):
        return type(exc).__name__
    return "bad exposition"


async def _scrape(session: aiohttp.ClientSession, url: str) -> _Scrape:
    loop = asyncio.get_running_loop()
    try:
        async with session.get(url) as response:
            response.raise_for_status()
            text = await response.text()
        snapshot = parse_exposition(text)
    except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
        return _Scrape(None, loop.time(), _describe(exc))
    return _Scrape(snapshot, loop.time())


def _timeout_s(interval_s: float) -> float:
    return min(max(interval_s, MIN_TIMEOUT_S), MAX_TIMEOUT_S)


class Poller:
    """Scrapes every target at once and pairs each scrape with the previous one for rates."""

    def __init__(self, session: aiohttp.ClientSession, targets: list[str]) -> None:
        self._session = session
        self._targets = targets
        self._previous: dict[str, _Scrape] = {}

    async def poll(self) -> list[TargetView]:
        scrapes = await asyncio.gather(*(_scrape(self._session, url) for url in self._targets))
        views: list[TargetView] = []
        for url, scrape in zip(self._targets, scrapes, strict=True):
            if scrape.snapshot is None:
                views.append(TargetView(url, error=scrape.error))
                continue
            rates = None
            earlier = self._previous.get(url)
            if earlier is not None and earlier.snapshot is not None:
                elapsed = scrape.at - earlier.at
                if elapsed > 0:
                    rates = compute_rates(earlier.snapshot, scrape.snapshot, elapsed)
            self._previous[url] = scrape
            views.append(TargetView(url, scrape.snapshot, rates))
        return views


async def _next_key(keys: asyncio.Queue[str] | None, timeout_s: float) -> str | None:
    """The next key pressed within ``timeout_s``, or None (also when there are no keys)."""
    if keys is None:
        await asyncio.sleep(timeout_s)
        return None
    try:
        return await asyncio.wait_for(keys.get(), timeout_s)
    except TimeoutError:
        return None


async def run_top(
    urls: list[str],
    interval_s: float,
    iterations: int | None,
    out: TextIO,
    clear: bool,
    *,
    timeout_s: float | None = None,
    keys: asyncio.Queue[str] | None = None,
    width: int | None = None,
) -> int:
    """Draw a frame every ``interval_s`` seconds: ``iterations`` frames, or until ``q``.

    ``clear`` redraws in place on a full screen (rich Live) and reads keys from ``keys`` (by
    default the terminal's, when stdin is one): ``q`` quits, ``p`` toggles the partitions.
    Otherwise frames are printed one after another, separated by a blank line, laid out for
    ``width`` columns (default: the terminal's, or 80). Each scrape times out after
    ``timeout_s`` (default: the interval, clamped to 1..10 s). Returns 0; cancellation
    (Ctrl-C) propagates as usual.
    """
    if interval_s < 0:
        raise ValueError(f"interval_s must not be negative, got {interval_s}")
    if iterations is not None and iterations < 0:
        raise ValueError(f"iterations must not be negative, got {iterations}")
    targets = [normalise_target(url) for url in urls]
    console = Console(file=out, width=width, highlight=False, force_terminal=clear or None)
    timeout = aiohttp.ClientTimeout(total=timeout_s or _timeout_s(interval_s))
    async with aiohttp.ClientSession(timeout=timeout) as session:
        poller = Poller(session, targets)
        if not clear:
            return await _print_frames(poller, console, interval_s, iterations)
        with contextlib.ExitStack() as stack:
            if keys is None:
                keys = stack.enter_context(terminal_keys())
            live = stack.enter_context(
                Live(
                    console=console,
                    screen=True,
                    auto_refresh=False,
                    redirect_stdout=False,
                    redirect_stderr=False,
                )
            )
            return await _live(poller, live, keys, interval_s, iterations)


async def _print_frames(
    poller: Poller, console: Console, interval_s: float, iterations: int | None
) -> int:
    loop = asyncio.get_running_loop()
    drawn = 0
    while iterations is None or drawn < iterations:
        started = loop.time()
        screen = Screen(await poller.poll(), datetime.now(), interval_s)
        if drawn:
            console.print()
        console.print(Fitted(screen))
        drawn += 1
        if iterations is not None and drawn >= iterations:
            break
        await asyncio.sleep(max(0.0, interval_s - (loop.time() - started)))
    return 0


async def _live(
    poller: Poller,
    live: Live,
    keys: asyncio.Queue[str] | None,
    interval_s: float,
    iterations: int | None,
) -> int:
    loop = asyncio.get_running_loop()
    drawn = 0
    show_partitions = False
    while iterations is None or drawn < iterations:
        started = loop.time()
        views = await poller.poll()
        screen = Screen(views, datetime.now(), interval_s, show_partitions, keys is not None)
        live.update(Fitted(screen), refresh=True)
        drawn += 1
        if iterations is not None and drawn >= iterations:
            break
        while (left := interval_s - (loop.time() - started)) > 0:
            key = await _next_key(keys, left)
            if key in ("q", "Q"):
                return 0
            if key in ("p", "P"):
                show_partitions = not show_partitions
                screen = dataclasses.replace(screen, show_partitions=show_partitions)
                live.update(Fitted(screen), refresh=True)
    return 0


def add_cli_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``embedstream top``; pair with :func:`run_top_from_args`."""
    parser.add_argument(
        "targets",
        nargs="*",
        default=[DEFAULT_TARGET],
        type=_target,
        metavar="TARGET",
        help="processor ops endpoints, host:port or URL (default: %(default)s)",
    )
    parser.add_argument(
        "--interval",
        type=_positive_float,
        default=DEFAULT_INTERVAL_S,
        help="seconds between refreshes (default: %(default)s)",
    )
    parser.add_argument(
        "--iterations",
        type=_positive_int,
        default=None,
        help="stop after N refreshes (default: run until q or Ctrl-C)",
    )
    parser.add_argument(
        "--no-clear",
        action="store_true",
        help="print frames one after another instead of redrawing the screen "
        "(always so when stdout is not a terminal)",
    )


async def run_top_from_args(ns: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run with options from :func:`add_cli_arguments`; redraws only when ``out`` is a TTY."""
    stream = sys.stdout if out is None else out
    clear = not ns.no_clear and stream.isatty()
    return await run_top(list(ns.targets), ns.interval, ns.iterations, stream, clear)


def _target(text: str) -> str:
    try:
        return normalise_target(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value
