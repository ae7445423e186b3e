"""Batch jobs through SIGKILLs: real `embedstream run` processes send a low topic through the
simulator's Batch API, and are SIGKILLed three times: while jobs are pending at the provider,
while their results are being written, and at a random moment. Then: every request has its
result (nothing lost), no job was submitted twice (each job id names one batch at the
provider, found again by its metadata after a kill), and under exactly-once a read_committed
reader sees each result once. Bounded in time (pytest-timeout)."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from pathlib import Path
from typing import Any, cast

import orjson
import pytest
from embedsim import SimulatorConfig, SimulatorServer
from embedstream.kafka.client.admin import configured_specs, create_topics, topic_names
from embedstream.kafka.client.topics import TopicNames
from embedstream.settings import load_settings
from embedstream.testing import eventually
from embedstream.wire.batch_jobs import BATCH_METADATA_KEY, JobRecord, decode_job

from tests.e2e.chaos import UNHANDLED, Fleet, ProcessorOptions, figures
from tests.integration.helpers import publish, read_topic, request

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

REQUESTS = 3_000
KILLS = 3


def _options(bootstrap: str, prefix: str, url: str, delivery: str) -> ProcessorOptions:
    return ProcessorOptions(
        bootstrap=bootstrap, prefix=prefix, group=prefix + "group", base_url=url,
        extra_args=(
            "--batch-topics", prefix + "requests.low", "--batch-form-s", "1",
            "--batch-poll-s", "0.3", "--batch-max-inputs", "250", "--delivery", delivery,
        ),
    )  # fmt: skip


async def _results(bootstrap: str, topic: str) -> Counter[str]:
    return Counter(orjson.loads(r.value)["id"] for r in await read_topic(bootstrap, topic,
                                                                          idle_s=0.3))  # fmt: skip


async def _jobs(bootstrap: str, names: TopicNames) -> dict[str, JobRecord]:
    """Each job's last record."""
    records = await read_topic(bootstrap, names.batch_jobs or "", idle_s=0.2)
    return {j.id: j for r in records if r.value is not None and (j := decode_job(r.value))}


@pytest.mark.timeout(420)
@pytest.mark.parametrize("delivery", ["at_least_once", "exactly_once"])
async def test_sigkills_lose_nothing_and_never_pay_a_job_twice(
    bootstrap: str, unique_prefix: str, tmp_path: Path, delivery: str
) -> None:
    config = SimulatorConfig(base_ms=1, batch_completion_s=4.0, batch_validating_s=0.5)
    async with SimulatorServer(config) as simulator:
        settings = load_settings(env={}, overrides={"topic_prefix": unique_prefix})
        await create_topics(bootstrap, configured_specs(settings))
        names = topic_names(unique_prefix)
        options = _options(bootstrap, unique_prefix, simulator.url, delivery)
        texts = {f"k-{i}": f"kill test text {i} " + "w " * (i % 11) for i in range(REQUESTS)}
        rng = random.Random(7)
        async with Fleet(options, tmp_path) as fleet:
            [member] = await fleet.start(1)
            await member.wait_assigned(nonempty=True, timeout_s=60)
            await publish(bootstrap, names.requests_low,
                          [request(i, t) for i, t in texts.items()])  # fmt: skip

            async def pending() -> bool:  # jobs at the provider, none ended yet
                return len(simulator.batches.book) > 0

            async def writing() -> bool:  # some results written, not all
                return 0 < sum((await _results(bootstrap, names.results)).values()) < REQUESTS

            moments = [("pending", pending), ("writing", writing)]
            for kill in range(KILLS):
                name, condition = moments[kill] if kill < len(moments) else ("random", None)
                if condition is not None:
                    await eventually(condition, 120, 0.2)
                else:
                    await asyncio.sleep(rng.uniform(0.5, 3.0))
                await member.sigkill()
                figures("batch kill", delivery=delivery, at=name,
                        batches=len(simulator.batches.book))  # fmt: skip
                await asyncio.sleep(0.5)
                await member.start()
                await member.wait_assigned(timeout_s=60)

            async def all_answered() -> bool:
                return set(await _results(bootstrap, names.results)) >= set(texts)

            try:
                await eventually(all_answered, 240, 0.5)
            except AssertionError:
                answered = len(await _results(bootstrap, names.results))
                said = f"{answered} of {REQUESTS} answered\n{fleet.log_tails()}"
                raise AssertionError(said) from None

            async def all_finished() -> bool:  # (a job's last record follows its results)
                return all(j.state == "finished" for j in (await _jobs(bootstrap, names)).values())

            await eventually(all_finished, 60, 0.5)
            results = await _results(bootstrap, names.results)
            codes = await fleet.stop_all()
        assert codes == [0], codes
        assert fleet.unhandled_errors() == {} or not fleet.lines_with(UNHANDLED)
        listed = simulator.batches.book.listed(None, 100, simulator.config, 1e18)
        batches = cast(list[dict[str, Any]], listed["data"])
        per_job = Counter(b["metadata"][BATCH_METADATA_KEY] for b in batches)
        jobs = await _jobs(bootstrap, names)
        duplicates = {i: n for i, n in results.items() if n > 1}
        figures(
            "batch kills",
            delivery=delivery,
            requests=REQUESTS,
            jobs=len(jobs),
            batches=len(batches),
            duplicate_results=len(duplicates),
            batch_inputs=simulator.stats.batch_inputs,
            sync_inputs=simulator.stats.inputs,
        )
        assert set(results) == set(texts), "lost"
        assert {job: n for job, n in per_job.items() if n > 1} == {}, "a job paid twice"
        assert set(per_job) <= set(jobs)
        unfinished = {
            j.id: (j.state, j.status, j.rev) for j in jobs.values() if j.state != "finished"
        }
        assert unfinished == {}, unfinished
        if delivery == "exactly_once":
            assert duplicates == {}
