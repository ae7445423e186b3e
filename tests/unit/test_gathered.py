"""Outputs handed over one at a time in the same turn of the loop go out as one write_many."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from embedstream.kafka.outputs.gathered_writes import GatheredWrites, NotAllWritten


class Recorder:
    def __init__(self, fail: Exception | None = None, refuse_odd: bool = False) -> None:
        self.batches: list[list[int]] = []
        self.fail = fail
        self.refuse_odd = refuse_odd  # odd outputs are not written, the others are
        self.release = asyncio.Event()
        self.release.set()
        self.called = asyncio.Event()  # a batch has reached the writer

    async def write_many(self, outputs: Sequence[int]) -> None:
        self.batches.append(list(outputs))
        self.called.set()
        await self.release.wait()
        if self.fail is not None:
            raise self.fail
        if self.refuse_odd:
            odd = {i: OSError(f"{n} refused") for i, n in enumerate(outputs) if n % 2}
            if odd:
                raise NotAllWritten(odd)


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


async def test_only_the_callers_whose_outputs_were_not_written_fail() -> None:
    """Failing them all left items whose output was written unfinished: after a restart their
    retry records were written a second time."""
    gathered: GatheredWrites[int] = GatheredWrites(Recorder(refuse_odd=True).write_many)
    outcomes = await asyncio.gather(*(gathered.write(n) for n in range(4)), return_exceptions=True)
    assert outcomes[0] is None and outcomes[2] is None
    assert [str(o) for o in outcomes[1::2]] == ["1 refused", "3 refused"]


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
