"""The Kafka shell (fetch, admit, commit, rebalance, drain) against the in-memory fakes.

The processor runs unchanged on `embedstream.testing.kafka`: these tests drive revokes, pauses,
retry records and slow calls step by step and check what is produced and committed.
"""

from __future__ import annotations

import asyncio
import time

import orjson
from embedstream.testing import eventually, settled
from embedstream.wire import RetryState, headers_dict

from tests.unit.harness import HIGH, LOW, NAMES, RETRY, GatedBackend, item_bound, running


async def test_every_request_gets_a_result_keyed_by_id_and_offsets_commit_to_the_end() -> None:
    async with running(GatedBackend(), max_batch_size=16) as h:
        ids = [f"r{i}" for i in range(40)]
        for i in ids:
            h.request(LOW if i < "r2" else HIGH, i, f"text {i}")
        await eventually(lambda: sorted(h.result_ids()) == sorted(ids))
        await eventually(lambda: h.committed(LOW) + h.committed(HIGH) == len(ids))
        keys = {r.key for r in h.cluster.records(NAMES.results)}
        assert keys == {i.encode() for i in ids}


async def test_an_unfinished_record_holds_the_commit_while_later_ones_finish() -> None:
    backend = GatedBackend()
    async with running(backend, max_concurrency=4) as h:
        h.request(LOW, "slow", "SLOW text")
        for i in range(9):
            h.request(LOW, f"fast{i}", f"fast {i}")
        await eventually(lambda: len(h.result_ids()) == 9)
        await h.service.processor.parts.outcomes.flush()  # the 9 offsets are complete
        await h.commit_rounds()
        assert h.committed(LOW) == 0  # offset 0 is unfinished: nothing past it
        backend.gate.set()
        await eventually(lambda: h.committed(LOW) == 10)
        assert "slow" in h.result_ids()


async def test_a_revoke_mid_batch_waits_for_the_batch_then_commits_before_letting_go() -> None:
    backend = GatedBackend()
    async with running(backend, max_concurrency=4, drain_timeout_s=5) as h:
        h.request(LOW, "slow", "SLOW text")
        h.request(LOW, "fast", "fast text")
        await eventually(lambda: h.result_ids() == ["fast"])
        state = h.service.processor.parts.assignment.get(LOW)
        assert state is not None
        revoke = asyncio.create_task(h.consumer.revoke({LOW}))
        await eventually(lambda: state.handing_off)
        await settled()  # a revoke that did not wait would have committed and returned
        assert not revoke.done()  # still finishing the slow batch
        backend.gate.set()
        await asyncio.wait_for(revoke, 5)
        assert h.committed(LOW) == 2  # handed off with everything it read committed
        assert LOW not in h.service.processor.partitions()


async def test_a_revoke_past_the_drain_timeout_leaves_the_unfinished_record_to_the_next_owner() -> (
    None
):
    backend = GatedBackend()
    async with running(backend, max_concurrency=4, drain_timeout_s=0.1) as h:
        h.request(LOW, "slow", "SLOW text")
        h.request(LOW, "fast", "fast text")
        await eventually(lambda: h.result_ids() == ["fast"])
        await asyncio.wait_for(h.consumer.revoke({LOW}), 5)
        assert h.committed(LOW) == 0
        backend.gate.set()  # its result may still be written (at-least-once) ...
        await eventually(lambda: "slow" in h.result_ids())
        await h.engine_idle()  # its offset completed, if anything still tracks it
        await h.commit_rounds()
        assert h.committed(LOW) == 0  # ... but its offset is the next owner's to commit


async def test_a_revoke_waiting_for_its_work_lets_go_once_the_shutdowns_drain_is_over() -> None:
    """A revoke during the shutdown (another member of the group leaving: a high processor
    beside, input_lanes=high) waits for its work no longer than the drain: once it is over
    (a second stop cut it short), it commits and lets go at once, so the consumer's close is
    not held for the rest of drain_timeout_s."""
    backend = GatedBackend()
    async with running(backend, max_concurrency=4, drain_timeout_s=30) as h:
        h.request(LOW, "slow", "SLOW text")
        h.request(LOW, "fast", "fast text")
        await eventually(lambda: h.result_ids() == ["fast"])
        handoff = h.service.processor.parts.handoff
        revoke = asyncio.create_task(h.consumer.revoke({LOW}))
        await settled()
        assert not revoke.done()  # waiting for the slow batch, for up to 30 s
        handoff.drained()
        await asyncio.wait_for(revoke, 1)
        assert h.committed(LOW) == 0  # the slow record is the next owner's to read
        backend.gate.set()


async def test_a_retry_due_later_waits_without_blocking_its_partition() -> None:
    backend = GatedBackend()
    async with running(backend) as h:
        due = int(time.time() * 1000) + 300
        headers = dict(RetryState(attempts=1, not_before_ms=due).headers())
        h.request(RETRY, "later", "retried text", **headers)
        h.request(RETRY, "now", "fresh text")
        await eventually(lambda: h.result_ids() == ["now"])
        assert h.committed(RETRY) == 0  # the waiting retry holds the commit
        await eventually(lambda: "later" in h.result_ids())
        sent_at = next(at for at, texts in backend.calls if texts == ("retried text",))
        assert sent_at * 1000 >= due
        await eventually(lambda: h.committed(RETRY) == 2)
        result = next(r for r in h.cluster.records(NAMES.results) if r.key == b"later")
        assert orjson.loads(result.value or b"")["attempts"] == 2


