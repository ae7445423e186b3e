"""Creating, listing and describing the declared topics on a real broker."""

from __future__ import annotations

import asyncio

import pytest
from embedstream.kafka.admin import (
    create_topics,
    describe_drift,
    describe_topics,
    format_description,
    list_topics,
    load_topic_specs,
)

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
