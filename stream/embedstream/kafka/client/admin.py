"""Creating and inspecting the declared topics on a broker (see
:mod:`embedstream.kafka.client.topics`
for the declarations and names).

Admin-API quirks stay here; the client itself comes from :mod:`embedstream.kafka.client.clients`, so
TLS and SASL settings apply. Every function takes a
:class:`~embedstream.kafka.client.connection.KafkaConnection` (or, for tests and the embedded
broker, a
plain bootstrap string).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from aiokafka.admin import NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import TopicAlreadyExistsError, UnknownTopicOrPartitionError, for_code

from embedstream.errors import ConfigError
from embedstream.kafka.client.clients import KafkaTarget, admin_for
from embedstream.kafka.client.connection import as_connection

# The declarations live in kafka/client/topics.py; these names are re-exported for callers that
# reach everything topic-related through this module.
from embedstream.kafka.client.topics import DEFAULT_PREFIX as DEFAULT_PREFIX
from embedstream.kafka.client.topics import PACKAGED_TOPICS_FILE as PACKAGED_TOPICS_FILE
from embedstream.kafka.client.topics import TOPIC_KEYS as TOPIC_KEYS
from embedstream.kafka.client.topics import CreationPlan as CreationPlan
from embedstream.kafka.client.topics import TopicConfigError as TopicConfigError
from embedstream.kafka.client.topics import TopicNames as TopicNames
from embedstream.kafka.client.topics import TopicSpec as TopicSpec
from embedstream.kafka.client.topics import configured_specs as configured_specs
from embedstream.kafka.client.topics import configured_topics as configured_topics
from embedstream.kafka.client.topics import load_topic_specs as load_topic_specs
from embedstream.kafka.client.topics import parse_topic_specs as parse_topic_specs
from embedstream.kafka.client.topics import plan_creation as plan_creation
from embedstream.kafka.client.topics import topic_names as topic_names

log = logging.getLogger(__name__)

_ADMIN_TIMEOUT_MS = 15_000
_LEADER_WAIT_S = 15.0
# How long `embedstream run` waits for missing topics: a deployment may create them (a Job,
# compose's one-shot service) a moment after the processors start.
TOPICS_WAIT_S = 5.0
_TOPICS_POLL_S = 0.5


@dataclass(frozen=True)
class TopicDescription:
    """A topic as the broker reports it; configs holds every non-null topic config."""

    name: str
    partitions: int
    replication_factor: int
    configs: Mapping[str, str]


@asynccontextmanager
async def _admin_client(kafka: KafkaTarget) -> AsyncIterator[Any]:
    admin = admin_for(kafka, request_timeout_ms=_ADMIN_TIMEOUT_MS)
    try:
        await admin.start()
        yield admin
    finally:
        await admin.close()


async def create_topics(kafka: KafkaTarget, specs: Sequence[TopicSpec]) -> list[str]:
    """Creates the topics that do not exist yet and returns their names; idempotent.

    Returns once every created partition has a leader, so callers can produce at once.
    """
    async with _admin_client(kafka) as admin:
        existing = set(await admin.list_topics())
        missing = [spec for spec in specs if spec.name not in existing]
        if not missing:
            return []
        response = await admin.create_topics([_new_topic(spec) for spec in missing])
        created = _created_names(response.to_object())
        await _wait_for_leaders(admin, created)
    return [spec.name for spec in missing if spec.name in created]


def _new_topic(spec: TopicSpec) -> Any:
    return NewTopic(
        spec.name, spec.partitions, spec.replication_factor, topic_configs=dict(spec.configs)
    )


def _created_names(response: Mapping[str, Any]) -> set[str]:
    created = set()
    for result in response["topic_errors"]:
        code = int(result["error_code"])
        # Another process may create the same topic between our list and create.
        if code == TopicAlreadyExistsError.errno:
            continue
        if code != 0:
            raise for_code(code)(f"creating topic {result['topic']}: {result['error_message']}")
        created.add(str(result["topic"]))
    return created


async def _wait_for_leaders(admin: Any, names: set[str]) -> None:
    # KRaft answers CreateTopics once the controller commits; the broker may need a
    # moment more before it leads the new partitions.
    if not names:
        return
    async with asyncio.timeout(_LEADER_WAIT_S):
        while True:
            topics = await admin.describe_topics(sorted(names))
            if all(_has_leaders(topic) for topic in topics):
                return
            await asyncio.sleep(0.1)


def _has_leaders(topic: Mapping[str, Any]) -> bool:
    partitions = topic["partitions"]
    return (
        topic["error_code"] == 0
        and bool(partitions)
        and all(partition["leader"] >= 0 for partition in partitions)
    )


async def existing_topics(kafka: KafkaTarget) -> set[str]:
    async with _admin_client(kafka) as admin:
        return {str(name) for name in await admin.list_topics()}


async def require_topics(
    kafka: KafkaTarget, topics: Mapping[str, str], *, wait_s: float = TOPICS_WAIT_S
) -> None:
    """Return once every topic of ``topics`` (name -> the setting that names it, see
    ``topics.topic_settings``) exists. Missing ones are looked for again every half second for
    ``wait_s`` (0: once); then one :class:`ConfigError` names them, the setting of the first,
    and what to do. Without it a client logs each missing topic at every metadata refresh,
    then fails with a bare UnknownTopicOrPartitionError (a consumer) or a timeout (a producer,
    after 40 s)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    async with _admin_client(kafka) as admin:
        while True:
            existing = set(await admin.list_topics())
            missing = [name for name in topics if name not in existing]
            if not missing:
                return
            if loop.time() >= deadline:
                break
            log.debug("topics %s missing; looking again until %.1fs have passed", missing, wait_s)
            await asyncio.sleep(min(_TOPICS_POLL_S, max(0.0, deadline - loop.time())))
    which = f"topic {missing[0]} does" if len(missing) == 1 else f"topics {', '.join(missing)} do"
    waited = f" (waited {wait_s:g}s)" if wait_s > 0 else ""
    setting = topics[missing[0]]
    check = "the prefix" if setting == "topic_prefix" else "the name"
    raise ConfigError(
        setting,
        f"{which} not exist at {as_connection(kafka).bootstrap_servers}{waited}; "
        f"create the topics with `embedstream topics create` (or check {check})",
    )


