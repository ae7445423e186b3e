"""Each text paid once (engine/shared_texts.py, engine/inflight.py): a text several calls want
at the same time is sent by one of them, the others get its vector; a text the cache learned
after a job was looked up is not sent at the job's cut; a call that ends without the vector
leaves its text to whoever waited; across processes, through claims in the shared tier."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

import orjson
import pytest
from embedstream.core.lanes import BucketKey, Priority
from embedstream.engine.backend import BatchCall, BatchOutcome
from embedstream.engine.cache import EmbeddingCache
from embedstream.engine.cache_tiers import MemoryTier
from embedstream.engine.client import BatchingClient
from embedstream.engine.inflight import Mine, NotSent, TextsInFlight
from embedstream.errors import PermanentItemError, Reason
from embedstream.ops.metrics import Metrics
from embedstream.testing import vector_for
from embedstream.testing.backends import texts_of
from embedstream.testing.virtual_loop import VirtualLoop
from prometheus_client import CollectorRegistry

from tests.unit.harness import LOW, GatedBackend, running


@dataclass
class Gated:
    """A provider whose calls holding a text with SLOW wait for ``gate``; ``refuse`` fails the
    first call of each text it names (a 400 for that input)."""

    gate: asyncio.Event = field(default_factory=asyncio.Event)
    refuse: set[str] = field(default_factory=set)
    calls: list[tuple[str, ...]] = field(default_factory=list)

    async def embed(self, call: BatchCall) -> BatchOutcome:
        texts = texts_of(call)
        self.calls.append(texts)
        if any("SLOW" in t for t in texts):
            await self.gate.wait()
        refused = self.refuse & set(texts)
        if refused:
            self.refuse -= refused
            raise PermanentItemError(Reason.REJECTED, f"refused {sorted(refused)}")
        return BatchOutcome([vector_for(t) for t in texts], 2, len(texts), 0.0)

    async def close(self) -> None:
        return None


def memory_cache(metrics: Metrics | None = None) -> EmbeddingCache:
    return EmbeddingCache("p", MemoryTier(60), observer=metrics)


async def until(check: object) -> None:
    for _ in range(1000):
        if check():  # type: ignore[operator]
            return
        await asyncio.sleep(0)
    raise AssertionError("never held")


async def test_a_text_two_calls_want_at_once_is_sent_by_one_and_both_get_its_vector() -> None:
    backend = Gated()
    registry = CollectorRegistry()
    cache = memory_cache(Metrics(registry))
    async with BatchingClient(backend, embedding_cache=cache, model="m", max_batch_size=1) as c:
        both = asyncio.gather(c.embed("SLOW a"), c.embed("SLOW a"))
        await until(lambda: len(backend.calls) == 1 and len(cache.in_flight) == 1)
        backend.gate.set()
        assert list(await both) == [vector_for("SLOW a")] * 2
    assert backend.calls == [("SLOW a",)]  # a call each was cut; the second waited
    hits = registry.get_sample_value("embedstream_cache_hits_total", {"tier": "in_flight"})
    misses = registry.get_sample_value("embedstream_cache_misses_total")
    assert (hits, misses) == (1, 1)


async def test_a_text_the_cache_learned_since_the_look_up_is_not_sent_at_the_cut() -> None:
    """One client's job for "a" misses and waits for the only call slot; meanwhile another
    client of the process (the same cache) embeds "a": at the cut, "a" is answered."""
    cache = memory_cache()
    first, second = Gated(), Gated()
    async with (
        BatchingClient(first, embedding_cache=cache, model="m", max_concurrency=1) as one,
        BatchingClient(second, embedding_cache=cache, model="m") as other,
    ):
        slow = asyncio.ensure_future(one.embed("SLOW x"))
        await until(lambda: len(first.calls) == 1)
        later = asyncio.ensure_future(one.embed("a"))  # looked up: a miss; waits for the slot
        await until(lambda: one._batcher.buffered == 1)
        assert await other.embed("a") == vector_for("a")
        first.gate.set()
        assert await later == vector_for("a") and await slow == vector_for("SLOW x")
    assert first.calls == [("SLOW x",)] and second.calls == [("a",)]


async def test_a_call_that_ends_without_the_vector_leaves_the_text_to_the_one_waiting() -> None:
    backend = Gated(refuse={"SLOW a"})
    async with BatchingClient(
        backend, embedding_cache=memory_cache(), model="m", max_batch_size=1, max_attempts=1
    ) as client:
        both = asyncio.gather(
            client.embed("SLOW a"), client.embed("SLOW a"), return_exceptions=True
        )
        await until(lambda: len(backend.calls) == 1)
        backend.gate.set()
        results = await both
    # The first call's input was refused (its job dead-lettered); the job waiting for it was
    # cut again and sent on its own.
    assert backend.calls == [("SLOW a",), ("SLOW a",)]
    assert sorted(map(type, results), key=str) == sorted([list, PermanentItemError], key=str)
    assert vector_for("SLOW a") in results


@dataclass
class FakeClaims:
    """Redis's claims and vectors, shared by the caches of two 'processes'."""

    vectors: dict[str, bytes] = field(default_factory=dict)
    claims: dict[str, str] = field(default_factory=dict)
    watched: int = 0

    async def claim_many(self, keys: Sequence[str], token: str, ttl_ms: int) -> list[bytes | bool]:
        found: list[bytes | bool] = []
        for key in keys:
            if key in self.vectors:
                found.append(self.vectors[key])
            elif key in self.claims:
                found.append(False)
            else:
                self.claims[key] = token
                found.append(True)
        return found

    async def watch_many(self, keys: Sequence[str]) -> list[bytes | bool]:
        self.watched += 1
        return [self.vectors.get(key, key in self.claims) for key in keys]

    async def release_many(self, keys: Sequence[str], token: str) -> None:
        for key in keys:
            if self.claims.get(key) == token:
                del self.claims[key]

    def stored(self, key: str, vector: bytes) -> None:  # the writer's script: SET, DEL claim
        self.vectors[key] = vector
        self.claims.pop(key, None)


