"""What the consumption shells ask of the batch lane (`kafka/batchjobs/lane.BatchLane`), as
Protocols, so that the shells sit below the batch jobs that use them."""

from __future__ import annotations

import asyncio
from typing import Protocol

from embedstream.kafka.client.protocols import Record
from embedstream.kafka.outputs.document_runs import DocumentStart
from embedstream.kafka.outputs.partitions import PartitionState
from embedstream.kafka.outputs.work import WorkItem
from embedstream.wire import Failure
from embedstream.wire.document_events import DocumentTombstone


class PartitionJobs(Protocol):
    """The batch lane's part in a partition's hand-over."""

    async def load(self, state: PartitionState) -> bool: ...

    async def let_go(self, states: set[PartitionState] | None = None) -> None: ...

    def forget(self, state: PartitionState) -> None: ...


class BatchRoute(PartitionJobs, Protocol):
    """The batch lane's part in the fetch loop: the records and work it takes from the sync
    path, and the jobs it records after each fetch."""

    def claims(
        self,
        state: PartitionState,
        record: Record,
        verdict: WorkItem | DocumentStart | DocumentTombstone | Failure,
    ) -> bool: ...

    def warming(self, state: PartitionState) -> float | None: ...

    def diverts(self, item: WorkItem) -> bool: ...

    async def flush(self) -> None: ...

    async def run(self, stop: asyncio.Event) -> None: ...
