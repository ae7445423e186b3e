"""One object per assigned partition: its offsets, lag, pause state and lane.

A partition assigned again (after a revoke) gets a new :class:`PartitionState`; work read under
the old one still points at the old object, which is dead, so its late completions are ignored
without any generation counters to keep in step.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from aiokafka import TopicPartition

from embedstream.core.chunk_ids import ChunkCounts
from embedstream.core.document_versions import DocumentOrder
from embedstream.core.lanes import InputLane, Priority
from embedstream.core.offsets import PartitionOffsets

# Document events waiting behind an earlier one of their doc_id, per partition: far above what
# backpressure lets in (every waiting event is a held, uncommitted record).
MAX_WAITING_DOCUMENTS = 1_000_000


@dataclass(eq=False)
class PartitionState:
    tp: TopicPartition
    input_lane: InputLane  # what its topic feeds: high, low or retry (the lag metrics' label)
    on_progress: Callable[[], None] = lambda: None
    offsets: PartitionOffsets = field(default_factory=PartitionOffsets)
    lag: int = 0  # high watermark minus position
    paused: bool = False
    handing_off: bool = False  # being revoked: read nothing more from it
    live: bool = True  # False once revoked or lost
    # Exactly-once: the committed offset read after this member's producer fenced the previous
    # owner. Records below it were committed by that owner (perhaps after our consumer read its
    # position) and are skipped, not done twice. None until known: nothing is admitted before.
    floor: int | None = 0
    # Chunks of documents read here and not yet finished: backpressure counts them as items.
    chunks_held: int = 0
    # The document versions and tombstones running, and those waiting behind one of their doc_id.
    documents: DocumentOrder[object] = field(
        default_factory=lambda: DocumentOrder(MAX_WAITING_DOCUMENTS)
    )
    # With a chunk changelog: its documents' chunk counts, loaded before anything is read.
    chunk_counts: ChunkCounts | None = None

    @property
    def lane(self) -> Priority:
        """The lane its lag feeds (the retry topic counts as low: mostly bulk)."""
        return self.input_lane.priority

    def complete(self, offset: int) -> None:
        """The outcome of the record at `offset` is safely written."""
        if self.live:
            self.offsets.complete(offset)
            self.on_progress()

    def complete_all(self, offsets: list[int]) -> None:
        """`complete` for each of ``offsets`` (a call's results read here), at once."""
        if self.live:
            self.offsets.complete_all(offsets)
            self.on_progress()


class Assignment:
    """The partitions this member owns now."""

    def __init__(self, lane_of: Callable[[str], InputLane]) -> None:
        self._lane_of = lane_of
        self.progress = asyncio.Event()  # set whenever an item of ours finishes
        self._states: dict[TopicPartition, PartitionState] = {}

    def __iter__(self) -> Iterator[PartitionState]:
        return iter(list(self._states.values()))

    def __len__(self) -> int:
        return len(self._states)

    def __contains__(self, tp: object) -> bool:
        return tp in self._states

    def get(self, tp: TopicPartition) -> PartitionState | None:
        return self._states.get(tp)

    def add(self, tp: TopicPartition) -> PartitionState:
        old = self._states.get(tp)
        if old is not None:
            old.live = False
        state = PartitionState(tp, self._lane_of(tp.topic), self.progress.set)
        self._states[tp] = state
        return state

    def remove(self, tp: TopicPartition) -> PartitionState | None:
        state = self._states.pop(tp, None)
        if state is not None:
            state.live = False
        return state

    def offsets(self) -> Mapping[TopicPartition, PartitionOffsets]:
        """A live view: each assigned partition's offset tracker."""
        return _OffsetsView(self._states)

    @property
    def held(self) -> int:
        """Records read but not finished: buffered, waiting, in flight or being written."""
        return sum(s.offsets.pending + s.chunks_held for s in self._states.values())

    @property
    def held_bytes(self) -> int:
        return sum(state.offsets.pending_bytes for state in self._states.values())

    def pending_in(self, tps: set[TopicPartition]) -> int:
        return sum(s.offsets.pending + s.chunks_held for tp, s in self._states.items() if tp in tps)

    def lag(self) -> int:
        return sum(state.lag for state in self._states.values())

    def lag_of(self, lane: Priority) -> int:
        return sum(state.lag for state in self._states.values() if state.lane is lane)

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, state in self._states.items() if state.paused}

    def fencing(self) -> set[TopicPartition]:
        """Exactly-once partitions whose floor is not known yet (their fence is going up)."""
        return {tp for tp, state in self._states.items() if state.floor is None}


class _OffsetsView(Mapping[TopicPartition, PartitionOffsets]):
    def __init__(self, states: Mapping[TopicPartition, PartitionState]) -> None:
        self._states = states

    def __getitem__(self, tp: TopicPartition) -> PartitionOffsets:
        return self._states[tp].offsets

    def __iter__(self) -> Iterator[TopicPartition]:
        return iter(list(self._states))

    def __len__(self) -> int:
        return len(self._states)
