"""The batch lane's input side against the in-memory Kafka (kafka/batchjobs/former.py, lane.py,
records.py): records join their stream's job, which is recorded before their offsets are done;
jobs are cut at the limits, at their form time and when a stream's model changes; a new owner
reads its partition's jobs (records in them are done at once, a job left forming is closed);
the adaptive rule and its warm-up on a fake clock."""

from __future__ import annotations

import random

import orjson
from aiokafka import TopicPartition
from embedstream.core.batch_jobs import JobLimits, JobOffsets, JobState
from embedstream.core.batch_routing import BatchRouting
from embedstream.core.lanes import InputLane, Priority
from embedstream.kafka.batchjobs.former import JobFormer
from embedstream.kafka.batchjobs.lane import BatchLane
from embedstream.kafka.batchjobs.records import JobsReader, offsets_of
from embedstream.kafka.client.topics import TopicNames
from embedstream.kafka.outputs.partitions import PartitionState
from embedstream.kafka.outputs.result_writer import DirectWriter, ResultWriter
from embedstream.kafka.outputs.work import Origin, WorkItem
from embedstream.testing.clock import FakeClock
from embedstream.testing.kafka import FakeCluster, FakeProducer, FakeRecord
from embedstream.wire import EmbedRequest
from embedstream.wire.batch_jobs import JobRecord, JobStream, decode_job

LOW, JOBS, GROUP, MODEL = "low", "jobs", "g", "m"
NAMES = TopicNames(("high",), (LOW,), "retry", "results", "dlq", batch_jobs=JOBS)


class Parts:
    def __init__(self, cluster: FakeCluster | None = None, **limits: object) -> None:
        self.cluster = cluster or FakeCluster({LOW: 2, JOBS: 4, "results": 1})
        self.clock = FakeClock()
        sink = ResultWriter(DirectWriter(FakeProducer(self.cluster), self.clock), NAMES, self.clock)
        direct = DirectWriter(FakeProducer(self.cluster), self.clock)
        job_limits = JobLimits(**{"form_s": 5.0, **limits})  # type: ignore[arg-type]
        self.former = JobFormer(sink, JOBS, GROUP, job_limits, self.clock, direct)
        self.reader = JobsReader(self.cluster.read_to_end, JOBS, GROUP)
        self.waiting = 0
        self.lane = BatchLane(
            self.former, self.reader, BatchRouting(topics=frozenset({LOW}), after_s=2.0),
            self.clock, sync_waiting=lambda: self.waiting, warmup_items=10,
        )  # fmt: skip

    async def state(self, partition: int = 0) -> PartitionState:
        state = PartitionState(TopicPartition(LOW, partition), InputLane.LOW)
        assert await self.lane.load(state)
        return state

    def jobs(self) -> dict[str, JobRecord]:
        found: dict[str, JobRecord] = {}
        for record in self.cluster.records(JOBS):
            if record.value is not None:
                job = decode_job(record.value)
                found[job.id] = job
        return found


def item(state: PartitionState, offset: int, text: str = "some text", model: str = MODEL,
         attempts: int = 0, born_ms: int = 0) -> WorkItem:  # fmt: skip
    request = EmbedRequest(id=f"r{offset}", text=text)
    return WorkItem(
        id=request.id, text=text, tokens=3, request=request, attempts=attempts,
        origin=Origin(LOW, state.tp.partition, offset), raw=b"", priority=Priority.LOW,
        partition=state, timestamp_ms=born_ms, model=model, encoding_format="float",
    )  # fmt: skip


def record(offset: int, partition: int = 0) -> FakeRecord:
    return FakeRecord(LOW, partition, offset, b"k", orjson.dumps({"id": f"r{offset}"}))


def track(state: PartitionState, offset: int) -> None:
    state.offsets.track(offset)


async def test_a_record_is_done_only_once_its_job_names_it() -> None:
    p = Parts()
    state = await p.state()
    for offset in range(3):
        track(state, offset)
        assert p.lane.claims(state, record(offset), item(state, offset))
    assert state.offsets.pending == 3 and p.jobs() == {}  # nothing recorded yet: held
    await p.lane.flush()
    assert state.offsets.pending == 0 and state.offsets.safe_offset() == 3
    [job] = p.jobs().values()
    assert (job.state, job.inputs, list(offsets_of(job)), job.seq) == ("forming", 3, [0, 1, 2], 0)
    # Partition p mod 4 of the jobs topic holds the jobs of input partition p.
    assert [r.partition for r in p.cluster.records(JOBS)] == [0]


async def test_jobs_are_cut_at_the_limit_and_at_their_form_time() -> None:
    p = Parts(max_inputs=3)
    state = await p.state(1)
    for offset in range(7):
        track(state, offset)
        assert p.lane.claims(state, record(offset, 1), item(state, offset))
    await p.lane.flush()
    jobs = sorted(p.jobs().values(), key=lambda j: j.seq)
    assert [(j.seq, j.state, j.inputs) for j in jobs] == [
        (0, "closed", 3), (1, "closed", 3), (2, "forming", 1)]  # fmt: skip
    assert {r.partition for r in p.cluster.records(JOBS)} == {1}
    p.clock.advance(4.999)
    assert not p.former.tick()
    p.clock.advance(0.001)
    assert p.former.tick()
    await p.lane.flush()
    last = max(p.jobs().values(), key=lambda j: j.seq)
    assert (last.state, last.rev) == ("closed", 1)  # one revision after its forming record


