"""Chaos tests of the delivery guarantee (at-least-once), in the style of Kafka's system tests.

Real `embedstream run` processes consume while a feeder publishes at a steady rate and faults
are injected (SIGKILL and SIGTERM of members, group churn, broker SIGKILL and restart, the
provider down for a long stretch). Afterwards the group must drain (committed lag 0 on both
request lanes and the retry topic) and `embedstream verify` reads the whole output and compares it
with the input set: nothing lost, no vector attributed to the wrong request, no id both
resulted and dead-lettered, duplicates within what at-least-once allows.

Each test prints its figures as a `[chaos] ...` line (`pytest -s` shows them).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from embedsim.server import SimulatorServer
from embedstream.kafka.client.admin import create_topics, load_topic_specs
from embedstream.settings.derived import ITEM_RESIDENT_BYTES
from embedstream.tools.embedded import free_port

from tests.e2e.chaos import Fleet, ProcessorOptions
from tests.e2e.chaos_feed import Feeder, report_figures, run_until_drained
from tests.e2e.chaos_scale import SCALE
from tests.e2e.chaos_watch import CommitWatcher, MetricsSampler, RssMonitor
from tests.integration.broker import PrivateBroker

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

KILLS = SCALE.member_kills
RSS_BUDGET_MIB = 400
OUTAGE_S = SCALE.outage_s


async def _create_topics(bootstrap: str, prefix: str) -> None:
    await create_topics(bootstrap, load_topic_specs(prefix))


def _options(
    bootstrap: str, prefix: str, base_url: str, *, buffered_items: int,
    extra_args: tuple[str, ...] = (),
) -> ProcessorOptions:  # fmt: skip
    """Processors whose buffer holds at most ``buffered_items``: the byte bound it derives from."""
    return ProcessorOptions(
        bootstrap, prefix, prefix + "group", base_url,
        max_buffered_bytes=buffered_items * ITEM_RESIDENT_BYTES, extra_args=extra_args,
    )  # fmt: skip


@pytest.mark.timeout(240)
async def test_sigkills_of_members_lose_nothing(
    bootstrap: str, unique_prefix: str, simulator: SimulatorServer, tmp_path: Path
) -> None:
    """Three processors in one group; KILLS times one of them (each in turn) is SIGKILLed while
    requests flow, and restarted. Proves that a crash loses nothing (every id has a result),
    never attributes a vector to the wrong request, never both results and dead-letters an id,
    and re-delivers at most what the dead member held: duplicates <= kills x
    (the buffer's item bound + max_concurrency x max_batch_size)."""
    options = _options(bootstrap, unique_prefix, simulator.url, buffered_items=500)
    await _create_topics(bootstrap, unique_prefix)
    async with Fleet(options, tmp_path) as fleet, RssMonitor(lambda: fleet.processes) as rss:
        members = await fleet.start(3)
        feeder = Feeder(
            bootstrap, unique_prefix, count=SCALE.steady_events, rate_per_s=400, id_prefix="k"
        )
        async with feeder:
            for kill in range(KILLS):
                victim = members[kill % len(members)]
                await victim.wait_assigned(nonempty=True, timeout_s=60)
                await asyncio.sleep(1.5)  # let it take work
                await victim.sigkill()
                await asyncio.sleep(0.5)
                await victim.start()
                await victim.wait_assigned(timeout_s=60)
            drained = await run_until_drained(
                bootstrap, unique_prefix, options.group, feeder, timeout_s=150,
                describe=fleet.log_tails, logs=fleet.log_paths(),
            )  # fmt: skip
        bound = KILLS * (options.buffered_items + options.in_flight_items)
        report = drained.report
        report_figures(
            f"sigkill x{KILLS}", feeder, drained, kills=KILLS, duplicate_bound=bound,
            peak_rss_mib=rss.peak_mib, unhandled=_unhandled(fleet),
        )  # fmt: skip
        assert report.lost == (), drained.explain()
        assert report.misattributed == (), report.summary()
        assert report.in_both == (), report.summary()
        assert report.duplicate_results <= bound, report.summary()
        assert all(p.alive for p in members)


@pytest.mark.timeout(240)
async def test_rolling_sigterm_restarts_lose_and_duplicate_nothing(
    bootstrap: str, unique_prefix: str, simulator: SimulatorServer, tmp_path: Path
) -> None:
    """Rounds of rolling restarts (SCALE.rolling_rounds) over three processors, each stopped
    with SIGTERM while requests flow. A clean stop drains, commits and leaves the group, and
    the members that stay hand their partitions over without re-running work: nothing lost,
    no duplicate at all (max_duplicates=0), and every SIGTERM exits 0."""
    options = _options(bootstrap, unique_prefix, simulator.url, buffered_items=500)
    await _create_topics(bootstrap, unique_prefix)
    async with Fleet(options, tmp_path) as fleet, RssMonitor(lambda: fleet.processes) as rss:
        members = await fleet.start(3)
        codes: list[int] = []
        feeder = Feeder(
            bootstrap, unique_prefix, count=SCALE.steady_events, rate_per_s=450, id_prefix="t"
        )
        async with feeder:
            for _ in range(SCALE.rolling_rounds):
                for member in members:
                    await member.wait_assigned(nonempty=True, timeout_s=60)
                    await asyncio.sleep(1.0)
                    codes.append(await member.sigterm(timeout_s=60))
                    await member.start()
                    await member.wait_assigned(timeout_s=60)
            drained = await run_until_drained(
                bootstrap, unique_prefix, options.group, feeder, timeout_s=150, max_duplicates=0,
                describe=fleet.log_tails, logs=fleet.log_paths(),
            )  # fmt: skip
        report = drained.report
        report_figures(
            f"rolling sigterm x{SCALE.rolling_rounds}", feeder, drained, restarts=len(codes),
            exit_codes=codes,
            peak_rss_mib=rss.peak_mib, unhandled=_unhandled(fleet),
        )  # fmt: skip
        assert codes == [0] * (SCALE.rolling_rounds * len(members)), codes
        # A request the feeder had to publish twice would be a duplicate of its own making.
        assert feeder.resent == 0 and not report.repeated_requests, report.repeated_requests
        assert report.lost == (), drained.explain()
        assert report.misattributed == (), report.summary()
        assert report.in_both == (), report.summary()
        assert report.duplicate_results == 0, report.summary()
        assert report.ok, report.summary()


@pytest.mark.timeout(360)  # 54-74 s here; each of its eight joins waits up to 60 s under load
async def test_group_churn_keeps_commits_monotonic_and_loses_nothing(
    bootstrap: str, unique_prefix: str, simulator: SimulatorServer, tmp_path: Path
) -> None:
    """The group grows and shrinks 1 -> 3 -> 1 (SCALE.churn_cycles times) while requests flow
    (members join, then leave with SIGTERM, or in the second cycle with SIGKILL), a rebalance
    per membership change (two may coalesce) as counted by the
    member that stays throughout. Proves that rebalances lose nothing, that no commit error
    goes unhandled (no traceback, no "Task exception was never retrieved" in any log), and that
    the group's committed offsets never move backwards."""
    options = _options(bootstrap, unique_prefix, simulator.url, buffered_items=500)
    await _create_topics(bootstrap, unique_prefix)
    async with (
        Fleet(options, tmp_path) as fleet,
        RssMonitor(lambda: fleet.processes) as rss,
        CommitWatcher(bootstrap, options.group) as watcher,
    ):
        (anchor,) = await fleet.start(1)
        others = [fleet.add(), fleet.add()]
        feeder = Feeder(
            bootstrap,
            unique_prefix,
            count=SCALE.churn_cycles * 7_000,
            rate_per_s=450,
            id_prefix="g",
        )
        membership_changes = 0
        async with feeder:
            for cycle in range(SCALE.churn_cycles):
                for member in others:  # 1 -> 2 -> 3
                    await member.start()
                    await member.wait_assigned(nonempty=True, timeout_s=60)
                    membership_changes += 1
                    await asyncio.sleep(1.0)
                for index, member in enumerate(reversed(others)):  # 3 -> 2 -> 1
                    seen = len(anchor.assignments())
                    if cycle == 1:
                        await member.sigkill()  # leaves by session timeout, not LeaveGroup
                    else:
                        assert await member.sigterm(timeout_s=60) == 0
                    await anchor.wait_assigned(count=seen + 1, timeout_s=60)
                    membership_changes += 1
                    if index == 0:
                        await asyncio.sleep(1.0)
            drained = await run_until_drained(
                bootstrap, unique_prefix, options.group, feeder, timeout_s=150,
                describe=fleet.log_tails, logs=fleet.log_paths(),
            )  # fmt: skip
        rebalances = len(anchor.assignments()) - 1  # its first assignment was the initial join
        report = drained.report
        errors = fleet.unhandled_errors()
        report_figures(
            "group churn", feeder, drained, membership_changes=membership_changes,
            rebalances=rebalances, commit_polls=watcher.polls, commit_poll_errors=watcher.errors,
            offsets_decreased=len(watcher.decreases), peak_rss_mib=rss.peak_mib,
            unhandled=_unhandled(fleet),
        )  # fmt: skip
        assert rebalances >= membership_changes - 2, (rebalances, membership_changes)
        assert report.lost == (), drained.explain()
        assert report.misattributed == (), report.summary()
        assert report.in_both == (), report.summary()
        assert errors == {}, errors
        assert not watcher.ever_decreased, watcher.decreases
        assert watcher.polls > 0


@pytest.mark.timeout(300)
async def test_broker_sigkills_and_restarts_lose_nothing(
    private_broker: PrivateBroker, simulator: SimulatorServer, tmp_path: Path
) -> None:
    """A broker of the test's own is SIGKILLed and restarted (data dir kept) SCALE.broker_kills
    times while two processors consume and the feeder publishes. Proves that the processors
    ride out a broker crash (none exits; all alive at the end) and that nothing is lost once
    the broker is back; vectors still match their requests."""
    bootstrap = private_broker.bootstrap
    prefix = "chaos.broker."
    options = _options(bootstrap, prefix, simulator.url, buffered_items=500)
    await _create_topics(bootstrap, prefix)
    async with Fleet(options, tmp_path) as fleet, RssMonitor(lambda: fleet.processes) as rss:
        members = await fleet.start(2)
        feeder = Feeder(bootstrap, prefix, count=SCALE.broker_events, rate_per_s=200, id_prefix="b")
        outages: list[float] = []
        async with feeder:
            for _ in range(SCALE.broker_kills):
                await asyncio.sleep(4.0)
                down = time.monotonic()
                await private_broker.kill()
                await asyncio.sleep(2.0)
                await private_broker.start()
                outages.append(round(time.monotonic() - down, 1))
                dead = [p.name for p in members if not p.alive]
                assert not dead, f"exited while the broker was down: {dead}\n{fleet.log_tails()}"
            drained = await run_until_drained(
                bootstrap, prefix, options.group, feeder, timeout_s=150,
                describe=fleet.log_tails, logs=fleet.log_paths(),
            )  # fmt: skip
        report = drained.report
        report_figures(
            f"broker sigkill x{SCALE.broker_kills}", feeder, drained, broker_kills=len(outages),
            outages_s=outages,
            send_errors=feeder.send_errors, peak_rss_mib=rss.peak_mib,
            alive=sum(p.alive for p in members), unhandled=_unhandled(fleet),
        )  # fmt: skip
        assert report.lost == (), drained.explain()
        assert report.misattributed == (), report.summary()
        assert report.in_both == (), report.summary()
        assert all(p.alive for p in members), [(p.name, p.returncode) for p in members]


@pytest.mark.timeout(240)
async def test_provider_down_pauses_within_memory_and_dead_letters_nothing(
    bootstrap: str, unique_prefix: str, tmp_path: Path
) -> None:
    """The provider goes away for OUTAGE_S (the simulator stops; a new one starts on the same port
    later) while requests keep arriving. Proves that backpressure holds through a long outage:
    the items held never exceed the buffer's item bound, partitions are paused during the outage,
    resident memory stays within RSS_BUDGET_MIB, nothing is dead-lettered for a transient
    outage, and after recovery the committed lag drains to 0 with nothing lost."""
    port = free_port()
    max_buffered = 1000  # the item bound, derived from a byte bound of 1000 KiB
    first = SimulatorServer()
    await first.start(port=port)
    second = SimulatorServer()
    options = _options(bootstrap, unique_prefix, first.url, buffered_items=max_buffered)
    assert options.buffered_items == max_buffered
    await _create_topics(bootstrap, unique_prefix)
    try:
        async with Fleet(options, tmp_path) as fleet, RssMonitor(lambda: fleet.processes) as rss:
            member = fleet.add(metrics_port=free_port())
            await member.start()
            await member.wait_assigned(timeout_s=60)
            feeder = Feeder(
                bootstrap, unique_prefix, count=SCALE.outage_events, rate_per_s=300, id_prefix="p"
            )
            async with MetricsSampler(member.metrics_port) as metrics, feeder:
                await asyncio.sleep(5.0)
                await first.stop()
                outage_start = time.monotonic()
                await asyncio.sleep(OUTAGE_S)
                await second.start(port=port)
                outage_end = time.monotonic()
                drained = await run_until_drained(
                    bootstrap, unique_prefix, options.group, feeder, timeout_s=150,
                    describe=fleet.log_tails, logs=fleet.log_paths(),
                )  # fmt: skip
            report = drained.report
            during = {"since": outage_start, "until": outage_end}
            peak_buffered = metrics.peak("embedstream_buffered_items")
            buffered_during_outage = metrics.peak("embedstream_buffered_items", **during)
            paused_during_outage = metrics.peak("embedstream_paused_partitions", **during)
            dead_letter_metric = metrics.last("embedstream_dead_letters_total")
            report_figures(
                "provider down", feeder, drained, outage_s=round(outage_end - outage_start, 1),
                scrapes=len(metrics.samples), buffered_items_bound=max_buffered,
                peak_buffered_items=int(peak_buffered),
                peak_buffered_during_outage=int(buffered_during_outage),
                peak_paused_during_outage=int(paused_during_outage),
                dead_letters_metric=int(dead_letter_metric), peak_rss_mib=rss.peak_mib,
                rss_budget_mib=RSS_BUDGET_MIB, unhandled=_unhandled(fleet),
            )  # fmt: skip
            assert len(metrics.samples) > 10, metrics.failures
            assert peak_buffered <= max_buffered, peak_buffered
            assert rss.peak_mib <= RSS_BUDGET_MIB, rss.peak_by_name
            assert paused_during_outage > 0, "no partition paused while the provider was down"
            assert report.dead_letters == 0, report.summary()
            assert dead_letter_metric == 0, dead_letter_metric
            assert report.lost == (), drained.explain()
            assert report.misattributed == (), report.summary()
            assert report.in_both == (), report.summary()
            assert drained.lag == dict.fromkeys(drained.lag, 0), drained.lag
            assert member.alive, member.returncode
    finally:
        await first.stop()
        await second.stop()


def _unhandled(fleet: Fleet) -> int:
    return sum(len(lines) for lines in fleet.unhandled_errors().values())
