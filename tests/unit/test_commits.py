from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiokafka.errors import CommitFailedError
from embedstream.core.offsets import PartitionOffsets
from embedstream.kafka.client.protocols import TransactionalProducer
from embedstream.kafka.consumption.commits import OffsetCommitter
from embedstream.kafka.outputs.transactions import Fenced, PartitionTransactions


class FakeConsumer:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.commits: list[dict[Any, int]] = []

    async def commit(self, offsets: Mapping[Any, int]) -> None:
        if self.fail:
            raise CommitFailedError("rebalancing")
        self.commits.append(dict(offsets))


def trackers() -> dict[str, PartitionOffsets]:
    done, busy, idle = PartitionOffsets(), PartitionOffsets(), PartitionOffsets()
    for offset in range(3):
        done.track(offset)
        done.complete(offset)
        busy.track(offset)
    busy.complete(0)
    return {"done": done, "busy": busy, "idle": idle}


async def test_commits_explicit_safe_offsets_once() -> None:
    consumer, tracked = FakeConsumer(), trackers()
    committer = OffsetCommitter(consumer, tracked, None)
    await committer.commit(tracked)
    await committer.commit(tracked)  # nothing moved: nothing sent
    assert consumer.commits == [{"done": 3, "busy": 1}]


async def test_a_commit_refused_during_a_rebalance_is_retried_later() -> None:
    consumer, tracked = FakeConsumer(fail=True), trackers()
    committer = OffsetCommitter(consumer, tracked, None)
    await committer.commit(tracked)  # no exception escapes
    consumer.fail = False
    await committer.commit(tracked)
    assert consumer.commits == [{"done": 3, "busy": 1}]


def _no_producer(transactional_id: str) -> TransactionalProducer:
    raise AssertionError("a commit never makes a producer")


class FencedTransactions(PartitionTransactions):
    def __init__(self) -> None:
        super().__init__("g", _no_producer)

    async def commit(self, tp: Any, offset: int) -> bool:
        raise Fenced(str(tp))


async def test_a_fenced_partition_is_reported_lost() -> None:
    committer = OffsetCommitter(FakeConsumer(), trackers(), FencedTransactions())
    assert await committer.commit(["done"]) == {"done"}
