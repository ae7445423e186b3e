"""The doc_ids the documents topic holds now: what ``migrate status`` compares a new
generation's lacking documents with. The topic is read once from its beginning to its ends
(:mod:`embedstream.kafka.client.reader`: no consumer group, nothing committed), the broker first
checked within ``connect_timeout_s``, so an unreachable one costs that and no more."""

from __future__ import annotations

import asyncio

from aiokafka.errors import KafkaError

from embedstream.core.backfill_source import HeldDocuments
from embedstream.kafka.client.clients import connection_for
from embedstream.kafka.client.preflight import check_connection
from embedstream.kafka.client.reader import ReadError, read_topic
from embedstream.settings import Settings

READ_TIMEOUT_S = 300.0  # the whole topic, values and all: a large corpus takes a while


async def documents_on_topic(
    settings: Settings, topic: str, *, read_timeout_s: float = READ_TIMEOUT_S
) -> set[str]:
    """The doc_ids ``topic`` holds (latest record per key, tombstones applied). Raises
    :class:`~embedstream.errors.ConfigError` when no broker answers within
    ``connect_timeout_s``, :class:`ReadError` when the topic cannot be read to its end."""
    connection = connection_for(settings)
    client_id = f"{settings.client_id}-migrate"
    await check_connection(connection, timeout_s=settings.connect_timeout_s, client_id=client_id)
    held = HeldDocuments()
    try:
        async with asyncio.timeout(read_timeout_s + settings.connect_timeout_s):
            async for record in read_topic(
                connection, topic, timeout_s=read_timeout_s, client_id=client_id
            ):
                held.read(record.key, record.value is not None)
    except TimeoutError as exc:
        raise ReadError(f"could not read {topic} to its end within {read_timeout_s:g}s") from exc
    except (KafkaError, OSError) as exc:
        raise ReadError(f"reading {topic}: {type(exc).__name__}: {exc}") from exc
    return held.ids