def run_virtual(work: object) -> object:
    loop = VirtualLoop()  # the watchers' turns pass in virtual time
    try:
        return loop.run_until_complete(work)  # type: ignore[arg-type]
    finally:
        loop.close()


def test_across_processes_the_one_holding_the_claim_sends_and_the_other_gets_its_vector() -> None:
    shared = FakeClaims()
    here, there = TextsInFlight(shared), TextsInFlight(shared)

    async def scenario() -> tuple[object, ...]:
        [mine] = await here.claim(["k"])
        [theirs] = await there.claim(["k"])
        assert isinstance(mine, Mine) and isinstance(theirs, asyncio.Future)
        [joined] = await there.claim(["k"])  # another call of that process: the same wait
        assert joined is theirs
        await asyncio.sleep(1)  # watched meanwhile: still claimed
        assert not theirs.done() and shared.watched > 1
        here.settle([("k", b"vector")])  # the call returned ...
        shared.stored("k", b"vector")  # ... and the writer stored it
        got = await theirs
        [again] = await there.claim(["k"])  # stored: found at once
        await here.close()
        await there.close()
        return got, again

    assert run_virtual(scenario()) == (b"vector", b"vector")


def test_a_claim_released_without_a_vector_lets_the_waiting_process_send_it() -> None:
    shared = FakeClaims()
    here, there = TextsInFlight(shared), TextsInFlight(shared)

    async def scenario() -> tuple[object, ...]:
        [mine] = await here.claim(["k"])
        [theirs] = await there.claim(["k"])
        assert isinstance(mine, Mine)
        here.release([mine], NotSent.RETRY)  # the call failed: the claim ends, no vector
        assert isinstance(theirs, asyncio.Future)
        got = await theirs
        [claimed] = await there.claim(["k"])  # now that process sends it
        await here.close()
        await there.close()
        return got, isinstance(claimed, Mine), shared.claims

    assert run_virtual(scenario()) == (NotSent.RETRY, True, {"k": there._token})


