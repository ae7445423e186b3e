"""Outputs handed over one at a time in the same turn of the loop go out as one write_many."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from embedstream.kafka.gathered import GatheredWrites


class Recorder:
    def __init__(self, fail: Exception | None = None) -> None:
        self.batches: list[list[int]] = []
        self.fail = fail
        self.release = asyncio.Event()
        self.release.set()
        self.called = asyncio.Event()  # a batch has reached the writer

    async def write_many(self, outputs: Sequence[int]) -> None:
        self.batches.append(list(outputs))
        self.called.set()
        await self.release.wait()
        if self.fail is not None:
            raise self.fail


async def test_writes_of_one_turn_are_one_batch_in_order() -> None:
    recorder = Recorder()
    gathered: GatheredWrites[int] = GatheredWrites(recorder.write_many)
    await asyncio.gather(*(gathered.write(n) for n in range(2048)))
    assert recorder.batches == [list(range(2048))]
    await gathered.write(5000)  # a later turn: a batch of its own
    assert recorder.batches[1:] == [[5000]]


async def test_a_caller_returns_only_once_its_batch_is_written() -> None:
    recorder = Recorder()
    recorder.release.clear()
    gathered: GatheredWrites[int] = GatheredWrites(recorder.write_many)
    writes = asyncio.gather(*(gathered.write(n) for n in range(3)))
    await recorder.called.wait()
    assert recorder.batches == [[0, 1, 2]] and not writes.done() and gathered.writing == 1
    recorder.release.set()
    await writes
    assert gathered.writing == 0


async def test_a_failed_batch_fails_every_caller_of_it() -> None:
    recorder = Recorder(fail=OSError("broker gone"))
    gathered: GatheredWrites[int] = GatheredWrites(recorder.write_many)
    outcomes = await asyncio.gather(*(gathered.write(n) for n in range(4)), return_exceptions=True)
    assert [type(o) for o in outcomes] == [OSError] * 4


async def test_a_cancelled_caller_leaves_the_others_written() -> None:
    recorder = Recorder()
    recorder.release.clear()
    gathered: GatheredWrites[int] = GatheredWrites(recorder.write_many)
    first = asyncio.create_task(gathered.write(1))
    second = asyncio.create_task(gathered.write(2))
    await recorder.called.wait()
    first.cancel()
    recorder.release.set()
    await second
    with pytest.raises(asyncio.CancelledError):
        await first
    assert recorder.batches == [[1, 2]]


async def test_a_caller_cancelled_before_the_flush_is_not_written() -> None:
    recorder = Recorder()
    gathered: GatheredWrites[int] = GatheredWrites(recorder.write_many)
    gone = asyncio.create_task(gathered.write(1))
    kept = asyncio.create_task(gathered.write(2))
    await asyncio.sleep(0)  # both handed over, the flush not run yet
    gone.cancel()
    await kept
    assert recorder.batches == [[2]] and gone.cancelled()
