"""Where a batch job's outputs go, and how its progress is recorded with them.

A job's records, read again to write their outcomes, are tracked by a :class:`JobPartition`: a
partition state of the job's own, so the one engine path (outcomes, documents, the results
writer) writes them as it writes any record's, and each output names the job as its owner.
:class:`JobOutputsRouter` (around the processor's writer) sends those outputs to the job:

- at-least-once: written at once; the job's record notes its progress after them (a crash
  repeats at most what was written since);
- exactly-once: held by the job until a slice of its records has every outcome, then written
  in ONE transaction with the job's record noting that progress, on the transactional
  producer of the job's partition of the jobs topic (starting it fences the watcher that had
  the partition before). A crash repeats nothing visible.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from embedstream.kafka.client.protocols import TransactionalProducer
from embedstream.kafka.outputs.partitions import PartitionState
from embedstream.kafka.outputs.result_writer import Output, Writer
from embedstream.kafka.outputs.transactions import Fenced

log = logging.getLogger(__name__)

TXN_TIMEOUT_S = 60.0


@dataclass(eq=False)
class JobPartition(PartitionState):
    """A job's records, tracked like a partition's; with exactly-once, the outputs waiting for
    the job's next transaction."""

    job_id: str = ""
    staged: list[Output] = field(default_factory=list)


class JobOutputsRouter:
    """The processor's writer, but for outputs a job owns: those go to the job."""

    def __init__(self, inner: Writer, direct: Writer, exactly_once: bool) -> None:
        self._inner = inner
        self._direct = direct
        self._exactly_once = exactly_once

    async def write(self, output: Output) -> None:
        await self.write_many([output])

    async def write_many(self, outputs: Sequence[Output]) -> None:
        jobs = [o for o in outputs if isinstance(o.owner, JobPartition)]
        others = [o for o in outputs if not isinstance(o.owner, JobPartition)]
        if others:
            await self._inner.write_many(others)
        if not jobs:
            return
        if not self._exactly_once:
            await self._direct.write_many(jobs)
            return
        for output in jobs:
            owner = output.owner
            assert isinstance(owner, JobPartition)
            if owner.live:  # a job let go (its partition of the jobs topic lost) takes none
                owner.staged.append(output)


class JobCommits:
    """Writes job records (and, exactly-once, the outputs they commit) per partition of the
    jobs topic."""

    def __init__(
        self,
        direct: Writer,
        transactional: Callable[[int], TransactionalProducer] | None,
    ) -> None:
        """``transactional``: the producer of a partition of the jobs topic (exactly-once);
        None: at-least-once, written by ``direct``."""
        self._direct = direct
        self._make = transactional
        self._producers: dict[int, TransactionalProducer] = {}
        self._locks: dict[int, asyncio.Lock] = {}

    @property
    def exactly_once(self) -> bool:
        return self._make is not None

    async def fence(self, partition: int) -> None:
        """Exactly-once: start the partition's producer, which fences the previous watcher's."""
        if self._make is None or partition in self._producers:
            return
        producer = self._make(partition)
        try:
            await asyncio.wait_for(producer.start(), TXN_TIMEOUT_S)
        except BaseException:
            with contextlib.suppress(Exception):
                await producer.stop()
            raise
        self._producers[partition] = producer

    async def release(self, partition: int) -> None:
        producer = self._producers.pop(partition, None)
        if producer is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(producer.stop(), TXN_TIMEOUT_S)

    async def close(self) -> None:
        await asyncio.gather(*(self.release(p) for p in list(self._producers)))

    async def commit(self, partition: int, outputs: Sequence[Output]) -> None:
        """Write ``outputs`` (the job's record last): at-least-once in order, exactly-once in
        one transaction. Raises Fenced when the transaction failed (its outcome unknown: the
        partition is to be given up, and read again by its next owner)."""
        if self._make is None:
            await self._direct.write_many(outputs)
            return
        lock = self._locks.setdefault(partition, asyncio.Lock())
        async with lock:
            producer = self._producers.get(partition)
            if producer is None:
                raise Fenced(f"batch jobs partition {partition} is not held here")
            try:
                await asyncio.wait_for(_transaction(producer, outputs), TXN_TIMEOUT_S)
            except Exception as exc:
                await self.release(partition)
                raise Fenced(
                    f"batch jobs partition {partition}: transaction failed ({exc!r})"
                ) from exc


async def _transaction(producer: TransactionalProducer, outputs: Sequence[Output]) -> None:
    await producer.begin_transaction()
    try:
        sends = [await producer.send(o.topic, o.value, key=o.key, headers=o.headers,
                                     partition=o.partition) for o in outputs]  # fmt: skip
        for send in sends:
            await send
        await producer.commit_transaction()
    except BaseException:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(producer.abort_transaction(), 5.0)
        raise