@pytest.mark.parametrize("failure", [OSError("down"), None])
def test_a_shared_tier_that_fails_or_hangs_means_no_claim_the_text_is_sent(
    failure: OSError | None,
) -> None:
    failures: list[BaseException] = []

    class Broken(FakeClaims):
        async def claim_many(
            self, keys: Sequence[str], token: str, ttl_ms: int
        ) -> list[bytes | bool]:
            if failure is not None:
                raise failure
            await asyncio.Event().wait()  # never answers
            return []

    async def scenario() -> object:
        texts = TextsInFlight(Broken(), timeout_s=0.25, failed=failures.append)
        found = await texts.claim(["k"])
        await texts.close()
        return [type(f) for f in found]

    assert run_virtual(scenario()) == [Mine]
    assert len(failures) == 1 and isinstance(failures[0], OSError | TimeoutError)


async def test_texts_of_another_bucket_key_are_other_texts() -> None:
    """The cache key decides what is the same text: model, dimensions and the rest."""
    cache = memory_cache()
    small = BucketKey(Priority.LOW, "m", "float", 8)
    large = BucketKey(Priority.HIGH, "m", "base64", 16)
    same = BucketKey(Priority.HIGH, "m", "base64", 8)  # another lane and encoding: the same
    names = [cache.name_of(k, "t") for k in (small, large, same)]
    assert names[0] != names[1] and names[0] == names[2]
    found = await cache.in_flight.claim(names[:2])
    assert [type(f) for f in found] == [Mine, Mine]
    cache.in_flight.release([f for f in found if isinstance(f, Mine)], NotSent.RETRY)
    assert len(cache.in_flight) == 0
    await cache.close()


async def test_a_call_releases_only_its_own_claims() -> None:
    """A text settled by its call, then claimed anew by another call of the process: the
    first call's end must not take the second call's claim with it."""
    texts = TextsInFlight()
    [first] = await texts.claim(["k"])
    texts.settle([("k", b"v")])
    [second] = await texts.claim(["k"])
    assert isinstance(first, Mine) and isinstance(second, Mine)
    texts.release([first], NotSent.RETRY)
    [waits] = await texts.claim(["k"])
    assert waits is second.future and not waits.done()


async def test_in_the_processor_requests_of_one_text_in_separate_calls_pay_for_it_once() -> None:
    """Three requests of one text in one fetch, a call each (max_batch_size 1): all three
    missed at their look-up; the first call sends the text, the others get its vector."""
    backend = GatedBackend()
    async with running(backend, max_batch_size=1, max_concurrency=4) as h:
        h.consumer.pause(LOW)  # the three records come in one fetch
        for i in range(3):
            h.request(LOW, f"r{i}", "SLOW same text")
        h.consumer.resume(LOW)
        await until(lambda: len(backend.calls) == 1)
        await h.fetch_turns(2)  # every record read and cut meanwhile: none sent again
        backend.gate.set()
        await h.all_inputs_finished()
    assert [texts for _, texts in backend.calls] == [("SLOW same text",)]
    found = {orjson.loads(r.value or b"")["id"]: r for r in h.results()}
    cached = sorted(orjson.loads(r.value or b"")["cached"] for r in found.values())
    assert sorted(found) == ["r0", "r1", "r2"] and cached == [False, True, True]


def test_a_call_that_will_not_wait_for_another_process_sends_the_text_itself() -> None:
    """Online and high jobs claim nothing in Redis and wait for no other process (one killed
    mid-call holds its claim until it expires): the text is sent here too."""
    shared = FakeClaims()
    here, there = TextsInFlight(shared), TextsInFlight(shared)

    async def scenario() -> list[object]:
        await here.claim(["k"])  # another process sends "k"
        [bulk] = await there.claim(["k"])  # a low call here waits for it ...
        [urgent] = await there.claim(["k"], shared=False)  # ... a high one does not
        [again] = await there.claim(["k"], shared=False)  # nor its next one (not registered)
        await here.close()
        await there.close()
        return [type(found) for found in (bulk, urgent, again)]

    assert run_virtual(scenario()) == [asyncio.Future, Mine, Mine]
