"""Creating, listing and describing the declared topics on a real broker."""

from __future__ import annotations

import asyncio
import logging

import pytest
from embedstream.errors import ConfigError
from embedstream.kafka.client.admin import (
    configured_specs,
    create_topics,
    describe_drift,
    describe_topics,
    format_description,
    list_topics,
    load_topic_specs,
    require_topics,
)
from embedstream.kafka.client.topics import topic_settings
from embedstream.settings import load_settings

pytestmark = pytest.mark.integration


async def test_create_is_idempotent_and_describe_matches_declaration(
    bootstrap: str, unique_prefix: str
) -> None:
    specs = load_topic_specs(unique_prefix)
    names = [spec.name for spec in specs]

    assert await create_topics(bootstrap, specs) == names
    assert await create_topics(bootstrap, specs) == []
    assert await list_topics(bootstrap, unique_prefix) == sorted(names)

    descriptions = await describe_topics(bootstrap, specs)
    assert [description.name for description in descriptions] == names
    for spec, description in zip(specs, descriptions, strict=True):
        assert description.partitions == spec.partitions
        assert description.replication_factor == spec.replication_factor
        assert description.configs["max.message.bytes"] == spec.configs["max.message.bytes"]
        assert describe_drift(spec, description) == []
    table = format_description(specs, descriptions)
    assert all(line.endswith("ok") for line in table.splitlines()[1:])


async def test_create_only_adds_missing_topics(bootstrap: str, unique_prefix: str) -> None:
    specs = load_topic_specs(unique_prefix)
    assert await describe_topics(bootstrap, specs) == []

    assert await create_topics(bootstrap, specs[:2]) == [specs[0].name, specs[1].name]
    assert await create_topics(bootstrap, specs) == [spec.name for spec in specs[2:]]


async def test_concurrent_creators_tolerate_each_other(bootstrap: str, unique_prefix: str) -> None:
    specs = load_topic_specs(unique_prefix)
    first, second = await asyncio.gather(
        create_topics(bootstrap, specs), create_topics(bootstrap, specs)
    )
    # Whoever lost the race for a topic saw TopicAlreadyExists and skipped it.
    assert sorted(first + second) == sorted(spec.name for spec in specs)
    assert len(set(first) & set(second)) == 0


async def test_require_topics_names_every_missing_one(bootstrap: str, unique_prefix: str) -> None:
    specs = load_topic_specs(unique_prefix)
    await create_topics(bootstrap, [spec for spec in specs if spec.key == "results"])
    topics = topic_settings(load_settings(env={}, overrides={"topic_prefix": unique_prefix}))
    missing = [name for name in topics if not name.endswith("results")]
    with pytest.raises(ConfigError) as caught:
        await require_topics(bootstrap, topics, wait_s=0.5)
    assert str(caught.value) == (
        f"setting topic_prefix (EMBEDSTREAM_TOPIC_PREFIX): topics {', '.join(missing)} do not "
        f"exist at {bootstrap} (waited 0.5s); create the topics with `embedstream topics create` "
        "(or check the prefix)"
    )


async def test_a_missing_topic_named_by_its_setting_names_that_setting(
    bootstrap: str, unique_prefix: str
) -> None:
    settings = load_settings(
        env={}, overrides={"topic_prefix": unique_prefix, "topic_results": unique_prefix + "out"}
    )
    with pytest.raises(ConfigError) as caught:
        await require_topics(bootstrap, topic_settings(settings, ["results"]), wait_s=0)
    assert str(caught.value) == (
        f"setting topic_results (EMBEDSTREAM_TOPIC_RESULTS): topic {unique_prefix}out does not "
        f"exist at {bootstrap}; create the topics with `embedstream topics create` "
        "(or check the name)"
    )


class _Looked(logging.Handler):
    """Set once require_topics has looked and found topics missing (its DEBUG line)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.event = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "missing" in record.getMessage():
            self.event.set()


async def test_require_topics_waits_for_topics_created_meanwhile(
    bootstrap: str, unique_prefix: str
) -> None:
    logger = logging.getLogger("embedstream.kafka.client.admin")
    looked, level = _Looked(), logger.level
    logger.addHandler(looked)
    logger.setLevel(logging.DEBUG)
    try:
        settings = load_settings(env={}, overrides={"topic_prefix": unique_prefix})
        topics = topic_settings(settings)
        waiting = asyncio.create_task(require_topics(bootstrap, topics, wait_s=30))
        await asyncio.wait_for(looked.event.wait(), 30)
        assert not waiting.done()
        await create_topics(bootstrap, load_topic_specs(unique_prefix))
        await asyncio.wait_for(waiting, 30)  # returns without an error once they exist
    finally:
        logger.removeHandler(looked)
        logger.setLevel(level)


async def test_the_documents_topic_is_made_with_its_compaction_settings(
    bootstrap: str, unique_prefix: str
) -> None:
    settings = load_settings(
        env={},
        overrides={
            "bootstrap_servers": bootstrap, "topic_prefix": unique_prefix,
            "topic_documents": unique_prefix + "documents",
        },
    )  # fmt: skip
    [documents] = [spec for spec in configured_specs(settings) if spec.key == "documents"]
    await create_topics(bootstrap, [documents])
    [description] = await describe_topics(bootstrap, [documents])
    assert describe_drift(documents, description) == []
    for name in ("cleanup.policy", "segment.ms", "max.compaction.lag.ms"):
        assert description.configs[name] == documents.configs[name]
