"""Kafka work naming a model the provider does not serve waits, and only that model's work:
every other model's calls go on, nothing is dead-lettered, the provider stays usable, and the
model's items go out once the provider serves it.

Before (issue 42), a 404 for one model refused everyone: the gate closed, the processor paused
fetching and /readyz said "provider unusable" for every model. The engine test runs on an
event loop in virtual time (`VirtualLoop`): the holds are timers that take no real time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from embedstream.core.lanes import BucketKey, Priority
from embedstream.core.model_pauses import PAUSE_SLACK_S, ModelPauses
from embedstream.engine.answers import classify_status
from embedstream.engine.backend import BatchCall, BatchOutcome
from embedstream.engine.build import build_engine
from embedstream.engine.held_batches import HOLD_PROBE_MAX_S
from embedstream.engine.jobs import Embedded, Hit, Job, Outcomes
from embedstream.errors import EmbedStreamError
from embedstream.settings import load_settings
from embedstream.testing import vector_for
from embedstream.testing.virtual_loop import LoopClock, VirtualLoop


def test_a_pause_lasts_the_holds_wait_and_a_little_more() -> None:
    pauses = ModelPauses()
    pauses.pause("m", 10.0, 2.0)
    assert pauses.paused("m", 11.9) and not pauses.paused("other", 11.9)
    assert pauses.paused("m", 12.0 + PAUSE_SLACK_S - 0.01)
    assert not pauses.paused("m", 12.0 + PAUSE_SLACK_S)  # its batch went away: over anyway
    assert not pauses


def test_a_success_of_the_model_ends_its_pause_at_once() -> None:
    pauses = ModelPauses()
    pauses.pause("m", 0.0, 5.0)
    pauses.resume("m")
    assert not pauses.paused("m", 0.1)


class KafkaLike(Outcomes[Job]):
    """Kafka work's outcomes: waits for a model the provider does not serve (the default)."""

    def __init__(self) -> None:
        self.done: dict[str, float] = {}
        self.failed: list[str] = []

    async def succeeded(self, key: BucketKey, done: Sequence[Embedded[Job]], dims: int) -> None:
        for embedded in done:
            self.done[embedded.job.id] = asyncio.get_running_loop().time()

    async def retry_later(self, job: Job, error: EmbedStreamError, delay_s: float) -> None:
        self.failed.append(f"retry {job.id}: {error.reason}")

    async def dead_letter(self, job: Job, error: EmbedStreamError) -> None:
        self.failed.append(f"dead letter {job.id}: {error.reason}")

    def answered(self, hits: Sequence[Hit[Job]]) -> None:
        for hit in hits:
            self.done[hit.job.id] = asyncio.get_running_loop().time()

    def abandoned(self, jobs: Sequence[Job]) -> None:
        self.failed.extend(f"abandoned {job.id}" for job in jobs)


class ServesLater:
    """Serves `served`; `deployed` only from `deployed_at` on (404 naming it before)."""

    def __init__(self, deployed_at: float) -> None:
        self.deployed_at = deployed_at
        self.refused_at: list[float] = []

    async def embed(self, call: BatchCall) -> BatchOutcome:
        now = asyncio.get_running_loop().time()
        await asyncio.sleep(0.02)
        if call.model == "deployed" and now < self.deployed_at:
            self.refused_at.append(now)
            body = b'{"error": {"message": "The model `deployed` does not exist", "code": null}}'
            raise classify_status(404, "Error code: 404", {}, call, body)
        return BatchOutcome([vector_for(t) for t in call.texts], 2, len(call.texts), 0.02)

    async def close(self) -> None:
        return None


def test_an_unknown_model_pauses_its_own_work_only() -> None:
    loop = VirtualLoop()
    try:
        loop.run_until_complete(_unknown_model_beside_a_served_one(LoopClock(loop)))
    finally:
        loop.close()


async def _unknown_model_beside_a_served_one(clock: LoopClock) -> None:
    deployed_at = 30.0
    provider = ServesLater(deployed_at)
    outcomes = KafkaLike()
    settings = load_settings(env={}, overrides={
        "max_concurrency": 2, "max_batch_size": 4, "max_wait_ms": 1,
        "retry_backoff_base_ms": 250, "retry_backoff_cap_ms": 60_000,
    })  # fmt: skip
    engine = build_engine(settings, provider, outcomes, clock=clock)
    runner = asyncio.create_task(engine.batcher.run())
    for model in ("deployed", "served"):
        key = BucketKey(Priority.HIGH, model, "float", None)
        for i in range(20):
            engine.batcher.add(key, 1, Job(id=f"{model}-{i}", text=f"{model} text {i}", tokens=1))
    loop = asyncio.get_running_loop()
    usable_while_refused = []
    while loop.time() < deployed_at:
        usable_while_refused.append(engine.governor.provider_usable)
        await asyncio.sleep(0.5)
    engine.batcher.drain()
    await asyncio.wait_for(runner, 60)
    served = [at for job, at in outcomes.done.items() if job.startswith("served")]
    deployed = [at for job, at in outcomes.done.items() if job.startswith("deployed")]
    assert outcomes.failed == []  # nothing dead-lettered, no attempt spent
    assert len(served) == 20 and max(served) < 1.0  # the other model never waited
    assert all(usable_while_refused)  # the provider stays usable: readiness, fetching
    assert len(deployed) == 20
    assert deployed_at <= min(deployed) and max(deployed) <= deployed_at + HOLD_PROBE_MAX_S + 1
    # One held batch asks again on its backoff; the model's other items wait in the batcher.
    gaps = [b - a for a, b in zip(provider.refused_at[2:], provider.refused_at[3:], strict=False)]
    assert len(provider.refused_at) <= 14 and min(gaps) >= 0.2
