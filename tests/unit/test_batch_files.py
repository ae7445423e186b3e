"""A job's file and its outputs (kafka/batchjobs/job_file.py, job_outputs.py): one line per
distinct input (the first asks for all), none for what the cache answers, the line as the sync
call's body; output and error lines looked up by custom id from files on disk."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator, Sequence

import orjson
from aiokafka import TopicPartition
from embedstream.core.lanes import BucketKey, InputLane, Priority
from embedstream.kafka.batchjobs.job_file import (
    LineBodies,
    Verdict,
    Wanted,
    custom_id_of,
    write_job_file,
)
from embedstream.kafka.batchjobs.job_outputs import JobOutputs
from embedstream.kafka.client.protocols import Record
from embedstream.kafka.outputs.partitions import PartitionState
from embedstream.kafka.outputs.work import Origin, WorkItem
from embedstream.testing.kafka import FakeRecord
from embedstream.wire import EmbedRequest

KEY = BucketKey(Priority.LOW, "m", "float", 8, user="u")


def _item(record: Record) -> WorkItem:
    text = (record.value or b"").decode()
    request = EmbedRequest(id=str(record.offset), text=text, dimensions=8, user="u")
    state = PartitionState(TopicPartition("t", 0), InputLane.LOW)
    return WorkItem(id=request.id, text=text, tokens=len(text.split()), request=request,
                    origin=Origin("t", 0, record.offset), raw=b"", priority=Priority.LOW,
                    partition=state, timestamp_ms=0, model="m",
                    encoding_format="float")  # fmt: skip


async def _slices(texts: Sequence[str]) -> AsyncIterator[list[Record]]:
    yield [FakeRecord("t", 0, o, None, t.encode()) for o, t in enumerate(texts[:2])]
    yield [FakeRecord("t", 0, o + 2, None, t.encode()) for o, t in enumerate(texts[2:])]


async def test_a_line_per_distinct_input_none_for_cache_hits() -> None:
    async def admit(record: Record) -> Verdict:
        return _item(record)

    async def cached(wanted: Sequence[Wanted]) -> set[str]:
        return {w.custom_id for w in wanted if w.text == "cached one"}

    out = io.BytesIO()
    bodies = LineBodies("base64", {"truncate": True})
    texts = ["alpha", "beta", "alpha", "cached one"]
    facts = await write_job_file(_slices(texts), admit, bodies, cached, out)
    lines = [orjson.loads(row) for row in out.getvalue().splitlines()]
    assert [line["custom_id"] for line in lines] == ["0", "1"]  # offset 2 asks as 0 does
    assert lines[0] == {
        "custom_id": "0", "method": "POST", "url": "/v1/embeddings",
        "body": {"model": "m", "encoding_format": "base64", "dimensions": 8, "truncate": True,
                 "user": "u", "input": "alpha"},
    }  # fmt: skip
    assert (facts.records, facts.inputs, facts.lines, facts.cached) == (4, 4, 2, 1)
    assert facts.firsts and custom_id_of(3, 2) == "3.2"


def test_output_lines_are_found_by_custom_id_whatever_file_they_are_in() -> None:
    outputs = JobOutputs()
    try:
        ok = outputs.new_file("out.jsonl")
        ok.write_bytes(
            orjson.dumps({"id": "a", "custom_id": "7", "response": {"status_code": 200,
                          "body": {"data": [{"index": 0, "embedding": [1.0]}]}}, "error": None})
            + b"\n\n"
        )  # fmt: skip
        bad = outputs.new_file("err.jsonl")
        bad.write_bytes(
            orjson.dumps({"custom_id": "8", "response": {"status_code": 400,
                          "body": {"error": {"message": "no"}}}, "error": None}) + b"\n"
            + orjson.dumps({"custom_id": "9.1", "response": None,
                            "error": {"code": "batch_expired", "message": "late"}}) + b"\n"
        )  # fmt: skip
        assert outputs.index(ok) == 1 and outputs.index(bad) == 2 and len(outputs) == 3
        answered, refused, late = outputs.get("7"), outputs.get("8"), outputs.get("9.1")
        assert answered is not None and answered.answered and answered.status == 200
        assert refused is not None and refused.status == 400
        assert late is not None and not late.answered and late.error_code == "batch_expired"
        assert outputs.get("10") is None
    finally:
        outputs.close()
    assert not ok.exists() and not bad.exists()
