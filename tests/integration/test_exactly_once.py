"""Exactly-once mode on Apache Kafka: outputs and offsets in one transaction per partition."""

from __future__ import annotations

import pytest
from embedstream.kafka.admin import topic_names
from embedstream.tools.simulator.server import SimulatorServer
from embedstream.tools.verify.app import verify

from tests.integration.helpers import (
    committed_lag,
    create_all_topics,
    publish,
    request,
    running_processor,
    settings_for,
    wait_for_ids,
)

pytestmark = pytest.mark.integration


async def test_results_and_offsets_commit_together(bootstrap: str, unique_prefix: str) -> None:
    async with SimulatorServer() as simulator:
        settings = settings_for(
            bootstrap, unique_prefix, simulator.url, delivery="exactly_once", max_batch_size=64
        )
        names = topic_names(unique_prefix)
        await create_all_topics(settings)
        ids = [f"x{i}" for i in range(3000)]
        bad = [(b"bad", b"{not json")]
        async with running_processor(settings):
            await publish(bootstrap, names.requests_low, [request(i, f"t {i}") for i in ids] + bad)
            seen = await wait_for_ids(bootstrap, names.results, set(ids), timeout_s=120)
        assert set(seen) == set(ids)
        report = await verify(
            bootstrap, unique_prefix, check_vectors=True, default_model=settings.model
        )
        assert report.ok, report.summary()
        assert report.duplicates == {} and report.dead_letters == 1
        lag = await committed_lag(bootstrap, settings.group_id, [names.requests_low])
        assert lag == {names.requests_low: 0}
