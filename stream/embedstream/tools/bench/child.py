"""A bench helper in a process of its own, driven over its stdin and stdout: the online callers
(`remote_callers`) and the flood's high publisher (`remote_publisher`), which in the bench's
own process waited for the drain's turns of the processor's event loop.

The protocol: the child sets up (plans, connects), prints ``ready``; reads the start, a
`time.monotonic()` value (one clock for every process on the machine); works until a ``stop``
line (or EOF: the parent is gone); prints one JSON line of figures and exits.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from embedstream.tools.bench import BenchError

READY = "ready"
STOP = "stop"
START_TIMEOUT_S = 30.0
# The figures' one line holds every answer's times: a long run of online callers passes the
# stream's default 64 KiB line limit many times over.
FIGURES_LINE_LIMIT = 256 * 1024 * 1024


async def stdin_lines() -> asyncio.StreamReader:
    """The child's side: its stdin as a stream of lines on its event loop."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    return reader


class BenchChild:
    """The parent's side: start the child, give it the start, stop it, read its figures."""

    def __init__(
        self,
        module: str,
        args: Sequence[str],
        what: str,
        *,
        env: Mapping[str, str] | None = None,
        figures_timeout_s: float = START_TIMEOUT_S,
    ) -> None:
        """``module``: run as ``python -m``; ``what``: whose process, in errors ("the online
        callers'"); ``figures_timeout_s``: how long it may take to answer a stop."""
        self._module = module
        self._args = list(args)
        self._what = what
        self._env = dict(env) if env is not None else None
        self._figures_timeout_s = figures_timeout_s
        self._process: asyncio.subprocess.Process | None = None

    async def __aenter__(self) -> BenchChild:
        self._process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", self._module, *self._args,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=self._env,
            limit=FIGURES_LINE_LIMIT,
        )  # fmt: skip
        assert self._process.stdout is not None
        line = await asyncio.wait_for(self._process.stdout.readline(), START_TIMEOUT_S)
        if line.decode().strip() != READY:
            await self._process.wait()
            raise BenchError(f"{self._what} process did not start: {line!r}")
        return self

    async def __aexit__(self, *exc: object) -> None:
        process = self._process
        if process is not None and process.returncode is None:
            process.kill()
            await process.wait()

    def begin(self, start: float) -> None:
        """Work from ``start``, a `time.monotonic()` value."""
        self._write(f"{start!r}\n")

    async def figures(self) -> Any:
        """Stop the work; the child's figures (its JSON line, decoded)."""
        self._write(f"{STOP}\n")
        process = self._process
        assert process is not None and process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), self._figures_timeout_s)
        await process.wait()
        if not line:
            raise BenchError(f"{self._what} process ended without its figures")
        return orjson.loads(line)

    def _write(self, text: str) -> None:
        assert self._process is not None and self._process.stdin is not None
        self._process.stdin.write(text.encode())
