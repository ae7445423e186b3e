"""Single key presses from a terminal, for ``embedstream top`` (``q`` quits, ``p`` toggles).

The terminal is put in cbreak mode (keys arrive without Enter, Ctrl-C still interrupts) and
restored on exit; keys are read by the event loop, never by a blocking call.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import termios
import tty
from collections.abc import Iterator
from typing import TextIO


@contextlib.contextmanager
def terminal_keys(stream: TextIO | None = None) -> Iterator[asyncio.Queue[str] | None]:
    """A queue of key presses from ``stream`` (stdin), or None when it is not a terminal."""
    source = sys.stdin if stream is None else stream
    try:
        fd = source.fileno()
    except (AttributeError, OSError, ValueError):
        yield None
        return
    if not os.isatty(fd):
        yield None
        return
    loop = asyncio.get_running_loop()
    keys: asyncio.Queue[str] = asyncio.Queue()

    def readable() -> None:
        try:
            data = os.read(fd, 64)
        except OSError:
            return
        for char in data.decode(errors="ignore"):
            keys.put_nowait(char)

    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd)
    loop.add_reader(fd, readable)
    try:
        yield keys
    finally:
        loop.remove_reader(fd)
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
