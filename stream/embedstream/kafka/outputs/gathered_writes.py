"""Outputs that many callers write one at a time, gathered into record batches.

A failed call's items each take their own path out (a retry record or a dead letter, one
coroutine an item, all started in the same turn of the event loop). Written one `send()`
each, a 2,048-input call's retries were 2,048 concurrent sends contending for the same
partitions' open batches (see `DirectWriter`). Here the outputs handed over in one turn go
out together through the writer's `write_many`, and each caller returns once its own batch
is written; the writer's guarantees (acknowledged, or staged in the partition's
transaction) are the same as for a lone write. A `write_many` that wrote some outputs and not
others says which (`NotAllWritten`): only the callers of those fail. Failing them all left
items whose retry record was written unfinished, so a restart wrote it again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")


class NotAllWritten(Exception):
    """Raised by a `write_many` that did not write every output: `failures` holds, by position
    in the outputs it was given, what each unwritten one's write raised."""

    def __init__(self, failures: Mapping[int, BaseException]) -> None:
        first = next(iter(failures.values()), None)
        super().__init__(f"{len(failures)} outputs not written ({first!r})")
        self.failures = dict(failures)


class GatheredWrites(Generic[T]):
    def __init__(self, write_many: Callable[[Sequence[T]], Awaitable[None]]) -> None:
        self._write_many = write_many
        self._pending: list[tuple[T, asyncio.Future[None]]] = []
        self._writing: set[asyncio.Task[None]] = set()

    async def write(self, output: T) -> None:
        """Returns once `output` is written with the others handed over in this turn; raises
        what their `write_many` raised about this one."""
        loop = asyncio.get_running_loop()
        if not self._pending:
            loop.call_soon(self._flush)  # after every caller already scheduled in this turn
        done: asyncio.Future[None] = loop.create_future()
        self._pending.append((output, done))
        await done

    @property
    def writing(self) -> int:
        """Gathered batches still being written."""
        return len(self._writing)

    def _flush(self) -> None:
        # A caller cancelled before its batch went out (a bounded shutdown abandoning its
        # call) does not have it written: its item stays unfinished, as with a lone write.
        pending = [(output, done) for output, done in self._pending if not done.done()]
        self._pending = []
        if not pending:
            return
        task = asyncio.create_task(self._write(pending))
        self._writing.add(task)
        task.add_done_callback(self._writing.discard)

    async def _write(self, pending: list[tuple[T, asyncio.Future[None]]]) -> None:
        try:
            await self._write_many([output for output, _ in pending])
        except asyncio.CancelledError:
            for _, done in pending:
                done.cancel()
            raise
        except NotAllWritten as exc:  # only the callers of the unwritten ones fail
            for position, (_, done) in enumerate(pending):
                _settle(done, exc.failures.get(position))
        except Exception as exc:  # each caller gets what a lone write would have raised
            for _, done in pending:
                _settle(done, exc)
        else:
            for _, done in pending:
                _settle(done, None)


def _settle(done: asyncio.Future[None], failure: BaseException | None) -> None:
    if done.done():  # its caller was cancelled meanwhile
        return
    if failure is None:
        done.set_result(None)
    else:
        done.set_exception(failure)