async def test_backpressure_pauses_fetching_and_resumes_once_work_finishes() -> None:
    backend = GatedBackend()
    async with running(backend, **item_bound(10), max_concurrency=2) as h:
        for i in range(40):
            h.request(LOW, f"s{i}", f"SLOW {i}")
        await eventually(lambda: LOW in h.consumer.paused)
        assert h.service.processor.paused_count() >= 1
        assert h.service.processor.held <= 10
        backend.gate.set()
        await eventually(lambda: len(h.result_ids()) == 40)
        await eventually(lambda: not h.consumer.paused)


async def test_malformed_retry_headers_dead_letter_the_record_and_the_stream_goes_on() -> None:
    async with running(GatedBackend()) as h:
        h.request(RETRY, "bad", "text", **{"embedstream.retry.attempts": b"three"})
        h.request(RETRY, "good", "text two")
        await eventually(lambda: h.result_ids() == ["good"])
        await eventually(lambda: len(h.cluster.records(NAMES.dead_letters)) == 1)
        letter = h.cluster.records(NAMES.dead_letters)[0]
        assert headers_dict(letter.headers)["embedstream.error.reason"] == "invalid_headers"
        assert letter.key == b"bad"
        await eventually(lambda: h.committed(RETRY) == 2)


async def test_stop_is_bounded_when_the_provider_never_answers() -> None:
    backend = GatedBackend()  # the gate is never opened
    async with running(backend, drain_timeout_s=0.2, max_concurrency=2) as h:
        for i in range(5):
            h.request(LOW, f"s{i}", f"SLOW {i}")
        await eventually(lambda: len(backend.calls) >= 1)
        h.service.stop()
        # A single stop: the drain gives up after drain_timeout_s plus a short grace.
        await asyncio.wait_for(asyncio.shield(h.task), 10)
        assert h.committed(LOW) == 0  # nothing unfinished is committed: re-read on restart
        assert h.result_ids() == []
        assert h.consumer.stopped and h.producer.stopped


async def test_a_partition_lost_while_still_assigned_asks_for_a_rebalance() -> None:
    """Fenced (or a producer failed for good) while the group still gives it to us: the work is
    dropped and a rejoin requested, or the partition would be read untracked and stall."""
    async with running(GatedBackend()) as h:
        handoff = h.service.processor.parts.handoff
        await handoff.lost(LOW)
        assert LOW not in h.service.processor.partitions()
        assert h.consumer.rejoins_requested == 1
        await h.consumer.revoke({LOW})  # a lost partition being handed off asks for nothing
        await handoff.lost(HIGH)
        assert h.consumer.rejoins_requested == 2


async def test_records_below_the_floor_read_after_the_fence_are_not_done_again() -> None:
    """Exactly-once: what the previous owner committed after our position was read (the floor
    comes from the committed offset read after our producer fenced it) is skipped."""
    async with running(GatedBackend()) as h:
        state = h.service.processor.parts.assignment.get(LOW)
        assert state is not None
        state.floor = 3  # the previous owner committed offsets 0..2
        for i in range(5):
            h.request(LOW, f"r{i}", f"text {i}")
        await eventually(lambda: sorted(h.result_ids()) == ["r3", "r4"])
        await eventually(lambda: h.committed(LOW) == 5)


async def test_nothing_is_admitted_before_the_floor_is_known() -> None:
    """Exactly-once: records fetched while the fence is still going up are read again later,
    once the floor says which of them the previous owner already committed."""
    async with running(GatedBackend()) as h:
        state = h.service.processor.parts.assignment.get(LOW)
        assert state is not None
        state.floor = None  # fence not up yet
        for i in range(4):
            h.request(LOW, f"r{i}", f"text {i}")
        await h.fetch_turns(2)  # a fetch begun after the records were there has returned
        await h.engine_idle()
        assert h.result_ids() == []
        state.floor = 2
        await eventually(lambda: sorted(h.result_ids()) == ["r2", "r3"])


async def test_a_record_delivered_again_under_the_same_assignment_is_skipped_not_redone() -> None:
    """The consumer's position can go back (to the committed offset, in a rebalance) while the
    partition stays ours: what it hands over again is already in hand. Before, the processor
    stopped on "tracked out of order"."""
    async with running(GatedBackend()) as h:
        for i in range(3):
            h.request(LOW, f"r{i}", f"text {i}")
        await h.fetch_turns(2)
        h.consumer.seek(LOW, 0)  # delivered again: offsets 0, 1 and 2
        await h.fetch_turns(2)
        assert not h.task.done()
        h.request(LOW, "r3", "text 3")
        await h.all_inputs_finished()
        assert sorted(h.result_ids()) == ["r0", "r1", "r2", "r3"]  # each once
