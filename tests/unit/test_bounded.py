"""Shutdown steps with a deadline (engine/bounded.py), in virtual time."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable
from typing import TypeVar

import pytest
from embedstream.engine.bounded import CANCEL_GRACE_S, bounded, in_daemon_thread
from embedstream.testing.virtual_loop import VirtualLoop

T = TypeVar("T")


def virtually(work: Awaitable[T]) -> T:
    loop = VirtualLoop()
    try:
        return loop.run_until_complete(work)
    finally:
        loop.close()


async def never() -> None:
    await asyncio.Event().wait()


def test_a_step_that_never_ends_is_given_up_named_in_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def run() -> tuple[bool, float]:
        loop = asyncio.get_running_loop()
        began = loop.time()
        return await bounded(never(), 5.0, "the consumer's stop"), loop.time() - began

    with caplog.at_level(logging.WARNING, logger="embedstream"):
        finished, took = virtually(run())
    assert not finished and took <= 5.0 + CANCEL_GRACE_S
    assert "the consumer's stop did not finish within 5.0s" in caplog.text


def test_a_step_that_ignores_its_cancellation_is_left_after_the_grace() -> None:
    async def stubborn() -> None:
        while True:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                continue  # a client library that swallows it

    async def run() -> tuple[bool, float]:
        loop = asyncio.get_running_loop()
        began = loop.time()
        return await bounded(stubborn(), 1.0, "stubborn"), loop.time() - began

    assert virtually(run()) == (False, 1.0 + CANCEL_GRACE_S)


def test_a_step_that_ends_in_time_returns_and_raises_what_it_raised() -> None:
    async def answers() -> None:
        await asyncio.sleep(0.5)

    async def fails() -> None:
        raise OSError("broker gone")

    assert virtually(bounded(answers(), 1.0, "answers")) is True
    with pytest.raises(OSError, match="broker gone"):
        virtually(bounded(fails(), 1.0, "fails"))


def test_cancelling_the_waiter_cancels_the_step() -> None:
    async def run() -> asyncio.Task[None]:
        step = asyncio.ensure_future(never())
        waiter = asyncio.ensure_future(bounded(step, 60.0, "step"))
        await asyncio.sleep(1)
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        await asyncio.sleep(0)
        return step

    assert virtually(run()).cancelled()


def test_a_daemon_thread_hands_back_its_result_and_its_failure() -> None:
    async def run() -> tuple[int, str]:
        value = await in_daemon_thread(lambda: 42)
        try:
            await in_daemon_thread(_raises)
        except ValueError as exc:
            return value, str(exc)
        return value, ""

    assert virtually(run()) == (42, "no spans")


def test_a_daemon_thread_that_blocks_holds_up_neither_the_wait_nor_the_exit() -> None:
    """`asyncio.to_thread` runs on the loop's executor, whose threads an ending `asyncio.run`
    joins: a blocked span export held the exit however its await was bounded."""
    release = threading.Event()

    async def run() -> bool:
        return await bounded(in_daemon_thread(release.wait), 2.0, "exporting the last spans")

    try:
        # The runner's close joins its loop's executor, as `asyncio.run` does: it returned.
        with asyncio.Runner(loop_factory=VirtualLoop) as runner:
            assert runner.run(run()) is False
    finally:
        release.set()


def _raises() -> None:
    raise ValueError("no spans")