async def list_topics(kafka: KafkaTarget, prefix: str) -> list[str]:
    async with _admin_client(kafka) as admin:
        names = await admin.list_topics()
    return sorted(str(name) for name in names if str(name).startswith(prefix))


async def delete_topics(kafka: KafkaTarget, names: Sequence[str]) -> None:
    """Deletes the named topics (test cleanup, tear-down); absent ones are ignored."""
    async with _admin_client(kafka) as admin:
        existing = set(await admin.list_topics())
        doomed = [name for name in names if name in existing]
        if not doomed:
            return
        response = await admin.delete_topics(doomed)
    for result in response.to_object()["topic_error_codes"]:
        code = int(result["error_code"])
        # Deleted concurrently by someone else: the goal is reached anyway.
        if code not in (0, UnknownTopicOrPartitionError.errno):
            raise for_code(code)(f"deleting topic {result['topic']}")


async def describe_topics(kafka: KafkaTarget, specs: Sequence[TopicSpec]) -> list[TopicDescription]:
    """Describes the declared topics that exist, in spec order; missing ones are left out."""
    async with _admin_client(kafka) as admin:
        # Describing only existing topics: a metadata request for a missing topic
        # would create it on a broker with auto.create.topics.enable=true.
        existing = set(await admin.list_topics())
        names = [spec.name for spec in specs if spec.name in existing]
        if not names:
            return []
        metadata = await admin.describe_topics(names)
        config_responses = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, name) for name in names]
        )
    partitions = {str(topic["topic"]): _checked_partitions(topic) for topic in metadata}
    configs = _configs_by_topic(config_responses)
    return [
        TopicDescription(
            name=name,
            partitions=len(partitions[name]),
            replication_factor=min((len(p["replicas"]) for p in partitions[name]), default=0),
            configs=configs.get(name, {}),
        )
        for name in names
    ]


def _checked_partitions(topic: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    code = int(topic["error_code"])
    if code != 0:
        raise for_code(code)(f"describing topic {topic['topic']}")
    return list(topic["partitions"])


def _configs_by_topic(responses: Sequence[Any]) -> dict[str, dict[str, str]]:
    by_topic: dict[str, dict[str, str]] = {}
    for response in responses:
        for resource in response.to_object()["resources"]:
            code = int(resource["error_code"])
            if code != 0:
                raise for_code(code)(
                    f"describing configs of {resource['resource_name']}: "
                    f"{resource['error_message']}"
                )
            by_topic[str(resource["resource_name"])] = {
                str(entry["config_names"]): str(entry["config_value"])
                for entry in resource["config_entries"]
                if entry["config_value"] is not None
            }
    return by_topic


def describe_drift(spec: TopicSpec, description: TopicDescription | None) -> list[str]:
    """How the broker's topic differs from its declaration; empty when it matches."""
    if description is None:
        return ["missing"]
    drift = []
    if description.partitions != spec.partitions:
        drift.append(f"partitions {description.partitions} (declared {spec.partitions})")
    if description.replication_factor != spec.replication_factor:
        drift.append(
            f"replication {description.replication_factor} (declared {spec.replication_factor})"
        )
    for name, declared in sorted(spec.configs.items()):
        actual = description.configs.get(name)
        if actual != declared:
            drift.append(f"{name}={actual} (declared {declared})")
    return drift


def format_description(specs: Sequence[TopicSpec], descriptions: Sequence[TopicDescription]) -> str:
    """A plain-text table, one row per declared topic, with drift in the STATUS column."""
    by_name = {description.name: description for description in descriptions}
    rows = [("TOPIC", "PARTITIONS", "RF", "CONFIGS", "STATUS")]
    for spec in specs:
        description = by_name.get(spec.name)
        drift = describe_drift(spec, description)
        status = "; ".join(drift) if drift else "ok"
        if description is None:
            rows.append((spec.name, "-", "-", "-", status))
            continue
        declared_configs = " ".join(
            f"{name}={description.configs.get(name)}" for name in sorted(spec.configs)
        )
        rows.append(
            (
                spec.name,
                str(description.partitions),
                str(description.replication_factor),
                declared_configs,
                status,
            )
        )
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )
