"""The shell of ``embedstream top``: poll /metrics of each target, redraw a frame.

All arithmetic and layout live in :mod:`embedstream.tools.top.model`; this module only fetches,
keeps the previous snapshot per target and writes frames. A target that cannot be scraped shows
as "down" in its row; nothing a target does stops the loop.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import dataclass
from datetime import datetime
from typing import TextIO
from urllib.parse import urlsplit, urlunsplit

import aiohttp

from embedstream.tools.top.model import (
    Snapshot,
    TargetView,
    compute_rates,
    parse_exposition,
    render_frame,
)

DEFAULT_TARGET = "http://127.0.0.1:9464"
DEFAULT_INTERVAL_S = 2.0
CLEAR_SCREEN = "\x1b[H\x1b[2J"  # cursor home, then clear the screen
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


def _write_frame(out: TextIO, lines: list[str], clear: bool, first: bool) -> None:
    body = "\n".join(lines) + "\n"
    if clear:
        out.write(CLEAR_SCREEN + body)
    else:
        out.write(body if first else "\n" + body)
    out.flush()


async def run_top(
    urls: list[str],
    interval_s: float,
    iterations: int | None,
    out: TextIO,
    clear: bool,
    *,
    timeout_s: float | None = None,
) -> int:
    """Draw a frame every ``interval_s`` seconds: ``iterations`` frames, or until cancelled.

    ``clear`` redraws in place with ANSI (for a terminal); otherwise frames are separated
    by a blank line. Each scrape times out after ``timeout_s`` (default: the interval,
    clamped to 1..10 s). Returns 0; cancellation (Ctrl-C) propagates as usual.
    """
    if interval_s < 0:
        raise ValueError(f"interval_s must not be negative, got {interval_s}")
    if iterations is not None and iterations < 0:
        raise ValueError(f"iterations must not be negative, got {iterations}")
    targets = [normalise_target(url) for url in urls]
    loop = asyncio.get_running_loop()
    previous: dict[str, _Scrape] = {}
    timeout = aiohttp.ClientTimeout(total=timeout_s or _timeout_s(interval_s))
    drawn = 0
    async with aiohttp.ClientSession(timeout=timeout) as session:
        while iterations is None or drawn < iterations:
            started = loop.time()
            scrapes = await asyncio.gather(*(_scrape(session, url) for url in targets))
            views: list[TargetView] = []
            for url, scrape in zip(targets, scrapes, strict=True):
                if scrape.snapshot is None:
                    views.append(TargetView(url, error=scrape.error))
                    continue
                rates = None
                earlier = previous.get(url)
                if earlier is not None and earlier.snapshot is not None:
                    elapsed = scrape.at - earlier.at
                    if elapsed > 0:
                        rates = compute_rates(earlier.snapshot, scrape.snapshot, elapsed)
                previous[url] = scrape
                views.append(TargetView(url, scrape.snapshot, rates))
            _write_frame(out, render_frame(views, datetime.now(), interval_s), clear, drawn == 0)
            drawn += 1
            if iterations is not None and drawn >= iterations:
                break
            await asyncio.sleep(max(0.0, interval_s - (loop.time() - started)))
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
        help="stop after N refreshes (default: run until Ctrl-C)",
    )
    parser.add_argument(
        "--no-clear",
        action="store_true",
        help="print frames one after another instead of redrawing the screen",
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
