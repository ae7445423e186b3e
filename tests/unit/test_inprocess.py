"""The batching engine as a library: concurrency of callers becomes batches."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from embedstream.engine.backend import BatchCall, BatchOutcome
from embedstream.engine.client import BatchingClient
from embedstream.errors import PermanentItemError, Reason, TransientError
from embedstream.testing import (
    RecordingBackend,
    eventually,
    reject_texts_containing,
    settled,
    vector_for,
)


async def test_concurrent_callers_are_batched_and_each_gets_its_own_vector() -> None:
    backend = RecordingBackend(latency_s=0.01)
    async with BatchingClient(backend, max_batch_size=64, max_concurrency=2) as client:
        texts = [f"text number {i}" for i in range(500)]
        vectors = await asyncio.gather(*(client.embed(t) for t in texts))
    assert vectors == [vector_for(t) for t in texts]
    assert len(backend.calls) < 500 / 8
    assert all(len(call.texts) <= 64 for call in backend.calls)
    assert backend.peak_in_flight <= 2


async def test_identical_texts_are_sent_once() -> None:
    backend = RecordingBackend()
    async with BatchingClient(backend, max_wait_ms=50) as client:
        vectors = await client.embed_many(["same"] * 10 + ["other"])
    assert vectors == [vector_for("same")] * 10 + [vector_for("other")]
    assert sum(len(c.texts) for c in backend.calls) == 2


async def test_buckets_never_mix_models_or_dimensions() -> None:
    backend = RecordingBackend()
    async with BatchingClient(backend, max_wait_ms=50) as client:
        await asyncio.gather(
            *(client.embed(f"a{i}", model="m1") for i in range(5)),
            *(client.embed(f"b{i}", model="m2") for i in range(5)),
            *(client.embed(f"c{i}", model="m1", dimensions=8) for i in range(5)),
        )
    keys = {(c.model, c.dimensions, tuple(t[0] for t in c.texts)) for c in backend.calls}
    for model, dimensions, firsts in keys:
        assert len(set(firsts)) == 1  # one bucket per call
        assert (model, dimensions) in {("m1", None), ("m2", None), ("m1", 8)}


async def test_buckets_never_mix_users_input_types_or_tasks() -> None:
    backend = RecordingBackend()
    async with BatchingClient(backend, max_wait_ms=50, provider_profile="generic") as client:
        await asyncio.gather(
            *(client.embed(f"a{i}") for i in range(4)),
            *(client.embed(f"b{i}", user="u1") for i in range(4)),
            *(client.embed(f"c{i}", user="u2") for i in range(4)),
            *(client.embed(f"d{i}", user="u1", input_type="query") for i in range(4)),
            *(client.embed(f"e{i}", task="retrieval.passage") for i in range(4)),
        )
    fields = {(c.user, c.input_type, c.task) for c in backend.calls}
    assert fields == {(None, None, None), ("u1", None, None), ("u2", None, None),
                      ("u1", "query", None), (None, None, "retrieval.passage")}  # fmt: skip
    for call in backend.calls:
        assert len({text[0] for text in call.texts}) == 1  # one bucket per call


async def test_one_rejected_input_fails_only_its_caller() -> None:
    backend = RecordingBackend(fail=reject_texts_containing("POISON"))
    async with BatchingClient(backend, max_wait_ms=50, max_batch_size=16) as client:
        texts = [f"fine {i}" for i in range(15)] + ["POISON pill"]
        results = await asyncio.gather(*(client.embed(t) for t in texts), return_exceptions=True)
    assert results[:15] == [vector_for(t) for t in texts[:15]]
    assert isinstance(results[15], PermanentItemError)
    # Splitting in halves finds one bad item in at most 2*ceil(log2 16)+1 calls.
    assert len(backend.calls) <= 2 * 4 + 1


@pytest.mark.parametrize(("text", "reason"), [("   ", "empty_text"), ("x" * 40_000, "too_long")])
async def test_bad_input_is_refused_before_any_call(text: str, reason: str) -> None:
    backend = RecordingBackend()
    async with BatchingClient(backend) as client:
        with pytest.raises(PermanentItemError) as info:
            await client.embed(text)
    assert info.value.reason == reason
    assert backend.calls == []


async def test_using_it_unstarted_is_an_error() -> None:
    client = BatchingClient(RecordingBackend())
    with pytest.raises(RuntimeError, match="not started"):
        client.submit("x")


class Unreachable(RecordingBackend):
    """A provider that refuses every connection, or (`hang`) accepts and never answers."""

    def __init__(self, *, hang: bool = False) -> None:
        super().__init__()
        self.hang = hang

    async def embed(self, call: BatchCall) -> BatchOutcome:
        self.calls.append(call)
        if self.hang:
            await asyncio.Event().wait()
        raise TransientError(Reason.CONNECTION, "connection refused")


@pytest.mark.parametrize("hang", [False, True], ids=["refusing", "hanging"])
async def test_close_with_a_timeout_returns_whatever_the_provider_does(hang: bool) -> None:
    """Outage batches are held, not failed, so without a timeout close() waits for the
    provider; with one, the callers still waiting get a TransientError and close returns."""
    backend = Unreachable(hang=hang)
    client = BatchingClient(backend, max_attempts=2, retry_backoff_base_ms=50)
    client.start()
    waiting = [asyncio.ensure_future(client.embed(f"text {i}")) for i in range(20)]

    def sent(times: int) -> bool:
        counts = Counter(text for call in backend.calls for text in call.texts)
        return len(counts) == len(waiting) and min(counts.values()) >= times

    # Refusing: each text sent more often than max_attempts allows, so the outage is held,
    # not counted against them. Hanging: each text in a call that will never answer.
    await eventually(lambda: sent(1 if hang else 3))
    await settled()
    assert not any(w.done() for w in waiting)  # held through the outage, not failed
    await asyncio.wait_for(client.close(timeout_s=0.3), 10)  # the 10 s only catches a hang
    results = await asyncio.gather(*waiting, return_exceptions=True)
    assert all(isinstance(r, TransientError) for r in results), results
    assert all("client closed" in str(r) for r in results)


async def test_close_with_a_timeout_fails_retries_still_waiting_for_their_delay() -> None:
    def flaky(call: BatchCall) -> TransientError | None:
        return TransientError(Reason.TIMEOUT, "slow") if "FLAKY" in call.texts[0] else None

    backend = RecordingBackend(fail=flaky)
    client = BatchingClient(backend, max_attempts=5, retry_backoff_base_ms=20_000)
    client.start()
    ok = await client.embed("fine")  # the provider serves others: FLAKY's failure is its own
    retried = asyncio.ensure_future(client.embed("FLAKY text"))
    await eventually(lambda: len(backend.calls) >= 2)
    await asyncio.wait_for(client.close(timeout_s=0.2), 10)
    assert ok == vector_for("fine")
    with pytest.raises(TransientError):
        await retried
