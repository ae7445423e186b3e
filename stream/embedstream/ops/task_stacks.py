"""Where every asyncio task of the process is waiting, logged on request (SIGUSR1).

A processor that does not stop, or stops making progress, shows nothing in a thread dump but
the event loop in `select()`: its work is in tasks. `embedstream run` logs, on SIGUSR1, one
warning listing every task by name with its coroutine's frames (innermost last), and goes on.
"""

from __future__ import annotations

import asyncio
import logging
from types import FrameType
from typing import Any

log = logging.getLogger(__name__)

FRAMES_PER_TASK = 12


def task_stacks(tasks: set[asyncio.Task[object]] | None = None) -> str:
    """Each task's name, then its frames as `file:line in function`."""
    lines: list[str] = []
    for task in sorted(tasks if tasks is not None else asyncio.all_tasks(), key=_name):
        lines.append(f"task {_name(task)}:")
        frames = _await_chain(task)[-FRAMES_PER_TASK:]
        if not frames:
            lines.append("  (not started, or finishing)")
        for frame in frames:
            code = frame.f_code
            lines.append(f"  {code.co_filename}:{frame.f_lineno} in {code.co_name}")
    return "\n".join(lines)


def _await_chain(task: asyncio.Task[object]) -> list[FrameType]:
    """The frames from the task's coroutine down to what it waits on: `Task.get_stack` gives
    a suspended coroutine's outermost frame only, so follow what each one awaits."""
    frames: list[FrameType] = []
    awaited: Any = task.get_coro()
    while awaited is not None and len(frames) < 100:
        frame = _first(awaited, "cr_frame", "gi_frame", "ag_frame")
        if frame is not None:
            frames.append(frame)
        awaited = _first(awaited, "cr_await", "gi_yieldfrom", "ag_await")
    return frames


def _first(obj: object, *names: str) -> Any:
    for name in names:
        value = getattr(obj, name, None)
        if value is not None:
            return value
    return None


def log_task_stacks() -> None:
    tasks = asyncio.all_tasks()
    log.warning("%d asyncio tasks (SIGUSR1):\n%s", len(tasks), task_stacks(tasks))


def _name(task: asyncio.Task[object]) -> str:
    return task.get_name()
