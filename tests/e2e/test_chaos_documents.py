"""Chaos test of documents: members SIGKILLed while document versions flow.

Real `embedstream run` processes consume a plan of document events (several versions of the same
doc_ids that grow and shrink, tombstones, poison chunks the simulator rejects for good, plain
requests among them) while members are SIGKILLed and restarted. Afterwards the group drains and
two independent readings of the whole output must agree with the contract: `embedstream verify`
(every published version ended once, chunk runs whole, finals and tombstones in publish order,
missing chunks dead-lettered) and the plan's own check (each version ended as the plan says:
``complete`` with its chunk count, or ``incomplete`` naming exactly its poison chunks; every
chunk's vector is the one of its own span). With ``delivery=exactly_once`` a read_committed
reader sees no duplicate at all.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from embedsim import SimulatorConfig, SimulatorServer
from embedstream.kafka.client.admin import create_topics, load_topic_specs
from embedstream.settings.derived import ITEM_RESIDENT_BYTES
from embedstream.tools.verify.app import read_back

from tests.e2e.chaos import DEFAULT_MODEL, Fleet, ProcessorOptions, figures
from tests.e2e.chaos_documents import (
    CHUNK_ARGS,
    POISON,
    DocumentFeeder,
    DocumentPlan,
    check_endings,
)
from tests.e2e.chaos_feed import run_until_drained

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

KILLS = 3
MEMBERS = 2


@pytest.mark.timeout(150)
@pytest.mark.parametrize("delivery", ["at_least_once", "exactly_once"])
async def test_sigkill_while_documents_flow_ends_every_version_as_the_contract_says(
    bootstrap: str, unique_prefix: str, tmp_path: Path, delivery: str
) -> None:
    """Two members, SIGKILLed in turn three times (and restarted) while about 550 events flow.
    Proves that a crash loses no version and no tombstone, never mixes up chunks of versions
    or documents, keeps a poison chunk's siblings and names it missing, and re-delivers at most
    what the killed members held (exactly-once: nothing twice)."""
    plan = DocumentPlan.build(documents=60, rounds=6, seed=18)
    exactly_once = delivery == "exactly_once"
    # Calls of 20 ms and a commit a second leave work in flight and completed but uncommitted
    # when a member dies, so its successor replays a suffix of some doc_ids' events.
    config = SimulatorConfig(base_ms=20, reject_texts_containing=POISON)
    async with SimulatorServer(config) as simulator:
        options = ProcessorOptions(
            bootstrap, unique_prefix, unique_prefix + "group", simulator.url,
            max_buffered_bytes=200 * ITEM_RESIDENT_BYTES,  # an item bound of 200
            max_batch_size=16, commit_interval_ms=1000,
            extra_args=(*CHUNK_ARGS, "--delivery", delivery),
        )  # fmt: skip
        await create_topics(bootstrap, load_topic_specs(unique_prefix))
        async with Fleet(options, tmp_path) as fleet:
            started = time.monotonic()
            members = await fleet.start(MEMBERS)
            joined_s = round(time.monotonic() - started, 1)
            feeder = DocumentFeeder(bootstrap, unique_prefix, plan, rate_per_s=25)
            async with feeder:
                for kill in range(KILLS):
                    victim = members[kill % len(members)]
                    await victim.wait_assigned(nonempty=True, timeout_s=40)
                    await asyncio.sleep(2.0)  # let it take documents
                    await victim.sigkill()
                    await asyncio.sleep(0.5)
                    await victim.start()
                    await victim.wait_assigned(timeout_s=40)
                drained = await run_until_drained(
                    bootstrap, unique_prefix, options.group, feeder, timeout_s=60,
                    describe=fleet.log_tails, logs=fleet.log_paths(),
                )  # fmt: skip
            found = await read_back(bootstrap, unique_prefix, timeout_s=30)
            endings = check_endings(plan, found.document_records, model=DEFAULT_MODEL)
            unhandled = fleet.unhandled_errors()
    report = drained.report
    documents = report.documents
    assert documents is not None, report.summary()
    bound = 0 if exactly_once else KILLS * (options.buffered_items + options.in_flight_items)
    figures(
        f"documents sigkill x{KILLS} ({delivery})", events=len(plan.events),
        versions=plan.versions, tombstones=plan.tombstones, poisoned=plan.poisoned,
        planned_chunks=plan.chunks, chunk_records=documents.chunk_records,
        complete=endings.complete, incomplete=endings.incomplete,
        doc_duplicates=documents.duplicates, plain_duplicates=report.duplicate_results,
        duplicate_bound=bound, joined_s=joined_s, feed_s=feeder.duration_s,
        drain_s=drained.drain_s, problems=len(endings.problems),
    )  # fmt: skip
    # verify: the contract, read from the topics alone.
    assert documents.lost == () and documents.violations == (), report.summary()
    assert (documents.versions, documents.tombstones) == (plan.versions, plan.tombstones)
    assert report.lost == () and report.misattributed == () and report.in_both == ()
    # The plan: each version ended as it must, each chunk holds its own span's vector.
    assert endings.problems == (), endings.problems
    assert endings.incomplete == plan.poisoned > 0
    assert endings.complete == len(plan.expected()) - plan.poisoned  # distinct versions
    assert len(found.chunk_letters) >= sum(len(e.missing) for e in plan.expected().values())
    assert documents.duplicates + report.duplicate_results <= bound, report.summary()
    if exactly_once:  # a read_committed reader sees each good chunk once, nothing else
        assert documents.chunk_records == plan.good_chunks, report.summary()
    else:
        assert documents.chunk_records >= plan.good_chunks, report.summary()
    assert unhandled == {}, unhandled
