"""A provider that answers 500 for one input fails the whole call: its batch-mates must not
spend their attempts with it.

Found from outside: 10 such inputs among 2,000 good requests in one burst, library defaults:
the good ones took 2.95 attempts on average, up to 5, and one good request was dead-lettered.
A batch failing with a server error a second time is split in halves, within the attempt it
was sent for, down to the inputs that fail alone; but only while other calls succeed: a run
of them with no success between is an outage, and splitting it would multiply the calls sent
to a provider that is down. All in virtual time (the engine reads the loop's clock).
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from embedstream.core.lanes import BucketKey, Priority
from embedstream.engine.backend import BatchCall, BatchOutcome
from embedstream.engine.build import build_engine
from embedstream.engine.callers import CallerRequest, Callers
from embedstream.errors import TransientError, http_reason
from embedstream.settings import load_settings
from embedstream.testing import vector_for
from embedstream.testing.virtual_loop import LoopClock, VirtualLoop


@dataclass
class FailingProvider:
    """Answers in 50 ms plus 1 ms an input; a call `fails` (texts, loop time) says is a 500."""

    fails: Callable[[list[str], float], bool]
    calls: list[list[str]] = field(default_factory=list)
    spans: list[tuple[float, float]] = field(default_factory=list)  # each call's start, end

    async def embed(self, call: BatchCall) -> BatchOutcome:
        texts = [t for t in call.texts if isinstance(t, str)]
        self.calls.append(texts)
        start = asyncio.get_running_loop().time()
        await asyncio.sleep(0.05 + 0.001 * len(texts))
        now = asyncio.get_running_loop().time()
        self.spans.append((start, now))
        if self.fails(texts, now):
            raise TransientError(http_reason(500), "internal server error")
        return BatchOutcome([vector_for(t) for t in texts], 1, len(texts), 0.05)

    async def close(self) -> None:
        return None


def poisoned(texts: list[str], now: float) -> bool:
    return any(t.startswith("POISON") for t in texts)


@dataclass
class Ended:
    job: CallerRequest
    failed: bool

    @property
    def poison(self) -> bool:
        return self.job.text.startswith("POISON")


def run(
    provider: FailingProvider,
    waves: Sequence[tuple[float, list[str]]],
    retried: frozenset[str] = frozenset(),
    **env: str,
) -> list[Ended]:
    """Each wave's texts are submitted at once at its loop time; every job's end. The texts
    in `retried` come back from a first failure a minute ago."""

    async def main() -> list[Ended]:
        loop = asyncio.get_running_loop()
        settings = load_settings(env={f"EMBEDSTREAM_{k.upper()}": v for k, v in env.items()})
        callers = Callers()
        clock = LoopClock(loop)
        engine = build_engine(settings, provider, callers, clock=clock)
        callers.attach(engine.batcher)
        runner = asyncio.create_task(engine.batcher.run())
        key = BucketKey(Priority.LOW, settings.model, "float", None)
        jobs = []
        for at, texts in waves:
            await asyncio.sleep(at - loop.time())
            for text in texts:
                job = CallerRequest(id=text, text=text, tokens=2, key=key,
                                    future=loop.create_future())  # fmt: skip
                if text in retried:
                    job.attempts, job.first_failure_ms = 1, clock.wall_ms() - 60_000
                engine.batcher.add(key, job.tokens, job)
                jobs.append(job)
        ends = await asyncio.gather(*(j.future for j in jobs), return_exceptions=True)
        engine.batcher.drain()
        await runner
        return [Ended(j, isinstance(e, BaseException)) for j, e in zip(jobs, ends, strict=True)]

    loop = VirtualLoop()
    try:
        return loop.run_until_complete(asyncio.wait_for(main(), 3600))
    finally:
        loop.close()


def burst(good: int, bad: int) -> list[str]:
    texts = [f"good {n}" for n in range(good)]
    for n in range(bad):
        texts.insert(n * 7919 % len(texts), f"POISON {n}")
    return texts


def test_a_poison_inputs_batch_mates_spend_no_attempts_on_it() -> None:
    provider = FailingProvider(poisoned)
    ended = run(provider, [(0.0, burst(2000, 10))])  # library defaults: 5 attempts
    good = [e for e in ended if not e.poison]
    assert not any(e.failed for e in good)
    assert max(e.job.attempts for e in good) <= 3
    poison = [e for e in ended if e.poison]
    assert all(e.failed and e.job.attempts == 5 for e in poison)
    for e in poison:  # once it failed alone, its later calls (attempts) are its own
        calls = [c for c in provider.calls if e.job.text in c]
        first_alone = calls.index([e.job.text])
        assert calls[first_alone:] == [[e.job.text]] * (len(calls) - first_alone)


def test_an_input_on_its_last_attempt_is_dead_lettered_only_once_it_failed_alone() -> None:
    provider = FailingProvider(poisoned)
    batch = [f"good {n}" for n in range(7)] + ["POISON"]
    ended = run(provider, [(0.0, ["warm"]), (0.5, batch)], max_attempts="1")
    assert [e.job.text for e in ended if e.failed] == ["POISON"]
    assert provider.calls[-1] == ["POISON"]
    assert all(e.job.attempts == 1 for e in ended)  # a split's calls spend no attempt


def test_a_batch_that_fails_once_is_not_split() -> None:
    """The first failure may be a blip (2% of calls in the soak): its items are retried, each
    in one call more, never split for it."""
    provider = FailingProvider(lambda texts, now: len(texts) > 1 and now < 0.6)
    batch = [f"good {n}" for n in range(16)]
    ended = run(provider, [(0.0, ["warm"]), (0.5, batch)])
    assert not any(e.failed for e in ended)
    assert Counter(t for call in provider.calls[1:] for t in call) == dict.fromkeys(batch, 2)


def test_an_outage_beginning_right_after_a_success_splits_nothing() -> None:
    """Every call fails from 0.1 s to 3 s. The batch's items failed before and are on their
    last attempt: split on the success a moment before, its calls would go to a provider that
    is down and end in dead letters. Only an answer to a call sent since its own lets a batch
    be split; until then it is held, and its probe after each hold is one call (half of it, so
    a burst whose every call holds a poison input still finds the calls that succeed)."""
    provider = FailingProvider(lambda texts, now: 0.1 < now < 3.0)
    batch = [f"good {n}" for n in range(16)]
    ended = run(provider, [(0.0, ["warm"]), (0.2, batch)], frozenset(batch), max_attempts="2")
    assert not any(e.failed for e in ended)
    during = sorted(span for span in provider.spans if span[1] < 3.0)[1:]  # the warm one off
    assert len(during) >= 2
    assert all(later[0] >= earlier[1] for earlier, later in itertools.pairwise(during))


def test_a_burst_whose_every_call_holds_a_poison_input_still_ends() -> None:
    """Nothing succeeds at first, so nothing tells a poison input from an outage: every call
    is held. Sent again whole after each hold, they never ended; a hold's probe is half the
    held batch, and a half without poison answers (still one call a hold)."""
    texts = [f"good {n}" for n in range(200)]
    for n in range(8):
        texts.insert(n * 26, f"POISON {n}")  # in every call the batcher cuts
    provider = FailingProvider(poisoned)
    ended = run(provider, [(0.0, texts)])
    assert all(e.failed == e.poison for e in ended)
    assert all(len(c) > 1 and any(t.startswith("POISON") for t in c)
               for c in provider.calls[:4])  # fmt: skip
