"""Running `embedstream` as a user does: a subprocess, its exit status and both streams."""

from __future__ import annotations

import asyncio
import os
import sys


async def embedstream(
    *args: str, stdin: bytes | None = None, env: dict[str, str] | None = None, limit_s: float = 120
) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "embedstream.cli",
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin), limit_s)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()
