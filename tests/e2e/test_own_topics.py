"""Your own topics on a real broker: a processor reads the topics existing pipelines write
(several per lane) and writes where the settings say; `topics create` makes only embedstream's
own topics next to them; `verify` and the lag metrics follow the settings."""

from __future__ import annotations

import asyncio

import aiohttp
import orjson
import pytest
from embedsim.server import SimulatorServer
from embedstream.kafka.client.admin import (
    configured_topics,
    create_topics,
    describe_topics,
    load_topic_specs,
)
from embedstream.kafka.client.topics import TopicSpec
from embedstream.tools.embedded import free_port
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.cli import embedstream
from tests.integration.helpers import (
    create_all_topics,
    publish,
    read_topic,
    request,
    running_processor,
    settings_for,
    wait_for_ids,
)

pytestmark = pytest.mark.integration


def _pipeline_topic(prefix: str, name: str, partitions: int = 2) -> TopicSpec:
    """A topic some other pipeline created, with its own partition count."""
    return TopicSpec("requests_low", prefix + name, partitions, 1, {})


def _topic_env(prefix: str) -> dict[str, str]:
    return {
        "EMBEDSTREAM_TOPIC_PREFIX": prefix,
        "EMBEDSTREAM_TOPIC_REQUESTS_HIGH": f"{prefix}search.queries",
        "EMBEDSTREAM_TOPIC_REQUESTS_LOW": f"{prefix}docs.text,{prefix}tickets.body",
        "EMBEDSTREAM_TOPIC_RESULTS": f"{prefix}vectors",
        "EMBEDSTREAM_TOPIC_DLQ": f"{prefix}vectors.failed",
    }


async def test_topics_create_next_to_existing_pipelines_makes_only_its_own(
    bootstrap: str, unique_prefix: str
) -> None:
    pipelines = [_pipeline_topic(unique_prefix, n) for n in ("search.queries", "docs.text",
                                                             "tickets.body")]  # fmt: skip
    await create_topics(bootstrap, pipelines)
    env = _topic_env(unique_prefix) | {"EMBEDSTREAM_BOOTSTRAP_SERVERS": bootstrap}
    code, out, err = await embedstream("topics", "create", env=env)
    assert code == 0, err
    p = unique_prefix
    assert out.splitlines() == [
        f"created {p}retry",
        f"created {p}vectors",
        f"created {p}vectors.failed",
        f"created {p}batch.jobs",
        f"left as they are: the request topics {p}search.queries, {p}docs.text, {p}tickets.body",
        "4 created, 3 already existed",
    ]
    # The pipelines' topics keep their own shape (2 partitions, not the declared 4).
    described = await describe_topics(bootstrap, pipelines)
    assert [d.partitions for d in described] == [2, 2, 2]
    code, out, _ = await embedstream("topics", "list", env=env)
    assert code == 0 and sorted(out.split()) == sorted(
        [
            *(t.name for t in pipelines),
            f"{p}retry",
            f"{p}vectors",
            f"{p}vectors.failed",
            f"{p}batch.jobs",
        ]
    )


async def test_topics_create_refuses_a_misspelt_pipeline_topic(
    bootstrap: str, unique_prefix: str
) -> None:
    await create_topics(bootstrap, [_pipeline_topic(unique_prefix, "docs.text")])
    env = {
        "EMBEDSTREAM_BOOTSTRAP_SERVERS": bootstrap,
        "EMBEDSTREAM_TOPIC_PREFIX": unique_prefix,
        "EMBEDSTREAM_TOPIC_REQUESTS_LOW": f"{unique_prefix}docs.text,{unique_prefix}docs.txet",
    }
    code, out, err = await embedstream("topics", "create", env=env)
    assert code == 2 and out == ""
    [line] = err.splitlines()
    assert line.startswith(
        "embedstream: error: setting topic_requests_low (EMBEDSTREAM_TOPIC_REQUESTS_LOW): "
        f"topic {unique_prefix}docs.txet does not exist at {bootstrap}"
    )
    existing = await describe_topics(bootstrap, load_topic_specs(unique_prefix))
    assert existing == []  # nothing was created


async def test_processor_reads_several_pipeline_topics_and_writes_where_told(
    bootstrap: str, unique_prefix: str, simulator: SimulatorServer
) -> None:
    env = _topic_env(unique_prefix)
    settings = settings_for(
        bootstrap,
        unique_prefix,
        simulator.url,
        metrics_port=free_port(),
        **{name.removeprefix("EMBEDSTREAM_").lower(): value for name, value in env.items()},
    )
    names = configured_topics(settings)
    await create_all_topics(settings)
    async with running_processor(settings):
        await publish(bootstrap, names.high[0], [request("q-1", "a query")])
        await publish(bootstrap, names.low[0], [request("d-1", "a document")])
        await publish(bootstrap, names.low[1], [request("t-1", "a ticket"), (b"t-2", b"{bad")])
        results = await wait_for_ids(bootstrap, names.results, {"q-1", "d-1", "t-1"}, 60)
        lanes = await _lag_lanes(settings.metrics_port)
    assert set(results) == {"q-1", "d-1", "t-1"}
    [dead] = await read_topic(bootstrap, names.dead_letters, idle_s=0.2)
    headers = {k: v.decode() for k, v in dead.headers}
    assert headers["embedstream.source.topic"] == names.low[1]
    # The lag metrics say which lane each topic feeds, so top and alerts need no names.
    assert lanes == {
        names.high[0]: "high",
        names.low[0]: "low",
        names.low[1]: "low",
        names.retry: "retry",
    }
    code, out, err = await embedstream(
        "verify",
        "--json",
        "--timeout",
        "30",
        env=env | {"EMBEDSTREAM_BOOTSTRAP_SERVERS": bootstrap},
    )
    report = orjson.loads(out)
    assert code == 0 and report["ok"], err + out
    # Every request topic was read: the three requests and the bad record, matched to its
    # dead letter by where it came from.
    assert (report["requests"], report["unparseable_requests"]) == (3, 1)


async def _lag_lanes(port: int) -> dict[str, str]:
    url = f"http://127.0.0.1:{port}/metrics"
    for _ in range(50):  # the health loop samples once a second
        async with aiohttp.ClientSession() as session, session.get(url) as response:
            text = await response.text()
        found = {
            sample.labels["topic"]: sample.labels["lane"]
            for family in text_string_to_metric_families(text)
            if family.name == "embedstream_consumer_lag"
            for sample in family.samples
        }
        if len(found) == 4:
            return found
        await asyncio.sleep(0.2)
    return found
