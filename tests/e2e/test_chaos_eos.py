"""Chaos tests of exactly-once mode: a read_committed reader sees every result exactly once.

Same harness as test_chaos.py (real `embedstream run` processes, a feeder, the verifier), with
`--delivery exactly_once`: each input partition's outputs and offsets commit in one
transaction, and a partition's transactional id fences any previous owner. Every test ends by
stopping the members with SIGTERM (exit 0) and checks that no member ever logged an aiokafka
state assertion, an unretrieved exception or an unclosed client (chaos.UNTIDY).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from embedsim.server import SimulatorServer
from embedstream.kafka.client.admin import create_topics, load_topic_specs

from tests.e2e.chaos import UNHANDLED, UNTIDY, Fleet, ProcessorOptions
from tests.e2e.chaos_feed import Feeder, report_figures, run_until_drained
from tests.e2e.chaos_scale import SCALE
from tests.integration.broker import PrivateBroker

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

KILLS = SCALE.member_kills
BROKER_KILLS = SCALE.broker_kills


async def _stop_tidily(fleet: Fleet) -> None:
    """SIGTERM every member (each must exit 0), then: no untidy or unhandled log line."""
    codes = await fleet.stop_all()
    assert codes == [0] * len(codes), codes
    untidy = fleet.lines_with(UNTIDY + UNHANDLED)
    assert untidy == {}, untidy


def _options(bootstrap: str, prefix: str, base_url: str) -> ProcessorOptions:
    return ProcessorOptions(
        bootstrap=bootstrap, prefix=prefix, group=prefix + "group", base_url=base_url,
        extra_args=("--delivery", "exactly_once"),
    )  # fmt: skip


@pytest.mark.timeout(300)
async def test_exactly_once_survives_member_sigkills_without_duplicates(
    bootstrap: str, unique_prefix: str, simulator: SimulatorServer, tmp_path: Path
) -> None:
    """Three members, one SIGKILLed (and restarted) KILLS times while requests flow: lost 0 and
    duplicates 0 in a read_committed read, because a killed member's open transaction (its
    outputs and offsets together) is aborted by the next owner's fencing."""
    options = _options(bootstrap, unique_prefix, simulator.url)
    await create_topics(bootstrap, load_topic_specs(unique_prefix))
    async with Fleet(options, tmp_path) as fleet:
        members = await fleet.start(3)
        feeder = Feeder(
            bootstrap, unique_prefix, count=SCALE.steady_events, rate_per_s=400, id_prefix="e"
        )
        async with feeder:
            for kill in range(KILLS):
                victim = members[kill % len(members)]
                await victim.wait_assigned(nonempty=True, timeout_s=60)
                await asyncio.sleep(1.5)
                await victim.sigkill()
                await asyncio.sleep(0.5)
                await victim.start()
                await victim.wait_assigned(timeout_s=60)
            drained = await run_until_drained(
                bootstrap, unique_prefix, options.group, feeder, timeout_s=180,
                max_duplicates=0, describe=fleet.log_tails, logs=fleet.log_paths(),
            )  # fmt: skip
        report = drained.report
        report_figures(f"eos sigkill x{KILLS}", feeder, drained, kills=KILLS)
        assert report.lost == (), drained.explain()
        assert report.duplicates == {}, report.summary()
        assert report.misattributed == () and report.in_both == (), report.summary()
        await _stop_tidily(fleet)


@pytest.mark.timeout(300)
async def test_exactly_once_fences_a_paused_zombie(
    bootstrap: str, unique_prefix: str, simulator: SimulatorServer, tmp_path: Path
) -> None:
    """A member frozen (SIGSTOP) for twice the session timeout loses its partitions; the new
    owners' producers fence its transactional ids, so when it resumes (SIGCONT) its late
    writes are rejected: duplicates 0, lost 0."""
    options = _options(bootstrap, unique_prefix, simulator.url)
    await create_topics(bootstrap, load_topic_specs(unique_prefix))
    async with Fleet(options, tmp_path) as fleet:
        members = await fleet.start(3)
        feeder = Feeder(
            bootstrap, unique_prefix, count=SCALE.zombie_events, rate_per_s=400, id_prefix="z"
        )
        async with feeder:
            zombie = members[0]
            await zombie.wait_assigned(nonempty=True, timeout_s=60)
            await asyncio.sleep(2.0)
            zombie.sigstop()
            await asyncio.sleep(2 * options.session_timeout_ms / 1000)
            zombie.sigcont()
            drained = await run_until_drained(
                bootstrap, unique_prefix, options.group, feeder, timeout_s=180,
                max_duplicates=0, describe=fleet.log_tails, logs=fleet.log_paths(),
            )  # fmt: skip
        report = drained.report
        fenced = "fenced" in zombie.log_text(current_only=False).lower()
        report_figures("eos zombie", feeder, drained, zombie_saw_fencing=fenced)
        assert report.lost == (), drained.explain()
        assert report.duplicates == {}, report.summary()
        assert all(p.alive for p in members)
        await _stop_tidily(fleet)


@pytest.mark.timeout(360)
async def test_exactly_once_survives_broker_sigkills_without_duplicates(
    private_broker: PrivateBroker, simulator: SimulatorServer, tmp_path: Path
) -> None:
    """A broker of the test's own (the transaction and group coordinator) is SIGKILLed and
    restarted BROKER_KILLS times while three exactly-once members run and the feeder publishes.
    Transactions in flight are lost with it; the members must abort or drop their producers
    and carry on: lost 0 and duplicates 0 in a read_committed read, every member alive, and
    no untidy log line."""
    bootstrap = private_broker.bootstrap
    prefix = "chaos.eos.broker."
    options = _options(bootstrap, prefix, simulator.url)
    await create_topics(bootstrap, load_topic_specs(prefix))
    async with Fleet(options, tmp_path) as fleet:
        members = await fleet.start(3)
        feeder = Feeder(bootstrap, prefix, count=SCALE.broker_events, rate_per_s=200, id_prefix="x")
        outages: list[float] = []
        async with feeder:
            for _ in range(BROKER_KILLS):
                await asyncio.sleep(4.0)
                down = time.monotonic()
                await private_broker.kill()
                await asyncio.sleep(2.0)
                await private_broker.start()
                outages.append(round(time.monotonic() - down, 1))
                dead = [p.name for p in members if not p.alive]
                assert not dead, f"exited while the broker was down: {dead}\n{fleet.log_tails()}"
            drained = await run_until_drained(
                bootstrap, prefix, options.group, feeder, timeout_s=200,
                max_duplicates=0, describe=fleet.log_tails, logs=fleet.log_paths(),
            )  # fmt: skip
        report = drained.report
        report_figures(
            f"eos broker sigkill x{BROKER_KILLS}", feeder, drained, broker_kills=len(outages),
            outages_s=outages, send_errors=feeder.send_errors,
            repeated_requests=len(report.repeated_requests),
        )  # fmt: skip
        assert report.lost == (), drained.explain()
        # A request the feeder had to publish twice (its send failed with the broker) is two
        # requests: two results for it are not a duplicate of the processors' making.
        extra = {i: n for i, n in report.duplicates.items()
                 if n > report.repeated_requests.get(i, 1)}  # fmt: skip
        assert extra == {}, report.summary()
        assert report.misattributed == () and report.in_both == (), report.summary()
        assert all(p.alive for p in members), [(p.name, p.returncode) for p in members]
        await _stop_tidily(fleet)
