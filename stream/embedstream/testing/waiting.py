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


SETTLE_TURNS = 100


async def settled(turns: int = SETTLE_TURNS) -> None:
    """Yield to the event loop `turns` times, so every task that can go on without a timer,
    I/O or an event runs that many steps: what has still not happened afterwards is waiting
    on one of those. For claims that something does *not* happen among the in-memory fakes,
    where a fixed sleep would prove nothing on a slow machine."""
    for _ in range(turns):
        await asyncio.sleep(0)
