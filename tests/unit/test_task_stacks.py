"""SIGUSR1's task dump: every task by name, where its coroutine waits."""

from __future__ import annotations

import asyncio
import logging

import pytest
from embedstream.ops.task_stacks import log_task_stacks, task_stacks


async def waits_for_the_broker(gate: asyncio.Event) -> None:
    await gate.wait()


async def commit_loop(gate: asyncio.Event) -> None:
    await waits_for_the_broker(gate)


async def test_each_task_is_named_with_the_frame_it_waits_in(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gate = asyncio.Event()
    stuck = asyncio.create_task(commit_loop(gate), name="commit-loop")
    await asyncio.sleep(0)
    dump = task_stacks({stuck})
    assert dump.splitlines()[0] == "task commit-loop:"
    # The whole await chain, outermost first, down to the frame that waits.
    functions = [line.rsplit(" in ", 1)[1] for line in dump.splitlines()[1:]]
    assert functions[:3] == ["commit_loop", "waits_for_the_broker", "wait"]
    assert "test_task_stacks.py:" in dump
    with caplog.at_level(logging.WARNING, logger="embedstream.ops.task_stacks"):
        log_task_stacks()
    [record] = caplog.records
    assert "asyncio tasks (SIGUSR1)" in record.getMessage()
    assert "task commit-loop:" in record.getMessage()
    gate.set()
    await stuck
