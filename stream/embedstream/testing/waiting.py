"""Waiting in tests for state that signals nothing (fakes' fields, a server's answers)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable

POLL_S = 0.005


async def eventually(
    check: Callable[[], bool | Awaitable[bool]], timeout_s: float = 5.0, poll_s: float = POLL_S
) -> None:
    """Poll `check` (plain or async) until it holds; AssertionError naming it if it never does
    within `timeout_s`."""
    try:
        async with asyncio.timeout(timeout_s):
            while True:
                held = check()
                if inspect.isawaitable(held):
                    held = await held
                if held:
                    return
                await asyncio.sleep(poll_s)
    except TimeoutError:
        name = getattr(check, "__qualname__", repr(check))
        raise AssertionError(f"{name} did not hold within {timeout_s}s") from None