async def test_a_whole_streams_job_closes_when_the_model_changes_and_big_records_go_sync() -> None:
    p = Parts(max_bytes=2_000)
    state = await p.state()
    track(state, 0)
    track(state, 1)
    track(state, 2)
    assert p.lane.claims(state, record(0), item(state, 0, model="a"))
    assert p.lane.claims(state, record(1), item(state, 1, model="b"))
    assert not p.lane.claims(state, record(2), item(state, 2, text="x" * 5_000))  # too big
    await p.lane.flush()
    jobs = sorted(p.jobs().values(), key=lambda j: j.seq)
    assert [(j.model, j.state, j.seq) for j in jobs] == [("a", "closed", 0), ("b", "forming", 1)]
    assert state.offsets.safe_offset() == 2  # the big record is the sync path's to finish


async def test_a_new_owner_skips_what_is_in_jobs_and_closes_what_was_left_forming() -> None:
    first = Parts()
    state = await first.state()
    for offset in range(4):
        track(state, offset)
        first.lane.claims(state, record(offset), item(state, offset))
    await first.lane.flush()  # recorded; then the owner dies before its commit
    second = Parts(first.cluster)
    again = await second.state()
    for offset in range(6):
        track(again, offset)
    assert all(second.lane.claims(again, record(o), item(again, o)) for o in range(4))
    assert again.offsets.safe_offset() == 4  # read again, done at once: never sent twice
    assert second.lane.claims(again, record(4), item(again, 4))  # a new job for the new ones
    await second.lane.flush()
    states = {j.seq: j.state for j in second.jobs().values()}
    assert states == {0: JobState.CLOSED, 1: JobState.FORMING}


async def test_the_adaptive_rule_waits_for_a_pace_then_sends_what_would_wait_too_long() -> None:
    p = Parts()
    p.lane.routing = BatchRouting(after_s=2.0)  # no whole topics: the rule alone
    state = await p.state()
    # No pace yet: a round of calls goes sync, then the partition waits a pace's first second.
    p.waiting = 9
    assert p.lane.warming(state) is None
    assert p.lane.warming(state) == 1.0
    p.lane.sent(Priority.LOW, 100)
    p.clock.advance(0.25)
    assert p.lane.warming(state) == 0.75  # until the pace is known
    p.clock.advance(0.75)
    assert p.lane.warming(state) is None  # 100 items a second: known
    p.waiting = 199  # under 100/s x 2 s
    track(state, 0)
    assert not p.lane.diverts(item(state, 0, born_ms=p.clock.wall_ms()))
    p.waiting = 200
    track(state, 1)
    assert p.lane.diverts(item(state, 1, born_ms=p.clock.wall_ms()))
    p.waiting = 100  # 1 s of sync work ahead, and 1 s waited in Kafka already: 2 s
    track(state, 2)
    track(state, 3)
    assert p.lane.diverts(item(state, 3, born_ms=p.clock.wall_ms() - 1_000))
    assert not p.lane.diverts(item(state, 2, attempts=1))  # a retry goes on sync
    await p.lane.flush()
    [job] = p.jobs().values()
    assert (job.whole, list(offsets_of(job))) == (False, [1, 3])


def test_a_50000_input_jobs_record_fits_kafkas_default_limit() -> None:
    rng = random.Random(3)
    offsets = sorted(rng.sample(range(4_000_000), 50_000))  # spread over 4 million offsets
    bits = JobOffsets()
    for offset in offsets:
        bits.add(offset)
    job = JobRecord(
        id="job-x", group=GROUP, stream=JobStream(LOW, 0, "low"), seq=0, whole=True, model=MODEL,
        state="closed", offsets_first=offsets[0], offsets_bits=bits.bits, inputs=50_000,
        size=190_000_000, tokens=10**8, opened_at_ms=0,
    )  # fmt: skip
    value = job.encode()
    assert len(value) < 1_048_576
    back = decode_job(value)
    assert list(offsets_of(back)) == offsets and back.but().rev == 1


async def test_a_job_finished_long_ago_no_longer_holds_its_records() -> None:
    """Records read again after a crash are a recent job's; a job finished an hour ago and
    more holds nothing: its records are read again only by a rewind of the group."""
    p = Parts()
    stream = JobStream(LOW, 0, "low")
    now = p.clock.wall_ms()
    for first, finished_ms in ((0, now - 3_600_001), (3, now - 600_000)):
        bits = JobOffsets()
        for offset in (first, first + 1):
            bits.add(offset)
        job = JobRecord(
            id=f"job-{first}", group=GROUP, stream=stream, seq=first, whole=True, model=MODEL,
            state="finished", offsets_first=first, offsets_bits=bits.bits, inputs=2, size=400,
            tokens=6, opened_at_ms=0, finished_at_ms=finished_ms,
        )  # fmt: skip
        p.cluster.produce(JOBS, job.encode(), job.key, partition=0)
    state = await p.state()
    for offset in range(5):
        track(state, offset)
        assert p.lane.claims(state, record(offset), item(state, offset))
    await p.lane.flush()
    assert state.offsets.safe_offset() == 5  # 3 and 4 done at once; 0, 1, 2 in a new job
    new = [j for j in p.jobs().values() if j.state == "forming"]
    assert [list(offsets_of(j)) for j in new] == [[0, 1, 2]]
