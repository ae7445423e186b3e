"""Where lost requests went, for a chaos test's failure message.

A verdict of "lost 310" says commits moved past requests without a visible outcome, not which
ones or why. This reads the topics again and says, per input partition, the offsets of the lost
requests beside the group's committed offset, whether their results exist in the results topic
when read uncommitted (written in transactions that aborted or never ended), and the members'
log lines about transactions, fences and rebalances: enough to tell a commit that ran ahead of
its outputs from outputs that were written and then hidden.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from contextlib import aclosing
from pathlib import Path

import orjson
from aiokafka import TopicPartition
from embedstream.kafka.client.admin import topic_names
from embedstream.kafka.client.clients import consumer_for, partitions_of
from embedstream.kafka.client.reader import read_topics

from tests.integration.helpers import group_offsets

# Log lines worth seeing beside the offsets (the rest is traffic).
TELLING = (
    "giving up", "transaction", "fenced", "rebalance", "partitions assigned", "partitions revoked",
    "committed offset", "unfinished", "ERROR", "Traceback",
)  # fmt: skip
MAX_LOG_LINES = 40


async def diagnose_lost(
    bootstrap: str, prefix: str, group: str, lost: Iterable[str], logs: Sequence[Path] = ()
) -> str:
    lost_ids = set(lost)
    if not lost_ids:
        return "nothing lost"
    names = topic_names(prefix)
    where: dict[str, list[tuple[str, int, int, int]]] = defaultdict(list)
    async with aclosing(read_topics(bootstrap, list(names.requests), timeout_s=60)) as records:
        async for r in records:
            rid = _request_id(r.value)
            if rid in lost_ids:
                where[rid].append((r.topic, r.partition, r.offset, r.timestamp_ms))
    hidden = await _uncommitted_results(bootstrap, names.results, lost_ids)
    committed = await group_offsets(bootstrap, group)
    lines = [f"lost {len(lost_ids)}; {len(hidden)} of them have a result in an uncommitted read"]
    if still_open := await open_transactions(bootstrap, names.results):
        lines.append(f"  transactions still open on {still_open} (records above the LSO)")
    lines += _by_partition(where, committed)
    lines += _telling_lines(logs)
    return "\n".join(lines)


async def open_transactions(bootstrap: str, topic: str) -> dict[str, int]:
    """The partitions of ``topic`` whose last stable offset is below the high watermark, with
    how far: a transaction still open there hides every record after its first one from a
    committed read, results of transactions committed since included."""
    ends: list[dict[TopicPartition, int]] = []
    for isolation in ("read_committed", "read_uncommitted"):
        consumer = consumer_for(bootstrap, enable_auto_commit=False, isolation_level=isolation)
        await consumer.start()
        try:
            tps = sorted(await partitions_of(consumer, topic), key=lambda tp: tp.partition)
            ends.append(await consumer.end_offsets(tps))
        finally:
            await consumer.stop()
    stable, high = ends
    ordered = sorted(high, key=lambda tp: tp.partition)
    return {f"{tp.topic}-{tp.partition}": high[tp] - stable[tp]
            for tp in ordered if stable[tp] < high[tp]}  # fmt: skip


def _by_partition(
    where: dict[str, list[tuple[str, int, int, int]]], committed: dict[TopicPartition, int]
) -> list[str]:
    spans: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
    for copies in where.values():
        for topic, partition, offset, stamp in copies:
            spans[(topic, partition)].append((offset, stamp))
    lines = []
    for (topic, partition), found in sorted(spans.items()):
        offsets = sorted(o for o, _ in found)
        stamps = sorted(s for _, s in found)
        lines.append(
            f"  {topic}-{partition}: {len(offsets)} lost at offsets {offsets[0]}..{offsets[-1]}"
            f" (written {stamps[0]}..{stamps[-1]} ms), committed offset"
            f" {committed.get(TopicPartition(topic, partition))}"
        )
    return lines


async def _uncommitted_results(bootstrap: str, results: str, lost_ids: set[str]) -> set[str]:
    found: set[str] = set()
    reading = read_topics(bootstrap, [results], timeout_s=60, isolation_level="read_uncommitted")
    async with aclosing(reading) as records:
        async for r in records:
            rid = r.key.decode(errors="replace") if r.key else None
            if rid in lost_ids:
                found.add(rid)
    return found


def _telling_lines(logs: Sequence[Path]) -> list[str]:
    lines: list[str] = []
    for path in logs:
        if not path.exists():
            continue
        picked = [
            line for line in path.read_text(errors="replace").splitlines()
            if any(word in line for word in TELLING)
        ]  # fmt: skip
        lines.append(f"--- {path.name}: {len(picked)} telling lines, the last {MAX_LOG_LINES}")
        lines += picked[-MAX_LOG_LINES:]
    return lines


def _request_id(value: bytes | None) -> str | None:
    try:
        doc = orjson.loads(value or b"")
    except orjson.JSONDecodeError:
        return None
    rid = doc.get("id") if isinstance(doc, dict) else None
    return rid if isinstance(rid, str) else None
