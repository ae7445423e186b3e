"""Steps of a shutdown, each with a deadline: one that does not finish in time is given up and
named in the log, so a stop ends within its budget whatever a client library waits for.

A member that logged "received SIGTERM" once went silent for a minute: after the drain it
waited, without a bound, for something (a client's close, a commit, a rebalance in progress).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

# How long a step given up is let unwind after its cancellation (its finally blocks).
CANCEL_GRACE_S = 1.0


async def bounded(step: Awaitable[object], seconds: float, what: str) -> bool:
    """Await `step` for at most `seconds`: True if it ended (what it raised is raised; being
    cancelled is an end). If not, it is cancelled, given CANCEL_GRACE_S to unwind, logged as
    `what`, and False."""
    task = asyncio.ensure_future(step)
    try:
        await asyncio.wait({task}, timeout=max(0.0, seconds))
        if task.done():
            if not task.cancelled():  # (a task cancelled to end it, e.g. a loop, has ended)
                task.result()
            return True
        task.cancel()
        await asyncio.wait({task}, timeout=CANCEL_GRACE_S)
    except asyncio.CancelledError:
        task.cancel()
        raise
    task.add_done_callback(_retrieve)  # whenever it ends: nothing logged as never retrieved
    log.warning("%s did not finish within %.1fs; going on without it", what, seconds)
    return False


class Budget:
    """Time the steps of a shutdown share once `start` is called: each may take what is left,
    and at least `least_s` whatever the steps before it took."""

    def __init__(self, seconds: float, least_s: float) -> None:
        self._seconds = seconds
        self._least_s = least_s
        self._until: float | None = None

    def start(self) -> None:
        self._until = asyncio.get_running_loop().time() + self._seconds

    def step_s(self) -> float:
        """How long the next step may take (before `start`: the whole budget)."""
        if self._until is None:
            return self._seconds
        return max(self._least_s, self._until - asyncio.get_running_loop().time())


def in_daemon_thread(work: Callable[[], T]) -> asyncio.Future[T]:
    """`work` on a thread of its own that never holds up the exit (unlike `to_thread`, whose
    executor's threads an exiting `asyncio.run` waits for), as a future of its result."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def run() -> None:
        try:
            result = work()
        except BaseException as exc:  # handed to the awaiting side, never lost
            _hand_over(loop, _settle_failed, future, exc)
        else:
            _hand_over(loop, _settle, future, result)

    threading.Thread(target=run, name=getattr(work, "__qualname__", "work"), daemon=True).start()
    return future


def _hand_over(loop: asyncio.AbstractEventLoop, settle: Callable[..., None], *args: object) -> None:
    with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
        loop.call_soon_threadsafe(settle, *args)


def _settle(future: asyncio.Future[T], result: T) -> None:
    if not future.done():
        future.set_result(result)


def _settle_failed(future: asyncio.Future[T], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)


def _retrieve(task: asyncio.Future[object]) -> None:
    if not task.cancelled():
        task.exception()
